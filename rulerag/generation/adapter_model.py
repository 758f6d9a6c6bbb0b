"""The registered generator: a base causal LM and a LoRA adapter as one MLflow pyfunc model.

`rulerag.tracking.registry.save_generator_model` saves it (declared from code by
`rulerag/tracking/generator_model.py`); `mlflow.pyfunc.load_model("models:/rulerag-<dataset>-
generator-<variant>/<version>")` loads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow.pyfunc

from rulerag.generation.local import LocalGenerator
from rulerag.generation.training import TRAIN_STATS_FILE


class AdapterGenerator(mlflow.pyfunc.PythonModel):
    """Base causal LM + the LoRA adapter beside it: prompts in, raw generations out.

    The prompts are what the pipeline renders (`rulerag.generation.prompts`, the adapter's
    prompt style is in its train_stats.json); generation is greedy and stops at a newline, as
    in the grid. `model_config` may set `base_model` (another copy or hub id of the same base),
    `max_new_tokens`, `max_prompt_tokens` (prompts cut from the left, as the grid's
    `generation.max_prompt_tokens`) and `batch_size`.
    """

    def load_context(self, context: Any) -> None:
        adapter = Path(context.artifacts["adapter"])
        stats = json.loads((adapter / TRAIN_STATS_FILE).read_text(encoding="utf-8"))
        config = dict(context.model_config or {})
        trained = stats.get("settings") or {}
        self._generator = LocalGenerator.from_pretrained(
            config.get("base_model") or stats["base_model"],
            adapter=adapter,
            quantization=trained.get("quantization"),
            max_new_tokens=int(config.get("max_new_tokens") or 16),
            batch_size=int(config.get("batch_size") or 8),
            max_prompt_tokens=config.get("max_prompt_tokens"),
            chat_template=stats.get("chat_template", "auto"),
        )

    def predict(
        self, context: Any, model_input: list[str], params: dict | None = None
    ) -> list[str]:
        return self._generator.generate(list(model_input))
