"""What runs, tags and keys are called in MLflow, and the limits MLflow puts on them.

One naming scheme for every stage: one experiment per dataset (`rulerag/<dataset>`), run name
`<stage>@<dataset>` (or the stage instance), metric names MLflow accepts (`recall@10` ->
`recall_at_10`), params flattened with the same dotted keys `dvc exp run -S section.key=value`
uses. Pure functions: importing this module is cheap and talks to nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rulerag.redact import redact_url

__all__ = [
    "EXPERIMENT_KIND",
    "MAX_KEY_LENGTH",
    "MAX_PARAM_VALUE_LENGTH",
    "MAX_TAG_VALUE_LENGTH",
    "PARAM_LIKE_METRICS",
    "METRICS_PER_BATCH",
    "PARAMS_TAGS_PER_BATCH",
    "TAG_DATASET",
    "TAG_ERROR",
    "TAG_EXPERIMENT_KIND",
    "TAG_GIT_COMMIT",
    "TAG_PIPELINE_RUN",
    "TAG_REGISTRY_ERROR",
    "TAG_REPLAYED_FROM",
    "TAG_STAGE",
    "TAG_STAGE_INSTANCE",
    "TAG_USER",
    "TAG_NOTE",
    "TAG_PARENT_RUN",
    "TAG_RUN_KIND",
    "TAG_SOURCE_NAME",
    "TAG_SOURCE_TYPE",
    "display_name",
    "experiment_name",
    "flatten_params",
    "is_param_like",
    "fs_safe",
    "sanitize_name",
    "truncate",
]

TAG_PIPELINE_RUN = "rulerag.pipeline_run"
TAG_STAGE = "rulerag.stage"
TAG_DATASET = "rulerag.dataset"
TAG_STAGE_INSTANCE = "rulerag.stage_instance"
TAG_ERROR = "rulerag.error"
TAG_REPLAYED_FROM = "rulerag.replayed_from"
TAG_REGISTRY_ERROR = "rulerag.registry_error"
#: MLflow's own tag names, so the UI shows the commit and the user.
TAG_GIT_COMMIT = "mlflow.source.git.commit"
TAG_USER = "mlflow.user"
#: MLflow nests a run under the run this tag names (the pipeline run's parent, `parent`)
TAG_PARENT_RUN = "mlflow.parentRunId"
#: the run's description in MLflow's UI (Markdown): links back to Airflow (`links`)
TAG_NOTE = "mlflow.note.content"
#: what ran: the stage's module (`python -m pipeline_steps.<stage>`) and its kind (LOCAL, JOB)
TAG_SOURCE_NAME = "mlflow.source.name"
TAG_SOURCE_TYPE = "mlflow.source.type"
#: `pipeline` on the parent run of a pipeline run (stage runs carry `rulerag.stage` instead)
TAG_RUN_KIND = "rulerag.run_kind"
#: MLflow 3 opens an experiment on the view its kind names; without the tag it guesses the
#: GenAI "Overview" (traces), which is empty here: every experiment is a model-development one
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

# MLflow's limits (mlflow.utils.validation), copied so that importing this module stays cheap;
# a unit test checks they still match the installed MLflow.
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_KEY_LENGTH = 250
PARAMS_TAGS_PER_BATCH = 100
METRICS_PER_BATCH = 1000

#: what stages report beside their scores that describes the run rather than measures it: the
#: number of queries it evaluated, a seed. Logged as params, not metrics: MLflow's compare and
#: chart views start on the alphabetically first metric, which was `queries` for every
#: retrieval run, and a seed is no measurement
PARAM_LIKE_METRICS = ("queries", "seed")

_ILLEGAL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-/]")
_ILLEGAL_PATH_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def experiment_name(dataset: str) -> str:
    """The experiment a dataset's runs go to: one per dataset, so runs compare like with like."""
    return f"rulerag/{dataset}"


def display_name(instance: str) -> str:
    """The run name MLflow's runs table shows for a stage instance, its distinctive part first.

    `generate@icews14-rulerag_ft` -> `rulerag_ft (generate)`, `train_retriever@icews14-minilm-
    rgft` -> `minilm-rgft (train_retriever)`, `ingest@icews14` -> `ingest`: the table cuts
    names to about 15 characters at its default width (nine `generate@icews14-ruler...` rows
    looked alike), and the dataset is the experiment's (`rulerag/<dataset>`). The grid's
    ablation rows shorten `retriever` and `generator` to `ret` and `gen`
    (`ssft_ret_rgft_gen (generate)`): `ssft_retriever_s...` and `ssft_retriever_r...` could not
    be told apart. The full instance stays in the tag `rulerag.stage_instance`.
    """
    stage, at, rest = instance.partition("@")
    if not at:
        return instance
    _dataset, dash, items = rest.partition("-")
    if not (dash and items):
        return stage
    short = re.sub(r"(?<![A-Za-z])(retriever|generator)(?![A-Za-z])",
                   lambda m: m[1][:3], items)  # fmt: skip
    return f"{short} ({stage})"


def is_param_like(key: str) -> bool:
    """Whether a reported number is one of `PARAM_LIKE_METRICS` (also under a prefix:
    `rulerag_icl.queries`, `splits_queries`)."""
    return any(key == name or key.endswith((f".{name}", f"_{name}")) for name in PARAM_LIKE_METRICS)


def sanitize_name(name: str) -> str:
    """Turn `name` into a key MLflow accepts for a metric, param or tag.

    `@` becomes `_at_` (`recall@10` -> `recall_at_10`, as docs/layout.md names metrics); any other
    character outside letters, digits, `_ . - /` becomes `_` (MLflow also allows spaces and, off
    Windows, colons; both are replaced so names stay portable and shell-friendly). MLflow treats
    names as file paths, so empty, `.` and `..` segments and a leading `/` are removed too, and
    the result is cut to MLflow's 250-character key limit. Done at logging time so that a bad
    name can never make the whole run fail to log (and be spooled forever).
    """
    text = _ILLEGAL_NAME_CHARS.sub("_", str(name).replace("@", "_at_"))[:MAX_KEY_LENGTH]
    parts = ["_" * len(part) if part in {".", ".."} else part for part in text.split("/") if part]
    return "/".join(parts) or "_"


def fs_safe(text: str) -> str:
    """`text` as one file-name segment (spool folders, artifact folders of experiments)."""
    return _ILLEGAL_PATH_CHARS.sub("_", text).strip(".") or "_"


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the cut marked with `...`."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _stringify(value: Any) -> str:
    """A param value as text: strings as they are, anything else as JSON (`true`, `null`,
    `["icews14"]`, `{}`), which reads the same as params.yaml and parses back."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten nested params (as read from params.yaml) into MLflow params.

    `{"ingest": {"duplicates": "drop", "source": {}}}` -> `{"ingest.duplicates": "drop",
    "ingest.source": "{}"}`: dotted keys are the ones `dvc exp run -S` and the Airflow conf take,
    so a run's params can be copied back into an experiment. Values are stringified and cut to
    MLflow's 6000-character limit (MLflow would otherwise reject the whole batch). An empty
    mapping is kept as `{}` so that "no overrides" is still visible.
    """
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, prefix=f"{name}."))
        else:
            # a URL with credentials (an API base URL, a store) must not reach the store
            value = redact_url(_stringify(value))
            flat[sanitize_name(name)] = truncate(value, MAX_PARAM_VALUE_LENGTH)
    return flat
