"""One run plan for every way the pipeline runs: the Airflow DAG, the KFP pipeline, `make run`.

A run starts from the project's params.yaml and a conf (`{"datasets": [...], "stages": [...],
"params": {...}, "force": [...]}`, each empty by default: "as params.yaml has it"). Working out
what that run is used to be written twice, once in the DAG file and once in the KFP tasks, and
the two drifted (which fields count as empty, which datasets are known, where the conf was
applied). `plan_run` is the one implementation:

* the conf checked as a whole (`run_conf.validate_run_conf`: every problem at once, with the
  project's settings schema and the rules between sections, string values that reach a stage's
  shell command checked as plain tokens);
* the run's params.yaml as text, the conf applied to a private copy as `dvc exp run -S` would
  (comments kept; the project's file is never written);
* the stage instances the run executes, in dvc.yaml's dependency order: those DVC generates from
  the run's params.yaml, of the `stages` asked for;
* the environment its stage commands run in (`stage_env`: the project interpreter's bin/ first
  on PATH, the MLflow run tag shared by all its stages).

What each orchestrator adds is its own: Airflow a run copy and task skips, KFP a run state
folder checked against the compiled pipeline, `make run` nothing (it plans the empty conf, which
checks params.yaml and the environment, and prints what `dvc repro` will consider).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONF_FIELDS",
    "PIPELINE_RUN_ENV",
    "PROJECT_ENV",
    "RunPlan",
    "main",
    "plan_run",
    "project_dir",
    "stage_env",
    "without_empty_fields",
]

#: the fields of a run conf (the Airflow trigger form's, the KFP pipeline's parameters)
CONF_FIELDS = ("datasets", "stages", "params", "force")
#: the project checkout the orchestrator works on (tests point it at a copy)
PROJECT_ENV = "RULERAG_PROJECT_DIR"
#: the MLflow `rulerag.pipeline_run` tag shared by a run's stages (tracking/identity.py reads it)
PIPELINE_RUN_ENV = "RULERAG_PIPELINE_RUN"


def project_dir(env: Mapping[str, str] | None = None, default: Path | None = None) -> Path:
    """The project checkout: RULERAG_PROJECT_DIR when set, else `default` (the DAG file's
    parent folder), else the working directory (a KFP task's image has the project in /app);
    it must hold dvc.yaml."""
    env = os.environ if env is None else env
    path = Path(env.get(PROJECT_ENV) or default or os.getcwd()).resolve()
    if not (path / "dvc.yaml").is_file():
        raise ValueError(
            f"{path} holds no dvc.yaml: set {PROJECT_ENV} to the project checkout to run from"
        )
    return path


def stage_env(run_tag: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a run's stage commands: `env` (default: this process's) with this
    interpreter's bin/ first on PATH (`dvc` and `python -m pipeline_steps...` are the
    project's), the run's MLflow tag when it has one, and DVC's analytics off."""
    out = dict(os.environ if env is None else env)
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), out.get("PATH", "")])
    if run_tag:
        out[PIPELINE_RUN_ENV] = run_tag
    out.setdefault("DVC_NO_ANALYTICS", "1")
    return out


def without_empty_fields(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """A conf without its untouched or cleared fields (`[]`, `{}`, null, or absent): they mean
    "as params.yaml has it". Other keys stay, for the validator to name."""
    return {
        key: value
        for key, value in dict(conf or {}).items()
        if not (key in CONF_FIELDS and value in ([], {}, None, ()))
    }


@dataclass(frozen=True)
class RunPlan:
    """What one run is, whichever orchestrator runs it (`plan_run`)."""

    #: the MLflow run tag of its stages (Airflow's run id, `kfp-<run id>`); "" : none set
    run_tag: str
    #: the run's params.yaml, as text
    params_text: str
    #: whether that text differs from the project's params.yaml
    changed: bool
    #: the datasets it runs (its params.yaml's `datasets`)
    datasets: tuple[str, ...]
    #: the dvc.yaml stages it runs; None: every stage
    stages: tuple[str, ...] | None
    #: the stages whose instances run with `dvc repro --force`
    force: tuple[str, ...]
    #: the conf's params overrides (dotted key -> value)
    params: Mapping[str, Any] = field(default_factory=dict)
    #: the stage instances it executes, in dvc.yaml's dependency order
    selected: tuple[str, ...] = ()

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of this run's stage commands (`stage_env`)."""
        return stage_env(self.run_tag, base)

    def runs(self, instance: str) -> bool:
        """Whether this run executes stage instance `instance`."""
        return instance in self.selected

    def forces(self, stage: str) -> bool:
        """Whether `stage`'s instances run with `dvc repro --force`."""
        return stage in self.force

    def summary(self) -> dict[str, Any]:
        """The plan as JSON-ready data, without the params text (an XCom, a log line)."""
        data = asdict(self)
        del data["params_text"]
        return {
            **data,
            "datasets": list(self.datasets),
            "stages": None if self.stages is None else list(self.stages),
            "force": list(self.force),
            "params": dict(self.params),
            "selected": list(self.selected),
        }


def _applied(params_text: str, run_conf: Any) -> tuple[str, bool, dict[str, Any]]:
    """params.yaml's text with the run conf applied (`run_conf.apply_run_conf`, on a private
    copy: the project's file is never written), whether it changed, and the result read back
    as every stage reads params.yaml (`params.read_params_file`)."""
    from rulerag.orchestration.run_conf import apply_run_conf
    from rulerag.params import read_params_file

    with tempfile.TemporaryDirectory(prefix="rulerag-plan-") as scratch:
        path = Path(scratch) / "params.yaml"
        path.write_text(params_text, encoding="utf-8")
        changed = apply_run_conf(path, run_conf)
        return path.read_text(encoding="utf-8"), changed, read_params_file(path)


def plan_run(
    project: Path,
    conf: Mapping[str, Any] | None,
    run_tag: str = "",
    datasets_allowed: Collection[str] | None = None,
) -> RunPlan:
    """The plan of a run of `project` with `conf`; ValueError naming every problem of the conf.

    `datasets_allowed`: the datasets the run may name (default: those params.yaml knows, its
    registry and `ingest.custom`); the KFP pipeline passes the ones it was compiled for."""
    from rulerag.orchestration.dvc_graph import build_graph, cmd_param_keys, load_yaml
    from rulerag.orchestration.run_conf import validate_run_conf
    from rulerag.params import parse_params, read_params_file

    dvc_yaml, params_yaml = project / "dvc.yaml", project / "params.yaml"
    current = read_params_file(params_yaml)
    if datasets_allowed is None:
        datasets_allowed = parse_params(current, str(params_yaml)).known_datasets()
    run_conf = validate_run_conf(
        without_empty_fields(conf),
        current,
        datasets_allowed,
        cmd_keys=cmd_param_keys(dvc_yaml),
        stage_names=[str(name) for name in load_yaml(dvc_yaml).get("stages") or {}],
    )
    text, changed, written = _applied(params_yaml.read_text(encoding="utf-8"), run_conf)
    datasets = tuple(str(d) for d in written.get("datasets") or [])
    stages = None if run_conf.stages is None else tuple(run_conf.stages)
    selected = tuple(
        inst.name
        for inst in build_graph(dvc_yaml, written, list(datasets))
        if stages is None or inst.stage in stages
    )
    return RunPlan(
        run_tag=run_tag,
        params_text=text,
        changed=changed,
        datasets=datasets,
        stages=stages,
        force=tuple(run_conf.force),
        params=dict(run_conf.params),
        selected=selected,
    )


def main(argv: list[str] | None = None) -> int:
    """`make run`'s first step: check params.yaml as a whole (every section, key, type, range
    and dataset name: a typo fails in seconds, not after the stages before the one that reads
    it), plan a run of the project (the empty conf unless --conf says otherwise), check the
    environment it would run in, and print the plan; exit 2 naming the problem."""
    from rulerag.orchestration.params_check import check_params, environment_ready
    from rulerag.orchestration.run_conf import RunConf
    from rulerag.params import read_params_file
    from rulerag.settings import SettingsError

    parser = argparse.ArgumentParser(description="Check params.yaml and plan a run.")
    parser.add_argument("--project-dir", type=Path, default=None)
    parser.add_argument("--conf", default="{}", help="a run conf as JSON (default: none)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = parser.parse_args(argv)
    where = "params.yaml"
    try:
        project = project_dir(default=args.project_dir)
        where = str(project / "params.yaml")
        checked = check_params(read_params_file(where), where)
        plan = plan_run(project, json.loads(args.conf), os.environ.get(PIPELINE_RUN_ENV, ""))
        if plan.changed:
            checked = check_params(_applied(plan.params_text, RunConf())[2], where)
    except (ValueError, SettingsError, OSError) as err:
        print(f"{where}: invalid: {err}", file=sys.stderr)
        return 2
    if not environment_ready(checked, where):
        return 2
    if args.json:
        print(json.dumps(plan.summary(), indent=1))
        return 0
    stages = "" if plan.stages is None else f" (stages {', '.join(plan.stages)})"
    print(
        f"{where}: valid; the run: {len(plan.selected)} stage instances of "
        f"{', '.join(plan.datasets) or 'no dataset'}{stages}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
