"""RuleQA-style benchmark construction: corpus linearisation, test queries balanced by
popularity, the F_R / F_G fine-tuning sets with oracle documents (the RuleRAG paper, Sec. 2)."""
