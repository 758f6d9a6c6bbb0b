"""params.yaml's `serve` section as typed settings (read strictly): what `package_model` packs
into the registered RuleRAG model (`rulerag.serving.packaging`) and how `make serve` serves
it (`rulerag.serving.app`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import Ge, Le
from pydantic import AfterValidator

from rulerag.settings import (
    FINITE,
    STRICT_INT,
    Count,
    Name,
    Positive,
    PositiveReal,
    load_settings,
)

__all__ = ["ChampionMetric", "ServeSettings", "serve_settings"]

#: the grid row's metric a new model version must beat to take the `champion` alias
ChampionMetric = Literal["em", "token_f1"]
#: a TCP port a person may pick (no privileged ones)
Port = Annotated[int, STRICT_INT, Ge(1024), Le(65535)]
#: rapidfuzz's similarity scale
Similarity = Annotated[float, *FINITE, Ge(0.0), Le(100.0)]
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


def _host(value: str) -> str:
    """An IP address or a host name, nothing a shell or URL could read more into."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not _HOSTNAME.fullmatch(value):
            raise ValueError(f"{value[:80]!r} is neither an IP address nor a host name") from None
    return value


#: where a server listens: an IP address or a host name
Host = Annotated[str, AfterValidator(_host)]


@dataclass(frozen=True)
class ServeSettings:
    """params.yaml `serve` (stage `package_model`, `make serve`)."""

    HELP: ClassVar[str] = (
        "Stage `package_model` and `make serve`: one grid row (by default RuleRAG-FT: the RGFT "
        "query encoder over the corpus index, the rule bank's selection, the RGFT adapter on the "
        "generator, and the mined rules applied for explained candidates) logged as one MLflow "
        "pyfunc model, registered as `rulerag-<dataset>`; `make serve` answers questions with it "
        "on a page and a JSON API (docs/operations.md, Serving)."
    )

    row: Name | None = field(
        default="rulerag_ft",
        metadata={
            "help": (
                "the generation.grid row packaged: a row of generation.configs with a local "
                "generator (base, rgft, ssft); null = package_model registers nothing (a grid "
                "without such a row, e.g. API rows only)"
            )
        },
    )
    champion_metric: ChampionMetric = field(
        default="em",
        metadata={
            "help": (
                "the row's grid figure a new version must beat (strictly) to take the "
                "`champion` alias: em or token_f1"
            )
        },
    )
    documents: Positive = field(
        default=10, metadata={"help": "documents shown per list (with rules, without rules)"}
    )
    candidates: Positive = field(
        default=10, metadata={"help": "the rules' ranked candidates shown, each explained"}
    )
    fuzzy_threshold: Similarity = field(
        default=85.0,
        metadata={
            "help": (
                "a typed name links to a KG name by rapidfuzz similarity at least this "
                "(0-100) when no name matches exactly"
            )
        },
    )
    host: Host = field(
        default="127.0.0.1",
        metadata={"help": "`make serve` listens here (loopback: only this machine); HOST="},
    )
    port: Port = field(default=8050, metadata={"help": "`make serve`'s port; PORT= on the line"})
    queue: Count = field(
        default=8,
        metadata={
            "help": (
                "requests that may wait while one is answered; more get 503 and Retry-After "
                "(one answers at a time: the model uses every core)"
            )
        },
    )
    timeout: PositiveReal = field(
        default=120.0,
        metadata={"help": "seconds a request may wait and run before it gets 504"},
    )
    max_request_bytes: Positive = field(
        default=16384, metadata={"help": "a larger request body gets 413"}
    )
    max_questions: Positive = field(
        default=128, metadata={"help": "questions one request may ask (the JSON API)"}
    )


def serve_settings(section: Mapping[str, Any] | None) -> ServeSettings:
    """params.yaml's `serve` section as typed settings, strictly."""
    return load_settings(ServeSettings, section, "serve")
