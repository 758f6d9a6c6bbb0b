"""R²AG: the retrieval features against a hand computation (paper App. A, Eq. 10-12)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rulerag.generation.r2ag.features import retrieval_features

S = 1 / math.sqrt(2)
#: four documents in 2-D, the query along the first axis
DOCS = np.array([[0.0, 1.0], [1.0, 0.0], [S, -S], [S, S]])
QUERY = np.array([2.0, 0.0])  # length does not matter: cosine


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def eq_11_12(query, docs) -> list[tuple[float, float, float]]:
    """The paper's formulas as written, with loops: softmax over all k, sorted by relevance."""
    r = [cos(query, d) for d in docs]
    order = sorted(range(len(docs)), key=lambda i: -r[i])
    docs, r = [docs[i] for i in order], [r[i] for i in order]
    z = sum(math.exp(x) for x in r)
    out = []
    for i, d in enumerate(docs):
        prec = sum((math.exp(r[j]) / z) * docs[j] for j in range(i)) if i else None
        gamma = 1.0 if prec is None else cos(d, prec)
        sims = [cos(docs[j], d) for j in (i - 1, i + 1) if 0 <= j < len(docs)]
        out.append((r[i], gamma, sum(sims) / len(sims)))
    return out


def test_features_match_a_hand_computation() -> None:
    features, order = retrieval_features(QUERY, DOCS)
    # ranked (1, 0), (S, -S), (S, S), (0, 1): relevance 1, S, S, 0 (the tie kept in list order)
    assert order.tolist() == [1, 2, 3, 0]
    np.testing.assert_allclose(features[:, 0], [1, S, S, 0], atol=1e-6)
    # precedents: the first gets 1; the second has (1, 0) alone: cos = S
    assert features[0, 1] == 1.0 and features[1, 1] == pytest.approx(S, abs=1e-6)
    # the third's precedents e^1 (1, 0) + e^S (S, -S) point below the axis, away from (S, S)
    precedent = math.e * np.array([1.0, 0.0]) + math.exp(S) * np.array([S, -S])
    assert features[2, 1] == pytest.approx(cos(DOCS[3], precedent), abs=1e-6)
    # neighbours: the ends have one (cos((1, 0), (S, -S)) = S; cos((S, S), (0, 1)) = S);
    # (S, -S) sits between (1, 0) and (S, S): (S + 0) / 2
    assert features[0, 2] == pytest.approx(S, abs=1e-6)
    assert features[3, 2] == pytest.approx(S, abs=1e-6)
    assert features[1, 2] == pytest.approx(S / 2, abs=1e-6)
    np.testing.assert_allclose(features, eq_11_12(QUERY, list(DOCS)), atol=1e-6)


def test_one_query_per_document_as_rule_guided_lists_have() -> None:
    """A united q∘r list: each document's relevance uses the query that found it."""
    queries = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    features, order = retrieval_features(queries, DOCS)
    assert order[0] in (0, 1) and features[0, 0] == pytest.approx(1.0)
    np.testing.assert_allclose(np.sort(features[:, 0]), [S, S, 1.0, 1.0], atol=1e-6)
    with pytest.raises(ValueError, match="do not match"):
        retrieval_features(queries[:3], DOCS)


def test_short_lists() -> None:
    one, _ = retrieval_features(QUERY, DOCS[:1])
    assert one.tolist() == [[0.0, 1.0, 1.0]]
    none, order = retrieval_features(QUERY, DOCS[:0])
    assert none.shape == (0, 3) and order.shape == (0,)
    unsorted, order = retrieval_features(QUERY, DOCS, sort=False)
    assert order.tolist() == [0, 1, 2, 3] and unsorted[0, 0] == pytest.approx(0.0)


def tiny_llm():
    """A randomly initialised 2-layer Llama (hidden 32) and a tokenizer-free vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
    )  # fmt: skip
    return LlamaForCausalLM(config)


PLACE = 7  # the placeholder's token id in the toy vocabulary


def test_placeholders_receive_exactly_the_projected_vectors() -> None:
    import torch

    from rulerag.generation.r2ag.prompting import inject

    embeddings = torch.randn(2, 9, 4)
    ids = torch.tensor(
        [[1, PLACE, 2, 3, PLACE, 4, PLACE, 5, 6], [1, 2, PLACE, 3, PLACE, 0, 0, 0, 0]]
    )
    vectors = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    doc_mask = torch.tensor([[True, True, True], [True, True, False]])
    out = inject(embeddings, ids, PLACE, vectors, doc_mask)
    slots = ids == PLACE
    assert torch.equal(out[~slots], embeddings[~slots])  # nothing else moves
    assert torch.equal(out[0, [1, 4, 6]], vectors[0])  # in document order
    assert torch.equal(out[1, [2, 4]], vectors[1, :2])
    with pytest.raises(ValueError, match="do not match"):
        inject(embeddings, ids, PLACE, vectors)  # row 2 has 2 placeholders for 3 documents


def test_a_frozen_llm_stays_unchanged_while_the_former_learns() -> None:
    import torch

    from rulerag.generation.r2ag.former import R2Former
    from rulerag.generation.r2ag.model import R2AGModel
    from rulerag.generation.r2ag.settings import FormerSettings

    llm = tiny_llm()
    before = {name: p.detach().clone() for name, p in llm.named_parameters()}
    former = R2Former(FormerSettings(d_model=16, heads=2), 32, max_docs=4)
    model = R2AGModel(llm, former, PLACE)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(any(p is q for q in former.parameters()) for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    ids = torch.tensor([[3, PLACE, 10, 11, PLACE, 12, 13, 20, 21]])
    labels = torch.full_like(ids, -100)
    labels[0, -2:] = ids[0, -2:]  # LM loss on the answer tokens only
    features = torch.rand(1, 2, 3)
    former_before = [p.detach().clone() for p in former.parameters()]
    for _ in range(3):
        out = model(ids, torch.ones_like(ids), features, labels=labels,
                    doc_labels=torch.tensor([[1.0, 0.0]]))  # fmt: skip
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert out.lm_loss > 0 and out.qdm_loss > 0
    for name, p in llm.named_parameters():
        assert torch.equal(p, before[name]), name
    assert any(
        not torch.equal(a, b) for a, b in zip(former_before, former.parameters(), strict=True)
    )
    new = model.generate(ids, torch.ones_like(ids), features, max_new_tokens=2, do_sample=False)
    assert new.shape[-1] >= 2


def test_the_qdm_loss_falls_when_labels_follow_relevance() -> None:
    import torch

    from rulerag.generation.r2ag.former import R2Former, qdm_loss
    from rulerag.generation.r2ag.settings import FormerSettings

    torch.manual_seed(0)
    former = R2Former(FormerSettings(d_model=32, heads=4), 8, max_docs=10)
    features = torch.rand(64, 10, 3)
    labels = (features[..., 0] > 0.6).float()  # answer-bearing = relevant enough
    optimizer = torch.optim.AdamW(former.parameters(), lr=3e-3)
    losses = []
    for _ in range(150):
        loss = qdm_loss(former(features).relevance_logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    former.eval()
    with torch.no_grad():
        predicted = former(features).relevance_logits > 0
    assert (predicted == labels.bool()).float().mean() > 0.9


def test_the_rulerag_prompt_carries_one_placeholder_per_document() -> None:
    """The paper's RuleRAG prompt (rules included) with marked documents: the tokenizer sees
    exactly one placeholder token per document, in document order."""
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.prompts import render_prompt
    from rulerag.generation.r2ag.prompting import PLACEHOLDER, add_placeholder, mark_documents

    tokenizer = load_tokenizer("smollm2")
    model = load_causal_lm("smollm2")
    rows = model.get_input_embeddings().num_embeddings
    place = add_placeholder(tokenizer, model)
    assert add_placeholder(tokenizer, model) == place  # idempotent
    assert model.get_input_embeddings().num_embeddings >= rows
    docs = ["Time 2014-01-02 A Consult B.", "Time 2014-01-03 A Host a visit C."]
    prompt = render_prompt(
        "rule", "Time 2014-01-04 what does A Make a visit ?", mark_documents(docs),
        ["[Entity1, Host a visit, Entity2] leads to [Entity2, Make a visit, Entity1]"],
        temporal=True,
    )  # fmt: skip
    assert prompt.count(PLACEHOLDER) == 2 and "[2]similarity: <R> Time 2014-01-03" in prompt
    ids = tokenizer(prompt)["input_ids"]
    assert ids.count(place) == 2


def test_document_labels_follow_recall_and_the_oracles() -> None:
    from rulerag.generation.r2ag.labels import document_labels

    texts = ["concept coach new new.", "A moved to New York.", "Nothing here."]
    labels = document_labels(texts, answers=["new york"])
    assert labels.tolist() == [0.0, 1.0, 0.0]  # whole words: "new new" is not "new york"
    assert document_labels(texts, answers=["NEW"]).tolist() == [1.0, 1.0, 0.0]
    oracle = document_labels(texts, mode="oracle", doc_ids=["D1", "D2", "D3"], oracle_ids=["D3"])
    assert oracle.tolist() == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="label mode"):
        document_labels(texts, mode="gold")


def test_a_united_list_measures_each_document_against_the_text_that_found_it() -> None:
    """A bag-of-words encoder: the document found with rule r1 is relevant to `q ∘ r1`, not
    to the query alone; documents found without a rule use the query."""
    from rulerag.generation.r2ag.lists import list_features
    from rulerag.retrieval.rule_guided import NO_RULE

    vocab = ["alice", "visit", "consult", "host"]

    def encode(texts: list[str]) -> np.ndarray:
        return np.array([[t.lower().count(w) for w in vocab] for t in texts], dtype=float)

    docs = {"D1": encode(["alice consult"])[0], "D2": encode(["alice visit"])[0]}
    rule_texts = {"r1": "[Entity1, Consult, Entity2] leads to [Entity1, Host, Entity2]"}
    features = list_features(
        "alice visit", ["D1", "D2"], ["r1", NO_RULE], search_rules=rule_texts, encode=encode,
        doc_vectors=docs,
    )  # fmt: skip
    q_r1 = encode(["alice visit " + rule_texts["r1"]])[0]
    assert features[0, 0] == pytest.approx(cos(q_r1, docs["D1"]), abs=1e-6)
    assert features[1, 0] == pytest.approx(1.0, abs=1e-6)  # "alice visit" vs "alice visit"
    assert features[0, 1] == 1.0 and features[1, 1] == pytest.approx(
        cos(docs["D2"], docs["D1"]), abs=1e-6
    )
    with pytest.raises(ValueError, match="one rule"):
        list_features("q", ["D1"], [], search_rules={}, encode=encode, doc_vectors=docs)


def test_a_prompt_cut_from_the_left_keeps_its_last_documents_vectors() -> None:
    """`max_prompt_tokens` may cut the first documents off: the surviving placeholders get the
    vectors of the documents they stand for (first_doc on), not the first ones."""
    import torch

    from rulerag.generation.r2ag.prompting import inject

    embeddings = torch.randn(1, 5, 4)
    ids = torch.tensor([[PLACE, 2, PLACE, 3, 4]])  # documents 2 and 3 of 0..3 survive
    vectors = torch.arange(16, dtype=torch.float32).reshape(1, 4, 4)
    out = inject(embeddings, ids, PLACE, vectors, first_doc=torch.tensor([2]))
    assert torch.equal(out[0, 0], vectors[0, 2]) and torch.equal(out[0, 2], vectors[0, 3])
    assert torch.equal(out[0, [1, 3, 4]], embeddings[0, [1, 3, 4]])
    with pytest.raises(ValueError, match="do not match"):
        inject(embeddings, ids, PLACE, vectors, first_doc=torch.tensor([1]))


def _sample(qid: str, docs: list[str], answers=("Paris",)):
    from rulerag.generation.prompts import Sample

    ids = [f"d{i}" for i in range(len(docs))]
    return Sample(qid, f"query {qid}", tuple(answers), tuple(docs), extra={"doc_ids": ids})


def test_examples_and_batches_line_up_features_labels_and_placeholders() -> None:
    import torch

    from rulerag.generation.r2ag.data import R2AGCollator, make_example

    two = _sample("a", ["lives in Paris", "lives in Rome"])
    one = _sample("b", ["visited Paris"])
    features = np.ones((2, 3), dtype=np.float32)
    cut = make_example(two, [1, PLACE, 5, 6], PLACE, features, labels=[-100, -100, -100, 6])
    assert cut.first_doc == 1 and cut.doc_labels.tolist() == [1.0, 0.0]
    whole = make_example(one, [PLACE, 4], PLACE, features[:1], labels=[-100, 4])
    batch = R2AGCollator(pad_token_id=0)([cut, whole])
    assert batch["input_ids"].tolist() == [[1, PLACE, 5, 6], [PLACE, 4, 0, 0]]
    assert batch["labels"][1].tolist() == [-100, 4, -100, -100]
    assert batch["doc_mask"].tolist() == [[True, True], [True, False]]
    assert batch["first_doc"].tolist() == [1, 0]
    left = R2AGCollator(pad_token_id=0, side="left")([whole, cut])
    assert left["input_ids"][0].tolist() == [0, 0, PLACE, 4] and "labels" in left
    assert torch.equal(left["attention_mask"][0], torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="placeholders"):
        make_example(one, [PLACE, PLACE], PLACE, features[:1])
    with pytest.raises(ValueError, match="features"):
        make_example(one, [PLACE], PLACE, features)


def test_training_fits_the_former_keeps_the_best_dev_state_and_round_trips(tmp_path) -> None:
    import torch

    from rulerag.generation.r2ag.data import R2AGExample
    from rulerag.generation.r2ag.former import R2Former
    from rulerag.generation.r2ag.model import R2AGModel
    from rulerag.generation.r2ag.settings import FormerSettings, R2AGTrain
    from rulerag.generation.r2ag.training import load_former, save_r2ag, train_r2ag

    rng = np.random.default_rng(0)

    def example(i: int) -> R2AGExample:
        features = rng.random((2, 3)).astype(np.float32)
        answer = 20 + int(features[0, 0] > 0.5)  # the answer follows the first relevance
        ids = [3, PLACE, 10, PLACE, 11, answer]
        labels = [-100] * 5 + [answer]
        doc_labels = (features[:, 0] > 0.5).astype(np.float32)
        return R2AGExample(str(i), ids, labels, features, doc_labels)

    llm = tiny_llm()
    frozen = {name: p.detach().clone() for name, p in llm.named_parameters()}
    former = R2Former(FormerSettings(d_model=16, heads=2), 32, max_docs=4)
    model = R2AGModel(llm, former, PLACE)
    settings = R2AGTrain(
        samples=48, dev_samples=8, epochs=4, learning_rate=3e-3, batch_size=4,
        gradient_accumulation=2, eval_steps=4, logging_steps=2,
    )  # fmt: skip
    data = [example(i) for i in range(56)]
    stats = train_r2ag(model, data[8:], data[:8], settings, pad_token_id=0, progress=False)
    assert stats["steps"] == 24 and stats["warmup_steps"] == 1
    assert stats["dev_best"]["loss"] < stats["dev_before"]["loss"]
    assert stats["dev_best"]["loss"] == min(p["loss"] for p in stats["dev_curve"])
    assert stats["loss_curve"][-1]["loss"] < stats["loss_curve"][0]["loss"]
    for name, p in llm.named_parameters():
        assert torch.equal(p, frozen[name]), name
    assert not model.llm.training  # a frozen LLM is never put in training mode
    save_r2ag(model, tmp_path / "v", {"base_model": "tiny"}, {"steps": stats["steps"]})
    loaded, meta = load_former(tmp_path / "v")
    assert meta["base_model"] == "tiny" and meta["former"]["d_model"] == 16
    for (name, a), b in zip(former.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert not (tmp_path / "v" / "adapter").exists()  # no LoRA, no adapter


def test_r2ag_settings_reject_what_cannot_run() -> None:
    from rulerag.generation.r2ag.settings import r2ag_settings
    from rulerag.settings import SettingsError

    settings = r2ag_settings({"features": ["relevance", "neighbour"]})
    assert settings.feature_mask() == [1.0, 0.0, 1.0]
    assert settings.rows == () and settings.train.learning_rate == 2e-4
    for bad, match in (
        ({"features": ["recency"]}, "recency"),
        ({"labels": "oracle"}, "oracle documents"),
        ({"rows": ["nope"]}, "nope"),
        (
            {"variants": {"x": {"prompt": "query"}}, "rows": []},
            "prompt: Input should be 'rule' or 'plain'",
        ),
        ({"train": {"schedule": "step"}}, "schedule"),
    ):
        with pytest.raises((SettingsError, ValueError), match=match):
            r2ag_settings(bad)


def test_united_lists_keep_the_rule_of_each_documents_best_score() -> None:
    from rulerag.generation.samples import united_documents, united_lists
    from tests.helpers import run_frame

    run = run_frame(
        [("q", "", 1, "a", 0.5), ("q", "r1", 1, "b", 0.9), ("q", "r1", 2, "a", 0.7),
         ("q", "r2", 1, "c", 0.8)]
    )  # fmt: skip
    assert united_lists(run)["q"] == [("b", "r1"), ("c", "r2"), ("a", "r1")]
    assert united_documents(run)["q"] == ["b", "c", "a"]
    assert united_lists(run, rule_ids={"q": ["r2"]})["q"] == [("c", "r2"), ("a", "")]
    assert united_lists(run.drop(columns="rule"))["q"][0] == ("b", "")


def test_the_generator_answers_samples_through_the_placeholders() -> None:
    """R2AGGenerator with SmolLM2's tokenizer and chat template over a tiny random LLM: marked
    prompts, one vector per document, answers cut at the first line break as the grid's."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rulerag.generation.models import load_tokenizer
    from rulerag.generation.prompts import PromptFormat
    from rulerag.generation.r2ag.former import R2Former
    from rulerag.generation.r2ag.generator import R2AGGenerator
    from rulerag.generation.r2ag.model import R2AGModel
    from rulerag.generation.r2ag.prompting import add_placeholder
    from rulerag.generation.r2ag.settings import FormerSettings

    tokenizer = load_tokenizer("smollm2")
    place = add_placeholder(tokenizer)
    torch.manual_seed(0)
    llm = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
            num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
        )
    )  # fmt: skip
    model = R2AGModel(llm, R2Former(FormerSettings(d_model=16, heads=2), 32), place).eval()

    class Features:
        def features(self, sample):
            return np.ones((len(sample.documents), 3), dtype=np.float32)

    generator = R2AGGenerator(model, tokenizer, Features(), max_new_tokens=4, batch_size=2)
    samples = [
        _sample("a", ["Time 2014-01-02 A Consult B.", "Time 2014-01-03 A Host a visit C."]),
        _sample("b", ["Time 2014-01-05 D Praise E."]),
        _sample("c", []),
    ]
    prompts = [generator.render(PromptFormat("paper", True), "plain", s) for s in samples]
    assert prompts[0].count("similarity: <R> Time") == 2 and "<R>" not in prompts[2]
    out = generator.generate_samples(samples, prompts)
    assert len(out) == 3 and all(isinstance(x, str) and "\n" not in x.strip() for x in out)
    assert generator.stats.prompts == 3 and generator.stats.new_tokens <= 3 * 4
    with pytest.raises(TypeError, match="generate_samples"):
        generator.generate(prompts)


def test_trained_folders_are_refused_with_another_model_style_or_template(tmp_path) -> None:
    """The LoRA adapters and the R²-Formers share one check of what they were trained with."""
    from rulerag.generation.generators import check_chat_template, check_trained_with

    meta = {"base_model": "smollm2", "prompt_style": "paper", "chat_template": True}
    check_trained_with(tmp_path, meta, model="smollm2", prompt_style="paper", stage="train_r2ag")
    check_chat_template(tmp_path, meta, True)
    with pytest.raises(ValueError, match="run train_r2ag again"):
        check_trained_with(tmp_path, meta, model="other", prompt_style="paper", stage="train_r2ag")
    with pytest.raises(ValueError, match="prompt_style 'paper'"):
        check_trained_with(tmp_path, meta, model="smollm2", prompt_style="legacy", stage="x")
    with pytest.raises(ValueError, match="prompts would differ"):
        check_chat_template(tmp_path, meta, False)
    check_trained_with(tmp_path, {"base_model": "m"}, model="m", prompt_style="legacy", stage="x")


def test_the_former_takes_the_sections_shape_and_records_it_as_before() -> None:
    """No mirror of `r2ag.former`: R2Former takes `FormerSettings` and the LLM's width, and a
    saved former's metadata keeps its keys and their order (r2ag_meta.json is an output)."""
    pytest.importorskip("torch")
    from rulerag.generation.r2ag.former import R2Former
    from rulerag.generation.r2ag.settings import FormerSettings

    former = R2Former(FormerSettings(d_model=16, heads=2), 32)
    meta = former.meta()
    assert list(meta.items()) == [
        ("hidden_size", 32), ("d_model", 16), ("layers", 1), ("heads", 2), ("dropout", 0.1),
        ("max_docs", 64), ("features", 3),
    ]  # fmt: skip
    again = R2Former.from_meta(meta)
    assert again.meta() == meta and again.shape == FormerSettings(d_model=16, heads=2)
