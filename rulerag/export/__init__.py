"""RuleQA as others read it: the `export` stage's formats (Hugging Face folder, DPR, the official
RuleRAG code's layout), built from what `build_benchmark` and the retrievers wrote."""
