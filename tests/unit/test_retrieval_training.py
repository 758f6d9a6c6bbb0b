"""RGFT / SSFT training: the loss, item building, held-out split, learning, resuming, one
encoder's settings, and the shared training sequence (`fit_query_encoder`)."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rulerag.errors import InputError
from rulerag.layout import DataLayout
from rulerag.retrieval import encoders
from rulerag.retrieval.data import RuleItem, read_corpus
from rulerag.retrieval.dense import DenseIndex, encode_corpus
from rulerag.retrieval.encoders import DualEncoder
from rulerag.retrieval.settings import (
    EncoderSpec,
    RetrieveSettings,
    TrainRetrieverSettings,
    train_retriever_settings,
)
from rulerag.retrieval.training import (
    TrainItem,
    contrastive_loss,
    evaluate,
    fit_query_encoder,
    make_items,
    split_heldout,
    train_query_encoder,
    training_items,
)
from rulerag.settings import SettingsError, load_settings
from tests.helpers import require_minilm
from tests.support.synthetic_retrieval import tiny_benchmark


def test_contrastive_loss_matches_the_formula_and_masks() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pool = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    positive = torch.tensor([[True, False, False], [False, True, False]])
    exclude = torch.zeros_like(positive)
    t = 0.5
    loss = contrastive_loss(q, pool, positive, exclude, t)
    s = (q @ pool.T / t).numpy()
    expected = np.mean(
        [-s[0, 0] + np.log(np.exp(s[0]).sum()), -s[1, 1] + np.log(np.exp(s[1]).sum())]
    )
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    # Excluding doc 2 for query 0 takes it out of the denominator: the loss drops.
    exclude[0, 2] = True
    assert float(contrastive_loss(q, pool, positive, exclude, t)) < float(loss)
    # Two positives for one query: each is scored against the negatives only.
    both = torch.tensor([[True, False, True], [False, True, False]])
    two = contrastive_loss(q, pool, both, torch.zeros_like(both), t)
    neg0 = np.log(np.exp(s[0, 1]))
    pair = [np.log1p(np.exp(neg0 - s[0, j])) for j in (0, 2)]
    item1 = -s[1, 1] + np.log(np.exp(s[1]).sum())
    assert float(two) == pytest.approx(np.mean([np.mean(pair), item1]), rel=1e-5)
    # No negatives at all: finite, zero, and differentiable.
    only = torch.ones(1, 3, dtype=torch.bool)
    qq = q[:1].clone().requires_grad_()
    value = contrastive_loss(qq, pool, only, torch.zeros_like(only), t)
    value.backward()
    assert float(value.detach()) == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(qq.grad).all()


def rule_items() -> list[RuleItem]:
    return [
        RuleItem("a#R1", "a", "Qa", "R1", "rule one", ("D1", "D2"), ("x",)),
        RuleItem("a#R2", "a", "Qa", "R2", "rule two", ("D3", "D404"), ("x",)),
        RuleItem("b#R1", "b", "Qb", "R1", "rule one", (), ("y",)),
        RuleItem("c#R1", "c", "Qc", "R1", "rule one", ("D4",), ("z",)),
    ]


def test_make_items_rgft_and_ssft() -> None:
    rows = {"D1": 1, "D2": 2, "D3": 3, "D4": 4}
    items, dropped = make_items(rule_items(), rows, use_rules=True)
    assert [(i.item_id, i.text, i.positives) for i in items] == [
        ("a#R1", "Qa rule one", (1, 2)),
        ("a#R2", "Qa rule two", (3,)),
        ("c#R1", "Qc rule one", (4,)),
    ]
    # The other rule's oracle documents of the same query are never its negatives.
    assert items[0].answers_rows == {1, 2, 3}
    assert dropped == {"oracle_ids_not_in_corpus": 1, "items_without_oracle": 1}
    ssft, _ = make_items(rule_items(), rows, use_rules=False)
    assert [(i.item_id, i.text, i.positives) for i in ssft] == [
        ("a", "Qa", (1, 2, 3)),
        ("c", "Qc", (4,)),
    ]


def test_rgft_items_take_the_rule_in_the_search_form() -> None:
    text = "[Entity1, sub part of, Entity2] leads to [Entity1, proxy for, Entity2]"
    items = [RuleItem("a#R1", "a", "Qa", "R1", text, ("D1",), ("x",))]
    paper, _ = make_items(items, {"D1": 1}, use_rules=True)
    body, _ = make_items(
        items, {"D1": 1}, use_rules=True, retrieve=RetrieveSettings(rule_query="body")
    )
    assert paper[0].text == f"Qa {text}"
    assert body[0].text == "Qa sub part of"


def test_split_heldout_keeps_queries_whole() -> None:
    items = [TrainItem(f"{q}#{r}", q, "t", (0,)) for q in "abcdefghij" for r in range(3)]
    train, held = split_heldout(items, 0.2, None, seed=1)
    assert {i.qid for i in train}.isdisjoint({i.qid for i in held})
    assert len(held) == 6 and len(train) + len(held) == 30
    assert split_heldout(items, 0.2, None, seed=1) == (train, held)
    assert len(split_heldout(items, 0.5, 3, seed=1)[1]) == 3


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """MiniLM, a tiny corpus embedded once, and items whose oracle documents the base model
    does not rank first: `what does P Make a visit ?` -> P's "Criticize" documents."""
    require_minilm()
    torch.set_num_threads(1)  # tests run on parallel workers: oversubscribed threads crawl
    root = tmp_path_factory.mktemp("tiny")
    tiny_benchmark(root)
    corpus = read_corpus(DataLayout(root).corpus)
    model = encoders.load_encoder("minilm", device="cpu", max_length=32)
    docs = encode_corpus(DualEncoder(model, model), corpus.contents, show_progress=False)
    by_person: dict[str, list[int]] = {}
    for row, text in enumerate(corpus.contents):
        if " Criticize " in text:
            by_person.setdefault(text.split(" Criticize ")[0].split(" ", 2)[2], []).append(row)
    items = [
        TrainItem(p, p, f"what does {p} Make a visit ?", tuple(r), frozenset(r))
        for p, r in sorted(by_person.items())
    ]
    return model, docs, items, root, corpus


def test_training_lowers_the_loss_and_ranks_oracles_higher(setup, tmp_path: Path) -> None:
    model, docs, items, *_ = setup
    model = copy.deepcopy(model)
    config = TrainRetrieverSettings(
        lr=1e-4, batch_size=8, temperature=0.05, epochs=3, eval_every=5, patience=10,
        max_positives=2, heldout_fraction=0.0, seed=3,
    )  # fmt: skip
    before = evaluate(model, items, torch.from_numpy(docs), config)
    result = train_query_encoder(
        model, docs, items, items, config, checkpoint_dir=tmp_path, show_progress=False
    )
    after = evaluate(model, items, torch.from_numpy(docs), config)
    losses = result.losses()["train_loss"].to_numpy()
    assert result.steps == 15 and len(losses) == 15
    assert losses[-5:].mean() < losses[:5].mean()
    assert after["heldout_mrr"] > before["heldout_mrr"]
    assert after["heldout_loss"] < before["heldout_loss"]
    assert result.metric == "heldout_mrr"
    assert result.best_metric > result.base_metric == pytest.approx(before["heldout_mrr"])
    assert (tmp_path / "latest.json").is_file()


class Stop(Exception):
    pass


def test_resumed_training_equals_an_unbroken_run(setup, tmp_path: Path) -> None:
    model, docs, items, *_ = setup
    config = TrainRetrieverSettings(
        lr=1e-4, batch_size=8, temperature=0.05, epochs=2, max_steps=6, checkpoint_every=2, seed=5,
    )  # fmt: skip
    unbroken = copy.deepcopy(model)
    train_query_encoder(unbroken, docs, items, [], config, tmp_path / "a", show_progress=False)

    def die_at_step_5(metrics: dict, step: int) -> None:
        if step == 5:
            raise Stop

    broken = copy.deepcopy(model)
    with pytest.raises(Stop):
        train_query_encoder(
            broken, docs, items, [], config, tmp_path / "b", on_log=die_at_step_5,
            show_progress=False,
        )  # fmt: skip
    resumed = copy.deepcopy(model)
    result = train_query_encoder(
        resumed, docs, items, [], config, tmp_path / "b", show_progress=False
    )
    assert result.resumed_from == 4 and result.steps == 6
    for (name, a), (_, b) in zip(
        unbroken.state_dict().items(), resumed.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)
    # Other inputs do not resume someone else's checkpoint.
    other = copy.deepcopy(model)
    fresh = train_query_encoder(
        other, docs, items[:-1], [], config, tmp_path / "b", show_progress=False
    )
    assert fresh.resumed_from is None


SECTION = {
    "lr": 1e-5,
    "batch_size": 32,
    "overrides": {"mpnet": {"batch_size": 8, "lr": "2e-5", "max_length": 64}},
}


def test_for_encoder_merges_the_encoders_overrides_as_the_raw_section_did() -> None:
    settings = train_retriever_settings(SECTION)
    mpnet = settings.for_encoder("mpnet")
    # what the stages merged from the raw section before: the override over the section
    merged = {**SECTION, **SECTION["overrides"]["mpnet"], "overrides": {}}
    assert mpnet == load_settings(TrainRetrieverSettings, merged, "train_retriever")
    assert (mpnet.batch_size, mpnet.lr, mpnet.max_length, mpnet.overrides) == (8, 2e-5, 64, {})
    assert mpnet.epochs == settings.epochs and mpnet.for_encoder("mpnet") is mpnet
    assert settings.for_encoder("minilm") is settings  # no override: the settings themselves
    assert train_retriever_settings(SECTION, "mpnet") == mpnet
    assert train_retriever_settings(SECTION, "minilm") == settings


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"batch_sise": 8}, r"train_retriever\.overrides\.mpnet: unknown key 'batch_sise'"),
        ({"overrides": {}}, r"train_retriever\.overrides\.mpnet: unknown key 'overrides'"),
        ({"batch_size": 0}, r"train_retriever\.overrides\.mpnet\.batch_size: .*\(got 0\)"),
        ({"positives": "all"}, r"train_retriever\.overrides\.mpnet\.positives: Input should be"),
    ],
)
def test_a_bad_override_fails_naming_the_encoder(override: dict, message: str) -> None:
    settings = train_retriever_settings({"overrides": {"mpnet": override}})
    with pytest.raises(SettingsError, match=message):
        settings.for_encoder("mpnet")
    assert settings.for_encoder("minilm") is settings  # another encoder is not affected


def test_fit_query_encoder_without_items_fails_naming_where() -> None:
    index = DenseIndex(["D1", "D2"], np.eye(2, dtype=np.float32), meta={"normalize": True})
    with pytest.raises(InputError, match="generalisation: bank R2: no F_R item has oracle"):
        fit_query_encoder(
            [], index, EncoderSpec(), TrainRetrieverSettings(), where="generalisation: bank R2"
        )


def test_fit_query_encoder_is_the_training_sequence(setup, tmp_path: Path) -> None:
    """Split, load the base encoder, train on the frozen index embeddings: the same weights
    and history as that sequence by hand (what train_retriever and generalisation ran), with
    the overrides a short run per bank takes and no checkpoint folder."""
    _model, docs, _items, root, corpus = setup
    index = DenseIndex(corpus.ids, docs, meta={"normalize": True, "cache_key": "tiny"})
    items, _ = training_items(DataLayout(root), index.doc_ids, True)
    spec = EncoderSpec(model="minilm", max_length=32, batch_size=16)
    settings = TrainRetrieverSettings(
        lr=1e-4, batch_size=4, temperature=0.05, eval_every=2, heldout_fraction=0.2, seed=4,
        early_stopping="loss",
    )  # fmt: skip
    fitted = fit_query_encoder(
        items, index, spec, settings, device="cpu", show_progress=False, max_steps=3, min_steps=0
    )
    # the encoder's max_length and the index's normalisation, then the overrides
    assert fitted.config == replace(settings.train_config(32, True), max_steps=3, min_steps=0)
    assert len(items) == 10 and fitted.result.steps == 3
    assert fitted.result.counts == {"train_items": 8, "heldout_items": 2}
    train, heldout = split_heldout(items, 0.2, settings.heldout_max, 4)
    by_hand = encoders.load_encoder("minilm", "cpu", 32)
    expected = train_query_encoder(
        by_hand, docs, train, heldout, fitted.config, show_progress=False
    )
    pd.testing.assert_frame_equal(fitted.result.losses(), expected.losses())
    pd.testing.assert_frame_equal(fitted.result.evaluations(), expected.evaluations())
    assert fitted.result.best_step == 3  # trained weights are kept, not the base ones
    for (name, a), (_, b) in zip(
        by_hand.state_dict().items(), fitted.model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)
    assert not list(tmp_path.iterdir())  # no checkpoint folder: nothing written
    # the trained query side searches the index it was trained against
    searcher = fitted.searcher(index)
    assert (searcher.query_model, searcher.normalize, searcher.batch_size) == (
        fitted.model,
        True,
        16,
    )
    rows, _ = searcher.search([items[0].text], 3)
    assert rows.shape == (1, 3) and (rows >= 0).all()
