"""The registered RuleRAG model, loaded for `make serve`: a `models:/` URI or a model folder.

`models:/rulerag-icews14@champion` (an alias) or `models:/rulerag-icews14/3` (a version) is
resolved in the project's own MLflow store (`rulerag.tracking.config`: its proxied artifact
locations are files under mlartifacts/, found without a tracking server), or through
`MLFLOW_TRACKING_URI` when it names a server (`make mlflow-ui`). The model is then loaded with
MLflow's own `mlflow.pyfunc.load_model`, so the page answers exactly what `mlflow models serve`
of the same version answers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rulerag.errors import InputError
from rulerag.serving.questions import check_form
from rulerag.tracking.config import default_tracking_uri, local_artifact_path

__all__ = ["MODEL_URI", "LoadedModel", "ResolvedModel", "load_served", "resolve_model"]

#: `models:/<name>@<alias>` or `models:/<name>/<version>` (MLflow's registered-model names are
#: freer; this project's are `rulerag-<dataset>[-...]`)
MODEL_URI = re.compile(
    r"^models:/(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]{0,127})"
    r"(?:@(?P<alias>[A-Za-z0-9_\-]{1,64})|/(?P<version>[1-9][0-9]{0,8}))$"
)


@dataclass(frozen=True)
class ResolvedModel:
    """A model folder and the words that say which model it is."""

    folder: Path
    title: str


def _registered(uri: str, project_dir: Path) -> ResolvedModel:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    found = MODEL_URI.fullmatch(uri)
    if not found:
        raise InputError(
            f"model {uri[:200]!r}: expected models:/<name>@<alias>, models:/<name>/<version> "
            "or a model folder"
        )
    name, alias, number = found["name"], found["alias"], found["version"]
    tracking = os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(project_dir)
    client = MlflowClient(tracking_uri=tracking)
    try:
        version = (
            client.get_model_version_by_alias(name, alias)
            if alias
            else client.get_model_version(name, number)
        )
        download = client.get_model_version_download_uri(name, version.version)
    except MlflowException as err:
        raise InputError(
            f"model {uri}: not in the MLflow store {tracking} ({err.message.splitlines()[0]}); "
            "`make run` registers rulerag-<dataset> (stage package_model)"
        ) from None
    title = f"{uri} (version {version.version})"
    if tracking.startswith(("http://", "https://")):
        import mlflow.artifacts

        folder = Path(mlflow.artifacts.download_artifacts(f"models:/{name}/{version.version}"))
    else:
        folder = local_artifact_path(download, project_dir)
    return ResolvedModel(folder, title)


def resolve_model(uri: str, project_dir: Path) -> ResolvedModel:
    """The folder of the model `uri` names (a `models:/` URI or a folder with an MLmodel)."""
    if uri.startswith("models:/"):
        resolved = _registered(uri, project_dir)
    else:
        resolved = ResolvedModel(Path(uri), str(uri))
    if not (resolved.folder / "MLmodel").is_file():
        raise InputError(f"model {uri}: {resolved.folder} holds no MLflow model (no MLmodel)")
    return resolved


@dataclass
class LoadedModel:
    """The registered model as `make serve` serves it: its pyfunc, what it is called, and the
    RuleRAG test queries a person may pick from."""

    title: str
    pyfunc: Any
    examples: list[dict[str, str]] = field(default_factory=list)

    def predict(self, inputs: Sequence[Any]) -> list[dict[str, Any]]:
        """The pyfunc's answers; each input's form is checked first (MLflow's schema step
        drops a key it does not know without a word), and a bad input is an `InputError`."""
        from mlflow.exceptions import MlflowException

        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
            raise InputError("expected a list of inputs")
        for i, given in enumerate(inputs):
            check_form(given, f"input {i + 1}")
        try:
            return list(self.pyfunc.predict(list(inputs)))
        except MlflowException as err:
            if err.get_http_status_code() == 400:
                raise InputError(err.message) from None
            raise


def load_served(uri: str, project_dir: Path) -> LoadedModel:
    """The model `uri` names, loaded with `mlflow.pyfunc.load_model`."""
    from rulerag.generation.generators import passive_openmp

    passive_openmp()
    import mlflow.pyfunc

    resolved = resolve_model(uri, project_dir)
    pyfunc = mlflow.pyfunc.load_model(str(resolved.folder))
    answerer = getattr(pyfunc.unwrap_python_model(), "answerer", None)
    examples = list(getattr(answerer, "examples", []))
    return LoadedModel(resolved.title, pyfunc, examples)
