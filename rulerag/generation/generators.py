"""Which generator answers a grid row, built from the settings and the stage outputs.

* `base`: the model as it is (`generation.model`), batched greedy decoding (`local.py`);
* a trained variant (`rgft`, `ssft`): the same model with the LoRA adapter `train_generator`
  wrote to `generation/adapters/<variant>/` (`DataLayout.adapter`), checked against what it
  was trained with (base model, chat template, prompt style), so it is never prompted
  differently from its training;
* `api`: an OpenAI-compatible chat endpoint with the paper's fixed F_G examples as a k-shot
  prompt (`api.py`), behind the dataset's answer cache (`DataLayout.api_answer_cache`,
  `answer_cache.CachedGenerator`): a rerun sends no request it has sent before and a run
  stopped half way (a server gone) resumes from the answers it had;
* `symbolic` is not built here: it needs no model (`grid.run_row` answers it, `symbolic.py`).

Nothing here imports torch at module level: `passive_openmp` must run before it is loaded.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rulerag.generation.prompts import PromptFormat
from rulerag.generation.samples import fg_examples
from rulerag.generation.settings import GenerationSettings, GridConfig
from rulerag.layout import DataLayout

__all__ = [
    "api_examples",
    "check_chat_template",
    "check_trained_with",
    "make_generator",
    "passive_openmp",
]


def passive_openmp() -> None:
    """Make OpenMP threads sleep rather than spin while they wait, before torch loads.

    With the default (spinning) policy, a CPU shared with any other busy process slows small
    operations such as a decoding step by 10-25x (measured with benchmarks/bench_generation.py
    on 2 cores: 24 query-only prompts took 79 s, 7 s with this). Only effective before torch
    is first imported; a value set by the user wins.
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def api_examples(
    base: Path, grid: GridConfig, settings: GenerationSettings, retrieval: str | None
) -> list[tuple[str, str]]:
    """The paper's fixed k-shot demonstrations for closed models: the first `api.shots` F_G
    queries of a seeded sample, rendered with the row's own prompt and documents from its
    retriever's F_G run (none when that run is missing), with their first answer."""
    if settings.api.shots <= 0:
        return []
    has_run = retrieval and DataLayout(Path(base)).run(retrieval, "f_g").is_file()
    return fg_examples(
        base,
        settings.api.shots,
        retrieval if has_run else None,
        grid.prompt,
        grid.rules,
        settings,
    )


def make_generator(
    base: Path,
    grid: GridConfig,
    settings: GenerationSettings,
    retrieval: str | None,
    adapter: Path | None = None,
    *,
    cached: bool = True,
) -> Any:
    """The row's generator (see the module docstring); `adapter` replaces a trained row's
    own adapter folder (e.g. one trained on another rule bank). `cached=False`: an API row's
    generator itself, without the answer cache (a chain samples the same prompt n times)."""
    prompt_format = PromptFormat(settings.prompt_style)
    if grid.generator == "symbolic":
        raise ValueError("the symbolic row is answered by rulerag.generation.grid (no model)")
    if grid.generator == "api":
        from rulerag.generation.api import ApiGenerator

        api = settings.api
        generator = ApiGenerator(
            api,
            examples=api_examples(base, grid, settings, retrieval),
            prompt_format=prompt_format,
            max_tokens=settings.max_new_tokens,
        )
        if not cached:
            return generator
        from rulerag.generation.answer_cache import CachedGenerator

        return CachedGenerator(
            generator,
            DataLayout(Path(base)).api_answer_cache,
            identity=generator.cache_identity(),
            batch_size=max(8, 2 * api.concurrency),  # stored after each batch
        )
    from rulerag.generation.local import LocalGenerator

    trained: dict[str, Any] = {}
    if not grid.trained:
        adapter = None
    else:
        adapter = adapter or DataLayout(Path(base)).adapter(grid.generator)
        if not (adapter / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{adapter}: run train_generator for {grid.generator}")
        trained = json.loads((adapter / "train_stats.json").read_text(encoding="utf-8"))
        check_trained_with(
            adapter,
            trained,
            model=settings.model,
            prompt_style=prompt_format.style,
            stage="train_generator",
        )
    generator = LocalGenerator.from_pretrained(
        settings.model,
        adapter=adapter,
        quantization=settings.quantization,
        dtype=settings.dtype,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.batch_size,
        chat_template=settings.chat_template,
        max_prompt_tokens=settings.max_prompt_tokens,
    )
    if adapter is not None:
        check_chat_template(adapter, trained, generator.chat_template)
    return generator


def check_trained_with(
    folder: Path, trained: Mapping[str, Any], *, model: str, prompt_style: str, stage: str
) -> None:
    """A trained folder (a LoRA adapter, an R²-Former) is used only with the base model and
    prompt style it was trained with (`trained`: what its stage recorded)."""
    if trained.get("base_model") != model:
        raise ValueError(
            f"{folder} was trained on {trained.get('base_model')!r}, not on "
            f"generation.model {model!r}: run {stage} again"
        )
    if trained.get("prompt_style", "legacy") != prompt_style:
        raise ValueError(
            f"{folder} was trained with prompt_style {trained.get('prompt_style')!r}, "
            f"generation would prompt it with {prompt_style!r}: run {stage}"
        )


def check_chat_template(folder: Path, trained: Mapping[str, Any], chat_template: bool) -> None:
    """... and with the chat template it was trained with (the prompts would differ)."""
    if trained.get("chat_template") != chat_template:
        raise ValueError(
            f"{folder} was trained with chat_template={trained.get('chat_template')}, "
            f"generation would use {chat_template}: the prompts would differ"
        )
