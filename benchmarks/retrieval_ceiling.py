"""How many test queries rules can help with at all: answer reachability in the corpus.

Run by hand after `build_benchmark` (and `retrieve`, to print the measured Recall@10 beside):

    .venv/bin/python benchmarks/retrieval_ceiling.py [--datasets icews14,fb15k237,nell995]

For each test query (s, r, ?) of data/<dataset>/benchmark/test.jsonl it checks the corpus links
(the `corpus.splits`, train by default) for a gold answer reached from the subject s:

* same relation: a link (s, r, a) or (a, r, s) with a a gold answer (what a query-only search
  naturally finds);
* rule body: for a selected rule r1(E1, E2) => r(E1, E2), a link on r1 from s in the rule's
  direction ending in a gold answer (what a rule-guided search is meant to add);
* either.

Recall@10 can exceed these shares only through documents that mention an answer without being
about the query's subject. When a retriever already reaches the "same relation" share, rules
have little left to add at equal k, whatever the retriever.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag import markdown  # noqa: E402
from rulerag.io import read_parquet  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402


def reachability(data: Path, splits: tuple[str, ...] = ("train",)) -> dict[str, float]:
    layout = DataLayout(data)
    facts = read_parquet(layout.facts)
    bank = read_parquet(layout.rule_bank).set_index("rule_id")
    links = facts[facts["split"].isin(splits)]
    forward = links.groupby(["head", "relation"])["tail"].apply(set).to_dict()
    backward = links.groupby(["tail", "relation"])["head"].apply(set).to_dict()
    counts = {"queries": 0, "same_relation": 0, "rule_body": 0, "either": 0}
    with open(layout.queries("test"), encoding="utf-8") as handle:
        for line in handle:
            query = json.loads(line)
            answers, subject, relation = set(query["answer_ids"]), query["head"], query["relation"]
            same = bool(
                (forward.get((subject, relation), set()) | backward.get((subject, relation), set()))
                & answers
            )
            body = False
            for rule_id in query.get("rule_ids") or []:
                if rule_id not in bank.index:
                    continue
                atom = json.loads(bank.at[rule_id, "body"])[
                    0
                ]  # [relation, subject var, object var]
                table = forward if atom[1] == 0 else backward
                body |= bool(table.get((subject, atom[0]), set()) & answers)
            counts["queries"] += 1
            counts["same_relation"] += same
            counts["rule_body"] += body
            counts["either"] += same or body
    n = counts["queries"] or 1
    return {
        "queries": counts["queries"],
        **{k: 100 * v / n for k, v in counts.items() if k != "queries"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="icews14,fb15k237,nell995")
    args = parser.parse_args()
    header = ["dataset", "queries", "same relation", "rule body", "either"]
    print(markdown.row([*header, "R@10 standard", "R@10 rg", "R@10 rgft"]))
    print(markdown.rule("lrrrrrrr"))
    for name in args.datasets.split(","):
        layout = DataLayout.of(ROOT / "data", name)
        if not layout.queries("test").is_file():
            print(f"{name}: no benchmark at {layout.root}", file=sys.stderr)
            continue
        share = reachability(layout.root)
        measured = []
        for config in ("minilm-standard", "minilm-rg", "minilm-rgft"):
            path = layout.retrieval_metrics(config)
            value = json.loads(path.read_text())["recall_at_10"] if path.is_file() else None
            measured.append("–" if value is None else f"{100 * value:.1f}")
        shares = [f"{share[key]:.1f}" for key in ("same_relation", "rule_body", "either")]
        print(markdown.row([name, share["queries"], *shares, *measured]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
