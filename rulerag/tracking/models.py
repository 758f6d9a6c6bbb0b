"""A stage's trained models as MLflow 3 means them: logged models of their run, registered, and
the registry alias `champion` on the best version.

What `StageRun.log_model` records becomes, when the run is sent:

* a **logged model** of the run (`MlflowClient.create_logged_model`, MLflow 3's LoggedModel: the
  experiment's Models tab, the run's outputs), named after its registered model, its files
  uploaded to the logged model's own artifact location (not to the run's: one copy of the
  weights) and its MLmodel naming the run and the model id (`run_id`, `model_id`), which a model
  saved before its run existed lacks;
* its final metrics linked to it (the Models tab's metric columns);
* a new **version** of the registered model, made by `mlflow.register_model` from the logged
  model (source `models:/<model id>`; the version's download URI is the logged model's
  folder; the logged model tagged `mlflow.modelVersions`, so the UI shows it registered),
  tagged with the run's last metric values;
* the alias **`champion`** moved to the new version when the model names a `champion_metric`
  and the new version's value beats the current champion's (`moves_champion`); a version
  without the metric never takes the alias from one with it, and the first version takes it.
  `models:/<name>@champion` then loads the best model so far.

A store without a model registry keeps the run and says so in a tag instead of failing it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rulerag.tracking.names import (
    TAG_PIPELINE_RUN,
    TAG_REGISTRY_ERROR,
    TAG_STAGE_INSTANCE,
    truncate,
)

logger = logging.getLogger(__name__)

__all__ = ["CHAMPION_ALIAS", "log_logged_models", "moves_champion", "stamp_mlmodel"]

#: the registry alias on the best version of each registered model
CHAMPION_ALIAS = "champion"
#: the version tag holding a metric's value (`metric.dev_loss`)
METRIC_TAG_PREFIX = "metric."


def moves_champion(new: float | None, current: float | None, higher_is_better: bool) -> bool:
    """Whether a new version with metric value `new` takes `champion` from the version holding
    it, whose value is `current` (None: no champion yet, or it lacks the metric).

    The first version takes it; a version without the metric (or NaN) never does, unless the
    champion lacks it too; otherwise only a strictly better value does (ties keep the older
    version, so retraining on the same data does not move it)."""
    new_ok = new is not None and not math.isnan(new)
    current_ok = current is not None and not math.isnan(current)
    if not current_ok:
        return new_ok or current is None
    if not new_ok:
        return False
    assert new is not None and current is not None  # for the type checker
    return new > current if higher_is_better else new < current


def stamp_mlmodel(folder: Path, *, run_id: str, model_id: str, artifact_location: str) -> None:
    """Write the run id, model id and location into a saved model's MLmodel (saved before the
    run existed, it names neither). A new file replaces it: the old one may be a hard link."""
    from mlflow.models import Model

    mlmodel = folder / "MLmodel"
    model = Model.load(str(mlmodel))
    model.run_id, model.model_id, model.artifact_path = run_id, model_id, artifact_location
    mlmodel.unlink()
    model.save(str(mlmodel))


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def _move_champion(client: Any, name: str, version: Any, model: Mapping[str, Any]) -> None:
    """Set `champion` on `version` when `moves_champion` says so (see the module's doc)."""
    from mlflow.exceptions import MlflowException

    metric = model.get("champion_metric")
    if not metric:
        return
    tag = METRIC_TAG_PREFIX + metric
    try:
        current = client.get_model_version_by_alias(name, CHAMPION_ALIAS)
    except MlflowException:
        current = None
    current_value = None if current is None else _float(current.tags.get(tag))
    if current is not None and current_value is None:
        current_value = math.nan  # a champion without the metric: any value beats it
    new_value = _float(version.tags.get(tag))
    if moves_champion(new_value, current_value, bool(model.get("higher_is_better", True))):
        client.set_registered_model_alias(name, CHAMPION_ALIAS, version.version)
        logger.info("%s@%s is now version %s", name, CHAMPION_ALIAS, version.version)


@contextlib.contextmanager
def _global_tracking_uri(tracking_uri: str) -> Iterator[None]:
    """`MLFLOW_TRACKING_URI` set to the client's store for the block: a database store's
    registry resolves a `models:/<model id>` source through MLflow's global tracking URI, not
    its client's (mlflow/store/model_registry/sqlalchemy_store.py, "TODO: Propagate tracking
    URI"); a server resolves it itself."""
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous


def log_logged_models(
    client: Any,
    tracking_uri: str,
    run: Any,
    experiment_id: str,
    models: list[Mapping[str, Any]],
    folder_of: Callable[[str], Path],
    upload: Callable[[str, Path], None],
    last_points: list[Mapping[str, Any]],
) -> list[str]:
    """Each recorded model as a logged model of `run`, registered (module doc); returns the
    model ids. `folder_of(artifact_path)` is the saved model's folder, `upload(location,
    folder)` puts a folder's files at an artifact location, `last_points` are each metric's
    last logged point (key, value, timestamp, step). Registry failures are tagged on
    the run, not raised; a failure to log the model itself raises (the run is spooled)."""
    import mlflow
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus, Metric
    from mlflow.exceptions import MlflowException

    run_id = run.info.run_id
    kept = (TAG_STAGE_INSTANCE, TAG_PIPELINE_RUN)
    tags = {key: run.data.tags[key] for key in kept if key in run.data.tags}
    version_tags = {
        f"{METRIC_TAG_PREFIX}{m['key']}": f"{float(m['value']):.6g}"
        for m in sorted(last_points, key=lambda m: m["key"])[:90]
    }
    ids = []
    for model in models:
        name = model["name"]
        logged = client.create_logged_model(
            experiment_id, name=name, source_run_id=run_id, tags=tags
        )
        folder = folder_of(model["artifact_path"])
        stamp_mlmodel(
            folder,
            run_id=run_id,
            model_id=logged.model_id,
            artifact_location=logged.artifact_location,
        )
        upload(logged.artifact_location, folder)
        client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
        # the run's last metric points again, now naming the model: MLflow keeps one copy of
        # each point in the run and links it to the model (the Models tab's metric columns)
        linked = [
            Metric(
                m["key"],
                float(m["value"]),
                int(m["timestamp"]),
                int(m["step"]),
                model_id=logged.model_id,
                run_id=run_id,
            )
            for m in last_points
        ]
        if linked:
            client.log_batch(run_id, metrics=linked, synchronous=True)
        client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, 0)])
        ids.append(logged.model_id)
        try:
            try:
                client.create_registered_model(name, description=model.get("description") or None)
            except MlflowException as err:
                if "RESOURCE_ALREADY_EXISTS" not in str(err.error_code):
                    raise
            with _global_tracking_uri(tracking_uri):
                # mlflow.register_model, not client.create_model_version: it also tags the
                # logged model with its versions (`mlflow.modelVersions`), which MLflow's UI
                # reads to show a logged model as registered (without: "Not registered")
                version = mlflow.register_model(
                    f"models:/{logged.model_id}",
                    name,
                    await_registration_for=0,
                    tags={**version_tags, TAG_STAGE_INSTANCE: tags.get(TAG_STAGE_INSTANCE, "")},
                )
            if model.get("description"):
                version = client.update_model_version(
                    name, version.version, description=model["description"]
                )
            _move_champion(client, name, version, model)
        except MlflowException as err:
            logger.warning("model %s not registered: %s", name, err.message[:300])
            client.set_tag(run_id, TAG_REGISTRY_ERROR, truncate(str(err), 500))
            continue
        logger.info("registered %s version %s", name, version.version)
    return ids
