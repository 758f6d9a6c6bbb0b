"""Inputs the rule stages can build nothing from (issue 45): a KG from which no rule can be
mined, a rule bank that is empty, no bank at all, or no table of one, and a KG whose benchmark
would have no F_R item or no test query. Each used to publish an empty result (exit 0), or end
in a pandas or `FileNotFoundError` traceback one stage later; each is now one line that says
why and what to change, exit 2, a FAILED MLflow run and nothing published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rulerag.benchmark.build import build_benchmark
from rulerag.benchmark.settings import BuildBenchmarkSettings
from rulerag.errors import InputError
from rulerag.io import write_manifest, write_parquet
from rulerag.kg.registry import get_spec
from rulerag.kg.schema import KnowledgeGraph, make_vocab
from rulerag.kg.settings import ingest_settings
from rulerag.kg.store import read_kg
from rulerag.rules.mining import mine_rule_bank
from rulerag.rules.settings import mine_rules_settings
from rulerag.tracking import TAG_ERROR
from tests.helpers import StageProject, ingest_into, one_line_failure, stage_runs
from tests.support.synthetic_kg import synthetic_kg, write_synthetic_dataset

pytestmark = pytest.mark.slow  # an MLflow SQLite store is created per stage test


def _custom_kg(
    root: Path, project: StageProject, splits: dict[str, str], **entry: str
) -> dict[str, Any]:
    """A custom KG `mykg` from `splits` (name -> file text), ingested into `project`; returns
    the params overrides that name it."""
    source = root / "src"
    source.mkdir()
    for split, text in splits.items():
        (source / f"{split}.tsv").write_text(text)
    custom = {"mykg": {"path": str(source), **entry}}
    ingest_into(
        get_spec("mykg", ingest_settings({"custom": custom})),
        project.layout("mykg").kg,
        data_dir=None,
        download_dir=root / "dl",
    )
    return {"ingest.custom": custom}


def _build_benchmark_refuses(
    project: StageProject,
    capsys: pytest.CaptureFixture[str],
    dataset: str,
    *named: str,
    params: dict[str, Any] | None = None,
) -> None:
    """build_benchmark@`dataset` exits 2 with one line that names each of `named`, and
    publishes no benchmark."""
    import pipeline_steps.build_benchmark as stage

    assert project.run(stage, "--dataset", dataset, params=params) == 2
    one_line_failure(capsys.readouterr().err, "build_benchmark", *named)
    assert not project.layout(dataset).benchmark.exists()


def _random_links(links: int, entities: int, relations: int, seed: int = 0) -> str:
    import random

    rnd = random.Random(seed)
    return "".join(
        f"e{rnd.randrange(entities)}\tr{rnd.randrange(relations)}\te{rnd.randrange(entities)}\n"
        for _ in range(links)
    )


# -- part 1: no rule, an empty bank -------------------------------------------------------------


@pytest.mark.parametrize(
    "train",
    [
        "".join(f"e{i}\tr\te{i + 1}\n" for i in range(150)),  # one relation, no rule at all
        _random_links(400, 300, 100),  # no relation repeats a pattern
    ],
    ids=["chain", "random"],
)
def test_mine_rules_on_a_kg_without_rules_stops_and_publishes_nothing(
    train: str,
    tmp_path: Path,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It published "0 rules; bank 0 rules over 0/N relations" (exit 0), and build_benchmark
    then failed in a pandas merge."""
    import pipeline_steps.mine_rules as stage

    overrides = _custom_kg(tmp_path, stage_project, {"train": train})
    assert stage_project.run(stage, "--dataset", "mykg", params=overrides) == 2
    line = one_line_failure(
        capsys.readouterr().err,
        "mine_rules",
        "mine_rules@mykg: the rule bank is empty",
        "nothing to build a benchmark from",
        "KG mykg, splits ['train']",
        "relations with facts",
        "the static miner found no rule",
        "mine_rules.static.min_initial_support (100;",
        "min_head_coverage (0.01)",
    )
    assert "a single-relation chain" in line
    assert not stage_project.layout("mykg").rules_dir.exists()
    (run,) = stage_runs(mlflow_store, "mine_rules")
    assert run.info.status == "FAILED" and "the rule bank is empty" in run.data.tags[TAG_ERROR]


def test_mined_rules_that_no_bank_setting_keeps_name_the_bank_keys(
    tmp_path: Path, stage_project: StageProject
) -> None:
    """Rules were mined, but `mine_rules.bank` kept none: the bank's keys are named."""
    links = "".join(f"e{i}\tr\te{i + 1}\ne{i + 1}\ts\te{i}\n" for i in range(30))
    _custom_kg(tmp_path, stage_project, {"train": links})
    kg = read_kg(stage_project.layout("mykg").kg)
    section = {"static": {"min_initial_support": 0}, "bank_by_dataset": {"mykg": {}}}
    assert len(mine_rule_bank(kg, mine_rules_settings(section), "mykg").bank)  # it has rules
    section["bank_by_dataset"] = {"mykg": {"min_support": 1000}}
    with pytest.raises(InputError, match="the rule bank is empty") as caught:
        mine_rule_bank(kg, mine_rules_settings(section), "mykg")
    message = str(caught.value)
    assert "rules were mined, by body length {1: " in message
    assert "none passes mine_rules.bank with mine_rules.bank_by_dataset.mykg" in message
    assert "lengths [1], min_confidence 0.0, min_support 1000" in message


def test_the_temporal_miner_finding_no_rule_names_its_thresholds(
    tmp_path: Path, stage_project: StageProject
) -> None:
    chain = "".join(f"e{i}\tr\te{i + 1}\t{i}\n" for i in range(120))
    _custom_kg(tmp_path, stage_project, {"train": chain}, time_format="int")
    kg = read_kg(stage_project.layout("mykg").kg)
    assert kg.temporal
    with pytest.raises(InputError, match="the temporal miner found no rule") as caught:
        mine_rule_bank(kg, mine_rules_settings({"temporal": {"walks_per_relation": 5}}), "mykg")
    assert "lower mine_rules.temporal.min_rule_support (1)" in str(caught.value)
    assert "walks_per_relation (5)" in str(caught.value)


# -- part 1 (defence in depth) and part 4: the bank build_benchmark reads -----------------------


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
def test_build_benchmark_without_its_bank_names_the_stage_that_writes_it(
    manifest: bool,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A deleted rules/bank.parquet ended in a `FileNotFoundError` traceback (raised by os.stat
    where rules/manifest.json lists it, by pandas where there is no manifest)."""
    layout = stage_project.layout("toy")
    write_synthetic_dataset(layout, temporal=True)
    if manifest:
        write_manifest(layout.rules_dir)
    layout.rule_bank.unlink()
    _build_benchmark_refuses(
        stage_project,
        capsys,
        "toy",
        f"{layout.rule_bank}: no such file; it is an output of mine_rules",
        "rerun mine_rules@toy (dvc repro mine_rules@toy), then build_benchmark",
    )
    (run,) = stage_runs(mlflow_store, "build_benchmark")
    assert run.info.status == "FAILED" and "rerun mine_rules@toy" in run.data.tags[TAG_ERROR]


@pytest.mark.parametrize(
    ("bank", "says"),
    [
        (lambda bank: bank.head(0), "no rule in it, so there is nothing to build a benchmark"),
        (lambda bank: pd.DataFrame({"rule": ["x"]}), "not a rule bank: no column ['rule_id'"),
    ],
    ids=["empty", "no-bank-columns"],
)
def test_build_benchmark_refuses_a_bank_file_it_cannot_build_from(
    bank: Any,
    says: str,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An empty bank failed in pandas: `You are trying to merge on float64 and object columns
    for key 'rule_id'`; a table without the bank's columns in a `KeyError`."""
    layout = stage_project.layout("toy")
    _, mined = write_synthetic_dataset(layout, temporal=True)
    write_parquet(layout.rule_bank, bank(mined), {"stage": "mine_rules"})
    _build_benchmark_refuses(
        stage_project, capsys, "toy", f"{layout.rule_bank}: {says}", "rerun mine_rules@toy"
    )


# -- part 2: a benchmark without F_R items or test queries ---------------------------------------


def test_a_self_loop_kg_stops_build_benchmark_on_its_empty_f_r(
    tmp_path: Path,
    mlflow_store: str,
    stage_project: StageProject,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every fact a self-loop: mine_rules finds r(X, Y) <= r(Y, X), but no valid query's subject
    has a train link, so F_R came out with 0 items, silently (exit 0)."""
    import pipeline_steps.mine_rules as mine

    spans = {"train": range(0, 300), "valid": range(300, 350), "test": range(350, 400)}
    splits = {split: "".join(f"e{i}\tr\te{i}\n" for i in ids) for split, ids in spans.items()}
    overrides = _custom_kg(tmp_path, stage_project, splits)
    assert stage_project.run(mine, "--dataset", "mykg", params=overrides) == 0
    _build_benchmark_refuses(
        stage_project,
        capsys,
        "mykg",
        "build_benchmark@mykg: F_R, the retriever's fine-tuning set, is empty",
        "no query is explained by a rule in the corpus",
        "none of the 25 (query, rule) pairs of its 25 queries has an oracle document",
        "every fact of the KG is a self-loop (head = tail)",
        params=overrides,
    )
    (run,) = stage_runs(mlflow_store, "build_benchmark")
    assert run.info.status == "FAILED" and "F_R" in run.data.tags[TAG_ERROR]


def _without(kg: KnowledgeGraph, drop: pd.Series) -> KnowledgeGraph:
    return KnowledgeGraph(kg.facts[~drop].reset_index(drop=True), kg.entities, kg.relations,
                          kg.time_unit)  # fmt: skip


def test_a_test_split_no_bank_rule_explains_has_no_test_query() -> None:
    kg, bank = synthetic_kg(temporal=False)
    facts = kg.facts
    ruled = _without(kg, (facts["split"] == "test") & facts["relation"].isin([0, 1]))
    with pytest.raises(InputError, match="x: the benchmark has no test query: none of the"):
        build_benchmark(ruled, bank, BuildBenchmarkSettings(test_size=None), name="x")
    no_test = _without(kg, facts["split"] == "test")
    with pytest.raises(InputError, match="the KG has no test facts"):
        build_benchmark(no_test, bank, BuildBenchmarkSettings(test_size=None))


def test_a_kg_without_valid_queries_has_no_fine_tuning_query() -> None:
    kg, bank = synthetic_kg(temporal=False)
    no_valid = _without(kg, kg.facts["split"] == "valid")
    with pytest.raises(InputError, match="F_R, the retriever's fine-tuning set, is empty: there "
                       "is no fine-tuning query") as caught:  # fmt: skip
        build_benchmark(no_valid, bank, BuildBenchmarkSettings(test_size=None))
    assert "build_benchmark.finetune_from_train" in str(caught.value)


def test_valid_queries_about_entities_the_corpus_never_names_give_no_f_r_item() -> None:
    """The valid split's subjects are new entities: no rule points to a corpus document."""
    kg, bank = synthetic_kg(temporal=False)
    facts = kg.facts.copy()
    valid = facts["split"] == "valid"
    first, extra = len(kg.entities), int(valid.sum())
    facts.loc[valid, "head"] = pd.array(range(first, first + extra), dtype="int32")
    ids = list(range(first + extra))
    entities = make_vocab(ids, [f"Entity {i}" for i in ids], [f"e{i}" for i in ids])
    unseen = KnowledgeGraph(facts, entities, kg.relations, kg.time_unit)
    with pytest.raises(InputError, match="has an oracle document") as caught:
        build_benchmark(unseen, bank, BuildBenchmarkSettings(test_size=None))
    assert "no query's subject appears in the corpus at all" in str(caught.value)
