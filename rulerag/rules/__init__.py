"""Rules: the shared Rule type, the static (AMIE 3-style) and temporal (TLogic-style) miners,
rule-bank selection and interop with the original tools' file formats."""

from rulerag.rules.rule import Atom, Rule

__all__ = ["Atom", "Rule"]
