"""RGFT / SSFT generator training: LoRA (optionally on a 4-bit base, QLoRA) with the HF Trainer.

What the paper does and how it maps here:

* RGFT-generator: instruction tuning on F_G samples (query + its rules + documents retrieved by
  the fine-tuned retriever -> the gold answer), 2,048 samples, LoRA on a 4-bit base. SSFT is the
  same without rules (the `plain` prompt, documents from the SSFT retriever). Which prompt and
  which documents is decided by the caller (`samples.py`); this module trains on (prompt,
  answer) pairs.
* The loss is on the answer tokens only: the prompt's labels are -100, so the model is not
  trained to reproduce documents it will be given anyway (`encode_example`).
* LoRA through peft: rank, alpha, dropout and target modules are knobs. The defaults are those
  of the authors' public training script (chenzhongwu20/RuleRAG_ICL_FT, config.py / utils.py:
  r=4, alpha=16, dropout 0.05 on q_proj/v_proj, lr 3e-4, Adam betas (0.9, 0.95), 4-bit NF4
  with double quantisation). The paper's Table 7 itself could not be read offline; these are
  taken as its values.
* QLoRA: `quantization: nf4` loads the base in 4-bit NF4 with double quantisation and bf16
  compute (bitsandbytes) and prepares it with `prepare_model_for_kbit_training`. Meant for a
  GPU; bitsandbytes also runs it on the CPU, slowly (the unit tests do, on a tiny model).
* DeepSpeed: `deepspeed: <path>` hands a ZeRO config (configs/deepspeed_zero2.json, "auto"
  values filled by the Trainer) to the Trainer. Meant for GPUs; it also runs on the CPU (its
  CPU accelerator; torch's Adam instead of the fused CUDA one, `deepspeed_config`), which is how
  the tests exercise it. One process needs no launcher (`single_process_rendezvous`); launch
  with `deepspeed` or `accelerate launch` for several GPUs. Under ZeRO-2 the dev loss before
  training is not measured (DeepSpeed evaluates only inside its engine, built by `train()`).
* A dev slice is evaluated every `eval_steps`; checkpoints are saved at the same steps and the
  best by dev loss is loaded at the end (`load_best_model_at_end`), then only the adapter is
  saved (a few MB), atomically. A run killed midway resumes from its last checkpoint when run
  again with the same inputs and settings (`_work_dir`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from rulerag.generation.prompts import prompt_token_ids, use_chat_template
from rulerag.gpu_libraries import quiet_gpu_libraries

if TYPE_CHECKING:  # its settings (generation/settings.py), which training only reads
    from rulerag.generation.settings import LoraSettings, TrainSettings

logger = logging.getLogger(__name__)

__all__ = [
    "AnswerOnlyCollator",
    "TrainResult",
    "encode_example",
    "load_adapter_model",
    "train_lora",
]

IGNORE_INDEX = -100
#: the file saved beside the adapter: what it was trained from and how it went
TRAIN_STATS_FILE = "train_stats.json"
DEFAULT_DEEPSPEED_CONFIG = Path(__file__).resolve().parent / "configs" / "deepspeed_zero2.json"


@dataclass
class TrainResult:
    """Where the adapter went, its train_stats.json content, and the trained (peft) model."""

    adapter_dir: Path
    stats: dict[str, Any]
    model: Any = None


def encode_example(
    tokenizer: Any,
    prompt: str,
    answer: str,
    *,
    chat_template: bool,
    max_prompt_tokens: int | None = None,
    max_answer_tokens: int | None = None,
) -> dict[str, list[int]]:
    """Token ids and labels of one (prompt, target) pair, loss on the target only.

    `answer` is the target text as the prompt style writes it (`PromptFormat.target`: the
    paper's `Afghanistan.`); only its whitespace is normalised here.

    The prompt is tokenised exactly as at inference (`prompt_token_ids`), cut from the left when
    too long (as `LocalGenerator.encode` does), then the answer and the end-of-sequence token
    follow. Without a chat template the answer starts after a space (`Answer: Paris`). None
    limits nothing (the stage passes the settings' limits).
    """
    prompt_ids = prompt_token_ids(tokenizer, prompt, chat_template)
    if max_prompt_tokens and len(prompt_ids) > max_prompt_tokens:
        prompt_ids = prompt_ids[-max_prompt_tokens:]
    text = " ".join(str(answer).split())
    answer_ids = tokenizer(text if chat_template else " " + text, add_special_tokens=False)[
        "input_ids"
    ][: max_answer_tokens or None]
    if tokenizer.eos_token_id is not None:
        answer_ids = [*answer_ids, tokenizer.eos_token_id]
    return {
        "input_ids": prompt_ids + answer_ids,
        "attention_mask": [1] * (len(prompt_ids) + len(answer_ids)),
        "labels": [IGNORE_INDEX] * len(prompt_ids) + answer_ids,
    }


class AnswerOnlyCollator:
    """Right-pads a batch: pad id for inputs, 0 for the mask, -100 for labels (no loss on pads)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = int(pad_token_id)

    def __call__(self, features: Sequence[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        width = max(len(f["input_ids"]) for f in features)

        def pad(key: str, value: int) -> Any:
            rows = [list(f[key]) + [value] * (width - len(f[key])) for f in features]
            return torch.tensor(rows, dtype=torch.long)

        return {
            "input_ids": pad("input_ids", self.pad_token_id),
            "attention_mask": pad("attention_mask", 0),
            "labels": pad("labels", IGNORE_INDEX),
        }


class _ListDataset:
    """A list as a torch map-style dataset (no `datasets` dependency)."""

    def __init__(self, items: list[dict[str, list[int]]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.items[index]


def deepspeed_config(path: str | Path, warmup: float = 0.1) -> dict[str, Any]:
    """The ZeRO config at `path` as a dict, made runnable on this machine.

    Without CUDA, DeepSpeed's CPU accelerator cannot build the fused Adam kernel, so an
    optimizer section gets `torch_adam: true` (torch's own AdamW, same update rule).
    With no warmup (`warmup: 0`) a scheduler section whose `warmup_num_steps` is "auto" is
    dropped: the Trainer would fill in 0, which DeepSpeed's warmup schedulers refuse
    ("warmup_num_steps must be a positive integer"), and without the section the Trainer
    drives DeepSpeed's optimizer with its own linear schedule, the one a run without
    DeepSpeed gets.
    """
    path = Path(path)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable DeepSpeed JSON config: {err}") from err
    if not _cuda() and isinstance(config.get("optimizer"), dict):
        config["optimizer"].setdefault("params", {})["torch_adam"] = True
    scheduler = config.get("scheduler")
    if (
        warmup == 0
        and isinstance(scheduler, dict)
        and (scheduler.get("params") or {}).get("warmup_num_steps") == "auto"
    ):
        logger.info(
            "%s: no warmup, so the Trainer's linear schedule replaces %s",
            path,
            scheduler.get("type"),
        )
        del config["scheduler"]
    return config


def deepspeed_arch_list(environ: dict[str, str] | None = None) -> str | None:
    """Make TORCH_CUDA_ARCH_LIST readable by DeepSpeed's kernel builder; the value it now holds.

    DeepSpeed compiles its fused Adam on first use for the architectures this variable names,
    and reads each entry as numbers only ("9.0", "9.0+PTX"). CUDA images for Hopper set
    "9.0a" (the arch-specific target), on which it stops with "invalid literal for int()"
    (seen on an H100, benchmarks/gpu_check.py). The letter suffix is dropped ("9.0a" -> "9.0"):
    the fused Adam uses no arch-specific instruction.
    """
    env = os.environ if environ is None else environ
    value = env.get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return value
    entries = [entry for entry in re.split(r"[;\s]+", value.strip()) if entry]
    plain = []
    for entry in entries:
        match = re.fullmatch(r"(\d+)\.(\d+)[a-z]*(\+PTX)?", entry)
        plain.append(f"{match[1]}.{match[2]}{match[3] or ''}" if match else entry)
    fixed = ";".join(dict.fromkeys(plain))
    if plain != entries:
        logger.info("TORCH_CUDA_ARCH_LIST %r -> %r for DeepSpeed's kernel builder", value, fixed)
        env["TORCH_CUDA_ARCH_LIST"] = fixed
    return env["TORCH_CUDA_ARCH_LIST"]


def single_process_rendezvous() -> None:
    """Give a process started without a launcher the rendezvous a one-process launch has.

    The `deepspeed` launcher (or torchrun, accelerate) sets RANK / WORLD_SIZE / MASTER_*;
    without them DeepSpeed falls back to MPI discovery, which needs mpi4py and an MPI run.
    A DVC stage is one plain process, so it gets rank 0 of 1 on a free local port.
    """
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(
        {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _peft_model(model: Any, settings: TrainSettings) -> Any:
    return lora_model(
        model,
        settings.lora,
        quantization=settings.quantization,
        gradient_checkpointing=settings.gradient_checkpointing,
    )


def lora_model(
    model: Any,
    lora: LoraSettings,
    *,
    quantization: str | None = None,
    gradient_checkpointing: bool = False,
) -> Any:
    """`model` wrapped by peft with trainable LoRA adapters of `lora` (base weights frozen;
    a 4-bit base prepared for k-bit training first)."""
    quiet_gpu_libraries()
    from peft import LoraConfig, TaskType, get_peft_model, prepare_model_for_kbit_training

    if quantization in ("nf4", "4bit"):
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gradient_checkpointing
        )
    elif gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    num_layers = getattr(model.config, "num_hidden_layers", None)
    layers = lora.layer_indices(num_layers) if num_layers else None
    config = LoraConfig(
        layers_to_transform=layers,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type=TaskType.CAUSAL_LM,
        bias="none",
    )
    model = get_peft_model(model, config)
    model.config.use_cache = False  # the KV cache is useless in training and wastes memory
    return model


class _LossLog:
    """Collects the Trainer's log lines (train loss, eval loss) for train_stats.json."""

    def __init__(self) -> None:
        self.train: list[dict[str, float]] = []
        self.eval: list[dict[str, float]] = []


def _callback(log: _LossLog) -> Any:
    from transformers import TrainerCallback

    class LossCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            logs = logs or {}
            if "loss" in logs:
                log.train.append({"step": state.global_step, "loss": float(logs["loss"])})
            if "eval_loss" in logs:
                log.eval.append({"step": state.global_step, "loss": float(logs["eval_loss"])})

    return LossCallback()


def train_lora(
    model: Any,
    tokenizer: Any,
    train: Sequence[tuple[str, str]],
    dev: Sequence[tuple[str, str]],
    settings: TrainSettings,
    output_dir: Path,
    *,
    base_model: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Fine-tune `model` with LoRA on (prompt, answer) pairs; save the best adapter.

    `model` is the base causal LM as loaded (`models.load_causal_lm`, 4-bit or not); it is
    wrapped with peft here. Checkpoints go to a folder beside `output_dir` named after the
    training (`_work_dir`): a run killed midway leaves them, and the rerun resumes from the
    last one; they are removed at the end. `output_dir` receives the adapter (the best by dev
    loss when `dev` is given, else the last) and train_stats.json, replacing any previous one
    atomically.
    `metadata` (e.g. the prompt style) is stored in train_stats.json, so inference can check
    that it prompts the adapter the way it was trained.
    """
    quiet_gpu_libraries()
    from transformers import Trainer, set_seed

    if not train:
        raise ValueError("no training samples")
    deepspeed = _deepspeed_setup(settings)
    set_seed(settings.seed)
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    chat = use_chat_template(tokenizer, settings.chat_template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_set = _encode_pairs(tokenizer, train, chat, settings)
    dev_set = _encode_pairs(tokenizer, dev, chat, settings) if dev else None
    model = _peft_model(model, settings)
    trainable, total = model.get_nb_trainable_parameters()
    bf16 = _use_bf16(settings)
    eval_steps = _eval_steps(len(train_set), settings)
    key = _training_key(base_model, train, dev, settings, metadata)
    work = _work_dir(output_dir, key)
    main = True
    try:
        args = _training_arguments(settings, work, bool(dev_set), eval_steps, bf16, deepspeed)
        log = _LossLog()
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=train_set,
            eval_dataset=dev_set,
            data_collator=AnswerOnlyCollator(tokenizer.pad_token_id),
            callbacks=[_callback(log)],
        )
        # ZeRO-2 builds its engine in train(): evaluating before it is refused (stage 3 only)
        dev_before = trainer.evaluate()["eval_loss"] if dev_set and deepspeed is None else None
        started = time.perf_counter()
        last = _last_checkpoint(work / "checkpoints")
        if last is not None:
            logger.info("resuming the training of %s from %s", output_dir.name, Path(last).name)
        output = trainer.train(resume_from_checkpoint=last)
        seconds = time.perf_counter() - started
        trainer.accelerator.wait_for_everyone()  # every process has loaded the best checkpoint
        main = trainer.is_world_process_zero()
        if not main:  # another process of a multi-GPU launch: rank 0 saves
            return TrainResult(adapter_dir=output_dir, stats={}, model=trainer.model)
        staging = work / "adapter"
        trainer.model.save_pretrained(str(staging))
        stats = _train_stats(
            trainer, output, log, train_set, dev_set, settings, seconds,
            base_model=base_model, dev_before=dev_before, parameters=(trainable, total),
            chat=chat, metadata=metadata,
        )  # fmt: skip
        _publish_adapter(staging, stats, output_dir, work)
    finally:
        if main:
            shutil.rmtree(work, ignore_errors=True)
    return TrainResult(adapter_dir=output_dir, stats=stats, model=trainer.model)


def _deepspeed_setup(settings: TrainSettings) -> dict[str, Any] | None:
    """DeepSpeed's config when `settings.deepspeed` names one (None: plain PyTorch), after
    what it needs of the process: a rendezvous of one when no launcher set one, and the CUDA
    architectures its extensions are built for."""
    if not settings.deepspeed:
        return None
    deepspeed = deepspeed_config(settings.deepspeed, settings.warmup)
    single_process_rendezvous()
    deepspeed_arch_list()
    return deepspeed


def _encode_pairs(
    tokenizer: Any, pairs: Sequence[tuple[str, str]], chat: bool, settings: TrainSettings
) -> _ListDataset:
    """(prompt, answer) pairs as the Trainer's dataset: token ids with the loss on the answer
    only (`encode_example`), prompts and answers cut to the settings' lengths."""
    return _ListDataset(
        [
            encode_example(
                tokenizer,
                prompt,
                answer,
                chat_template=chat,
                max_prompt_tokens=settings.max_prompt_tokens,
                max_answer_tokens=settings.max_answer_tokens,
            )
            for prompt, answer in pairs
        ]
    )


def _use_bf16(settings: TrainSettings) -> bool:
    """Whether to train in bfloat16: `bf16: auto` where the GPU supports it."""
    import torch

    bf16 = settings.bf16
    if bf16 == "auto":
        bf16 = _cuda() and torch.cuda.is_bf16_supported()
    return bool(bf16)


def _eval_steps(train_samples: int, settings: TrainSettings) -> int:
    """Steps between evaluations (and checkpoints, saved with them): `eval_steps`, but at most
    the run's length, so that a short run still evaluates and saves once."""
    steps_per_epoch = math.ceil(
        train_samples / (settings.batch_size * settings.gradient_accumulation)
    )
    total_steps = max(1, math.ceil(steps_per_epoch * settings.epochs))
    return max(1, min(settings.eval_steps, total_steps))


def _training_arguments(
    settings: TrainSettings,
    work: Path,
    has_dev: bool,
    eval_steps: int,
    bf16: bool,
    deepspeed: dict[str, Any] | None,
) -> Any:
    """The Trainer's arguments: the settings' optimisation, checkpoints in `work` (evaluated,
    saved and the best put back at the end only with a dev set), no reporting of its own."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(work / "checkpoints"),
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.gradient_accumulation,
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup,
        weight_decay=settings.weight_decay,
        adam_beta2=settings.adam_beta2,
        lr_scheduler_type="linear",
        logging_steps=settings.logging_steps,
        logging_first_step=True,
        eval_strategy="steps" if has_dev else "no",
        eval_steps=eval_steps,
        save_strategy="steps" if has_dev else "no",
        save_steps=eval_steps,
        save_total_limit=settings.save_total_limit,
        # whole checkpoints (the optimizer, scheduler and random states too, a few MB for
        # LoRA): a run killed midway resumes from its last one (`_work_dir`)
        save_only_model=False,
        load_best_model_at_end=has_dev,
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        report_to="none",
        disable_tqdm=True,
        seed=settings.seed,
        data_seed=settings.seed,
        bf16=bf16,
        gradient_checkpointing=False,  # set on the model above (peft needs it first)
        deepspeed=deepspeed,
        optim="adamw_torch",
        use_cpu=not _cuda(),
        dataloader_num_workers=0,
        remove_unused_columns=False,
        label_names=["labels"],
    )


def _last_checkpoint(checkpoints: Path) -> str | None:
    """The last checkpoint a killed run of the same training left (None: start afresh)."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None


def _train_stats(
    trainer: Any,
    output: Any,
    log: _LossLog,
    train_set: _ListDataset,
    dev_set: _ListDataset | None,
    settings: TrainSettings,
    seconds: float,
    *,
    base_model: str,
    dev_before: float | None,
    parameters: tuple[int, int],
    chat: bool,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """train_stats.json: what the run did, its losses, what it was trained with (inference
    checks the prompt style in it)."""
    # load_best_model_at_end has put the best checkpoint back; its dev loss is recorded.
    best = trainer.state.best_metric
    dev_best = float(best) if dev_set and best is not None else None
    samples_seen = len(train_set) * settings.epochs
    trainable, total = parameters
    return {
        "base_model": base_model,
        "train_samples": len(train_set),
        "dev_samples": len(dev_set) if dev_set else 0,
        "steps": int(output.global_step),
        "train_seconds": round(seconds, 2),
        "seconds_per_100_samples": round(100 * seconds / samples_seen, 2),
        "train_loss": round(float(output.training_loss), 5),
        "first_loss": log.train[0]["loss"] if log.train else None,
        "last_loss": log.train[-1]["loss"] if log.train else None,
        "dev_loss_before": dev_before,
        "dev_loss_best": dev_best,
        "best_checkpoint": Path(trainer.state.best_model_checkpoint).name
        if trainer.state.best_model_checkpoint
        else None,
        "trainable_parameters": int(trainable),
        "total_parameters": int(total),
        "chat_template": chat,
        **dict(metadata or {}),
        "settings": asdict(settings),
        "loss_curve": log.train,
        "dev_curve": log.eval,
    }


def _publish_adapter(staging: Path, stats: Mapping[str, Any], output_dir: Path, work: Path) -> None:
    """The staged adapter, its train_stats.json written, into `output_dir` by renames: a
    reader sees the previous adapter or the new one, never a half-written folder (the
    previous one goes into `work`, removed with it)."""
    (staging / TRAIN_STATS_FILE).write_text(
        json.dumps(stats, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    if output_dir.exists():
        os.replace(output_dir, work / "previous")  # removed with `work` below
    os.replace(staging, output_dir)


def _training_key(
    base_model: str,
    train: Sequence[tuple[str, str]],
    dev: Sequence[tuple[str, str]],
    settings: TrainSettings,
    metadata: Mapping[str, Any] | None,
) -> str:
    """A digest of what decides a training (the base, the samples, every setting): the name of
    its checkpoints' folder, so that a rerun of the same training finds what a killed one left
    and one with anything changed starts afresh."""
    digest = hashlib.sha256()
    for part in (base_model, json.dumps(asdict(settings), sort_keys=True, default=str),
                 json.dumps(dict(metadata or {}), sort_keys=True, default=str)):  # fmt: skip
        digest.update(part.encode() + b"\0")
    for name, pairs in (("train", train), ("dev", dev)):
        digest.update(name.encode())
        for prompt, answer in pairs:
            digest.update(prompt.encode() + b"\1" + answer.encode() + b"\2")
    return digest.hexdigest()[:16]


#: who works in a checkpoints' folder: a rerun leaves a live training's folder alone
_OWNER = "owner.json"


def _alive(owner: Path) -> bool:
    """Whether the process named in a work folder's owner.json still runs (same start time:
    not a reused pid); a folder without one (being made, or from an older version) counts as
    alive only for a minute."""
    try:
        data = json.loads(owner.read_text(encoding="utf-8"))
        pid, started = int(data["pid"]), data["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return owner.parent.exists() and time.time() - owner.parent.stat().st_mtime < 60
    try:
        return psutil.Process(pid).create_time() == started
    except psutil.Error:
        return False


def _work_dir(output_dir: Path, key: str) -> Path:
    """The checkpoints' folder of training `key` beside `output_dir`, `.<name>.train-<key>`:
    the one a killed run of the same training left (its checkpoints resume it, `train_lora`),
    else a new one. Every process of a multi-GPU launch computes the same key, so they share
    it (rank 0 writes the checkpoints all of them load the best of). Folders of other
    trainings beside it whose process is gone are removed: a killed run's used to stay for
    good."""
    work = output_dir.parent / f".{output_dir.name}.train-{key}"
    for other in output_dir.parent.glob(f".{output_dir.name}.train-*"):
        if other != work and not _alive(other / _OWNER):
            shutil.rmtree(other, ignore_errors=True)
    work.mkdir(exist_ok=True)
    if int(os.environ.get("RANK", "0")) == 0:
        pid = os.getpid()
        owner = {"pid": pid, "started": psutil.Process(pid).create_time()}
        (work / _OWNER).write_text(json.dumps(owner), encoding="utf-8")
    return work


def load_adapter_model(base: Any, adapter_dir: Path, merge: bool = False) -> Any:
    """The base model with a saved LoRA adapter on top (merged into the weights on request)."""
    quiet_gpu_libraries()
    from peft import PeftModel

    model = PeftModel.from_pretrained(base, str(adapter_dir))
    return model.merge_and_unload() if merge else model
