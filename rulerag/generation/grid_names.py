"""A grid row and the retrieval run it reads, by name: `grid_config` (a `generation.grid` row,
checked) and `retrieval_name` (a row's or a variant's retrieval as a configuration name)."""

from __future__ import annotations

from rulerag.generation.settings import GenerationSettings, GridConfig

__all__ = ["grid_config", "retrieval_name"]


def grid_config(name: str, settings: GenerationSettings) -> GridConfig:
    """The named configuration of the grid, checked."""
    if name not in settings.grid:
        raise ValueError(
            f"configuration {name!r} is not in generation.grid ({sorted(settings.grid)})"
        )
    config = settings.grid[name]
    if config.retrieval is None and config.prompt != "query" and config.method is None:
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
