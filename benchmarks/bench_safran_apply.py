"""Our rule application against SAFRAN's, on the same rules and the same test facts.

Run by hand, with a SAFRAN binary (built from github.com/OpenBioLink/SAFRAN, or the one it
ships as resources/binaries/SAFRAN; Linux, needs libgomp), after `mine_rules` for the dataset:

    .venv/bin/python benchmarks/bench_safran_apply.py --safran PATH [--dataset fb15k237]
        [--data FOLDER] [--rules FILE | --anyburl-rules FILE] [--limit N] [--top-k 10] [--threads 1]
        [--discrimination-bound 1000] [--unseen-negatives 5] [--workdir DIR] [--out FILE]

What it answers: is a gap to the published AnyBURL / SAFRAN figures in how we apply rules, or
in the rules? It writes the dataset's rules (data/<dataset>/rules/rules.parquet, `--rules`
another) in AnyBURL's format (`rulerag.rules.anyburl_io`; the kinds SAFRAN reads: cyclic,
AC1, AC2; pair and zero-body rules are left out of both sides), the KG's splits as SAFRAN's
triples files (the KG's keys; the first `--limit` test facts), runs SAFRAN's `applymax`
(AnyBURL's maxplus) and evaluates its predictions as SAFRAN's `python/eval.py` does: the
answer's place among the written top-k candidates, ties averaged (scipy's rankdata), 0 when it
is not among them. Then `rulerag.rules.forecasting.forecast` applies the same rules to the
same facts with max aggregation and the same confidences (SAFRAN recomputes every rule's as
correct / (predicted + `--unseen-negatives`), so ac2 rules lose AnyBURL's weight on both
sides), `apply_rules.discrimination_bound` = `--discrimination-bound`, and the graph SAFRAN
applies rules to: the training facts (`--history train valid` adds the validation facts to ours).
Both are reported in SAFRAN's protocol (top-k, ties averaged), ours also over every rank, with
the queries each side ranks better and a Wilcoxon signed-rank test on the reciprocal ranks.

`--anyburl-rules FILE` takes a rule file AnyBURL wrote instead (its learner's output, on this
KG's training facts): SAFRAN reads the file as it is, ours reads it with
`anyburl_io.read_anyburl_rules` (which skips AnyBURL's reflexive-token rules, counted in the
report; SAFRAN applies them). Zero-body rules are left out of both sides, as before: SAFRAN
does not apply them, and the released binary crashes (SIGSEGV) on the empty body AnyBURL 23
writes for them. So the two applications can also be compared on AnyBURL's rules.

SAFRAN's application differs from ours in ways the comparison shows rather than hides: its
DISCRIMINATION_BOUND counts the search's steps, so an AC1 rule read backwards from a body
relation with `--discrimination-bound` or more subjects predicts nothing; it never ranks the
query's own entity (AnyBURL's object identity) except through rules learned with
REWRITE_REFLEXIV; it keeps the first candidates until it has k.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import rankdata, wilcoxon  # noqa: E402

from rulerag.io import read_parquet  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402
from rulerag.rules.anyburl_io import (  # noqa: E402
    SAFRAN_KINDS,
    read_anyburl_rules,
    write_anyburl_rules,
)
from rulerag.rules.bank import frame_rules  # noqa: E402
from rulerag.rules.forecasting import (  # noqa: E402
    forecast,
    metrics_of_ranks,
    rounded_metrics,
)
from rulerag.rules.settings import ApplySettings  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--safran", type=Path, required=True, help="the SAFRAN binary")
    parser.add_argument("--dataset", default="fb15k237")
    parser.add_argument("--data", type=Path, default=ROOT / "data")
    rules_from = parser.add_mutually_exclusive_group()
    rules_from.add_argument("--rules", type=Path, default=None, help="a rules.parquet")
    rules_from.add_argument("--anyburl-rules", type=Path, default=None, help="AnyBURL's rules")
    parser.add_argument("--limit", type=int, default=None, help="the first N test facts")
    parser.add_argument("--top-k", type=int, default=10, help="SAFRAN's TOP_K_OUTPUT")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--discrimination-bound", type=int, default=1000)
    parser.add_argument("--unseen-negatives", type=int, default=5)
    parser.add_argument(
        "--history", nargs="+", default=["train"],
        help="the splits our side applies rules to (SAFRAN: its training file)",
    )  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not args.safran.is_file():
        parser.error(f"--safran {args.safran}: no such file")
    layout = DataLayout.of(args.data, args.dataset)
    rules_path = args.rules or layout.rules
    for needed in (layout.facts, args.anyburl_rules or rules_path):
        if not needed.is_file():
            parser.error(f"no {needed} (run the pipeline's mine_rules for {args.dataset} first)")
    facts = read_parquet(layout.facts)
    if facts["time"].notna().any():
        parser.error(f"{args.dataset} is temporal: SAFRAN applies static rules only")
    entity_keys = read_parquet(layout.entities).sort_values("id")["key"].tolist()
    relation_keys = read_parquet(layout.relations).sort_values("id")["key"].tolist()
    test = facts[facts["split"] == "test"]
    if args.limit:
        test = test.head(args.limit)
    facts = pd.concat([facts[facts["split"] != "test"], test])
    work = args.workdir or Path(tempfile.mkdtemp(prefix="safran-"))
    work.mkdir(parents=True, exist_ok=True)

    if args.anyburl_rules:
        try:
            read, read_counts = read_anyburl_rules(
                args.anyburl_rules,
                {key: i for i, key in enumerate(relation_keys)},
                {key: i for i, key in enumerate(entity_keys)},
                unseen_negatives=args.unseen_negatives,
            )
        except ValueError as error:
            parser.error(str(error))
    else:
        read, read_counts = frame_rules(read_parquet(rules_path)), None
    rules = [r for r in read if r.kind in SAFRAN_KINDS]
    del read
    rules = [  # the confidence SAFRAN gives every rule it reads
        dataclasses.replace(
            r, confidence=float(r.support) / (float(r.body_support) + args.unseen_negatives)
        )
        for r in rules
    ]
    started = time.perf_counter()
    if args.anyburl_rules:  # as it is, but for zero-body rules, which crash SAFRAN's reader
        with args.anyburl_rules.open(encoding="utf-8") as source:
            kept = (line for line in source if not line.rstrip().endswith("<="))
            (work / "rules.txt").write_text("".join(kept), encoding="utf-8")
        counts = read_counts
    else:
        counts = write_anyburl_rules(rules, work / "rules.txt", relation_keys, entity_keys)
    for split in ("train", "valid", "test"):
        part = facts[facts["split"] == split]
        lines = [
            f"{entity_keys[h]}\t{relation_keys[r]}\t{entity_keys[t]}\n"
            for h, r, t in zip(part["head"], part["relation"], part["tail"], strict=True)
        ]
        (work / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
    properties = {
        "PATH_TRAINING": work / "train.txt",
        "PATH_VALID": work / "valid.txt",
        "PATH_TEST": work / "test.txt",
        "PATH_RULES": work / "rules.txt",
        "PATH_OUTPUT": work / "predictions.txt",
        "WORKER_THREADS": args.threads,
        "TOP_K_OUTPUT": args.top_k,
        "DISCRIMINATION_BOUND": args.discrimination_bound,
        "UNSEEN_NEGATIVE_EXAMPLES": args.unseen_negatives,
    }
    (work / "max.properties").write_text(
        "".join(f"{k} = {v}\n" for k, v in properties.items()), encoding="utf-8"
    )
    written = time.perf_counter() - started
    print(f"{sum(v for k, v in counts.items() if ':' not in k)} rules read, {work} written")
    started = time.perf_counter()
    log_path = work / "safran.log"
    with log_path.open("w") as log:
        done = subprocess.run(  # noqa: S603 - a binary the user named, arguments built here
            [str(args.safran), "applymax", str(work / "max.properties")],
            check=False,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    predictions = work / "predictions.txt"
    if done.returncode or not predictions.is_file():
        tail = log_path.read_text(errors="replace").splitlines()[-5:]
        parser.error(
            f"--safran {args.safran} exited with {done.returncode} and "
            f"{'no' if not predictions.is_file() else 'a'} {predictions}; "
            f"the end of {log_path}: " + " | ".join(tail)
        )
    safran_seconds = time.perf_counter() - started
    safran = safran_ranks(predictions, entity_keys, relation_keys)

    settings = ApplySettings(
        lengths=(1, 2, 3),
        temporal=False,
        aggregation="max",
        min_confidence=0.0,
        discrimination_bound=args.discrimination_bound,
        baseline="unanswered",  # the baseline for unanswered queries only, as measured
    )
    started = time.perf_counter()
    ours = forecast(
        facts, rules, len(relation_keys), len(entity_keys), settings,
        history_splits=tuple(args.history),
    )  # fmt: skip
    ours_seconds = time.perf_counter() - started
    ranks = ours.ranks.assign(average=(ours.ranks["rank"] + ours.ranks["rank_last"]) / 2)
    ours_top = np.where(ranks["average"] <= args.top_k, ranks["average"], np.inf)
    queries = zip(ranks["sub"], ranks["rel"], ranks["obj"], strict=True)
    theirs = np.array([safran.get(query, np.inf) for query in queries])
    report = {
        "dataset": args.dataset,
        "test_facts": len(test),
        "queries": len(ranks),
        "rules": str(args.anyburl_rules or rules_path),
        "rules_by_kind": dict(counts),
        "top_k": args.top_k,
        "discrimination_bound": args.discrimination_bound,
        "history": args.history,
        "seconds": {
            "write": round(written, 1),
            "safran": round(safran_seconds, 1),
            "ours": round(ours_seconds, 1),
        },
        "safran": metrics(theirs),
        "ours_top_k": metrics(ours_top),
        "ours_every_rank": metrics(ranks["average"].to_numpy(np.float64)),
        "paired": paired(1 / ours_top, 1 / theirs),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def safran_ranks(
    path: Path, entity_keys: list[str], relation_keys: list[str]
) -> dict[tuple[int, int, int], float]:
    """(sub, rel as forecast numbers it, answer) -> the answer's rank among SAFRAN's written
    candidates, ties averaged as its eval.py ranks them; absent when it wrote no such rank.
    Object queries are (head, r, tail), subject queries (tail, r + |R|, head)."""
    entity = {key: i for i, key in enumerate(entity_keys)}
    relation = {key: i for i, key in enumerate(relation_keys)}
    n_relations = len(relation_keys)
    out: dict[tuple[int, int, int], float] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for at in range(0, len(lines) - 2, 3):
        head, rel, tail = lines[at].split(" ")
        h, r, t = entity[head], relation[rel], entity[tail]
        for line, (query, answer, rel_id) in (
            (lines[at + 1], (t, h, r + n_relations)),
            (lines[at + 2], (h, t, r)),
        ):
            fields = [f for f in line[len("Heads: ") :].split("\t") if f]
            names = [entity.get(name, -1) for name in fields[0::2]]
            if answer in names:
                ranked = rankdata([-float(c) for c in fields[1::2]], method="average")
                out[(query, rel_id, answer)] = float(ranked[names.index(answer)])
    return out


def metrics(rank: np.ndarray) -> dict[str, float]:
    """MRR and Hits@k over all queries, to 4 decimals; an infinite rank adds 0 (SAFRAN's
    eval.py counts an answer it did not write as 0)."""
    return rounded_metrics(metrics_of_ranks(rank))


def paired(ours: np.ndarray, theirs: np.ndarray) -> dict[str, float | int]:
    """Queries each side ranks better (reciprocal rank, top-k protocol) and Wilcoxon's p."""
    better, worse = int(np.sum(ours > theirs)), int(np.sum(ours < theirs))
    p = float(wilcoxon(ours, theirs).pvalue) if better + worse else 1.0
    return {"ours_better": better, "safran_better": worse, "wilcoxon_p": p}


if __name__ == "__main__":
    raise SystemExit(main())
