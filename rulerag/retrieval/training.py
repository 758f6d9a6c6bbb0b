"""RGFT / SSFT retriever training: in-batch contrastive learning of the query encoder on F_R.

The paper's recipe: each F_R item pairs a query with one of its rules; the input is `q ∘ r`
(RGFT) or `q` alone (SSFT), the positives are the item's oracle documents, and the negatives
are the other documents of the batch. The document encoder is frozen and only the query
encoder learns (lr 1e-5, batch 32, temperature 0.01). Consequences used here:

* Document embeddings never change, so they come from the corpus index (`DenseIndex`): the
  batch's documents cost a row lookup, not a forward pass, and the trained query encoder is
  used with the same index afterwards.
* The loss for a (query, positive) pair is -log(e^{s+/τ} / (e^{s+/τ} + Σ_neg e^{s-/τ})),
  averaged over the item's positives in the batch, then over items. A document that answers
  the query (an oracle document of the same query under any rule) is never used as a
  negative for it: it would teach the encoder to push answers away.
* SSFT has one item per query (its oracle documents under all rules): items with equal text
  and different positives would contradict each other.
* Early stopping on a held-out slice of F_R (whole queries, so no query is on both sides): by
  default the mean reciprocal rank of the best oracle document in the whole corpus (smoother
  than Recall@k on a small slice). The base encoder is evaluated first, so the returned
  weights are never worse on that slice than the start.
* Checkpoints (weights, optimiser, step, best weights, history) are written every
  `checkpoint_every` steps into step folders with an atomically updated pointer; a run with
  the same inputs and settings resumes from the last one. Batch order and positive sampling
  derive from (seed, epoch, step), so a resumed run makes the same steps an unbroken one would.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rulerag.errors import InputError
from rulerag.io import atomic_open
from rulerag.layout import DataLayout
from rulerag.retrieval.data import RuleItem, read_corpus, read_rule_items
from rulerag.retrieval.rule_guided import compose, rule_query_text
from rulerag.retrieval.settings import (
    POSITIVES,
    STAGE_KNOBS,
    EncoderSpec,
    RetrieveSettings,
    TrainRetrieverSettings,
)

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

    from rulerag.retrieval.dense import DenseIndex, DenseRetriever


@dataclass(frozen=True)
class TrainItem:
    """One training input: text (`q ∘ r` or `q`), its oracle rows, and the rows that must
    never be its negatives (every oracle row of the same query)."""

    item_id: str
    qid: str
    text: str
    positives: tuple[int, ...]
    answers_rows: frozenset[int] = field(default_factory=frozenset)


def make_items(
    rule_items: Sequence[RuleItem],
    doc_row: Mapping[str, int],
    use_rules: bool,
    keep: Callable[[RuleItem, str], bool] | None = None,
    retrieve: RetrieveSettings = RetrieveSettings(),
) -> tuple[list[TrainItem], dict[str, int]]:
    """F_R items -> training items (RGFT: one per (query, rule), its text `q ∘ r` with the
    rule in the `retrieve.rule_query` form retrieval searches with; SSFT: one per query).

    Oracle ids missing from the corpus are dropped, and so are those `keep(item, doc_id)`
    rejects (e.g. `answer_bearing`); items left without any are skipped. Returns the items
    and counts of what was dropped.
    """
    by_qid: dict[str, set[int]] = {}
    resolved: list[tuple[RuleItem, tuple[int, ...]]] = []
    missing_docs = rejected = 0
    for item in rule_items:
        rows = []
        for doc_id in dict.fromkeys(item.oracle_doc_ids):
            row = doc_row.get(doc_id)
            if row is None:
                missing_docs += 1
            elif keep is not None and not keep(item, doc_id):
                rejected += 1
            else:
                rows.append(row)
        resolved.append((item, tuple(rows)))
        by_qid.setdefault(item.qid, set()).update(rows)
    out: list[TrainItem] = []
    without = 0
    if use_rules:
        for item, rows in resolved:
            if not rows:
                without += 1
                continue
            text = item.query
            if item.rule_text:
                text = compose(item.query, rule_query_text(item.rule_text, retrieve.rule_query))
            out.append(TrainItem(item.item_id, item.qid, text, rows, frozenset(by_qid[item.qid])))
    else:
        seen: dict[str, TrainItem] = {}
        for item, _rows in resolved:
            if item.qid in seen:
                continue
            rows = tuple(sorted(by_qid[item.qid]))
            if not rows:
                without += 1
                continue
            seen[item.qid] = TrainItem(item.qid, item.qid, item.query, rows, frozenset(rows))
        out = list(seen.values())
    counts = {"oracle_ids_not_in_corpus": missing_docs, "items_without_oracle": without}
    if keep is not None:
        counts["oracle_docs_rejected"] = rejected
    return out, counts


def answer_bearing(contents: Mapping[str, str]) -> Callable[[RuleItem, str], bool]:
    """A `keep` filter: the oracle document holds one of the item's answers (case-insensitive,
    the Recall@k test). F_R's oracle documents match the query's entity and the rule's body
    relation; on ICEWS14 only about half of them name an answer."""

    def keep(item: RuleItem, doc_id: str) -> bool:
        text = contents[doc_id].casefold()
        return any(answer.casefold() in text for answer in item.answers if answer)

    return keep


def split_heldout(
    items: Sequence[TrainItem], fraction: float, max_items: int | None, seed: int
) -> tuple[list[TrainItem], list[TrainItem]]:
    """Hold out whole queries: about `fraction` of the items, at most `max_items`."""
    qids = sorted({item.qid for item in items})
    rng = np.random.default_rng(seed)
    rng.shuffle(qids)
    target = int(round(len(items) * fraction))
    if max_items is not None:
        target = min(target, max_items)
    per_qid: dict[str, int] = {}
    for item in items:
        per_qid[item.qid] = per_qid.get(item.qid, 0) + 1
    held: set[str] = set()
    count = 0
    for qid in qids:
        if count >= target:
            break
        held.add(qid)
        count += per_qid[qid]
    train = [i for i in items if i.qid not in held]
    heldout = [i for i in items if i.qid in held]
    return train, heldout


def contrastive_loss(
    queries: torch.Tensor,
    pool: torch.Tensor,
    positive: torch.Tensor,
    exclude: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """In-batch contrastive loss with several positives per query.

    queries (B, d), pool (P, d) the batch's documents, positive (B, P) which pool documents are
    the query's positives, exclude (B, P) documents that are neither positives nor negatives
    for it. Each (query, positive) pair is scored against the query's negatives only, so other
    positives do not compete with it; items without a positive in the pool are skipped.
    """
    import torch
    import torch.nn.functional as F

    logits = queries @ pool.T / temperature
    floor = torch.finfo(logits.dtype).min / 4  # finite: no NaN when a row has no negatives
    negatives = logits.masked_fill(positive | exclude, floor)
    lse_neg = torch.logsumexp(negatives, dim=1, keepdim=True)
    per_pair = F.softplus(lse_neg - logits)  # = -log(e^pos / (e^pos + sum e^neg))
    per_pair = per_pair * positive
    counts = positive.sum(dim=1)
    has = counts > 0
    if not bool(has.any()):
        return logits.sum() * 0.0
    per_item = per_pair.sum(dim=1)[has] / counts[has]
    return per_item.mean()


def batch_tensors(
    items: Sequence[TrainItem], rng: np.random.Generator, max_positives: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch's document pool (corpus rows) and its positive / exclude masks."""
    picked = []
    for item in items:
        rows = np.asarray(item.positives)
        if len(rows) > max_positives:
            rows = rng.choice(rows, size=max_positives, replace=False)
        picked.append(rows)
    pool = np.unique(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)
    positive = np.zeros((len(items), len(pool)), dtype=bool)
    exclude = np.zeros_like(positive)
    for i, item in enumerate(items):
        own = set(item.positives)
        positive[i] = [row in own for row in pool]
        exclude[i] = [row in item.answers_rows and row not in own for row in pool]
    return pool, positive, exclude


def _forward(model: SentenceTransformer, texts: Sequence[str], normalize: bool) -> torch.Tensor:
    import torch.nn.functional as F
    from sentence_transformers.util import batch_to_device

    features = batch_to_device(model.preprocess(list(texts)), model.device)
    embeddings = model(features)["sentence_embedding"]
    return F.normalize(embeddings, dim=-1) if normalize else embeddings


def evaluate(
    model: SentenceTransformer,
    items: Sequence[TrainItem],
    doc_embeddings: torch.Tensor,
    config: TrainRetrieverSettings,
) -> dict[str, float]:
    """Held-out figures: whether an oracle document ranks in the whole corpus's top k
    (`recall_at_k`), the mean reciprocal rank of the best one, and the in-batch loss."""
    import torch

    if not items:
        return {}
    config = config.train_config()  # None lengths and normalisation: an encoder's defaults
    was_training = model.training
    model.eval()
    ranks: list[np.ndarray] = []
    losses: list[float] = []
    rng = np.random.default_rng(config.seed)
    with torch.no_grad():
        for start in range(0, len(items), config.batch_size):
            batch = items[start : start + config.batch_size]
            q = _forward(model, [i.text for i in batch], config.normalize)
            scores = q @ doc_embeddings.T
            for row, item in enumerate(batch):
                best = scores[row, list(item.positives)].max()
                ranks.append(int((scores[row] > best).sum().item()) + 1)
            pool, pos, exc = batch_tensors(batch, rng, config.max_positives)
            device = doc_embeddings.device
            loss = contrastive_loss(
                q,
                doc_embeddings[torch.from_numpy(pool).to(device)],
                torch.from_numpy(pos).to(device),
                torch.from_numpy(exc).to(device),
                config.temperature,
            )
            losses.append(float(loss) * len(batch))
    model.train(was_training)
    r = np.asarray(ranks, dtype=np.float64)
    return {
        f"heldout_recall_at_{config.eval_k}": float((r <= config.eval_k).mean()),
        "heldout_mrr": float((1.0 / r).mean()),
        "heldout_loss": float(sum(losses) / len(items)),
    }


@dataclass
class TrainResult:
    """What a training run did (the stage writes it to train.json and MLflow)."""

    steps: int
    total_steps: int
    metric: str  # the held-out figure early stopping followed
    best_step: int
    best_metric: float
    base_metric: float
    stopped_early: bool
    resumed_from: int | None
    seconds: float
    history: list[dict[str, float]]
    counts: dict[str, int] = field(default_factory=dict)

    def losses(self) -> pd.DataFrame:
        rows = [h for h in self.history if "train_loss" in h]
        return pd.DataFrame(rows, columns=["step", "train_loss", "lr"])

    def evaluations(self) -> pd.DataFrame:
        rows = [h for h in self.history if "heldout_mrr" in h]
        return pd.DataFrame(rows)


def fingerprint(config: TrainRetrieverSettings, items: Sequence[TrainItem], extra: str = "") -> str:
    """What a checkpoint must match to be resumed: settings, items, base model, corpus.
    Evaluation and checkpoint frequencies are left out: changing them keeps the run; so are the
    stage's own knobs (`settings.STAGE_KNOBS`), which the key never held."""
    settings = asdict(config)
    for key in ("eval_every", "checkpoint_every", "patience", "min_delta", *STAGE_KNOBS):
        settings.pop(key)
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode())
    digest.update(extra.encode())
    for item in items:
        digest.update(f"{item.item_id}\0{item.text}\0{item.positives}\n".encode())
    return digest.hexdigest()[:20]


class Checkpoints:
    """Step folders under one directory plus a `latest` pointer replaced atomically."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = Path(folder)
        self.key = key

    def latest(self) -> Path | None:
        pointer = self.folder / "latest.json"
        if not pointer.is_file():
            return None
        data = json.loads(pointer.read_text(encoding="utf-8"))
        path = self.folder / data["folder"]
        if data.get("key") != self.key or not (path / "state.json").is_file():
            return None
        return path

    def save(self, step: int, model, optimizer, best_state: Path | None, state: dict) -> None:
        import torch
        from safetensors.torch import save_model

        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"step-{step:07d}"
        target = self.folder / name
        tmp = self.folder / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_model(model, str(tmp / "query_encoder.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if best_state is not None and best_state.is_file():
            shutil.copy2(best_state, tmp / "best.safetensors")
        (tmp / "state.json").write_text(json.dumps(state), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        with atomic_open(self.folder / "latest.json") as handle:
            json.dump({"folder": name, "key": self.key, "step": step}, handle)
        for old in self.folder.glob("step-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)


def train_query_encoder(
    model: SentenceTransformer,
    doc_embeddings: np.ndarray,
    train_items: Sequence[TrainItem],
    heldout_items: Sequence[TrainItem],
    config: TrainRetrieverSettings = TrainRetrieverSettings(),
    checkpoint_dir: Path | None = None,
    resume_key: str = "",
    on_log: Callable[[dict[str, float], int], None] | None = None,
    show_progress: bool = True,
) -> TrainResult:
    """Train `model` (the query encoder) in place; on return it holds the best weights.

    `doc_embeddings` is the frozen corpus matrix (row = corpus row, as in the items).
    `on_log(metrics, step)` receives train loss and held-out figures as they come (MLflow).
    """
    import torch
    from tqdm.auto import tqdm

    started = time.perf_counter()
    config = config.train_config()  # None lengths and normalisation: an encoder's defaults
    torch.manual_seed(config.seed)
    docs = _corpus_matrix(doc_embeddings, model.device, config.normalize)
    model.max_seq_length = config.max_length
    train_items = _sample_items(train_items, config)
    steps_per_epoch, total = _step_plan(len(train_items), config)
    stopping = _EarlyStopping.of(config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = _adamw(trainable, config)
    key = fingerprint(config, [*train_items, *heldout_items], resume_key)
    ckpt = Checkpoints(checkpoint_dir, key) if checkpoint_dir else None
    best = _BestWeights(
        model, Path(checkpoint_dir) / "best.safetensors" if checkpoint_dir else None
    )
    state, resumed_from = _start_or_resume(ckpt, model, optimizer, best)

    def run_eval(step: int) -> None:
        figures = evaluate(model, heldout_items, docs, config)
        if not figures:
            return
        state["history"].append({"step": step, **figures})
        if on_log:
            on_log(figures, step)
        stopping.update(state, figures, step, best)

    if state["step"] == 0 and not state["history"]:
        run_eval(0)
    model.train()
    bar = tqdm(
        total=total, initial=state["step"], desc="train query encoder", disable=not show_progress
    )
    window: list[float] = []
    while state["step"] < total and not state["stopped"]:
        step = state["step"]
        batch, rng = _batch_of_step(train_items, step, steps_per_epoch, config)
        value = _optimiser_step(model, optimizer, trainable, docs, batch, rng, step, config)
        state["step"] = step + 1
        state["history"].append({"step": step + 1, "train_loss": value, "lr": _lr_at(step, config)})
        window.append(value)
        bar.update(1)
        best_metric = state["best_metric"]
        bar.set_postfix(loss=f"{np.mean(window[-20:]):.4f}", best=f"{best_metric or 0:.3f}")
        if on_log:
            on_log({"train_loss": value}, step + 1)
        last = state["step"] >= total
        if state["step"] % config.eval_every == 0 or last:
            run_eval(state["step"])
        if ckpt and (state["step"] % config.checkpoint_every == 0 or last or state["stopped"]):
            ckpt.save(state["step"], model, optimizer, best.file, state)
    bar.close()

    best.restore()
    model.eval()
    counts = {"train_items": len(train_items), "heldout_items": len(heldout_items)}
    return _train_result(state, total, stopping.metric, resumed_from, started, counts)


def _corpus_matrix(doc_embeddings: np.ndarray, device: Any, normalize: bool) -> torch.Tensor:
    """The frozen documents as one tensor on the encoder's device: a float32 copy (training
    never writes into the index's matrix), L2-normalised when the queries are, so that a dot
    product is the similarity the index searches with."""
    import torch

    docs = torch.from_numpy(np.array(doc_embeddings, dtype=np.float32)).to(device)  # a copy
    if normalize:
        docs = torch.nn.functional.normalize(docs, dim=-1)
    return docs


def _sample_items(items: Sequence[TrainItem], config: TrainRetrieverSettings) -> list[TrainItem]:
    """At most `max_items` of the items, a seeded sample kept in their order: a quick run on
    a large F_R set trains on the same items every time (and so resumes its checkpoints)."""
    items = list(items)
    if config.max_items is not None and len(items) > config.max_items:
        pick = np.random.default_rng(config.seed).permutation(len(items))
        items = [items[i] for i in sorted(pick[: config.max_items])]
    return items


def _step_plan(n_items: int, config: TrainRetrieverSettings) -> tuple[int, int]:
    """Steps per epoch and in all: `epochs` passes, at least `min_steps` (a small F_R set
    cycles through more epochs), at most `max_steps`."""
    steps_per_epoch = max(1, math.ceil(n_items / config.batch_size))
    total = max(steps_per_epoch * config.epochs, config.min_steps)
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    return steps_per_epoch, total


def _adamw(trainable: list[Any], config: TrainRetrieverSettings) -> torch.optim.Optimizer:
    """AdamW, fused where torch has the kernel: about 8x faster on CPU, where the optimiser
    step dominates small batches."""
    import torch

    try:
        return torch.optim.AdamW(
            trainable, lr=config.lr, weight_decay=config.weight_decay, fused=True
        )
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)


class _BestWeights:
    """The best weights so far, in `file` when the run has a checkpoint folder (a checkpoint
    carries them, so a resumed run still returns the best of the whole run), else in memory."""

    def __init__(self, model: SentenceTransformer, file: Path | None) -> None:
        self.model = model
        self.file = file
        self.memory: dict[str, torch.Tensor] | None = None

    def remember(self) -> None:
        from safetensors.torch import save_model

        if self.file is not None:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            save_model(self.model, str(self.file))
        else:
            self.memory = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def restore(self) -> None:
        """Put the best weights back into the model (none kept: the model stays as it is)."""
        from safetensors.torch import load_model

        if self.file is not None and self.file.is_file():
            load_model(self.model, str(self.file))
        elif self.memory is not None:
            self.model.load_state_dict(self.memory)


def _start_or_resume(
    ckpt: Checkpoints | None, model: SentenceTransformer, optimizer: Any, best: _BestWeights
) -> tuple[dict[str, Any], int | None]:
    """The run's state and the step it resumed from: a matching checkpoint's (weights,
    optimiser, best weights and history restored), else a fresh one, in which case a previous
    run's best weights are deleted, so that they can never be returned as this run's."""
    import torch
    from safetensors.torch import load_model

    latest = ckpt.latest() if ckpt else None
    if latest is None:
        if best.file is not None:
            best.file.unlink(missing_ok=True)
        state = {
            "step": 0,
            "best_metric": None,
            "best_step": 0,
            "base_metric": None,
            "bad_evals": 0,
            "stopped": False,
            "history": [],
        }
        return state, None
    state = json.loads((latest / "state.json").read_text(encoding="utf-8"))
    load_model(model, str(latest / "query_encoder.safetensors"))
    optimizer.load_state_dict(torch.load(latest / "optimizer.pt", weights_only=True))
    if (latest / "best.safetensors").is_file() and best.file is not None:
        best.file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(latest / "best.safetensors", best.file)
    return state, int(state["step"])


@dataclass(frozen=True)
class _EarlyStopping:
    """The held-out figure training keeps the best of (`metric`; `sign` -1 where lower is
    better) and the rule that stops it: `patience` evaluations without a gain over `min_delta`."""

    metric: str
    sign: float
    min_delta: float
    patience: int

    @classmethod
    def of(cls, config: TrainRetrieverSettings) -> _EarlyStopping:
        metric, sign = {
            "mrr": ("heldout_mrr", 1.0),
            "recall": (f"heldout_recall_at_{config.eval_k}", 1.0),
            "loss": ("heldout_loss", -1.0),
        }[config.early_stopping]
        return cls(metric, sign, config.min_delta, config.patience)

    def update(
        self, state: dict[str, Any], figures: dict[str, float], step: int, best: _BestWeights
    ) -> None:
        """One evaluation's figures into the run's state: the first is the base figure, a gain
        keeps the weights as the best, too many evaluations without one stop the run."""
        value = figures[self.metric]
        if state["base_metric"] is None:
            state["base_metric"] = value
        best_metric = state["best_metric"]
        if best_metric is None or self.sign * (value - best_metric) > self.min_delta:
            state.update(best_metric=value, best_step=step, bad_evals=0)
            best.remember()
        else:
            state["bad_evals"] += 1
            if state["bad_evals"] >= self.patience:
                state["stopped"] = True


def _lr_at(step: int, config: TrainRetrieverSettings) -> float:
    """The learning rate of `step`: a linear warm-up over `warmup_steps`, then constant."""
    if config.warmup_steps and step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    return config.lr


def _batch_of_step(
    items: Sequence[TrainItem], step: int, steps_per_epoch: int, config: TrainRetrieverSettings
) -> tuple[list[TrainItem], np.random.Generator]:
    """The items of `step` and the generator that samples their positives, both seeded by the
    step alone (an epoch's shuffled order, cut into batches), so that a resumed run trains on
    the batches the uninterrupted run would have."""
    epoch, in_epoch = divmod(step, steps_per_epoch)
    order = np.random.default_rng([config.seed, epoch]).permutation(len(items))
    chosen = order[in_epoch * config.batch_size : (in_epoch + 1) * config.batch_size]
    return [items[i] for i in chosen], np.random.default_rng([config.seed, epoch, step])


def _optimiser_step(
    model: SentenceTransformer,
    optimizer: Any,
    trainable: list[Any],
    docs: torch.Tensor,
    batch: Sequence[TrainItem],
    rng: np.random.Generator,
    step: int,
    config: TrainRetrieverSettings,
) -> float:
    """One step of contrastive training on `batch`; its loss. Dropout is seeded by the step,
    so that a resumed run repeats the uninterrupted run's steps."""
    import torch

    device = model.device
    pool, pos, exc = batch_tensors(batch, rng, config.max_positives)
    torch.manual_seed(config.seed * 1_000_003 + step)  # dropout, reproducible on resume
    for group in optimizer.param_groups:
        group["lr"] = _lr_at(step, config)
    q = _forward(model, [i.text for i in batch], config.normalize)
    loss = contrastive_loss(
        q,
        docs[torch.from_numpy(pool).to(device)],
        torch.from_numpy(pos).to(device),
        torch.from_numpy(exc).to(device),
        config.temperature,
    )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if config.grad_clip:
        torch.nn.utils.clip_grad_norm_(trainable, config.grad_clip)
    optimizer.step()
    return float(loss.detach())


def _train_result(
    state: Mapping[str, Any],
    total: int,
    metric: str,
    resumed_from: int | None,
    started: float,
    counts: dict[str, int],
) -> TrainResult:
    """What the run did, from its final state (NaN for a figure no evaluation produced)."""
    return TrainResult(
        steps=int(state["step"]),
        total_steps=total,
        best_step=int(state["best_step"]),
        best_metric=float("nan" if state["best_metric"] is None else state["best_metric"]),
        base_metric=float("nan" if state["base_metric"] is None else state["base_metric"]),
        metric=metric,
        stopped_early=bool(state["stopped"]),
        resumed_from=resumed_from,
        seconds=time.perf_counter() - started,
        history=list(state["history"]),
        counts=counts,
    )


@dataclass
class FittedEncoder:
    """A query encoder trained against a frozen corpus index, and how its training went."""

    model: SentenceTransformer  # holds the best weights on the held-out slice
    result: TrainResult
    config: TrainRetrieverSettings  # what it trained with (its `normalize` is how it must search)
    spec: EncoderSpec  # the encoder it started from (`index.dense.<name>`)

    def searcher(self, index: DenseIndex) -> DenseRetriever:
        """The trained query side over the corpus index it was trained against (the
        document side stays the base encoder's)."""
        from rulerag.retrieval.dense import DenseRetriever

        return DenseRetriever(self.model, index, self.config.normalize, self.spec.batch_size)


def fit_query_encoder(
    items: Sequence[TrainItem],
    index: DenseIndex,
    spec: EncoderSpec,
    settings: TrainRetrieverSettings,
    *,
    device: str = "auto",
    model_cache: Path | None = None,
    checkpoint_dir: Path | None = None,
    on_log: Callable[[dict[str, float], int], None] | None = None,
    where: str = "train_retriever",
    show_progress: bool = True,
    **overrides: Any,
) -> FittedEncoder:
    """RGFT / SSFT of `spec`'s query encoder on `items` (rows of `index`), the documents
    being `index`'s frozen embeddings: the training sequence every retriever fine-tuning runs.

    `settings` are one encoder's (`TrainRetrieverSettings.for_encoder`); its None knobs take
    the encoder's `max_length` and the index's `normalize`, and `overrides` replace any
    `TrainRetrieverSettings` field after that. Whole queries are held out for early stopping
    (`split_heldout`); the base encoder is loaded from `model_cache` on `device` and trained
    in place. With `checkpoint_dir` the run is resumable: a checkpoint is resumed only for the
    same base model and corpus embeddings (and items and settings, `fingerprint`). An
    `InputError` names `where` when no item is left to train on.

    The `train_retriever` stage calls it once, with a checkpoint folder and MLflow's `on_log`
    (`fine_tuning.train_retriever`). The generalisation experiment calls it once per rule
    bank R_i, on R_i's `q ∘ r` items, for a short run and without checkpoints, then searches
    with `searcher(index)`:

        index = DenseIndex.load(layout.index(encoder), params.index.faiss)
        settings = params.train_retriever.for_encoder(encoder)
        items, _ = training_items(layout, index.doc_ids, True, settings.positives, retrieve)
        fitted = fit_query_encoder(
            bank_items, index, params.index.encoder(encoder), settings,
            device=params.index.device, model_cache=model_cache,
            where=f"generalisation: bank R{i}", max_steps=retriever_steps, min_steps=0,
        )
    """
    from rulerag.retrieval.encoders import load_encoder, model_fingerprint

    config = settings.train_config(spec.max_length, index.meta.get("normalize", True))
    if overrides:
        config = replace(config, **overrides)
    train, heldout = split_heldout(items, config.heldout_fraction, config.heldout_max, config.seed)
    if not train:
        raise InputError(f"{where}: no F_R item has oracle documents")
    model = load_encoder(spec.query_name, device, config.max_length, model_cache, spec.pooling)
    resume_key = ""
    if checkpoint_dir is not None:  # checkpoints of another base model or corpus never resume
        resume_key = f"{model_fingerprint(str(spec.query_name))}:{index.meta.get('cache_key')}"
    result = train_query_encoder(
        model,
        index.embeddings,
        train,
        heldout,
        config,
        checkpoint_dir=checkpoint_dir,
        resume_key=resume_key,
        on_log=on_log,
        show_progress=show_progress,
    )
    return FittedEncoder(model, result, config, spec)


def training_items(
    paths: DataLayout,
    doc_ids: Sequence[str],
    use_rules: bool,
    positives: str = "oracle",
    retrieve: RetrieveSettings = RetrieveSettings(),
) -> tuple[list[TrainItem], dict[str, int]]:
    """F_R's items as training items against the corpus index's rows (`make_items`):
    `positives` oracle keeps every oracle document, answer only the answer-bearing ones;
    rules take `retrieve.rule_query`'s form in the search text."""
    if positives not in POSITIVES:
        raise ValueError(f"positives must be one of {POSITIVES}, not {positives!r}")
    rule_items = read_rule_items(paths.queries("f_r"))
    doc_row = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    keep = None
    if positives == "answer":
        corpus = read_corpus(paths.corpus)
        keep = answer_bearing(dict(zip(corpus.ids, corpus.contents, strict=True)))
    return make_items(rule_items, doc_row, use_rules=use_rules, keep=keep, retrieve=retrieve)
