"""The generation section of params.yaml: profiles and the Table 2 grid.

* Profiles: the section's own values are the default (CPU) profile; `profiles.<name>` holds
  overrides merged over them, deeply, when `profile: <name>` is chosen, so
  `dvc exp run -S generation.profile=paper` switches every knob of the paper-scale run at once.
* Grid: each row of the paper's Table 2 is a named configuration saying which retrieval run
  feeds it, which generator answers (the base model, an adapter trained by `train_generator`,
  or the API) and which prompt it reads.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rulerag.generation.prompts import PROMPT_KINDS

__all__ = [
    "GENERATOR_KINDS",
    "GridConfig",
    "apply_profile",
    "deep_merge",
    "grid_config",
    "retrieval_name",
]

#: base: the model as it is (ICL); api: the chat API with k-shot examples; any other name is a
#: variant trained by `train_generator` (rgft, ssft).
GENERATOR_KINDS = ("base", "api")


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` merged in; nested mappings merge, anything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_profile(section: Mapping[str, Any]) -> dict[str, Any]:
    """The effective settings: the section without `profiles`, with the chosen profile's
    overrides merged in. An unknown profile name fails, listing the known ones."""
    section = dict(section or {})
    profiles = section.pop("profiles", None) or {}
    name = section.get("profile") or "cpu"
    if name not in profiles and name != "cpu":
        raise ValueError(f"generation.profile {name!r} is not one of {sorted(profiles)}")
    return deep_merge(section, profiles.get(name) or {})


@dataclass(frozen=True)
class GridConfig:
    """One row of Table 2."""

    name: str
    retrieval: str | None  # retrieval config folder, None: no retrieval (Standard Prompting)
    generator: str  # base | api | a trained variant (rgft, ssft)
    prompt: str  # rule | plain | query
    rules: str = "all"  # which rows of the run to unite: all | query_only | rules_only

    @property
    def trained(self) -> bool:
        return self.generator not in GENERATOR_KINDS


def grid_config(name: str, grid: Mapping[str, Any]) -> GridConfig:
    """The named configuration from params' grid, checked."""
    if name not in grid:
        raise ValueError(f"configuration {name!r} is not in generation.grid ({sorted(grid)})")
    spec = dict(grid[name] or {})
    config = GridConfig(
        name=name,
        retrieval=spec.get("retrieval") or None,
        generator=str(spec.get("generator", "base")),
        prompt=str(spec.get("prompt", "rule")),
        rules=str(spec.get("rules", "all")),
    )
    if config.prompt not in PROMPT_KINDS:
        raise ValueError(f"{name}: prompt must be one of {PROMPT_KINDS}, not {config.prompt!r}")
    if config.retrieval is None and config.prompt != "query":
        raise ValueError(f"{name}: a configuration without retrieval must use prompt 'query'")
    return config


def retrieval_name(value: str, retriever: str) -> str:
    """The retrieval configuration folder a grid entry reads.

    Retrieval configurations are named `<index>-<mode>` (`minilm-rg`, `bm25-standard`); a grid
    entry may give the full name, or just the mode (`standard`, `rg`, `ssft`, `rgft`), which is
    then paired with `generation.retriever`, so one knob moves the whole grid to another
    retriever.
    """
    return value if "-" in value else f"{retriever}-{value}"
