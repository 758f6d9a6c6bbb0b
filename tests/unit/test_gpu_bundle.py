"""The GPU check's bundle (benchmarks/gpu_bundle.py): files cut into parts that each fit one
device call, staged part by part, joined and checked; a missing part is named, not guessed."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from benchmarks.gpu_bundle import MANIFEST, assemble, pack, slim_bitsandbytes, stage_part


def _files(root: Path) -> list[Path]:
    sizes = {"wheels/a.whl": 2500, "site/pkg/model.gguf": 7000, "slice.json": 10, "empty.txt": 0}
    out = []
    for i, (rel, size) in enumerate(sizes.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes((i * 7 + j) % 251 for j in range(size)))
        out.append(path)
    return out


def test_parts_fit_their_capacity_and_join_back_byte_for_byte(tmp_path: Path, capsys) -> None:
    source = tmp_path / "src"
    files = _files(source)
    manifest = pack(source, files, tmp_path / "bundle", capacity=4000)
    parts = sorted((tmp_path / "bundle").iterdir())
    assert manifest["parts"] == len(parts) == 3  # 9,510 bytes in parts of 4,000
    for part in parts:
        assert sum(f.stat().st_size for f in part.glob("*.chunk")) <= 4000
        assert json.loads((part / MANIFEST).read_text())["parts"] == 3
    into = tmp_path / "staged"
    for part in parts[:2]:
        stage_part(part, into)
    assert assemble(into, install=False) == 2  # part 3 was never sent
    assert "parts [3] are missing" in capsys.readouterr().err
    stage_part(parts[2], into)
    assert assemble(into, install=False) == 0
    for path in files:
        assert (into / path.relative_to(source)).read_bytes() == path.read_bytes()
    assert not (into / "chunks").exists()


def test_a_chunk_that_changed_on_the_way_fails_the_check(tmp_path: Path, capsys) -> None:
    source = tmp_path / "src"
    files = _files(source)
    pack(source, files, tmp_path / "bundle", capacity=100_000)
    part = tmp_path / "bundle" / "part1"
    chunk = sorted(part.glob("*.chunk"))[1]
    data = bytearray(chunk.read_bytes())
    data[5] ^= 1
    chunk.write_bytes(bytes(data))
    stage_part(part, tmp_path / "staged")
    assert assemble(tmp_path / "staged", install=False) == 2
    assert "sha256 differs" in capsys.readouterr().err


def test_bitsandbytes_keeps_only_the_libraries_the_device_loads(tmp_path: Path) -> None:
    names = [
        "bitsandbytes/__init__.py",
        "bitsandbytes/libbitsandbytes_cpu.so",
        "bitsandbytes/libbitsandbytes_cuda118.so",
        "bitsandbytes/libbitsandbytes_cuda130.so",
        "bitsandbytes/libbitsandbytes_rocm64.so",
    ]
    wheel = tmp_path / "in" / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    wheel.parent.mkdir()
    record = "".join(f"{n},sha256=x,1\n" for n in names)
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in names:
            zf.writestr(name, b"x")
        zf.writestr("bitsandbytes-0.50.2.dist-info/RECORD", record)
    (tmp_path / "out").mkdir()
    slim = slim_bitsandbytes(wheel, tmp_path / "out")
    with zipfile.ZipFile(slim) as zf:
        kept = sorted(zf.namelist())
        lines = zf.read("bitsandbytes-0.50.2.dist-info/RECORD").decode().split()
    expected = [
        "bitsandbytes-0.50.2.dist-info/RECORD",
        "bitsandbytes/__init__.py",
        "bitsandbytes/libbitsandbytes_cpu.so",
        "bitsandbytes/libbitsandbytes_cuda130.so",
    ]
    assert kept == expected
    assert [line.split(",")[0] for line in lines] == expected[1:]
