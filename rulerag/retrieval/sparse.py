"""BM25 over the corpus: bm25s (fast, pure Python + NumPy) and Lucene through Pyserini.

The paper retrieves with Pyserini's BM25; bm25s is ten times quicker to start and needs no
JVM, so it is the default back end. Both sit behind one interface (`SparseIndex.search`) and
score alike on purpose: bm25s gets the same analysis chain as Pyserini's default English
analyzer (Lucene StandardTokenizer-style splitting, possessive removal, lower case, Lucene's 33
English stop words, Porter stemming) and Lucene's BM25 variant with Pyserini's k1=0.9, b=0.4.
`parity` measures how often the two agree on the top 10; on this corpus of short documents
Lucene's lossy document-length norms are exact, so they agree up to ties.

Pyserini is imported lazily (about ten seconds, a JVM): importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import numpy as np

from rulerag.retrieval.data import Corpus
from rulerag.retrieval.settings import SparseSettings

#: Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, which Pyserini's default analyzer uses.
LUCENE_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
})  # fmt: skip

# Words of letters/digits/underscore joined by an inner apostrophe or dot ("U.S", "don't",
# "3.5"), as Unicode word segmentation (Lucene's StandardTokenizer) keeps them; hyphens and
# other punctuation split ("2014-06-23" -> 2014, 06, 23).
_TOKEN = re.compile(r"\w+(?:['\u2019.]\w+)*")
_POSSESSIVE = re.compile(r"['\u2019]s$")


class LuceneLikeAnalyzer:
    """Pyserini's default English analysis, in Python, so bm25s and Lucene see equal terms.

    StandardTokenizer -> EnglishPossessiveFilter -> LowerCaseFilter -> StopFilter ->
    PorterStemFilter. Stems are cached: a KG corpus repeats the same few thousand words.
    """

    def __init__(self, stemmer: str | None = "porter", stopwords: frozenset[str] | None = None):
        self._stem: Callable[[str], str] | None = None
        if stemmer:
            import Stemmer  # PyStemmer: Snowball's C stemmers ("porter" = Lucene's Porter)

            self._stem = Stemmer.Stemmer(stemmer).stemWord
        self.stopwords = LUCENE_STOPWORDS if stopwords is None else stopwords
        self._cache: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        out = []
        for token in _TOKEN.findall(text.lower()):
            token = _POSSESSIVE.sub("", token)
            if not token or token in self.stopwords:
                continue
            if self._stem is not None:
                stem = self._cache.get(token)
                if stem is None:
                    stem = self._cache[token] = self._stem(token)
                token = stem
            out.append(token)
        return out


#: runs of CJK ideographs, kana and hangul (the scripts written without spaces)
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")


class CJKBigramAnalyzer:
    """Lucene's CJKAnalyzer idea for text without spaces (Chinese legal text, CAIL2018):
    every run of CJK characters becomes its overlapping bigrams (a lone character stays a
    unigram); the rest of the text goes through the English analysis."""

    def __init__(self, english: LuceneLikeAnalyzer | None = None) -> None:
        self.english = english or LuceneLikeAnalyzer()

    def __call__(self, text: str) -> list[str]:
        out: list[str] = []
        position = 0
        for match in _CJK_RUN.finditer(text):
            out += self.english(text[position : match.start()])
            run = match.group(0)
            out += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
            position = match.end()
        return out + self.english(text[position:])


#: text analysis for BM25 by name (params: `english` = Pyserini's default, `cjk` = bigrams)
ANALYZERS = ("english", "cjk")

#: `script_analyzer` picks `cjk` when at least this share of the letters are CJK. The bigram
#: analysis equals the English one on text without CJK, so any threshold keeps an English
#: collection's terms; 5% keeps a few CJK names in an English one whole words, and any
#: Chinese or Japanese collection (mostly CJK, some Latin codes and digits) far above it.
CJK_SHARE = 0.05


def cjk_share(texts: Sequence[str]) -> float:
    """The share of the letters (`str.isalpha`: ideographs, kana and hangul count) in `texts`
    that are CJK; 0.0 when there is no letter at all."""
    letters = cjk = 0
    for text in texts:
        letters += sum(ch.isalpha() for ch in text)
        cjk += sum(len(run) for run in _CJK_RUN.findall(text))
    return cjk / letters if letters else 0.0


def script_analyzer(texts: Sequence[str]) -> str:
    """The analyzer (one of `ANALYZERS`) for a collection written in `texts`' script: `cjk`
    for Chinese, Japanese or Korean text (written without spaces: the English analysis would
    keep a whole sentence as one term), else `english`."""
    return "cjk" if cjk_share(texts) >= CJK_SHARE else "english"


def make_analyzer(name: str, stemmer: str | None = "porter") -> Callable[[str], list[str]]:
    """The analyzer called `name` (one of `ANALYZERS`)."""
    if name == "english":
        return LuceneLikeAnalyzer(stemmer)
    if name == "cjk":
        return CJKBigramAnalyzer(LuceneLikeAnalyzer(stemmer))
    raise ValueError(f"analyzer must be one of {ANALYZERS}, not {name!r}")


#: params.yaml `index.sparse`'s defaults (Pyserini's)
DEFAULTS = SparseSettings()
#: the knobs of `SparseSettings` an index is built and searched with, saved beside it
BM25_KEYS = ("k1", "b", "stemmer", "threads")


def _saved(settings: SparseSettings) -> dict[str, object]:
    """What an index's metadata records of its settings (`BM25_KEYS`, in that order)."""
    return {key: getattr(settings, key) for key in BM25_KEYS}


def _loaded(saved: dict[str, object], threads: int | None) -> SparseSettings:
    """The settings an index was saved with (the other knobs at their defaults), searching
    with `threads` when given."""
    settings = SparseSettings(**saved)  # type: ignore[arg-type]
    return settings if threads is None else replace(settings, threads=threads)


class SparseIndex(Protocol):
    """What both BM25 back ends offer: top-k rows of the corpus for each text."""

    corpus_ids: tuple[str, ...]

    def search(
        self, texts: Sequence[str], k: int, show_progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return (rows, scores), both (len(texts), k); missing hits are row -1, score -inf."""
        ...


def id_order(ids: Sequence[str]) -> np.ndarray:
    """Each row's position when the doc ids are sorted as strings (the tie-break order)."""
    order = np.argsort(np.asarray(ids, dtype=str), kind="stable")
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[order] = np.arange(len(ids))
    return ranks


class BM25sIndex:
    """BM25 with bm25s (Lucene scoring) over the Lucene-like analysis above."""

    META = "rulerag_bm25s.json"

    def __init__(self, retriever, corpus_ids: Sequence[str], config: SparseSettings) -> None:
        self._retriever = retriever
        self.corpus_ids = tuple(corpus_ids)
        self.config = config
        self.analyzer = LuceneLikeAnalyzer(config.stemmer)
        self._id_order = id_order(self.corpus_ids)

    @classmethod
    def build(
        cls, corpus: Corpus, config: SparseSettings = DEFAULTS, show_progress: bool = False
    ) -> BM25sIndex:
        import bm25s

        analyzer = LuceneLikeAnalyzer(config.stemmer)
        tokens = [analyzer(text) for text in corpus.contents]
        retriever = bm25s.BM25(k1=config.k1, b=config.b, method="lucene")
        retriever.index(tokens, show_progress=show_progress)
        return cls(retriever, corpus.ids, config)

    def save(self, folder: Path) -> None:
        """Write the index into `folder` (created; the caller makes the folder swap atomic)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._retriever.save(str(folder), show_progress=False)
        meta = {"corpus_ids": list(self.corpus_ids), "config": _saved(self.config)}
        (folder / self.META).write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, threads: int | None = None) -> BM25sIndex:
        import bm25s

        folder = Path(folder)
        meta = json.loads((folder / cls.META).read_text(encoding="utf-8"))
        config = _loaded(meta["config"], threads)
        retriever = bm25s.BM25.load(str(folder), mmap=False, show_progress=False)
        return cls(retriever, meta["corpus_ids"], config)

    def search(
        self, texts: Sequence[str], k: int, show_progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Score every document with bm25s, then take the top k exactly: equal scores go to
        the earlier corpus row, as Lucene does (bm25s's own top-k cuts ties arbitrarily)."""
        from concurrent.futures import ThreadPoolExecutor

        from tqdm.auto import tqdm

        rows = np.full((len(texts), k), -1, dtype=np.int64)
        scores = np.full((len(texts), k), -np.inf, dtype=np.float32)

        def one(i: int) -> None:
            tokens = self.analyzer(texts[i])
            if not tokens:
                return
            s = self._retriever.get_scores(tokens)
            r, v = exact_topk(s, k, self._id_order)
            rows[i, : len(r)] = r
            scores[i, : len(r)] = v

        threads = max(1, self.config.threads)
        bar = tqdm(total=len(texts), desc="BM25", disable=not show_progress, leave=False)
        if threads == 1 or len(texts) < 64:
            for i in range(len(texts)):
                one(i)
                bar.update(1)
        else:
            with ThreadPoolExecutor(threads) as pool:
                for _ in pool.map(one, range(len(texts)), chunksize=32):
                    bar.update(1)
        bar.close()
        return rows, scores


def exact_topk(
    scores: np.ndarray, k: int, tiebreak: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows and scores of the k best positive scores, ordered by score, then `tiebreak`
    (ascending; default the row).

    Among documents tied at the k-th score those with the smallest `tiebreak` are kept, so the
    cut is deterministic. Pyserini breaks ties by doc id string (Anserini sorts hits by score,
    then id), and `BM25sIndex` passes each row's rank in that order to agree with it.
    """
    positive = np.flatnonzero(scores > 0)
    if len(positive) > k:
        values = scores[positive]
        kth = np.partition(values, len(values) - k)[len(values) - k]
        above = positive[values > kth]
        tied = positive[values == kth]
        if tiebreak is not None:
            tied = tied[np.argsort(tiebreak[tied], kind="stable")]
        positive = np.concatenate([above, tied[: k - len(above)]])
    values = scores[positive]
    keys = positive if tiebreak is None else tiebreak[positive]
    order = np.lexsort((keys, -values))
    return positive[order], values[order].astype(np.float32)


def _pyserini_env() -> dict[str, str]:
    """Pyserini 0.25 refuses to import without OPENAI_API_KEY (it never uses it here)."""
    env = dict(os.environ)
    env.setdefault("OPENAI_API_KEY", "unused")
    return env


class PyseriniIndex:
    """BM25 with Lucene through Pyserini (the paper's tool): a Lucene index in a folder."""

    META = "rulerag_pyserini.json"

    def __init__(self, folder: Path, corpus_ids: Sequence[str], config: SparseSettings) -> None:
        os.environ.setdefault("OPENAI_API_KEY", "unused")
        from pyserini.search.lucene import LuceneSearcher  # starts the JVM (slow)

        self.folder = Path(folder)
        self.corpus_ids = tuple(corpus_ids)
        self._row = {doc_id: i for i, doc_id in enumerate(self.corpus_ids)}
        self.config = config
        self._searcher = LuceneSearcher(str(self.folder / "lucene"))
        self._searcher.set_bm25(config.k1, config.b)

    @classmethod
    def build(
        cls, corpus: Corpus, folder: Path, config: SparseSettings = DEFAULTS, quiet: bool = True
    ) -> PyseriniIndex:
        """Index the corpus with Pyserini's JsonCollection indexer (a subprocess: the JVM
        indexer is Pyserini's own command line) into `folder`/lucene."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".pyserini-input-", dir=folder) as tmp:
            collection = Path(tmp) / "corpus.jsonl"
            with open(collection, "w", encoding="utf-8") as handle:
                for doc_id, text in zip(corpus.ids, corpus.contents, strict=True):
                    handle.write(json.dumps({"id": doc_id, "contents": text}) + "\n")
            target = folder / "lucene"
            shutil.rmtree(target, ignore_errors=True)
            command = [
                sys.executable, "-m", "pyserini.index.lucene",
                "--collection", "JsonCollection",
                "--input", tmp,
                "--index", str(target),
                "--generator", "DefaultLuceneDocumentGenerator",
                "--threads", str(max(1, config.threads)),
            ]  # fmt: skip
            done = subprocess.run(command, env=_pyserini_env(), capture_output=quiet, text=True)
            if done.returncode != 0:
                tail = (done.stderr or "")[-2000:] if quiet else ""
                raise RuntimeError(f"Pyserini indexing failed ({done.returncode}): {tail}")
        meta = {"corpus_ids": list(corpus.ids), "config": _saved(config)}
        (folder / cls.META).write_text(json.dumps(meta), encoding="utf-8")
        return cls(folder, corpus.ids, config)

    @classmethod
    def load(cls, folder: Path, threads: int | None = None) -> PyseriniIndex:
        folder = Path(folder)
        meta = json.loads((folder / cls.META).read_text(encoding="utf-8"))
        config = _loaded(meta["config"], threads)
        return cls(folder, meta["corpus_ids"], config)

    def search(
        self, texts: Sequence[str], k: int, show_progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        from tqdm.auto import tqdm

        rows = np.full((len(texts), k), -1, dtype=np.int64)
        scores = np.full((len(texts), k), -np.inf, dtype=np.float32)
        chunk = 1024
        starts = range(0, len(texts), chunk)
        for start in tqdm(starts, desc="Lucene BM25", disable=not show_progress, leave=False):
            batch = list(texts[start : start + chunk])
            qids = [str(start + i) for i in range(len(batch))]
            hits = self._searcher.batch_search(batch, qids, k=k, threads=self.config.threads)
            for qid in qids:
                i = int(qid)
                for j, hit in enumerate(hits.get(qid, [])[:k]):
                    rows[i, j] = self._row[hit.docid]
                    scores[i, j] = hit.score
        # Anserini already orders hits by score, then doc id, and lowers tied scores by 1e-6
        # steps (its ScoreTiesAdjusterReranker) to keep that order visible.
        return rows, scores

    def close(self) -> None:
        self._searcher.close()


def load_sparse(backend: str, folder: Path, threads: int | None = None) -> SparseIndex:
    """Open the index a back end (`bm25s` or `pyserini`) wrote under `folder`/<backend>."""
    if backend == "bm25s":
        return BM25sIndex.load(Path(folder) / "bm25s", threads)
    if backend == "pyserini":
        return PyseriniIndex.load(Path(folder) / "pyserini", threads)
    raise ValueError(f"sparse back end must be 'bm25s' or 'pyserini', not {backend!r}")


def parity(
    a: SparseIndex,
    b: SparseIndex,
    texts: Sequence[str],
    k: int = 10,
    tolerance: float = 1e-3,
) -> dict[str, float]:
    """How far two back ends agree on the top k of each text.

    `same_topk` counts texts with identical top-k sets. Scores tied at the k-th place may be
    cut differently (both are right), so `same_topk_up_to_ties` compares only the documents
    scored clearly above the k-th score (by more than `tolerance`, relative) and requires the
    k-th scores to match (relative `tolerance`: Lucene stores document lengths lossily, which
    moves its scores by up to ~5e-4 on small corpora). `mean_overlap` is the mean |A ∩ B| / k;
    `max_score_diff` the largest relative score difference over documents both returned.
    """
    rows_a, scores_a = a.search(texts, k)
    rows_b, scores_b = b.search(texts, k)
    same = same_ties = 0
    overlap = 0.0
    max_diff = 0.0
    for i in range(len(texts)):
        sa = {int(r): float(s) for r, s in zip(rows_a[i], scores_a[i], strict=True) if r >= 0}
        sb = {int(r): float(s) for r, s in zip(rows_b[i], scores_b[i], strict=True) if r >= 0}
        same += sa.keys() == sb.keys()
        overlap += len(sa.keys() & sb.keys()) / k
        for r in sa.keys() & sb.keys():
            max_diff = max(max_diff, abs(sa[r] - sb[r]) / max(abs(sb[r]), 1e-9))
        last_a = min(sa.values(), default=0.0)
        last_b = min(sb.values(), default=0.0)
        scale = max(abs(last_a), abs(last_b), 1e-9)
        above_a = {r for r, s in sa.items() if s > last_a + tolerance * scale}
        above_b = {r for r, s in sb.items() if s > last_b + tolerance * scale}
        same_ties += (
            len(sa) == len(sb) and abs(last_a - last_b) <= tolerance * scale and above_a == above_b
        )
    n = max(len(texts), 1)
    return {
        "queries": float(len(texts)),
        "same_topk": same / n,
        "same_topk_up_to_ties": same_ties / n,
        "mean_overlap": overlap / n,
        "max_score_diff": max_diff,
    }
