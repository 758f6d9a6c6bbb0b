"""AnyBURL's cyclic rules of three body atoms, found bottom-up and counted exactly.

AMIE's refinement (`static_miner`) stops at two body atoms here; AnyBURL (Meilicke et al.,
IJCAI 2019; its default `MAX_LENGTH_CYCLIC = 3`) also learns closed paths of three,

    r(X, Y) <= s1(X, A), s2(A, B), s3(B, Y)      each atom read either way,

which on FB15k-237 name candidates no shorter rule reaches (docs/results.md "Cyclic rules of
three body atoms"). Finding them as AnyBURL does, bottom-up: for each head relation r, sample
`samples_per_head` of its facts r(x, y) (seeded) and collect the relation sequences of every
path x - a - b - y of three edges (edges of either direction, at most `neighbour_cap` sampled
neighbours per step) under AnyBURL's object identity (x, y, a, b pairwise distinct, so the
head's own fact is never its body); a sequence seen in at least `min_seen` sampled facts is a
candidate, at most `rules_per_head` of them per head, the most often seen first.

Counting, exact rather than AnyBURL's sampled body groundings: the body pairs are the (X, Y),
X != Y, that some path of the three relations joins (a boolean sparse product of the three
relations' adjacency matrices, each prefix s1 s2 computed once), the support those with r(X, Y)
in the training facts; confidence = support / (body pairs + pc), AnyBURL's applied confidence
with pc its `UNSEEN_NEGATIVE_EXAMPLES` (`mine_rules.static.constants.unseen_negatives`). The
intermediate nodes A and B are not kept distinct from X and Y in the count (AMIE's and
AnyBURL's counts differ there too; a path that revisits X or Y is rare and its pair counted
once). So these rules share the scale of AnyBURL's confidence, which is why they need
`constants.closed_confidence: anyburl` for the shorter closed rules beside them.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.sparse import csr_matrix

from rulerag.rules.rule import Atom, Rule
from rulerag.rules.settings import LongCyclicSettings


def mine_long_cyclic_rules(
    head: np.ndarray,
    relation: np.ndarray,
    tail: np.ndarray,
    n_entities: int,
    n_relations: int,
    settings: LongCyclicSettings,
    *,
    unseen_negatives: int,
    seed: int,
    progress: bool = True,
) -> list[Rule]:
    """The rules the module docstring describes, from the (training) facts head-relation-tail;
    each with support, body_support (the body pairs) and confidence, sorted by head relation,
    confidence descending, then body."""
    if not settings.enabled:
        return []
    nr = n_relations
    head, relation, tail = (np.asarray(a, np.int64) for a in (head, relation, tail))
    keep = head != tail
    adjacency = _adjacency(head[keep], relation[keep], tail[keep], n_entities, nr)
    candidates = _candidates(head, relation, tail, nr, settings, seed, progress)
    by_prefix: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for r, bodies in candidates.items():
        for s1, s2, s3 in bodies:
            by_prefix[(s1, s2)].append((s3, r))
    rules = []
    prefixes: Iterable[tuple[int, int]] = sorted(by_prefix)
    if progress:
        from tqdm.auto import tqdm

        prefixes = tqdm(prefixes, desc="cyclic rules of 3 atoms", unit="prefix")
    for s1, s2 in prefixes:
        first = _boolean(adjacency[s1] @ adjacency[s2])
        for s3, r in by_prefix[(s1, s2)]:
            body = _boolean(first @ adjacency[s3])
            body.setdiag(False)
            body.eliminate_zeros()
            support = int(body.multiply(adjacency[r]).nnz)
            confidence = support / (body.nnz + unseen_negatives)
            if support < settings.min_support or confidence < settings.min_confidence:
                continue
            atoms = tuple(
                Atom(s, k, k + 1) if s < nr else Atom(s - nr, k + 1, k)
                for k, s in enumerate((s1, s2, s3))
            )
            rules.append(
                Rule(
                    head=Atom(r, 0, 3),
                    body=atoms,
                    support=float(support),
                    body_support=float(body.nnz),
                    std_confidence=support / body.nnz,
                    confidence=float(confidence),
                )
            )
    rules.sort(key=lambda rule: (rule.head.relation, -rule.score, rule.body))
    return rules


def _adjacency(
    head: np.ndarray, relation: np.ndarray, tail: np.ndarray, n: int, nr: int
) -> list[csr_matrix]:
    """One boolean n x n matrix per relation code: r walks r(x, y), r + nr walks it backwards
    (the transpose of r's)."""
    forward = []
    for r in range(nr):
        mask = relation == r
        data = np.ones(int(mask.sum()), bool)
        forward.append(_boolean(csr_matrix((data, (head[mask], tail[mask])), shape=(n, n))))
    return forward + [_boolean(matrix.T) for matrix in forward]


def _boolean(matrix: csr_matrix) -> csr_matrix:
    """The matrix's pattern as booleans (a product's counts are not needed, its nonzeros are)."""
    matrix = matrix.tocsr()
    matrix.data = np.ones(len(matrix.data), bool)
    return matrix


def _candidates(
    head: np.ndarray,
    relation: np.ndarray,
    tail: np.ndarray,
    nr: int,
    settings: LongCyclicSettings,
    seed: int,
    progress: bool,
) -> dict[int, list[tuple[int, int, int]]]:
    """Head relation -> the relation sequences (codes) of the sampled paths, most seen first."""
    edges: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for h, r, t in zip(head.tolist(), relation.tolist(), tail.tolist(), strict=True):
        edges[h].append((r, t))
        edges[t].append((r + nr, h))
    rng = random.Random(seed)
    heads: Iterable[int] = range(nr)
    if progress:
        from tqdm.auto import tqdm

        heads = tqdm(heads, desc="sampling paths of 3", unit="head")
    out: dict[int, list[tuple[int, int, int]]] = {}
    for r in heads:
        facts = np.flatnonzero(relation == r).tolist()
        if not facts:
            continue
        seen: Counter[tuple[int, int, int]] = Counter()
        for i in rng.sample(facts, min(settings.samples_per_head, len(facts))):
            seen.update(_paths(int(head[i]), int(tail[i]), edges, nr, settings, rng))
        ranked = sorted(seen.items(), key=lambda item: (-item[1], item[0]))
        out[r] = [body for body, count in ranked[: settings.rules_per_head]
                  if count >= settings.min_seen]  # fmt: skip
    return out


def _paths(
    x: int,
    y: int,
    edges: dict[int, list[tuple[int, int]]],
    nr: int,
    settings: LongCyclicSettings,
    rng: random.Random,
) -> set[tuple[int, int, int]]:
    """The relation sequences of the paths x - a - b - y (x, y, a, b pairwise distinct)."""
    into_y: dict[int, set[int]] = defaultdict(set)
    for code, b in edges[y]:
        into_y[b].add((code + nr) % (2 * nr))  # b walks into y by the inverse code
    found = set()
    for s1, a in _sample(edges[x], settings.neighbour_cap, rng):
        if a in (x, y):
            continue
        for s2, b in _sample(edges[a], settings.neighbour_cap, rng):
            if b in (x, y, a) or b not in into_y:
                continue
            found.update((s1, s2, s3) for s3 in into_y[b])
    return found


def _sample(items: Sequence, cap: int, rng: random.Random) -> Sequence:
    return items if len(items) <= cap else rng.sample(items, cap)
