"""Where `load_causal_lm` puts a model: on this process's GPU whenever CUDA is there (the
generator and R²AG run wherever the model is), on the CPU otherwise. `from_pretrained` is
recorded, not run: the placement is what it is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rulerag.generation import models


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import transformers

    calls: list[dict[str, Any]] = []

    def from_pretrained(path: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return "model"

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(models, "resolve_model", lambda name, cache_dir=None: Path(name))
    monkeypatch.setattr(models, "trusts_remote_code", lambda name: False)
    return calls


@pytest.mark.parametrize("quantization", [None, "nf4"])
@pytest.mark.parametrize(("local_rank", "gpu"), [(None, 0), ("1", 1)])
def test_under_cuda_the_model_goes_to_this_process_gpu(
    asked: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    quantization: str | None,
    local_rank: str | None,
    gpu: int,
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    models.load_causal_lm("base", quantization=quantization, dtype="bfloat16")
    assert asked[-1]["device_map"] == {"": gpu}


def test_without_cuda_a_full_precision_model_is_left_where_transformers_loads_it(
    asked: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    models.load_causal_lm("base")
    assert "device_map" not in asked[-1]
    models.load_causal_lm("base", quantization="nf4")
    assert asked[-1]["device_map"] == {"": "cpu"}


def test_a_given_device_map_wins(
    asked: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    models.load_causal_lm("base", device_map="auto")
    assert asked[-1]["device_map"] == "auto"
