"""Answer ranking: candidate sets, log-likelihood scores against a direct computation, MRR."""

from __future__ import annotations

import math

import pytest

from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.ranking import candidate_sets, gold_rank, rank_metrics, score_candidates


def test_candidates_come_from_the_prompt_documents_and_the_rules() -> None:
    sample = Sample("q", "what does A visit ?", ("Kabul",), ("A met B.", "B visits C."),
                    extra={"doc_ids": ["D0", "D1", "D2"]})  # fmt: skip
    docs = {"D0": ("A", "B"), "D1": ("B", "C"), "D2": ("X", "Y")}  # D2 is not in the prompt
    got = candidate_sets([sample], docs, {"q": "A"}, {"q": ["Kabul", "C"]})
    assert got == [["B", "C", "Kabul"]]  # the subject left out, each name once


def test_gold_rank_and_metrics() -> None:
    assert gold_rank(["Iran", "the Kabul"], ["kabul"]) == 2  # SQuAD-normalised, as EM
    assert gold_rank(["Iran"], ["Kabul"]) is None
    metrics = rank_metrics([1, 2, None, 4])
    assert metrics["rank_mrr"] == pytest.approx((1 + 0.5 + 0 + 0.25) / 4)
    assert metrics["rank_hits_at_1"] == 0.25 and metrics["rank_hits_at_3"] == 0.5
    assert metrics["rank_hits_at_10"] == 0.75 and metrics["gold_among_candidates"] == 0.75


def _brute_force(model, tokenizer, prompt, name, fmt) -> float:
    """The answer's summed log-likelihood from one plain forward pass over prompt + answer."""
    import torch

    from rulerag.generation.training import encode_example

    e = encode_example(tokenizer, prompt, fmt.target(name), chat_template=True)
    with torch.no_grad():
        logits = model(torch.tensor([e["input_ids"]])).logits[0]
    return sum(
        torch.log_softmax(logits[i - 1], -1)[label].item()
        for i, label in enumerate(e["labels"])
        if label != -100
    )


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_scores_are_the_summed_answer_log_likelihood(attention, monkeypatch) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rulerag.generation import ranking
    from rulerag.generation.models import load_tokenizer
    from rulerag.generation.prefix_cache import shared_prefix, tree_attention
    from rulerag.generation.ranking import encode_candidates

    tokenizer = load_tokenizer("smollm2")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         attn_implementation=attention)  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    assert tree_attention(model)
    fmt = PromptFormat("paper", True)
    prompts = ["# Query: what does A visit ?\n# Answer:", "# Query: whom does B call ?\n# Answer:"]
    names = ["Kabul", "Islamic Republic of Iran", "Iran", "B"]
    prefix = shared_prefix(
        model, [encode_candidates(tokenizer, p, (), fmt, chat_template=True,
                                  max_prompt_tokens=None)[0] for p in prompts]
    )  # fmt: skip
    assert prefix is not None and len(prefix.ids) > 2  # the chat header and "# Query: wh"
    for prompt in prompts:
        want = [_brute_force(model, tokenizer, prompt, name, fmt) for name in names]
        tree = score_candidates(model, tokenizer, prompt, names, fmt, chat_template=True,
                                max_prompt_tokens=None)  # fmt: skip
        shared = score_candidates(model, tokenizer, prompt, names, fmt, chat_template=True,
                                  max_prompt_tokens=None, prefix=prefix)  # fmt: skip
        with monkeypatch.context() as m:  # e.g. flash attention (no 4-D masks): padded batches
            m.setattr(ranking, "tree_attention", lambda model: False)
            one = score_candidates(model, tokenizer, prompt, names, fmt, chat_template=True,
                                   max_prompt_tokens=None, batch_size=1)  # fmt: skip
            three = score_candidates(model, tokenizer, prompt, names, fmt, chat_template=True,
                                     max_prompt_tokens=None, batch_size=3)  # fmt: skip
        for got in (tree, shared, one, three):
            assert got == pytest.approx(want, abs=1e-4)
        assert all(score < 0 and math.isfinite(score) for score in tree)
    assert len(prefix.cache) == 2 and prefix.cache.get_seq_length() == len(prefix.ids)  # reused,
    # never extended


def test_a_ranked_row_answers_with_its_best_candidate(tmp_path) -> None:
    import pandas as pd
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rulerag.generation.grid import run_row
    from rulerag.generation.local import LocalGenerator
    from rulerag.generation.models import load_tokenizer
    from rulerag.generation.settings import GridConfig, generation_settings
    from rulerag.layout import DataLayout
    from tests.unit.test_symbolic import SETTINGS, toy

    base = toy(tmp_path)
    layout = DataLayout(base)
    pd.DataFrame({"id": ["D0", "D1"], "head": [0, 1], "tail": [2, 3]}).to_parquet(
        layout.corpus_table
    )
    layout.kg.mkdir()
    pd.DataFrame({"id": [0, 1, 2, 3], "name": ["A", "B", "C", "D"]}).to_parquet(layout.entities)
    tokenizer = load_tokenizer("smollm2")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4)).eval()  # fmt: skip
    generator = LocalGenerator(model, tokenizer, batch_size=4)
    grid = GridConfig("ranked", "rg", "base", "rule", decoding="rank")
    result = run_row(base, "toy", grid, generation_settings(SETTINGS), lambda *a: generator)
    first = result.records[0]
    # t0's prompt shows D0 (A met C.) and the rules name Kabul and Iran; the toy queries carry
    # no head_name, so the subject A stays a candidate
    assert {name for name, _ in first["candidates"]} == {"A", "C", "Kabul", "Iran"}
    assert first["generation"] == first["candidates"][0][0]
    assert first["gold_rank"] is not None  # Kabul is among them
    assert 0 < result.metrics["rank_mrr"] <= 1 and result.metrics["decoding"] == "rank"
