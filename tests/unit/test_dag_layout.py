"""The Airflow DAG's layout (rulerag/orchestration/dag_layout.py): worked out from dvc.yaml and
params.yaml as the DAG needs it, kept in a file and worked out again only when an input
changed, and the run's selection as task ids to skip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rulerag.kg.ingest import MIRROR_ENV
from rulerag.orchestration import dag_layout as layout_module
from rulerag.orchestration.assets import ASSET_STAGES
from rulerag.orchestration.dag_layout import (
    LAYOUT_FILE,
    DagLayout,
    build_layout,
    dag_layout,
    unselected_task_ids,
)
from rulerag.orchestration.dvc_graph import build_graph
from rulerag.orchestration.run_plan import plan_run
from rulerag.params import parse_params, read_params_file

PROJECT = Path(__file__).resolve().parents[2]
KNOWN = ("fb15k237", "icews14", "nell995", "wiki", "yago")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """dvc.yaml and params.yaml of the project, in a folder of their own."""
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(PROJECT / name, tmp_path / name)
    return tmp_path


def test_the_layout_has_every_known_datasets_instances_grouped(project: Path) -> None:
    env = {MIRROR_ENV: "/mirror"}
    layout = build_layout(project, env)
    params = read_params_file(project / "params.yaml")
    instances = build_graph(project / "dvc.yaml", params, parse_params(params).known_datasets())
    assert layout.datasets == KNOWN
    assert [t.instance for t in layout.tasks] == [i.name for i in instances]
    assert layout.stages[:3] == ("ingest", "mine_rules", "build_benchmark")
    assert layout.root_stages == ("ingest",)
    by = layout.by_instance()
    assert by["ingest@icews14"].full_task_id == "icews14.ingest"
    assert by["generate@icews14-rulerag_ft"].full_task_id == "icews14.generate.rulerag_ft"
    assert by["mine_rules@icews14"].upstream == ("ingest@icews14",)
    assert by["ingest@icews14"].upstream == ()
    assert (
        "dvc" not in by["ingest@icews14"].cmd
        and "pipeline_steps.ingest" in by["ingest@icews14"].cmd
    )


def test_only_the_named_stages_outputs_are_assets_named_after_their_dataset(
    project: Path,
) -> None:
    layout = build_layout(project, {MIRROR_ENV: "/mirror"})
    outlets = {t.instance: t.outlet for t in layout.tasks if t.outlet is not None}
    assert len(outlets) == len(ASSET_STAGES) * len(KNOWN)  # 20, not 165
    by = layout.by_instance()
    kg = by["ingest@nell995"].outlet
    assert kg is not None and kg.name == "nell995/kg"
    assert kg.uri == (project / "data/nell995/kg").as_uri()
    assert by["mine_rules@nell995"].outlet.name == "nell995/rule_bank"  # type: ignore[union-attr]
    assert by["report@nell995"].outlet.name == "nell995/report"  # type: ignore[union-attr]
    assert by["index@nell995-bm25"].outlet is None
    # every asset name starts with its dataset: the Assets page's search is a name prefix
    assert all(o.name.split("/")[0] in KNOWN for o in outlets.values())
    # inlets: the upstream's asset, and for ingest its KG mirror
    assert by["mine_rules@nell995"].inlets == (kg,)
    (mirror,) = by["ingest@nell995"].inlets
    assert mirror.name == "nell995/kg_mirror"
    assert mirror.uri == Path("/mirror/nell-995").as_uri()
    assert layout.mirrors["nell995"] == "/mirror/nell-995"


def test_the_layout_is_kept_and_worked_out_again_when_an_input_changes(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    real = layout_module.build_layout

    def counting(project: Path, env: dict[str, str], key: str = "") -> DagLayout:
        built.append(key)
        return real(project, env, key)

    monkeypatch.setattr(layout_module, "build_layout", counting)
    env = {MIRROR_ENV: "/mirror"}
    first = dag_layout(project, env)
    assert (project / LAYOUT_FILE).is_file() and len(built) == 1
    assert dag_layout(project, env) == first and len(built) == 1  # read back
    # the mirror setting, params.yaml and dvc.yaml are inputs
    other = dag_layout(project, {MIRROR_ENV: "/other"})
    assert other.mirrors["wiki"] == "/other/wiki" and first.mirrors["wiki"] == "/mirror/wiki"
    assert len(built) == 2
    params = project / "params.yaml"
    params.write_text(params.read_text() + "\n# a comment\n")
    dag_layout(project, {MIRROR_ENV: "/other"})
    assert len(built) == 3
    # a damaged file is worked out again, not an error
    (project / LAYOUT_FILE).write_text("{not json")
    assert dag_layout(project, {MIRROR_ENV: "/other"}) == other
    assert len(built) == 4
    assert DagLayout.from_json((project / LAYOUT_FILE).read_text()) == other


def test_unselected_tasks_are_the_ones_the_run_plan_does_not_select(
    project: Path,
) -> None:
    layout = build_layout(project, {})
    (project / "params.yaml").write_text(
        (project / "params.yaml")
        .read_text()
        .replace("datasets:\n  - icews14", "datasets:\n  - nell995")
    )
    assert read_params_file(project / "params.yaml")["datasets"] == ["nell995"]
    ids = {t.full_task_id for t in layout.tasks}
    skipped = set(
        unselected_task_ids(
            layout, plan_run(project, {"stages": ["ingest", "mine_rules"]}).selected
        )
    )
    assert ids - skipped == {"nell995.ingest", "nell995.mine_rules"}
    everything = set(unselected_task_ids(layout, plan_run(project, {}).selected))
    assert {t for t in ids - everything} == {
        t.full_task_id for t in layout.tasks if t.dataset == "nell995"
    }


def test_the_mirror_variable_is_the_kg_codes() -> None:
    assert layout_module._MIRROR_ENV == MIRROR_ENV


def test_known_datasets_match_params(project: Path) -> None:
    params = read_params_file(project / "params.yaml")
    assert tuple(sorted(parse_params(params).known_datasets())) == KNOWN
