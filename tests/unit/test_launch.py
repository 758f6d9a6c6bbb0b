"""Several GPUs for one training stage: when the stage relaunches itself under torchrun."""

from __future__ import annotations

import sys

import pytest

from rulerag.generation.launch import (
    is_main_process,
    launch_command,
    processes_for,
    relaunch_on_gpus,
)


def test_processes_follow_the_visible_gpus() -> None:
    assert processes_for("auto", 4) == 4
    assert processes_for("auto", 0) == 1
    assert processes_for(2, 4) == 2
    assert processes_for(8, 4) == 4  # never more than the GPUs there are
    assert processes_for(3, 0) == 1
    with pytest.raises(ValueError, match="'auto' or a number"):
        processes_for("all", 4)
    with pytest.raises(ValueError, match="at least 1"):
        processes_for(0, 4)


def test_a_multi_gpu_worker_relaunches_the_same_command() -> None:
    ran: list[list[str]] = []

    def fake(cmd: list[str]) -> int:
        ran.append(cmd)
        return 7

    argv = ["--dataset", "icews14", "--variant", "rgft"]
    got = relaunch_on_gpus("pipeline_steps.train_generator", argv, "auto", env={}, visible=4,
                           run=fake)  # fmt: skip
    assert got == 7  # the launcher's status is the stage's
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert ran == [[*torchrun, "--nproc_per_node=4", "-m", "pipeline_steps.train_generator", *argv]]
    assert launch_command("m", [], 2)[-2:] == ["-m", "m"]
    # one GPU, gpus: 1, or already a launched process: carry on in this process
    for gpus, visible, env in (("auto", 1, {}), (1, 4, {}), ("auto", 4, {"WORLD_SIZE": "4"})):
        assert relaunch_on_gpus("m", [], gpus, env=env, visible=visible, run=fake) is None
    assert len(ran) == 1


def test_only_rank_zero_is_the_main_process() -> None:
    assert is_main_process({}) and is_main_process({"RANK": "0"})
    assert not is_main_process({"RANK": "3"})
