"""Which generator answers a configuration name, under which stage name and MLflow params
(`rulerag.generation.rows`, the choice `generate` used to make itself), and which plans a
training stage makes of a variant (`adapters.adapter_plan`, `r2ag.fit.r2ag_plan`). Nothing is
loaded: the plans only name what the stages will run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulerag.errors import InputError
from rulerag.generation.adapters import adapter_plan
from rulerag.generation.r2ag.fit import r2ag_plan
from rulerag.generation.rows import robust_plan, row_plan
from rulerag.params import Params, load_params

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def params() -> Params:
    return load_params(PROJECT / "params.yaml")


def plan(params: Params, config: str):
    return row_plan(
        config, params.generation, params.r2ag, params.index, params.retrieve, model_cache=None
    )


def test_a_grid_row_is_generated_by_its_own_generator(params: Params) -> None:
    row = plan(params, "rulerag_icl")
    assert (row.stage, row.grid.name, row.factory, row.robust) == (
        "generate", "rulerag_icl", None, None
    )  # fmt: skip
    assert row.tracked["config"]["retrieval"] == "rg" and row.tracked["config"]["prompt"] == "rule"
    assert row.tracked["generation"]["grid"] is None  # the other rows are no param of this one
    assert row.tracked["generation"]["model"] == params.generation.model
    assert "r2ag" not in row.tracked


def test_a_chain_row_searches_the_corpus_itself(params: Params) -> None:
    row = plan(params, "cok")
    assert row.stage == "generate" and row.grid.method == "cok" and callable(row.factory)


def test_an_r2ag_variant_is_stage_generate_r2ag(params: Params) -> None:
    row = plan(params, "rulerag_r2ag")
    assert row.stage == "generate_r2ag" and callable(row.factory)
    grid = row.grid
    assert (grid.name, grid.retrieval, grid.generator, grid.prompt, grid.rules) == (
        "rulerag_r2ag", "rg", "r2ag", "rule", "all"
    )  # fmt: skip
    assert row.tracked["r2ag"]["profiles"] is None
    assert row.tracked["r2ag"]["variants"]["rulerag_r2ag"]["retrieval"] == "rg"


def test_an_unknown_row_names_the_grid(params: Params) -> None:
    with pytest.raises(ValueError, match="not in generation.grid"):
        plan(params, "nope")


def test_a_robustness_row_must_be_listed(params: Params) -> None:
    with pytest.raises(InputError, match="not in generation.robustness_rows"):
        robust_plan("rulerag_icl", params.generation, params.index, params.retrieve)


def test_training_plans_name_the_variant_retrieval_and_params(params: Params) -> None:
    generation = params.generation
    rgft = adapter_plan("rgft", generation)
    assert rgft.retrieval == f"{generation.retriever}-rgft" and rgft.spec.prompt == "rule"
    assert rgft.tracked["variant"] == {
        "name": "rgft", "retrieval": f"{generation.retriever}-rgft", "prompt": "rule"
    }  # fmt: skip
    assert not {"grid", "api"} & set(rgft.tracked["generation"])
    with pytest.raises(InputError, match="unknown variant 'nope'"):
        adapter_plan("nope", generation)
    r2ag = r2ag_plan("r2ag_ft", generation, params.r2ag)
    assert r2ag.retrieval == f"{generation.retriever}-standard" and r2ag.spec.lora
    assert r2ag.tracked["variant"]["retrieval"] == r2ag.retrieval
    assert r2ag.tracked["generation.model"] == generation.model
    with pytest.raises(ValueError, match="unknown variant"):
        r2ag_plan("nope", generation, params.r2ag)


def test_a_robustness_row_without_its_queries_names_the_file(
    params: Params, tmp_path: Path
) -> None:
    import dataclasses

    from rulerag.layout import DataLayout

    generation = dataclasses.replace(params.generation, robustness_rows=("rulerag_icl",))
    row = robust_plan("rulerag_icl", generation, params.index, params.retrieve)
    assert row.stage == "robustness" and row.robust is not None
    assert row.tracked["config"]["retrieval"] == "rg"
    with pytest.raises(InputError, match=r"benchmark/robust\.jsonl not found: run build_benchmark"):
        row.answer(DataLayout.of(tmp_path, "toy"))
