"""The MLflow server `make mlflow-ui` runs: MLflow's own, whose UI opens on the model-training
view in a browser that has not chosen one.

Why (issue 32, defect 2): MLflow 3.17's UI keeps one global GenAI / model-training switch. It
reads the URL's `workflowType` query, else the browser's stored choice
(`localStorage["mlflow.workflowType_v1"]`), else "genai"; an experiment's `mlflow.experimentKind`
tag no longer decides. So a fresh browser opened every experiment here on the (empty) GenAI
overview, and the query alone is lost when one follows the experiment list's links.

The fix is MLflow's supported server extension point, an app plugin (`mlflow server --app-name
rulerag-ui`, entry point group `mlflow.app` in pyproject.toml): this app is MLflow's FastAPI
app, with the page it serves at `/` (the UI's index.html) carrying one line of script that
stores "machine_learning" as the browser's choice when it has none. A choice the user makes
with the UI's switch is kept; every API route is MLflow's, untouched.
`benchmarks/mlflow_ui_check.py` checks it in a headless Chromium.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["APP_NAME", "DEFAULT_VIEW_SCRIPT", "create_app", "with_default_view"]

#: the entry point's name (pyproject.toml, `[project.entry-points."mlflow.app"]`)
APP_NAME = "rulerag-ui"
#: the UI's stored workflow choice (`useLocalStorage({key: "mlflow.workflowType", version: 1})`)
_STORAGE_KEY = "mlflow.workflowType_v1"
DEFAULT_VIEW_SCRIPT = (
    "<script>try{var k='" + _STORAGE_KEY + "';if(window.localStorage.getItem(k)===null)"
    "{window.localStorage.setItem(k,JSON.stringify('machine_learning'))}}catch(e){}</script>"
)


def with_default_view(html: str) -> str:
    """index.html with `DEFAULT_VIEW_SCRIPT` first in its head (before the UI's bundle reads
    the stored choice); unchanged when it is there already or has no head."""
    if DEFAULT_VIEW_SCRIPT in html or "<head>" not in html:
        return html
    return html.replace("<head>", "<head>" + DEFAULT_VIEW_SCRIPT, 1)


def create_app() -> Any:
    """MLflow's server app with the index page of `with_default_view` (the `mlflow.app`
    factory `mlflow server --app-name rulerag-ui` runs under uvicorn)."""
    from flask import Response
    from mlflow.server import app as flask_app
    from mlflow.server.fastapi_app import app

    index = Path(str(flask_app.static_folder)) / "index.html"
    original = flask_app.view_functions["serve"]

    def serve() -> Any:
        if not index.is_file():  # MLflow's own message (a source install without the UI)
            return original()
        return Response(with_default_view(index.read_text(encoding="utf-8")), mimetype="text/html")

    flask_app.view_functions["serve"] = serve
    return app
