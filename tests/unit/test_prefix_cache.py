"""Prompts that share a prefix: its cache is computed once and reused, outputs unchanged."""

from __future__ import annotations

import pytest

from rulerag.generation.prefix_cache import shared_prefix


def _generator(share_prefix: bool, attention: str = "sdpa"):
    import torch

    from rulerag.generation.local import LocalGenerator
    from rulerag.generation.models import load_tokenizer
    from tests.helpers import tiny_llama

    tokenizer = load_tokenizer("smollm2")
    torch.manual_seed(0)
    model = tiny_llama(tokenizer, attn_implementation=attention).eval()
    return LocalGenerator(model, tokenizer, max_new_tokens=6, batch_size=3, chat_template=False,
                          stop_at_newline=False, share_prefix=share_prefix)  # fmt: skip


PROMPTS = [
    "# Instruct: answer the query with the missing object.\n# Query: what does A visit ?",
    "# Instruct: answer the query with the missing object.\n# Query: whom did the B call on 2 May?",
    "# Instruct: answer the query with the missing object.\n# Query: C ?",
    "# Instruct: answer the query with the missing object.\n# Query: where was D born, and when?",
]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_shared_prefix_changes_no_generation(attention, monkeypatch) -> None:
    from rulerag.generation import local

    plain = _generator(False, attention).generate(PROMPTS)
    shared = _generator(True, attention)
    used = []

    def spy(*args, **kwargs):
        used.append(shared_prefix(*args, **kwargs))
        return used[-1]

    monkeypatch.setattr(local, "shared_prefix", spy)
    assert shared.generate(PROMPTS) == plain
    assert used[0] is not None and len(used[0].ids) >= 8  # the instruction line and "# Query:"
    assert shared.stats.batches == 2 and shared.stats.new_tokens > 0


def test_rows_are_prefix_gap_own_tokens() -> None:
    generator = _generator(True)
    encoded = [generator.encode(p) for p in PROMPTS[:3]]
    prefix = shared_prefix(generator.model, encoded)
    ids, mask, cache = generator._batch(encoded, prefix)
    n = len(prefix.ids)
    own = [len(e) - n for e in encoded]
    assert ids.shape == (3, n + max(own)) and cache.get_seq_length() == n
    for row, e, k in zip(range(3), encoded, own, strict=True):
        assert ids[row, :n].tolist() == list(prefix.ids)
        assert ids[row, ids.shape[1] - k :].tolist() == e[n:]
        assert mask[row].tolist() == [1] * n + [0] * (max(own) - k) + [1] * k
    assert prefix.cache.get_seq_length() == n  # copied per batch, never extended


def test_a_prompt_that_is_the_shared_prefix_keeps_a_token_of_its_own() -> None:
    generator = _generator(True)
    prefix = shared_prefix(generator.model, [[5, 6, 7, 8], [5, 6, 7, 8, 9]], min_tokens=1)
    assert prefix is not None and prefix.ids == (5, 6, 7)
    assert shared_prefix(generator.model, [[5, 6, 7], [9, 6, 7]], min_tokens=1) is None
    assert shared_prefix(generator.model, [[5, 6, 7, 8], [5, 6, 7, 9]]) is None  # < 8 tokens
