"""LoRA training on a tiny randomly initialised Llama: the loss falls, only answer tokens are
trained, and the saved adapter reloads onto the base with identical outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from rulerag.generation.prompts import render_prompt  # noqa: E402
from rulerag.generation.settings import LoraSettings, TrainSettings  # noqa: E402
from rulerag.generation.training import (  # noqa: E402
    IGNORE_INDEX,
    AnswerOnlyCollator,
    encode_example,
    load_adapter_model,
    train_lora,
)
from tests.helpers import tiny_llama, word_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


ENTITIES = [f"e{i}" for i in range(8)]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_settings(**overrides) -> TrainSettings:
    """LoRA on every linear layer of the tiny Llama, at a learning rate it learns `pairs` at
    within a few epochs (`overrides`: the epochs, steps and quantization of one test)."""
    return TrainSettings(
        lora=LoraSettings(r=8, alpha=16, dropout=0.0, target_modules=ALL_LINEAR),
        learning_rate=3e-2,
        batch_size=8,
        warmup=0,
        chat_template=False,
        seed=3,
        **overrides,
    )


#: the "KG" the tiny model must learn: the answer of each subject
ANSWER = {e: ENTITIES[(i * 3 + 1) % len(ENTITIES)] for i, e in enumerate(ENTITIES)}


def pairs(n: int, offset: int = 0) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        subject = ENTITIES[(i + offset) % len(ENTITIES)]
        docs = [f"{subject} visits {ANSWER[subject]} .", f"{ENTITIES[i % 3]} meets e5 ."]
        rules = ["[Entity1, visits, Entity2] leads to [Entity1, meets, Entity2]"]
        prompt = render_prompt("rule", f"whom does {subject} meet ?", docs, rules)
        out.append((prompt, ANSWER[subject]))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    train, dev = pairs(48), pairs(8, offset=3)
    tokenizer = word_tokenizer([p + " " + a for p, a in train + dev])
    torch.manual_seed(0)
    base_dir = tmp_path_factory.mktemp("base")
    tiny_llama(tokenizer).save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    return base_dir, tokenizer, train, dev


def test_labels_cover_the_answer_only(tiny):
    _base, tokenizer, train, _dev = tiny
    prompt, answer = train[0]
    ex = encode_example(tokenizer, prompt, answer, chat_template=False)
    n_answer = sum(1 for label in ex["labels"] if label != IGNORE_INDEX)
    answer_ids = tokenizer(" " + answer, add_special_tokens=False)["input_ids"]
    assert n_answer == len(answer_ids) + 1  # the answer and the end-of-sequence token
    assert ex["labels"][-1] == tokenizer.eos_token_id
    assert ex["input_ids"][-n_answer:] == ex["labels"][-n_answer:]
    batch = AnswerOnlyCollator(tokenizer.pad_token_id)(
        [ex, encode_example(tokenizer, "short", "e1", chat_template=False)]
    )
    assert batch["input_ids"].shape == batch["labels"].shape
    assert (batch["attention_mask"][1] == 0).any()  # the shorter example is padded
    assert (batch["labels"][1][batch["attention_mask"][1] == 0] == IGNORE_INDEX).all()


def test_prompt_is_cut_from_the_left(tiny):
    _base, tokenizer, train, _dev = tiny
    prompt, answer = train[0]
    ex = encode_example(tokenizer, prompt, answer, chat_template=False, max_prompt_tokens=5)
    full = tokenizer(prompt)["input_ids"]
    assert ex["input_ids"][:5] == full[-5:]


def test_lora_loss_falls_and_adapter_reloads(tiny, tmp_path: Path):
    from transformers import AutoModelForCausalLM

    base_dir, tokenizer, train, dev = tiny
    settings = lora_settings(epochs=8, eval_steps=12, logging_steps=6)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    result = train_lora(
        model, tokenizer, train, dev, settings, tmp_path / "adapter", base_model=str(base_dir)
    )
    stats = result.stats
    assert stats["steps"] == 48
    assert stats["last_loss"] < 0.5 * stats["first_loss"], stats["loss_curve"]
    assert stats["dev_loss_best"] < stats["dev_loss_before"]
    assert stats["best_checkpoint"].startswith("checkpoint-")
    assert stats["trainable_parameters"] < 0.2 * stats["total_parameters"]
    adapter = result.adapter_dir
    assert (adapter / "adapter_config.json").is_file()
    assert (adapter / "adapter_model.safetensors").is_file()
    saved = json.loads((adapter / "train_stats.json").read_text())
    assert saved["train_samples"] == 48 and saved["dev_samples"] == 8
    assert not list(tmp_path.glob(".adapter.train-*")), "checkpoints must be cleaned up"

    # The trained model (best checkpoint, in memory), base + reloaded adapter, and base with
    # the adapter merged all give the same logits; the untrained base does not.
    ex = encode_example(tokenizer, *dev[0], chat_template=False)
    ids = torch.tensor([ex["input_ids"]])
    trained = result.model.eval()
    reloaded = load_adapter_model(AutoModelForCausalLM.from_pretrained(base_dir), adapter).eval()
    merged = load_adapter_model(AutoModelForCausalLM.from_pretrained(base_dir), adapter, True)
    fresh = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    with torch.no_grad():
        logits = trained(ids).logits
        torch.testing.assert_close(reloaded(ids).logits, logits, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(merged.eval()(ids).logits, logits, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(fresh(ids).logits, logits, atol=1e-3)
        # the answer format is learned: after "Answer:" comes an entity
        prompt_len = len(ex["input_ids"]) - 2  # the answer token and end-of-sequence
        next_id = int(reloaded(ids[:, :prompt_len]).logits[0, -1].argmax())
    assert tokenizer.decode([next_id]).strip() in ENTITIES


def test_fit_adapter_trains_on_the_samples_rendered_as_the_grid_renders_them(tiny, tmp_path):
    """`fit_adapter` (train_generator's sequence, and generalisation's): the `rule` prompt of
    each sample in the `paper` style, its first answer as the style's target (`e3.`), the
    first `n_dev` samples as the dev slice. It trains exactly as `train_lora` on those pairs
    does: the same loss curves, the same adapter weights."""
    from rulerag.generation.adapters import fit_adapter
    from rulerag.generation.models import load_causal_lm, load_tokenizer
    from rulerag.generation.prompts import PromptFormat, Sample
    from rulerag.generation.settings import generation_settings

    base_dir, *_ = tiny
    samples = []
    for i in range(20):
        subject = ENTITIES[i % len(ENTITIES)]
        samples.append(
            Sample(
                qid=f"q{i}",
                query=f"whom does {subject} meet ?",
                answers=(ANSWER[subject], "e0"),
                documents=(f"{subject} visits {ANSWER[subject]} .",),
                rules=("[Entity1, visits, Entity2] leads to [Entity1, meets, Entity2]",),
                temporal=False,
            )
        )
    generation = generation_settings(
        {
            "model": str(base_dir),
            "chat_template": False,
            "seed": 3,
            "train": {"epochs": 1, "learning_rate": 1e-2, "batch_size": 4, "warmup": 0,
                      "eval_steps": 2, "logging_steps": 1},
        }
    )  # fmt: skip
    result = fit_adapter(
        samples, n_dev=4, prompt="rule", generation=generation, output_dir=tmp_path / "fit"
    )
    paper = PromptFormat("paper", temporal=False)
    pairs = [(paper.render_sample("rule", s), paper.target(s.answers[0])) for s in samples]
    assert pairs[0][1] == f"{ANSWER['e0']}." and "# Rules:" in pairs[0][0]
    direct = train_lora(
        load_causal_lm(str(base_dir)),
        load_tokenizer(str(base_dir), padding_side="right"),
        pairs[4:],
        pairs[:4],
        generation.trainer_settings(),
        tmp_path / "direct",
        base_model=str(base_dir),
    )
    stats = result.stats
    assert (stats["train_samples"], stats["dev_samples"], stats["steps"]) == (16, 4, 4)
    assert stats["loss_curve"] == direct.stats["loss_curve"]
    assert stats["dev_curve"] == direct.stats["dev_curve"] and stats["dev_curve"]
    saved = json.loads((tmp_path / "fit" / "train_stats.json").read_text())
    assert saved["base_model"] == str(base_dir) and saved["prompt_style"] == "paper"
    fitted = {k: v for k, v in result.model.state_dict().items() if "lora_" in k}
    again = {k: v for k, v in direct.model.state_dict().items() if "lora_" in k}
    assert fitted.keys() == again.keys() and fitted
    for key, value in fitted.items():
        torch.testing.assert_close(again[key], value)


#: trains in a child process: DeepSpeed sets up torch.distributed and the rendezvous variables
DEEPSPEED_CHILD = """
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from rulerag.generation.models import load_causal_lm
from rulerag.generation.training import DEFAULT_DEEPSPEED_CONFIG, train_lora
from rulerag.generation.settings import TrainSettings

base, data, out, quantization = sys.argv[1:5]
quantization = None if quantization == "none" else quantization
pairs = json.loads(Path(data).read_text())
settings = TrainSettings(
    deepspeed=str(DEFAULT_DEEPSPEED_CONFIG), quantization=quantization, epochs=3,
    learning_rate=1e-2, batch_size=8, warmup=0, eval_steps=6, logging_steps=3,
    chat_template=False, seed=3,
)
train_lora(
    load_causal_lm(base, quantization=quantization), AutoTokenizer.from_pretrained(base),
    [tuple(p) for p in pairs["train"]], [tuple(p) for p in pairs["dev"]], settings, Path(out),
)
"""


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["none", "nf4"])
def test_deepspeed_zero2_trains_and_the_adapter_reloads(tiny, tmp_path: Path, quantization):
    """The paper profile's DeepSpeed ZeRO-2 path (with and without the 4-bit base), run on the
    CPU accelerator as one process without a launcher, as a DVC stage runs it. The first run
    builds DeepSpeed's CPU communication op (about 90 s), later runs reuse it."""
    pytest.importorskip("deepspeed")
    if quantization == "nf4":
        pytest.importorskip("bitsandbytes")
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM

    base_dir, tokenizer, train, dev = tiny
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps({"train": train, "dev": dev}))
    out = tmp_path / "ds-adapter"
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    done = subprocess.run(
        [sys.executable, "-c", DEEPSPEED_CHILD, str(base_dir), str(data), str(out), quantization],
        capture_output=True,
        text=True,
        env={**env, "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["settings"]["deepspeed"] and stats["steps"] == 18
    assert stats["last_loss"] < 0.7 * stats["first_loss"], stats["loss_curve"]
    assert stats["settings"]["quantization"] == (None if quantization == "none" else "nf4")
    if quantization == "nf4":
        return  # reloading a 4-bit base: test_qlora_nf4_base_trains_and_reloads
    reloaded = load_adapter_model(AutoModelForCausalLM.from_pretrained(base_dir), out).eval()
    batch = AnswerOnlyCollator(tokenizer.pad_token_id)(
        [encode_example(tokenizer, p, a, chat_template=False) for p, a in dev]
    )
    with torch.no_grad():
        dev_loss = float(reloaded(**batch).loss)
    assert dev_loss == pytest.approx(stats["dev_loss_best"], rel=0.05)


def test_deepspeed_config_runs_on_this_machine(tmp_path: Path):
    from rulerag.generation.training import DEFAULT_DEEPSPEED_CONFIG, deepspeed_config

    config = deepspeed_config(DEFAULT_DEEPSPEED_CONFIG)
    assert config["zero_optimization"]["stage"] == 2
    assert config["optimizer"]["params"].get("torch_adam") is (
        not torch.cuda.is_available() or None
    )
    broken = tmp_path / "zero.json"
    broken.write_text("{stage: 2")
    with pytest.raises(ValueError, match="zero.json"):
        deepspeed_config(broken)


def test_deepspeed_config_without_warmup_leaves_the_schedule_to_the_trainer():
    """DeepSpeed 0.19's WarmupDecayLR refuses 0 warmup steps (seen on an H100, gpu_check)."""
    from rulerag.generation.training import DEFAULT_DEEPSPEED_CONFIG, deepspeed_config

    assert deepspeed_config(DEFAULT_DEEPSPEED_CONFIG, warmup=0.1)["scheduler"]["type"] == (
        "WarmupDecayLR"
    )
    assert "scheduler" not in deepspeed_config(DEFAULT_DEEPSPEED_CONFIG, warmup=0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("9.0a", "9.0"),  # the H100 image's value, on which DeepSpeed's builder stopped
        ("8.0 9.0a", "8.0;9.0"),
        ("9.0;9.0a+PTX", "9.0;9.0+PTX"),
        ("7.5+PTX;8.0", "7.5+PTX;8.0"),  # already readable: left as it is
        ("8.6", "8.6"),
    ],
)
def test_deepspeed_arch_list_drops_arch_suffixes(given: str, expected: str):
    from rulerag.generation.training import deepspeed_arch_list

    env = {"TORCH_CUDA_ARCH_LIST": given}
    assert deepspeed_arch_list(env) == expected == env["TORCH_CUDA_ARCH_LIST"]
    assert deepspeed_arch_list({}) is None


def test_settings_reject_unknown_keys():
    with pytest.raises(ValueError, match="unknown"):
        TrainSettings.from_dict({"epochs": 1, "learnin_rate": 1e-4})
    s = TrainSettings.from_dict({"lora": {"r": 16, "alpha": 32}, "epochs": 2})
    assert s.lora.r == 16 and s.lora.target_modules == ["q_proj", "v_proj"] and s.epochs == 2


def test_lora_on_the_last_layers_only(tiny):
    from transformers import AutoModelForCausalLM

    from rulerag.generation.training import _peft_model

    base_dir, *_ = tiny
    settings = TrainSettings(lora=LoraSettings(layers=1))
    model = _peft_model(AutoModelForCausalLM.from_pretrained(base_dir), settings)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n and "lora_" in n for n in names)
    assert LoraSettings(layers=[0, 3]).layer_indices(30) == [0, 3]
    assert LoraSettings(layers=8).layer_indices(30) == list(range(22, 30))
    assert LoraSettings().layer_indices(30) is None
    with pytest.raises(ValueError):
        LoraSettings(layers=31).layer_indices(30)


def test_qlora_nf4_base_trains_and_reloads(tiny, tmp_path: Path):
    """QLoRA: a 4-bit NF4 base (bitsandbytes, which runs on the CPU too) with LoRA on top."""
    pytest.importorskip("bitsandbytes")
    from rulerag.generation.models import load_causal_lm

    base_dir, tokenizer, train, dev = tiny
    try:
        model = load_causal_lm(str(base_dir), quantization="nf4")
    except Exception as err:  # a bitsandbytes build without a CPU back end
        pytest.skip(f"4-bit loading unavailable here: {err}")
    assert type(model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    settings = lora_settings(quantization="nf4", epochs=3, eval_steps=6, logging_steps=3)
    result = train_lora(model, tokenizer, train, dev, settings, tmp_path / "qlora")
    stats = result.stats
    assert stats["last_loss"] < 0.7 * stats["first_loss"], stats["loss_curve"]
    assert stats["dev_loss_best"] < stats["dev_loss_before"]
    ids = torch.tensor([encode_example(tokenizer, *dev[0], chat_template=False)["input_ids"]])
    from peft import prepare_model_for_kbit_training

    # the same numerics as in training: norms and head upcast to float32 by peft's preparation
    base4 = prepare_model_for_kbit_training(load_causal_lm(str(base_dir), quantization="nf4"))
    reloaded = load_adapter_model(base4, result.adapter_dir).eval()
    trained = {k: v for k, v in result.model.state_dict().items() if "lora_" in k}
    again = {k: v for k, v in reloaded.state_dict().items() if "lora_" in k}
    assert trained.keys() == again.keys() and trained
    for key, value in trained.items():
        torch.testing.assert_close(again[key].float(), value.float())
    # On the CPU, bitsandbytes re-quantises the in-memory base during training (its 4-bit
    # block statistics change slightly), so the trained model and a fresh 4-bit base with the
    # reloaded adapter agree to quantisation precision, not bit for bit: the same next tokens,
    # and the reloaded model reproduces the best checkpoint's dev loss.
    with torch.no_grad():
        a = reloaded(ids).logits.float()
        b = result.model.eval()(ids).logits.float()
        assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.95
        batch = AnswerOnlyCollator(tokenizer.pad_token_id)(
            [encode_example(tokenizer, p, ans, chat_template=False) for p, ans in dev]
        )
        dev_loss = float(reloaded(**batch).loss)
    assert dev_loss == pytest.approx(stats["dev_loss_best"], rel=0.05)


#: one process of a two-process torchrun launch (CPU, gloo): the stage's training path
DDP_CHILD = """
import json, os, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from rulerag.generation.launch import is_main_process
from rulerag.generation.settings import TrainSettings
from rulerag.generation.training import train_lora

base, data, out = sys.argv[1:4]
pairs = json.loads(Path(data).read_text())
settings = TrainSettings(epochs=2, learning_rate=1e-2, batch_size=4, warmup=0, eval_steps=3,
                         logging_steps=1, chat_template=False, seed=3)
result = train_lora(AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base),
                    [tuple(p) for p in pairs["train"]], [tuple(p) for p in pairs["dev"]],
                    settings, Path(out))
print("RANK", os.environ["RANK"], "main", is_main_process(), "stats", bool(result.stats))
"""


@pytest.mark.slow
def test_two_processes_train_data_parallel_and_rank0_saves(tiny, tmp_path: Path):
    """What `train_generator` does on a two-GPU worker (launch.relaunch_on_gpus), on the CPU:
    torchrun starts two processes, each trains on half of every batch (DDP over gloo), and
    only rank 0 writes the adapter; the shared checkpoint folder is gone afterwards."""
    import subprocess

    from rulerag.generation.launch import launch_command

    base_dir, tokenizer, train, dev = tiny
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps({"train": train[:16], "dev": dev[:4]}))
    script = tmp_path / "child.py"
    script.write_text(DDP_CHILD)
    out = tmp_path / "ddp-adapter"
    cmd = launch_command("child", [str(base_dir), str(data), str(out)], 2)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    project = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{tmp_path}:{project}"},
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "RANK 0 main True stats True" in done.stdout
    assert "RANK 1 main False stats False" in done.stdout
    stats = json.loads((out / "train_stats.json").read_text())
    # 16 samples, batch 4 per process, 2 processes: 2 steps an epoch
    assert stats["steps"] == 4 and stats["train_samples"] == 16
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ddp-adapter.train-")]


KILLED_AFTER_FIRST_CHECKPOINT = """
import os, signal, sys, pickle
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from rulerag.generation.training import train_lora

base_dir, out, settings_file = sys.argv[1:4]
train, dev, settings = pickle.load(open(settings_file, "rb"))
save = transformers.Trainer._save_checkpoint

def save_then_die(self, *args, **kwargs):  # the machine is gone right after a checkpoint
    save(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

transformers.Trainer._save_checkpoint = save_then_die
model = AutoModelForCausalLM.from_pretrained(base_dir)
train_lora(model, AutoTokenizer.from_pretrained(base_dir), train, dev, settings, out,
           base_model=base_dir)
"""


def test_a_killed_training_resumes_from_its_last_checkpoint(tiny, tmp_path: Path):
    """Issue 45, case 15: after SIGKILL the rerun trained from step 0 in a new work folder and
    the killed run's `.<adapter>.train-*` stayed for good. Now the rerun of the same training
    finds the killed one's checkpoints and resumes; a stale folder of another training whose
    process is gone is removed; nothing is left at the end."""
    import pickle
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM

    base_dir, tokenizer, train, dev = tiny
    settings = TrainSettings(
        lora=LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]),
        epochs=2, learning_rate=1e-2, batch_size=8, warmup=0, eval_steps=4,
        logging_steps=1, chat_template=False, seed=3,
    )  # fmt: skip
    out = tmp_path / "adapter"
    stale = tmp_path / ".adapter.train-0123456789abcdef"  # another training, its process gone
    stale.mkdir()
    (stale / "owner.json").write_text('{"pid": 999999999, "started": 0}')
    inputs = tmp_path / "inputs.pickle"
    inputs.write_bytes(pickle.dumps((train, dev, settings)))
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_FIRST_CHECKPOINT, str(base_dir), str(out),
         str(inputs)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    (work,) = [p for p in tmp_path.glob(".adapter.train-*") if p != stale]
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == ["checkpoint-4"]

    result = train_lora(
        AutoModelForCausalLM.from_pretrained(base_dir), tokenizer, train, dev, settings, out,
        base_model=str(base_dir),
    )  # fmt: skip
    stats = result.stats
    assert stats["steps"] == 12  # 48 samples / 8, two epochs
    assert stats["loss_curve"][0]["step"] == 5  # resumed after checkpoint-4, not from step 1
    assert (out / "adapter_model.safetensors").is_file()
    assert not list(tmp_path.glob(".adapter.train-*"))  # the killed run's and the stale one
