"""Download public KG files with pinned checksums: resumable, retried, atomic.

Why this module exists: the ingestion stage reads a local mirror of the public KGs when one is
set, and otherwise fetches the same files from their public sources. Public hosts drop
connections, rate-limit, and change files under a fixed URL, and a later stage must never
trust a half-written or different file. So every download

- streams to ``<final>.part`` in the same folder and resumes it with an HTTP ``Range`` request,
- is retried with exponential backoff on connection errors and 5xx/429 answers,
- is checked against its pinned sha256 (when one is given), and only then
- is renamed into place with ``os.replace`` (atomic on one file system).

A killed run therefore never leaves a file under its final name; a re-run picks up the
``.part`` where it stopped, and files that are already there and hash right are skipped.

Archives (``.zip``, ``.tar.gz``, ``.tgz``) are downloaded once per URL however many members
are needed, cached under ``dest/.archives/`` until every needed member is extracted and
verified, then removed. Members are looked up by name and written only to the file's own
``name`` inside ``dest``; names and members are refused when they are absolute or climb with
``..``, and archive entries that are links or directories are refused, so an archive cannot
write outside ``dest``.

Only ``requests`` and ``tqdm``; no global state beyond the module logger.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import logging
import os
import re
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO
from urllib.parse import urlsplit

import requests
from tqdm import tqdm

from rulerag.io import sha256_file

__all__ = ["DownloadError", "RemoteFile", "fetch"]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20
# Network reads are smaller: bytes of a read cut short by a dropped connection are lost, so a
# small read keeps nearly everything received for the resumed attempt.
_NET_CHUNK = 1 << 16
_PART_SUFFIX = ".part"
_ARCHIVE_DIR = ".archives"
_ARCHIVE_SUFFIXES = {".zip": "zip", ".tar.gz": "tar", ".tgz": "tar"}
_SHA256_RE = re.compile(r"[0-9a-fA-F]{64}")
_CONTENT_RANGE_RE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")
# Errors that reading a damaged archive can raise (a truncated or non-archive body, e.g. an
# HTML error page served with status 200).
_ARCHIVE_ERRORS = (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


class DownloadError(RuntimeError):
    """A file could not be fetched or failed its checksum; the message names file and URL."""


@dataclass(frozen=True)
class RemoteFile:
    """One file a dataset needs: where it lands, where it comes from, what it must hash to.

    ``name`` is a relative POSIX path inside the dataset folder (``TLogic_icews14/train.txt``).
    ``url`` is an http(s) URL; for a file inside an archive, the archive's URL, whose suffix
    (``.zip``, ``.tar.gz``, ``.tgz``) says how to read it. ``sha256`` is the expected hash of
    the final file (``None``: unknown, not verified; the computed hash is logged so it can be
    pinned). ``member`` is the path inside the archive at ``url``, if any.

    Invalid paths fail here, at construction, so a bad registry entry is caught before any
    network traffic.
    """

    name: str
    url: str
    sha256: str | None = None
    member: str | None = None

    def __post_init__(self) -> None:
        _relative_path(self.name, "name")
        if urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"{self.name}: url must be http(s), got {self.url!r}")
        if self.sha256 is not None and not _SHA256_RE.fullmatch(self.sha256):
            raise ValueError(f"{self.name}: sha256 must be 64 hex digits, got {self.sha256!r}")
        if self.member is not None:
            _relative_path(self.member, "member")
            _archive_kind(self.url)


@dataclass(frozen=True)
class _Options:
    """The knobs of one fetch() call, passed down instead of kept in module state."""

    timeout: float
    retries: int
    backoff: float
    progress: bool


class _TransientError(Exception):
    """A failure worth retrying: dropped connection, timeout, 5xx/429, truncated body."""


def fetch(
    files: Sequence[RemoteFile],
    dest: Path,
    *,
    timeout: float = 60,
    retries: int = 3,
    progress: bool = True,
    session: requests.Session | None = None,
    backoff: float = 1.0,
) -> list[Path]:
    """Make every file of ``files`` present and verified under ``dest``; return their paths.

    Idempotent: a file already under its final name is kept when its sha256 matches (or when
    no sha256 is pinned), so a second call makes no request. A present file whose hash is
    wrong is deleted and fetched again, since later stages would otherwise trust it.

    ``timeout`` is the per-request connect/read timeout in seconds. ``retries`` is how many
    times a transient failure is retried (so at most ``retries + 1`` attempts per download),
    waiting ``backoff * 2**attempt`` seconds in between; an interrupted download resumes from
    its ``.part``. ``progress`` shows tqdm bars (tqdm hides them when stderr is not a TTY).
    ``session`` lets the caller share connections, headers or proxies; by default a private
    session is opened and closed.

    Raises ``ValueError`` for an invalid request (duplicate names, a member asked twice from
    one archive) before any download, and ``DownloadError`` when a file cannot be fetched or
    fails its checksum; nothing is then left under that file's final name.
    """
    if retries < 0 or timeout <= 0 or backoff < 0:
        raise ValueError("need retries >= 0, timeout > 0 and backoff >= 0")
    dest = Path(dest)
    targets = _plan(files, dest)
    opts = _Options(timeout=timeout, retries=retries, backoff=backoff, progress=progress)

    http = session if session is not None else requests.Session()
    try:
        by_archive: dict[str, list[tuple[RemoteFile, Path]]] = {}
        for file, target in zip(files, targets, strict=True):
            if _is_present(file, target):
                continue
            if file.member is None:
                _fetch_plain(http, file, target, opts)
            else:
                by_archive.setdefault(file.url, []).append((file, target))
        for url, members in by_archive.items():
            _fetch_archive_members(http, url, members, dest / _ARCHIVE_DIR, opts)
    finally:
        if session is None:
            http.close()
    return targets


# --- planning -------------------------------------------------------------------------------


def _relative_path(path: str, what: str) -> PurePosixPath:
    """Parse a relative POSIX path, refusing any that could point outside its folder."""
    if not path or "\\" in path or "\x00" in path:
        raise ValueError(f"{what} {path!r} must be a non-empty POSIX path")
    parsed = PurePosixPath(path)
    if parsed.is_absolute() or ".." in parsed.parts or not parsed.parts:
        raise ValueError(f"{what} {path!r} must stay inside its folder (no '/' start, no '..')")
    return parsed


def _archive_kind(url: str) -> str:
    """Tell zip from tar.gz by the URL path's suffix (query strings ignored)."""
    path = urlsplit(url).path.lower()
    for suffix, kind in _ARCHIVE_SUFFIXES.items():
        if path.endswith(suffix):
            return kind
    raise ValueError(f"cannot tell the archive type of {url}: expected .zip, .tar.gz or .tgz")


def _plan(files: Sequence[RemoteFile], dest: Path) -> list[Path]:
    """Check the whole request up front, so a bad entry fails before anything is downloaded."""
    targets: list[Path] = []
    names: set[PurePosixPath] = set()
    members: set[tuple[str, PurePosixPath]] = set()
    for file in files:
        name = _relative_path(file.name, "name")
        if name.parts[0] == _ARCHIVE_DIR:
            raise ValueError(f"name {file.name!r} collides with the archive cache {_ARCHIVE_DIR}/")
        if name in names:
            raise ValueError(f"name {file.name!r} is requested twice")
        names.add(name)
        if file.member is not None:
            key = (file.url, _relative_path(file.member, "member"))
            if key in members:
                raise ValueError(f"member {file.member!r} of {file.url} is requested twice")
            members.add(key)
        targets.append(dest.joinpath(*name.parts))
    return targets


def _is_present(file: RemoteFile, target: Path) -> bool:
    """Whether ``target`` can be kept; deletes it when it is there but hashes wrong."""
    if not target.is_file():
        return False
    if file.sha256 is None:
        return True
    actual = sha256_file(target)
    if actual == file.sha256.lower():
        return True
    logger.warning(
        "%s exists but its sha256 is %s, not %s: fetching it again", target, actual, file.sha256
    )
    target.unlink()
    return False


# --- plain files ----------------------------------------------------------------------------


def _fetch_plain(http: requests.Session, file: RemoteFile, target: Path, opts: _Options) -> None:
    """Download one file to its ``.part`` (resuming), verify it, rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = _part_of(target)
    _download(http, file.url, part, opts, label=file.name)
    _verify_and_place(part, target, file, sha256_file(part))


def _download(http: requests.Session, url: str, part: Path, opts: _Options, *, label: str) -> None:
    """Bring ``part`` to the complete body of ``url``, retrying transient failures."""
    for attempt in range(opts.retries + 1):
        try:
            _download_once(http, url, part, opts, label=label)
            return
        except _TransientError as exc:
            if attempt == opts.retries:
                raise DownloadError(
                    f"could not download {label} from {url} after {attempt + 1} attempts: {exc}"
                ) from exc
            delay = opts.backoff * 2**attempt
            logger.warning("%s from %s: %s; retrying in %.1fs", label, url, exc, delay)
            time.sleep(delay)


def _download_once(
    http: requests.Session, url: str, part: Path, opts: _Options, *, label: str
) -> None:
    """One HTTP request: resume ``part`` on 206, restart it on 200, append the body.

    Asks for ``identity`` encoding so byte offsets in ``Range`` mean bytes of the file itself,
    not of a gzip transfer encoding. A ``.part`` the server cannot continue (416 for a longer
    file, a 206 for another range) is discarded and the download starts over at once.
    """
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        with http.get(url, headers=headers, stream=True, timeout=opts.timeout) as resp:
            status = resp.status_code
            if status == 429 or status >= 500:
                raise _TransientError(f"HTTP {status} {resp.reason}")
            start, total = _content_range(resp)
            if offset and status == 416 and total == offset:
                return  # the .part is already complete; its checksum decides
            if offset and (status == 416 or (status == 206 and start != offset)):
                logger.warning("%s: cannot resume at byte %d, starting over", label, offset)
                part.unlink()
                restart = True
            elif status in (200, 206):
                restart = False
                if status == 206 and not offset:
                    raise DownloadError(f"unrequested partial content for {label} from {url}")
                _receive(resp, part, opts, label=label, offset=offset if status == 206 else 0)
            else:
                raise DownloadError(f"HTTP {status} {resp.reason} for {label} from {url}")
    except (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
    ) as exc:
        raise _TransientError(f"{type(exc).__name__}: {exc}") from exc
    if restart:
        _download_once(http, url, part, opts, label=label)


def _receive(
    resp: requests.Response, part: Path, opts: _Options, *, label: str, offset: int
) -> None:
    """Append the body to ``part`` (truncated to ``offset`` bytes first); check its length."""
    length = resp.headers.get("Content-Length")
    expected = int(length) if length is not None and length.isdigit() else None
    written = 0
    with part.open("ab" if offset else "wb") as out:
        out.truncate(offset)
        total = offset + expected if expected is not None else None
        with _bar(opts, label, total, offset) as bar:
            for chunk in resp.iter_content(_NET_CHUNK):
                out.write(chunk)
                written += len(chunk)
                bar.update(len(chunk))
        out.flush()
        os.fsync(out.fileno())
    if expected is not None and written != expected:
        raise _TransientError(f"connection closed after {offset + written} of {total} bytes")


def _content_range(resp: requests.Response) -> tuple[int | None, int | None]:
    """Parse ``Content-Range: bytes start-end/total`` (or ``bytes */total``): (start, total)."""
    match = _CONTENT_RANGE_RE.fullmatch(resp.headers.get("Content-Range", "").strip())
    if match is None:
        return None, None
    start, _end, total = match.groups()
    return (int(start) if start else None), (int(total) if total and total != "*" else None)


# --- archives -------------------------------------------------------------------------------


def _fetch_archive_members(
    http: requests.Session,
    url: str,
    members: list[tuple[RemoteFile, Path]],
    cache_dir: Path,
    opts: _Options,
) -> None:
    """Download the archive at ``url`` once and extract every needed member from it.

    The archive is kept in ``cache_dir`` while extracting, so a run killed mid-extraction does
    not download it again; it is removed once all members are in place, and also when it
    turns out unreadable or holds a wrong member, so a re-run fetches a fresh copy instead of
    failing on the same bad one forever.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    archive = cache_dir / f"{digest}-{PurePosixPath(urlsplit(url).path).name or 'archive'}"
    if not archive.is_file():
        part = _part_of(archive)
        _download(http, url, part, opts, label=archive.name)
        os.replace(part, archive)
    try:
        _extract_members(archive, _archive_kind(url), url, members, opts)
    except DownloadError:
        archive.unlink(missing_ok=True)
        raise
    else:
        archive.unlink()
    finally:
        with contextlib.suppress(OSError):  # still holds other archives, or a killed one
            cache_dir.rmdir()


def _extract_members(
    archive: Path,
    kind: str,
    url: str,
    members: list[tuple[RemoteFile, Path]],
    opts: _Options,
) -> None:
    """Stream through the archive once, writing each wanted member to its own target."""
    wanted = {_relative_path(f.member or "", "member"): (f, t) for f, t in members}
    try:
        for entry, regular, open_entry in _archive_entries(archive, kind):
            found = wanted.pop(entry, None)
            if found is None:
                continue
            file, target = found
            if not regular:
                raise DownloadError(
                    f"member {file.member} of {url} is a link or directory, not a regular "
                    f"file; refusing to extract it as {file.name}"
                )
            with open_entry() as src:
                _write_member(src, file, target, opts)
            if not wanted:
                break
    except _ARCHIVE_ERRORS as exc:
        raise DownloadError(f"cannot read archive {url}: {type(exc).__name__}: {exc}") from exc
    if wanted:
        missing = ", ".join(f"{f.member} (for {f.name})" for f, _ in wanted.values())
        raise DownloadError(f"archive {url} has no member {missing}")


def _archive_entries(
    archive: Path, kind: str
) -> Iterator[tuple[PurePosixPath, bool, Callable[[], IO[bytes]]]]:
    """Yield (normalised entry path, is a regular file, opener) for each archive entry.

    Tar archives are read as a stream (``r|gz``): one pass, no seeking back through gzip,
    so the opener must be used before the next entry is requested.
    """
    if kind == "zip":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
                regular = not info.is_dir() and not is_link
                yield PurePosixPath(info.filename), regular, functools.partial(zf.open, info)
    else:
        with tarfile.open(archive, "r|gz") as tf:
            for info in tf:
                yield (
                    PurePosixPath(info.name),
                    info.isfile(),
                    functools.partial(_tar_open, tf, info),
                )


def _tar_open(tf: tarfile.TarFile, info: tarfile.TarInfo) -> IO[bytes]:
    """Open a regular tar member (``extractfile`` only returns None for non-files)."""
    handle = tf.extractfile(info)
    if handle is None:  # pragma: no cover - callers only open regular files
        raise DownloadError(f"tar member {info.name} has no data")
    return handle


def _write_member(src: IO[bytes], file: RemoteFile, target: Path, opts: _Options) -> None:
    """Copy one member to the target's ``.part`` while hashing, then verify and rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = _part_of(target)
    digest = hashlib.sha256()
    try:
        with part.open("wb") as out, _bar(opts, file.name, None, 0) as bar:
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    _verify_and_place(part, target, file, digest.hexdigest())


# --- shared helpers -------------------------------------------------------------------------


def _verify_and_place(part: Path, target: Path, file: RemoteFile, actual: str) -> None:
    """Rename ``part`` to ``target`` if it hashes as pinned; otherwise delete it and raise."""
    if file.sha256 is not None and actual != file.sha256.lower():
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"checksum mismatch for {file.name} from {file.url}"
            + (f" (member {file.member})" if file.member else "")
            + f": expected sha256 {file.sha256.lower()}, got {actual}; the download was deleted"
        )
    if file.sha256 is None:
        logger.info("%s: sha256 %s (not verified: no checksum pinned)", file.name, actual)
    os.replace(part, target)


def _part_of(path: Path) -> Path:
    """The temporary name a file is written under before its atomic rename."""
    return path.with_name(path.name + _PART_SUFFIX)


def _bar(opts: _Options, label: str, total: int | None, initial: int) -> tqdm:
    """A byte progress bar; ``disable=None`` lets tqdm hide it when stderr is not a TTY."""
    return tqdm(
        total=total,
        initial=initial,
        desc=label,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        leave=False,
        disable=None if opts.progress else True,
    )
