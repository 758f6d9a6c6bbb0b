"""The whole download path of `ingest`: no mirror, the registry's files fetched from a local
HTTP server on 127.0.0.1 that serves the real mirror, checked against the registry's sha256."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tests.helpers import ingest_into
from rulerag.kg.errors import DatasetNotFoundError
from rulerag.kg.registry import DATASETS, DatasetSpec
from tests.http_fixtures import FileServer, serve_directory

pytestmark = pytest.mark.data


def served_spec(server: FileServer) -> DatasetSpec:
    """ICEWS14's TLogic source with every URL pointing at the local server's copy."""
    spec = DATASETS["icews14"]
    tlogic = spec.sources[0]
    remote = tuple(
        dataclasses.replace(f, url=server.url(f"icews14/{f.name}")) for f in tlogic.remote
    )
    return dataclasses.replace(spec, sources=(dataclasses.replace(tlogic, remote=remote),))


def test_download_gives_the_same_kg_as_the_mirror(kg_mirror: Path, tmp_path: Path) -> None:
    ingest_into(DATASETS["icews14"], tmp_path / "from_mirror", data_dir=kg_mirror,
           download_dir=tmp_path / "unused")
    with serve_directory(kg_mirror) as server:
        _, stats = ingest_into(served_spec(server), tmp_path / "from_http", data_dir=None,
                          download_dir=tmp_path / "dl")
        assert server.requests_for("icews14/TLogic_icews14/train.txt")
    assert stats["origin"].startswith("download")
    assert stats["splits"] == {"train": 63_685, "valid": 13_823, "test": 13_222}
    for name in ("facts.parquet", "entities.parquet", "relations.parquet"):
        assert (tmp_path / "from_mirror" / name).read_bytes() == (
            tmp_path / "from_http" / name
        ).read_bytes()


def test_corrupted_download_fails_and_leaves_nothing(kg_mirror: Path, tmp_path: Path) -> None:
    served = tmp_path / "served" / "icews14" / "TLogic_icews14"
    shutil.copytree(kg_mirror / "icews14" / "TLogic_icews14", served)
    data = bytearray((served / "train.txt").read_bytes())
    data[100] ^= 0x01
    (served / "train.txt").write_bytes(bytes(data))
    out = tmp_path / "out"
    with serve_directory(tmp_path / "served") as server, pytest.raises(DatasetNotFoundError) as info:
        ingest_into(served_spec(server), out, data_dir=None, download_dir=tmp_path / "dl")
    assert "sha256" in str(info.value) or "checksum" in str(info.value)
    cache = tmp_path / "dl" / "icews14" / "TLogic_icews14"
    assert not (cache / "train.txt").exists()
    assert not list(cache.glob("train.txt*")), "no .part left behind"
    assert not out.exists() or not any(out.iterdir())
