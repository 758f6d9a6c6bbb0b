"""How each stage's cost grows with the graph: ICEWS14 grown by factors, each stage through DVC.

A graph of factor k is k copies of ICEWS14 (TLogic's files from the local mirror), copy i's
entities renamed `<name>_#i` and relations and times shared: every regularity of ICEWS14 holds
in the grown graph with the same confidence and k times the support, so the rules mined at
factor 1 are the planted truth at every factor (the report gives the share of factor 1's rule
bank each factor's bank holds). Each factor runs in a project copy of its own
(`rulerag.orchestration.project_copy`), its params.yaml the project's with the grown graph as
a user KG (`ingest.custom`), stage after stage with `dvc repro --single-item <instance>`:

    .venv/bin/python benchmarks/bench_scale.py --factors 1 4 16 \
        [--stages ingest mine_rules build_benchmark apply_rules index retrieve generate] \
        (generate brings the stages its row needs: the trained retrievers and adapters)
        [--work /tmp/bench-scale] [--plot docs/scale.png] [--skip '*minilm*']
        [--real icews14 yago wiki] [--set KEY=VALUE ... --tag NAME] [--predict 1e8]

For every stage instance and factor: wall seconds, peak RSS of the whole process tree (dvc,
the stage and its children, sampled every 0.2 s), bytes the stage wrote under data/<dataset>/;
per stage the instances are summed (time, bytes) or maxed (RSS). The growth exponent of a
stage is the least-squares slope of log(seconds) (and of log(peak RSS)) over log(facts)
across the factors measured. Results go to <work>/results.jsonl as they come (a rerun skips
what is there), then a Markdown table with command, date and commit, and a log-log plot.
`--real` measures KGs of the mirror beside the curve (crosses on the plot; the exponents are
fitted on the grown graphs only); `--set` changes a params.yaml setting for this run's points,
which `--tag` names (own project copies and table rows), e.g. FB15k-237 with AnyBURL's rules
with constants. Run by hand, never as a test; a factor may take hours (the MiniLM index: ~225
documents a second on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import date
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402 - after the path is set
import psutil  # noqa: E402
import yaml  # noqa: E402

from rulerag.layout import DataLayout  # noqa: E402
from rulerag.markdown import table  # noqa: E402
from rulerag.orchestration.project_copy import copy_project, cut_project, kg_mirror_dir  # noqa: E402

BIN = Path(sys.executable).parent
#: the default path's stages, in the order they run
STAGES = (
    "ingest",
    "mine_rules",
    "build_benchmark",
    "apply_rules",
    "index",
    "retrieve",
    "train_retriever",
    "retrieve_finetuned",
    "train_generator",
    "generate",
)
#: what a grid row's instance needs first: dvc.yaml's `generate` lists every retrieval run,
#: both adapters and the rules' answers (the evidence rows') as deps, so measuring a row means
#: running (and measuring) these too: every stage from `apply_rules` on
GENERATE_NEEDS = STAGES[STAGES.index("apply_rules") : STAGES.index("generate")]
#: the grid row measured (`generate`): Standard RAG (the base model, no adapter to train)
ROW = "standard_rag"
SPLITS = ("train", "valid", "test")


def grow(source: Path, factor: int, dest: Path) -> int:
    """`factor` copies of TLogic's ICEWS14 files into dest/<split>.tsv (module doc); the facts
    written."""
    dest.mkdir(parents=True, exist_ok=True)
    written = 0
    for split in SPLITS:
        lines = (source / f"{split}.txt").read_text(encoding="utf-8").splitlines()
        with open(dest / f"{split}.tsv", "w", encoding="utf-8") as out:
            for copy in range(factor):
                suffix = "" if copy == 0 else f"_#{copy}"
                for line in lines:
                    head, rel, tail, when = line.split("\t")
                    out.write(f"{head}{suffix}\t{rel}\t{tail}{suffix}\t{when}\n")
                    written += 1
    return written


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of a process and all its descendants now (0 for the gone)."""
    total = 0
    try:
        tree = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:  # it ended between two samples
        return 0
    for proc in tree:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def measured(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run `command`; its wall seconds, the peak RSS of its process tree, its exit status."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watched = psutil.Process(process.pid)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(watched))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    done.set()
    sampler.join()
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss": peak,
        "returncode": process.returncode,
        "tail": output[-2000:],
    }


def sizes(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: (size, mtime_ns), to tell what a stage wrote."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> int:
    return sum(size for path, (size, mtime) in after.items() if before.get(path) != (size, mtime))


@dataclass(frozen=True)
class Point:
    """One graph measured: a factor of ICEWS14 (`×k`) or a real KG of the mirror, in a project
    copy of its own."""

    label: str
    dataset: str
    project: Path
    factor: int | None = None

    def facts(self) -> int:
        """The KG's facts (after `ingest`)."""
        import pyarrow.parquet as pq

        return pq.ParquetFile(
            DataLayout.of(self.project / "data", self.dataset).facts
        ).metadata.num_rows


def set_key(params: dict[str, Any], assignment: str) -> None:
    """Apply one `--set key.path=value` (value read as YAML, as `dvc exp run -S` reads it)."""
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ValueError(f"--set {assignment!r}: expected key.path=value")
    *parents, last = key.split(".")
    node = params
    for part in parents:
        if not isinstance(node.get(part), dict):
            raise ValueError(f"--set {assignment!r}: params.yaml has no section {part!r}")
        node = node[part]
    if last not in node:
        raise ValueError(f"--set {assignment!r}: params.yaml has no key {key!r}")
    node[last] = yaml.safe_load(value)


def prepare(
    work: Path, factor: int | None, dataset: str | None, assignments: list[str], tag: str
) -> Point:
    """A factor's grown graph (or a real dataset), its project copy (dvc.yaml cut to the
    default path's stages, so that a later run may measure more of them; params.yaml with the
    `--set` assignments) and environment."""
    if factor is not None:
        name, label = f"scale{factor}", f"×{factor}"
    else:
        assert dataset is not None
        name, label = dataset, dataset
    label += f" ({tag})" if tag else ""
    suffix = f"-{tag}" if tag else ""
    project = work / (f"project-{factor}" if factor is not None else f"real-{dataset}")
    project = project.with_name(project.name + suffix)
    if not project.exists():
        copy_project(project)
        cut_project(project, list(STAGES), [name])
        params_file = project / "params.yaml"
        params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
        if factor is not None:
            graph = work / f"graph-{factor}"
            grow(kg_mirror_dir() / "icews14" / "TLogic_icews14", factor, graph)
            params["ingest"]["custom"] = {name: {"path": str(graph), "time_format": "%Y-%m-%d"}}
        params["generation"]["configs"] = [ROW]
        params["serve"]["row"] = None
        for assignment in assignments:
            set_key(params, assignment)
        params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return Point(label, name, project, factor)


def environment(project: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'mlflow.db'}",
        "RULERAG_MODEL_CACHE": str(ROOT / ".models"),
        "DVC_NO_ANALYTICS": "1",
        "RULERAG_DATA_DIR": str(kg_mirror_dir()),  # the real KGs, as `make run` finds them
    }


def instances(project: Path, env: dict[str, str], stage: str) -> list[str]:
    listed = subprocess.run(
        [str(BIN / "dvc"), "stage", "list", "--name-only"],
        cwd=project, env=env, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return [s for s in listed if s == stage or s.startswith(f"{stage}@")]


def run_point(
    work: Path, point: Point, stages: list[str], done: set[tuple[str, str]], skip: list[str]
) -> None:
    """Each stage of the point not measured yet, its instances in turn (but those matching a
    `skip` pattern); results appended."""
    env = environment(point.project)
    data = DataLayout.of(point.project / "data", point.dataset).root
    for stage in stages:
        for instance in instances(point.project, env, stage):
            if (point.label, instance) in done or any(fnmatch(instance, p) for p in skip):
                continue
            before = sizes(data)
            command = [str(BIN / "dvc"), "repro", "--single-item", instance]
            result = measured(command, point.project, env)
            record = {
                "point": point.label,
                "factor": point.factor,
                "facts": point.facts() if result["returncode"] == 0 else None,
                "stage": stage,
                "instance": instance,
                "seconds": result["seconds"],
                "peak_rss": result["peak_rss"],
                "bytes": written(before, sizes(data)),
                "ok": result["returncode"] == 0,
            }
            with open(work / "results.jsonl", "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)
            if not record["ok"]:
                print(result["tail"], file=sys.stderr)
                return  # the stages after it need its outputs


def label_of(record: dict[str, Any]) -> str:
    """A record's point (records before real points were measured name only their factor)."""
    return record.get("point") or f"×{record['factor']}"


def slope(xs: list[float], ys: list[float]) -> float | None:
    """The least-squares slope of log(y) over log(x); None with fewer than two points."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(points) < 2:
        return None
    return float(np.polyfit([p[0] for p in points], [p[1] for p in points], 1)[0])


def exponent(value: float) -> str:
    """A fitted exponent to two places (a flat line reads 0.00, not -0.00)."""
    return f"{round(value, 2) + 0.0:.2f}"


def row_of(record: dict[str, Any]) -> str:
    """A record's row: its stage, and the instance's variant where the stage has several per
    dataset (`index@scale4-minilm` -> `index minilm`, `retrieve@scale4-bm25-rg` -> `retrieve
    bm25-rg`): each variant grows in its own way."""
    instance = record.get("instance") or record["stage"]
    _, _, item = instance.partition("@")
    _, _, variant = item.partition("-")  # after the dataset (no dataset name has a hyphen)
    return f"{record['stage']} {variant}" if variant else record["stage"]


def row_order(name: str) -> tuple[int, str]:
    """Rows in the default path's stage order, variants by name."""
    return STAGES.index(name.split(" ")[0]), name


def summary(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (row, point): the facts and factor, the instances' seconds and bytes summed, peak
    RSS maxed (`row_of`: a stage, or one variant of it)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if not r["ok"]:
            continue
        cell = out.setdefault(
            (row_of(r), label_of(r)),
            {"facts": r["facts"], "factor": r["factor"], "seconds": 0.0, "peak_rss": 0,
             "bytes": 0},
        )  # fmt: skip
        cell["seconds"] += r["seconds"]
        cell["peak_rss"] = max(cell["peak_rss"], r["peak_rss"])
        cell["bytes"] += r["bytes"]
    return out


def points_in_order(cells: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The points measured: the factors ascending, then the real KGs by size."""
    first: dict[str, dict[str, Any]] = {}
    for (_, label), cell in cells.items():
        first.setdefault(label, cell)
    return sorted(
        first, key=lambda x: (first[x]["factor"] is None, first[x]["factor"] or first[x]["facts"])
    )


def rules_found_again(work: Path, factors: list[int]) -> dict[int, float]:
    """Per factor: the share of factor 1's rule bank (the planted truth: module doc) that the
    factor's bank holds too (rule ids name a rule's structure, not its entities)."""
    import pandas as pd

    def bank(factor: int) -> set[str] | None:
        path = DataLayout.of(work / f"project-{factor}" / "data", f"scale{factor}").rule_bank
        return (
            set(pd.read_parquet(path, columns=["rule_id"])["rule_id"]) if path.is_file() else None
        )

    truth = bank(1)
    if not truth:
        return {}
    found = {f: bank(f) for f in factors}
    return {f: len(ids & truth) / len(truth) for f, ids in found.items() if ids is not None}


def report(records: list[dict[str, Any]], command: str, plot: Path | None, work: Path) -> str:
    cells = summary(records)
    stages = sorted({k[0] for k in cells}, key=row_order)
    labels = points_in_order(cells)
    factors = sorted({c["factor"] for c in cells.values() if c["factor"] is not None})
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    rows = []
    for stage in stages:
        # the exponents are fitted on the grown graphs only: the real KGs differ in more than size
        grown = [c for (st, _), c in cells.items() if st == stage and c["factor"] is not None]
        time_exp = slope([p["facts"] for p in grown], [p["seconds"] for p in grown])
        rss_exp = slope([p["facts"] for p in grown], [p["peak_rss"] for p in grown])
        for label in labels:
            cell = cells.get((stage, label))
            if cell is None:
                continue
            fitted = cell["factor"] is not None
            rows.append(
                [
                    stage,
                    label,
                    f"{cell['facts']:,}",
                    f"{cell['seconds']:.1f}",
                    f"{cell['peak_rss'] / 2**30:.2f}",
                    f"{cell['bytes'] / 2**20:.1f}",
                    "–" if time_exp is None or not fitted else exponent(time_exp),
                    "–" if rss_exp is None or not fitted else exponent(rss_exp),
                ]
            )
    header = ["stage", "graph", "facts", "seconds", "peak RSS GiB", "written MiB",
              "time exponent", "RSS exponent"]  # fmt: skip
    lines = [f"Command: `{command}` · Measured: {date.today()}, commit `{commit}`", ""]
    lines.append(table(header, rows, align="llrrrrrr"))
    again = rules_found_again(work, factors)
    if again:
        shares = ", ".join(f"×{f} {100 * share:.1f} %" for f, share in sorted(again.items()))
        lines += ["", f"Factor 1's rule bank found again (the planted truth): {shares}."]
    if plot is not None and cells:
        draw(cells, stages, labels, plot)
    return "\n".join(lines)


#: the rows extrapolated as power laws: the queries and the corpus both grow with the graph
POWER_LAW_ROWS = ("retrieve",)


def prediction(records: list[dict[str, Any]], facts: float) -> str:
    """Each row's time and peak at `facts` facts, from the grown graphs: a fixed cost plus a
    cost per fact (least squares), or for `POWER_LAW_ROWS` the power law through its points
    (the peak's exponent at least 0)."""
    cells = {k: c for k, c in summary(records).items() if c["factor"] is not None}
    rows = []
    for name in sorted({k[0] for k in cells}, key=row_order):
        points = sorted((c["facts"], c["seconds"], c["peak_rss"] / 2**30)
                        for (row, _), c in cells.items() if row == name)  # fmt: skip
        if len(points) < 2:
            continue
        xs, ts, ms = (np.array(v, float) for v in zip(*points, strict=True))
        if name.split(" ")[0] in POWER_LAW_ROWS:
            time_exp, rss_exp = slope(list(xs), list(ts)), slope(list(xs), list(ms))
            if time_exp is None or rss_exp is None:  # a point without time or memory
                continue
            rss_exp = max(rss_exp, 0.0)
            seconds = ts[-1] * (facts / xs[-1]) ** time_exp
            peak = ms[-1] * (facts / xs[-1]) ** rss_exp
            fit = f"power law: time exponent {time_exp:.2f}, peak {rss_exp:.2f}"
        else:
            per_second, fixed_seconds = np.polyfit(xs, ts, 1)
            per_gib, fixed_gib = np.polyfit(xs, ms, 1)
            seconds, peak = fixed_seconds + per_second * facts, fixed_gib + per_gib * facts
            fit = (f"linear: {per_second * 1e6:,.0f} s and {per_gib * 1e6:.2f} GiB "
                   "per million facts")  # fmt: skip
        factors = ", ".join(f"×{c['factor']}" for (row, _), c in sorted(
            cells.items(), key=lambda kv: kv[1]["facts"]) if row == name)  # fmt: skip
        rows.append([name, factors, f"{seconds / 3600:,.1f} h", f"{peak:,.0f} GiB", fit])
    header = ["stage", "fitted on", "predicted time", "predicted peak", "fit"]
    return table(header, rows, align="llrrl")


def draw(
    cells: dict[tuple[str, str], dict[str, Any]], stages: list[str], labels: list[str], plot: Path
) -> None:
    """Log-log time and peak RSS over facts: a line per stage through the grown graphs, the
    real KGs as crosses in the stage's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    palette = plt.get_cmap("tab20").colors  # a colour per row (stage variants are many)
    for axis in axes:
        axis.set_prop_cycle(color=palette[: max(len(stages), 1)])
    for stage in stages:
        here = [cells[(stage, x)] for x in labels if (stage, x) in cells]
        grown = [c for c in here if c["factor"] is not None]
        real = [c for c in here if c["factor"] is None]
        for axis, value in ((axes[0], "seconds"), (axes[1], "peak_rss")):
            scale = 2**30 if value == "peak_rss" else 1
            (line,) = axis.loglog(
                [c["facts"] for c in grown], [c[value] / scale for c in grown], marker="o",
                label=stage,
            )  # fmt: skip
            if real:
                axis.loglog(
                    [c["facts"] for c in real], [c[value] / scale for c in real], "x",
                    color=line.get_color(), markersize=8,
                )  # fmt: skip
    crosses = any(c["factor"] is None for c in cells.values())
    note = " (x: real KGs)" if crosses else ""
    axes[0].set(xlabel="facts", ylabel="seconds", title=f"wall time per stage{note}")
    axes[1].set(xlabel="facts", ylabel="GiB", title=f"peak RSS per stage{note}")
    axes[1].axhline(24, color="grey", linestyle="--", linewidth=0.8)
    axes[1].annotate("24 GB: this machine", (0.02, 24), xycoords=("axes fraction", "data"),
                     va="bottom", fontsize=8, color="grey")  # fmt: skip
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(plot, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", type=int, nargs="*", default=[1, 4, 16, 64])
    parser.add_argument(
        "--real",
        nargs="*",
        default=[],
        metavar="DATASET",
        help="real KGs of the mirror measured beside the curve (e.g. icews14 yago wiki)",
    )
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a params.yaml setting for the points of this run (as dvc exp run -S); needs --tag",
    )
    parser.add_argument("--tag", default="", help="names the --set variant's points and copies")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-scale"))
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--predict", type=float, default=None, metavar="FACTS",
        help="also each row's time and peak extrapolated to this many facts (e.g. 1e8)",
    )  # fmt: skip
    parser.add_argument(
        "--skip", nargs="*", default=[], metavar="PATTERN",
        help="stage instances not to run (shell patterns, e.g. '*minilm*'): measured later",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if any(f < 1 for f in args.factors):
        parser.error("--factors: each factor is a whole number of copies, at least 1")
    if args.assignments and not args.tag:
        parser.error("--set needs --tag: the variant's points and project copies are its own")
    wanted = set(args.stages) | (set(GENERATE_NEEDS) if "generate" in args.stages else set())
    stages = [s for s in STAGES if s in wanted]
    args.work.mkdir(parents=True, exist_ok=True)
    results = args.work / "results.jsonl"
    records = [json.loads(x) for x in results.read_text().splitlines()] if results.is_file() else []
    done = {(label_of(r), r["instance"]) for r in records if r["ok"]}
    wanted_points = [(f, None) for f in args.factors] + [(None, d) for d in args.real]
    for factor, dataset in wanted_points:
        point = prepare(args.work, factor, dataset, args.assignments, args.tag)
        run_point(args.work, point, stages, done, args.skip)
    records = [json.loads(x) for x in results.read_text().splitlines()]
    command = "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(report(records, command.strip(), args.plot, args.work))
    if args.predict:
        print(f"\nExtrapolated to {args.predict:,.0f} facts:\n")
        print(prediction(records, args.predict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
