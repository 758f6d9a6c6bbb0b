"""A tiny RuleQA-style benchmark with known answers, for tests and smoke runs.

People visit countries; a person who "Express intent to meet" a country later makes a visit
there, and the rule bank says so:

    [Entity1, Express intent to meet, Entity2] leads to [Entity1, Make a visit, Entity2]

The corpus holds, for each person, the intent document naming their country (the oracle
document), plus distractors: the person criticising other countries on the queries' date
(they outrank the answer for the query alone), and visits by delegations never asked about.
A test query asks `what does <person> Make a visit ?`: the query with the rule text pulls the
intent document up. Written in exactly the format `build_benchmark` writes (corpus.jsonl,
test/f_g/f_r.jsonl, rules/bank.parquet).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from rulerag.io import write_manifest
from rulerag.layout import DataLayout

FIRST = [
    "Alice",
    "Bruno",
    "Chen",
    "Dana",
    "Emil",
    "Farah",
    "Goran",
    "Hana",
    "Ivo",
    "Jana",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Viktor",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zora",
    "Anders",
    "Bianca",
    "Carlos",
    "Dmitri",
    "Elif",
    "Felix",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kaito",
    "Lucia",
    "Milan",
    "Nora",
]
LAST = [
    "Arden",
    "Berg",
    "Costa",
    "Dahl",
    "Eze",
    "Frey",
    "Gold",
    "Holm",
    "Ito",
    "Jahn",
    "Kruger",
    "Lind",
    "Moreau",
    "Novak",
    "Okafor",
    "Petrov",
    "Quist",
    "Rossi",
    "Sato",
    "Tanaka",
    "Ueda",
    "Vogel",
    "Weber",
    "Xu",
    "Yilmaz",
    "Zhou",
    "Abe",
    "Brandt",
    "Cruz",
    "Duval",
    "Ek",
    "Fischer",
    "Garcia",
    "Haas",
    "Iqbal",
    "Jensen",
    "Keller",
    "Lopez",
    "Meyer",
    "Nagy",
]
COUNTRIES = [
    "Norway",
    "Chile",
    "Kenya",
    "Japan",
    "Peru",
    "Ghana",
    "Nepal",
    "Spain",
    "Qatar",
    "Egypt",
    "Italy",
    "Malta",
    "Oman",
    "Cuba",
    "Fiji",
    "Laos",
]
RULE_ID = "R000000000001"
OTHER_RULE_ID = "R000000000002"
RULE_TEXT = "[Entity1, Express intent to meet, Entity2] leads to [Entity1, Make a visit, Entity2]"
OTHER_RULE_TEXT = "[Entity1, Praise or endorse, Entity2] leads to [Entity1, Make a visit, Entity2]"


def people(n: int) -> list[str]:
    """Distinct people (distinct first and last names up to 40, then combinations)."""
    return [f"{FIRST[i % len(FIRST)]} {LAST[(i + i // len(FIRST)) % len(LAST)]}" for i in range(n)]


def tiny_benchmark(root: Path, n_people: int = 40) -> dict[str, int]:
    """Write data/<dataset>-like files under `root` (benchmark/, rules/); return counts.

    Person i's answer is COUNTRIES[i % 16]. Queries of the first half of the people are
    test queries (rule ids: the intent rule; none for i % 10 == 0; an id missing from the
    bank for i % 10 == 1), the next quarter F_G, the last quarter F_R (one item per rule: the intent
    rule with the oracle intent document, the praise rule with none in the corpus).
    """
    root = Path(root)
    names = people(n_people)
    docs: list[dict] = []

    def add(text: str) -> str:
        doc_id = f"D{len(docs)}"
        docs.append({"id": doc_id, "contents": text})
        return doc_id

    oracle: dict[str, str] = {}
    for i, person in enumerate(names):
        country = COUNTRIES[i % len(COUNTRIES)]
        oracle[person] = add(
            f"Time 2014-01-{1 + i % 28:02d} {person} Express intent to meet {country}."
        )
        for j in (1, 2, 3):
            other = COUNTRIES[(i + j) % len(COUNTRIES)]
            # Same day as the queries: the query alone ranks these above the answer.
            add(f"Time 2014-04-01 {person} Criticize {other}.")
        visitor = f"Delegation {i}"  # never asked about: their visits are distractors
        add(f"Time 2014-03-{1 + i % 28:02d} {visitor} Make a visit {COUNTRIES[(i + 5) % 16]}.")

    def query(i: int, prefix: str) -> dict:
        person = names[i]
        # Every tenth query has no rule (searched alone), every tenth+1 a rule the bank lacks.
        rule_ids = [[], ["R0000000000ff"]][i % 10] if i % 10 < 2 else [RULE_ID]
        return {
            "qid": f"{prefix}-{i:05d}",
            "query": f"Time 2014-04-01 what does {person} Make a visit ?",
            "answers": [COUNTRIES[i % len(COUNTRIES)]],
            "rule_ids": rule_ids,
        }

    half, three = n_people // 2, (3 * n_people) // 4
    test = [query(i, "test") for i in range(half)]
    f_g = [query(i, "fg") for i in range(half, three)]
    f_r = []
    for i in range(three, n_people):
        q = query(i, "fr")
        for rule_id, text, docs_for in (
            (RULE_ID, RULE_TEXT, [oracle[names[i]]]),
            (OTHER_RULE_ID, OTHER_RULE_TEXT, []),
        ):
            f_r.append(
                {
                    "qid": q["qid"],
                    "item_id": f"{q['qid']}#{rule_id}",
                    "query": q["query"],
                    "rule_id": rule_id,
                    "rule_text": text,
                    "oracle_doc_ids": docs_for,
                    "answers": q["answers"],
                }
            )
    layout = DataLayout(root)
    layout.benchmark.mkdir(parents=True, exist_ok=True)
    files = (
        (layout.corpus, docs),
        (layout.queries("test"), test),
        (layout.queries("f_g"), f_g),
        (layout.queries("f_r"), f_r),
    )
    for path, rows in files:
        with open(path, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
    write_manifest(layout.benchmark)  # as staged_outputs does for build_benchmark
    layout.rules_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {"rule_id": [RULE_ID, OTHER_RULE_ID], "text": [RULE_TEXT, OTHER_RULE_TEXT]}
    ).to_parquet(layout.rule_bank, index=False)
    return {"corpus": len(docs), "test": len(test), "f_g": len(f_g), "f_r": len(f_r)}
