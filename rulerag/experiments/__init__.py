"""Experiments over the whole pipeline: the top floor, above retrieval, generation and the grid
(rule generalisation over disjoint banks: train per bank, answer every bank)."""
