"""Dense retrieval: corpus embeddings computed once (cached in chunks), a FAISS index over them.

Why the pieces are shaped this way:

* The document encoder is frozen in every configuration (RGFT and SSFT train the query side
  only), so the corpus is encoded once per document encoder and reused by every retrieval run
  and by training, which reads oracle-document embeddings straight from the matrix.
* Encoding goes in chunks written to a cache folder keyed by model, settings and corpus text:
  a killed run resumes where it stopped, and a changed FAISS setting rebuilds the index from
  the cached embeddings in seconds instead of re-encoding (all-mpnet-base-v2 on two CPU cores
  needs over an hour for ICEWS14's corpus).
* FAISS: exact inner product (`flat`) by default, `ivf` and `hnsw` for large corpora; moved to
  the GPU when faiss-gpu is installed and a GPU is visible (HNSW stays on the CPU: FAISS has
  no GPU HNSW).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rulerag.errors import InputError
from rulerag.io import atomic_path
from rulerag.retrieval.encoders import DualEncoder, encode
from rulerag.retrieval.settings import FaissConfig

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def corpus_key(model_fingerprint: str, texts: Sequence[str], **settings: object) -> str:
    """Cache key: the model, encoding settings and every document text."""
    digest = hashlib.sha1(model_fingerprint.encode())
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def encode_corpus(
    encoder: DualEncoder,
    texts: Sequence[str],
    batch_size: int = 128,
    cache_dir: Path | None = None,
    chunk_size: int = 8192,
    show_progress: bool = True,
    stats: dict | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Embed the corpus with the document encoder, chunk by chunk, reusing cached chunks.

    Without `cache_dir` nothing is cached. Each chunk file is written atomically, so a run
    killed mid-way leaves only whole chunks and the next run starts at the first missing one.
    `stats`, when given, receives `encoded_docs`, `cached_docs` and `encode_seconds` (the time
    spent encoding, not loading), so throughput figures never count cache hits. `out` (an
    (n, dim) float32 array: a flat FAISS index's own storage, `build_dense_index`) receives
    each chunk as it comes and is returned, so the corpus is held once rather than as its
    chunks and then their concatenation.
    """
    from tqdm.auto import tqdm

    n = len(texts)
    if out is not None and out.shape[0] != n:
        raise ValueError(f"out holds {out.shape[0]} rows for a corpus of {n} documents")
    starts = list(range(0, n, chunk_size))
    parts: list[np.ndarray] = []
    cached = encoded = 0
    seconds = 0.0
    bar = tqdm(total=n, desc="encode corpus", unit="doc", disable=not show_progress)
    for start in starts:
        chunk = texts[start : start + chunk_size]
        path = Path(cache_dir) / f"chunk-{start:09d}.npy" if cache_dir else None
        if path is not None and path.is_file():
            part = np.load(path)
            cached += len(chunk)
        else:
            started = time.perf_counter()
            part = encoder.encode_docs(chunk, batch_size=batch_size)
            seconds += time.perf_counter() - started
            encoded += len(chunk)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                    np.save(handle, part)
        if out is not None:
            out[start : start + len(chunk)] = part
        else:
            parts.append(part)
        bar.update(len(chunk))
    bar.close()
    if stats is not None:
        stats.update(encoded_docs=encoded, cached_docs=cached, encode_seconds=seconds)
    if out is not None:
        return out
    if not parts:
        dim = encoder.doc.get_embedding_dimension() or 0
        return np.zeros((0, dim), np.float32)
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def gpu_available() -> bool:
    """True when this FAISS build has GPU support and sees a GPU."""
    import faiss

    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def build_faiss(embeddings: np.ndarray, config: FaissConfig = FaissConfig()):
    """A CPU FAISS index over `embeddings` (inner product), trained if the kind needs it."""
    import faiss

    n, dim = embeddings.shape
    if config.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif config.kind == "ivf":
        nlist = max(1, min(config.nlist, n // 39))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample = embeddings[rng.permutation(n)[: 256 * nlist]]
        index.train(sample)
        index.nprobe = config.nprobe
    elif config.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.ef_construction
        index.hnsw.efSearch = config.ef_search
    else:
        raise ValueError(f"faiss kind must be flat, ivf or hnsw, not {config.kind!r}")
    index.add(embeddings)
    return index


class _FaissVectors(np.ndarray):
    """A FAISS index's own vector storage seen as an array. It holds the index (`owner`), and
    every view of it holds it as its base, so the memory lives as long as any of them (R²AG
    keeps the corpus's vectors after the searcher is gone)."""

    owner: object = None


def _empty_flat_index(n: int, dim: int):
    """A flat inner-product index with room for `n` vectors of `dim` (zeros until written
    through `_flat_vectors`): what `add` leaves, its storage grown once to the size and the
    vectors counted, without a copy of them to add from."""
    import faiss

    index = faiss.IndexFlatIP(dim)
    index.codes.resize(n * dim * np.dtype(np.float32).itemsize)
    index.ntotal = n
    return index


def _read_flat_index(path: Path):
    """A flat index over the vectors of `path` (an .npy file `DenseIndex.save` wrote: float32,
    C order), read from the file straight into FAISS's storage; None for any other .npy file.
    Copying them from the mapped file held them twice while FAISS copied (3.1 GiB for ×16's
    1.5 GB of vectors), the file's pages resident meanwhile."""
    headers = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }
    with open(path, "rb") as handle:
        read_header = headers.get(np.lib.format.read_magic(handle))
        if read_header is None:
            return None
        shape, fortran_order, dtype = read_header(handle)
        if len(shape) != 2 or fortran_order or dtype != np.float32 or not shape[0]:
            return None
        index = _empty_flat_index(*shape)
        buffer = memoryview(_flat_vectors(index)).cast("B")
        if handle.readinto(buffer) != buffer.nbytes:
            raise InputError(f"{path}: shorter than its {shape[0]} vectors: rebuild the index")
    return index


def _flat_vectors(index) -> np.ndarray:
    """A flat FAISS index's vectors as an (ntotal, d) float32 array over FAISS's own storage
    (no copy), keeping the index alive."""
    import faiss

    n, dim = index.ntotal, index.d
    vectors = faiss.rev_swig_ptr(index.get_xb(), n * dim).reshape(n, dim).view(_FaissVectors)
    vectors.owner = index
    return vectors


def _searchable(index, config: FaissConfig):
    """Set search-time knobs; move to the GPU when allowed and possible.

    Returns (index, GPU resources or None): the resources must live as long as the GPU index,
    and FAISS's SWIG objects take no extra attributes, so the caller keeps them."""
    import faiss

    if config.threads:
        faiss.omp_set_num_threads(int(config.threads))
    if config.kind == "ivf":
        faiss.extract_index_ivf(index).nprobe = config.nprobe
    if config.kind == "hnsw":
        index.hnsw.efSearch = config.ef_search
    use_gpu = config.gpu not in (False, "false", "no", "0") and config.kind != "hnsw"
    if use_gpu and gpu_available():
        resources = faiss.StandardGpuResources()
        return faiss.index_cpu_to_gpu(resources, 0, index), resources
    return index, None


class DenseIndex:
    """Corpus embeddings + their FAISS index + the doc ids, saved as one folder.

    Files: `embeddings.npy` (float32, row i = doc_ids[i]), `doc_ids.json`, `meta.json`
    (document model, fingerprint, normalisation, FAISS settings) and, for ivf/hnsw,
    `faiss.index` (a flat index is rebuilt from the embeddings on load in well under a second).
    """

    def __init__(
        self,
        doc_ids: Sequence[str],
        embeddings: np.ndarray,
        config: FaissConfig = FaissConfig(),
        meta: dict | None = None,
        index=None,
    ) -> None:
        if len(doc_ids) != len(embeddings):
            raise ValueError("doc_ids and embeddings differ in length")
        self.doc_ids = tuple(doc_ids)
        self.config = config
        self.meta = dict(meta or {})
        self._cpu_index = index if index is not None else build_faiss(embeddings, config)
        if config.kind == "flat" and len(embeddings):
            # a flat index holds its own copy of every vector: read them from there rather
            # than keep the corpus's embeddings twice (the file's pages or the encoder's
            # array: 1.5 GB each at the scale curve's ×16)
            embeddings = _flat_vectors(self._cpu_index)
        self.embeddings = embeddings
        self.index, self._gpu_resources = _searchable(self._cpu_index, config)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def save(self, folder: Path) -> None:
        """Write into `folder` (the caller swaps the folder in atomically)."""
        import faiss

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "embeddings.npy", self.embeddings)
        (folder / "doc_ids.json").write_text(json.dumps(list(self.doc_ids)), encoding="utf-8")
        if self.config.kind != "flat":
            faiss.write_index(self._cpu_index, str(folder / "faiss.index"))
        meta = {**self.meta, "faiss": asdict(self.config), "docs": len(self.doc_ids)}
        meta["dim"] = self.dim
        (folder / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, config: FaissConfig | None = None, mmap: bool = True):
        """Open a saved index. `config` may change search-time knobs (nprobe, ef_search, gpu);
        a different `kind` than the saved one rebuilds the index from the embeddings."""
        import faiss

        folder = Path(folder)
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        saved = FaissConfig(**meta.pop("faiss"))
        config = config or saved
        doc_ids = json.loads((folder / "doc_ids.json").read_text(encoding="utf-8"))
        vectors = folder / "embeddings.npy"
        index = _read_flat_index(vectors) if config.kind == "flat" else None
        if index is not None:
            return cls(doc_ids, _flat_vectors(index), config, meta, index)
        embeddings = np.load(vectors, mmap_mode="r" if mmap else None)
        if config.kind == saved.kind != "flat" and (folder / "faiss.index").is_file():
            index = faiss.read_index(str(folder / "faiss.index"))
        else:  # FAISS copies the vectors it indexes from the mapped file (whose pages are
            # resident only while it copies: the mapping is not kept)
            embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        return cls(doc_ids, embeddings, config, meta, index)

    def search(
        self, queries: np.ndarray, k: int, batch_size: int = 4096, show_progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the top k per query embedding; missing hits are -1 / -inf."""
        from tqdm.auto import tqdm

        n = len(queries)
        rows = np.full((n, k), -1, dtype=np.int64)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        kk = min(k, len(self.doc_ids))
        starts = range(0, n, batch_size)
        for start in tqdm(starts, desc="faiss search", disable=not show_progress, leave=False):
            q = np.ascontiguousarray(queries[start : start + batch_size], dtype=np.float32)
            d, i = self.index.search(q, kk)
            rows[start : start + len(q), :kk] = i
            scores[start : start + len(q), :kk] = np.where(i >= 0, d, -np.inf)
        return rows, scores


@dataclass
class EncodeStats:
    """How long encoding took (cache hits excluded), for stats.json and the benchmark."""

    docs: int
    encoded_docs: int
    cached_docs: int
    seconds: float

    @property
    def docs_per_second(self) -> float | None:
        return self.encoded_docs / self.seconds if self.seconds > 0 else None


def build_dense_index(
    encoder: DualEncoder,
    doc_ids: Sequence[str],
    texts: Sequence[str],
    config: FaissConfig = FaissConfig(),
    batch_size: int = 128,
    cache_dir: Path | None = None,
    meta: dict | None = None,
    show_progress: bool = True,
) -> tuple[DenseIndex, EncodeStats]:
    """Encode (or take from the cache) and index a corpus. A flat index is filled as the
    chunks come, so the corpus's vectors are held once (FAISS's copy): encoding them into an
    array of their own first, then adding it, held them twice (1.5 GB each at the scale
    curve's ×16)."""
    stats: dict = {}
    dim = encoder.doc.get_embedding_dimension()
    flat = None
    if config.kind == "flat" and texts and dim:
        flat = _empty_flat_index(len(texts), dim)
    embeddings = encode_corpus(
        encoder,
        texts,
        batch_size,
        cache_dir,
        show_progress=show_progress,
        stats=stats,
        out=None if flat is None else _flat_vectors(flat),
    )
    index = DenseIndex(doc_ids, embeddings, config, meta, flat)
    return index, EncodeStats(
        len(texts), stats["encoded_docs"], stats["cached_docs"], stats["encode_seconds"]
    )


class DenseRetriever:
    """Query encoder + corpus index: texts in, top-k rows out (the `search` of sparse.py).

    Only the query side is loaded: the corpus was encoded once by the `index` stage.
    """

    def __init__(
        self,
        query_model: SentenceTransformer,
        index: DenseIndex,
        normalize: bool = True,
        batch_size: int = 128,
    ) -> None:
        self.query_model = query_model
        self.index = index
        self.normalize = normalize
        self.batch_size = batch_size
        self.corpus_ids = index.doc_ids

    def search(
        self, texts: Sequence[str], k: int, show_progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = encode(self.query_model, texts, self.batch_size, self.normalize, show_progress)
        return self.index.search(queries, k)


def cpu_threads() -> int:
    """CPU cores this process may use (for FAISS / torch thread counts)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
