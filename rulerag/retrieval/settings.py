"""params.yaml's retrieval sections as typed settings (read strictly): `index` (shared by the
stages that build an index, `index`, train on one, `train_retriever`, and search one,
`retrieve`: its BM25 back end, its dense encoders and FAISS), `train_retriever` (what the query
encoder's training runs with) and `retrieve` (the searches and the configurations the retrieve
stages produce).

The module imports no index code: the BM25 indexes (`sparse`) take `SparseSettings`, the dense
ones (`dense`, `encoders`) `FaissConfig` and `EncoderSpec`, as they are, so a stage that only
reads `index.dense` does not depend on the BM25 code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, get_args

from rulerag.retrieval.configs import DEFAULT_ENCODERS, TRAINED_MODES
from rulerag.retrieval.metrics import DEFAULT_KS
from rulerag.retrieval.rule_guided import RuleQueryForm
from rulerag.settings import (
    Count,
    Fraction,
    Name,
    NonNegative,
    Positive,
    PositiveReal,
    Seed,
    SettingsError,
    UniqueNames,
    load_settings,
    settings_fields,
)

__all__ = [
    "EARLY_STOPPING",
    "POSITIVES",
    "RETRIEVE_SPLITS",
    "SPARSE_BACKENDS",
    "EncoderSpec",
    "FaissConfig",
    "IndexSettings",
    "RetrieveSettings",
    "SparseSettings",
    "TrainRetrieverSettings",
    "index_settings",
    "retrieve_settings",
    "train_retriever_settings",
]

SparseBackend = Literal["bm25s", "pyserini"]
SPARSE_BACKENDS: tuple[str, ...] = get_args(SparseBackend)


@dataclass(frozen=True)
class SparseSettings:
    """`index.sparse`: the BM25 back end, its knobs (Pyserini's defaults) and the parity check
    between bm25s and Lucene."""

    backend: SparseBackend = field(
        default="bm25s",
        metadata={
            "help": "bm25s (fast default) | pyserini (Lucene, the paper's tool; the quicker "
            "search past ~250k documents)"
        },
    )
    k1: NonNegative = field(
        default=0.9, metadata={"help": "Pyserini's BM25 defaults, used by both back ends"}
    )
    b: Fraction = 0.4
    stemmer: str | None = "porter"
    threads: Count = 2
    parity_check: bool = field(
        default=True, metadata={"help": "also build the Lucene index and compare top-10s"}
    )
    parity_queries: Count = field(
        default=200,
        metadata={"help": "test queries (half alone, half as q ∘ r) for the check"},
    )


@dataclass(frozen=True)
class EncoderSpec:
    """One dense retriever (params.yaml `index.dense.<name>`): a model for both sides (an
    alias, a local folder or a Hugging Face id), or one per side (DPR-style)."""

    model: str = "minilm"
    query_model: str | None = None
    doc_model: str | None = None
    max_length: Positive = 128  # tokens; `q ∘ r` reaches ~75 with MiniLM's tokenizer
    batch_size: Positive = 32
    normalize: bool = True
    #: cls / mean / max: pool a plain transformer checkpoint this way (None: the model's own
    #: sentence-transformers modules, or mean pooling for a plain checkpoint)
    pooling: Literal["cls", "mean", "max"] | None = None

    @property
    def query_name(self) -> str:
        return self.query_model or self.model

    @property
    def doc_name(self) -> str:
        return self.doc_model or self.model


@dataclass(frozen=True)
class FaissConfig:
    """params.yaml `index.faiss`."""

    kind: Literal["flat", "ivf", "hnsw"] = field(
        default="flat", metadata={"help": "flat (exact inner product) | ivf | hnsw"}
    )
    # ivf: clusters, capped at n/39 (FAISS's minimum points per centroid)
    nlist: Positive = field(default=1024, metadata={"help": "ivf"})
    nprobe: Positive = field(default=32, metadata={"help": "ivf"})  # clusters visited per query
    hnsw_m: Positive = field(default=32, metadata={"help": "hnsw"})  # the graph's degree
    ef_construction: Positive = field(
        default=200, metadata={"help": "hnsw: candidates kept while building the graph"}
    )
    ef_search: Positive = field(default=128, metadata={"help": "hnsw"})
    gpu: str | bool = field(
        default="auto", metadata={"help": "faiss-gpu with a visible GPU; false = never"}
    )
    threads: Count = field(
        default=0, metadata={"help": "OpenMP threads of CPU search; 0 = FAISS's default"}
    )


@dataclass(frozen=True)
class IndexSettings:
    """params.yaml `index`."""

    HELP: ClassVar[str] = (
        "Stage `index`: data/<dataset>/benchmark/corpus.jsonl -> "
        "data/<dataset>/retrieval/index/<name>/ for each name of retrieve.indexes: `bm25` (bm25s, "
        "plus Lucene through Pyserini for the parity check) or a dense encoder named below (corpus "
        "encoded once, cached, FAISS index)."
    )

    threads: Count = field(
        default=0, metadata={"help": "torch threads; 0 = torch's default (all cores)"}
    )
    device: Literal["auto", "cpu", "cuda"] = field(
        default="auto", metadata={"help": "auto (cuda when there, else cpu) | cpu | cuda"}
    )
    sparse: SparseSettings = field(default_factory=SparseSettings)
    #: dense encoders by name, over `configs.DEFAULT_ENCODERS` (minilm, mpnet)
    dense: dict[Name, EncoderSpec] = field(
        default_factory=dict,
        metadata={
            "help": (
                "Dense dual encoders: an alias (minilm = all-MiniLM-L6-v2, mpnet = "
                "all-mpnet-base-v2, both from offline packages), a local folder or any Hugging "
                "Face id; `query_model` / `doc_model` give DPR-style separate encoders (e.g. "
                "facebook/dpr-question_encoder-single-nq-base and "
                "facebook/dpr-ctx_encoder-single-nq-base). Each takes model, query_model, "
                "doc_model, max_length (tokens, default 128), batch_size (default 32), normalize "
                "(L2-normalised embeddings: inner product = cosine, default true) and pooling (cls "
                "/ mean / max: pool a plain transformer checkpoint so; null = the model's own "
                "sentence-transformers modules, mean for a plain checkpoint). Only the names in "
                "retrieve.indexes are built. dpr, simcse and contriever are the paper's other "
                "retrievers (Table 2 and Fig. 3: DPR; Fig. 3: SimCSE; Table 4: Contriever), by "
                "their Hugging Face ids, so they need a hub: DPR's NQ encoders "
                "(sentence-transformers' copies: [CLS] pooling, dot product), SimCSE's supervised "
                "BERT ([CLS]) and Contriever (mean pooling, dot product), each as its authors "
                "score."
            )
        },
    )
    faiss: FaissConfig = field(default_factory=FaissConfig)

    def encoder(self, name: str) -> EncoderSpec:
        """The dense encoder called `name`: from `dense`, else a default one."""
        if name in self.dense:
            return self.dense[name]
        if name in DEFAULT_ENCODERS:
            return load_settings(EncoderSpec, DEFAULT_ENCODERS[name], f"index.dense.{name}")
        known = list({**DEFAULT_ENCODERS, **self.dense})
        raise SettingsError(f"no encoder named {name!r} in index.dense ({known})")


def index_settings(section: Mapping[str, Any] | None) -> IndexSettings:
    """params.yaml's `index` section as typed settings, strictly."""
    return load_settings(IndexSettings, section, "index")


#: the query sets `retrieve` searches
RetrieveSplit = Literal["test", "f_g"]
RETRIEVE_SPLITS: tuple[str, ...] = get_args(RetrieveSplit)


@dataclass(frozen=True)
class RetrieveSettings:
    """params.yaml `retrieve` (the `retrieve`, `retrieve_finetuned` and `retrieval_report`
    stages; dvc.yaml expands `indexes` and `finetune` into stage instances)."""

    HELP: ClassVar[str] = (
        "Stages `retrieve` (standard, rg for every index) and `retrieve_finetuned` (ssft, rgft for "
        "the dense encoders of `finetune`): data/<dataset>/retrieval/<index>-<mode>/run.parquet, "
        "run_fg.parquet, metrics.json, recall.csv; `retrieval_report` gathers them."
    )

    # each searched standard and rule-guided
    indexes: UniqueNames = field(
        default=("bm25", "minilm"),
        metadata={"help": "add mpnet for the second encoder (~40 min to encode on CPU)"},
    )
    finetune: UniqueNames = field(
        default=("minilm",), metadata={"help": "dense encoders that get RGFT / SSFT query encoders"}
    )
    top_k: Positive = field(default=50, metadata={"help": "per (query, rule) search"})
    ks: tuple[Positive, ...] = DEFAULT_KS  # Recall@k reported
    splits: tuple[RetrieveSplit, ...] = ("test", "f_g")
    #: F_G queries retrieved (a seeded sample, for the generator's training data); None = all
    f_g_queries: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "F_G queries retrieved for the generator's training data: a seeded sample (the CPU "
                "profile trains on ~100 samples); null = all of them (paper scale)."
            )
        },
    )
    seed: Seed = 12
    #: a rule's part of a rule-guided search text: rule = its whole text (the paper), body =
    #: its body relation names only (also what RGFT trains on)
    rule_query: RuleQueryForm = field(
        default="rule",
        metadata={
            "help": (
                "A rule's part of each rule-guided search text `q ∘ r` (rg modes, and what RGFT "
                "trains on):\n"
                "  rule - the rule's whole text, `[Entity1, r1, Entity2] leads to [Entity1, r, "
                "Entity2]`\n"
                "         (the paper's q ⊕ r)\n"
                "  body - its body relation names only (`r1`): rules stop pulling short queries "
                "off their\n"
                '         subject (NELL-995, see README "Why rules hurt retrieval on NELL-995")'
            )
        },
    )

    @property
    def search_ks(self) -> list[int]:
        """The ks a run of `top_k` documents per search can answer."""
        return [k for k in self.ks if k <= self.top_k]

    def config_names(self) -> list[str]:
        """The configurations the retrieve stages produce, in dvc.yaml's order."""
        names = [f"{i}-{m}" for i in self.indexes for m in ("standard", "rg")]
        return names + [f"{e}-{m}" for e in self.finetune for m in TRAINED_MODES]


def retrieve_settings(section: Mapping[str, Any] | None) -> RetrieveSettings:
    """params.yaml's `retrieve` section as typed settings, strictly."""
    return load_settings(RetrieveSettings, section, "retrieve")


EarlyStopping = Literal["mrr", "recall", "loss"]
EARLY_STOPPING: tuple[str, ...] = get_args(EarlyStopping)
Positives = Literal["oracle", "answer"]
POSITIVES: tuple[str, ...] = get_args(Positives)
#: knobs of the stage around the training, not of its steps: they stay out of a checkpoint's
#: key (`training.fingerprint`; `positives` shapes the items, which the key hashes)
STAGE_KNOBS = ("positives", "threads", "log_model", "overrides")


@dataclass(frozen=True)
class TrainRetrieverSettings:
    """params.yaml `train_retriever`: what `training.train_query_encoder` runs with (paper
    defaults for lr, batch size and temperature), plus the stage's own knobs. `max_length`
    and `normalize` None take the encoder's and the index's own (`train_config`)."""

    HELP: ClassVar[str] = (
        "Stage `train_retriever`: RGFT (q ∘ r) / SSFT (q) contrastive fine-tuning of the query "
        "encoder of each dense index in retrieve.finetune on F_R; document encoder frozen (the "
        "index is reused). Paper defaults: lr 1e-5, batch 32, temperature 0.01."
    )

    lr: PositiveReal = 1e-5
    batch_size: Positive = 32
    temperature: PositiveReal = 0.01
    epochs: Positive = 3
    #: train at least this long
    min_steps: Count = field(
        default=0, metadata={"help": "small F_R sets (NELL-995) cycle through more epochs"}
    )
    max_steps: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "CPU profile: 150 steps (~5 min on 2 cores for MiniLM on ICEWS14; the held-out MRR "
                "on F_R reaches 0.54 of the 0.61 that 600 steps give). null = all epochs (the "
                "paper's setting)."
            )
        },
    )
    max_items: Positive | None = field(
        default=None,
        metadata={"help": "train on a seeded sample of this many F_R items; null = all"},
    )
    max_positives: Positive = field(
        default=4, metadata={"help": "oracle documents per item in each batch"}
    )
    heldout_fraction: Fraction = field(
        default=0.1, metadata={"help": "of F_R queries, for early stopping"}
    )
    heldout_max: Count = 500  # items
    eval_every: Positive = 50  # steps
    eval_k: Positive = field(
        default=10, metadata={"help": "the k of the held-out Recall@k (early_stopping: recall)"}
    )
    #: the held-out figure to keep the best of
    early_stopping: EarlyStopping = field(default="mrr", metadata={"help": "mrr | recall | loss"})
    patience: Positive = 3  # evaluations without improvement before stopping
    min_delta: NonNegative = field(
        default=0.0,
        metadata={"help": "the least held-out change that counts as an improvement"},
    )
    checkpoint_every: Positive = field(
        default=50, metadata={"help": "resumable checkpoints in retrieval/checkpoints/"}
    )
    weight_decay: NonNegative = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_steps: Count = field(default=0, metadata={"help": "linear learning-rate warm-up steps"})
    grad_clip: NonNegative = field(
        default=1.0, metadata={"help": "gradient norm clipping; 0 = none"}
    )
    max_length: Positive | None = field(
        default=None,
        metadata={"help": "query tokens; null = the encoder's (index.dense.<name>)"},
    )
    normalize: bool | None = field(
        default=None,
        metadata={"help": "L2-normalised embeddings; null = as the index was built"},
    )
    seed: Seed = 12
    positives: Positives = field(
        default="oracle",
        metadata={"help": "oracle = every oracle document; answer = answer-bearing only"},
    )
    threads: Count = 0  # torch threads; 0 = torch's default (all cores)
    log_model: bool = field(
        default=True,
        metadata={
            "help": (
                "log the trained encoder as an MLflow model, registered as "
                "rulerag-<dataset>-retriever-<encoder>-<mode>"
            )
        },
    )
    #: any of the keys above for one encoder only, by encoder name
    overrides: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        metadata={
            "help": (
                "Any key above for one encoder only, by name, e.g. overrides: {mpnet: {batch_size: "
                "16}}"
            )
        },
    )

    def __post_init__(self) -> None:
        if self.early_stopping not in EARLY_STOPPING:
            raise ValueError(
                f"early_stopping must be one of {EARLY_STOPPING}, not {self.early_stopping!r}"
            )
        if self.positives not in POSITIVES:
            raise ValueError(f"positives must be one of {POSITIVES}, not {self.positives!r}")

    def train_config(
        self,
        max_length: int = EncoderSpec.max_length,
        normalize: bool = EncoderSpec.normalize,
    ) -> TrainRetrieverSettings:
        """The settings a training run takes: `max_length` / `normalize` where these are None
        (by default an encoder's defaults)."""
        return replace(
            self,
            max_length=max_length if self.max_length is None else self.max_length,
            normalize=normalize if self.normalize is None else self.normalize,
        )

    def for_encoder(self, name: str) -> TrainRetrieverSettings:
        """The settings one encoder trains with: `overrides.<name>` merged over the others,
        checked as strictly as the section (an unknown key or a bad value names
        `train_retriever.overrides.<name>`). The result has no overrides left; an encoder
        without any gets these settings unchanged."""
        override = self.overrides.get(name)
        if not override:
            return self
        where = f"train_retriever.overrides.{name}"
        known = set(settings_fields(TrainRetrieverSettings)) - {"overrides"}
        unknown = sorted(str(key) for key in override if key not in known)
        if unknown:
            raise SettingsError(
                f"params.yaml: {where}: unknown key {', '.join(repr(k) for k in unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "overrides"}
        return load_settings(type(self), {**values, **override, "overrides": {}}, where)


def train_retriever_settings(
    section: Mapping[str, Any] | None, encoder: str | None = None
) -> TrainRetrieverSettings:
    """params.yaml's `train_retriever` section as typed settings, strictly (`Params` reads it
    so); with `encoder`, that encoder's (`TrainRetrieverSettings.for_encoder`)."""
    settings = load_settings(TrainRetrieverSettings, section, "train_retriever")
    return settings.for_encoder(encoder) if encoder else settings
