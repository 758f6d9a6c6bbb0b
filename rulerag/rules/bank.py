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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TextIO

import numpy as np
import pandas as pd
import pyarrow as pa

from rulerag.rules.constant_columns import RuleSet
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
    rules: Iterable[Rule] | RuleSet,
    relation_names: Sequence[str] | Mapping[int, str],
    entity_names: Sequence[str] | Mapping[int, str] | None = None,
) -> pd.DataFrame:
    """One row per rule: id, structure, statistics, the ranking score and the text form
    (constants by `entity_names`, needed when a rule has constants); with any rule that has
    constants or no body, the `constants` and `kind` columns too. A `RuleSet`'s rules with
    constants are written from its columns (`ConstantRuleColumns.frame_columns`): the same
    rows as from a `Rule` each.

    Rows are sorted by head relation, score (descending) and id, so files are deterministic.
    """
    source = _FrameSource.of(rules, relation_names, entity_names)
    # sorted by keys made first; then each column made in that order a chunk at a time, never
    # all of a column's Python objects at once (FB15k-237's 6.9 million rules with constants:
    # GBs of strings), its strings let go once Arrow holds them
    everything = np.arange(source.n)
    id_key = np.empty(source.n, dtype=np.int64)
    for chunk in _chunks(everything):
        id_key[chunk] = [int(i[1:], 16) for i in source.values("rule_id", chunk)]
    heads = np.asarray(source.values("head_relation", everything), dtype=np.int64)
    scores = np.asarray(source.values("score", everything), dtype=np.float64)
    order = _frame_order(heads, scores, id_key)
    del heads, scores
    columns: dict[str, pd.Series] = {}
    for name in source.makers:
        if name == "rule_id":  # "R" and the 12 hex digits the key was read from
            columns[name] = _series(
                [f"R{k:012x}" for k in id_key[chunk].tolist()] for chunk in _chunks(order)
            )
            continue
        of_objects = source.of_objects(name)
        columns[name] = _series(source.values(name, chunk, of_objects) for chunk in _chunks(order))
    frame = pd.DataFrame(columns)
    return frame.astype({"head_relation": "int32", "length": "int8", "temporal": "bool"})


def _makers(
    relation_names: Sequence[str] | Mapping[int, str],
    entity_names: Sequence[str] | Mapping[int, str] | None,
    with_constants: bool,
) -> dict[str, Callable[[Rule], object]]:
    """Each rules-frame column's value of one rule object, in the frame's column order."""
    makers: dict[str, Callable[[Rule], object]] = {
        "rule_id": rule_id,
        "head_relation": lambda rule: rule.head.relation,
        "head_relation_name": lambda rule: relation_names[rule.head.relation],
        "length": lambda rule: rule.length,
        "body": Rule.body_json,
        "body_relations": lambda rule: json.dumps([a.relation for a in rule.body]),
        "temporal": lambda rule: rule.temporal,
        "var_constraints": lambda rule: json.dumps([list(g) for g in rule.var_constraints]),
        "score": lambda rule: rule.score,
    }
    for column in STAT_COLUMNS:
        makers[column] = partial(_stat, column)
    makers["text"] = lambda rule: rule.text(relation_names, entity_names)
    if with_constants:
        makers["constants"] = Rule.constants_json
        makers["kind"] = lambda rule: rule.kind
    return makers


@dataclass(frozen=True)
class _FrameSource:
    """Where a rules frame's values come from: the rule objects (a maker per column), then a
    `RuleSet`'s rules with constants (a column maker per column, for any of their rows)."""

    rules: list[Rule]
    makers: dict[str, Callable[[Rule], object]]
    from_columns: dict[str, Callable[[np.ndarray], list | np.ndarray]]
    n: int

    @classmethod
    def of(
        cls,
        rules: Iterable[Rule] | RuleSet,
        relation_names: Sequence[str] | Mapping[int, str],
        entity_names: Sequence[str] | Mapping[int, str] | None,
    ) -> _FrameSource:
        columns_part = rules.constants if isinstance(rules, RuleSet) else None
        if columns_part is not None and not len(columns_part):
            columns_part = None
        objects = list(rules.objects if isinstance(rules, RuleSet) else rules)
        with_constants = columns_part is not None or any(
            rule.constants or not rule.body for rule in objects
        )
        from_columns: dict[str, Callable[[np.ndarray], list | np.ndarray]] = {}
        if columns_part is not None:
            if entity_names is None:
                raise ValueError("rules with constants need entity names")
            from_columns = dict(columns_part.frame_columns(relation_names, entity_names))
        n = len(objects) + (len(columns_part) if columns_part is not None else 0)
        return cls(objects, _makers(relation_names, entity_names, with_constants), from_columns, n)

    def of_objects(self, name: str) -> list:
        """Column `name`'s value of every rule object (made once per column)."""
        return [self.makers[name](rule) for rule in self.rules]

    def values(self, name: str, at: np.ndarray, of_objects: list | None = None) -> list:
        """Column `name`'s values at positions `at` of the rules (the objects, then the
        columns' entries); `of_objects`: the objects' values, when made already."""
        if of_objects is None:
            of_objects = self.of_objects(name)
        if not self.from_columns:
            return [of_objects[i] for i in at.tolist()]
        out = np.empty(len(at), dtype=object)
        objects = at < len(self.rules)
        if objects.any():
            out[objects] = [of_objects[i] for i in at[objects].tolist()]
        made = self.from_columns[name](at[~objects] - len(self.rules))
        out[~objects] = made.tolist() if isinstance(made, np.ndarray) else made
        return out.tolist()


_CHUNK = 1 << 20  # rows of a column made at once


def _chunks(positions: np.ndarray) -> Iterator[np.ndarray]:
    for start in range(0, max(len(positions), 1), _CHUNK):
        yield positions[start : start + _CHUNK]


def _series(chunks: Iterable[list]) -> pd.Series:
    """`pd.Series` of the chunks' values joined, as `pd.Series(values)` would make it; strings
    go to Arrow a chunk at a time (as pandas' "str" dtype stores them), so that the Python
    strings of a whole column never exist at once."""
    listed: list = []
    arrays: list[pa.Array] = []
    for chunk in chunks:
        if arrays or (not listed and chunk and isinstance(chunk[0], str)):
            arrays.append(pa.array(chunk, type=pa.large_string(), from_pandas=True))
        else:
            listed += chunk
    if not arrays:
        return pd.Series(listed)
    return pd.Series(pd.array(pa.concat_arrays(arrays), dtype=pd.StringDtype(na_value=np.nan)))


def _frame_order(heads: np.ndarray, scores: np.ndarray, id_key: np.ndarray) -> np.ndarray:
    """Positions in a stable sort by (head relation, score descending with NaN last, id);
    `id_key` is each id's 12 hex digits read as a number, which sorts as the id does."""
    missing = np.isnan(scores)
    descending = np.where(missing, 0.0, -scores)
    return np.lexsort((id_key, descending, missing, heads))


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
    return "\n".join(_rules_text_groups(frame))


def write_rules_text(frame: pd.DataFrame, handle: TextIO) -> None:
    """`rules_text` written a head relation at a time: the whole text of millions of rules
    (and its lines) is never held at once."""
    for i, group in enumerate(_rules_text_groups(frame)):
        handle.write(f"\n{group}" if i else group)


def _rules_text_groups(frame: pd.DataFrame) -> Iterator[str]:
    """rules.txt's block of each head relation, in name order (joined by newlines): what
    `groupby("head_relation_name", sort=True)` gives, each group's rows taken only when its
    block is written (grouping took a sorted copy of every column at once)."""
    codes, names = pd.factorize(frame["head_relation_name"], sort=True)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    columns = frame[["score", "support", "text"]]
    for k, head in enumerate(names):
        group = columns.iloc[order[bounds[k] : bounds[k + 1]]]
        lines = [f"# {head} ({len(group)} rules)"]
        for score, support, text in zip(
            group["score"].tolist(), group["support"].tolist(), group["text"].tolist(), strict=True
        ):
            stats = f"conf={score:.3f}"
            if not pd.isna(support):
                stats += f" supp={support:g}"
            lines.append(f"{stats}\t{text}")
        lines.append("")
        yield "\n".join(lines)


def confidence_histogram(rules: pd.DataFrame, bank: pd.DataFrame, bins: int = 20) -> pd.DataFrame:
    """Counts of mined and banked rules per confidence bin (a DVC plot and a PNG)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    mined, _ = np.histogram(rules["score"].clip(0, 1), bins=edges)
    banked, _ = np.histogram(bank["score"].clip(0, 1), bins=edges)
    labels = [f"{lo:.2f}-{hi:.2f}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return pd.DataFrame({"confidence": labels, "mined": mined, "bank": banked})
