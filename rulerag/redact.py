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
#: (`user:hunter@TAIL@host`) is masked whole, not cut at its first `@`.
#: Every pattern here is linear in the text: one that may start anywhere inside a long run of
#: the characters it repeats (`\b[A-Za-z][A-Za-z0-9+.-]*://` on `a.a.a.a...`) scans the rest
#: of the run from each start, which made a 50 kB model answer take seconds and a 5 MB one
#: never end (issue 45). So a run is matched once, from its first character (the look-behind),
#: and where in it the scheme begins is decided afterwards (`_SCHEME_START`).
_SCHEME_CHARS = "A-Za-z0-9+.-"
_URL_USERINFO = re.compile(
    rf"(?<![{_SCHEME_CHARS}])(?P<run>[{_SCHEME_CHARS}]+)://(?P<userinfo>[^/\s?#]+)@"
)
#: where a scheme may begin inside a run of scheme characters: a letter at a word boundary
_SCHEME_START = re.compile(r"\b[A-Za-z]")
#: the characters of a base64 token (both alphabets); a token holding a secret's base64 form is
#: masked whole, with its padding
_B64_CHARS = r"A-Za-z0-9+/_\-"
#: a run of characters that may be a key or a piece of one (keys are base64/hex-like)
_TOKEN = re.compile(r"[A-Za-z0-9_\-.*+/=~]{4,}")
#: the shortest run shared with a secret that counts as a partial echo of it
ECHO_MIN = 4


def redact_url(url: str) -> str:
    """`url` without the user and password it may carry (`scheme://***@host...`)."""

    def mask(match: re.Match[str]) -> str:
        # a run with no letter at a word boundary holds no scheme (`1x://u:p@h`, `_x://...`)
        if _SCHEME_START.search(match.string, match.start(), match.end("run")) is None:
            return match.group(0)
        return f"{match['run']}://{MASK}@"

    return _URL_USERINFO.sub(mask, url)


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
            # the whole token around the form, from its first character only (linear: see
            # _URL_USERINFO), and its padding
            token = rf"(?<![{_B64_CHARS}])[{_B64_CHARS}]*{re.escape(form)}[{_B64_CHARS}]*=*"
            out = re.sub(token, MASK, out)
    grams = {key[i : i + min_run] for key in keys for i in range(len(key) - min_run + 1)}

    def mask(match: re.Match[str]) -> str:
        token = match.group(0)
        parts = (token[i : i + min_run] for i in range(len(token) - min_run + 1))
        return MASK if any(part in grams for part in parts) else token

    return _TOKEN.sub(mask, out)
