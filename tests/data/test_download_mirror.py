"""rulerag.kg.download on real KG files, served over local HTTP from the shared mirror."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from rulerag.kg.download import DownloadError, RemoteFile, fetch
from rulerag.orchestration.project_copy import kg_mirror_dir
from tests.http_fixtures import FileServer, serve_directory

pytestmark = pytest.mark.data

MIRROR = kg_mirror_dir()
NELL_VALID = "nell-995/pp413_NELL-995/valid.txt"
ICEWS_TEST = "icews14/TLogic_icews14/test.txt"

if not (MIRROR / NELL_VALID).is_file() or not (MIRROR / ICEWS_TEST).is_file():
    pytest.skip(f"KG mirror not found at {MIRROR}", allow_module_level=True)


def sha_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def mirror_server() -> Iterator[FileServer]:
    with serve_directory(MIRROR) as srv:
        yield srv


def get(files: list[RemoteFile], dest: Path, http: requests.Session, **kw) -> list[Path]:
    return fetch(files, dest, session=http, progress=False, backoff=0.0, timeout=30, **kw)


@pytest.mark.parametrize("path", [NELL_VALID, ICEWS_TEST])
def test_real_file_downloads_with_correct_sha256(
    path: str, mirror_server: FileServer, tmp_path: Path, http: requests.Session
) -> None:
    name = path.split("/", 1)[1]
    spec = RemoteFile(name, mirror_server.url(path), sha256=sha_of(MIRROR / path))
    (got,) = get([spec], tmp_path, http)
    assert got == tmp_path / name
    assert got.read_bytes() == (MIRROR / path).read_bytes()
    assert not got.with_name(got.name + ".part").exists()


def test_second_fetch_makes_no_request(
    mirror_server: FileServer, tmp_path: Path, http: requests.Session
) -> None:
    spec = RemoteFile(
        "valid.txt", mirror_server.url(NELL_VALID), sha256=sha_of(MIRROR / NELL_VALID)
    )
    get([spec], tmp_path, http)
    before = len(mirror_server.requests)
    get([spec], tmp_path, http)
    assert len(mirror_server.requests) == before


def test_corrupted_copy_fails_checksum_and_leaves_nothing(
    tmp_path: Path, http: requests.Session
) -> None:
    www = tmp_path / "www"
    www.mkdir()
    data = bytearray((MIRROR / ICEWS_TEST).read_bytes())
    data[len(data) // 2] ^= 0x01  # one byte changed
    (www / "test.txt").write_bytes(bytes(data))
    dest = tmp_path / "dest"
    expected = sha_of(MIRROR / ICEWS_TEST)
    with serve_directory(www) as srv:
        spec = RemoteFile("TLogic_icews14/test.txt", srv.url("test.txt"), sha256=expected)
        with pytest.raises(DownloadError) as info:
            get([spec], dest, http)
    message = str(info.value)
    assert "TLogic_icews14/test.txt" in message
    assert srv.url("test.txt") in message
    assert expected in message
    assert hashlib.sha256(bytes(data)).hexdigest() in message
    assert not (dest / "TLogic_icews14" / "test.txt").exists()
    assert not (dest / "TLogic_icews14" / "test.txt.part").exists()


def test_resume_from_partial_download(
    mirror_server: FileServer, tmp_path: Path, http: requests.Session
) -> None:
    source = (MIRROR / ICEWS_TEST).read_bytes()
    n = len(source) // 3
    (tmp_path / "test.txt.part").write_bytes(source[:n])
    spec = RemoteFile("test.txt", mirror_server.url(ICEWS_TEST), sha256=sha_of(MIRROR / ICEWS_TEST))
    (got,) = get([spec], tmp_path, http)
    assert got.read_bytes() == source
    assert mirror_server.requests_for(ICEWS_TEST)[-1].range == f"bytes={n}-"
    assert not (tmp_path / "test.txt.part").exists()


def test_server_errors_then_success(tmp_path: Path, http: requests.Session) -> None:
    with serve_directory(MIRROR) as srv:
        srv.fail_with["/" + NELL_VALID] = [500, 500]
        spec = RemoteFile("valid.txt", srv.url(NELL_VALID), sha256=sha_of(MIRROR / NELL_VALID))
        (got,) = get([spec], tmp_path, http, retries=3)
        assert len(srv.requests_for(NELL_VALID)) == 3
    assert got.read_bytes() == (MIRROR / NELL_VALID).read_bytes()


@pytest.mark.parametrize("archive", ["kg.zip", "kg.tar.gz"])
def test_real_files_from_an_archive(archive: str, tmp_path: Path, http: requests.Session) -> None:
    www = tmp_path / "www"
    www.mkdir()
    members = {"pp413_NELL-995/valid.txt": NELL_VALID, "TLogic_icews14/test.txt": ICEWS_TEST}
    if archive.endswith(".zip"):
        with zipfile.ZipFile(www / archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for member, path in members.items():
                zf.write(MIRROR / path, member)
    else:
        with tarfile.open(www / archive, "w:gz") as tf:
            for member, path in members.items():
                tf.add(MIRROR / path, member)
    dest = tmp_path / "dest"
    with serve_directory(www) as srv:
        files = [
            RemoteFile(member, srv.url(archive), sha256=sha_of(MIRROR / path), member=member)
            for member, path in members.items()
        ]
        got = get(files, dest, http)
        assert len(srv.requests) == 1
    for path, (_member, source) in zip(got, members.items(), strict=True):
        assert path.read_bytes() == (MIRROR / source).read_bytes()
    assert not (dest / ".archives").exists()
    shutil.rmtree(www)
