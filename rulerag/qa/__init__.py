"""Ordinary QA sets (ASQA, PopQA, HotpotQA, NQ) answered with RuleQA's rules (stage `qa_rag`)."""
