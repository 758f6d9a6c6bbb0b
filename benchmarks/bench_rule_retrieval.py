"""Rule retrieval's cost and quality per method: LLM prompts and seconds per query, Recall@k,
and on RuleBench the paper's Match (the gold answer in the LLM's answer with the top-1 rule).

Sources: `ruleqa:<dataset>` (after `dvc repro build_benchmark@<dataset>`; gold = the bank rules
of the query's relation) or `rulebench:<set>` (`../shared/rulebench/<set>`, e.g. ulogic,
clutrr; `--counterfactual` doubles the library with the `-cf` rules, the paper's robustness
test), or `rulebench:<folder>` for your own library in the same format (see
`rulerag.rule_retrieval.rulebench`). Nothing is cached unless `--cache` names an SQLite file, so
the prompts and seconds are what a first run costs. BM25's analysis is `--analyzer` (auto, the
default, picks CJK bigrams for a Chinese or Japanese library and says which ran).

    .venv/bin/python benchmarks/bench_rule_retrieval.py --source rulebench:ulogic --match
    .venv/bin/python benchmarks/bench_rule_retrieval.py --source ruleqa:icews14 --queries 24
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from rulerag import markdown
from rulerag.generation.settings import ApiSettings
from rulerag.rule_retrieval.experiment import library_analysis, results_markdown, run_evaluation
from rulerag.rule_retrieval.llm import LLMPool
from rulerag.rule_retrieval.settings import (
    ANALYZER_CHOICES,
    RuleRetrievalSettings,
    rule_retrieval_settings,
)

PROJECT = Path(__file__).resolve().parents[1]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="rulebench:ulogic")
    parser.add_argument("--queries", type=int, default=24)
    parser.add_argument("--retrievers", default="bm25,minilm")
    parser.add_argument("--methods", default="vanilla,vanilla_r3,siar,siar_r3")
    parser.add_argument("--top-n", type=int, default=10)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument(
        "--analyzer",
        choices=ANALYZER_CHOICES,
        default=RuleRetrievalSettings.analyzer,
        help="BM25 text analysis (auto: by the library's script)",
    )
    parser.add_argument("--counterfactual", action="store_true")
    parser.add_argument("--match", action="store_true", help="RuleBench: Match of the top-1 rule")
    parser.add_argument("--cache", type=Path, help="SQLite answer cache shared between runs")
    return parser.parse_args(argv)


def bench_settings(args: argparse.Namespace) -> RuleRetrievalSettings:
    """`rule_retrieval`'s settings for the command line's choices."""
    return rule_retrieval_settings(
        {
            "queries": args.queries,
            "retrievers": args.retrievers.split(","),
            "methods": args.methods.split(","),
            "top_n": args.top_n,
            "analyzer": args.analyzer,
            "similarity": False,
            "llm": {"model": args.model},
        }
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    settings = bench_settings(args)
    kind, _, name = args.source.partition(":")
    if kind == "ruleqa":
        from rulerag.layout import DataLayout
        from rulerag.rule_retrieval.ruleqa import reference_rows, ruleqa_task

        task, bank, test = ruleqa_task(
            DataLayout.of(PROJECT / "data", name), settings.queries, settings.shots, settings.seed
        )
        extra = reference_rows(task, bank, test, settings.top_k, None)
        questions = None
    else:
        from rulerag.rule_retrieval.rulebench import rulebench_task

        root = Path(os.environ.get("RULERAG_DATA_DIR", PROJECT.parent / "shared" / "kg"))
        induces = any(m.startswith("siar") for m in settings.methods)  # else no shot is read
        task, questions = rulebench_task(
            root.parent / "rulebench", name, settings.queries,
            settings.shots if induces else 0, settings.seed, args.counterfactual,
        )  # fmt: skip
        extra = []
    llms = LLMPool(settings.llm, args.cache, model_cache=PROJECT / ".models", api=ApiSettings())
    analysis = library_analysis(settings.analyzer, task.library)
    results, picked = run_evaluation(
        task, settings, llms, model_cache=PROJECT / ".models", extra_rows=extra, analysis=analysis
    )
    n = len(task.queries)
    results["LLM calls / query"] = (results["llm_calls"] / n).round(2)
    results["s / query"] = (results.get("seconds", 0) / n).round(2)
    title = f"{args.source}{' + counterfactual rules' if args.counterfactual else ''}: {n} queries"
    print(results_markdown(results, title, settings.ks))
    for note in (f"BM25 analysis: {analysis.describe()}", *task.notes):
        print(f"- {note}")
    print()
    cols = ["retriever", "row", "LLM calls / query", "s / query", "r3_repaired", "r3_unparsed"]
    print(results[[c for c in cols if c in results]].to_markdown(index=False))
    if args.match and questions is not None:
        from rulerag.rule_retrieval.rulebench import match_of

        text = task.library.text_of("natural")
        answer = llms("rank").complete
        rows = {"no rule": [None] * n, "golden rule": [text[q.gold[0]] for q in questions]}
        for (retriever, method, form), group in picked.groupby(
            ["retriever", "method", "query_form"], sort=False
        ):
            tops = [text[r[0]] if len(r) else None for r in group["rule_ids"]]
            rows[f"{retriever} {method} {form}".strip()] = tops
        print("\n" + markdown.row(["top-1 rule", "Match (%)"]) + "\n" + markdown.rule("ll"))
        for label, tops in rows.items():  # a line as soon as its LLM calls are done
            print(markdown.row([label, f"{100 * match_of(questions, tops, answer):.1f}"]))


if __name__ == "__main__":
    main()
