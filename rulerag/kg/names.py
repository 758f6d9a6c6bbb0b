"""Turn source identifiers into names people (and LLM prompts) can read."""

from __future__ import annotations

import re

import wordninja

_SPACES = re.compile(r"\s+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def readable(raw: str) -> str:
    """`<Albuquerque,_New_Mexico>` -> `Albuquerque, New Mexico`; `Citizen_(Nigeria)` likewise."""
    text = raw.strip()
    if len(text) > 1 and text.startswith("<") and text.endswith(">"):
        text = text[1:-1]
    return _SPACES.sub(" ", text.replace("_", " ")).strip()


def camel_words(raw: str) -> str:
    """`<wasBornIn>` -> `was born in`, `<hasWonPrize>` -> `has won prize` (YAGO's relation
    identifiers); names without inner capitals (`capital of`, `P131`) are only `readable`."""
    text = readable(raw)
    if " " in text or not _CAMEL.search(text):
        return text
    return " ".join(
        word.lower() if word[1:].islower() or len(word) == 1 else word
        for word in _CAMEL.sub(" ", text).split()
    )


def nell_entity(concept: str) -> tuple[str, str | None]:
    """`concept_personcanada_matthew_bellamy` -> (`matthew bellamy`, `personcanada`).

    NELL writes entities as concept_<type>_<name>; the type is kept apart because many names
    repeat across types (`new` is a book, a city, ...). Non-concept strings (NELL-995 also holds
    raw coordinates such as `62.33,6.66`) are kept as they are.
    """
    parts = concept.split("_", 2)
    if len(parts) == 3 and parts[0] == "concept":
        return readable(parts[2]), parts[1]
    if len(parts) == 2 and parts[0] == "concept":
        return readable(parts[1]), None
    return concept, None


def nell_relation(relation: str) -> str:
    """`concept:agriculturalproductgrowinginstateorprovince` -> words, by wordninja segmentation."""
    body = relation.split(":", 1)[1] if relation.startswith("concept:") else relation
    return " ".join(wordninja.split(body)) or body


def freebase_relation(path: str) -> str:
    """Fallback text for a Freebase relation path when rel2text has none: its last segment."""
    last = path.rstrip("/").split("/")[-1]
    return readable(last.replace(".", " "))
