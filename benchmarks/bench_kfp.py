"""The same stage instances serial (`dvc repro`) and through the compiled Kubeflow pipeline on
this machine (kfp.local's subprocess runner, each stage task in a workspace over a local DVC
remote): wall times, where the pipeline's time goes (per task), and the outputs compared.

Run by hand, never as a test, after `make setup-kfp`:

    .venv/bin/python benchmarks/bench_kfp.py [--stages ingest mine_rules] [--datasets nell995]
        [--whole-graph]

Two scratch copies of the project. By default both are cut to the stages and datasets
(project_copy.cut_project), so the pipeline has only their tasks; `--whole-graph` keeps every
stage of dvc.yaml in the pipeline and chooses the stages with its `stages` parameter (the others
start and skip themselves), as a user would on the real graph. Figures depend on what else runs
on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rulerag import markdown  # noqa: E402
from rulerag.orchestration.project_copy import copy_project, cut_project, kg_mirror_dir  # noqa: E402

BIN = Path(sys.executable).parent
KFP_PYTHON = Path(
    os.environ.get("RULERAG_KFP_PYTHON") or PROJECT / ".venv" / "kfp" / "bin" / "python"
)
# kfp.local's log lines: "HH:MM:SS.mmm - INFO - Executing task 'x'" / "Task 'x' finished ..."
_EVENT = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) - INFO - (Executing task|Task) '([^']+)'")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def outputs(project: Path) -> dict[str, str]:
    return {
        str(p.relative_to(project)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((project / "data").rglob("*"))
        if p.is_file()
    }


def task_seconds(log: str) -> dict[str, float]:
    """Each task's span in kfp.local's log, from `Executing task` to its `finished` line."""
    started: dict[str, float] = {}
    spans: dict[str, float] = {}
    for line in _ANSI.sub("", log).splitlines():
        match = _EVENT.match(line)
        if not match:
            continue
        hours, minutes, seconds, kind, task = match.groups()
        at = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        if kind == "Executing task":
            started[task] = at
        elif task in started and "finished" in line:
            spans[task] = at - started.pop(task)
    return spans


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return seconds, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stages", nargs="+", default=["ingest", "mine_rules"])
    parser.add_argument("--datasets", nargs="+", default=["nell995"])
    parser.add_argument("--whole-graph", action="store_true")
    args = parser.parse_args()
    if not KFP_PYTHON.is_file():
        raise SystemExit(f"no KFP SDK venv at {KFP_PYTHON}: run `make setup-kfp`")
    instances = [f"{s}@{d}" for s in args.stages for d in args.datasets]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RULERAG_PIPELINE_RUN")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               RULERAG_DATA_DIR=str(kg_mirror_dir()))  # fmt: skip

    scratch = Path(tempfile.mkdtemp(prefix="rulerag-bench-kfp-"))
    try:
        copies = {}
        for name in ("serial", "kfp"):
            copies[name] = copy_project(scratch / name)
            stages = args.stages
            if args.whole_graph:
                stages = list(json.loads(run([str(BIN / "python"), "-c", "import json, yaml; "
                    "print(json.dumps(list(yaml.safe_load(open('dvc.yaml'))['stages'])))"],
                    copies[name], env)[1]))  # fmt: skip
            cut_project(copies[name], stages, args.datasets)
        serial_env = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{copies['serial'] / 'mlflow.db'}"}
        serial_s, _ = run([str(BIN / "dvc"), "repro", "--single-item", *instances],
                          copies["serial"], serial_env)  # fmt: skip

        project = copies["kfp"]
        run([str(BIN / "dvc"), "remote", "add", "-d", "--local", "store", str(scratch / "remote")],
            project, env)  # fmt: skip
        kfp_env = {**env, "PYTHONPATH": str(project),
                   "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
                   "RULERAG_WORKSPACE_ROOT": str(scratch / "workspaces")}  # fmt: skip
        kfp = [str(KFP_PYTHON), "-m", "rulerag.orchestration.kfp_pipeline"]
        pipeline = scratch / "pipeline.yaml"
        compile_s, _ = run([*kfp, "compile", "--output", str(pipeline)], project, kfp_env)
        chosen = ["--stages", *args.stages] if args.whole_graph else []
        timings = scratch / "timings.json"
        run_s, log = run([*kfp, "run-local", "--pipeline", str(pipeline), "--pipeline-root",
                          str(scratch / "kfp"), "--timings", str(timings), *chosen],
                         project, kfp_env)  # fmt: skip
        spans = task_seconds(log)
        same = outputs(project) == outputs(copies["serial"])
        summary = json.loads(timings.read_text())

        inner = summary["seconds"]
        rows = [
            ["serial `dvc repro --single-item`", f"{serial_s:.1f}"],
            ["`compile` (the project's interpreter reads the graph)", f"{compile_s:.1f}"],
            [f"`run-local` ({len(spans)} tasks), start to end", f"{run_s:.1f}"],
            ["of which the run itself (`run_local`, after the CLI starts)", f"{inner:.1f}"],
        ]
        for task in ("prepare", *(n.replace("@", "-").replace("_", "-") for n in instances),
                     "collect"):  # fmt: skip
            if task in spans:
                rows.append([f"task `{task}`", f"{spans[task]:.1f}"])
        ours = {"prepare", "collect", *(n.replace("@", "-").replace("_", "-") for n in instances)}
        links = [s for t, s in spans.items() if re.fullmatch(r"collect-\d+", t)]
        skipped = [s for t, s in spans.items() if t not in ours and not re.match("collect-", t)]
        if links:
            rows.append([f"{len(links)} earlier links of the collect chain, each (mean)",
                         f"{sum(links) / len(links):.1f}"])  # fmt: skip
        if skipped:
            rows.append([f"{len(skipped)} tasks of unselected stages, each (mean)",
                         f"{sum(skipped) / len(skipped):.1f}"])  # fmt: skip
        header = [f"the same {len(instances)} stage instances ({', '.join(instances)})", "seconds"]
        print(markdown.table(header, rows, align="lr"))
        print(f"\noutputs byte-identical to the serial run's: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
