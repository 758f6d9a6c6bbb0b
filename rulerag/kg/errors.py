"""Errors that name the offending file and line, so bad input is fixed at its source."""

from __future__ import annotations

from pathlib import Path

from rulerag.errors import InputError


class KGFormatError(InputError):
    """A KG source file cannot be read as its format says; names the file and (1-based) line."""

    def __init__(self, path: Path | str, message: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")


class UnknownDatasetError(InputError, KeyError):
    """A dataset name that is neither in the registry nor in params.yaml `ingest.custom`."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class DatasetNotFoundError(InputError, FileNotFoundError):
    """A dataset is neither in the local mirror nor downloadable; says everywhere it looked."""
