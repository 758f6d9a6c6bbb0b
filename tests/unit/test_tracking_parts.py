"""The parts of rulerag.tracking on their own: where artifacts of a store live (config), the
tags a run starts with (identity), the run record's result (record), the repository a client
reads artifacts through (store), the replay command (cli), and the cheap import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rulerag.tracking import config, identity, links, record, store
from rulerag.tracking.cli import main as cli_main
from rulerag.tracking.names import display_name

PROJECT_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("clean_tracking_env")


# -- config: stores and artifact locations -----------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("sqlite:////p/mlflow.db", "mlflow-artifacts:/rulerag/icews14"),
        ("postgresql+psycopg2://u:pw@db/mlflow", "mlflow-artifacts:/rulerag/icews14"),
        ("http://127.0.0.1:5000", None),
        ("https://mlflow.example", None),
        ("databricks", None),
    ],
)
def test_database_stores_get_proxied_locations_servers_choose(uri: str, expected: str) -> None:
    assert config.experiment_artifact_location(uri, "rulerag/icews14") == expected


def test_experiment_locations_are_safe_folder_names() -> None:
    location = config.experiment_artifact_location("sqlite:////p/x.db", "rulerag/my kg:..")
    assert location == "mlflow-artifacts:/rulerag/my_kg_"


def test_local_artifact_path_resolves_like_the_server(tmp_path: Path) -> None:
    """`mlflow-artifacts:/<path>` is `<destination>/<path>`, the destination being the
    project's mlartifacts/ (what `mlflow server --artifacts-destination` is given)."""
    uri = "mlflow-artifacts:/rulerag/icews14/0123abcd/artifacts/model"
    expected = tmp_path.resolve() / "mlartifacts/rulerag/icews14/0123abcd/artifacts/model"
    assert config.local_artifact_path(uri, tmp_path) == expected
    assert config.artifact_destination(tmp_path) == tmp_path.resolve() / "mlartifacts"
    # a server's own form, `mlflow-artifacts://host:port/path`, names the same path
    assert config.local_artifact_path("mlflow-artifacts://h:5000/a/b", tmp_path) == (
        tmp_path.resolve() / "mlartifacts" / "a" / "b"
    )
    # stores made before locations were proxied: the folder they name
    assert config.local_artifact_path("file:///old/mlartifacts/x", tmp_path) == Path(
        "/old/mlartifacts/x"
    )
    assert config.local_artifact_path("/old/x", tmp_path) == Path("/old/x")
    with pytest.raises(ValueError, match="leaves"):
        config.local_artifact_path("mlflow-artifacts:/a/../../etc", tmp_path)
    with pytest.raises(ValueError, match="not on this machine"):
        config.local_artifact_path("s3://bucket/a", tmp_path)


def test_server_command_serves_the_project_store_and_its_artifacts(tmp_path: Path) -> None:
    command = config.server_command(tmp_path, port=5123, workers=1)
    assert command[:4] == [sys.executable, "-m", "mlflow", "server"]

    def option(name: str) -> str:
        return command[command.index(name) + 1]

    assert option("--backend-store-uri") == config.default_tracking_uri(tmp_path)
    assert option("--artifacts-destination") == str(tmp_path.resolve() / "mlartifacts")
    assert "--serve-artifacts" in command
    assert (option("--host"), option("--port"), option("--workers")) == ("127.0.0.1", "5123", "1")
    # `make mlflow-ui`: one worker (MLflow's default 4) and no job runners (8 Huey consumers of
    # ~240 MiB each, for GenAI features): 2 processes and ~0.5 GiB instead of 15 and ~3 GiB
    default = config.server_command(tmp_path)
    assert default[default.index("--workers") + 1] == "1"
    assert config.server_env({"PATH": "/bin"})["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    mine = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true"}
    assert config.server_env(mine) == mine  # a user who wants them keeps them


def test_the_ui_server_is_the_project_app_where_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make mlflow-ui` runs MLflow's server as the `rulerag-ui` app (pyproject.toml's
    `mlflow.app` entry point), found as MLflow finds app plugins; without it, MLflow's own."""
    from mlflow.server import _find_app

    info = tmp_path / "site" / "demo-0.dist-info"  # what `pip install -e .` declares
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[mlflow.app]\nrulerag-ui = rulerag.tracking.ui_app:create_app\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    command = config.server_command(tmp_path)
    assert command[command.index("--app-name") + 1] == "rulerag-ui"
    assert _find_app("rulerag-ui") == "rulerag.tracking.ui_app:create_app"
    monkeypatch.setattr(config, "ui_app_installed", lambda: False)  # an older install
    assert "--app-name" not in config.server_command(tmp_path)


def test_the_ui_app_opens_on_the_model_training_view() -> None:
    """The UI's page carries the script that stores the model-training view as a fresh
    browser's choice (a stored choice is kept); MLflow's API is untouched. In Chromium:
    benchmarks/mlflow_ui_check.py."""
    from mlflow.server import app as flask_app

    from rulerag.tracking import ui_app

    html = "<html><head><title>MLflow</title></head></html>"
    assert ui_app.with_default_view(html).startswith("<html><head>" + ui_app.DEFAULT_VIEW_SCRIPT)
    assert ui_app.with_default_view(ui_app.with_default_view(html)).count("<script>") == 1
    assert "if(window.localStorage.getItem(k)===null)" in ui_app.DEFAULT_VIEW_SCRIPT
    original = flask_app.view_functions["serve"]
    try:
        ui_app.create_app()
        client = flask_app.test_client()
        page = client.get("/")
        assert page.status_code == 200 and page.mimetype == "text/html"
        body = page.get_data(as_text=True)
        assert ui_app.DEFAULT_VIEW_SCRIPT in body and "static-files" in body  # MLflow's page
        assert client.get("/health").get_data(as_text=True) == "OK"
    finally:
        flask_app.view_functions["serve"] = original


# -- identity: the tags a run starts with -----------------------------------------------------


def test_run_tags_name_the_execution_stage_and_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(identity.PIPELINE_RUN_ENV, "p" * 9000)
    monkeypatch.setattr(identity, "current_user", lambda: "ada")
    # `python -m pipeline_steps.retrieve` runs with argv[0] the module's file
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "pipeline_steps" / "retrieve.py")])
    tags = identity.run_tags("retrieve", "icews14", tmp_path)  # no git repository here
    assert tags == {
        "rulerag.pipeline_run": "p" * 7997 + "...",  # cut to MLflow's tag length
        "rulerag.stage": "retrieve",
        "rulerag.dataset": "icews14",
        "rulerag.stage_instance": "retrieve@icews14",
        "mlflow.user": "ada",
        "mlflow.source.name": "pipeline_steps/retrieve.py",
        "mlflow.source.type": "LOCAL",
    }
    assert identity.git_commit(tmp_path) is None


def test_a_run_under_airflow_links_back_to_its_task_and_dag_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's identity (what Airflow's task runner exports, and the DAG passes to `dvc
    repro`) becomes URLs of Airflow 3's UI routes, as tags and as the run's Markdown note."""
    run_id = "manual__2026-11-27T06:14:00+00:00"
    for key, value in {
        "AIRFLOW_CTX_DAG_ID": "rulerag",
        "AIRFLOW_CTX_DAG_RUN_ID": run_id,
        "AIRFLOW_CTX_TASK_ID": "icews14.generate_rulerag_ft",
        "AIRFLOW_CTX_TRY_NUMBER": "2",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(links.AIRFLOW_URL_ENV, "https://airflow.example.org/")
    tags = identity.run_tags("generate", "icews14", tmp_path)
    dag_run = (
        "https://airflow.example.org/dags/rulerag/runs/manual__2026-11-27T06%3A14%3A00%2B00%3A00"
    )
    task = f"{dag_run}/tasks/icews14.generate_rulerag_ft"
    assert tags["rulerag.airflow.dag_run_url"] == dag_run
    assert tags["rulerag.airflow.task_url"] == task
    assert tags["mlflow.source.type"] == "JOB"
    assert f"[icews14.generate_rulerag_ft]({task}) (try 2)" in tags["mlflow.note.content"]
    assert f"[rulerag / {run_id}]({dag_run})" in tags["mlflow.note.content"]

    monkeypatch.delenv(links.AIRFLOW_URL_ENV)
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://10.0.0.5:9090")  # Airflow's own
    assert links.airflow_task().task_url.startswith("http://10.0.0.5:9090/dags/rulerag/runs/")
    monkeypatch.delenv("AIRFLOW__API__BASE_URL")
    assert links.airflow_task().base_url == "http://127.0.0.1:8080"  # `make airflow`
    monkeypatch.setenv(links.AIRFLOW_URL_ENV, "localhost:8080")
    with pytest.raises(ValueError, match="RULERAG_AIRFLOW_URL='localhost:8080' is not an http"):
        links.airflow_task()
    monkeypatch.delenv("AIRFLOW_CTX_TASK_ID")
    assert links.airflow_task() is None  # not under Airflow: no links
    assert "rulerag.airflow.task_url" not in identity.run_tags("generate", "icews14", tmp_path)


@pytest.mark.parametrize(
    ("instance", "shown"),
    [
        ("generate@icews14-rulerag_ft", "rulerag_ft (generate)"),
        ("train_retriever@icews14-minilm-rgft", "minilm-rgft (train_retriever)"),
        ("ingest@icews14", "ingest"),
        ("report", "report"),
    ],
)
def test_run_names_put_the_distinctive_part_first(instance: str, shown: str) -> None:
    assert display_name(instance) == shown


def test_every_grid_row_is_told_apart_in_the_first_15_characters() -> None:
    """MLflow's runs table shows about 15 characters of a name at its default width:
    `ssft_retriever_s...` and `ssft_retriever_r...` looked alike (issue 43)."""
    import yaml

    params = yaml.safe_load((Path(__file__).resolve().parents[2] / "params.yaml").read_text())
    rows = list(params["generation"]["grid"])
    assert "ssft_retriever_rgft_generator" in rows
    shown = [display_name(f"generate@icews14-{row}")[:15] for row in rows]
    assert len(set(shown)) == len(rows), sorted(shown)
    assert display_name("generate@icews14-ssft_retriever_rgft_generator") == (
        "ssft_ret_rgft_gen (generate)"
    )


# -- record: the run's result -----------------------------------------------------------------


def test_last_metrics_are_each_metrics_last_step() -> None:
    run = record.RunRecord("e", "r", "s", "d", start_time=0)
    run.metrics = [
        {"key": "loss", "value": 0.5, "step": 2, "timestamp": 10},
        {"key": "loss", "value": 0.9, "step": 1, "timestamp": 20},  # logged later, earlier step
        {"key": "em", "value": 0.1, "step": 0, "timestamp": 5},
        {"key": "em", "value": 0.3, "step": 0, "timestamp": 6},  # same step: the later one
    ]
    assert run.last_metrics() == {"em": 0.3, "loss": 0.5}
    again = record.RunRecord.from_json({**run.__dict__, "spooled_at": "x", "format": 1})
    assert again == run


# -- store: the repository a client reads artifacts through -----------------------------------


def test_artifact_repository_of_a_proxied_location(tmp_path: Path) -> None:
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
    from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository

    uri = "mlflow-artifacts:/rulerag/toy/abc/artifacts"
    local = store.artifact_repository(uri, config.default_tracking_uri(tmp_path), tmp_path)
    assert isinstance(local, LocalArtifactRepository)
    assert Path(local.artifact_dir) == config.local_artifact_path(uri, tmp_path)
    served = store.artifact_repository(uri, "http://127.0.0.1:5000", tmp_path)
    assert isinstance(served, MlflowArtifactsRepository)  # the server resolves it


# -- cli ---------------------------------------------------------------------------------------


def test_replay_with_an_empty_spool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["replay", "--project-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "replayed 0 run(s)" in out and f"0 left in {tmp_path.resolve() / '.mlflow-spool'}" in out


def test_importing_tracking_does_not_import_mlflow() -> None:
    code = "import sys, rulerag.tracking; print('mlflow' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
