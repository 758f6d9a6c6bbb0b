"""The rule-retrieval methods: vanilla, vanilla + R³, SIAR and SIAR-R³ (paper Sec. 3, App. B).

* `vanilla`: the query is the search text; its top-k rules.
* `siar`: the LLM's self-induced rule (SI) is the search text (`si`), or SI followed by the
  query (`si_input`); top-k.
* `*_r3`: the top-n rules of the search (the paper: n = 20) are re-ranked by the LLM in one
  listwise prompt; the top-k of that order is the selection (the paper: k = 10). The R³ prompt
  shows the original query (the paper re-estimates relevance "to the original query"; its two
  R³ variants differ in the SIAR search that found the candidates).

Every method returns rule ids per query, best first, plus what it cost (LLM prompts sent, not
counting cache hits) and how often R³'s answer had to be repaired.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rulerag.benchmark.settings import RuleSelectionSettings
from rulerag.rule_retrieval.library import RuleLibrary
from rulerag.rule_retrieval.llm import CachedLLM
from rulerag.rule_retrieval.prompts import (
    induced_rule,
    parse_ranking,
    r3_prompt,
    si_prompt,
)
from rulerag.rule_retrieval.search import RuleIndex

__all__ = ["METHODS", "QUERY_FORMS", "Selection", "select_rules", "uses_llm"]

METHODS = ("vanilla", "vanilla_r3", "siar", "siar_r3")
#: the search text of SIAR: the self-induced rule alone, or followed by the query
QUERY_FORMS = ("si", "si_input")


def uses_llm(method: str) -> bool:
    return method != "vanilla"


@dataclass
class Selection:
    """What a method chose for each query and what it took."""

    method: str
    query_form: str | None
    ranked: list[list[str]]  # rule ids per query, best first
    search_texts: list[str]
    induced: list[str] = field(default_factory=list)  # SI per query (SIAR methods)
    llm_calls: int = 0
    r3_repaired: int = 0  # answers with missing / repeated / invented identifiers
    r3_unparsed: int = 0  # answers with no valid identifier at all (retriever order kept)

    def as_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "query_form": self.query_form,
            "queries": len(self.ranked),
            "llm_calls": self.llm_calls,
            "r3_repaired": self.r3_repaired,
            "r3_unparsed": self.r3_unparsed,
        }


def self_induce(
    queries: Sequence[str],
    llm: CachedLLM,
    shots: Sequence[tuple[str, str]],
    query_shots: Sequence[Sequence[tuple[str, str]]] | None = None,
) -> list[str]:
    """The LLM's self-induced rule for each query (an empty answer gives an empty rule);
    `query_shots`, one list per query, replaces the common `shots`."""
    per_query = query_shots if query_shots is not None else [shots] * len(queries)
    prompts = [si_prompt(q, s) for q, s in zip(queries, per_query, strict=True)]
    outputs = llm.complete(prompts, desc="self-induction")
    return [induced_rule(out) for out in outputs]


def search_text(query: str, induced: str, form: str) -> str:
    """SIAR's search text: `si` = the induced rule (the query if the LLM gave nothing),
    `si_input` = the induced rule followed by the query."""
    if form == "si":
        return induced or query
    if form == "si_input":
        return f"{induced} {query}".strip()
    raise ValueError(f"query form must be one of {QUERY_FORMS}, not {form!r}")


def select_rules(
    selection: RuleSelectionSettings,
    queries: Sequence[str],
    library: RuleLibrary,
    index: RuleIndex,
    *,
    llm: CachedLLM | None = None,
    rank_llm: CachedLLM | None = None,
    shots: Sequence[tuple[str, str]] = (),
    query_shots: Sequence[Sequence[tuple[str, str]]] | None = None,
) -> Selection:
    """Rule ids per query by `selection.method` (see the module notes): its `top_n` rules
    (the paper's k), R³ re-ranking its `candidates` search results (the paper's n), SIAR
    searching with its `query_form` and R³ shown the rules in its `rule_form` (`index` holds
    that form's texts; `selection.retriever` is the caller's to match). `llm` induces rules
    (and ranks them unless `rank_llm`, the same model with a longer answer budget, is given)
    from the demonstrations `shots`, or from `query_shots`, one list per query."""
    method, query_form, rule_form = selection.method, selection.query_form, selection.rule_form
    top_k, top_n = selection.top_n, selection.candidates
    if method not in METHODS:
        raise ValueError(f"rule retrieval method must be one of {METHODS}, not {method!r}")
    rank_llm = rank_llm or llm
    siar, rerank = method.startswith("siar"), method.endswith("_r3")
    if (siar and llm is None) or (rerank and rank_llm is None):
        raise ValueError(f"method {method!r} needs an LLM")
    used = {id(x): x for x in (llm, rank_llm) if x is not None}
    calls_before = sum(x.calls for x in used.values())
    induced: list[str] = []
    if siar:
        assert llm is not None
        induced = self_induce(queries, llm, shots, query_shots)
        texts = [search_text(q, si, query_form) for q, si in zip(queries, induced, strict=True)]
    else:
        texts = list(queries)
    rows = index.search(texts, top_n if rerank else top_k)
    selection = Selection(method, query_form if siar else None, [], texts, induced=induced)
    if rerank:
        assert rank_llm is not None
        rules = library.texts(rule_form)
        prompts = [
            r3_prompt(q, [rules[i] for i in cand]) for q, cand in zip(queries, rows, strict=True)
        ]
        answers = rank_llm.complete(prompts, desc="R3 re-ranking")
        reranked = []
        for cand, answer in zip(rows, answers, strict=True):
            ranking = parse_ranking(answer, len(cand))
            selection.r3_repaired += ranking.repaired
            selection.r3_unparsed += ranking.listed == 0 and len(cand) > 0
            reranked.append([cand[i] for i in ranking.order])
        rows = reranked
    selection.ranked = [[library.ids[i] for i in r[:top_k]] for r in rows]
    selection.llm_calls = sum(x.calls for x in used.values()) - calls_before
    return selection
