"""From mined rules to the RuleRAG rule bank, and the files that describe both.

The paper keeps a small bank of confident rules (557 for ICEWS14, 367 for FB15k-237, ...) of
one body atom; the miners find many more. `select_bank` keeps rules by body length, minimum
confidence and support, and the best N per head relation, so the bank's size is a knob.

Rules with constants (AnyBURL's AC1 / AC2 / zero-body rules) add two columns to a rules frame,
`constants` (JSON `[[variable, entity], ...]`) and `kind`; a frame without such rules has
neither, so every file mined before (and every temporal KG's) keeps its bytes. The RuleRAG bank
keeps only rules without constants (`select_bank`): its documents verbalise one-atom rules
over variables, which a constant rule is not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rulerag.rules.rule import Atom, Rule

if TYPE_CHECKING:  # a type only: the stages that read banks (build_benchmark) need no settings
    from rulerag.rules.settings import BankConfig

STAT_COLUMNS = (
    "support",
    "body_support",
    "pca_body_support",
    "head_coverage",
    "std_confidence",
    "pca_confidence",
    "confidence",
)


def _stat(column: str, rule: Rule) -> float:
    """A statistic of the rule as a frame holds it: NaN for none."""
    value = getattr(rule, column)
    return np.nan if value is None else float(value)


def rule_id(rule: Rule) -> str:
    """A stable id from the rule's structure alone, so ids survive re-mining and re-ranking."""
    parts: list = [
        [rule.head.relation, rule.head.subject, rule.head.object],
        [[a.relation, a.subject, a.object] for a in rule.body],
        rule.temporal,
        [list(g) for g in rule.var_constraints],
    ]
    if rule.constants:  # only then, so ids of rules without constants stay as they were
        parts.append([list(pair) for pair in rule.constants])
    payload = json.dumps(parts)
    return "R" + hashlib.sha1(payload.encode()).hexdigest()[:12]


def rules_frame(
    rules: Iterable[Rule],
    relation_names: Sequence[str] | Mapping[int, str],
    entity_names: Sequence[str] | Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """One row per rule: id, structure, statistics, the ranking score and the text form
    (constants by `entity_names`, needed when a rule has constants); with any rule that has
    constants or no body, the `constants` and `kind` columns too.

    Rows are sorted by head relation, score (descending) and id, so files are deterministic.
    """
    rules = list(rules)
    with_constants = any(rule.constants or not rule.body for rule in rules)
    ids = [rule_id(rule) for rule in rules]
    # Sorted before the frame is built, as a stable sort of (head relation, score descending,
    # id) with NaN scores last: the frame's string columns are never taken in a new order,
    # which for FB15k-237's 6.9 million rules with constants asked for GBs at once.
    scores = [rule.score for rule in rules]
    order = sorted(
        range(len(rules)),
        key=lambda i: (
            rules[i].head.relation,
            scores[i] != scores[i],  # NaN
            0.0 if scores[i] != scores[i] else -scores[i],
            ids[i],
        ),
    )
    rules, ids, scores = ([seq[i] for i in order] for seq in (rules, ids, scores))
    del order
    # each column made a Series (Arrow-backed strings) before the next is listed: one column
    # of Python objects at a time (FB15k-237's 6.9 million rules: GBs of strings at once)
    makers: dict[str, Callable[[Rule], object]] = {
        "head_relation": lambda rule: rule.head.relation,
        "head_relation_name": lambda rule: relation_names[rule.head.relation],
        "length": lambda rule: rule.length,
        "body": Rule.body_json,
        "body_relations": lambda rule: json.dumps([a.relation for a in rule.body]),
        "temporal": lambda rule: rule.temporal,
        "var_constraints": lambda rule: json.dumps([list(g) for g in rule.var_constraints]),
    }
    for column in STAT_COLUMNS:
        makers[column] = partial(_stat, column)
    makers["text"] = lambda rule: rule.text(relation_names, entity_names)
    if with_constants:
        makers["constants"] = Rule.constants_json
        makers["kind"] = lambda rule: rule.kind
    columns: dict[str, pd.Series] = {"rule_id": pd.Series(ids)}
    ids.clear()
    for name, make in makers.items():
        if name == STAT_COLUMNS[0]:  # the score first, then the miners' statistics
            columns["score"] = pd.Series(scores)
        columns[name] = pd.Series([make(rule) for rule in rules])
    frame = pd.DataFrame(columns)
    return frame.astype({"head_relation": "int32", "length": "int8", "temporal": "bool"})


def frame_rules(frame: pd.DataFrame) -> list[Rule]:
    """Rebuild Rule objects from a rules frame (the inverse of `rules_frame`)."""
    has_constants = "constants" in frame.columns
    return [
        rule_of_row(
            row.head_relation,
            row.body,
            row.temporal,
            row.var_constraints,
            [getattr(row, c) for c in STAT_COLUMNS],
            row.constants if has_constants else None,
        )  # fmt: skip
        for row in frame.itertuples(index=False)
    ]


def rule_of_row(
    head_relation: int,
    body: str,
    temporal: bool,
    var_constraints: str,
    stats: Sequence[object],
    constants: str | None,
) -> Rule:
    """The `Rule` one row of a rules frame describes (`STAT_COLUMNS` in `stats`, NaN for
    none; `constants` None in a frame without rules with constants)."""
    atoms = tuple(Atom(*atom) for atom in json.loads(body))
    bound = tuple((int(v), int(e)) for v, e in json.loads(constants)) if constants else ()
    # the head is [Entity1, r, EntityN]: N counts the body's variables and the constants'
    # (a rule without a body still has two head variables)
    n_vars = 1 + max(
        [1 if bound else 0] + [max(a.subject, a.object) for a in atoms] + [v for v, _ in bound]
    )
    values = (None if pd.isna(s) else float(s) for s in stats)  # NaN or NA: none
    return Rule(
        head=Atom(int(head_relation), 0, n_vars - 1),
        body=atoms,
        temporal=bool(temporal),
        var_constraints=tuple(tuple(g) for g in json.loads(var_constraints)),
        constants=bound,
        **dict(zip(STAT_COLUMNS, values, strict=True)),
    )


def select_bank(frame: pd.DataFrame, config: BankConfig) -> pd.DataFrame:
    """Keep rules of the configured lengths, confidence and support; then the best N per head.
    Rules with constants never enter the bank (the module docstring says why), and neither do
    the columns that describe them: the bank of the same rules is the same file whether or not
    rules with constants were mined beside them, so turning them on reruns no bank reader."""
    support = frame["support"].fillna(0)
    if "constants" in frame.columns:
        frame = frame[frame["constants"] == "[]"].drop(columns=["constants", "kind"])
        support = support[frame.index]
    keep = (
        frame["length"].isin(config.lengths)
        & (frame["score"] >= config.min_confidence)
        & (support >= config.min_support)
    )
    bank = frame[keep]
    if config.top_n_per_head is not None:
        bank = bank.groupby("head_relation", sort=False).head(config.top_n_per_head)
    return bank.reset_index(drop=True)


def rules_text(frame: pd.DataFrame) -> str:
    """rules.txt: readable, grouped by head relation, best first, one rule per line."""
    lines = []
    for head, group in frame.groupby("head_relation_name", sort=True):
        lines.append(f"# {head} ({len(group)} rules)")
        for row in group.itertuples(index=False):
            stats = f"conf={row.score:.3f}"
            if not pd.isna(row.support):
                stats += f" supp={row.support:g}"
            lines.append(f"{stats}\t{row.text}")
        lines.append("")
    return "\n".join(lines)


def confidence_histogram(rules: pd.DataFrame, bank: pd.DataFrame, bins: int = 20) -> pd.DataFrame:
    """Counts of mined and banked rules per confidence bin (a DVC plot and a PNG)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    mined, _ = np.histogram(rules["score"].clip(0, 1), bins=edges)
    banked, _ = np.histogram(bank["score"].clip(0, 1), bins=edges)
    labels = [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return pd.DataFrame({"confidence": labels, "mined": mined, "bank": banked})
