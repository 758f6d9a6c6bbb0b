"""Which view MLflow's UI opens an experiment on in a fresh browser (issue 32, defect 2), checked
in a real headless Chromium.

MLflow 3.17's UI keeps a global GenAI / model-training switch: the query parameter
`workflowType`, else the browser's stored choice (`localStorage["mlflow.workflowType_v1"]`),
"genai" in a fresh browser, and it wins over the experiment's `mlflow.experimentKind` tag. This
script logs a small pipeline run (a parent, two stage runs) into a throw-away project, serves it
with MLflow's plain server and then as `make mlflow-ui` does (`rulerag.tracking.ui_app`), and
opens, each time in a fresh Chromium profile, the experiment's bare URL and the experiment list,
whose link it then follows (and, on `make mlflow-ui`'s server, the URL it prints,
`rulerag.tracking.config.ui_url`). It prints where the browser landed and whether the runs table
(the pipeline run's row) or the GenAI overview shows; exit status 1 when one of `make
mlflow-ui`'s pages does not open the runs table.

    apt-get install chromium   # Debian's; or set CHROMIUM to another Chromium/Chrome
    python benchmarks/mlflow_ui_check.py

Talks to Chromium over its DevTools protocol (`websockets`, a dependency of the pinned tree).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from chromium import Browser, free_port, wait_http  # noqa: E402

from rulerag.tracking import PIPELINE_RUN_ENV, stage_run  # noqa: E402
from rulerag.tracking.config import UI_APP_NAME, server_command, ui_url  # noqa: E402


def log_demo_runs(project: Path) -> str:
    """A pipeline run of two stages on dataset `demo`; returns the experiment id."""
    os.environ[PIPELINE_RUN_ENV] = "make-20261127T070000-demo0001"
    for config in ("rulerag_ft", "standard_rag"):
        with stage_run("generate", "demo", project_dir=project) as run:
            run.set_tags({"rulerag.stage_instance": f"generate@demo-{config}"})
            run.log_metrics({"em": 0.4 if config == "rulerag_ft" else 0.2})
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    return str(client.get_experiment_by_name("rulerag/demo").experiment_id)


def plugin_path(folder: Path) -> str:
    """A folder declaring the `rulerag-ui` entry point, for a checkout whose venv was
    installed before pyproject.toml declared it (`make setup` installs it for good)."""
    info = folder / "rulerag_ui_check-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rulerag-ui-check\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        '[mlflow.app]\nrulerag-ui = "rulerag.tracking.ui_app:create_app"\n'.replace('"', "")
    )
    return str(folder)


@contextmanager
def mlflow_server(project: Path, plugin: bool) -> Iterator[str]:
    """`make mlflow-ui`'s server (`plugin`), or MLflow's plain one, on a free port."""
    port = free_port()
    command = server_command(project, port=port, workers=1)
    if "--app-name" in command:
        at = command.index("--app-name")
        del command[at : at + 2]
    env = dict(os.environ)
    if plugin:
        command += ["--app-name", UI_APP_NAME]
        extra = plugin_path(project / "plugin")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT), extra) if p)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 90)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _view(url: str, text: str) -> str:
    # the stage runs are nested under their pipeline run's parent row, named after when and
    # how it started (`11-27 07:00:00 make` for make-20261127T070000-...)
    if "11-27 07:00:00 make" in text or "rulerag_ft (generate)" in text:
        return "runs table"
    if "workflowType=genai" in url or "/overview" in url:
        return "GenAI overview"
    return "other"


def _ready(url: str, text: str) -> bool:
    return _view(url, text) != "other"


def _through_the_list(chromium: str, start: str) -> tuple[str, str]:
    """Open `start` (the experiment list), click the experiment's link; where it lands."""
    browser = Browser(chromium)
    try:
        browser.navigate(start)
        browser.settle(40, _ready)
        clicked = browser.evaluate(
            "(() => { const a = [...document.querySelectorAll('a')].find("
            "l => l.textContent.trim() === 'rulerag/demo'); if (a) a.click(); "
            "return Boolean(a); })()"
        )
        landed, text = browser.settle(40, _ready)
    finally:
        browser.close()
    return landed, _view(landed, text) if clicked else "experiment link not found"


def _fresh_open(chromium: str, url: str) -> tuple[str, str]:
    browser = Browser(chromium)  # a fresh profile each time: nothing stored
    try:
        browser.navigate(url)
        landed, text = browser.settle(40, _ready)
    finally:
        browser.close()
    return landed, _view(landed, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM") or "chromium")
    args = parser.parse_args(argv)
    chromium = shutil.which(args.chromium)
    if chromium is None:
        parser.error(f"{args.chromium!r} not found: apt-get install chromium, or --chromium PATH")
    results: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        experiment = log_demo_runs(project)
        for plugin, server in ((False, "mlflow server"), (True, "make mlflow-ui")):
            with mlflow_server(project, plugin) as base:
                bare = f"{base}/#/experiments/{experiment}"
                results[f"{server}: experiment URL"] = _fresh_open(chromium, bare)
                results[f"{server}: list, then link"] = _through_the_list(
                    chromium, f"{base}/#/experiments"
                )
                if plugin:
                    printed = ui_url(base, experiment)
                    results[f"{server}: ui_url"] = _fresh_open(chromium, printed)
    for name, (landed, view) in results.items():
        print(f"{name:36} {view:16} {landed}")
    ours = [view for name, (_url, view) in results.items() if name.startswith("make")]
    return 0 if all(view == "runs table" for view in ours) else 1


if __name__ == "__main__":
    sys.exit(main())
