"""How fast and how well a typed question links to a real KG's names (run by hand, not a test).

    .venv/bin/python benchmarks/bench_linking.py                       # the four mirrored KGs
    .venv/bin/python benchmarks/bench_linking.py --datasets icews14 --queries 2000

For each KG (ingested from the mirror, RULERAG_DATA_DIR or ../shared/kg), on RuleQA queries
built from sampled test facts (`rulerag.kg.text.query_text`):

- building the `Linker` (seconds);
- the queries as written: share linked back to (subject, relation, time), milliseconds per
  link (median, 95th percentile, max);
- the same facts asked in other words (`What did <subject> <relation> on <time>?`);
- one typo in the subject (`with_typo`, tests/data/test_linking_real.py's too): share fixed,
  refused (LinkError), linked to another name, and milliseconds;
- `MIN_FUZZY_CHARS`: for each shortest fuzzy name length, typos fixed and linked wrongly, and
  junk subjects linked: those of the 1,000 commonest English words (wordninja's list) that
  are no name of the KG, asked as `what does <word> <relation> ?`, should all be refused.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import wordninja  # noqa: E402

from rulerag.kg.ingest import ingest  # noqa: E402
from rulerag.kg.registry import DATASETS  # noqa: E402
from rulerag.kg.schema import format_time  # noqa: E402
from rulerag.kg.settings import ingest_settings  # noqa: E402
from rulerag.kg.text import query_text  # noqa: E402
from rulerag.markdown import table  # noqa: E402
from rulerag.orchestration.project_copy import kg_mirror_dir  # noqa: E402
from rulerag.serving.linking import (  # noqa: E402
    MIN_FUZZY_CHARS,
    QUESTION_WORDS,
    Linker,
    LinkError,
    _keys,
)

Fact = tuple[int, int, int | None]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def with_typo(name: str, rng: np.random.Generator) -> str:
    """One edit at a letter or digit: substitute, drop, insert, or swap with the next one."""
    where = [i for i, c in enumerate(name) if c.isalnum()]
    i = int(rng.choice(where))
    edit = int(rng.integers(4))
    if edit == 0:
        return (
            name[:i] + str(rng.choice([c for c in LETTERS if c != name[i].lower()])) + name[i + 1 :]
        )
    if edit == 2:
        return name[:i] + str(rng.choice(list(LETTERS))) + name[i:]
    if edit == 3 and i + 1 < len(name) and name[i + 1].isalnum() and name[i + 1] != name[i]:
        return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    return name[:i] + name[i + 1 :]


def timed(linker: Linker, question: str) -> tuple[object, float]:
    """The link (None when refused) and its milliseconds."""
    start = time.perf_counter()
    try:
        link = linker.link_question(question)
    except LinkError:
        link = None
    return link, 1000 * (time.perf_counter() - start)


def outcome(link, fact: Fact) -> str:
    if link is None:
        return "refused"
    head, relation, when = fact
    right = head in {link.subject.id, *link.subject.same_name}
    return "right" if right and (link.relation.id, link.time) == (relation, when) else "wrong"


def measure(linker: Linker, facts: list[Fact], ask: Callable[[Fact], str]) -> dict[str, float]:
    counts = {"right": 0, "refused": 0, "wrong": 0}
    times = []
    for fact in facts:
        link, ms = timed(linker, ask(fact))
        counts[outcome(link, fact)] += 1
        times.append(ms)
    n = len(facts)
    p50, p95, top = np.percentile(times, [50, 95, 100])
    return {**{k: v / n for k, v in counts.items()}, "p50": p50, "p95": p95, "max": top}


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def ms(x: float) -> str:
    return f"{x:.2f}"


def bench(name: str, queries: int, min_chars: list[int], common: list[str]) -> tuple[list, list]:
    """One KG's row of the speed table and its rows of the `MIN_FUZZY_CHARS` table."""
    with tempfile.TemporaryDirectory() as scratch:
        ingested = ingest(
            DATASETS[name],
            ingest_settings({}),
            data_dir=kg_mirror_dir(),
            download_dir=Path(scratch),
        )
    kg, stats = ingested.kg, ingested.stats
    entities = kg.entities.set_index("id")["name"]
    relations = kg.relations.set_index("id")["name"]
    start = time.perf_counter()
    linker = Linker.from_kg(kg.entities, kg.relations, stats)
    build = time.perf_counter() - start

    named = entities[entities.str.count(r"[^\W_]") >= 2].index
    test = kg.facts[(kg.facts["split"] == "test") & kg.facts["head"].isin(named)]
    test = test.sample(min(queries, len(test)), random_state=0)
    facts: list[Fact] = [
        (int(h), int(r), None if kg.time_unit is None else int(t))
        for h, r, t in zip(test["head"], test["relation"], test["time"], strict=True)
    ]
    rng = np.random.default_rng(0)
    typos = {fact: with_typo(entities[fact[0]], rng) for fact in facts}

    def when(fact: Fact) -> str | None:
        return format_time(fact[2], kg.time_unit)

    def written(fact: Fact) -> str:
        return query_text(entities[fact[0]], relations[fact[1]], when(fact))

    def worded(fact: Fact) -> str:
        asked = f"What did {entities[fact[0]]} {relations[fact[1]].lower()}"
        return f"{asked} on {when(fact)}?" if kg.temporal else f"{asked}?"

    def typoed(fact: Fact) -> str:
        return query_text(typos[fact], relations[fact[1]], when(fact))

    exact, wording, typo = (measure(linker, facts, ask) for ask in (written, worded, typoed))
    speed = [
        name, len(kg.entities), f"{build:.2f}", len(facts),
        pct(exact["right"]), ms(exact["p50"]), ms(exact["p95"]), ms(exact["max"]),
        pct(wording["right"]),
        pct(typo["right"]), pct(typo["refused"]), pct(typo["wrong"]),
        ms(typo["p50"]), ms(typo["p95"]), ms(typo["max"]),
    ]  # fmt: skip

    names = {" ".join(_keys(n)) for n in kg.entities["name"]}
    junk = [w for w in common if w not in names]
    junk_facts = [facts[int(rng.integers(len(facts)))] for _ in junk]
    tradeoff = []
    for shortest in min_chars:
        variant = Linker.from_kg(kg.entities, kg.relations, stats, min_fuzzy_chars=shortest)
        fixed = measure(variant, facts, typoed)
        linked = sum(
            timed(variant, query_text(word, relations[f[1]], when(f)))[0] is not None
            for word, f in zip(junk, junk_facts, strict=True)
        )
        mark = " (default)" if shortest == MIN_FUZZY_CHARS else ""
        tradeoff.append([
            name, f"{shortest}{mark}", pct(fixed["right"]), pct(fixed["wrong"]),
            f"{linked} / {len(junk)} ({pct(linked / len(junk))})",
        ])  # fmt: skip
    return speed, tradeoff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["icews14", "fb15k237", "nell995", "wiki"])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--min-chars", type=int, nargs="+", default=[3, 4, 5, 6, 7])
    parser.add_argument("--junk-words", type=int, default=1000)
    args = parser.parse_args()

    costs = wordninja.DEFAULT_LANGUAGE_MODEL._wordcost
    common = [w for w in sorted(costs, key=costs.get) if w.isalpha() and w not in QUESTION_WORDS]
    speed_rows, tradeoff_rows = [], []
    for name in args.datasets:
        speed, tradeoff = bench(name, args.queries, args.min_chars, common[: args.junk_words])
        speed_rows.append(speed)
        tradeoff_rows += tradeoff

    header = [
        "KG", "entities", "build s", "queries", "as written: linked", "ms p50", "ms p95",
        "ms max", "other words: linked", "typo: fixed", "refused", "wrong", "ms p50", "ms p95",
        "ms max",
    ]  # fmt: skip
    print(table(header, speed_rows, "lrrrrrrrrrrrrrr"))
    print()
    header = ["KG", "min fuzzy chars", "typo fixed", "typo linked wrongly", "junk subjects linked"]
    print(table(header, tradeoff_rows, "lrrrr"))


if __name__ == "__main__":
    main()
