"""What the tasks of the Kubeflow pipeline do, in the project's interpreter, without kfp.

`kfp_pipeline.py` compiles dvc.yaml's graph into a KFP v2 pipeline whose components only start
`python -m rulerag.orchestration.kfp_tasks <task> ...` (the project's interpreter: on a
cluster the image's, locally the project venv's, while KFP's executor runs in the KFP SDK's
venv), so a task does the same in `kfp.local`, in a pod and in a unit test. `graph` is what
the compiler reads: the stage instances, their commands and edges (`dvc_graph`), for datasets
checked against params.yaml's registry, which needs the whole library.

- `prepare` (first): validates the run's `datasets`, `stages` and `params` overrides with the
  code that checks an Airflow run conf (`run_conf.validate_run_conf`), and writes what every
  stage task starts from into the state folder (a KFP output artifact): the run's params.yaml,
  the project's dvc.lock, the commit and the stage instances this run executes. It pushes the
  project's cached outputs to the DVC remote, as the DAG's `apply_conf` does in workspaces mode.
- `run_stage` (one task per stage instance): `dvc repro --single-item <instance>` in a
  workspace of its own that pulls its inputs from the DVC remote and pushes its outputs there
  (`workspaces.run_in_workspace`, the DAG's workspaces mode); returns its dvc.lock entry twice:
  whole (`entry`, for `collect`) and cut to what a downstream workspace pulls by (`pull`: its
  command and outs).
- `collect` (last, in links of a few stage tasks each, see below): the run's dvc.lock (the
  state's with every entry of the run put in), as an artifact; on request, also written into
  the project with its outputs pulled there (`workspaces.collect`), so a local run ends as a
  serial `dvc repro` leaves the project. Only when the entries' params are the project's
  params.yaml's: a run with `params` overrides would leave a dvc.lock that disagrees with
  params.yaml (`dvc status`: params modified), so its lock stays in the artifact, whose path
  the summary names (`lock`, beside the run's params.yaml, `params`).

dvc.lock entries travel between tasks as KFP string parameters: one token per entry, zlib-
compressed JSON in URL-safe base64 (`pack_entries`). KFP substitutes an upstream task's output
into a downstream input verbatim (`kfp.local` even inside the JSON it hands the executor), so a
token must hold no quote, brace or space; several upstream tokens arrive joined by spaces.
KFP hands a task its inputs on its command line, where Linux caps one argument at 128 KiB, so
no task takes every entry of a run at once: a stage task takes its upstreams' `pull` tokens
(hundreds of bytes each), and `collect` is a chain of links, each adding the whole entries of a
few stage tasks to the lock the previous link wrote (an artifact: a file, not an argument).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import re
import sys
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from rulerag.orchestration import run_plan
from rulerag.orchestration.dag_settings import DagSettings
from rulerag.orchestration.dvc_graph import build_graph, stage_edges
from rulerag.orchestration.workspaces import (
    collect as collect_into_project,
)
from rulerag.orchestration.workspaces import (
    head_commit,
    overlay_lock,
    params_disagreeing,
    push_outputs,
    read_lock_entries,
    run_in_workspace,
)
from rulerag.params import parse_params, read_params_file
from rulerag.settings import SettingsError, check_dataset_name

__all__ = [
    "PROJECT_ENV",
    "RUN_TAG_PREFIX",
    "StateError",
    "collect",
    "graph",
    "main",
    "params_disagreeing",
    "pack_entries",
    "prepare",
    "project_dir",
    "run_stage",
    "unpack_entries",
]

log = logging.getLogger(__name__)

#: the project checkout a task works from (its `.dvc/config` names the remote; workspaces are
#: cloned from its git repository unless RULERAG_GIT_SOURCE names another); default: the
#: working directory (the images' /app)
PROJECT_ENV = run_plan.PROJECT_ENV
#: MLflow's `rulerag.pipeline_run` tag of a KFP run's stage runs: this prefix and the KFP run id
RUN_TAG_PREFIX = "kfp-"
_TOKEN_PREFIX = "e1."  # a format version, so another encoding can be told apart
_STATE_PARAMS, _STATE_LOCK, _STATE_RUN = "params.yaml", "dvc.lock", "run.json"
_LINK_RAN = "ran.json"  # a collect link's list of the instances the run finished so far

Echo = Callable[[str], None]


class StateError(RuntimeError):
    """A task's inputs do not fit together (a token that is no entry, a run state missing)."""


# --------------------------------------------------------------------------------------------
# dvc.lock entries as KFP string parameters
# --------------------------------------------------------------------------------------------


def pack_entries(entries: Mapping[str, Any]) -> str:
    """One token for `entries` (instance name -> dvc.lock entry); "" for none."""
    if not entries:
        return ""
    raw = json.dumps(dict(entries), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return _TOKEN_PREFIX + base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode("ascii")


def unpack_entries(tokens: str) -> dict[str, Any]:
    """The entries of space-separated tokens (`pack_entries`); a token that is none fails."""
    entries: dict[str, Any] = {}
    for token in tokens.split():
        if not token.startswith(_TOKEN_PREFIX):
            raise StateError(f"not a dvc.lock entry token: {token[:40]!r}")
        try:
            raw = zlib.decompress(base64.urlsafe_b64decode(token[len(_TOKEN_PREFIX) :]))
            data = json.loads(raw)
        except (ValueError, zlib.error) as err:
            raise StateError(f"a dvc.lock entry token does not decode: {err}") from None
        if not isinstance(data, dict):
            raise StateError("a dvc.lock entry token holds no mapping")
        entries.update(data)
    return entries


# --------------------------------------------------------------------------------------------
# Where a task runs
# --------------------------------------------------------------------------------------------


def project_dir(env: Mapping[str, str] | None = None) -> Path:
    """The project checkout of this task (RULERAG_PROJECT_DIR, else the working directory, the
    images' /app); StateError when it holds no dvc.yaml."""
    try:
        return run_plan.project_dir(env)
    except ValueError as err:
        raise StateError(f"{err} the KFP tasks run from") from None


def _stage_env(run_id: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of this KFP run's stage commands (`run_plan.stage_env`), its MLflow
    pipeline-run tag `kfp-<run id>`."""
    return run_plan.stage_env(RUN_TAG_PREFIX + run_id, env)


def _check_run_id(run_id: str) -> str:
    """KFP's run id goes into an MLflow tag and logs: letters, digits, `-`, `_`, `.` only."""
    if not run_id or not all(c.isalnum() or c in "-_." for c in run_id) or len(run_id) > 200:
        raise StateError(f"unexpected KFP run id {run_id!r}")
    return run_id


# --------------------------------------------------------------------------------------------
# The graph the compiler reads
# --------------------------------------------------------------------------------------------


def graph(project: Path, datasets: Sequence[str] | None = None) -> dict[str, Any]:
    """The stage instances of `datasets` (None or empty: params.yaml's) in dependency order,
    each with its stage, the command DVC runs and its upstream instances; the datasets are
    checked as a run conf's are (a name, known to params.yaml's registry or `ingest.custom`)."""
    params_yaml = project / "params.yaml"
    params = read_params_file(params_yaml)
    known = parse_params(params, str(params_yaml)).known_datasets()
    chosen = [str(d) for d in (datasets or params.get("datasets") or [])]
    if not chosen:
        raise ValueError(f"{params_yaml}: no datasets chosen and `datasets` lists none")
    for name in chosen:
        check_dataset_name(name)
        if name not in known:
            raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(known))}")
    chosen = list(dict.fromkeys(chosen))
    instances = build_graph(project / "dvc.yaml", params, chosen)
    upstream: dict[str, list[str]] = {inst.name: [] for inst in instances}
    for up, down in stage_edges(instances):
        upstream[down].append(up)
    return {
        "datasets": chosen,
        "instances": [
            {
                "name": inst.name,
                "stage": inst.stage,
                "cmd": inst.cmd if isinstance(inst.cmd, str) else list(inst.cmd),
                "upstream": upstream[inst.name],
            }
            for inst in instances
        ],
    }


# --------------------------------------------------------------------------------------------
# The three tasks
# --------------------------------------------------------------------------------------------


def prepare(
    *,
    datasets: Sequence[str] | None,
    stages: Sequence[str] | None,
    params: Mapping[str, Any] | None,
    commit: str,
    compiled: Collection[str],
    compiled_datasets: Collection[str],
    run_id: str,
    state_dir: str | Path,
    project: Path | None = None,
    settings: DagSettings | None = None,
    env: Mapping[str, str] | None = None,
    echo: Echo = log.info,
) -> dict[str, Any]:
    """Validate the run's choices and write the run state into `state_dir`.

    `datasets`, `stages` and `params` are the pipeline's parameters (empty: as params.yaml has
    it), checked like an Airflow run conf; a dataset must be one the pipeline was compiled for
    (`compiled_datasets`). `compiled`: the stage instances the pipeline has tasks for; the
    run's params.yaml must not generate others (they would have no task: recompile). `commit`:
    the commit the workspaces check out ("" : the project's HEAD). Returns the run state.
    """
    project = project_dir(env) if project is None else project
    settings = DagSettings.from_env(env) if settings is None else settings
    run_id = _check_run_id(run_id)
    if commit and not re.fullmatch(r"[0-9a-f]{7,40}", commit):  # it reaches `git checkout`
        raise ValueError(f"run commit {commit[:80]!r}: a commit's hex id (7 to 40 digits)")
    params_yaml = project / "params.yaml"
    conf = run_plan.without_empty_fields({"datasets": datasets, "stages": stages, "params": params})
    asked = conf.get("datasets")
    names = {d for d in asked if isinstance(d, str)} if isinstance(asked, list | tuple) else set()
    unknown = sorted(names - set(compiled_datasets))
    known = parse_params(read_params_file(params_yaml), str(params_yaml)).known_datasets()
    if unknown and set(unknown) <= set(known):  # known, just not compiled in: say so
        raise ValueError(
            f"run datasets {', '.join(unknown)}: the pipeline was compiled for"
            f" {', '.join(sorted(compiled_datasets))}; recompile it with them (make kfp"
            " KFP_DATASETS=...)"
        )
    plan = run_plan.plan_run(project, conf, RUN_TAG_PREFIX + run_id, compiled_datasets)
    missing = [name for name in plan.selected if name not in compiled]
    if missing:
        raise ValueError(
            f"this run's params.yaml generates stage instances the pipeline has no task for:"
            f" {', '.join(missing)}; recompile it with these params (make kfp)"
        )
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    (state / _STATE_PARAMS).write_text(plan.params_text, encoding="utf-8")
    lock = project / "dvc.lock"
    if lock.is_file():
        (state / _STATE_LOCK).write_text(lock.read_text(encoding="utf-8"), encoding="utf-8")
    summary = plan.summary()
    run = {
        "run_id": run_id,
        "commit": commit or head_commit(project),
        **{key: summary[key] for key in ("datasets", "stages", "params", "force", "selected")},
    }
    (state / _STATE_RUN).write_text(json.dumps(run, indent=1), encoding="utf-8")
    # what the workspaces pull and this run does not rebuild must be on the remote
    push_outputs(project, settings, _stage_env(run_id, env), echo=echo)
    echo(f"KFP run {run_id}: {len(plan.selected)} of {len(compiled)} stage tasks selected")
    return run


def _read_state(state_dir: str | Path) -> tuple[dict[str, Any], str, str | None]:
    state = Path(state_dir)
    try:
        run = json.loads((state / _STATE_RUN).read_text(encoding="utf-8"))
        params_text = (state / _STATE_PARAMS).read_text(encoding="utf-8")
    except (OSError, ValueError) as err:
        raise StateError(f"{state}: no run state of a `prepare` task ({err})") from None
    lock = state / _STATE_LOCK
    return run, params_text, lock.read_text(encoding="utf-8") if lock.is_file() else None


def run_stage(
    *,
    instance: str,
    upstream: Sequence[str],
    upstream_tokens: str,
    state_dir: str | Path,
    project: Path | None = None,
    settings: DagSettings | None = None,
    env: Mapping[str, str] | None = None,
    echo: Echo = log.info,
) -> dict[str, str]:
    """Reproduce `instance` in a workspace of its own; its dvc.lock entry as the tokens
    `entry` (whole) and `pull` (command and outs), both "" when this run does not select it.

    `upstream`: the instances it depends on (the graph's); `upstream_tokens`: their tasks'
    `pull` tokens, space-separated (a skipped upstream's is empty: the workspace then pulls
    that output as the project's dvc.lock has it).
    """
    run, params_text, lock_text = _read_state(state_dir)
    if instance not in run["selected"]:
        echo(f"{instance}: not selected by this run (stages {run['stages'] or 'all'})")
        return {"entry": "", "pull": ""}
    entries = unpack_entries(upstream_tokens)
    stray = sorted(set(entries) - set(upstream))
    if stray:
        raise StateError(f"{instance}: entries of {', '.join(stray)}, which it does not depend on")
    project = project_dir(env) if project is None else project
    entry = run_in_workspace(
        project,
        instance,
        list(upstream),
        commit=run["commit"],
        params_text=params_text,
        lock_text=lock_text,
        entries=entries,
        settings=DagSettings.from_env(env) if settings is None else settings,
        env=_stage_env(run["run_id"], env),
        echo=echo,
        force=instance.split("@", 1)[0] in run.get("force", ()),
    )
    pull = {key: entry[key] for key in ("cmd", "outs") if key in entry}
    return {"entry": pack_entries({instance: entry}), "pull": pack_entries({instance: pull})}


def collect(
    *,
    tokens: str,
    state_dir: str | Path,
    previous_dir: str | Path,
    lock_dir: str | Path,
    into_project: bool,
    project: Path | None = None,
    settings: DagSettings | None = None,
    env: Mapping[str, str] | None = None,
    echo: Echo = log.info,
) -> dict[str, Any]:
    """One link of the collect chain: the lock `previous_dir` holds (the first link: the run
    state's, the project's dvc.lock) with the entries of `tokens` put in, into `lock_dir`
    (`dvc.lock`, and `ran.json`: the instances this run finished so far). The last link, with
    `into_project`, also brings every instance the run finished into the project (its
    dvc.lock entries, its outputs pulled), unless their params are not the project's
    params.yaml's (a run with `params` overrides): the project's dvc.lock would then disagree
    with its params.yaml, so nothing is brought in and `kept_out` says why. Returns a summary
    with the paths of the run's dvc.lock (`lock`) and params.yaml (`params`)."""
    run, _, _ = _read_state(state_dir)
    previous = Path(previous_dir)
    base = previous / _STATE_LOCK
    ran_file = previous / _LINK_RAN
    ran = json.loads(ran_file.read_text(encoding="utf-8")) if ran_file.is_file() else []
    entries = unpack_entries(tokens)
    ran = sorted({*ran, *entries})
    text = overlay_lock(base.read_text(encoding="utf-8") if base.is_file() else None, entries)
    out = Path(lock_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / _STATE_LOCK).write_text(text, encoding="utf-8")
    (out / _LINK_RAN).write_text(json.dumps(ran), encoding="utf-8")
    brought: list[str] = []
    kept_out: str | None = None
    if into_project:
        project = project_dir(env) if project is None else project
        finished = read_lock_entries(out / _STATE_LOCK, ran)
        differ = params_disagreeing(project, finished)
        if differ:
            kept_out = (
                f"not collected into {project}: the run's params are not its params.yaml's ("
                + "; ".join(f"{name}: {', '.join(keys)}" for name, keys in sorted(differ.items()))
                + "), so its dvc.lock would disagree with params.yaml"
            )
            echo(kept_out)
        else:
            brought = collect_into_project(
                project,
                finished,
                DagSettings.from_env(env) if settings is None else settings,
                _stage_env(run["run_id"], env),
                echo=echo,
            )
    echo(f"KFP run {run['run_id']}: {len(ran)} stage instances finished so far")
    return {
        "run": RUN_TAG_PREFIX + run["run_id"],
        "commit": run["commit"],
        "ran": ran,
        "collected": brought,
        "lock": str((out / _STATE_LOCK).resolve()),
        "params": str((Path(state_dir) / _STATE_PARAMS).resolve()),
        "kept_out": kept_out,
    }


# --------------------------------------------------------------------------------------------
# Command line: what the KFP components start (`python -m rulerag.orchestration.kfp_tasks`)
# --------------------------------------------------------------------------------------------


def _json_arg(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = json.loads(text)
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(f"expected a JSON {kind.__name__}, got {text[:80]!r}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run one task; its result (JSON or a token) goes to --output, its log to stdout."""
    parser = argparse.ArgumentParser(description="A task of the rulerag KFP pipeline.")
    sub = parser.add_subparsers(dest="task", required=True)
    g = sub.add_parser("graph", help="the stage graph the compiler reads, as JSON")
    g.add_argument("--project-dir", type=Path, default=Path.cwd())
    g.add_argument("--datasets", nargs="*", default=[])
    p = sub.add_parser("prepare")
    p.add_argument("--conf", type=_json_arg(dict), required=True,
                   help='{"datasets": [...], "stages": [...], "params": {...}}')  # fmt: skip
    p.add_argument("--commit", default="")
    p.add_argument("--compiled", type=_json_arg(list), required=True)
    p.add_argument("--compiled-datasets", type=_json_arg(list), required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--state", type=Path, required=True)
    s = sub.add_parser("run-stage")
    s.add_argument("--instance", required=True)
    s.add_argument("--upstream", type=_json_arg(list), required=True)
    s.add_argument("--tokens", default="")
    s.add_argument("--state", type=Path, required=True)
    c = sub.add_parser("collect")
    c.add_argument("--tokens", default="")
    c.add_argument("--state", type=Path, required=True)
    c.add_argument("--previous", type=Path, required=True)
    c.add_argument("--lock", type=Path, required=True)
    c.add_argument("--into-project", action="store_true")
    for command in (g, p, s, c):
        command.add_argument("--output", type=Path, help="the result (default: stdout)")
    args = parser.parse_args(argv)

    def echo(line: str) -> None:
        print(line, flush=True)

    try:
        if args.task == "graph":
            result: Any = graph(args.project_dir.resolve(), args.datasets)
        elif args.task == "prepare":
            conf = args.conf
            result = prepare(
                datasets=conf.get("datasets"), stages=conf.get("stages"),
                params=conf.get("params"), commit=args.commit, compiled=args.compiled,
                compiled_datasets=args.compiled_datasets, run_id=args.run_id,
                state_dir=args.state, echo=echo,
            )  # fmt: skip
        elif args.task == "run-stage":
            result = run_stage(
                instance=args.instance, upstream=args.upstream, upstream_tokens=args.tokens,
                state_dir=args.state, echo=echo,
            )  # fmt: skip
        else:
            result = collect(
                tokens=args.tokens, state_dir=args.state, previous_dir=args.previous,
                lock_dir=args.lock, into_project=args.into_project, echo=echo,
            )  # fmt: skip
    except (ValueError, SettingsError, StateError, OSError, RuntimeError) as err:
        print(f"kfp task {args.task}: {err}", file=sys.stderr)
        return 2
    text = result if isinstance(result, str) else json.dumps(result)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
