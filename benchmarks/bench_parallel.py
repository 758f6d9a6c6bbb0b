"""The pipeline past one machine: expected wall time on N workers, and a measured comparison.

Run by hand, never as a test:

    .venv/bin/python benchmarks/bench_parallel.py [--datasets icews14] [--workers 1 2 4 8]
        [--store sqlite:///.../mlflow.db] [--overhead 12]
    .venv/bin/python benchmarks/bench_parallel.py --measure ingest mine_rules build_benchmark \
        --datasets icews14 fb15k237 nell995 --measure-workers 2

Expected scaling: each stage instance's time from the last MLflow run of it (the times every
stage logs), the stage graph from dvc.yaml, and `rulerag.orchestration.schedule`: the serial
sum, the critical path (the floor for any number of workers) and a list schedule on N workers
(each worker a machine of its own, as with Celery or Kubernetes workers). `--overhead` adds a
workspace's cost to every task (clone, `dvc pull`, `dvc push`).

`--measure`: the chosen stages of the datasets twice in scratch clones of this project: serial
(`dvc repro --single-item` in topological order, one workspace) and in workspaces of their
own over a local DVC remote (`rulerag.orchestration.workspaces`, `--measure-workers` at a
time, then `collect`); wall times, the outputs compared byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag import markdown  # noqa: E402
from rulerag.orchestration.dag_settings import DagSettings  # noqa: E402
from rulerag.orchestration.dvc_graph import build_graph, stage_edges  # noqa: E402
from rulerag.orchestration.schedule import critical_path, list_schedule, run_graph  # noqa: E402
from rulerag.orchestration.workspaces import (  # noqa: E402
    collect,
    head_commit,
    run_in_workspace,
)
from rulerag.params import read_params_file  # noqa: E402
from rulerag.tracking import TAG_STAGE_INSTANCE, experiment_name  # noqa: E402


def stage_times(store: str, datasets: list[str]) -> dict[str, float]:
    """Seconds of the last finished MLflow run of each stage instance."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    times: dict[str, float] = {}
    for dataset in datasets:
        experiment = client.get_experiment_by_name(experiment_name(dataset))
        if experiment is None:
            continue
        runs = client.search_runs(
            [experiment.experiment_id],
            "attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=5000,
        )
        for run in runs:
            name = run.data.tags.get(TAG_STAGE_INSTANCE)
            if name and name not in times and run.info.end_time:
                times[name] = (run.info.end_time - run.info.start_time) / 1000
    return times


def expected(args: argparse.Namespace) -> None:
    params = read_params_file(ROOT / "params.yaml")
    instances = build_graph(ROOT / "dvc.yaml", params, args.datasets)
    times = stage_times(args.store, args.datasets)
    missing = [i.name for i in instances if i.name not in times]
    durations = {i.name: times[i.name] + args.overhead for i in instances if i.name in times}
    edges = stage_edges(instances)
    total = sum(durations.values())
    length, path = critical_path(durations, edges)
    print(f"{len(durations)} stage instances of {', '.join(args.datasets)} with logged times"
          f" (+{args.overhead:g} s each); without one: {len(missing)}")  # fmt: skip
    print(f"critical path {length / 60:.1f} min: {' -> '.join(path)}\n")
    rows = []
    for workers in args.workers:
        plan = list_schedule(durations, edges, workers)
        busy = total / (workers * plan.makespan) if plan.makespan else 0.0
        rows.append([workers, f"{plan.makespan / 60:.1f}", f"{total / plan.makespan:.2f}",
                     f"{busy:.0%}"])  # fmt: skip
    rows.append(["∞", f"{length / 60:.1f}", f"{total / length:.2f}", "–"])
    print(markdown.table(["workers", "wall time (min)", "speed-up", "busy"], rows, align="rrrr"))


def _sh(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stdout[-3000:]}{done.stderr[-3000:]}")


def _outputs(project: Path, datasets: list[str]) -> dict[str, str]:
    out = {}
    for dataset in datasets:
        for path in sorted((project / "data" / dataset).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(project))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


#: words on the lines where two runs of a stage may differ: the wall times they report
TIMING_WORDS = ("second", "minute", " s (", "sha256", "bytes")


def _timing_only(a: Path, b: Path) -> bool:
    """Whether two text outputs differ only on lines that report times (and the manifest
    lines hashing such files)."""
    import difflib

    try:
        left, right = a.read_text().splitlines(), b.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    changed = [
        line[1:]
        for line in difflib.unified_diff(left, right, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return all(any(word in line for word in TIMING_WORDS) for line in changed)


def measure(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "DVC_NO_ANALYTICS": "1"}  # fmt: skip
    params = read_params_file(ROOT / "params.yaml")
    params["datasets"] = list(args.datasets)
    instances = [i for i in build_graph(ROOT / "dvc.yaml", params, args.datasets)
                 if i.stage in args.measure]  # fmt: skip
    names = [i.name for i in instances]
    edges = [(a, b) for a, b in stage_edges(instances) if a in names and b in names]
    import yaml

    params_text = yaml.safe_dump(params, sort_keys=False)
    try:
        serial_dir, main = scratch / "serial", scratch / "main"
        for clone in (serial_dir, main):
            _sh(["git", "clone", "-q", str(ROOT), str(clone)], scratch, env)
            (clone / "params.yaml").write_text(params_text, encoding="utf-8")
        serial_env = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{serial_dir / 'mlflow.db'}"}
        main_env = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{main / 'mlflow.db'}"}
        started = time.time()
        repro = ["dvc", "repro", "--single-item"]
        run_graph(names, edges, 1, lambda n, _: _sh([*repro, n], serial_dir, serial_env))
        serial = time.time() - started
        _sh(["dvc", "remote", "add", "-d", "--local", "bench", str(scratch / "remote")], main, env)
        settings = DagSettings(mode="workspaces", root=scratch / "workspaces")
        commit = head_commit(main)

        def task(name: str, upstream: dict[str, dict]) -> dict:
            entries = {k: v for up in upstream.values() for k, v in up.items()}
            ups = [a for a, b in edges if b == name]
            entry = run_in_workspace(main, name, ups, commit=commit, params_text=params_text,
                                     lock_text=None, entries=entries, settings=settings,
                                     env=main_env, echo=lambda line: None)  # fmt: skip
            return {name: entry}

        started = time.time()
        results, spans = run_graph(names, edges, args.measure_workers, task)
        entries = {k: v for r in results.values() for k, v in r.items()}
        collect(main, entries, settings, main_env, echo=lambda line: None)
        parallel = time.time() - started
        ours, theirs = _outputs(serial_dir, args.datasets), _outputs(main, args.datasets)
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        timing = [k for k in differ if _timing_only(serial_dir / k, main / k)]
        same = not set(differ) - set(timing)
        print(f"{len(names)} stage instances ({', '.join(args.measure)}) of "
              f"{', '.join(args.datasets)}:")  # fmt: skip
        print(f"  serial, one workspace:          {serial:7.1f} s")
        print(f"  {args.measure_workers} workers, own workspaces:    {parallel:7.1f} s "
              f"(speed-up {serial / parallel:.2f}); outputs identical: {same}")  # fmt: skip
        print(f"    {len(ours)} files; {len(timing)} differ in measured times only (seconds, "
              "queries a minute, and the manifests' hashes of those files)")  # fmt: skip
        for path in sorted(set(differ) - set(timing)):
            print(f"    differs: {path}")
        for name in names:
            a, b = spans[name]
            print(f"    {name:40s} {a - started:7.1f} -> {b - started:7.1f} s")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["icews14"])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--store", default=f"sqlite:///{ROOT / 'mlflow.db'}")
    parser.add_argument(
        "--overhead", type=float, default=0.0, help="seconds added to every task (a workspace's"
        " clone, pull and push)",
    )  # fmt: skip
    parser.add_argument("--measure", nargs="+", default=None, help="dvc.yaml stages to run")
    parser.add_argument("--measure-workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the scratch clones")
    args = parser.parse_args()
    if args.measure:
        measure(args)
    else:
        expected(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
