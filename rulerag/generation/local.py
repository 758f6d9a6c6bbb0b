"""Local causal LMs through transformers: batched greedy decoding of rendered prompts.

Why it looks like this:

* Greedy decoding (`do_sample=False`), so a configuration's predictions are a function of its
  inputs and the table is reproducible run to run.
* Left padding: a decoder-only model continues from the last position of each row, so the
  padding has to be on the left for every row's prompt to end at the same column.
* Prompts are sorted by length before batching (and put back in order afterwards), so a batch
  pads to similar lengths and CPU time is not spent on padding.
* Generation stops at the end-of-sequence token, or at the first newline once an answer has
  begun (answers are one line; `max_new_tokens` bounds the rest). This is what keeps a 2-core
  CPU run of the whole grid within minutes.
* Token ids come from `prompts.prompt_token_ids`, the same function training uses.
* The prompts' common prefix (the paper's instruction) runs once: greedy batches start from a
  copy of its cache, with the padding between it and each prompt's own tokens
  (`prefix_cache`; models without SDPA or eager attention pad on the left as above).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.generation.prefix_cache import SharedPrefix, shared_prefix
from rulerag.generation.prompts import prompt_token_ids, use_chat_template

logger = logging.getLogger(__name__)

__all__ = ["GenerationStats", "LocalGenerator"]


@dataclass
class GenerationStats:
    """Throughput of the last `generate` call (for the benchmark and MLflow)."""

    prompts: int = 0
    prompt_tokens: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    batches: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def prompts_per_second(self) -> float:
        return self.prompts / self.seconds if self.seconds else 0.0

    @property
    def new_tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "prompts": self.prompts,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "seconds": round(self.seconds, 3),
            "prompts_per_second": round(self.prompts_per_second, 3),
            "new_tokens_per_second": round(self.new_tokens_per_second, 2),
        }


def _token_classes(tokenizer: Any) -> tuple[frozenset[int], frozenset[int]]:
    """(ids whose text holds a newline, ids whose text is not blank), over the vocabulary."""
    newline, text = set(), set()
    for token_id, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if token is None:
            continue
        piece = tokenizer.convert_tokens_to_string([token])
        if "\n" in piece:
            newline.add(token_id)
        if piece.strip():
            text.add(token_id)
    return frozenset(newline), frozenset(text)


class _StopAtNewline:
    """Stopping criterion: a row is done once it has produced a newline after some text.

    transformers' `StoppingCriteria` contract: called with the whole sequence so far, returns a
    bool per row; finished rows are padded from then on and the loop ends when all are done.
    """

    def __init__(self, classes: tuple[frozenset[int], frozenset[int]], prompt_length: int) -> None:
        self.newline_ids, self.text_ids = classes
        self.prompt_length = prompt_length

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = []
        for row in input_ids[:, self.prompt_length :].tolist():
            started = stop = False
            for token in row:
                if token in self.newline_ids and started:
                    stop = True
                    break
                started = started or token in self.text_ids
            done.append(stop)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class LocalGenerator:
    """A causal LM (optionally with a LoRA adapter) that turns prompts into raw generations."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 16,
        batch_size: int = 8,
        chat_template: bool | str | None = "auto",
        max_prompt_tokens: int | None = None,
        stop_at_newline: bool = True,
        name: str = "local",
        share_prefix: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = max(1, int(batch_size))
        self.chat_template = use_chat_template(tokenizer, chat_template)
        self.max_prompt_tokens = max_prompt_tokens
        self.stop_at_newline = stop_at_newline
        self.name = name
        #: greedy batches start from the cache of the prompts' common prefix (`prefix_cache`)
        self.share_prefix = share_prefix
        self.stats = GenerationStats()
        self._classes: tuple[frozenset[int], frozenset[int]] | None = None

    @classmethod
    def from_pretrained(
        cls,
        model_name: str,
        *,
        adapter: str | Path | None = None,
        cache_dir: Path | None = None,
        quantization: str | None = None,
        dtype: str | None = None,
        merge_adapter: bool = True,
        **kwargs: Any,
    ) -> LocalGenerator:
        """Load a model by alias, path or hub id, plus an optional LoRA adapter folder.

        The adapter is merged into the weights for inference (same outputs, no LoRA overhead
        per token) unless the base is 4-bit, where merging would dequantise it.
        """
        from rulerag.generation.models import load_causal_lm, load_tokenizer

        tokenizer = load_tokenizer(model_name, cache_dir, padding_side="left")
        model = load_causal_lm(model_name, cache_dir, quantization=quantization, dtype=dtype)
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter))
            if merge_adapter and quantization in (None, "", "none"):
                model = model.merge_and_unload()
        model.eval()
        kwargs.setdefault("name", str(model_name) + (f"+{Path(adapter).name}" if adapter else ""))
        return cls(model, tokenizer, **kwargs)

    def encode(self, prompt: str) -> list[int]:
        """Prompt token ids (cut from the left to `max_prompt_tokens`, keeping the query and the
        `Answer:` cue at the end, which matter most)."""
        ids = prompt_token_ids(self.tokenizer, prompt, self.chat_template)
        if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:
            ids = ids[-self.max_prompt_tokens :]
        return ids

    def generate(self, prompts: Sequence[str]) -> list[str]:
        """Raw generations (decoded new tokens, special tokens dropped), in the prompts' order."""
        return [texts[0] for texts in self._decode(prompts, self.greedy_kwargs(), 1)]

    def sample(
        self,
        prompts: Sequence[str],
        n: int,
        temperature: float,
        max_new_tokens: int | None = None,
    ) -> list[list[str]]:
        """`n` sampled generations per prompt (self-consistency); temperature 0 is greedy."""
        kwargs = self.greedy_kwargs()
        if max_new_tokens is not None:
            kwargs["max_new_tokens"] = int(max_new_tokens)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
            kwargs["num_return_sequences"] = int(n)
            return self._decode(prompts, kwargs, int(n))
        return [texts * int(n) for texts in self._decode(prompts, kwargs, 1)]

    def _decode(self, prompts: Sequence[str], kwargs: dict[str, Any], n: int) -> list[list[str]]:
        """`n` generations per prompt with `generate()` arguments `kwargs`, in prompt order."""
        import torch

        started = time.perf_counter()
        encoded = [self.encode(prompt) for prompt in prompts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        outputs: list[list[str]] = [[] for _ in encoded]
        stats = GenerationStats(prompts=len(encoded))
        device = next(self.model.parameters()).device
        prefix = shared_prefix(self.model, encoded) if self.share_prefix and n == 1 else None
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            input_ids, attention_mask, cache = self._batch([encoded[i] for i in index], prefix)
            input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
            if cache is not None:
                kwargs = {**kwargs, "past_key_values": cache}
            width = input_ids.shape[1]
            criteria = []
            if self.stop_at_newline:
                from transformers import StoppingCriteriaList

                criteria = StoppingCriteriaList([self._newline_criterion(width)])
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    stopping_criteria=criteria or None,
                    **kwargs,
                )
            rows = [i for i in index for _ in range(n)]  # generate() groups a prompt's n
            texts: list[str] = [""] * len(rows)
            self.collect(out[:, width:], list(range(len(rows))), attention_mask, texts, stats)
            for i, text in zip(rows, texts, strict=True):
                outputs[i].append(text)
        stats.seconds = time.perf_counter() - started
        self.stats = stats
        return outputs

    def _batch(
        self, prompts: Sequence[Sequence[int]], prefix: SharedPrefix | None
    ) -> tuple[Any, Any, Any]:
        """Input ids, attention mask and starting cache of a batch. Plain: left padding, no
        cache. With a shared prefix: `prefix + padding + the prompt's own tokens` (positions
        follow the mask, so each prompt's tokens sit where they would without the gap) and the
        prefix's cache, copied once per row."""
        import copy

        import torch

        if prefix is None:
            batch = self.tokenizer.pad(
                {"input_ids": list(prompts)}, padding=True, return_tensors="pt"
            )
            return batch["input_ids"], batch["attention_mask"], None
        shared = len(prefix.ids)
        width = max(len(ids) for ids in prompts) - shared
        pad = self.tokenizer.pad_token_id
        rows, masks = [], []
        for ids in prompts:
            gap = width - (len(ids) - shared)
            rows.append([*prefix.ids, *[pad] * gap, *ids[shared:]])
            masks.append([1] * shared + [0] * gap + [1] * (len(ids) - shared))
        cache = copy.deepcopy(prefix.cache)
        cache.batch_repeat_interleave(len(prompts))
        return torch.tensor(rows), torch.tensor(masks), cache

    def greedy_kwargs(self) -> dict[str, Any]:
        """`generate()`'s arguments for greedy decoding of at most `max_new_tokens`."""
        return {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": False,
            "num_beams": 1,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "pad_token_id": self.tokenizer.pad_token_id,
        }

    def collect(
        self,
        new: Any,
        index: Sequence[int],
        attention_mask: Any,
        outputs: list[str],
        stats: GenerationStats,
    ) -> None:
        """Decode a batch's new tokens (padding dropped) into `outputs` at `index`; count."""
        for row, i in enumerate(index):
            tokens = [t for t in new[row].tolist() if t != self.tokenizer.pad_token_id]
            stats.new_tokens += len(tokens)
            outputs[i] = self.tokenizer.decode(tokens, skip_special_tokens=True)
        stats.prompt_tokens += int(attention_mask.sum())
        stats.batches += 1

    def _newline_criterion(self, width: int) -> _StopAtNewline:
        if self._classes is None:
            self._classes = _token_classes(self.tokenizer)
        return _StopAtNewline(self._classes, width)
