"""`make serve` / `python -m rulerag.serving`: load the registered RuleRAG model and serve it on
a page and a JSON API (`rulerag.serving.app`) until Ctrl-C.

Every value is checked before anything starts, since loading the model takes a while and
should not end in a typo: params.yaml's `serve` section strictly, `--host` / `--port` as that
section checks them, the model URI's form (`models:/<name>@<alias>`, `models:/<name>/<version>`
or a folder that exists), and whether the port is free. Then the model loads
(`rulerag.serving.loading.load_served`) and uvicorn serves the app in this one process, with
one worker: the model is loaded once and answers one question at a time (`gate.Gate`).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import re
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from rulerag.errors import InputError
from rulerag.params import load_params
from rulerag.serving.protocol import ServedModel
from rulerag.serving.settings import ServeSettings, serve_settings
from rulerag.settings import NAME_RE, SettingsError, check_dataset_name
from rulerag.tracking.models import CHAMPION_ALIAS
from rulerag.tracking.registry import served_name

__all__ = ["check_model_uri", "default_model_uri", "main", "parser", "url"]

#: a registered model's name: parts by the project's name rule joined by '-', as
#: `rulerag.tracking.registry.registered_name` writes them (`rulerag-icews14`)
_PART = NAME_RE.pattern.strip("^$")
MODEL_NAME_RE = re.compile(rf"^{_PART}(-{_PART}){{0,7}}$")
#: a registered model's version: a number (`loading.load_served` takes no other)
VERSION_RE = re.compile(r"^[1-9][0-9]{0,8}$")
#: `models:/<name>@<alias>` or `models:/<name>/<version>`
_MODELS_URI = re.compile(r"^models:/(?P<name>[^/@]*)(@(?P<alias>[^/@]*)|/(?P<version>[^/@]*))$")
FORMS = "models:/<name>@<alias>, models:/<name>/<version> or a model folder"


def default_model_uri(dataset: str) -> str:
    """The champion of a dataset's registered RuleRAG model (`package_model` registers it)."""
    return f"models:/{served_name(check_dataset_name(dataset))}@{CHAMPION_ALIAS}"


def check_model_uri(uri: str, base: Path) -> str:
    """`uri` when it is one of `FORMS` (a folder: relative to `base`, made absolute), else
    InputError saying which part is wrong."""
    if uri.startswith("models:"):
        match = _MODELS_URI.fullmatch(uri)
        if match is None:
            raise InputError(f"--model {uri[:120]!r}: give {FORMS}")
        name = match["name"]
        if not MODEL_NAME_RE.fullmatch(name):
            raise InputError(
                f"--model {uri[:120]!r}: the model name {name[:80]!r} is not a registered "
                "name of this project (parts of a letter and letters, digits or '_', joined "
                "by '-': rulerag-icews14)"
            )
        if match["alias"] is not None:
            if not NAME_RE.fullmatch(match["alias"]):
                raise InputError(
                    f"--model {uri[:120]!r}: the alias {match['alias'][:80]!r} is not an alias "
                    "name (a letter, then letters, digits or '_': champion)"
                )
        elif not VERSION_RE.fullmatch(match["version"]):
            raise InputError(
                f"--model {uri[:120]!r}: the version {match['version'][:40]!r} is not a "
                "version number"
            )
        return uri
    if "://" in uri or uri.startswith(("runs:", "file:")):
        raise InputError(f"--model {uri[:120]!r}: give {FORMS}")
    folder = (base / uri).resolve()
    if not folder.is_dir():
        raise InputError(f"--model {uri[:120]!r}: no such folder (give {FORMS})")
    return str(folder)


def _with_overrides(settings: ServeSettings, host: str | None, port: int | None) -> ServeSettings:
    """`settings` with the command line's host and port, each checked as the section's own."""
    changes: dict[str, object] = {}
    for name, value in (("host", host), ("port", port)):
        if value is None:
            continue
        try:
            serve_settings({name: value})
        except SettingsError as err:  # "params.yaml: serve.port: <what is wrong> (got 80)"
            raise InputError(f"--{name}: {str(err).split(': ', 2)[-1]}") from None
        changes[name] = value
    return dataclasses.replace(settings, **changes)


def _check_port_free(host: str, port: int) -> None:
    """InputError when nothing can listen on host:port now (checked before the model loads,
    which takes a while; uvicorn binds it again after)."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
    except OSError as err:
        raise InputError(
            f"cannot listen on {host}:{port}: {err.strerror or err} (another --port, or "
            "PORT= with make serve)"
        ) from None


def url(host: str, port: int) -> str:
    """The service's address as a browser takes it (an IPv6 address in brackets)."""
    try:
        shown = f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        shown = host
    return f"http://{shown}:{port}/"


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="python -m rulerag.serving", description=__doc__.split("\n\n")[0]
    )
    cli.add_argument(
        "--model",
        help=f"{FORMS} (default: models:/rulerag-<dataset>@champion)",
    )
    cli.add_argument(
        "--dataset", help="the dataset of the default model (default: params.yaml's first)"
    )
    cli.add_argument("--params", default="params.yaml", help="the project's params.yaml")
    cli.add_argument("--host", help="the address to listen on (default: serve.host)")
    cli.add_argument("--port", type=int, help="the port (default: serve.port)")
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    project_dir = Path(args.params).resolve().parent
    try:
        params = load_params(args.params)
        settings = _with_overrides(params.serve, args.host, args.port)
        dataset = args.dataset if args.dataset is not None else params.datasets[0]
        uri = check_model_uri(args.model or default_model_uri(dataset), Path.cwd())
        _check_port_free(settings.host, settings.port)
    except (InputError, OSError) as err:
        print(f"serve: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    from rulerag.serving.loading import load_served  # torch, MLflow: only once all is checked

    print(f"serve: loading {uri}", file=sys.stderr, flush=True)
    try:
        model = load_served(uri, project_dir)
    except Exception as err:
        message = _load_failure(err)
        if message is None:
            raise
        print(f"serve: {uri}: {message}", file=sys.stderr)
        return 2
    return _serve(model, settings)


def _load_failure(err: Exception) -> str | None:
    """The one line a failed load is told in, when it is the user's to fix (a bad input, a
    model or version the registry does not have); None for a bug (its traceback)."""
    if isinstance(err, InputError):
        return str(err)
    module = sys.modules.get("mlflow.exceptions")
    if module is not None and isinstance(err, module.MlflowException):
        return " ".join(str(err.message).split())[:2000]
    return None


def _serve(model: ServedModel, settings: ServeSettings) -> int:
    import uvicorn

    from rulerag.serving.app import create_app

    app = create_app(model, settings)
    address = url(settings.host, settings.port)
    if not _is_loopback(settings.host):
        print(
            f"serve: warning: {settings.host} is reachable from other machines, and the "
            "service asks no key",
            file=sys.stderr,
        )
    print(
        f"serve: {model.title} at {address} (JSON: POST {address}invocations); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, workers=1, log_level="info")
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
