"""Trained models as MLflow models, registered as `rulerag-<dataset>-<kind>-<variant>`.

Why MLflow models rather than plain artifact folders: a user finds "the RGFT generator for
ICEWS14" in the Model Registry, with the run (and its metrics) that made it, and loads it with
MLflow's own loaders instead of learning this project's folder layout:

* query encoders (`train_retriever`) use MLflow's sentence-transformers flavour:
  `mlflow.sentence_transformers.load_model("models:/rulerag-icews14-retriever-minilm-rgft/1")`
  is the fine-tuned `SentenceTransformer` (the document encoder is the untuned base model and
  the corpus index is `index`'s, as in the pipeline);
* generator adapters (`train_generator`) are a pyfunc that loads the base model and the LoRA
  adapter (`rulerag.generation.adapter_model.AdapterGenerator`):
  `mlflow.pyfunc.load_model(uri).predict([prompt, ...])` returns the raw generations (the
  model is declared from code, `rulerag/tracking/generator_model.py`, not pickled). MLflow's
  transformers flavour would record the base model by hub name only, which fails for the
  offline models this project ships; the pyfunc takes the base named in the adapter's
  train_stats.json, or `model_config={"base_model": <id or folder>}` to point
  it at another copy. Its code (`rulerag/`) travels with the model (`code_paths`), so loading
  needs MLflow, torch, transformers and peft, not this project's checkout.

`models:/` URIs resolve through a tracking server: the project's store keeps proxied artifact
locations (`rulerag.tracking.config`), so with `make mlflow-ui` running and
`MLFLOW_TRACKING_URI=http://127.0.0.1:5000` the loaders above work wherever the project now
lives, and `models:/<name>@champion` names the best version so far (`rulerag.tracking.models`).
Without a server, `local_artifact_path(client.get_model_version_download_uri(name, version),
project)` (rulerag.tracking) is the model's folder, which the same loaders take.

The save functions write an MLflow model folder; `StageRun.log_model` (rulerag.tracking) keeps
it, and when the run is sent it becomes the run's MLflow 3 logged model and a registered
version (`rulerag.tracking.models`). Only the two training stages import this
module (`rulerag.tracking` does not), so a change here reruns only them under DVC.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "installed_pins",
    "registered_name",
    "served_name",
    "save_encoder_model",
    "save_generator_model",
]

#: every registered model of this project starts with it
REGISTRY_PREFIX = "rulerag"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
#: the `rulerag` package: it travels with a generator model as its code
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: the models-from-code file that declares a generator model
_GENERATOR_MODEL_CODE = Path(__file__).resolve().with_name("generator_model.py")


def registered_name(dataset: str, kind: str, variant: str) -> str:
    """`rulerag-icews14-generator-rgft`, `rulerag-icews14-retriever-minilm-rgft`: one name per
    dataset and trained variant, so each training run adds a version to the same model."""
    parts = [REGISTRY_PREFIX, dataset, kind, variant]
    return "-".join(_UNSAFE.sub("_", part).strip("_") or "_" for part in parts)


def served_name(dataset: str) -> str:
    """`rulerag-icews14`: the whole trained RuleRAG path of a dataset (`package_model`), the
    model a user serves (`make serve`, `mlflow models serve -m models:/rulerag-icews14@champion`).
    """
    return f"{REGISTRY_PREFIX}-{_UNSAFE.sub('_', dataset).strip('_') or '_'}"


def installed_pins(*distributions: str) -> list[str]:
    """`name==version` of the installed distributions: the model's pip requirements, stated
    rather than inferred (MLflow's inference loads the model in a subprocess: slow)."""
    pins = []
    for name in distributions:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def save_encoder_model(model: Any, path: Path) -> None:
    """A fine-tuned `SentenceTransformer` as an MLflow sentence-transformers model at `path`."""
    import mlflow.sentence_transformers

    mlflow.sentence_transformers.save_model(
        model,
        str(path),
        pip_requirements=installed_pins("mlflow", "sentence-transformers", "transformers", "torch"),
    )


#: what a user may set when loading a registered generator (`AdapterGenerator`); None = from the
#: adapter's train_stats.json (base model) or no limit (prompt tokens)
GENERATOR_CONFIG: dict[str, Any] = {
    "base_model": None,
    "max_new_tokens": 16,
    "max_prompt_tokens": None,
    "batch_size": 8,
}


def save_generator_model(adapter: Path, path: Path) -> None:
    """A LoRA adapter folder (with its train_stats.json) as an `AdapterGenerator` pyfunc
    (`rulerag.generation.adapter_model`), declared from code."""
    import mlflow.pyfunc

    mlflow.pyfunc.save_model(
        str(path),
        python_model=str(_GENERATOR_MODEL_CODE),
        artifacts={"adapter": str(adapter)},
        # declared here so that `load_model(..., model_config=...)` may override them (MLflow
        # ignores load-time keys a model was not saved with)
        model_config=dict(GENERATOR_CONFIG),
        code_paths=[str(_PACKAGE_DIR)],
        pip_requirements=installed_pins("mlflow", "torch", "transformers", "peft", "pandas"),
    )
