"""A rule library: every rule once, in natural and formal language, addressed by id.

The SIAR + R³ paper compares a natural-language library with a formal one (its Tables 1 and
4); both forms are kept, and a search picks one. Sources: a RuleRAG rule bank (`bank.parquet`,
natural = the paper's `[Entity1, r1, Entity2] leads to ...` text, formal = `Rule.formal`) and
RuleBench's rule files (`{rule_id: {"NL": ..., "FOL": ...}}`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rulerag.errors import InputError

__all__ = ["FORMS", "RuleLibrary", "read_json"]

logger = logging.getLogger(__name__)

#: which text of a rule a search uses
FORMS = ("natural", "formal")


@dataclass(frozen=True)
class RuleLibrary:
    """Rules in a fixed order: `ids[i]` reads `natural[i]` / `formal[i]`."""

    ids: tuple[str, ...]
    natural: tuple[str, ...]
    formal: tuple[str, ...]

    def __post_init__(self) -> None:
        if not (len(self.ids) == len(self.natural) == len(self.formal)):
            raise ValueError("rule library: ids, natural and formal texts differ in length")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("rule library: a rule id is listed twice")

    def __len__(self) -> int:
        return len(self.ids)

    def texts(self, form: str = "natural") -> tuple[str, ...]:
        """The rules' texts in `form` (natural or formal), in library order."""
        if form not in FORMS:
            raise ValueError(f"rule form must be one of {FORMS}, not {form!r}")
        return self.natural if form == "natural" else self.formal

    def text_of(self, form: str = "natural") -> dict[str, str]:
        """Rule id -> its text in `form`."""
        return dict(zip(self.ids, self.texts(form), strict=True))

    def extended(self, other: RuleLibrary) -> RuleLibrary:
        """This library followed by the rules of `other` it does not hold (the paper's
        robustness setting doubles a library with counterfactual rules)."""
        keep = [i for i, rule_id in enumerate(other.ids) if rule_id not in set(self.ids)]
        return RuleLibrary(
            self.ids + tuple(other.ids[i] for i in keep),
            self.natural + tuple(other.natural[i] for i in keep),
            self.formal + tuple(other.formal[i] for i in keep),
        )

    @classmethod
    def from_bank(
        cls, bank: pd.DataFrame, relation_names: Mapping[int, str] | Sequence[str]
    ) -> RuleLibrary:
        """A RuleRAG bank (`bank.parquet`) with the KG's relation names."""
        from rulerag.rules.bank import frame_rules

        rules = frame_rules(bank)
        return cls(
            tuple(str(i) for i in bank["rule_id"]),
            tuple(str(t) for t in bank["text"]),
            tuple(rule.formal(relation_names) for rule in rules),
        )

    @classmethod
    def from_rulebench(
        cls, path: Path, prefix: str = "", *, allow_empty: bool = False
    ) -> RuleLibrary:
        """A RuleBench rule file: `{rule_id: {"NL": natural, "FOL": formal}}`; `prefix` keeps
        ids of two files apart (the counterfactual rules reuse the originals' ids).
        `allow_empty`: `{}` is an empty library (RuleBench ships sets whose `train_rule.json`
        is `{}`), not an error.

        An id listed twice with the same rule is kept once, with a warning: RuleBench's own
        `ulogic-cf` rule files list each of their 1,046 ids twice, identically. An id listed
        twice with different rules is refused, naming the file and the id: a question's gold
        id would name either rule, and JSON readers silently keep the last."""
        path = Path(path)
        pairs = read_json(path, "RuleBench rule file", pairs=True)
        if not isinstance(pairs, _Pairs) or not (pairs or allow_empty):
            raise InputError(f"{path}: expected a non-empty JSON object rule_id -> rule")
        rules: dict[str, dict] = {}
        repeated = 0
        for rule_id, value in pairs:
            rule = _object(value, f"{path}: rule {rule_id!r}")
            if not isinstance(rule, dict) or not isinstance(rule.get("NL"), str):
                raise InputError(f"{path}: rule {rule_id!r} has no natural-language text 'NL'")
            if rule_id in rules:
                if rules[rule_id] != rule:
                    raise InputError(f"{path}: rule id {rule_id!r} is listed twice, differently")
                repeated += 1
                continue
            rules[rule_id] = rule
        if repeated:
            logger.warning(
                "%s: %d rule ids listed twice with the same rule, kept once", path, repeated
            )
        ids, natural, formal = [], [], []
        for rule_id, rule in rules.items():
            ids.append(f"{prefix}{rule_id}")
            natural.append(rule["NL"].strip())
            formal.append(str(rule.get("FOL") or rule["NL"]).strip())
        return cls(tuple(ids), tuple(natural), tuple(formal))


class _Pairs(list):
    """A JSON object as read: its (key, value) pairs in file order, duplicates kept."""


def _object(value: object, where: str) -> object:
    """`value` with every JSON object in it a dict; a key repeated with another value inside
    one object is refused (JSON readers keep the last silently)."""
    if isinstance(value, list) and not isinstance(value, _Pairs):
        return [_object(item, where) for item in value]
    if not isinstance(value, _Pairs):
        return value
    out: dict[str, object] = {}
    for key, item in value:
        item = _object(item, where)
        if key in out and out[key] != item:
            raise InputError(f"{where}: key {key!r} is listed twice, differently")
        out[key] = item
    return out


def read_json(path: Path, what: str, *, pairs: bool = False) -> object:
    """A JSON file as `what` (named in the error): UTF-8 with or without a byte-order mark
    (files saved by Windows tools start with one). `pairs`: every object is read as its
    (key, value) pairs in file order (`_Pairs`), so a repeated key can be seen."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
        return json.loads(text, object_pairs_hook=_Pairs if pairs else None)
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: not a {what} ({err})") from None
