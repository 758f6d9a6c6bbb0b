"""benchmarks/bench_scale.py's pure parts: the grown graph and the fitted growth exponent."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_scale as bench


def _source(folder: Path) -> Path:
    folder.mkdir()
    for split, lines in (("train", 3), ("valid", 1), ("test", 2)):
        rows = [f"A_{i}\tMake_a_visit\tB_{i}\t2014-01-0{i + 1}" for i in range(lines)]
        (folder / f"{split}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_a_grown_graph_is_k_renamed_copies_with_shared_relations_and_times(tmp_path: Path) -> None:
    source = _source(tmp_path / "src")
    assert bench.grow(source, 3, tmp_path / "out") == 3 * 6
    train = (tmp_path / "out" / "train.tsv").read_text(encoding="utf-8").splitlines()
    assert len(train) == 9 and train[0] == "A_0\tMake_a_visit\tB_0\t2014-01-01"
    assert train[3] == "A_0_#1\tMake_a_visit\tB_0_#1\t2014-01-01"
    heads = {line.split("\t")[0] for line in train}
    assert len(heads) == 9  # no entity is shared between copies
    assert {line.split("\t")[1] for line in train} == {"Make_a_visit"}


@pytest.mark.parametrize("power", [0.5, 1.0, 2.0])
def test_the_exponent_is_the_slope_of_a_power_law(power: float) -> None:
    xs = [1e5, 4e5, 1.6e6]
    assert bench.slope(xs, [3.0 * x**power for x in xs]) == pytest.approx(power)
    assert bench.slope(xs[:1], [1.0]) is None


def test_a_stage_s_instances_are_summed_and_their_peaks_maxed() -> None:
    records = [
        {"stage": "index", "factor": 1, "facts": 10, "seconds": 2.0, "peak_rss": 5, "bytes": 1,
         "ok": True},
        {"stage": "index", "factor": 1, "facts": 10, "seconds": 3.0, "peak_rss": 7, "bytes": 2,
         "ok": True},
        {"stage": "index", "factor": 4, "facts": 40, "seconds": 9.0, "peak_rss": 9, "bytes": 4,
         "ok": False},
    ]  # fmt: skip
    cells = bench.summary(records)
    assert cells == {
        ("index", "×1"): {"facts": 10, "factor": 1, "seconds": 5.0, "peak_rss": 7, "bytes": 3}
    }


def test_real_kgs_come_after_the_factors_and_stay_out_of_the_fit() -> None:
    def record(point: str | None, factor: int | None, facts: int, seconds: float) -> dict:
        return {"point": point, "stage": "ingest", "factor": factor, "facts": facts,
                "seconds": seconds, "peak_rss": 2**30, "bytes": 0, "ok": True}  # fmt: skip

    records = [
        record("yago", None, 1_500_000, 1000.0),  # far off the line: must not bend the slope
        record(None, 4, 400, 4.0),
        record(None, 1, 100, 1.0),
        record("icews14 (constants)", None, 90, 7.0),
    ]
    cells = bench.summary(records)
    assert bench.points_in_order(cells) == ["×1", "×4", "icews14 (constants)", "yago"]
    text = bench.report(records, "cmd", None, Path("/nonexistent"))
    rows = {line.split("|")[2].strip(): line for line in text.splitlines() if "| ingest" in line}
    assert rows["×4"].rstrip(" |").endswith("1.00 | 0.00")  # time exponent 1, RSS flat
    assert rows["yago"].rstrip(" |").endswith("– | –")


def test_a_set_assignment_reads_its_value_as_yaml_and_refuses_unknown_keys() -> None:
    params = {"mine_rules": {"static": {"constants": {"kinds": []}}}}
    bench.set_key(params, "mine_rules.static.constants.kinds=[ac1, zero]")
    assert params["mine_rules"]["static"]["constants"]["kinds"] == ["ac1", "zero"]
    for bad in ("mine_rules.static.constant.kinds=[]", "mine_rules.static.kind=1", "novalue"):
        with pytest.raises(ValueError, match="--set"):
            bench.set_key(params, bad)


def test_a_stage_with_variants_gets_a_row_per_variant() -> None:
    def record(instance: str, seconds: float) -> dict:
        stage = instance.split("@")[0]
        return {"stage": stage, "instance": instance, "factor": 1, "facts": 10,
                "seconds": seconds, "peak_rss": 1, "bytes": 0, "ok": True}  # fmt: skip

    records = [
        record("retrieve@scale1-bm25-rg", 5.0),
        record("retrieve@scale1-bm25-standard", 2.0),
        record("index@scale1-minilm", 7.0),
        record("apply_rules@scale1", 3.0),
    ]
    assert [bench.row_of(r) for r in records] == [
        "retrieve bm25-rg", "retrieve bm25-standard", "index minilm", "apply_rules"]  # fmt: skip
    cells = bench.summary(records)
    assert sorted({k[0] for k in cells}, key=bench.row_order) == [
        "apply_rules", "index minilm", "retrieve bm25-rg", "retrieve bm25-standard"]  # fmt: skip
    assert cells[("retrieve bm25-rg", "×1")]["seconds"] == 5.0


def test_the_prediction_extends_a_line_and_a_power_law() -> None:
    def record(stage: str, factor: int, seconds: float, gib: float) -> dict:
        return {"stage": stage, "instance": f"{stage}@scale{factor}", "factor": factor,
                "facts": 100 * factor, "seconds": seconds, "peak_rss": gib * 2**30,
                "bytes": 0, "ok": True}  # fmt: skip

    records = [record("ingest", f, 10 + 2.0 * 100 * f, 1 + 0.01 * 100 * f) for f in (1, 4, 16)]
    records += [record("retrieve", f, (100 * f) ** 2 / 1e4, 1.0) for f in (1, 4, 16)]
    lines = bench.prediction(records, 1e4).splitlines()
    ingest = [line for line in lines if line.startswith("| ingest")][0]
    retrieve = [line for line in lines if line.startswith("| retrieve")][0]
    hours = (10 + 2.0 * 1e4) / 3600
    assert f"| {hours:,.1f} h | 101 GiB |" in ingest and "linear" in ingest
    assert "| 2.8 h | 1 GiB |" in retrieve and "time exponent 2.00" in retrieve  # 1e4 s


def test_a_grid_row_s_needs_are_every_stage_upstream_of_generate() -> None:
    """`--stages generate` runs GENERATE_NEEDS first: every stage the curve measures that a
    `generate` instance depends on, directly or not, by dvc.yaml's graph (apply_rules' answers
    were missing: a fresh copy's row failed on them)."""
    from rulerag.orchestration.dvc_graph import build_graph, load_yaml, stage_edges
    from tests.helpers import PROJECT

    params = load_yaml(PROJECT / "params.yaml")
    graph = build_graph(PROJECT / "dvc.yaml", params, ["icews14"])
    stage_of = {instance.name: instance.stage for instance in graph}
    ups: dict[str, set[str]] = {}
    for up, down in stage_edges(graph):
        ups.setdefault(down, set()).add(up)
    row = next(i.name for i in graph if i.stage == "generate")
    upstream, todo = set(), [row]
    while todo:
        for up in ups.get(todo.pop(), ()):
            if up not in upstream:
                upstream.add(up)
                todo.append(up)
    needed = {stage_of[name] for name in upstream} & set(bench.STAGES)
    first = {"ingest", "mine_rules", "build_benchmark"}  # the curve's first stages, measured first
    assert needed - first == set(bench.GENERATE_NEEDS)
