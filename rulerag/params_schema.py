"""The one schema of params.yaml: which sections exist, the loader of each, dataset names.

Every stage loads its own section strictly (`rulerag.settings.load_settings`: unknown keys,
types and ranges) after `require_sections` checked that the file has every section (a missing
`build_benchmark` used to mean "built-in defaults", silently).
`rulerag.orchestration.params_check` checks the whole file with the same loaders, for
`make run` before DVC starts anything and for an Airflow run conf.

Dataset names become folders (data/<name>/) and arguments of DVC's shell commands, so they
are plain identifiers (`check_dataset_name`).

This module stays light (the loaders are imported by name when asked for): every stage
imports it, and DVC reruns a stage when a module it imports changes.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from rulerag.settings import SettingsError

__all__ = [
    "DATASET_NAME_RE",
    "OTHER_KEYS",
    "SECTIONS",
    "check_dataset_name",
    "require_sections",
    "section_loader",
]

#: params.yaml section -> "module:loader" of its settings (imported when needed: the generation
#: settings import more than a stage like ingest needs)
SECTIONS: dict[str, str] = {
    "ingest": "rulerag.kg.registry:ingest_settings",
    "mine_rules": "rulerag.rules.mining:mine_rules_settings",
    "build_benchmark": "rulerag.benchmark.settings:build_benchmark_settings",
    "index": "rulerag.retrieval.settings:index_settings",
    "train_retriever": "rulerag.retrieval.training:train_retriever_settings",
    "retrieve": "rulerag.retrieval.configs:retrieve_settings",
    "generation": "rulerag.generation.config:generation_settings",
    "r2ag": "rulerag.generation.r2ag.settings:r2ag_settings",
    "apply_rules": "rulerag.rules.answers:apply_rules_settings",
    "rule_retrieval": "rulerag.rule_retrieval.settings:rule_retrieval_settings",
    "qa": "rulerag.qa.settings:qa_settings",
    "generalisation": "rulerag.generalisation:generalisation_settings",
}
#: top-level keys that are not a stage's section
OTHER_KEYS = ("datasets",)


def section_loader(section: str) -> Callable[[Any], Any]:
    """The function the stages call to read `section` into its settings object."""
    module, _, name = SECTIONS[section].partition(":")
    return getattr(importlib.import_module(module), name)


def require_sections(params: Mapping[str, Any], where: str = "params.yaml") -> None:
    """Every stage section present, no unknown top-level key (cheap: loads no settings)."""
    if not isinstance(params, Mapping):
        raise SettingsError(f"{where}: expected a mapping of sections, not {type(params).__name__}")
    missing = [s for s in (*SECTIONS, *OTHER_KEYS) if s not in params]
    if missing:
        raise SettingsError(
            f"{where}: missing section {', '.join(map(repr, missing))} (every stage reads its "
            "own; the project's params.yaml shows each with its defaults)"
        )
    empty = [s for s in SECTIONS if not isinstance(params[s], Mapping)]
    if empty:
        raise SettingsError(
            f"{where}: section {', '.join(map(repr, empty))} must be a mapping of its keys "
            f"(got {', '.join(repr(params[s]) for s in empty)})"
        )
    unknown = sorted(str(k) for k in params if k not in SECTIONS and k not in OTHER_KEYS)
    if unknown:
        raise SettingsError(
            f"{where}: unknown top-level key {', '.join(map(repr, unknown))} "
            f"(known: {', '.join([*OTHER_KEYS, *SECTIONS])})"
        )


#: a dataset name: a letter, then letters, digits or underscores (at most 64)
DATASET_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def check_dataset_name(name: object) -> str:
    """`name` if it is a valid dataset name, else SettingsError saying the rule."""
    if not isinstance(name, str) or not DATASET_NAME_RE.fullmatch(name):
        raise SettingsError(
            f"invalid dataset name {str(name)[:80]!r}: a dataset name is a letter followed by "
            "letters, digits or '_' (at most 64), since it becomes data/<name>/ and an "
            "argument of DVC's commands"
        )
    return name
