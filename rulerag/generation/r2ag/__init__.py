"""R²AG (Ye et al., 2024): what the retriever knows about its ranked list, through a small
Transformer (the R²-Former), into a frozen generator's input embeddings.

`features`: relevance, precedent and neighbour similarity per retrieved document (paper App. A);
`former`: the R²-Former and its two heads (QDM relevance, projection to the LLM's hidden size);
`prompting`: the placeholder token before each document and the embedding hand-over;
`model`: a (frozen) causal LM behind the R²-Former, trained on LM + QDM loss.

Imports torch when its modules are imported (`features` needs only numpy).
"""
