"""Keep secrets out of everything rulerag prints, logs or stores.

Credentials travel in two ways here: inside URLs (`http://user:password@host:5000` as an MLflow
tracking URI, `https://user:key@host/v1` as an API base URL) and as API keys. Libraries repeat
both in their error messages (an MLflow or requests error names the URL it called; an API
server may echo part of a wrong key: `Incorrect API key provided: sk-abc1*****wxyz`), so
redaction applies to any text on its way to a message, a log record, a spool file, an MLflow
param or tag, not only to the values we know are URLs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MASK", "redact_secrets", "redact_url"]

MASK = "***"
#: `scheme://userinfo@` anywhere in a text: the userinfo (user, password or token) goes
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
#: a run of characters that may be a key or a piece of one (keys are base64/hex-like)
_TOKEN = re.compile(r"[A-Za-z0-9_\-.*+/=~]{4,}")
#: the shortest run shared with a secret that counts as a partial echo of it
ECHO_MIN = 4


def redact_url(url: str) -> str:
    """`url` without the user and password it may carry (`scheme://***@host...`)."""
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", url)


def redact_secrets(text: object, secrets: Iterable[str | None] = ()) -> str:
    """`text` with credentials in URLs masked, and every token that shares a run of
    `ECHO_MIN`+ characters with one of `secrets` (the whole secret, or the head or tail an
    error body echoes) replaced by `***`."""
    out = redact_url(str(text))
    keys = [s for s in secrets if s and len(s) >= ECHO_MIN]
    if not keys:
        return out
    for key in keys:
        out = out.replace(key, MASK)
    grams = {key[i : i + ECHO_MIN] for key in keys for i in range(len(key) - ECHO_MIN + 1)}

    def mask(match: re.Match[str]) -> str:
        token = match.group(0)
        parts = (token[i : i + ECHO_MIN] for i in range(len(token) - ECHO_MIN + 1))
        return MASK if any(part in grams for part in parts) else token

    return _TOKEN.sub(mask, out)
