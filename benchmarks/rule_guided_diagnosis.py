"""Why rule-guided retrieval helps or hurts on a dataset: the measurements behind the README's
"Rules and retrieval" paragraph.

Run by hand after `retrieve` built the indexes (`dvc repro retrieve`):

    .venv/bin/python benchmarks/rule_guided_diagnosis.py [--datasets nell995,fb15k237,icews14]
        [--indexes bm25,minilm] [--out benchmarks/results/rule_guided_diagnosis.json]

For every test query and index it searches the query alone (`q`), every selected rule's
`q ∘ r` (the paper's text, what the `rg` configuration does) and `q ∘ body`, the rule's body
relation names without the `[Entity1, ..., Entity2] leads to [...]` frame, then reports:

* Recall@10 of each way of turning those lists into ten documents: `standard` (q alone),
  `rg` (the pipeline's union of the q∘r lists by best score), `rg_loose` (the paper's count:
  the answer anywhere in the per-rule top-10 lists), the union with the query's own list
  added (`rg+q`), reciprocal-rank fusion of the lists (`rrf`, `rrf+q`), `body` (q∘body lists
  united) and a single q∘r list (`rule_1` = the best-ranked rule's list alone);
* each against `standard` on the same queries: queries only one side recalls and an exact
  McNemar p-value;
* how many of the top 10 documents name the query's subject (`subject_share`): a query-only
  search stays on the subject's links, a search the rule text pulls elsewhere does not;
* for dense indexes, how close the `q ∘ r` embedding is to the query's and to the rule's
  embedding alone (cosine): when the rule text dominates, every query of a relation searches
  almost the same vector;
* the share of test queries whose answer the selected rules' bodies reach from the subject
  in the corpus (see retrieval_ceiling.py), i.e. what rules could add at best.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rulerag import markdown  # noqa: E402
from rulerag.evaluation.claims import paired_em  # noqa: E402
from rulerag.io import iter_jsonl  # noqa: E402
from rulerag.layout import DataLayout  # noqa: E402
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts  # noqa: E402
from rulerag.retrieval.metrics import answer_hits  # noqa: E402
from rulerag.retrieval.rule_guided import retrieve, rule_query_texts, unite  # noqa: E402

K = 10
DEPTH = 50
RRF_K = 60  # Cormack et al.'s constant


def open_index(data: Path, name: str):
    """The `retrieve` stage's searcher for index `name` (default `index` settings)."""
    from rulerag.retrieval.configs import parse_config
    from rulerag.retrieval.runs import open_searcher
    from rulerag.retrieval.settings import index_settings

    config = parse_config(f"{name}-standard")
    return open_searcher(config, DataLayout(data), index_settings(None), ROOT / ".models")


def rrf(run: pd.DataFrame) -> pd.DataFrame:
    """Reciprocal-rank fusion of each query's lists: score = sum 1 / (60 + rank)."""
    fused = run.assign(score=1.0 / (RRF_K + run["rank"]))
    fused = fused.groupby(["qid", "doc_id"], as_index=False)["score"].sum()
    fused = fused.assign(rule="", rank=1)
    return unite(fused)


def recalled(
    united: pd.DataFrame,
    contents: Mapping[str, str],
    answers: Mapping[str, Sequence[str]],
    k: int = K,
) -> dict[str, int]:
    """qid -> 1 when one of the united list's first k documents holds an answer."""
    top = united[united["rank"] <= k]
    found = set(top.loc[answer_hits(top, contents, answers), "qid"])
    return {q: int(q in found) for q in answers}


def diagnose(data: Path, index: str, limit: int | None) -> dict:
    layout = DataLayout(data)
    queries = read_queries(layout.queries("test"))
    heads = {row["qid"]: row["head_name"] for row in iter_jsonl(layout.queries("test"))}
    queries = [q for q in queries if q.answers and q.rule_ids][:limit]
    corpus = read_corpus(layout.corpus)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    bank = read_rule_texts(layout.rule_bank)
    answers = {q.qid: q.answers for q in queries}
    subjects = {q.qid: (heads[q.qid],) for q in queries}

    # the retrieve stage's own searches: the query alone, q ∘ r, and q ∘ body
    searcher = open_index(data, index)
    alone, _ = retrieve(queries, searcher, DEPTH, use_rules=False)
    with_rule, plan = retrieve(queries, searcher, DEPTH, bank)
    with_body, _ = retrieve(queries, searcher, DEPTH, rule_query_texts(bank, "body"))
    first_rule = {q.qid: next(r for r in q.rule_ids if r in bank) for q in queries}
    first = with_rule[with_rule["rule"] == with_rule["qid"].map(first_rule)]
    loose = with_rule[with_rule["rank"] <= K].assign(rank=1)  # every per-rule top-10 document
    variants = {
        "standard": unite(alone),
        "rg": unite(with_rule),
        "rg_loose": unite(loose),
        "rg+q": unite(pd.concat([with_rule, alone])),
        "rrf": rrf(with_rule),
        "rrf+q": rrf(pd.concat([with_rule, alone])),
        "body": unite(with_body),
        "rule_1": unite(first),
    }
    recall = {
        name: recalled(frame, contents, answers, K if name != "rg_loose" else 10**9)
        for name, frame in variants.items()
    }
    report: dict = {"queries": len(queries), "searches_with_rules": len(plan.texts)}
    report["variants"] = {}
    for name, per_query in recall.items():
        paired = paired_em(per_query, recall["standard"])
        report["variants"][name] = {
            "recall_at_10": round(100 * paired.em_a, 1),
            "only_this": paired.a_only,
            "only_standard": paired.b_only,
            "p_value": round(paired.p_value, 4),
        }

    def subject_share(frame: pd.DataFrame) -> float:
        named = answer_hits(frame[frame["rank"] <= K], contents, subjects)
        return round(100 * float(np.mean(named)), 1) if len(named) else 0.0

    report["subject_share"] = {
        "standard": subject_share(alone),
        "q∘r lists": subject_share(with_rule),
        "q∘body lists": subject_share(with_body),
    }
    if index != "bm25":
        from rulerag.retrieval.encoders import encode

        model = searcher.query_model
        text = {q.qid: q.text for q in queries}
        sample = range(min(len(plan.texts), 2000))
        e_q = encode(model, [text[plan.qids[i]] for i in sample], 64, True)
        e_r = encode(model, [bank[plan.rules[i]] for i in sample], 64, True)
        e_qr = encode(model, [plan.texts[i] for i in sample], 64, True)
        report["cosine"] = {
            "q∘r vs q": round(float(np.mean(np.sum(e_qr * e_q, axis=1))), 3),
            "q∘r vs r": round(float(np.mean(np.sum(e_qr * e_r, axis=1))), 3),
        }
    return report


def rule_reach(data: Path) -> float:
    """% of test queries whose answer a selected rule's body reaches from the subject."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from retrieval_ceiling import reachability

    return round(reachability(data)["rule_body"], 1)


def to_markdown(results: Mapping[str, Mapping[str, dict]]) -> str:
    variants = next(iter(next(iter(results.values())).values()))["variants"]
    header = ["dataset", "index", *variants]
    header += ["subject share q / q∘r", "cos(q∘r, q) / cos(q∘r, r)"]
    rows = []
    for dataset, by_index in results.items():
        for index, rep in by_index.items():
            if index == "rule_body_reach":
                continue
            cells = []
            for name, v in rep["variants"].items():
                mark = "" if name == "standard" else f" ({v['only_this']}/{v['only_standard']})"
                cells.append(f"{v['recall_at_10']}{mark}")
            share = rep["subject_share"]
            cos = rep.get("cosine")
            cos_text = f"{cos['q∘r vs q']} / {cos['q∘r vs r']}" if cos else ""
            shares = f"{share['standard']} / {share['q∘r lists']}"
            rows.append([dataset, index, *cells, shares, cos_text])
    return markdown.table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="icews14,fb15k237,nell995")
    parser.add_argument("--indexes", default="bm25,minilm")
    parser.add_argument("--data", type=Path, default=ROOT / "data")
    parser.add_argument("--limit", type=int, default=None, help="first N test queries only")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    for dataset in args.datasets.split(","):
        data = args.data / dataset
        if not DataLayout(data).indexes.is_dir():
            print(f"{dataset}: no indexes under {data}; run `dvc repro retrieve` first")
            continue
        results[dataset] = {}
        for index in args.indexes.split(","):
            results[dataset][index] = diagnose(data, index, args.limit)
            print(dataset, index, json.dumps(results[dataset][index], ensure_ascii=False))
        results[dataset]["rule_body_reach"] = rule_reach(data)
    if results:
        print(to_markdown(results))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
