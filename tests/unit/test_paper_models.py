"""The paper's other retrievers and generators by name: each resolves to a valid configuration
(no download), and a pooling override embeds as that pooling does."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from rulerag.generation.models import HUB_ALIASES, resolve_model, trusts_remote_code
from rulerag.generation.settings import generation_settings
from rulerag.retrieval import encoders
from rulerag.retrieval.settings import index_settings


@pytest.fixture(scope="module")
def params() -> dict:
    with open("params.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("alias", sorted(HUB_ALIASES))
def test_each_paper_generator_resolves_to_its_hub_id(alias: str, params: dict) -> None:
    hub = HUB_ALIASES[alias]
    assert resolve_model(alias) == hub.hub_id  # an id, nothing downloaded or converted
    assert resolve_model(alias.upper()) == hub.hub_id
    section = {**params["generation"], "profile": "paper"}
    section["profiles"] = {
        **section["profiles"],
        "paper": {**section["profiles"]["paper"], "model": alias},
    }
    assert generation_settings(section).model == alias
    assert trusts_remote_code(alias) == (alias == "chatglm2_6b")
    assert not trusts_remote_code(hub.hub_id)  # only the named entry may run remote code


@pytest.mark.parametrize(
    ("name", "query", "doc", "pooling", "normalize"),
    [
        ("dpr", "sentence-transformers/facebook-dpr-question_encoder-single-nq-base",
         "sentence-transformers/facebook-dpr-ctx_encoder-single-nq-base", None, False),
        ("simcse", "princeton-nlp/sup-simcse-bert-base-uncased",
         "princeton-nlp/sup-simcse-bert-base-uncased", "cls", True),
        ("contriever", "facebook/contriever", "facebook/contriever", "mean", False),
    ],
)  # fmt: skip
def test_each_paper_retriever_is_a_valid_named_encoder(
    name: str, query: str, doc: str, pooling: str | None, normalize: bool, params: dict
) -> None:
    spec = index_settings(params["index"]).encoder(name)
    assert (spec.query_name, spec.doc_name) == (query, doc)
    assert (spec.pooling, spec.normalize) == (pooling, normalize)
    assert encoders.resolve_model(spec.query_name) == query  # passed through as a hub id


def test_cls_pooling_embeds_the_first_token() -> None:
    """`pooling: cls` on a plain checkpoint gives the [CLS] hidden state, not the mean."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = encoders.resolve_model("minilm")
    cls = encoders.load_encoder("minilm", device="cpu", pooling="cls")
    mean = encoders.load_encoder("minilm", device="cpu", pooling="mean")
    text = "Time 2014-06-23 Barack Obama make a visit Germany."
    got = encoders.encode(cls, [text], normalize=False)[0]
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
    with torch.no_grad():
        hidden = model(**tokenizer([text], return_tensors="pt")).last_hidden_state[0]
    np.testing.assert_allclose(got, hidden[0].numpy(), atol=1e-5)
    np.testing.assert_allclose(
        encoders.encode(mean, [text], normalize=False)[0], hidden.mean(0).numpy(), atol=1e-5
    )
