"""rulerag.kg.download against a local HTTP server serving small files built in tmp_path."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from rulerag.kg.download import DownloadError, RemoteFile, fetch
from tests.http_fixtures import FileServer, serve_directory

PAYLOAD = b"".join(b"line %05d\thead\trelation\ttail\n" % i for i in range(2000))
BIG = PAYLOAD * 20  # 1.2 MB: larger than one network read, so a drop can keep a prefix


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def www(tmp_path: Path) -> Path:
    root = tmp_path / "www"
    root.mkdir()
    (root / "data.txt").write_bytes(PAYLOAD)
    return root


@pytest.fixture
def server(www: Path) -> Iterator[FileServer]:
    with serve_directory(www) as srv:
        yield srv


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "dest"


@pytest.fixture
def pinned(server: FileServer) -> RemoteFile:
    """The served data.txt, pinned to PAYLOAD's hash."""
    return RemoteFile("data.txt", server.url("data.txt"), sha256=sha(PAYLOAD))


def run(files: list[RemoteFile], dest: Path, http: requests.Session, **kw) -> list[Path]:
    kw.setdefault("progress", False)
    kw.setdefault("backoff", 0.0)
    kw.setdefault("timeout", 10)
    return fetch(files, dest, session=http, **kw)


def leftovers(dest: Path) -> list[str]:
    """Every file under dest, relative, sorted (to show that nothing stray is left)."""
    if not dest.exists():
        return []
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())


# --- RemoteFile validation -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../evil.txt", "a/../../b", "a\\..\\b"])
def test_remote_file_rejects_names_outside_the_folder(name: str) -> None:
    with pytest.raises(ValueError):
        RemoteFile(name, "http://example.org/x.txt")


@pytest.mark.parametrize("member", ["../evil.txt", "/abs.txt", "a/../../evil.txt"])
def test_remote_file_rejects_traversing_members(member: str) -> None:
    with pytest.raises(ValueError, match="member"):
        RemoteFile("ok.txt", "http://example.org/a.zip", member=member)


def test_remote_file_rejects_bad_sha_scheme_and_archive_suffix() -> None:
    with pytest.raises(ValueError, match="sha256"):
        RemoteFile("a.txt", "http://example.org/a.txt", sha256="abc")
    with pytest.raises(ValueError, match="http"):
        RemoteFile("a.txt", "ftp://example.org/a.txt")
    with pytest.raises(ValueError, match="archive type"):
        RemoteFile("a.txt", "http://example.org/a.rar", member="a.txt")
    # Query strings do not hide the suffix; the dataclass is frozen and hashable.
    spec = RemoteFile("a.txt", "http://example.org/a.tgz?raw=1", member="a.txt")
    assert {spec: 1}[spec] == 1
    with pytest.raises(AttributeError):
        spec.name = "b.txt"  # type: ignore[misc]


def test_fetch_rejects_duplicate_names_before_any_request(
    server: FileServer, dest: Path, http: requests.Session
) -> None:
    spec = RemoteFile("a.txt", server.url("data.txt"))
    with pytest.raises(ValueError, match="twice"):
        run([spec, spec], dest, http)
    assert server.requests == []


# --- plain files -----------------------------------------------------------------------------


def test_download_verifies_and_places_file(
    server: FileServer, dest: Path, http: requests.Session
) -> None:
    spec = RemoteFile("sub/dir/data.txt", server.url("data.txt"), sha256=sha(PAYLOAD).upper())
    paths = run([spec], dest, http)
    assert paths == [dest / "sub" / "dir" / "data.txt"]
    assert paths[0].read_bytes() == PAYLOAD
    assert leftovers(dest) == ["sub/dir/data.txt"]
    assert [r.range for r in server.requests] == [None]


def test_unpinned_file_is_downloaded_unverified(
    server: FileServer, dest: Path, http: requests.Session
) -> None:
    (path,) = run([RemoteFile("data.txt", server.url("data.txt"))], dest, http)
    assert path.read_bytes() == PAYLOAD


def test_checksum_mismatch_leaves_nothing_behind(
    server: FileServer, dest: Path, http: requests.Session
) -> None:
    wrong = sha(b"something else")
    spec = RemoteFile("data.txt", server.url("data.txt"), sha256=wrong)
    with pytest.raises(DownloadError) as info:
        run([spec], dest, http)
    message = str(info.value)
    for part in ("data.txt", server.url("data.txt"), wrong, sha(PAYLOAD)):
        assert part in message
    assert leftovers(dest) == []


def test_resume_sends_range_and_appends(
    server: FileServer, dest: Path, http: requests.Session, pinned: RemoteFile
) -> None:
    dest.mkdir()
    (dest / "data.txt.part").write_bytes(PAYLOAD[:1000])
    (path,) = run([pinned], dest, http)
    assert path.read_bytes() == PAYLOAD
    assert [r.range for r in server.requests] == ["bytes=1000-"]
    assert leftovers(dest) == ["data.txt"]


@pytest.mark.parametrize(
    ("leftover", "ignore_range"),
    [("data.txt.part", True), ("data.txt", False)],
    ids=["part-the-server-will-not-resume", "present-file-with-wrong-hash"],
)
def test_a_wrong_leftover_is_fetched_again_in_one_request(
    server: FileServer,
    dest: Path,
    http: requests.Session,
    pinned: RemoteFile,
    leftover: str,
    ignore_range: bool,
) -> None:
    """A .part the server answers a Range request for with the whole file (the download
    restarts), or a present file whose hash is wrong: its bytes must not survive."""
    dest.mkdir()
    (dest / leftover).write_bytes(b"garbage that must not survive")
    if ignore_range:
        server.ignore_range.add("/data.txt")
    (path,) = run([pinned], dest, http)
    assert path.read_bytes() == PAYLOAD
    assert len(server.requests) == 1


def test_complete_part_is_accepted_on_416(
    server: FileServer, dest: Path, http: requests.Session, pinned: RemoteFile
) -> None:
    dest.mkdir()
    (dest / "data.txt.part").write_bytes(PAYLOAD)
    (path,) = run([pinned], dest, http, retries=0)
    assert path.read_bytes() == PAYLOAD
    assert [r.range for r in server.requests] == [f"bytes={len(PAYLOAD)}-"]


def test_overlong_part_is_discarded_and_fetched_again(
    server: FileServer, dest: Path, http: requests.Session, pinned: RemoteFile
) -> None:
    dest.mkdir()
    (dest / "data.txt.part").write_bytes(PAYLOAD + b"stale tail")
    (path,) = run([pinned], dest, http, retries=0)
    assert path.read_bytes() == PAYLOAD
    assert [r.range for r in server.requests] == [f"bytes={len(PAYLOAD) + 10}-", None]


def test_server_errors_are_retried(
    server: FileServer, dest: Path, http: requests.Session, pinned: RemoteFile
) -> None:
    server.fail_with["/data.txt"] = [500, 503]
    (path,) = run([pinned], dest, http, retries=3)
    assert path.read_bytes() == PAYLOAD
    assert len(server.requests_for("data.txt")) == 3


def test_retries_run_out(
    server: FileServer, dest: Path, http: requests.Session, pinned: RemoteFile
) -> None:
    server.fail_with["/data.txt"] = [500, 500, 500]
    with pytest.raises(DownloadError, match=r"data\.txt.*after 2 attempts.*500"):
        run([pinned], dest, http, retries=1)
    assert len(server.requests) == 2
    assert leftovers(dest) == []


def test_client_errors_are_not_retried(
    server: FileServer, dest: Path, http: requests.Session
) -> None:
    spec = RemoteFile("missing.txt", server.url("missing.txt"))
    with pytest.raises(DownloadError, match=r"404.*missing\.txt"):
        run([spec], dest, http, retries=3)
    assert len(server.requests) == 1
    assert leftovers(dest) == []


def test_dropped_connection_resumes_with_range(
    www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    (www / "big.bin").write_bytes(BIG)
    server.drop_after["/big.bin"] = 300_000
    spec = RemoteFile("big.bin", server.url("big.bin"), sha256=sha(BIG))
    (path,) = run([spec], dest, http, retries=2)
    assert path.read_bytes() == BIG
    first, second = server.requests
    assert first.range is None
    # Bytes received before the drop are kept (all but the last, cut-short network read).
    assert second.range is not None
    resumed_at = int(second.range.removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_at <= 300_000


def test_killed_download_never_leaves_the_final_name(
    www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    """Out of retries mid-body: only the .part remains, for the next run to resume."""
    (www / "big.bin").write_bytes(BIG)
    server.drop_after["/big.bin"] = 300_000
    spec = RemoteFile("big.bin", server.url("big.bin"), sha256=sha(BIG))
    with pytest.raises(DownloadError, match=r"big\.bin.*after 1 attempts"):
        run([spec], dest, http, retries=0)
    assert leftovers(dest) == ["big.bin.part"]
    kept = (dest / "big.bin.part").read_bytes()
    assert 0 < len(kept) <= 300_000
    assert BIG.startswith(kept)
    (path,) = run([spec], dest, http)
    assert path.read_bytes() == BIG
    assert server.requests[-1].range == f"bytes={len(kept)}-"


def test_second_fetch_makes_no_request(
    server: FileServer, dest: Path, http: requests.Session
) -> None:
    files = [
        RemoteFile("pinned.txt", server.url("data.txt"), sha256=sha(PAYLOAD)),
        RemoteFile("unpinned.txt", server.url("data.txt")),
    ]
    first = run(files, dest, http)
    seen = len(server.requests)
    assert seen == 2
    assert run(files, dest, http) == first
    assert len(server.requests) == seen


def test_default_session_and_progress_bar(
    server: FileServer, dest: Path, monkeypatch: pytest.MonkeyPatch, pinned: RemoteFile
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    (path,) = fetch([pinned], dest, progress=True, timeout=10)
    assert path.read_bytes() == PAYLOAD


# --- archives --------------------------------------------------------------------------------

MEMBERS = {"kg/train.txt": PAYLOAD, "kg/test.txt": PAYLOAD[::-1], "README": b"not needed\n"}


def make_zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def make_tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(f"./{name}")  # many tarballs store "./" prefixes
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)


def archive_specs(url: str, sha_of_test: str | None = None) -> list[RemoteFile]:
    return [
        RemoteFile("TLogic/train.txt", url, sha256=sha(PAYLOAD), member="kg/train.txt"),
        RemoteFile(
            "TLogic/test.txt",
            url,
            sha256=sha_of_test or sha(PAYLOAD[::-1]),
            member="kg/test.txt",
        ),
    ]


@pytest.mark.parametrize("archive", ["bundle.zip", "bundle.tar.gz", "bundle.tgz"])
def test_archive_members_extracted_once_and_archive_removed(
    archive: str, www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    (make_zip if archive.endswith(".zip") else make_tar)(www / archive, MEMBERS)
    files = archive_specs(server.url(archive))
    paths = run(files, dest, http)
    assert paths == [dest / "TLogic" / "train.txt", dest / "TLogic" / "test.txt"]
    assert paths[0].read_bytes() == PAYLOAD
    assert paths[1].read_bytes() == PAYLOAD[::-1]
    assert len(server.requests_for(archive)) == 1
    assert leftovers(dest) == ["TLogic/test.txt", "TLogic/train.txt"]
    assert not (dest / ".archives").exists()
    run(files, dest, http)  # idempotent: no second archive download
    assert len(server.requests) == 1


def test_archive_member_checksum_mismatch(
    www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    make_zip(www / "bundle.zip", MEMBERS)
    files = archive_specs(server.url("bundle.zip"), sha_of_test="0" * 64)
    with pytest.raises(DownloadError, match=r"TLogic/test\.txt.*bundle\.zip.*kg/test\.txt"):
        run(files, dest, http)
    assert "TLogic/test.txt" not in leftovers(dest)
    assert not any(name.endswith(".part") for name in leftovers(dest))
    assert not (dest / ".archives").exists()  # the bad archive is dropped, not reused


def test_missing_member_is_reported(
    www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    make_tar(www / "bundle.tgz", {"kg/train.txt": PAYLOAD})
    with pytest.raises(DownloadError, match=r"no member kg/test\.txt \(for TLogic/test\.txt\)"):
        run(archive_specs(server.url("bundle.tgz")), dest, http)
    assert leftovers(dest) == ["TLogic/train.txt"]  # the good member was verified and kept


@pytest.mark.parametrize("archive", ["bundle.zip", "bundle.tar.gz"])
def test_unreadable_archive_is_reported_and_dropped(
    archive: str, www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    (www / archive).write_bytes(b"<html>rate limited</html>")
    with pytest.raises(DownloadError, match=rf"cannot read archive .*{re.escape(archive)}"):
        run(archive_specs(server.url(archive)), dest, http)
    assert leftovers(dest) == []


def test_member_requested_twice_is_rejected(dest: Path, http: requests.Session) -> None:
    url = "http://127.0.0.1:9/bundle.zip"  # never contacted
    files = [RemoteFile(n, url, member="kg/train.txt") for n in ("a.txt", "b.txt")]
    with pytest.raises(ValueError, match="twice"):
        run(files, dest, http)


def test_traversing_archive_entries_are_never_written(
    tmp_path: Path, www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    """Entries like ../evil.txt are skipped: only named members go, to their own names."""
    make_zip(www / "evil.zip", {"../evil.txt": b"pwned", "/abs.txt": b"pwned", **MEMBERS})
    run(archive_specs(server.url("evil.zip")), dest, http)
    assert leftovers(dest) == ["TLogic/test.txt", "TLogic/train.txt"]
    assert not (tmp_path / "evil.txt").exists()
    with pytest.raises(ValueError, match="member"):
        RemoteFile("evil.txt", server.url("evil.zip"), member="../evil.txt")


def test_link_members_are_refused(
    www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    make_tar(www / "links.tar.gz", {"kg/train.txt": PAYLOAD}, links={"kg/test.txt": "/etc/passwd"})
    with pytest.raises(DownloadError, match=r"kg/test\.txt.*link or directory"):
        run(archive_specs(server.url("links.tar.gz")), dest, http)
    assert not (dest / "TLogic" / "test.txt").exists()


def test_archive_and_plain_files_mix(
    www: Path, server: FileServer, dest: Path, http: requests.Session
) -> None:
    make_tar(www / "bundle.tar.gz", MEMBERS)
    files = [RemoteFile("plain.txt", server.url("data.txt"), sha256=sha(PAYLOAD))]
    files += archive_specs(server.url("bundle.tar.gz"))
    paths = run(files, dest, http)
    assert [p.relative_to(dest).as_posix() for p in paths] == [
        "plain.txt",
        "TLogic/train.txt",
        "TLogic/test.txt",
    ]
    assert all(p.is_file() for p in paths)
    assert not os.path.exists(dest / ".archives")
