"""Any prompt -> text generator behind a disk cache, so a rerun costs no LLM call.

SIAR and R³ prompt an LLM once or twice per query; on a CPU a rerun of the evaluation with an
unchanged model must not pay that again. The cache is an SQLite file keyed by the sha256 of
(the generator's identity, the prompt); misses are deduplicated, sent in batches with a
progress bar, and stored after each batch, so a killed run resumes where it stopped.
Generators: the project's local Hugging Face generator and the OpenAI-compatible API one
(`make_generator`), or anything with `name` and `generate(prompts) -> list[str]`.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["CachedLLM", "LLMPool", "TextGenerator", "make_generator"]


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


def make_generator(
    kind: str,
    model: str,
    *,
    max_new_tokens: int,
    batch_size: int = 8,
    cache_dir: Path | None = None,
    api: Any = None,
    dtype: str | None = None,
    quantization: str | None = None,
) -> TextGenerator:
    """`local`: the project's Hugging Face generator for `model` (alias, path or hub id; one
    line per prompt, greedy); `api`: the OpenAI-compatible chat API (`api` = the
    `generation.api` settings: base URL, key variables or Airflow connection)."""
    if kind == "local":
        from rulerag.generation.local import LocalGenerator

        return LocalGenerator.from_pretrained(
            model,
            cache_dir=cache_dir,
            dtype=dtype,
            quantization=quantization,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stop_at_newline=True,
        )
    if kind == "api":
        from rulerag.generation.api import ApiGenerator

        return ApiGenerator(
            base_url=api.base_url,
            model=model,
            key_env=api.key_env,
            airflow_conn_id=api.airflow_conn_id,
            max_tokens=max_new_tokens,
            timeout=api.timeout,
            max_retries=api.max_retries,
            backoff=api.backoff,
            concurrency=api.concurrency,
        )
    raise ValueError(f"LLM kind must be 'local' or 'api', not {kind!r}")


class _Budget:
    """A generator answering with one purpose's length (the SI, or R³'s ranking) and, for a
    local model, whether decoding stops at the first line break."""

    def __init__(self, generator: Any, tokens: int, one_line: bool) -> None:
        self.generator, self.tokens, self.one_line = generator, tokens, one_line
        self.name = getattr(generator, "name", "llm")

    def generate(self, prompts: Sequence[str]) -> list[str]:
        for attr in ("max_new_tokens", "max_tokens"):  # local / API generator
            if hasattr(self.generator, attr):
                setattr(self.generator, attr, self.tokens)
        if hasattr(self.generator, "stop_at_newline"):
            self.generator.stop_at_newline = self.one_line
        return self.generator.generate(prompts)


class LLMPool:
    """One model, loaded on first use, as a cached LLM per purpose: `induce` (the
    self-induced rule, `max_new_tokens`) and `rank` (R³, `rank_max_new_tokens`).

    R³'s answer is one line (`[2] > [1] > ...`), so a local model stops at its first line
    break; the self-induced rule is not cut there, because small models often announce it on
    a line of its own ("The inferential rule is:") and write it on the next one
    (`prompts.induced_rule` takes the first line with content)."""

    #: purpose -> (settings field of its token budget, decoding stops at the first line break)
    PURPOSES = {"induce": ("max_new_tokens", False), "rank": ("rank_max_new_tokens", True)}

    def __init__(
        self, settings: Any, cache_path: Path | None, *, model_cache: Path | None, api: Any
    ) -> None:
        self.settings, self.cache_path = settings, cache_path
        self.model_cache, self.api = model_cache, api
        self._generator: Any = None
        self._llms: dict[str, CachedLLM] = {}

    def __call__(self, purpose: str) -> CachedLLM:
        spec = self.settings
        budget, one_line = self.PURPOSES[purpose]
        tokens = getattr(spec, budget)
        if purpose not in self._llms:
            if self._generator is None:
                self._generator = make_generator(
                    spec.kind, spec.model, max_new_tokens=tokens, batch_size=spec.batch_size,
                    cache_dir=self.model_cache, api=self.api, dtype=spec.dtype,
                    quantization=spec.quantization,
                )  # fmt: skip
            stop = "line" if one_line else "budget"
            self._llms[purpose] = CachedLLM(
                _Budget(self._generator, tokens, one_line),
                self.cache_path,
                identity=f"{spec.kind}:{spec.model}:max_new_tokens={tokens}:stop={stop}",
                batch_size=spec.batch_size,
            )
        return self._llms[purpose]

    @property
    def calls(self) -> int:
        return sum(llm.calls for llm in self._llms.values())
