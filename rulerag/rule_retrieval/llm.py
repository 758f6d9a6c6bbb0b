"""The LLM of SIAR and R³, behind the disk cache of `rulerag.generation.answer_cache`.

SIAR and R³ prompt an LLM once or twice per query; on a CPU a rerun of the evaluation with an
unchanged model must not pay that again (`CachedLLM`: an SQLite prompt -> answer cache, stored
after each batch, so a killed run resumes where it stopped). Generators: the project's local
Hugging Face generator and the OpenAI-compatible API one (`make_generator`), or anything with
`name` and `generate(prompts) -> list[str]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rulerag.generation.answer_cache import CachedLLM, TextGenerator
from rulerag.generation.settings import ApiSettings
from rulerag.rule_retrieval.settings import LLMSettings

__all__ = ["CachedLLM", "LLMPool", "TextGenerator", "make_generator"]


def make_generator(
    llm: LLMSettings, api: ApiSettings | None = None, *, cache_dir: Path | None = None
) -> TextGenerator:
    """`llm.kind` `local`: the project's Hugging Face generator for `llm.model` (alias, path or
    hub id; one line per prompt, greedy; `cache_dir`: where the weights are kept); `api`: the
    OpenAI-compatible chat API serving `llm.model` at `api`'s endpoint (the `generation.api`
    settings: base URL, key variables or Airflow connection, deadline, retries). Its answer
    budget starts at `llm.max_new_tokens` (`LLMPool` sets each purpose's before each call)."""
    if llm.kind == "local":
        from rulerag.generation.local import LocalGenerator

        return LocalGenerator.from_pretrained(
            llm.model,
            cache_dir=cache_dir,
            dtype=llm.dtype,
            quantization=llm.quantization,
            max_new_tokens=llm.max_new_tokens,
            batch_size=llm.batch_size,
            stop_at_newline=True,
        )
    if llm.kind == "api":
        from rulerag.generation.api import ApiGenerator

        if api is None:
            raise ValueError("an API LLM needs the generation.api settings (its endpoint)")
        # the endpoint is generation.api's, the model rule_retrieval.llm's
        return ApiGenerator(replace(api, model=llm.model), max_tokens=llm.max_new_tokens)
    raise ValueError(f"LLM kind must be 'local' or 'api', not {llm.kind!r}")


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
        self,
        settings: LLMSettings,
        cache_path: Path | None,
        *,
        model_cache: Path | None,
        api: ApiSettings | None,
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
                self._generator = make_generator(spec, self.api, cache_dir=self.model_cache)
            stop = "line" if one_line else "budget"
            identity = f"{spec.kind}:{spec.model}:max_new_tokens={tokens}:stop={stop}"
            if spec.kind == "api":  # another server or decoding is another answer
                identity = f"{self._generator.cache_identity(max_tokens=tokens)}:stop={stop}"
            self._llms[purpose] = CachedLLM(
                _Budget(self._generator, tokens, one_line),
                self.cache_path,
                identity=identity,
                batch_size=spec.batch_size,
            )
        return self._llms[purpose]

    @property
    def calls(self) -> int:
        return sum(llm.calls for llm in self._llms.values())
