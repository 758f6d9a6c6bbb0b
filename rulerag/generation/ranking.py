"""Answer ranking (`decoding: rank`): the generator scores a candidate set instead of writing.

How temporal KG forecasting with language models is often scored, and a training-free
comparison small models can take part in (greedy decoding leaves SmolLM2-135M at EM 0 on every
training-free row). Candidates of a query: the entities its prompt's documents name (heads
and tails of their KG links, the query's own subject left out) plus the applied rules'
candidates (`apply_rules`' answers.jsonl), each once. Each candidate's score is the model's
log-likelihood of writing it as the answer after the prompt (the training target: the paper
style's `Kabul.` and the end-of-sequence token), summed over its tokens; the answer is the best.
The gold answer's reciprocal rank among the candidates (0 when it is not one) gives MRR and
Hits@k beside EM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rulerag.generation.prefix_cache import SharedPrefix, shared_prefix, tree_attention
from rulerag.generation.prompts import PromptFormat, Sample
from rulerag.generation.training import encode_example

__all__ = [
    "RANK_HITS",
    "answer_by_ranking",
    "candidate_sets",
    "doc_entity_names",
    "gold_rank",
    "rank_metrics",
    "encode_candidates",
    "score_candidates",
]


#: Hits@k reported for ranked rows
RANK_HITS = (1, 3, 10)


def candidate_sets(
    samples: Sequence[Sample],
    doc_entities: Mapping[str, tuple[str, str]],
    subjects: Mapping[str, str],
    rule_candidates: Mapping[str, Sequence[str]] | None = None,
) -> list[list[str]]:
    """Each sample's candidates: the names its prompt documents hold (`doc_entities`: doc id
    -> (head name, tail name)), then the rules' candidates, without the query's subject."""
    out = []
    for sample in samples:
        names: list[str] = []
        shown = list(sample.extra.get("doc_ids", []))[: len(sample.documents)]
        for doc_id in shown:
            names.extend(doc_entities.get(doc_id, ()))
        names.extend((rule_candidates or {}).get(sample.qid, ()))
        subject = subjects.get(sample.qid)
        out.append([n for n in dict.fromkeys(names) if n != subject])
    return out


def encode_candidates(
    tokenizer: Any,
    prompt: str,
    candidates: Sequence[str],
    prompt_format: PromptFormat,
    *,
    chat_template: bool,
    max_prompt_tokens: int | None,
) -> tuple[list[int], list[list[int]]]:
    """The prompt's token ids and each candidate's answer ids, tokenised as training tokenises
    a (prompt, answer) pair (so the model is asked what it was taught). The prompt's ids do
    not depend on the answer; without candidates an empty answer gives them."""
    encoded = [
        encode_example(
            tokenizer,
            prompt,
            prompt_format.target(c) if c is not None else "",
            chat_template=chat_template,
            max_prompt_tokens=max_prompt_tokens,
        )
        for c in (candidates or [None])
    ]
    length = sum(1 for label in encoded[0]["labels"] if label == -100)  # the shared prompt
    answers = [e["input_ids"][length:] for e in encoded] if candidates else []
    return encoded[0]["input_ids"][:length], answers


def score_candidates(
    model: Any,
    tokenizer: Any,
    prompt: str,
    candidates: Sequence[str],
    prompt_format: PromptFormat,
    *,
    chat_template: bool,
    max_prompt_tokens: int | None,
    batch_size: int = 16,
    prefix: SharedPrefix | None = None,
) -> list[float]:
    """Summed log-probability of each candidate as the answer to `prompt`.

    With tree attention (`tree_attention`) one forward pass scores them all: the prompt (after
    `prefix`, whose cache is reused) followed by every candidate's tokens, each candidate
    seeing the prompt and its own earlier tokens only, at the positions it would have right
    after the prompt. Otherwise the prompt runs once and its cache is copied for each padded
    batch of `batch_size` candidates.
    """
    if not candidates:
        return []
    prompt_ids, answers = encode_candidates(
        tokenizer, prompt, candidates, prompt_format,
        chat_template=chat_template, max_prompt_tokens=max_prompt_tokens,
    )  # fmt: skip
    if tree_attention(model):
        return _score_tree(model, prompt_ids, answers, prefix)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return _score_batched(model, prompt_ids, answers, pad, batch_size)


def _score_tree(
    model: Any,
    prompt_ids: Sequence[int],
    answers: Sequence[Sequence[int]],
    prefix: SharedPrefix | None,
) -> list[float]:
    """One forward pass: [prompt after the prefix][candidate 1][candidate 2]..., under a mask
    where candidate tokens see the whole prompt and their own candidate's earlier tokens."""
    import copy

    import torch

    shared = 0
    if (
        prefix is not None
        and len(prefix.ids) < len(prompt_ids)
        and tuple(prompt_ids[: len(prefix.ids)]) == prefix.ids
    ):
        shared = len(prefix.ids)
    suffix = list(prompt_ids[shared:])
    block = [t for answer in answers for t in answer]
    n, total = len(suffix), len(block)
    length = len(prompt_ids)
    device = next(model.parameters()).device
    # candidate c's tokens sit at block[starts[c]:ends[c]], positions length + 0, 1, ...
    sizes = torch.tensor([len(a) for a in answers], device=device)
    ends = torch.cumsum(sizes, 0)
    starts = ends - sizes
    owner = torch.repeat_interleave(torch.arange(len(answers), device=device), sizes)
    offset = torch.arange(total, device=device) - starts[owner]
    positions = torch.cat([torch.arange(shared, length, device=device), length + offset])[None]
    allowed = torch.zeros((n + total, shared + n + total), dtype=torch.bool, device=device)
    allowed[:, :shared] = True  # everyone sees the shared prefix
    allowed[:n, shared : shared + n] = torch.ones((n, n), dtype=torch.bool, device=device).tril()
    allowed[n:, shared : shared + n] = True  # candidates see the whole prompt
    step = torch.arange(total, device=device)
    own = owner[:, None] == owner[None, :]
    allowed[n:, shared + n :] = own & (step[:, None] >= step[None, :])  # its earlier tokens
    if getattr(model.config, "_attn_implementation", None) == "eager":
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]
    else:
        mask = allowed[None, None]
    ids = torch.tensor([suffix + block], device=device)
    cache = copy.deepcopy(prefix.cache) if shared else None
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       past_key_values=cache, use_cache=shared > 0,
                       logits_to_keep=total + 1).logits[0]  # fmt: skip
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    # a candidate's first token is predicted at the prompt's last row (row 0 of the kept
    # logits), each later token at its predecessor's row (row k for block token k)
    rows = torch.where(offset == 0, torch.zeros_like(offset), step)
    token = logprobs[rows, torch.tensor(block, device=device)]
    totals = torch.zeros(len(answers), dtype=token.dtype, device=device).index_add_(0, owner, token)
    return totals.tolist()


def _score_batched(
    model: Any,
    prompt_ids: Sequence[int],
    answers: Sequence[Sequence[int]],
    pad: int,
    batch_size: int,
) -> list[float]:
    """The prompt runs once; its key/value cache is copied for each right-padded batch of
    candidates (any attention implementation)."""
    import copy

    import torch

    length = len(prompt_ids)
    device = next(model.parameters()).device
    with torch.inference_mode():
        head = model(input_ids=torch.tensor([list(prompt_ids)], device=device), use_cache=True,
                     logits_to_keep=1)  # fmt: skip
        first = torch.log_softmax(head.logits[0, -1].float(), dim=-1)
        scores: list[float] = []
        for start in range(0, len(answers), batch_size):
            chunk = answers[start : start + batch_size]
            width = max(len(a) for a in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long, device=device)
            valid = torch.zeros((len(chunk), width), dtype=torch.bool, device=device)
            for row, answer in enumerate(chunk):
                ids[row, : len(answer)] = torch.tensor(answer, device=device)
                valid[row, : len(answer)] = True
            cache = copy.deepcopy(head.past_key_values)
            cache.batch_repeat_interleave(len(chunk))
            mask = torch.cat(
                [torch.ones((len(chunk), length), dtype=torch.long, device=device), valid.long()],
                dim=1,
            )
            logits = model(input_ids=ids, attention_mask=mask, past_key_values=cache).logits
            logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            later = logprobs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) * valid[:, 1:]
            totals = first[ids[:, 0]] + later.sum(dim=1)
            scores.extend(totals.tolist())
    return scores


def gold_rank(ranked: Sequence[str], golds: Sequence[str]) -> int | None:
    """1-based rank of the first gold answer among the ranked candidates (SQuAD-normalised
    comparison, as EM), None when no candidate is gold."""
    from rulerag.evaluation.metrics import normalize_answer

    wanted = {normalize_answer(g) for g in golds}
    for position, name in enumerate(ranked, 1):
        if normalize_answer(name) in wanted:
            return position
    return None


def rank_metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    """MRR and Hits@k of the gold answer among the candidates (a query without the gold one
    among its candidates counts 0), and how often it was among them."""
    if not ranks:
        return {}
    reciprocal = np.array([0.0 if r is None else 1.0 / r for r in ranks])
    out = {"rank_mrr": float(reciprocal.mean())}
    for k in RANK_HITS:
        out[f"rank_hits_at_{k}"] = float(np.mean([r is not None and r <= k for r in ranks]))
    out["gold_among_candidates"] = float(np.mean([r is not None for r in ranks]))
    return out


def doc_entity_names(base: Any) -> dict[str, tuple[str, str]]:
    """Doc id -> (head name, tail name) of its KG link, from data/<dataset>/ (`base`)."""
    from rulerag.io import read_parquet
    from rulerag.layout import DataLayout

    layout = DataLayout(Path(base))
    corpus = read_parquet(layout.corpus_table, columns=["id", "head", "tail"])
    entities = read_parquet(layout.entities, columns=["id", "name"])
    names = dict(zip(entities["id"].astype(int), entities["name"].astype(str), strict=True))
    return {
        str(d): (names[int(h)], names[int(t)])
        for d, h, t in zip(corpus["id"], corpus["head"], corpus["tail"], strict=True)
    }


def answer_by_ranking(
    generator: Any,
    samples: Sequence[Sample],
    prompts: Sequence[str],
    formats: Sequence[PromptFormat],
    candidates: Sequence[Sequence[str]],
) -> tuple[list[str], list[dict[str, Any]]]:
    """The best-scored candidate of each sample as its generation, and per sample the ranked
    candidates (top 10 with scores) and the gold answer's rank."""
    from tqdm.auto import tqdm

    generations, extras = [], []
    encoding = {"chat_template": generator.chat_template,
                "max_prompt_tokens": generator.max_prompt_tokens}  # fmt: skip
    prefix = shared_prefix(
        generator.model,
        [encode_candidates(generator.tokenizer, p, (), f, **encoding)[0]
         for p, f, names in zip(prompts, formats, candidates, strict=True) if names],
    )  # fmt: skip
    rows = zip(samples, prompts, formats, candidates, strict=True)
    for sample, prompt, prompt_format, names in tqdm(
        rows, total=len(samples), desc="rank answers", unit="query"
    ):
        scores = score_candidates(
            generator.model,
            generator.tokenizer,
            prompt,
            names,
            prompt_format,
            **encoding,
            batch_size=max(1, generator.batch_size),
            prefix=prefix,
        )
        order = sorted(zip(names, scores, strict=True), key=lambda x: -x[1])
        ranked = [n for n, _ in order]
        generations.append(ranked[0] if ranked else "")
        extras.append(
            {
                "candidates": [[n, round(s, 4)] for n, s in order[:10]],
                "candidate_count": len(names),
                "gold_rank": gold_rank(ranked, sample.answers),
            }
        )
    return generations, extras
