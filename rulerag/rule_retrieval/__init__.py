"""Rule retrieval: finding the rules that fit a query in a rule library (SIAR + R³).

RuleRAG selects rules by the query's relation (the rule's head) or by embedding similarity;
the SIAR + R³ paper retrieves them with the query itself, which works poorly because queries
are concrete facts and rules are abstract, and closes the gap with two prompting steps:

* **SIAR** (self-induction augmented retrieval): an LLM writes a rule for the query (the
  self-induced rule, SI) from a few-shot prompt; the search text is the SI alone (`si`) or
  the SI followed by the query (`si_input`).
* **R³** (rule relevance re-estimate): an LLM re-ranks the top-n retrieved rules in one
  listwise prompt (RankGPT style); the top-k of its order is the selection.

Modules: `library` (rules in natural and formal form, from a RuleRAG bank or RuleBench),
`search` (BM25 and dense indexes over a library), `llm` (any generator behind a disk cache),
`prompts` (the paper's templates, the ranking parser), `methods` (vanilla, SIAR, R³),
`evaluate` (Recall@k, Match), `rulebench` (RuleBench's questions).

This package uses the retrieval back ends and the generators; `rulerag.rules` does not import
it (rules stay a leaf).
"""
