"""Keep secrets out of everything rulerag prints, logs or stores.

Credentials travel in two ways here: inside URLs (`http://user:password@host:5000` as an MLflow
tracking URI, `https://user:key@host/v1` as an API base URL) and as API keys. Libraries repeat
both in their error messages (an MLflow or requests error names the URL it called; an API
server may echo part of a wrong key: `Incorrect API key provided: sk-abc1*****wxyz`), so
redaction applies to any text on its way to a message, a log record, a spool file, an MLflow
param or tag, not only to the values we know are URLs.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

__all__ = ["MASK", "base64_forms", "redact_secrets", "redact_url"]

MASK = "***"
#: `scheme://userinfo@` anywhere in a text: the userinfo (user, password or token) goes. It
#: ends at the LAST `@` before the host, as URL parsers read it: a password holding an `@`
#: (`user:hunter@TAIL@host`) is masked whole, not cut at its first `@`
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s?#]+)@")
#: a run of characters that may be a key or a piece of one (keys are base64/hex-like)
_TOKEN = re.compile(r"[A-Za-z0-9_\-.*+/=~]{4,}")
#: the shortest run shared with a secret that counts as a partial echo of it
ECHO_MIN = 4


def redact_url(url: str) -> str:
    """`url` without the user and password it may carry (`scheme://***@host...`)."""
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", url)


def base64_forms(secret: str) -> set[str]:
    """What `secret` looks like inside base64 text (a Basic auth header, a token echoed
    encoded): its encoding at each of the three byte alignments, in the standard and the
    URL-safe alphabet, without the characters at either end that depend on its neighbours."""
    raw = secret.encode()
    forms = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        start = (4 * shift + 2) // 3 + (1 if shift else 0)  # skip the chars the pad touches
        core = encoded[start : len(encoded) - 2]  # the last chars depend on what follows
        if len(core) >= 2 * ECHO_MIN:
            forms |= {core, core.replace("+", "-").replace("/", "_")}
    return forms


def redact_secrets(
    text: object, secrets: Iterable[str | None] = (), min_run: int = ECHO_MIN
) -> str:
    """`text` with credentials in URLs masked, and every token that shares a run of `min_run`+
    characters with one of `secrets` (the whole secret, or the head or tail an error body
    echoes) or holds a secret's base64 form replaced by `***`. Model output takes a longer
    `min_run` (an answer may share four letters with a key by chance)."""
    out = redact_url(str(text))
    keys = [s for s in secrets if s and len(s) >= ECHO_MIN]
    if not keys:
        return out
    for key in keys:
        out = out.replace(key, MASK)
        for form in base64_forms(key):
            out = re.sub(rf"[A-Za-z0-9+/_\-]*{re.escape(form)}[A-Za-z0-9+/_\-]*=*", MASK, out)
    grams = {key[i : i + min_run] for key in keys for i in range(len(key) - min_run + 1)}

    def mask(match: re.Match[str]) -> str:
        token = match.group(0)
        parts = (token[i : i + min_run] for i in range(len(token) - min_run + 1))
        return MASK if any(part in grams for part in parts) else token

    return _TOKEN.sub(mask, out)
