"""A rule library: every rule once, in natural and formal language, addressed by id.

The SIAR + R³ paper compares a natural-language library with a formal one (its Tables 1 and
4); both forms are kept, and a search picks one. Sources: a RuleRAG rule bank (`bank.parquet`,
natural = the paper's `[Entity1, r1, Entity2] leads to ...` text, formal = `Rule.formal`) and
RuleBench's rule files (`{rule_id: {"NL": ..., "FOL": ...}}`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rulerag.errors import InputError

__all__ = ["FORMS", "RuleLibrary"]

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
    def from_rulebench(cls, path: Path, prefix: str = "") -> RuleLibrary:
        """A RuleBench rule file: `{rule_id: {"NL": natural, "FOL": formal}}`; `prefix` keeps
        ids of two files apart (the counterfactual rules reuse the originals' ids)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError(f"{path}: not a RuleBench rule file ({err})") from None
        if not isinstance(data, dict) or not data:
            raise InputError(f"{path}: expected a non-empty JSON object rule_id -> rule")
        ids, natural, formal = [], [], []
        for rule_id, rule in data.items():
            if not isinstance(rule, dict) or not isinstance(rule.get("NL"), str):
                raise InputError(f"{path}: rule {rule_id!r} has no natural-language text 'NL'")
            ids.append(f"{prefix}{rule_id}")
            natural.append(rule["NL"].strip())
            formal.append(str(rule.get("FOL") or rule["NL"]).strip())
        return cls(tuple(ids), tuple(natural), tuple(formal))
