"""rulerag/serving/cli.py (`make serve`, `python -m rulerag.serving`): every value checked before
the model loads, the model loaded once, uvicorn run in this process with one worker."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulerag.errors import InputError
from rulerag.serving import cli
from tests.support.served_model import FakeServedModel, fake_loading

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "uri",
    [
        "models:/rulerag-icews14@champion",
        "models:/rulerag-icews14/3",
        "models:/rulerag-icews14-generator-rgft@best_2",
    ],
)
def test_registered_model_uris_pass(uri: str, tmp_path: Path) -> None:
    assert cli.check_model_uri(uri, tmp_path) == uri


def test_a_folder_passes_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "served").mkdir()
    assert cli.check_model_uri("served", tmp_path) == str(tmp_path / "served")


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("models:/", "give models:/<name>@<alias>"),
        ("models:/@champion", "the model name '' is not a registered name"),
        ("models:/rulerag icews14@champion", "is not a registered name"),
        ("models:/rulerag-icews14@", "the alias '' is not an alias"),
        ("models:/rulerag-icews14@cham;pion", "is not an alias"),
        ("models:/rulerag-icews14/0", "the version '0' is not a version number"),
        ("models:/rulerag-icews14/latest", "the version 'latest' is not a version number"),
        ("models:/rulerag-icews14/3/extra", "give models:/<name>@<alias>"),
        ("models:/-x@champion", "is not a registered name"),
        ("runs:/abc/model", "give models:/<name>@<alias>"),
        ("s3://bucket/model", "give models:/<name>@<alias>"),
        ("no-such-folder", "no such folder"),
    ],
)
def test_other_uris_are_refused_saying_the_forms(uri: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--model") as err:
        cli.check_model_uri(uri, tmp_path)
    assert says in str(err.value)


def test_the_default_model_is_the_datasets_champion() -> None:
    assert cli.default_model_uri("icews14") == "models:/rulerag-icews14@champion"
    with pytest.raises(InputError, match="invalid dataset name"):
        cli.default_model_uri("icews-14")


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What main loaded and served: load_served's arguments and uvicorn.run's."""
    import uvicorn

    seen: dict[str, Any] = {}
    model = FakeServedModel()
    loading = fake_loading(model)

    def load_served(uri: str, project_dir: Path) -> FakeServedModel:
        seen["load"] = (uri, project_dir)
        return model

    loading.load_served = load_served  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rulerag.serving.loading", loading)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, run=kw))
    return seen


def params_file(tmp_path: Path, **serve: Any) -> Path:
    """The project's params.yaml with `serve` changed by `serve`."""
    values = yaml.safe_load((PROJECT / "params.yaml").read_text(encoding="utf-8"))
    values["serve"] = {**values.get("serve", {}), **serve}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_main_loads_once_then_serves_in_this_process(
    runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    params = params_file(tmp_path, port=port, queue=3)
    assert cli.main(["--params", str(params)]) == 0
    assert runs["load"] == ("models:/rulerag-icews14@champion", tmp_path)
    assert runs["run"] == {"host": "127.0.0.1", "port": port, "workers": 1, "log_level": "info"}
    assert runs["app"].title == "RuleRAG"
    err = capsys.readouterr().err
    assert f"at http://127.0.0.1:{port}/ (JSON: POST http://127.0.0.1:{port}/invocations)" in err


def test_the_command_line_overrides_host_port_and_model(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    port = free_port()
    argv = ["--params", str(params_file(tmp_path)), "--port", str(port), "--host", "127.0.0.1"]
    assert cli.main([*argv, "--dataset", "wiki"]) == 0
    assert runs["load"][0] == "models:/rulerag-wiki@champion"
    assert runs["run"]["port"] == port
    assert cli.main([*argv, "--model", "models:/rulerag-icews14/2"]) == 0
    assert runs["load"][0] == "models:/rulerag-icews14/2"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--port", "80"], "--port: Input should be greater than or equal to 1024 (got 80)"),
        (["--host", "bad host"], "--host: Value error, 'bad host' is neither an IP address"),
        (["--model", "models:/x/y"], "the version 'y' is not a version number"),
        (["--dataset", "../etc"], "invalid dataset name '../etc'"),
    ],
)
def test_a_bad_value_stops_before_the_model_loads(
    runs: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    says: str,
) -> None:
    assert cli.main(["--params", str(params_file(tmp_path)), *argv]) == 2
    assert says in capsys.readouterr().err
    assert "load" not in runs and "run" not in runs


def test_a_bad_params_file_and_a_taken_port_stop_before_the_model_loads(
    runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--params", str(params_file(tmp_path, queue=-1))]) == 2
    assert "serve.queue" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["--params", str(params_file(tmp_path)), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert "load" not in runs


def test_a_model_the_registry_lacks_is_one_line(
    runs: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

    def missing(uri: str, project_dir: Path) -> Any:
        raise MlflowException("Registered Model with name=rulerag-icews14 not found",
                              RESOURCE_DOES_NOT_EXIST)  # fmt: skip

    monkeypatch.setattr(sys.modules["rulerag.serving.loading"], "load_served", missing)
    params = params_file(tmp_path, port=free_port())
    assert cli.main(["--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert "models:/rulerag-icews14@champion: Registered Model with name=" in err
    assert "Traceback" not in err and "run" not in runs


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_serve_passes_only_what_the_command_line_gives() -> None:
    """HOST and PORT default to serve-llm's 127.0.0.1:8000 in the Makefile: `make serve`
    passes them only when given on make's command line, else params.yaml's `serve` decides."""

    def dry(*args: str) -> str:
        done = subprocess.run(
            ["make", "-n", "--no-print-directory", "-C", str(PROJECT), "-o",
             f"{PROJECT}/.venv/.installed", "serve", *args],
            capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", "PORT": "9"},
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    assert dry().split() == [".venv/bin/python", "-m", "rulerag.serving", "--params", "params.yaml"]
    assert dry("PORT=8051", "MODEL=models:/rulerag-icews14/3").split()[-4:] == [
        "--model", "'models:/rulerag-icews14/3'", "--port", "'8051'",
    ]  # fmt: skip
