"""The stage graph read from dvc.yaml: expansion, interpolation, edges, cycles.

The Airflow DAG is generated from this graph, so a mistake here means tasks that run the wrong
``dvc repro --single-item`` name or in the wrong order; the cross-check against DVC's own
parser keeps our re-implementation honest.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rulerag.orchestration.dvc_graph import (
    CycleError,
    InterpolationError,
    StageGraphError,
    StageInstance,
    _overlaps,
    build_graph,
    cmd_param_keys,
    load_yaml,
    stage_edges,
    topological_order,
)
from tests.helpers import KNOWN_DATASETS, PROJECT


def write(tmp_path: Path, text: str, name: str = "dvc.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def names(instances: list[StageInstance]) -> list[str]:
    return [i.name for i in instances]


def test_project_dvc_yaml_expands_over_every_known_dataset() -> None:
    params = load_yaml(PROJECT / "params.yaml")
    graph = build_graph(PROJECT / "dvc.yaml", params, KNOWN_DATASETS)
    ingest = {i.item: i for i in graph if i.stage == "ingest"}
    assert sorted(ingest) == sorted(KNOWN_DATASETS)  # not only params.yaml's selection
    nell = ingest["nell995"]
    assert nell.name == "ingest@nell995"
    assert nell.dataset == "nell995"
    assert nell.cmd == "python -m pipeline_steps.ingest"  # the script reads DVC_STAGE
    assert "data/nell995/kg/facts.parquet" in nell.outs
    assert "data/nell995/kg/stats.json" in nell.outs  # metrics count as outputs
    assert "rulerag/kg" in nell.deps


def test_no_project_command_interpolates_a_value() -> None:
    """Issue 28: `'${item}'` in a cmd let a dataset name holding `'` run a shell command. The
    project's commands are fixed strings; the stages read their items from DVC_STAGE."""
    dvc = load_yaml(PROJECT / "dvc.yaml")
    for name, body in dvc["stages"].items():
        cmd = (body.get("do") or body)["cmd"]
        assert "${" not in str(cmd), f"stage {name}: its cmd interpolates a value: {cmd!r}"
    assert cmd_param_keys(PROJECT / "dvc.yaml") == set()
    params = load_yaml(PROJECT / "params.yaml")
    params["datasets"] = ["y'; touch /tmp/PWNED; echo '"]
    params["retrieve"]["indexes"] = ["bm25;touch /tmp/PWNED;true"]
    with pytest.raises(StageGraphError):  # the expansion refuses the name...
        build_graph(PROJECT / "dvc.yaml", params)
    params["datasets"] = ["icews14"]
    commands = {i.cmd for i in build_graph(PROJECT / "dvc.yaml", params)}
    assert not any("PWNED" in str(c) for c in commands)  # ...and no command would carry it


def test_without_datasets_argument_params_selection_is_used(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          s:
            foreach: ${datasets}
            do:
              cmd: run ${item}
        """,
    )
    assert names(build_graph(dvc, {"datasets": ["a"]})) == ["s@a"]
    assert names(build_graph(dvc, {"datasets": ["a"]}, ["a", "b"])) == ["s@a", "s@b"]


def test_foreach_dict_key_item_fields_and_params(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          train:
            foreach:
              small: {size: 10, tag: s}
              big: {size: 99, tag: b}
            do:
              cmd: train --name ${key} --size ${item.size} --lr ${train.opt.lr} --v=${verbose}
              deps: ["data/${item.tag}"]
              outs:
                - models/${key}/model.pt
                - models/${key}/metrics.json: {cache: false}
        """,
    )
    graph = build_graph(dvc, {"train": {"opt": {"lr": 0.5}}, "verbose": True})
    assert names(graph) == ["train@small", "train@big"]
    small = graph[0]
    assert small.cmd == "train --name small --size 10 --lr 0.5 --v=true"
    assert small.deps == ["data/s"]
    assert small.outs == ["models/small/model.pt", "models/small/metrics.json"]
    assert small.item == "small" and small.dataset is None


def test_foreach_list_of_mappings_uses_indices(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          l:
            foreach: [{p: 1}, {p: 2}]
            do:
              cmd: echo ${item.p}
        """,
    )
    graph = build_graph(dvc, {})
    assert [(i.name, i.cmd) for i in graph] == [("l@0", "echo 1"), ("l@1", "echo 2")]


def test_matrix_names_and_dataset_axis(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          m:
            matrix:
              ds: ${datasets}
              cfg: [{a: 1}, {a: 2}]
              flag: [true, false]
            cmd: echo ${item.ds} ${item.cfg.a} ${item.flag} ${key}
            outs: ["out/${item.ds}/${key}.txt"]
        """,
    )
    graph = build_graph(dvc, {"datasets": ["x", "y"]})
    assert names(graph)[:4] == [
        "m@x-cfg0-true",
        "m@x-cfg0-false",
        "m@x-cfg1-true",
        "m@x-cfg1-false",
    ]
    assert len(graph) == 8
    first = graph[0]
    assert first.cmd == "echo x 1 true x-cfg0-true"
    assert first.outs == ["out/x/x-cfg0-true.txt"]
    assert {i.dataset for i in graph} == {"x", "y"}


def test_full_string_interpolation_keeps_type_and_escape_is_literal(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        r"""
        stages:
          s:
            cmd:
              - echo \${HOME}
              - echo ${n[1]}
            deps: ${inputs}
        """,
    )
    graph = build_graph(dvc, {"inputs": ["a/b", "./c/../d"], "n": [10, 20]})
    assert graph[0].cmd == ["echo ${HOME}", "echo 20"]
    assert graph[0].deps == ["a/b", "d"]  # paths are normalised


def test_vars_and_wdir(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        vars:
          - root: data
        stages:
          s:
            wdir: sub
            cmd: make
            deps: ["../${root}/in"]
            outs: [out]
        """,
    )
    graph = build_graph(dvc, {})
    assert graph[0].deps == ["data/in"]
    assert graph[0].outs == ["sub/out"]


@pytest.mark.parametrize(
    ("cmd", "message"),
    [
        ("run ${ingest.nope}", "unknown key 'ingest.nope'"),
        ("run ${missing}", "unknown key 'missing'"),
        ("run ${ingest}", "only scalars"),
        ("run ${lst[5]}", "out of range"),
    ],
)
def test_unknown_interpolation_keys_are_clear_errors(
    tmp_path: Path, cmd: str, message: str
) -> None:
    dvc = write(tmp_path, f"stages:\n  s:\n    cmd: {cmd}\n")
    with pytest.raises(InterpolationError, match=message):
        build_graph(dvc, {"ingest": {"duplicates": "drop"}, "lst": [1]})


def test_error_names_the_stage(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          s:
            foreach: [a]
            do:
              cmd: run ${item} ${nope}
        """,
    )
    with pytest.raises(InterpolationError, match=r"stages\.s@a\.cmd"):
        build_graph(dvc, {})


def test_edges_follow_deps_under_outs_in_both_directions(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          ingest:
            foreach: ${datasets}
            do:
              cmd: ingest ${item}
              outs: ["data/${item}/kg"]
          mine:
            foreach: ${datasets}
            do:
              cmd: mine ${item}
              deps: ["data/${item}/kg/facts.parquet"]
              outs: ["data/${item}/rules.tsv"]
          report:
            cmd: report
            deps: [data]
            outs: [report.md]
          other:
            cmd: other
            deps: [data2, data/a/kgx]
        """,
    )
    graph = build_graph(dvc, {"datasets": ["a", "b"]})
    edges = set(stage_edges(graph))
    assert ("ingest@a", "mine@a") in edges  # dep lies under a directory output
    assert ("ingest@b", "mine@b") in edges
    assert ("ingest@a", "mine@b") not in edges
    assert ("mine@a", "report") in edges  # directory dep holds another stage's output
    assert not any(down == "other" for _, down in edges)  # 'data2', 'kgx' are not prefixes
    order = names(graph)
    for up, down in edges:
        assert order.index(up) < order.index(down)


def test_edges_equal_the_pairwise_definition() -> None:
    """stage_edges' path index finds what comparing every dep with every out finds (equal
    paths, a dep under an out, an out under a dep, trailing slashes, `a/b-x` sorting between
    `a/b` and `a/b/c`), in the same order; the pairwise scan took seconds on the project's
    dvc.yaml, and every Airflow process parses the DAG built from it."""
    outs = ["d/a", "d/a-x", "d/b/", "d/b/c/e", "f", "g/h", "d/ab"]
    deps = ["d", "d/a", "d/a/z", "d/a-", "d/b", "d/b/c", "f/", "f/g/h", "g", "x", "d/a-x/y"]
    ups = [StageInstance(name=f"up{i}", stage="up", outs=[o]) for i, o in enumerate(outs)]
    downs = [StageInstance(name=f"down{i}", stage="down", deps=[d]) for i, d in enumerate(deps)]
    instances = [*downs[:3], *ups, *downs[3:]]
    overlaps = _overlaps
    expected = [
        (up.name, down.name)
        for down in instances
        for up in instances
        if any(overlaps(d, o) for d in down.deps for o in up.outs)
    ]
    assert stage_edges(instances) == expected
    assert ("up1", "down3") not in expected and ("up1", "down10") in expected  # sanity


def test_cycle_is_reported_with_its_path(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          a:
            cmd: a
            deps: [b.out]
            outs: [a.out]
          b:
            cmd: b
            deps: [a.out]
            outs: [b.out]
          c:
            cmd: c
            deps: [b.out]
        """,
    )
    with pytest.raises(CycleError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        build_graph(dvc, {})


def test_self_dependency_is_a_cycle(tmp_path: Path) -> None:
    dvc = write(tmp_path, "stages:\n  s:\n    cmd: s\n    deps: [x/y]\n    outs: [x]\n")
    with pytest.raises(CycleError, match="its own output"):
        build_graph(dvc, {})


def test_overlapping_outputs_are_rejected(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          a: {cmd: a, outs: [data]}
          b: {cmd: b, outs: [data/x]}
        """,
    )
    with pytest.raises(StageGraphError, match="overlapping outputs"):
        build_graph(dvc, {})


def test_missing_cmd_and_bad_foreach(tmp_path: Path) -> None:
    with pytest.raises(StageGraphError, match="no cmd"):
        build_graph(write(tmp_path, "stages:\n  s:\n    deps: [a]\n"), {})
    with pytest.raises(StageGraphError, match="list or a dict"):
        build_graph(write(tmp_path, "stages:\n  s:\n    foreach: 3\n    do: {cmd: x}\n"), {})


def test_topological_order_is_stable() -> None:
    a = StageInstance(name="a", stage="a", outs=["a"])
    b = StageInstance(name="b", stage="b", deps=["c"])
    c = StageInstance(name="c", stage="c", outs=["c"], deps=["a"])
    d = StageInstance(name="d", stage="d")
    assert names(topological_order([b, a, c, d])) == ["a", "c", "b", "d"]


def test_cmd_param_keys(tmp_path: Path) -> None:
    dvc = write(
        tmp_path,
        """
        stages:
          ingest:
            foreach: ${datasets}
            do:
              cmd: ingest ${item} --mode ${ingest.duplicates}
          m:
            matrix: {model: "${models}", n: [1, 2]}
            cmd: run ${item.model} ${opts[0]}
          plain:
            cmd: echo hello
        """,
    )
    assert cmd_param_keys(dvc) == {"datasets", "ingest.duplicates", "models", "opts.0"}


def test_expansion_matches_dvc_itself(tmp_path: Path) -> None:
    """Names, commands and outputs agree with DVC's own parser on a mixed dvc.yaml."""
    from dvc.repo import Repo

    write(
        tmp_path,
        r"""
        stages:
          m:
            matrix:
              ds: ${datasets}
              cfg: [{a: 1}, {a: 2}]
              flag: [true, false]
            cmd: echo ${item.ds} ${item.cfg.a} ${item.flag} ${key}
            outs: ["out/${item.ds}/${key}.txt"]
          d:
            foreach:
              x: {n: 1}
              y: {n: 2}
            do:
              cmd: echo ${key} ${item.n} \${literal} ${train.lr}
              metrics:
                - met/${key}.json: {cache: false}
          l:
            foreach: [{p: 1}, {p: 2}]
            do:
              cmd: echo ${item.p}
        """,
    )
    write(tmp_path, "datasets: [a, b]\ntrain:\n  lr: 0.1\n", name="params.yaml")
    repo = Repo.init(str(tmp_path), no_scm=True)
    try:
        theirs = {s.name: (s.cmd, sorted(str(o) for o in s.outs)) for s in repo.index.stages}
    finally:
        repo.close()
    ours = {
        s.name: (s.cmd, sorted(s.outs))
        for s in build_graph(tmp_path / "dvc.yaml", load_yaml(tmp_path / "params.yaml"))
    }
    assert ours == theirs


def test_every_output_survives_a_failed_run_and_is_restorable() -> None:
    """DVC deletes a stage's outputs before running it unless they persist, so a failed or
    killed run would leave none of the last good ones; every output is also cached, so
    `dvc checkout` brings back all of them, metrics and plots included (DVC's own parser)."""
    from dvc.repo import Repo

    repo = Repo(str(PROJECT))
    try:
        outs = [(stage.addressing, out) for stage in repo.index.stages for out in stage.outs]
    finally:
        repo.close()
    assert len(outs) > 40
    assert [f"{name}: {out}" for name, out in outs if not out.persist] == []
    assert [f"{name}: {out}" for name, out in outs if not out.use_cache] == []
