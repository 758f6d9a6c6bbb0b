"""Link what a person asks to the KG's own names: a question in words, or a structured RuleQA
query (subject, relation, time), becomes the KG's subject id, relation id and stored time.

The served model answers RuleQA queries about the KG's names (`rulerag.kg.text.query_text`),
so a question must first name them. The link is shown to the person, so every part says how it
was found (`Mention.method`): "exact" (the same words, case and accents aside), "fuzzy"
(rapidfuzz's `fuzz.ratio` of the folded words at least `threshold`: a typo) or "id".

How a question is read:

1. The time (temporal KGs): an ISO date `2014-12-18`, or one with a month name (`18 December
   2014`, `December 18, 2014`, read by dateutil) for days; a 4-digit year for years;
   `step 211` for opaque steps. It is cut out with the word before it when that is `Time`
   (RuleQA's form), `on`, `in`, `at` or `during`; a marked time wins over a bare number. A
   static KG refuses a question with a date.
2. The rest is split into words and punctuation, and every entity and relation name found
   there exactly, as whole words, is a candidate, unless it is a strict part of another name
   found exactly (the relation "film film genre" holds FB15k-237's entity "Film"). The pair
   (subject, relation) that does not overlap and ranks highest wins: exact matches, then
   words covered, then scores, then the longer subject, the earlier, the lower id. Question
   words ("what does", "who") need not be covered, and are never a name on their own.
3. Only when the best exact pair leaves a word unexplained (a typo, a word the KG lacks) are
   fuzzy candidates added: every run of whole words (up to one more than the longest name)
   that holds such a word is compared with the names of a length that can reach `threshold`
   (`rapidfuzz.process.cdist`), and each name is kept at its best run. A name found exactly
   inside a fuzzy run of a longer name gives way to it (the person typed the longer name with
   a typo), and the ranking of step 2 picks the pair. Names shorter than `MIN_FUZZY_CHARS`
   link only exactly: one edit turns many common words into some short name.

A link takes about 0.1 ms when every word matches exactly and 2–7 ms on ICEWS14 with a typo
(benchmarks/bench_linking.py, which also measures the typos fixed and the junk refused).
Names may repeat in a KG (FB15k-237 and NELL-995 give one name to several entities): the link
takes the lowest id and lists the others in `Mention.same_name`.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from numbers import Integral
from typing import Any, cast

import numpy as np
import pandas as pd
from dateutil import parser as date_parser
from rapidfuzz import fuzz, process

from rulerag.errors import InputError
from rulerag.kg.schema import EPOCH, TIME_UNITS, TimeUnit, format_time
from rulerag.kg.text import query_text

__all__ = ["MIN_FUZZY_CHARS", "LinkError", "LinkedQuery", "Linker", "Mention"]

#: names shorter than this (folded characters, spaces counted) link inside a question only
#: exactly: at `threshold` 85 one added or dropped letter reaches a 3–6 letter name, and common
#: words are one letter from some short name ("too" → Togo, "man" → Mano, "has" → Shas in
#: ICEWS14); 5 keeps most typo fixes (benchmarks/bench_linking.py)
MIN_FUZZY_CHARS = 5
#: how close a name must be to be suggested when nothing links
SUGGEST_CUTOFF = 70.0
#: words that open a question: skipped before the subject, never matched by a name alone, and
#: a link need not cover them (articles must be: "the Aam Aadmi Party" may be a typo of a
#: longer name)
QUESTION_WORDS = frozenset(
    {"what", "who", "whom", "whose", "which", "when", "where", "why", "how"}
    | {"does", "do", "did", "will", "would", "could", "can", "should"}
    | {"has", "have", "had", "is", "was", "are", "were"}
)
#: words before a time that belong to it: RuleQA's `Time`, and prepositions
TIME_MARKERS = ("time", "on", "in", "at", "during")

_TOKEN = re.compile(r"\w+|[^\w\s]")
_MONTH = "|".join(
    sorted((m for names in date_parser.parserinfo().MONTHS for m in names), key=len, reverse=True)
)
_ISO = r"\d{4}-\d{1,2}-\d{1,2}"
_DAY_PATTERNS = (
    re.compile(rf"(?<![\w-]){_ISO}(?![\w-])"),
    re.compile(
        rf"(?<!\w)\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTH})\.?,?\s+\d{{4}}(?!\w)", re.I
    ),
    re.compile(rf"(?<!\w)(?:{_MONTH})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}(?!\w)", re.I),
)
_YEAR = re.compile(r"(?<![\w-])\d{4}(?![\w-])")
_STEP = re.compile(r"(?<!\w)step\s+(\d+)(?!\w)", re.I)
_MARKER = re.compile(rf"\b(?:{'|'.join(TIME_MARKERS)})\s*,?\s*$", re.I)
#: what a static KG refuses: an ISO date, or RuleQA's temporal `Time <t>` opening
_STATIC_TIME = re.compile(
    rf"^\s*time\s+(?:{_ISO}|step\s+\d+|\d+)(?![\w-])|(?<![\w-]){_ISO}(?![\w-])", re.I
)
_EXAMPLES = {
    "day": "a date like {last}",
    "year": "a year like {last}",
    "index": "a step like {last}",
}


class LinkError(InputError):
    """A question or query that does not link to the KG; the message says what to change."""


@dataclass(frozen=True)
class Mention:
    """One part of the input linked to one KG name, and how."""

    #: the span of the input it was matched from ("" when given by id)
    text: str
    id: int
    name: str
    #: "exact" | "fuzzy" | "id"
    method: str
    #: 100.0 for exact and id; rapidfuzz's `fuzz.ratio` (2 decimals) for fuzzy
    score: float
    #: other ids with the same name (case and accents aside); the link took the lowest
    same_name: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["same_name"] = list(self.same_name)
        return out


@dataclass(frozen=True)
class LinkedQuery:
    """A linked question: the KG's subject, relation and stored time, and the RuleQA query."""

    subject: Mention
    relation: Mention
    #: stored time (None on a static KG)
    time: int | None
    #: as `format_time` renders it ("2014-12-18")
    time_text: str | None
    #: `query_text(subject.name, relation.name, time_text)`
    query: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject.as_dict(),
            "relation": self.relation.as_dict(),
            "time": self.time,
            "time_text": self.time_text,
            "query": self.query,
        }


def _fold(token: str) -> str:
    """A token as names are compared: accents dropped, case folded."""
    decomposed = unicodedata.normalize("NFKD", token)
    folded = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return folded.strip() or token.casefold()


def _keys(text: str) -> tuple[str, ...]:
    """A name's or a phrase's folded words and punctuation: equal keys are an exact match
    (so spaces around punctuation, case and accents never matter)."""
    return tuple(_fold(t) for t in _TOKEN.findall(unicodedata.normalize("NFC", text)))


def _shown(text: str, limit: int = 80) -> str:
    """The input echoed on one line in a message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _listed(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


class _Pool:
    """Names to compare phrases with (`fuzz.ratio` of folded text), sorted by length: since
    ratio ≤ 200·min(a, b) / (a + b), a phrase is compared only with the names whose length can
    reach the cutoff, which keeps a fuzzy link to milliseconds on 75k names."""

    def __init__(self, ids: Sequence[int], strings: Sequence[str]) -> None:
        order = sorted(range(len(ids)), key=lambda j: (len(strings[j]), ids[j]))
        self.ids = [int(ids[j]) for j in order]
        self.strings = [strings[j] for j in order]
        self.lengths = np.array([len(t) for t in self.strings])

    def best(self, phrases: Sequence[str], cutoff: float) -> list[tuple[int, float] | None]:
        """Each phrase's closest name (id, score), None when none reaches `cutoff`; ties go to
        the shorter name, then the lower id."""
        out: list[tuple[int, float] | None] = [None] * len(phrases)
        rows_by_length: dict[int, list[int]] = {}
        for row, phrase in enumerate(phrases):
            rows_by_length.setdefault(len(phrase), []).append(row)
        for length, rows in rows_by_length.items():
            lo = int(np.searchsorted(self.lengths, length * cutoff / (200 - cutoff) - 1e-6))
            hi = int(
                np.searchsorted(self.lengths, length * (200 - cutoff) / cutoff + 1e-6, "right")
            )
            if lo >= hi:
                continue
            scores = process.cdist(
                [phrases[row] for row in rows],
                self.strings[lo:hi],
                scorer=fuzz.ratio,
                processor=None,
                score_cutoff=cutoff,
                dtype=np.float64,
            )
            for row, line in zip(rows, scores, strict=True):
                j = int(line.argmax())
                if line[j] > 0:
                    out[row] = (self.ids[lo + j], float(line[j]))
        return out

    def closest(self, phrase: str, cutoff: float, limit: int) -> list[int]:
        """The ids of up to `limit` names closest to the phrase, best first."""
        found = process.extract(
            phrase,
            self.strings,
            scorer=fuzz.ratio,
            processor=None,
            score_cutoff=cutoff,
            limit=limit,
        )
        return [self.ids[j] for _, _, j in found]


class _Names:
    """One kind's names (entities or relations) indexed once for exact and fuzzy lookups."""

    def __init__(self, kind: str, names: Sequence[str], min_fuzzy_chars: int) -> None:
        if isinstance(names, str) or not len(names):
            raise ValueError(f"{kind} names: expected a non-empty sequence of names by id")
        self.kind = kind
        self.names = [str(n) for n in names]
        self.exact: dict[tuple[str, ...], int] = {}
        others: dict[int, list[int]] = {}
        for i, name in enumerate(self.names):
            key = _keys(name)
            if not key:
                continue
            first = self.exact.setdefault(key, i)
            if first != i:
                others.setdefault(first, []).append(i)
        self.same_name = {first: tuple(ids) for first, ids in others.items()}
        self.max_tokens = max((len(k) for k in self.exact), default=0)
        texts = {i: " ".join(key) for key, i in self.exact.items()}
        #: every linkable name (a whole structured input may be short), and those long enough
        #: to be looked for fuzzily inside a question
        self.all = _Pool(list(texts), list(texts.values()))
        longer = {i: t for i, t in texts.items() if len(t) >= min_fuzzy_chars}
        self.long = _Pool(list(longer), list(longer.values()))

    def mention(self, text: str, id_: int, method: str, score: float) -> Mention:
        return Mention(text, id_, self.names[id_], method, score, self.same_name.get(id_, ()))


@dataclass(frozen=True)
class _Token:
    start: int
    end: int
    key: str
    #: a word (not punctuation) that a link should cover
    content: bool
    #: tokens on either side of a cut-out time are in different segments
    segment: int


@dataclass(frozen=True)
class _Candidate:
    """A name found over tokens [first, last) of the question."""

    first: int
    last: int
    id: int
    method: str
    score: float
    #: characters of the question's content words it covers
    covered: int
    #: characters of the input it spans
    length: int

    def rank(self) -> tuple:
        exact = self.method == "exact"
        return (exact, self.covered, self.score, self.length, -self.first, -self.id)

    def within(self, other: _Candidate) -> bool:
        """Whether this candidate's words are a strict part of the other's."""
        inside = other.first <= self.first and self.last <= other.last
        return inside and (self.first, self.last) != (other.first, other.last)

    def overlaps(self, other: _Candidate) -> bool:
        return self.first < other.last and other.first < self.last


class Linker:
    """Links questions and structured queries to one KG's names; every lookup structure is
    built once here, so a link takes milliseconds."""

    def __init__(
        self,
        entity_names: Sequence[str],
        relation_names: Sequence[str],
        *,
        time_unit: str | None,
        time_range: tuple[int, int] | None,
        threshold: float = 85.0,
        min_fuzzy_chars: int = MIN_FUZZY_CHARS,
    ) -> None:
        if not 0 < threshold <= 100:
            raise ValueError(f"threshold must be in (0, 100], got {threshold}")
        if time_unit is not None and time_unit not in TIME_UNITS:
            raise ValueError(f"time_unit must be one of {TIME_UNITS} or None, got {time_unit!r}")
        if (time_unit is None) != (time_range is None):
            raise ValueError("a temporal KG needs both time_unit and time_range, a static neither")
        if time_range is not None and not int(time_range[0]) <= int(time_range[1]):
            raise ValueError(f"time_range must be (first, last) with first <= last: {time_range}")
        self.threshold = float(threshold)
        self.time_unit = time_unit
        self.time_range = None if time_range is None else (int(time_range[0]), int(time_range[1]))
        # typed copies for the time methods, which run only on a temporal KG
        self._unit = cast(TimeUnit, time_unit)
        self._first, self._last = self.time_range or (0, 0)
        self._entities = _Names("entity", entity_names, min_fuzzy_chars)
        self._relations = _Names("relation", relation_names, min_fuzzy_chars)

    @classmethod
    def from_kg(
        cls,
        entities: pd.DataFrame,
        relations: pd.DataFrame,
        stats: Mapping[str, Any],
        *,
        threshold: float = 85.0,
        min_fuzzy_chars: int = MIN_FUZZY_CHARS,
    ) -> Linker:
        """A linker for an ingested KG: its entities and relations frames (`id`, `name`) and
        its `stats.json` (`time_unit`, `time_range` as `format_time` wrote it)."""
        names = [
            _names_by_id(frame, kind)
            for frame, kind in ((entities, "entities"), (relations, "relations"))
        ]
        unit = stats.get("time_unit")
        span = stats.get("time_range")
        time_range = None
        if unit is not None:
            if not span:
                raise ValueError("stats: a temporal KG's stats need time_range (first, last)")
            first, last = (_read_time(str(span[end]), unit) for end in ("first", "last"))
            if first is None or last is None:
                raise ValueError(f"stats: time_range {span} is not in time_unit {unit!r}")
            time_range = (first, last)
        return cls(
            names[0],
            names[1],
            time_unit=unit,
            time_range=time_range,
            threshold=threshold,
            min_fuzzy_chars=min_fuzzy_chars,
        )

    @property
    def temporal(self) -> bool:
        return self.time_unit is not None

    # -- structured queries ---------------------------------------------------------------

    def link_structured(
        self, subject: str | int, relation: str | int, time: str | int | None
    ) -> LinkedQuery:
        """A RuleQA query given in parts: each name linked exactly (case and accents aside),
        else fuzzily; an int is an id. The time as `parse_time` reads it."""
        return self._linked(
            self._link_part(subject, self._entities),
            self._link_part(relation, self._relations),
            self.parse_time(time),
        )

    def _link_part(self, value: str | int, names: _Names) -> Mention:
        if isinstance(value, bool) or not isinstance(value, str | Integral):
            raise LinkError(
                f"the {names.kind} must be a name (text) or an id (int), got {type(value).__name__}"
            )
        if isinstance(value, Integral):
            if not 0 <= int(value) < len(names.names):
                raise LinkError(
                    f"{names.kind} id {int(value)} is out of range: "
                    f"this KG's {names.kind} ids run 0..{len(names.names) - 1}"
                )
            return names.mention("", int(value), "id", 100.0)
        text = value.strip()
        if not text:
            raise LinkError(
                f"the {names.kind} is empty: give a {names.kind} name of the KG or its id"
            )
        key = _keys(text)
        if key in names.exact:
            return names.mention(text, names.exact[key], "exact", 100.0)
        (found,) = names.all.best([" ".join(key)], self.threshold)
        if found is not None:
            return names.mention(text, found[0], "fuzzy", round(found[1], 2))
        close = names.all.closest(" ".join(key), SUGGEST_CUTOFF, 3)
        hint = (
            f"closest: {_listed([names.names[i] for i in close])}"
            if close
            else f"no {names.kind} name is close; check the KG's names"
        )
        raise LinkError(f"no {names.kind} of the KG is named '{_shown(text)}': {hint}")

    # -- times ----------------------------------------------------------------------------

    def parse_time(self, value: str | int | None) -> int | None:
        """A time as stored (int) from text (`2014-12-18`, `18 December 2014` for days; `2014`
        for years; `step 211` or `211` for steps) or from the stored int; None on a static KG.
        Refuses a missing time on a temporal KG, any time on a static one, and a time outside
        the KG's range."""
        if not self.temporal:
            if value is None:
                return None
            raise LinkError(f"this KG has no times: leave the time out (got '{value}')")
        if value is None:
            raise LinkError(f"no time given: add {self._example()}; {self._covers()}")
        if isinstance(value, bool) or not isinstance(value, str | Integral):
            raise LinkError(
                f"the time must be text ({self._example()}) or a stored int, "
                f"got {type(value).__name__}"
            )
        if isinstance(value, Integral):
            return self._in_range(int(value), str(int(value)))
        stored = _read_time(value.strip(), self._unit)
        if stored is None:
            raise LinkError(f"cannot read '{_shown(value)}' as a time: write {self._example()}")
        return self._in_range(stored, value.strip())

    def _in_range(self, stored: int, shown: str) -> int:
        if not self._first <= stored <= self._last:
            raise LinkError(f"{_shown(shown)} is outside the KG's times: {self._covers()}")
        return stored

    def _example(self) -> str:
        """A valid time of this KG, as the person should write one."""
        return _EXAMPLES[self._unit].format(last=format_time(self._last, self._unit))

    def _covers(self) -> str:
        first, last = (format_time(t, self._unit) for t in (self._first, self._last))
        return f"the KG covers {first}..{last}"

    def _question_time(self, text: str) -> tuple[int | None, list[tuple[int, int]]]:
        """The question's time and the character spans to cut out with it."""
        if not self.temporal:
            found = _STATIC_TIME.search(text)
            if found:
                raise LinkError(
                    f"this KG has no times: remove '{found.group().strip()}' from the question"
                )
            return None, []
        spans = self._time_spans(text)
        if not spans:
            raise LinkError(f"no time in the question: add {self._example()}; {self._covers()}")
        values = {v for _, _, v, _ in spans}
        if len(values) > 1:
            marked = [s for s in spans if s[3]]
            if marked and len({v for _, _, v, _ in marked}) == 1:
                spans = marked
            else:
                shown = _listed(sorted({text[a:b] for a, b, _, _ in spans}))
                raise LinkError(f"the question has several times ({shown}): keep one")
        start, end, value, _ = spans[0]
        self._in_range(value, text[start:end])
        cut = []
        for start, end, _, _ in spans:
            marker = _MARKER.search(text, 0, start)
            cut.append((marker.start() if marker else start, end))
        return value, cut

    def _time_spans(self, text: str) -> list[tuple[int, int, int, bool]]:
        """Every time in the text: (start, end, stored value, preceded by a time marker)."""
        if self._unit == "day":
            found = [m for pattern in _DAY_PATTERNS for m in pattern.finditer(text)]
        elif self._unit == "year":
            found = list(_YEAR.finditer(text))
        else:
            found = list(_STEP.finditer(text))
        spans = []
        for m in sorted(found, key=lambda m: m.start()):
            value = _read_time(m.group(), self._unit)
            if value is None:
                raise LinkError(f"'{m.group()}' is not a valid time: write {self._example()}")
            spans.append((m.start(), m.end(), value, bool(_MARKER.search(text, 0, m.start()))))
        return spans

    # -- questions ------------------------------------------------------------------------

    def link_question(self, text: str) -> LinkedQuery:
        """A question in words linked to (subject, relation, time); see the module's doc."""
        if not isinstance(text, str):
            raise LinkError(f"the question must be text, got {type(text).__name__}")
        text = unicodedata.normalize("NFC", text)
        if not text.strip():
            raise LinkError("the question is empty: ask about an entity and a relation of the KG")
        time, cut = self._question_time(text)
        tokens = _tokenize(text, cut)
        if not any(t.content for t in tokens):
            raise LinkError(
                f"the question '{_shown(text)}' names nothing: "
                "name an entity and a relation of the KG"
            )
        start = _question_start(tokens)
        weights = np.cumsum([0] + [len(t.key) if t.content else 0 for t in tokens])
        exact_entities = self._exact(tokens, start, weights, self._entities)
        exact_relations = self._exact(tokens, start, weights, self._relations)
        entities, relations = _undominated(exact_entities, exact_relations)
        best = _best_pair(entities, relations)
        if best is None or sum(c.covered for c in best) < weights[-1]:
            # a fuzzy run must hold a word that the best exact pair (else the best exact
            # name) leaves unexplained
            found = entities + relations
            held = best or ([max(found, key=_Candidate.rank)] if found else [])
            covered = {i for c in held for i in range(c.first, c.last)}
            open_ = [t.content and i not in covered for i, t in enumerate(tokens)]
            entities, relations = _undominated(
                _with_fuzzy(
                    exact_entities, self._fuzzy(tokens, start, weights, self._entities, open_)
                ),
                _with_fuzzy(
                    exact_relations, self._fuzzy(tokens, start, weights, self._relations, open_)
                ),
            )
            best = _best_pair(entities, relations)
        if best is None:
            raise self._not_found(text, tokens, start, entities, relations)
        subject, relation = (
            names.mention(
                text[tokens[c.first].start : tokens[c.last - 1].end], c.id, c.method, c.score
            )
            for c, names in zip(best, (self._entities, self._relations), strict=True)
        )
        return self._linked(subject, relation, time)

    def _exact(
        self, tokens: list[_Token], start: int, weights: np.ndarray, names: _Names
    ) -> list[_Candidate]:
        """Every name occurring as whole words, past the question's opening words."""
        found = []
        keys = [t.key for t in tokens]
        for first in range(len(tokens)):
            for last in range(first + 1, min(len(tokens), first + names.max_tokens) + 1):
                if tokens[last - 1].segment != tokens[first].segment:
                    break
                id_ = names.exact.get(tuple(keys[first:last]))
                if id_ is not None and last > start:
                    covered = int(weights[last] - weights[max(first, start)])
                    length = tokens[last - 1].end - tokens[first].start
                    found.append(_Candidate(first, last, id_, "exact", 100.0, covered, length))
        return found

    def _fuzzy(
        self,
        tokens: list[_Token],
        start: int,
        weights: np.ndarray,
        names: _Names,
        open_: Sequence[bool],
    ) -> list[_Candidate]:
        """Each long name that best matches some run holding an open word, at its best run
        (score, then shorter, then earlier)."""
        runs = _windows(tokens, start, names.max_tokens + 1, open_)
        phrases = [" ".join(t.key for t in tokens[a:b]) for a, b in runs]
        by_name: dict[int, _Candidate] = {}
        for (first, last), best in zip(runs, names.long.best(phrases, self.threshold), strict=True):
            if best is None:
                continue
            id_, score = best
            found = _Candidate(
                first,
                last,
                id_,
                "fuzzy",
                round(score, 2),
                int(weights[last] - weights[first]),
                tokens[last - 1].end - tokens[first].start,
            )
            held = by_name.get(id_)
            if held is None or _closer(found) > _closer(held):
                by_name[id_] = found
        return list(by_name.values())

    def _close_entities(
        self, tokens: list[_Token], start: int, relation: _Candidate | None
    ) -> list[str]:
        """Up to three entity names (short ones too) close to some run of the question outside
        the relation's words."""
        if relation is not None:
            tokens = (
                tokens[: relation.first]
                + [
                    _Token(t.start, t.end, t.key, False, -1 - i)  # a segment of its own: no run
                    for i, t in enumerate(tokens[relation.first :], relation.first)
                    if i < relation.last
                ]
                + tokens[relation.last :]
            )
        open_ = [t.content for t in tokens]
        runs = _windows(tokens, start, self._entities.max_tokens + 1, open_)
        phrases = [" ".join(t.key for t in tokens[a:b]) for a, b in runs]
        top: dict[int, float] = {}
        for best in self._entities.all.best(phrases, SUGGEST_CUTOFF):
            if best is not None:
                top[best[0]] = max(top.get(best[0], 0.0), best[1])
        return [self._entities.names[i] for i in sorted(top, key=lambda i: (-top[i], i))[:3]]

    def _close_relations(self, tokens: list[_Token], start: int, subject: _Candidate) -> list[str]:
        """Up to three relation names close to the question's words besides the subject:
        rapidfuzz's WRatio, which also credits a word of a longer name ("visit")."""
        words = [
            t.key
            for i, t in enumerate(tokens[start:], start)
            if t.content and not subject.first <= i < subject.last
        ]
        pool = self._relations.all
        close = process.extract(
            " ".join(words),
            pool.strings,
            scorer=fuzz.WRatio,
            processor=None,
            score_cutoff=SUGGEST_CUTOFF,
            limit=3,
        )
        return [self._relations.names[pool.ids[j]] for _, _, j in close]

    def _not_found(
        self,
        text: str,
        tokens: list[_Token],
        start: int,
        entities: list[_Candidate],
        relations: list[_Candidate],
    ) -> LinkError:
        """Why no pair links: the better found part is trusted and the other is missing
        (a typo'd subject whose fuzzy run runs into an exact relation lacks its subject)."""
        subject = max(entities, key=_Candidate.rank, default=None)
        relation = max(relations, key=_Candidate.rank, default=None)
        if subject is None or (relation is not None and relation.rank() > subject.rank()):
            close = self._close_entities(tokens, start, relation)
            hint = f"closest names: {_listed(close)}" if close else "no entity name is close"
            return LinkError(
                f"no entity of the KG found in '{_shown(text)}': "
                f"check the subject's spelling; {hint}"
            )
        close = self._close_relations(tokens, start, subject)
        hint = (
            f"closest relations: {_listed(close)}"
            if close
            else f"relations look like {_listed(self._relations.names[:3])}"
        )
        return LinkError(
            f"no relation of the KG found in '{_shown(text)}' besides the entity "
            f"'{self._entities.names[subject.id]}': name the relation as the KG does; {hint}"
        )

    def _linked(self, subject: Mention, relation: Mention, time: int | None) -> LinkedQuery:
        time_text = format_time(time, self._unit)
        return LinkedQuery(
            subject, relation, time, time_text, query_text(subject.name, relation.name, time_text)
        )


def _names_by_id(frame: pd.DataFrame, kind: str) -> list[str]:
    """A vocabulary frame's names as a list indexed by id (ids must be 0..n-1)."""
    ordered = frame.sort_values("id", kind="stable")
    ids = ordered["id"].to_numpy()
    if not np.array_equal(ids, np.arange(len(ids))):
        raise ValueError(f"{kind}: ids must run 0..{len(ids) - 1} without gaps")
    return [str(n) for n in ordered["name"]]


def _read_time(text: str, unit: str) -> int | None:
    """Stored time from its text in `unit`, or None when the text is not one."""
    text = " ".join(text.split())
    if unit == "day":
        if re.fullmatch(_ISO, text):
            try:
                day = dt.date.fromisoformat("-".join(p.zfill(2) for p in text.split("-")))
            except ValueError:
                return None
        elif any(p.fullmatch(text) for p in _DAY_PATTERNS[1:]):
            try:
                day = date_parser.parse(text).date()
            except (ValueError, OverflowError):
                return None
        else:
            return None
        return (day - EPOCH).days
    if unit == "year":
        return int(text) if re.fullmatch(r"\d{1,4}", text) else None
    step = re.fullmatch(r"(?:step\s+)?(\d+)", text, re.I)
    return int(step.group(1)) if step else None


def _windows(
    tokens: list[_Token], start: int, longest: int, open_: Sequence[bool]
) -> list[tuple[int, int]]:
    """Runs of up to `longest` tokens past the opening words, within a segment, that hold an
    open token (a content word left to explain)."""
    runs = []
    for first in range(start, len(tokens)):
        for last in range(first + 1, min(len(tokens), first + longest) + 1):
            if tokens[last - 1].segment != tokens[first].segment:
                break
            if any(open_[first:last]):
                runs.append((first, last))
    return runs


def _tokenize(text: str, cut: list[tuple[int, int]]) -> list[_Token]:
    """The question's words and punctuation outside the cut-out spans; a cut starts a new
    segment so that no name is read across it."""
    tokens = []
    segment = 0
    for m in _TOKEN.finditer(text):
        if any(a <= m.start() < b for a, b in cut):
            if tokens and tokens[-1].segment == segment:
                segment += 1
            continue
        key = _fold(m.group())
        content = m.group()[0].isalnum() or m.group()[0] == "_"
        tokens.append(
            _Token(m.start(), m.end(), key, content and key not in QUESTION_WORDS, segment)
        )
    return tokens


def _question_start(tokens: list[_Token]) -> int:
    """The first token past the question's opening (question words and punctuation): no name
    is read from the opening alone."""
    for i, t in enumerate(tokens):
        if t.key not in QUESTION_WORDS and t.key[0].isalnum():
            return i
    return len(tokens)


def _with_fuzzy(exact: list[_Candidate], fuzzy: list[_Candidate]) -> list[_Candidate]:
    """Exact and fuzzy candidates together. A name found exactly keeps its exact match only;
    an exact match that is a strict part of a fuzzy one of another name gives way to it: the
    person typed the longer name with a typo ("Polize (Indonesia)" holds "Indonesia")."""
    found = {c.id for c in exact}
    fuzzy = [f for f in fuzzy if f.id not in found]
    kept = [e for e in exact if not any(e.within(f) for f in fuzzy)]
    return kept + fuzzy


def _undominated(
    entities: list[_Candidate], relations: list[_Candidate]
) -> tuple[list[_Candidate], list[_Candidate]]:
    """The candidates that are not a strict part of a name found exactly, of either kind: those
    words belong to the longer name. Without this, a question whose subject does not link
    would take a word of the relation as its subject (FB15k-237's entity "Film" inside the
    relation "film film genre", WIKI's "member" inside "member of")."""
    exact = [c for c in entities + relations if c.method == "exact"]

    def kept(found: list[_Candidate]) -> list[_Candidate]:
        return [c for c in found if not any(c.within(e) for e in exact)]

    return kept(entities), kept(relations)


def _closer(candidate: _Candidate) -> tuple:
    """Which of one name's fuzzy runs to keep: the higher score, then the shorter, earlier."""
    return (candidate.score, candidate.first - candidate.last, -candidate.first)


def _best_pair(
    entities: list[_Candidate], relations: list[_Candidate]
) -> tuple[_Candidate, _Candidate] | None:
    """The subject and relation that do not overlap and rank highest together: exact matches,
    words covered, scores, then the subject's length, position and id. Each part of the rank
    is a sum over the two, so for a given subject the best relation is the best-ranked one that
    does not overlap it."""
    ranked = sorted(relations, key=_Candidate.rank, reverse=True)
    best: tuple[tuple, tuple[_Candidate, _Candidate]] | None = None
    for subject in entities:
        relation = next((r for r in ranked if not r.overlaps(subject)), None)
        if relation is None:
            continue
        s, r = subject.rank(), relation.rank()
        key = (s[0] + r[0], s[1] + r[1], s[2] + r[2], *s[3:], *r[3:])
        if best is None or key > best[0]:
            best = (key, (subject, relation))
    return None if best is None else best[1]
