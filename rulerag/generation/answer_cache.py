"""Any prompt -> text generator behind a disk cache, so a rerun costs no LLM call.

On a CPU, or against a paid or rate-limited API, a rerun with unchanged settings must not pay
for an answer again, and a run killed half way (a server gone, a SIGTERM) must resume where it
stopped. The cache is an SQLite file keyed by the sha256 of (the generator's identity, the
prompt); misses are deduplicated, sent in batches with a progress bar, and stored after each
batch. The identity must name everything besides the prompt that changes an answer (model,
endpoint, decoding settings, fixed examples): two identities never share an entry.

Users: SIAR and R³ (`rulerag.rule_retrieval.llm.LLMPool`, `DataLayout.rule_llm_cache`) and the
grid's `generator: api` rows (`CachedGenerator`, `DataLayout.api_answer_cache`). The files are
no stage output (DVC does not track them): deleting one only costs the requests again.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from rulerag.errors import InputError

__all__ = ["CachedGenerator", "CachedLLM", "TextGenerator"]


class TextGenerator(Protocol):
    """What CachedLLM needs from a generator."""

    name: str

    def generate(self, prompts: Sequence[str]) -> list[str]: ...


class CachedLLM:
    """`complete(prompts)`: cached generations; `calls` counts the prompts really sent."""

    def __init__(
        self,
        generator: TextGenerator,
        cache_path: Path | None,
        *,
        identity: str | None = None,
        batch_size: int = 16,
        progress: bool = True,
    ) -> None:
        self.generator = generator
        #: what makes two generations comparable: model (+ adapter) and decoding settings
        self.identity = identity or getattr(generator, "name", type(generator).__name__)
        self.batch_size = max(1, int(batch_size))
        self.progress = progress
        self.calls = 0
        self._memory: dict[str, str] = {}  # this run's answers, with or without a file
        self._db: sqlite3.Connection | None = None
        if cache_path is not None:
            Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(cache_path))
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS generations "
                "(key TEXT PRIMARY KEY, identity TEXT, prompt TEXT, output TEXT)"
            )
            self._db.commit()

    def key(self, prompt: str) -> str:
        return hashlib.sha256(f"{self.identity}\0{prompt}".encode()).hexdigest()

    def complete(self, prompts: Sequence[str], desc: str = "LLM") -> list[str]:
        """One generation per prompt, in order; only prompts not in the cache reach the model."""
        from tqdm.auto import tqdm

        keys = [self.key(p) for p in prompts]
        found = self._lookup(set(keys))
        missing: dict[str, str] = {}
        for key, prompt in zip(keys, prompts, strict=True):
            if key not in found and key not in missing:
                missing[key] = prompt
        todo = list(missing.items())
        with tqdm(total=len(todo), desc=desc, disable=not (self.progress and todo)) as bar:
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                outputs = self.generator.generate([prompt for _, prompt in batch])
                self.calls += len(batch)
                fresh = {key: out for (key, _), out in zip(batch, outputs, strict=True)}
                found.update(fresh)
                self._store([(key, missing[key], out) for key, out in fresh.items()])
                bar.update(len(batch))
        return [found[key] for key in keys]

    def _lookup(self, keys: set[str]) -> dict[str, str]:
        out = {key: self._memory[key] for key in keys if key in self._memory}
        if self._db is None or len(out) == len(keys):
            return out
        wanted = sorted(keys - out.keys())
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT key, output FROM generations WHERE key IN ({marks})", chunk
            )
            out.update(dict(rows.fetchall()))
        return out

    def _store(self, rows: list[tuple[str, str, str]]) -> None:
        self._memory.update((key, out) for key, _, out in rows)
        if self._db is None:
            return
        self._db.executemany(
            "INSERT OR REPLACE INTO generations VALUES (?, ?, ?, ?)",
            [(key, self.identity, prompt, out) for key, prompt, out in rows],
        )
        self._db.commit()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class CachedGenerator:
    """A generator whose answers go through a `CachedLLM`: what `run_row` calls for an API row
    (`name`, `generate(prompts)`), with `generator` (the wrapped one) and `calls` (the prompts
    this run really sent) beside it."""

    def __init__(
        self, generator: TextGenerator, cache_path: Path | None, *, identity: str, batch_size: int
    ) -> None:
        self.generator = generator
        self.name = generator.name
        self.cache_path = cache_path
        self.llm = CachedLLM(
            generator, cache_path, identity=identity, batch_size=batch_size, progress=False
        )

    @property
    def calls(self) -> int:
        return self.llm.calls

    def generate(self, prompts: Sequence[str]) -> list[str]:
        """The answers, from the cache or the generator. A generator that gives up (an
        `InputError` such as `ApiError`: the server is down) is re-raised with what was kept,
        so the one line a stage prints says that a rerun resumes."""
        try:
            return self.llm.complete(prompts, desc=self.name)
        except InputError as err:
            if self.cache_path is None:
                raise
            raise type(err)(
                f"{err} ({self.llm.calls} new answers of this run are kept in "
                f"{self.cache_path}: a rerun sends only the prompts still missing)"
            ) from None

    def close(self) -> None:
        self.llm.close()
