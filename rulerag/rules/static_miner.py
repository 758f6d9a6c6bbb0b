"""Static rule mining with AMIE 3's semantics, vectorised with NumPy and SciPy sparse.

What is mined (AMIE's default language bias, `-maxad 3`): closed, connected Horn rules of at most
`max_atoms` atoms, head included, relations used in both directions, no constants. With three
atoms the closed shapes are

    r1(x, y)                      => r(x, y)     one body atom (either direction)
    r1(x, z) & r2(z, y)           => r(x, y)     a path x - z - y (each atom either direction)
    r1(x, y) & r2(x, y)           => r(x, y)     two atoms on the head's own pair

excluding a body atom identical to the head (`r(x, y) => r(x, y)`) and duplicated body atoms, as
AMIE's `isRedundantRecursive` does. Variables may bind to the same entity (AMIE adds no
inequality atoms): `r1(x, z) & r2(z, y)` also matches through z = x or z = y.

Measures, exactly as AMIE 3's `DefaultMiningAssistant(WithOrder)` computes them:

- support: distinct (x, y) with B & r(x, y) (`countDistinctPairs` on the head variables);
- head coverage: support / |r| (distinct facts of the head relation);
- standard confidence: support / |{(x, y) : B}| (the body size);
- PCA confidence: support / |{(x, y) : B & r(x, y')}| for some y', where the PCA is taken on the
  head relation's *functional variable*: AMIE's `findCountingVariable` picks the subject when
  `KB.isFunctional(r)`, i.e. functionality |subjects(r)| / |r| >= inverse functionality
  |objects(r)| / |r| (ties go to the subject), and the object otherwise; the other head
  variable is made existential (`computePCAConfidence`). So for a relation with more distinct
  objects than subjects the PCA body counts pairs whose *object* has some r-fact.

Thresholds: `min_head_coverage` is AMIE's pruning metric (`-minhc`, default 0.01),
`min_pca_confidence` (`-minpca`) and `min_std_confidence` (`-minc`) filter the output, and
`min_initial_support` is AMIE's `-minis` (head relations with fewer facts are skipped).
`min_support` is an absolute support threshold applied *in addition*; AMIE itself only applies
`-mins` when the pruning metric is support (`-pm support`), so the exact AMIE default is
`min_support=0`. AMIE's skyline filter is applied as well (`skyline=True`): a rule is output only
if its PCA confidence is strictly higher than that of every closed rule it refines, which, up to
three atoms, means a two-atom rule on (x, y) must beat both of its one-atom sub-rules (this also
covers AMIE's perfect-rule pruning: a rule with PCA confidence 1 is never refined). AMIE compares
with the parent it refined plus the ancestors already output, which depends on its queue order;
comparing with both sub-rules is the deterministic version (they differ only when a sub-rule
fails `min_std_confidence` while beating the child). `skyline=False` keeps every closed rule
that passes the thresholds, which AMIE has no switch for. AMIE's optional lossy optimisations
(`-optimcb`, `-optimfh`, off by default) are not used: every measure is exact.

How: the training facts become a table of directed edges (both directions of every fact, each
labelled with a *code* = 2 * relation + inverse). Support for all bodies of one head relation is
counted in one join from the head's pairs: one-atom and parallel bodies are the codes found on
the pair itself; path bodies are found by expanding the end of the pair with the smaller degree
and looking the other hop up in the edge table. Body sizes are counted with SciPy's
structure-only sparse product count (`csr_matmat_maxnnz`), which counts distinct (x, y) of a
two-hop path without materialising it; a cheap lower bound on the PCA body (per x, the largest
second-hop fan-out) discards hopeless candidates before any product is counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rulerag.rules.constant_columns import RuleSet
from rulerag.rules.rule import Atom, Rule
from rulerag.rules.settings import StaticMinerSettings, check_long_cyclic

try:  # structure-only nnz count of a sparse product (SciPy internal, stable for a decade)
    from scipy.sparse._sparsetools import csr_matmat_maxnnz as _csr_matmat_maxnnz
except ImportError:  # pragma: no cover - fallback materialises the product
    _csr_matmat_maxnnz = None

#: frontier entries (pair, neighbour) expanded at once when counting path support; bounds memory
_FRONTIER_CHUNK = 2_000_000


@dataclass
class _Edges:
    """Both directions of every distinct training fact, sorted by (src, dst, code).

    code = 2 * relation + inverse: code 2r walks r(src, dst) forwards, code 2r + 1 walks the fact
    r(dst, src) backwards, so a body atom read from src to dst is exactly one code.
    """

    n: int
    n_codes: int
    src: np.ndarray
    dst: np.ndarray
    code: np.ndarray
    key: np.ndarray  # src * n + dst, sorted
    indptr: np.ndarray  # edges of entity a: [indptr[a], indptr[a + 1])
    by_code: np.ndarray  # edge positions sorted by code (stable: (src, dst) order kept)
    code_ptr: np.ndarray  # edges of code c: by_code[code_ptr[c]:code_ptr[c + 1]]
    _adj: dict[int, sp.csr_matrix] = field(default_factory=dict)

    @property
    def deg(self) -> np.ndarray:
        return np.diff(self.indptr)

    def code_size(self, c: int) -> int:
        return int(self.code_ptr[c + 1] - self.code_ptr[c])

    def code_edges(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        pos = self.by_code[self.code_ptr[c] : self.code_ptr[c + 1]]
        return self.src[pos], self.dst[pos]

    def adj(self, c: int) -> sp.csr_matrix:
        """Boolean adjacency of one code (rows = src), built on first use and cached."""
        mat = self._adj.get(c)
        if mat is None:
            s, d = self.code_edges(c)
            indptr = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(np.bincount(s, minlength=self.n), out=indptr[1:])
            mat = sp.csr_matrix(
                (np.ones(len(d), dtype=np.int8), d.astype(np.int32), indptr.astype(np.int32)),
                shape=(self.n, self.n),
            )
            self._adj[c] = mat
        return mat

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each query key (src * n + dst): (query index, edge position) of every match."""
        lo = np.searchsorted(self.key, query, side="left")
        hi = np.searchsorted(self.key, query, side="right")
        return _expand(lo, hi - lo)


def _expand(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranges [starts[i], starts[i] + counts[i]) flattened: (owner index i, position)."""
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts)), counts)
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    pos = np.arange(total, dtype=np.int64) - np.repeat(offsets, counts) + np.repeat(starts, counts)
    return owner, pos


def _build_edges(facts: pd.DataFrame, n_entities: int, n_relations: int) -> _Edges:
    h = facts["head"].to_numpy(dtype=np.int64)
    r = facts["relation"].to_numpy(dtype=np.int64)
    t = facts["tail"].to_numpy(dtype=np.int64)
    for name, values, bound in (
        ("head", h, n_entities),
        ("tail", t, n_entities),
        ("relation", r, n_relations),
    ):
        if len(values) and (values.min() < 0 or values.max() >= bound):
            raise ValueError(f"facts column {name!r} has ids outside [0, {bound})")
    n, n_codes = n_entities, 2 * n_relations
    if n * n * max(n_codes, 1) >= 2**63:
        raise ValueError(f"{n} entities x {n_relations} relations overflow the int64 edge keys")
    src = np.concatenate([h, t])
    dst = np.concatenate([t, h])
    code = np.concatenate([2 * r, 2 * r + 1])
    full = np.unique((src * n + dst) * n_codes + code)  # dedupe facts, sort by (src, dst, code)
    code = full % n_codes
    key = full // n_codes
    src, dst = key // n, key % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    by_code = np.argsort(code, kind="stable")
    code_ptr = np.zeros(n_codes + 1, dtype=np.int64)
    np.cumsum(np.bincount(code, minlength=n_codes), out=code_ptr[1:])
    return _Edges(n, n_codes, src, dst, code, key, indptr, by_code, code_ptr)


def _pairs_within_groups(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """All (i, j), i < j, of positions in the same run of `group` (sorted): index arrays."""
    firsts, seconds = [], []
    d = 1
    while d < len(group):
        same = group[d:] == group[:-d]
        if not same.any():
            break
        i = np.flatnonzero(same)
        firsts.append(i)
        seconds.append(i + d)
        d += 1
    if not firsts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(firsts), np.concatenate(seconds)


def _product_nnz(a: sp.csr_matrix, b: sp.csr_matrix) -> int:
    """Distinct (row, col) pairs of the boolean product a @ b, without building it."""
    if a.nnz == 0 or b.nnz == 0:
        return 0
    if _csr_matmat_maxnnz is not None:
        return int(
            _csr_matmat_maxnnz(a.shape[0], b.shape[1], a.indptr, a.indices, b.indptr, b.indices)
        )
    return int((a @ b).nnz)  # pragma: no cover


@dataclass
class _Stats:
    """Counts of one candidate rule before it becomes a Rule."""

    body: tuple[Atom, ...]
    support: int
    body_size: int
    pca_body_size: int


def _atom(c: int, subject: int, obj: int) -> Atom:
    """The body atom for code c read from variable `subject` to variable `obj`."""
    rel, inverse = divmod(c, 2)
    return Atom(rel, obj, subject) if inverse else Atom(rel, subject, obj)


class _Miner:
    """Mines one head relation at a time over shared edges and caches (body sizes are shared
    between heads, so a std body size is counted once however many heads use that body)."""

    def __init__(self, edges: _Edges, settings: StaticMinerSettings) -> None:
        self.e = edges
        self.settings = settings
        self._std_cache: dict[tuple[int, int], int] = {}
        self._cooc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._cooc_std: np.ndarray | None = None

    # -- shared pieces ------------------------------------------------------------------------

    def cooccurrence(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (src, dst, c1 * C + c2), c1 < c2, of two codes linking the same pair: the
        bodies `c1(x, y) & c2(x, y)` and where they hold (computed once for all heads)."""
        if self._cooc is None:
            e = self.e
            i, j = _pairs_within_groups(e.key, e.code)
            pk = e.code[i] * e.n_codes + e.code[j]
            self._cooc = (e.src[i], e.dst[i], pk)
            self._cooc_std = np.bincount(pk, minlength=e.n_codes**2)
        return self._cooc

    def std_body_path(self, c1: int, c2: int) -> int:
        """|{(x, y) : c1(x, z) & c2(z, y)}|, cached: many heads share one body."""
        canon = min((c1, c2), (c2 ^ 1, c1 ^ 1))  # the reversed path has the same pair count
        value = self._std_cache.get(canon)
        if value is None:
            value = _product_nnz(self.e.adj(canon[0]), self.e.adj(canon[1]))
            self._std_cache[canon] = value
        return value

    # -- one head relation --------------------------------------------------------------------

    def mine_head(self, r: int) -> list[Rule]:
        """All rules with head r(x, y) that pass the thresholds (and the skyline)."""
        e = self.e
        hx, hy = e.code_edges(2 * r)
        m = len(hx)
        if m == 0 or m < self.settings.min_initial_support:
            return []
        thr = max(
            self.settings.min_support, math.ceil(self.settings.min_head_coverage * m - 1e-9), 1
        )
        if m < thr:
            return []
        subjects = np.zeros(e.n, dtype=bool)
        subjects[hx] = True
        objects = np.zeros(e.n, dtype=bool)
        objects[hy] = True
        # AMIE's findCountingVariable: subject iff functionality >= inverse functionality
        subject_functional = int(subjects.sum()) >= int(objects.sum())
        side = "subject" if subject_functional else "object"

        found: list[_Stats] = []
        single_pca: dict[int, float] = {}

        # codes linking x -> y directly, per head pair (the head's own code excluded)
        owner, pos = e.lookup(hx * e.n + hy)
        codes = e.code[pos]
        keep = codes != 2 * r
        owner, codes = owner[keep], codes[keep]

        # one body atom
        support1 = np.bincount(codes, minlength=e.n_codes)
        if subject_functional:
            pca1 = np.bincount(e.code, weights=subjects[e.src], minlength=e.n_codes)
        else:
            pca1 = np.bincount(e.code, weights=objects[e.dst], minlength=e.n_codes)
        for c in np.flatnonzero(support1 >= thr):
            c = int(c)
            sup, pca_body = int(support1[c]), int(pca1[c])
            single_pca[c] = sup / pca_body
            found.append(_Stats((_atom(c, 0, 1),), sup, e.code_size(c), pca_body))

        if self.settings.max_atoms >= 3:
            found.extend(self._parallel(owner, codes, thr, subjects, objects, subject_functional))
            found.extend(self._paths(hx, hy, thr, subjects, objects, subject_functional))

        rules = []
        for st in found:
            pca = st.support / st.pca_body_size
            std = st.support / st.body_size
            if pca < self.settings.min_pca_confidence or std < self.settings.min_std_confidence:
                continue
            parallel = _is_parallel(st.body)
            # skyline: only a rule on (x, y) refines closed rules (its one-atom sub-rules); a
            # path's parents r1(x, z) => r(x, y) are open and not compared, as in AMIE
            if (
                self.settings.skyline
                and parallel
                and any(pca <= single_pca.get(_code_of(a), -1.0) for a in st.body)
            ):
                continue
            rules.append(
                Rule(
                    head=Atom(r, 0, 1 if parallel else len(st.body)),
                    body=st.body,
                    support=float(st.support),
                    body_support=float(st.body_size),
                    pca_body_support=float(st.pca_body_size),
                    head_coverage=st.support / m,
                    std_confidence=std,
                    pca_confidence=pca,
                    extra={"functional_variable": side},
                )
            )
        return rules

    def _parallel(
        self,
        owner: np.ndarray,
        codes: np.ndarray,
        thr: int,
        subjects: np.ndarray,
        objects: np.ndarray,
        subject_functional: bool,
    ) -> Iterable[_Stats]:
        """Bodies c1(x, y) & c2(x, y): pairs of codes on the same head pair."""
        n_codes = self.e.n_codes
        i, j = _pairs_within_groups(owner, codes)
        if len(i) == 0:
            return []
        support = np.bincount(codes[i] * n_codes + codes[j], minlength=n_codes**2)
        cand = np.flatnonzero(support >= thr)
        if len(cand) == 0:
            return []
        src, dst, pk = self.cooccurrence()
        assert self._cooc_std is not None
        mask = subjects[src] if subject_functional else objects[dst]
        pca = np.bincount(pk[mask], minlength=n_codes**2)
        out = []
        for p in cand:
            c1, c2 = divmod(int(p), n_codes)
            body = (_atom(c1, 0, 1), _atom(c2, 0, 1))
            out.append(_Stats(body, int(support[p]), int(self._cooc_std[p]), int(pca[p])))
        return out

    def _paths(
        self,
        hx: np.ndarray,
        hy: np.ndarray,
        thr: int,
        subjects: np.ndarray,
        objects: np.ndarray,
        subject_functional: bool,
    ) -> Iterable[_Stats]:
        """Bodies c1(x, z) & c2(z, y): support of every (c1, c2) from one join over the head's
        pairs, then exact PCA and standard body sizes for the candidates that can pass."""
        e = self.e
        n_codes, m = e.n_codes, len(hx)
        deg = e.deg
        from_x = deg[hx] <= deg[hy]  # expand the cheaper end of each head pair
        support = np.zeros(n_codes * n_codes, dtype=np.int64)
        cost = np.where(from_x, deg[hx], deg[hy])
        bounds = np.searchsorted(np.cumsum(cost), np.arange(0, cost.sum(), _FRONTIER_CHUNK))
        bounds = np.unique(np.concatenate([bounds, [m]]))
        start = 0
        for stop in bounds:
            if stop <= start:
                continue
            idx = np.arange(start, stop)
            start = stop
            chunks = []
            for expand_x in (True, False):
                sel = idx[from_x[idx] == expand_x]
                if len(sel) == 0:
                    continue
                end = hx[sel] if expand_x else hy[sel]
                pair, epos = _expand(e.indptr[end], deg[end])
                pair = sel[pair]
                z = e.dst[epos]
                if expand_x:  # x -c1-> z, then look z -c2-> y up
                    first = e.code[epos]
                    q_owner, q_pos = e.lookup(z * e.n + hy[pair])
                    c1, c2 = first[q_owner], e.code[q_pos]
                else:  # y -c-> z is z -(c^1)-> y; look x -c1-> z up
                    last = e.code[epos] ^ 1
                    q_owner, q_pos = e.lookup(hx[pair] * e.n + z)
                    c1, c2 = e.code[q_pos], last[q_owner]
                chunks.append((c1 * n_codes + c2) * m + pair[q_owner])
            if chunks:
                distinct = np.unique(np.concatenate(chunks))
                support += np.bincount(distinct // m, minlength=n_codes * n_codes)
        cand = np.flatnonzero(support >= thr)
        if len(cand) == 0:
            return []

        out = []
        c1s, c2s = np.divmod(cand, n_codes)
        # PCA body = distinct (x, y) of the path with the functional end restricted to the
        # head's subjects (or objects); an object restriction is the reversed path's rows.
        if subject_functional:
            rows, firsts, seconds = subjects, c1s, c2s
        else:
            rows, firsts, seconds = objects, c2s ^ 1, c1s ^ 1
        for first in np.unique(firsts):
            a = e.adj(int(first))
            keep_rows = np.flatnonzero(rows & (np.diff(a.indptr) > 0))
            a_rows = a[keep_rows]
            row_starts = a_rows.indptr[:-1]
            for k in np.flatnonzero(firsts == first):
                sup = int(support[cand[k]])
                b = e.adj(int(seconds[k]))
                fanout = np.diff(b.indptr)[a_rows.indices]
                lower = int(np.maximum.reduceat(fanout, row_starts).sum()) if len(fanout) else 0
                if sup < self.settings.min_pca_confidence * lower:
                    continue  # PCA confidence <= support / lower bound < threshold
                pca_body = _product_nnz(a_rows, b)
                if sup < self.settings.min_pca_confidence * pca_body:
                    continue
                c1, c2 = int(c1s[k]), int(c2s[k])
                std_body = self.std_body_path(c1, c2)
                out.append(_Stats((_atom(c1, 0, 1), _atom(c2, 1, 2)), sup, std_body, pca_body))
        return out


def _is_parallel(body: tuple[Atom, ...]) -> bool:
    """Two body atoms both on the head's pair (x, y) = variables {0, 1}."""
    return len(body) == 2 and all({a.subject, a.object} == {0, 1} for a in body)


def _code_of(atom: Atom) -> int:
    """The code of a body atom read from variable 0 to variable 1."""
    return 2 * atom.relation + (1 if atom.subject == 1 else 0)


def _sort_key(rule: Rule) -> tuple:
    return (rule.head.relation, -rule.score, len(rule.body), rule.body, rule.constants)


_DEFAULT = StaticMinerSettings()


def mine_static(
    facts: pd.DataFrame,
    n_entities: int,
    n_relations: int,
    settings: StaticMinerSettings = _DEFAULT,
    *,
    seed: int = 12,
    progress: bool = True,
) -> list[Rule]:
    """`mine_static_set`'s rules, every one a `Rule`, sorted by head relation, score
    (descending) and structure."""
    found = mine_static_set(facts, n_entities, n_relations, settings, seed=seed, progress=progress)
    if found.constants is None:
        return found.objects
    return sorted(found, key=_sort_key)


def mine_static_set(
    facts: pd.DataFrame,
    n_entities: int,
    n_relations: int,
    settings: StaticMinerSettings = _DEFAULT,
    *,
    seed: int = 12,
    progress: bool = True,
) -> RuleSet:
    """Mine closed Horn rules of up to `settings.max_atoms` atoms (head included) from static
    facts, with params.yaml `mine_rules.static`'s thresholds (`settings`).

    `facts` are the training facts (columns head, relation, tail; any others are ignored),
    deduplicated here. Returns rules sorted by head relation, then PCA confidence (descending),
    then structure; each carries support, body_support (the standard-confidence denominator),
    pca_body_support, head_coverage, std_confidence and pca_confidence, and
    `extra["functional_variable"]` ("subject" or "object": the head end the PCA was taken on).
    See the module docstring for the exact semantics and how they relate to AMIE 3's flags.

    With `settings.constants.kinds`, AnyBURL's rules with constants of those kinds follow (each
    head relation's after its closed rules; `anyburl_miner`), scored by AnyBURL's confidence;
    with `settings.long_cyclic.samples_per_head`, AnyBURL's cyclic rules of three body atoms
    (`long_cyclic`, sampled with `seed`), scored the same way. The rules with constants come
    as the set's columns (millions of rules: no `Rule` object each), the others as objects.
    """
    constants, long_cyclic = settings.constants, settings.long_cyclic
    check_long_cyclic(long_cyclic, constants)
    if settings.max_atoms not in (2, 3):
        raise ValueError(f"max_atoms must be 2 or 3, got {settings.max_atoms}")
    for name in ("min_head_coverage", "min_pca_confidence", "min_std_confidence"):
        value = getattr(settings, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if settings.min_support < 0 or settings.min_initial_support < 0:
        raise ValueError("min_support and min_initial_support must be >= 0")
    edges = _build_edges(facts, n_entities, n_relations)
    miner = _Miner(edges, settings)
    heads: Iterable[int] = range(n_relations)
    if progress:
        from tqdm.auto import tqdm

        heads = tqdm(heads, desc="static rules", unit="head")
    rules = sorted((rule for r in heads for rule in miner.mine_head(r)), key=_sort_key)
    if constants.closed_confidence != "pca":
        from rulerag.rules.anyburl_miner import closed_rules_confidence

        rules = sorted(closed_rules_confidence(rules, constants), key=_sort_key)
    if not (long_cyclic.enabled or constants.kinds):
        return RuleSet(rules)
    # AnyBURL's further kinds, from the same fact arrays
    triples = [facts[c].to_numpy(np.int64) for c in ("head", "relation", "tail")]
    more: list[Rule] = []
    if long_cyclic.enabled:
        from rulerag.rules.long_cyclic import mine_long_cyclic_rules

        more += mine_long_cyclic_rules(
            *triples,
            n_entities,
            n_relations,
            long_cyclic,
            unseen_negatives=constants.unseen_negatives,
            seed=seed,
            progress=progress,
        )
    with_constants = None
    if constants.kinds:
        from rulerag.rules.anyburl_miner import mine_constant_columns

        with_constants = mine_constant_columns(*triples, n_entities, n_relations, constants)
    return RuleSet(sorted([*rules, *more], key=_sort_key), with_constants)
