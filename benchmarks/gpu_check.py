"""GPU check (issue 29 §3): the training code paths of the stages, a few steps each, on one GPU.

    make gpu-check                                   # here: no CUDA, so the CPU dry run
    python benchmarks/gpu_check.py --dry-run         # the same, forced
    python3 benchmarks/gpu_check.py --bundle /tmp/rulerag-gpu --json $OUT/gpu_check.json

What runs, each part in a child process of its own (so a part that hangs is stopped at its time
budget, a crash is one failed row, and every part's peak GPU memory is its own):

* models: `generation.models.resolve_model("smollm2")` (the GGUF converted into an HF folder,
  once) and MiniLM's folder (`retrieval.encoders.resolve_model`).
* lora_bf16: `generation.training.train_lora`, LoRA on SmolLM2-135M, bf16 on CUDA (fp32 and
  the top two layers only in the dry run).
* qlora_nf4: the same on a 4-bit NF4 base (`load_causal_lm(quantization="nf4")`, bitsandbytes);
  skipped without CUDA.
* rgft_retriever: `retrieval.training.make_items`, `split_heldout`, `train_query_encoder`: the
  MiniLM query encoder on `q ∘ r` items against the frozen corpus embeddings.
* r2ag: `generation.r2ag.fit.fit_variant` (the `train_r2ag` stage's call): the R²-Former on the
  frozen LLM, LM + QDM loss.
* faiss: `retrieval.dense.DenseIndex` (flat, `gpu: auto`) over the slice's MiniLM embeddings:
  faiss-gpu where importable, else CPU faiss (then said to be no GPU check).
* deepspeed_zero2: `train_lora` with `generation.train.deepspeed` = configs/deepspeed_zero2.json
  in one process (`single_process_rendezvous`); skipped without CUDA.

Then one table: part, ran / skipped / failed, why, seconds, peak GPU memory (MiB, the part's
`torch.cuda.max_memory_allocated`), loss before and after. The exit status is 1 when a part
that should have run failed (a skipped part says why it was not run; it never fails the check).

Data: a slice of real ICEWS14 (`build_slice`): the project's KG reader and TLogic miner (length-1
rules) over ../shared/kg, queries from the valid split, each with its best rule, its oracle
documents (train facts linking subject and answer before the query's day) and the subject's
latest facts as retrieved documents, in the project's text forms (`kg.text`). It is written by
`benchmarks/gpu_bundle.py build` into the bundle, or built on the fly (RULERAG_DATA_DIR) here.

The device machine (docs/operations.md, "GPU check"): Python 3.12 with torch, transformers,
peft and sentence-transformers, no network. Of what these code paths import it lacks pydantic
(with pydantic-core, annotated-types, typing-inspection: `rulerag.settings`), gguf (the GGUF
conversion), bitsandbytes, deepspeed (+ hjson) and faiss; `gpu_bundle.py` brings them as wheels
with the two offline models, split over three `run` calls (64 MiB each). faiss-gpu does not
fit (faiss-gpu-cu12 is 48 MB and needs the CUDA 12 cuBLAS / runtime wheels, hundreds of MB;
there is no cu13 build on PyPI): the faiss part runs CPU faiss there and says it is no GPU
check. Only the modules named above are imported: no mlflow, dvc, pyserini or bm25s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: parts in the order they run (deepspeed last: its fused-Adam build is the slowest start)
PARTS = ("models", "lora_bf16", "qlora_nf4", "rgft_retriever", "r2ag", "faiss", "deepspeed_zero2")
#: seconds each part may take on the GPU; the whole check stays under TOTAL_BUDGET_S
BUDGET_S = {
    "models": 120,
    "lora_bf16": 90,
    "qlora_nf4": 90,
    "rgft_retriever": 60,
    "r2ag": 90,
    "faiss": 45,
    "deepspeed_zero2": 180,
}
#: the issue's limit (8 minutes on one H100) less a minute for staging the bundle
TOTAL_BUDGET_S = 420
#: the dry run's budget: a shared 2-core CPU, models in fp32 (it takes 3 to 5 minutes there)
DRY_BUDGET_S = 900
SLICE_FILE = "slice.json"
MINILM_FOLDER = "all-MiniLM-L6-v2"
DATASET = "icews14"


@dataclass
class Sizes:
    """How much each part trains: a few optimiser steps on the GPU, fewer on the CPU."""

    lora_train: int
    lora_dev: int
    lora_batch: int
    lora_epochs: float
    rgft_batch: int
    rgft_steps: int
    r2ag_train: int
    r2ag_dev: int
    r2ag_batch: int
    r2ag_epochs: float
    max_prompt_tokens: int
    lora_layers: int | None  # LoRA on the last N layers only (None: all, as the paper)


GPU_SIZES = Sizes(32, 8, 8, 2.0, 16, 20, 24, 8, 4, 2.0, 384, None)
#: the dry run trains on the top two layers only, with short prompts: a shared 2-core CPU
CPU_SIZES = Sizes(4, 2, 2, 1.0, 8, 3, 2, 1, 2, 1.0, 128, 2)
#: parts that must use the GPU when there is one (a run that allocated none of its memory fails)
GPU_PARTS = ("lora_bf16", "qlora_nf4", "rgft_retriever", "r2ag", "deepspeed_zero2")
#: parts that need CUDA, and why they are skipped without it (no child process is started)
CPU_SKIPS = {
    "qlora_nf4": "QLoRA's 4-bit base is a GPU part (bitsandbytes on the CPU is slow; the unit "
    "tests train it on a tiny model)",
    "deepspeed_zero2": "ZeRO-2 is a GPU part here (the unit tests run it on DeepSpeed's CPU "
    "accelerator)",
}


@dataclass
class PartResult:
    """One row of the final table."""

    part: str
    status: str  # ran | skipped | failed
    why: str = ""
    seconds: float = 0.0
    peak_gpu_mib: float | None = None
    loss_before: float | None = None
    loss_after: float | None = None
    device: str = ""


# ---------------------------------------------------------------------------------------------
# The data slice (built here, from the KG mirror; the device reads it from the bundle)


def build_slice(mirror: Path, n_queries: int = 48, k: int = 5, seed: int = 12) -> dict[str, Any]:
    """A small, real RuleRAG slice of ICEWS14: queries with a rule, oracle and prompt documents.

    Everything comes from the project's own code: `read_tlogic` reads the mirror, the TLogic
    miner mines length-1 rules from the train facts, `document_text` / `query_text` write
    facts and queries as the benchmark does. A query (s, r, ?, t) of the valid split is kept
    when a mined rule has head r and a train fact before t links s and the answer (its oracle
    documents); its prompt documents are those oracle documents first, then the subject's
    latest other facts, `k` in all.
    """
    import numpy as np

    from rulerag.kg.readers import read_tlogic
    from rulerag.kg.schema import format_time
    from rulerag.kg.text import document_text, query_text
    from rulerag.rules.settings import TemporalMinerSettings
    from rulerag.rules.temporal_miner import mine_temporal

    folder = Path(mirror) / DATASET
    if not (folder / "TLogic_icews14" / "train.txt").is_file():
        raise FileNotFoundError(f"{folder}/TLogic_icews14/train.txt: the ICEWS14 mirror is missing")
    kg = read_tlogic(folder)
    entity = kg.entities.set_index("id")["name"].to_dict()
    relation = kg.relations.set_index("id")["name"].to_dict()
    n_rel = len(kg.relations)
    train = kg.split("train")
    rules = mine_temporal(
        train,
        len(kg.entities),
        n_rel,
        TemporalMinerSettings(lengths=(1,), walks_per_relation=50),
        seed=seed,
        progress=False,
    )
    best: dict[int, Any] = {}
    for rule in rules:
        atoms = (rule.head, *rule.body)
        if any(a.relation >= n_rel for a in atoms):
            continue  # inverse relations have no name of their own
        held = best.get(rule.head.relation)
        if held is None or (rule.confidence or 0) > (held.confidence or 0):
            best[rule.head.relation] = rule

    def doc(row: Any) -> tuple[str, str]:
        text = document_text(
            entity[row.head], relation[row.relation], entity[row.tail],
            format_time(int(row.time), kg.time_unit),
        )  # fmt: skip
        return f"{DATASET}-train-{int(row.line)}", text

    by_head = {h: g.sort_values("time") for h, g in train.groupby("head")}
    valid = kg.split("valid")
    order = np.random.default_rng(seed).permutation(len(valid))
    corpus: dict[str, str] = {}
    queries: list[dict[str, Any]] = []
    for i in order:
        row = next(valid.iloc[[int(i)]].itertuples())
        rule = best.get(int(row.relation))
        facts = by_head.get(int(row.head))
        if rule is None or facts is None:
            continue
        before = facts[facts["time"] < row.time]
        oracle = before[before["tail"] == row.tail]
        if oracle.empty:
            continue
        oracle_docs = [doc(r) for r in oracle.tail(2).itertuples()]
        others = [doc(r) for r in before[before["tail"] != row.tail].tail(k).itertuples()]
        prompt_docs = (oracle_docs + others)[:k]
        corpus.update(oracle_docs + others)
        queries.append(
            {
                "qid": f"{DATASET}-valid-{int(row.line)}",
                "query": query_text(
                    entity[int(row.head)],
                    relation[int(row.relation)],
                    format_time(int(row.time), kg.time_unit),
                ),  # fmt: skip
                "answer": entity[int(row.tail)],
                "rule_id": f"r{int(row.relation)}",
                "rule_text": rule.text(relation),
                "oracle_doc_ids": [d for d, _ in oracle_docs],
                "doc_ids": [d for d, _ in prompt_docs],
            }
        )
        if len(queries) >= n_queries:
            break
    if len(queries) < n_queries:
        raise ValueError(f"{folder}: only {len(queries)} of {n_queries} queries have a rule")
    return {
        "source": f"{DATASET} (TLogic split, valid queries, train documents), seed {seed}",
        "temporal": True,
        "queries": queries,
        "corpus": corpus,
    }


def read_slice(path: Path) -> dict[str, Any]:
    """The slice at `path`, checked for the keys the parts read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable slice: {err}") from err
    for key in ("queries", "corpus", "temporal"):
        if key not in data:
            raise ValueError(f"{path}: the slice has no {key!r}")
    missing = {d for q in data["queries"] for d in q["doc_ids"]} - set(data["corpus"])
    if missing:
        raise ValueError(f"{path}: documents {sorted(missing)[:3]} are not in its corpus")
    return data


# ---------------------------------------------------------------------------------------------
# The parts (run in a child process: `--part NAME --context FILE --result FILE`)


class Skip(Exception):
    """A part that cannot run here, with the reason printed in the table."""


@dataclass
class Context:
    """What every part reads: the slice, the model names, the sizes, CUDA or not."""

    slice_path: str
    encoder: str  # an alias or the bundle's MiniLM folder
    generator: str
    cuda: bool
    sizes: Sizes
    work: str

    def load_slice(self) -> dict[str, Any]:
        return read_slice(Path(self.slice_path))


def _pairs(ctx: Context) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(prompt, target) pairs in the paper's RuleRAG prompt: train first, then dev."""
    from rulerag.generation.prompts import PromptFormat

    data = ctx.load_slice()
    fmt = PromptFormat("paper", temporal=bool(data["temporal"]))
    pairs = [
        (
            fmt.render(
                "rule", q["query"], [data["corpus"][d] for d in q["doc_ids"]], [q["rule_text"]]
            ),
            fmt.target(q["answer"]),
        )  # fmt: skip
        for q in data["queries"]
    ]
    n, d = ctx.sizes.lora_train, ctx.sizes.lora_dev
    return pairs[:n], pairs[n : n + d]


def part_models(ctx: Context) -> dict[str, Any]:
    """Resolve both models the way the stages do (the GGUF is converted here, once)."""
    from rulerag.generation.models import resolve_model
    from rulerag.retrieval.encoders import resolve_model as resolve_encoder

    generator = resolve_model(ctx.generator)
    encoder = resolve_encoder(ctx.encoder)
    if not Path(encoder).is_dir():
        raise RuntimeError(f"encoder {ctx.encoder!r} resolved to {encoder!r}, no local folder")
    return {"why": f"generator {Path(generator).name}, encoder {Path(encoder).name}"}


def _lora(ctx: Context, quantization: str | None, deepspeed: bool) -> dict[str, Any]:
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.settings import TrainSettings
    from rulerag.generation.training import DEFAULT_DEEPSPEED_CONFIG, train_lora

    train, dev = _pairs(ctx)
    dtype = "bfloat16" if ctx.cuda else "float32"
    settings = TrainSettings.from_dict(
        {
            "dtype": None if quantization else dtype,
            "quantization": quantization,
            "deepspeed": str(DEFAULT_DEEPSPEED_CONFIG) if deepspeed else None,
            "epochs": ctx.sizes.lora_epochs,
            "batch_size": ctx.sizes.lora_batch,
            "learning_rate": 1e-3,
            "warmup": 0,
            "eval_steps": 1000,  # dev loss once, at the end (and before training)
            "logging_steps": 1,
            "max_prompt_tokens": ctx.sizes.max_prompt_tokens,
            "bf16": ctx.cuda,
            "lora": {"layers": ctx.sizes.lora_layers},
        }
    )
    tokenizer = load_tokenizer(ctx.generator, padding_side="right")
    model = load_causal_lm(ctx.generator, quantization=quantization, dtype=settings.dtype)
    out = Path(ctx.work) / f"adapter-{quantization or 'lora'}{'-ds' if deepspeed else ''}"
    result = train_lora(model, tokenizer, train, dev, settings, out)
    stats = result.stats
    if not (out / "adapter_model.safetensors").is_file():
        raise RuntimeError(f"{out}: no adapter was saved")
    before, after = stats["dev_loss_before"], stats["dev_loss_best"]
    why = f"{stats['steps']} steps, {stats['trainable_parameters']:,} LoRA parameters"
    if before is None:  # ZeRO-2: no dev loss before training; the train loss instead
        before, after = stats["first_loss"], stats["last_loss"]
        why += ", train loss (first/last logged step)"
    else:
        why += ", dev loss"
    dtype_used = str(next(p for p in result.model.parameters()).dtype).removeprefix("torch.")
    return {"why": f"{why}, {dtype_used}", "loss_before": before, "loss_after": after}


def part_lora_bf16(ctx: Context) -> dict[str, Any]:
    return _lora(ctx, None, deepspeed=False)


def _needs_gpu_and(ctx: Context, part: str, module: str) -> None:
    """Skip `part` without CUDA (CPU_SKIPS says why) or without `module` (not in the bundle)."""
    if not ctx.cuda:
        raise Skip(CPU_SKIPS[part])
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise Skip(f"{module} is not importable ({err}): not in the bundle") from err


def part_qlora_nf4(ctx: Context) -> dict[str, Any]:
    _needs_gpu_and(ctx, "qlora_nf4", "bitsandbytes")
    return _lora(ctx, "nf4", deepspeed=False)


def part_deepspeed_zero2(ctx: Context) -> dict[str, Any]:
    _needs_gpu_and(ctx, "deepspeed_zero2", "deepspeed")
    return _lora(ctx, None, deepspeed=True)


def _encoder(ctx: Context) -> Any:
    from rulerag.retrieval.encoders import load_encoder
    from rulerag.retrieval.settings import EncoderSpec

    spec = EncoderSpec(model=ctx.encoder)
    return load_encoder(spec.model, "auto", spec.max_length), spec


def part_rgft_retriever(ctx: Context) -> dict[str, Any]:
    """RGFT: `q ∘ r` items against the frozen corpus embeddings, contrastive steps."""
    from rulerag.retrieval.data import RuleItem
    from rulerag.retrieval.dense import encode_corpus
    from rulerag.retrieval.encoders import DualEncoder
    from rulerag.retrieval.settings import TrainRetrieverSettings
    from rulerag.retrieval.training import make_items, split_heldout, train_query_encoder

    data = ctx.load_slice()
    doc_model, spec = _encoder(ctx)
    query_model, _ = _encoder(ctx)  # trained in place; the document side stays frozen
    ids = list(data["corpus"])
    texts = [data["corpus"][d] for d in ids]
    embeddings = encode_corpus(DualEncoder(query_model, doc_model), texts, show_progress=False)
    rule_items = [
        RuleItem(f"{q['qid']}:{q['rule_id']}", q["qid"], q["query"], q["rule_id"], q["rule_text"],
                 tuple(q["oracle_doc_ids"]), (q["answer"],))
        for q in data["queries"]
    ]  # fmt: skip
    items, _counts = make_items(rule_items, {d: i for i, d in enumerate(ids)}, use_rules=True)
    train, heldout = split_heldout(items, 0.25, None, seed=12)
    config = TrainRetrieverSettings(
        lr=1e-4, batch_size=ctx.sizes.rgft_batch, epochs=100, max_steps=ctx.sizes.rgft_steps,
        eval_every=ctx.sizes.rgft_steps, eval_k=5, patience=10**6,
    )  # fmt: skip
    result = train_query_encoder(query_model, embeddings, train, heldout, config,
                                 show_progress=False)  # fmt: skip
    losses = [h["train_loss"] for h in result.history if "train_loss" in h]
    if result.steps != config.max_steps or not losses:
        raise RuntimeError(f"{result.steps} of {config.max_steps} steps ran")
    return {
        "why": f"{result.steps} steps on {len(train)} q∘r items, train loss; held-out MRR "
        f"{result.base_metric:.3f} -> best {result.best_metric:.3f}",
        "loss_before": losses[0],
        "loss_after": losses[-1],
    }


def part_r2ag(ctx: Context) -> dict[str, Any]:
    """R²AG's `fit_variant` (the stage's training call) on the slice's samples."""
    from rulerag.generation.prompts import Sample
    from rulerag.generation.r2ag.encoding import DocVectors, FeatureEncoder
    from rulerag.generation.r2ag.fit import fit_variant
    from rulerag.generation.r2ag.settings import r2ag_settings
    from rulerag.generation.settings import generation_settings
    from rulerag.retrieval.dense import encode_corpus
    from rulerag.retrieval.encoders import DualEncoder, encode

    data = ctx.load_slice()
    model, spec = _encoder(ctx)
    ids = list(data["corpus"])
    texts = [data["corpus"][d] for d in ids]
    embeddings = encode_corpus(DualEncoder(model, model), texts, show_progress=False)
    rule_texts = {q["rule_id"]: q["rule_text"] for q in data["queries"]}
    n = ctx.sizes.r2ag_train + ctx.sizes.r2ag_dev
    samples = [
        Sample(
            q["qid"],
            q["query"],
            (q["answer"],),
            tuple(data["corpus"][d] for d in q["doc_ids"]),
            (q["rule_text"],),
            bool(data["temporal"]),
            extra={"doc_ids": q["doc_ids"], "doc_rules": [q["rule_id"]] * len(q["doc_ids"])},
        )  # fmt: skip
        for q in data["queries"][:n]
    ]
    features = FeatureEncoder(
        lambda batch: encode(model, batch, 64, spec.normalize, False),
        DocVectors(ids, embeddings),
        rule_texts,
        name=f"{Path(ctx.encoder).name}-rg",
    )
    # On CUDA the LLM in bf16, which load_causal_lm places on this process's GPU (the GPU
    # guard in `run_part` fails the part if it never touches the GPU).
    quantization = None
    generation = generation_settings(
        {"model": ctx.generator, "dtype": "bfloat16" if ctx.cuda else "float32",
         "quantization": quantization, "max_prompt_tokens": ctx.sizes.max_prompt_tokens}
    )  # fmt: skip
    settings = r2ag_settings(
        {
            "train": {
                "samples": ctx.sizes.r2ag_train,
                "dev_samples": ctx.sizes.r2ag_dev,
                "epochs": ctx.sizes.r2ag_epochs,
                "batch_size": ctx.sizes.r2ag_batch,
                "gradient_accumulation": 1,
                "warmup": 0,  # the default 3 % rounds up to one step at lr 0
                "learning_rate": 1e-3,
                "eval_steps": 1000,  # dev loss before and at the end
                "logging_steps": 1,
            }
        }
    )
    variant = settings.variant("rulerag_r2ag")
    result = fit_variant(
        samples, ctx.sizes.r2ag_dev, variant, features, generation, settings,
        retrieval=f"{Path(ctx.encoder).name}-rg",
    )  # fmt: skip
    stats = result.stats
    before, best = stats["dev_before"] or {}, stats["dev_best"] or {}
    if not stats["steps"]:
        raise RuntimeError("no optimiser step ran")
    return {
        "why": f"{stats['steps']} steps, {stats['trainable_parameters']:,} R²-Former parameters, "
        f"LLM {quantization or generation.dtype}, dev loss (LM + QDM)",
        "loss_before": before.get("loss"),
        "loss_after": best.get("loss"),
    }


def part_faiss(ctx: Context) -> dict[str, Any]:
    """The corpus index as the `index` stage builds it (flat inner product, `gpu: auto`)."""
    import numpy as np

    try:
        import faiss  # noqa: F401
    except ImportError as err:
        raise Skip(f"faiss is not importable ({err})") from err
    from rulerag.retrieval.dense import DenseIndex, encode_corpus, gpu_available
    from rulerag.retrieval.encoders import DualEncoder, encode
    from rulerag.retrieval.settings import FaissConfig

    data = ctx.load_slice()
    model, spec = _encoder(ctx)
    ids = list(data["corpus"])
    texts = [data["corpus"][d] for d in ids]
    embeddings = encode_corpus(DualEncoder(model, model), texts, show_progress=False)
    index = DenseIndex(ids, embeddings, FaissConfig(kind="flat", gpu="auto"))
    queries = [q for q in data["queries"]]
    vectors = encode(model, [q["query"] for q in queries], 64, spec.normalize, False)
    rows, _scores = index.search(vectors, 5)
    found = sum(
        bool({index.doc_ids[r] for r in hits if r >= 0} & set(q["oracle_doc_ids"]))
        for q, hits in zip(queries, rows, strict=True)
    )
    self_rows, _ = index.search(embeddings, 1)
    if not np.array_equal(self_rows[:, 0], np.arange(len(ids))):
        raise RuntimeError("a document's own embedding did not find it first")
    where = "faiss-gpu" if gpu_available() else "CPU faiss"
    note = "" if gpu_available() or not ctx.cuda else " (not a GPU check: faiss-gpu not bundled)"
    return {
        "why": f"{where}{note}: {len(ids)} docs, oracle in top 5 for {found}/{len(queries)} "
        "queries, every doc finds itself first",
        "device": "gpu" if gpu_available() else "cpu",
    }


PART_FUNCTIONS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "models": part_models,
    "lora_bf16": part_lora_bf16,
    "qlora_nf4": part_qlora_nf4,
    "rgft_retriever": part_rgft_retriever,
    "r2ag": part_r2ag,
    "faiss": part_faiss,
    "deepspeed_zero2": part_deepspeed_zero2,
}


def run_part(name: str, context_file: Path, result_file: Path) -> int:
    """The child: run one part, write its PartResult as JSON; exit 1 when it failed."""
    raw = json.loads(Path(context_file).read_text(encoding="utf-8"))
    ctx = Context(**{**raw, "sizes": Sizes(**raw["sizes"])})
    import torch

    started = time.perf_counter()
    row = PartResult(name, "ran", device="gpu" if ctx.cuda else "cpu")
    try:
        if ctx.cuda != torch.cuda.is_available():
            raise RuntimeError(f"CUDA expected {ctx.cuda}, torch says {torch.cuda.is_available()}")
        out = PART_FUNCTIONS[name](ctx)
        row.why = out.get("why", "")
        row.loss_before, row.loss_after = out.get("loss_before"), out.get("loss_after")
        row.device = out.get("device", row.device)
    except Skip as reason:
        row.status, row.why = "skipped", str(reason)
    except Exception as err:  # the table reports it; the traceback goes to the log
        traceback.print_exc()
        row.status, row.why = "failed", f"{type(err).__name__}: {err}"
    row.seconds = round(time.perf_counter() - started, 1)
    if ctx.cuda:
        row.peak_gpu_mib = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        if row.status == "ran" and name in GPU_PARTS and row.peak_gpu_mib < 1:
            row.status = "failed"
            row.why = f"ran on the CPU: it allocated no GPU memory ({row.why})"
    Path(result_file).write_text(json.dumps(asdict(row)), encoding="utf-8")
    return 1 if row.status == "failed" else 0


# ---------------------------------------------------------------------------------------------
# The parent: runs each part in a child, under its budget, and prints the table


def _child_env(cuda: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the dry run: the same code on the CPU
    return env


def run_all(ctx: Context, parts: tuple[str, ...], total_budget: float) -> list[PartResult]:
    """Each part in its own process, stopped at min(its budget, what is left of the total)."""
    rows: list[PartResult] = []
    deadline = time.monotonic() + total_budget
    context_file = Path(ctx.work) / "context.json"
    context_file.write_text(json.dumps(asdict(ctx)), encoding="utf-8")
    for name in parts:
        if not ctx.cuda and name in CPU_SKIPS:
            rows.append(PartResult(name, "skipped", CPU_SKIPS[name], device="cpu"))
            print(f"=== {name}: skipped: {CPU_SKIPS[name]}", flush=True)
            continue
        left = deadline - time.monotonic()
        budget = min(BUDGET_S[name] if ctx.cuda else total_budget, left)
        if budget < 5:
            rows.append(PartResult(name, "failed", f"no time left of the {total_budget:.0f} s"))
            continue
        print(f"\n=== {name} (budget {budget:.0f} s) ===", flush=True)
        result_file = Path(ctx.work) / f"result-{name}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--part", name,
               "--context", str(context_file), "--result", str(result_file)]  # fmt: skip
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=_child_env(ctx.cuda), timeout=budget, check=False)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
        wall = round(time.perf_counter() - started, 1)
        if result_file.is_file():
            row = PartResult(**json.loads(result_file.read_text(encoding="utf-8")))
            row.seconds = wall  # imports and model loading included
        elif code is None:
            row = PartResult(name, "failed", f"stopped at its {budget:.0f} s budget", wall)
        else:
            row = PartResult(name, "failed", f"the part's process ended with {code}", wall)
        rows.append(row)
        print(f"=== {name}: {row.status} in {row.seconds} s: {row.why}", flush=True)
    return rows


def _number(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(rows: list[PartResult]) -> str:
    """The final table, as Markdown."""
    from rulerag import markdown

    header = ["part", "status", "device", "seconds", "peak GPU MiB", "loss before", "loss after"]
    cells = [
        [
            r.part,
            r.status,
            r.device or "-",
            f"{r.seconds:.1f}",
            _number(r.peak_gpu_mib, 0) if r.peak_gpu_mib is not None else "-",
            _number(r.loss_before),
            _number(r.loss_after),
            r.why.replace("|", "/"),
        ]
        for r in rows
    ]
    return markdown.table([*header, "why"], cells)


def environment() -> dict[str, Any]:
    """Versions and the device, printed above the table."""
    import importlib.metadata as md

    import torch

    info: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("transformers", "peft", "sentence-transformers", "bitsandbytes", "deepspeed",
                 "faiss-cpu", "faiss-gpu-cu12", "pydantic", "gguf"):  # fmt: skip
        try:
            info[name] = md.version(name)
        except md.PackageNotFoundError:
            info[name] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["bf16"] = torch.cuda.is_bf16_supported()
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="the CPU run, even with CUDA")
    parser.add_argument("--bundle", type=Path, help="a staged bundle (gpu_bundle.py assemble)")
    parser.add_argument("--slice", type=Path, help="a slice JSON (default: the bundle's, else "
                        "built from RULERAG_DATA_DIR or ../shared/kg)")  # fmt: skip
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts")
    parser.add_argument("--json", type=Path, help="write the rows and environment here")
    parser.add_argument("--write-slice", type=Path, help="build the slice into this file, exit")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--context", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        if args.part not in PART_FUNCTIONS or not args.context or not args.result:
            parser.error("--part needs a known part, --context and --result")
        return run_part(args.part, args.context, args.result)
    mirror = Path(os.environ.get("RULERAG_DATA_DIR") or ROOT.parent / "shared" / "kg")
    if args.write_slice:
        data = build_slice(mirror)
        args.write_slice.parent.mkdir(parents=True, exist_ok=True)
        args.write_slice.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"{args.write_slice}: {len(data['queries'])} queries, {len(data['corpus'])} docs")
        return 0
    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = [p for p in parts if p not in PART_FUNCTIONS]
    if unknown:
        parser.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")

    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    env = environment()
    print("GPU check:", "CUDA" if cuda else "CPU dry run", json.dumps(env), flush=True)
    encoder, generator = "minilm", "smollm2"
    with tempfile.TemporaryDirectory(prefix="rulerag-gpu-check-") as work:
        slice_path = args.slice
        if args.bundle:
            bundle = args.bundle.resolve()
            os.environ["RULERAG_MODEL_CACHE"] = str(bundle / "models")  # the GGUF converts here
            encoder = str(bundle / "models" / MINILM_FOLDER)
            slice_path = slice_path or bundle / SLICE_FILE
        if slice_path is None:
            slice_path = Path(work) / SLICE_FILE
            slice_path.write_text(json.dumps(build_slice(mirror)), encoding="utf-8")
        read_slice(slice_path)  # a bad slice fails here, naming the file
        ctx = Context(str(slice_path), encoder, generator, cuda,
                      GPU_SIZES if cuda else CPU_SIZES, work)  # fmt: skip
        started = time.perf_counter()
        rows = run_all(ctx, parts, TOTAL_BUDGET_S if cuda else DRY_BUDGET_S)
        wall = time.perf_counter() - started
    peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"\nGPU check ({'CUDA' if cuda else 'CPU dry run'}), {wall:.0f} s in all, "
          f"largest part's peak RSS {peak_rss:.0f} MiB:\n")  # fmt: skip
    print(table(rows), flush=True)
    failed = [r.part for r in rows if r.status == "failed"]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"cuda": cuda, "seconds": round(wall, 1), "environment": env,
                  "rows": [asdict(r) for r in rows], "failed": failed}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
