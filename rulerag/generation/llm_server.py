"""`make serve-llm`: an OpenAI-compatible LLM server on this machine (llama.cpp, through
llama-cpp-python's server), for `generator: api` rows, SIAR / R³ (`rule_retrieval.llm.kind:
api`), the VE / CoK chains and qa_rag.

It serves a GGUF file: an offline model package's (`smollm2`: the same Q4_1 file the local
generator dequantises, `models.ALIASES`), any `.gguf` path, or a file of a Hugging Face repo
(`--hf-repo`, for machines with a hub) as `/v1/chat/completions` and `/v1/completions`, with
the chat template stored in the GGUF (the one the local generator's tokenizer applies). What a
user runs in front of vLLM, llama.cpp's own `llama-server` or a hosted model is the same API,
so the pipeline does not change; docs/operations.md says how to point it elsewhere.

Why a module and not the server's own command line: every value is checked here first (the
model a file or a known alias, the host an IP address, numbers in range) and the server is
exec'd with an argument list; `llama_cpp.server` also reads its settings from environment
variables of the same names (`PORT`, `HOST`, `MODEL`, `N_CTX`, `API_KEY`...), so they are
removed from its environment, except `API_KEY` when `--require-key` asks for one (taken from
`RULERAG_API_KEY`, the variable the pipeline sends; never on the command line, where `ps`
shows it).

Concurrency, honestly: llama-cpp-python's server holds one model and serves one request at a
time (one lock around the model; further requests wait in line), so it has no "parallel
slots" and `--parallel` accepts only 1. Concurrent clients are all answered, one after the
other. For parallel decoding run llama.cpp's `llama-server --parallel N` or vLLM instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from rulerag.generation.models import ALIASES, find_package_file

__all__ = ["SERVER_MODULES", "main", "resolve_gguf", "server_command", "server_environment"]

#: what the server extra installs (`make setup-llm`): llama_cpp and its server's web stack
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
#: the environment variables llama_cpp.server reads as settings (pydantic-settings, any case)
_SETTINGS_ENV = {
    "host", "port", "model", "model_alias", "n_ctx", "n_threads", "n_threads_batch", "api_key",
    "chat_format", "verbose", "config_file", "n_gpu_layers", "seed", "n_batch", "n_ubatch",
    "hf_model_repo_id", "interrupt_requests", "logits_all", "cache", "root_path",
}  # fmt: skip
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_NAME = re.compile(r"^[\w.:/-]{1,128}$")
_CHAT_FORMAT = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
KEY_ENV = "RULERAG_API_KEY"


def resolve_gguf(model: str) -> Path:
    """The GGUF file `model` names: an offline model's alias or a `.gguf` path."""
    key = model.strip()
    if key.lower() in ALIASES:
        offline = ALIASES[key.lower()]
        return find_package_file(offline.package, offline.filename)
    path = Path(key).expanduser()
    if path.suffix.lower() != ".gguf":
        raise ValueError(
            f"--model {model!r}: llama.cpp serves GGUF files: give an alias "
            f"({', '.join(sorted(ALIASES))}), a .gguf path, or --hf-repo with a file name "
            "(any other model: vLLM, docs/operations.md)"
        )
    if not path.is_file():
        raise ValueError(f"--model {model!r}: no such file")
    return path.resolve()


def _check(args: argparse.Namespace) -> None:
    """Refuse a value the server would misread, before anything starts."""
    try:
        ipaddress.ip_address(args.host)
    except ValueError:
        raise ValueError(f"--host {args.host!r} is not an IP address (e.g. 127.0.0.1)") from None
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is not a TCP port (1-65535)")
    cores = os.cpu_count() or 1
    if not 1 <= args.threads <= 4 * cores:
        raise ValueError(f"--threads {args.threads}: give 1 to {4 * cores} (this machine: {cores})")
    if args.parallel != 1:
        raise ValueError(
            f"--parallel {args.parallel}: llama-cpp-python's server decodes one request at a "
            "time (concurrent requests wait in line), it has no parallel slots; for parallel "
            "decoding run llama.cpp's llama-server --parallel N or vLLM (docs/operations.md)"
        )
    if not 256 <= args.ctx <= 1 << 20:
        raise ValueError(f"--ctx {args.ctx}: give a context length of 256 to {1 << 20} tokens")
    if args.alias is not None and not _NAME.match(args.alias):
        raise ValueError(f"--alias {args.alias!r}: letters, digits and ._:/- only")
    if args.hf_repo is not None and not _HF_REPO.match(args.hf_repo):
        raise ValueError(f"--hf-repo {args.hf_repo!r} is not a Hugging Face repo id (owner/name)")
    if args.chat_format is not None and not _CHAT_FORMAT.match(args.chat_format):
        raise ValueError(f"--chat-format {args.chat_format!r} is not a chat format name")


def server_command(args: argparse.Namespace) -> list[str]:
    """The server's argument list (checked values only)."""
    _check(args)
    if args.hf_repo:
        if not _NAME.match(args.model) or args.model.startswith(("/", ".")):
            raise ValueError(f"--model {args.model!r}: with --hf-repo, a file name in the repo")
        model, alias = args.model, args.alias or args.hf_repo
        source = ["--hf_model_repo_id", args.hf_repo]
    else:
        model = str(resolve_gguf(args.model))
        alias = args.alias or (args.model.lower() if args.model.lower() in ALIASES else None)
        alias = alias or Path(model).stem
        source = []
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", model, *source,
        "--model_alias", alias,
        "--host", args.host,
        "--port", str(args.port),
        "--n_threads", str(args.threads),
        "--n_threads_batch", str(args.threads),
        "--n_ctx", str(args.ctx),
        # logits of the last token only: every prompt token's would cost time and memory, and
        # only /v1/completions' `logprobs` with `echo` needs them
        "--logits_all", "false",
        "--verbose", "false",
    ]  # fmt: skip
    if args.chat_format:
        command += ["--chat_format", args.chat_format]
    return command


def server_environment(require_key: bool, environ: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the variables the server would read as settings; with
    `require_key`, `API_KEY` set from `RULERAG_API_KEY` (the server then refuses other keys)."""
    environ = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in environ.items() if k.lower() not in _SETTINGS_ENV}
    if require_key:
        key = environ.get(KEY_ENV, "").strip()
        if not key:
            raise ValueError(f"--require-key: set {KEY_ENV} (the key clients must send)")
        env["API_KEY"] = key
    return env


def _check_installed() -> None:
    missing = [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(
            f"the LLM server is not installed ({', '.join(missing)} missing): run "
            "`make setup-llm` (llama-cpp-python builds from source once, docs/operations.md)"
        )


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="python -m rulerag.generation.llm_server", description=__doc__.split("\n\n")[0]
    )
    cli.add_argument("--model", default="smollm2", help="alias, .gguf path, or file in --hf-repo")
    cli.add_argument("--hf-repo", help="a Hugging Face repo id to fetch --model from (a hub)")
    cli.add_argument("--alias", help="the model name clients send (default: the alias or stem)")
    cli.add_argument("--host", default="127.0.0.1", help="the address to bind (an IP address)")
    cli.add_argument("--port", type=int, default=8000)
    cli.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="decoding threads")
    cli.add_argument("--parallel", type=int, default=1, help="only 1: see the module docstring")
    cli.add_argument("--ctx", type=int, default=2048, help="context length in tokens")
    cli.add_argument("--chat-format", help="a llama_cpp chat format (default: the GGUF's own)")
    cli.add_argument("--require-key", action="store_true", help=f"clients must send ${KEY_ENV}")
    cli.add_argument("--print-command", action="store_true", help="print the command, start none")
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        command = server_command(args)
        env = server_environment(args.require_key)
        if args.print_command:
            print(shlex.join(command))
            return 0
        _check_installed()
    except (ValueError, FileNotFoundError) as err:
        print(f"serve-llm: {err}", file=sys.stderr)
        return 2
    if not ipaddress.ip_address(args.host).is_loopback and not args.require_key:
        print(
            f"serve-llm: warning: {args.host} is reachable from other machines and the server "
            "asks no key (--require-key)",
            file=sys.stderr,
        )
    url = f"http://{args.host}:{args.port}/v1"
    print(f"serve-llm: {command[command.index('--model_alias') + 1]} at {url}", file=sys.stderr)
    sys.stderr.flush()
    os.execve(command[0], command, env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main())
