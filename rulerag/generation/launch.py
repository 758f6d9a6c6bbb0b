"""Several GPUs for one training stage, with the stage's command unchanged.

`dvc repro` (and each Airflow task) starts `python -m pipeline_steps.train_generator ...` as one
process. On a worker with more than one visible GPU that process starts the same command
under torchrun, one process per GPU (`launch_command`), waits for it and exits with its
status; the Trainer then runs data-parallel (DDP, or ZeRO when `generation.train.deepspeed`
names a config). Only the main process (rank 0) writes outputs and the MLflow run. `gpus`
(params' `generation.train.gpus`): `auto` = every visible GPU, or a number (1 = no launch).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

__all__ = ["is_main_process", "launch_command", "processes_for", "relaunch_on_gpus"]

#: set in the processes a launcher started (torchrun, deepspeed, accelerate)
LAUNCHED_ENV = ("WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE")


def visible_gpus() -> int:
    """CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def processes_for(gpus: int | str, visible: int) -> int:
    """How many training processes: `auto` = one per visible GPU (at least one), a number =
    that many, never more than the GPUs visible (one without a GPU)."""
    if isinstance(gpus, str):
        if gpus != "auto":
            raise ValueError(f"generation.train.gpus must be 'auto' or a number, not {gpus!r}")
        return max(1, visible)
    if int(gpus) < 1:
        raise ValueError(f"generation.train.gpus must be at least 1, not {gpus}")
    return max(1, min(int(gpus), visible))


def launch_command(module: str, argv: Sequence[str], processes: int) -> list[str]:
    """`python -m torch.distributed.run` (torchrun) starting `python -m module argv` once per
    process on this machine (`--standalone`: a local rendezvous on a free port)."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={processes}", "-m", module, *argv,
    ]  # fmt: skip


def relaunch_on_gpus(
    module: str,
    argv: Sequence[str],
    gpus: int | str,
    *,
    env: Mapping[str, str] | None = None,
    visible: int | None = None,
    run: Callable[[list[str]], int] | None = None,
) -> int | None:
    """Run this stage under torchrun when it should use more than one GPU and is not already
    a launched process: the launcher's exit status, else None (carry on in this process)."""
    env = os.environ if env is None else env
    if any(key in env for key in LAUNCHED_ENV):
        return None
    processes = processes_for(gpus, visible_gpus() if visible is None else visible)
    if processes < 2:
        return None
    cmd = launch_command(module, argv, processes)
    print(f"{module}: {processes} GPUs, relaunching as: {' '.join(cmd)}", flush=True)
    return (run or (lambda c: subprocess.run(c, check=False).returncode))(cmd)


def is_main_process(env: Mapping[str, str] | None = None) -> bool:
    """Rank 0 (or no launcher at all): the process that writes outputs and tracks the run."""
    env = os.environ if env is None else env
    return int(env.get("RANK", "0")) == 0
