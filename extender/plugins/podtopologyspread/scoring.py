"""PreScore / Score / NormalizeScore (spec §4).

PreScore seeds domains from the candidate (feasible) nodes only and marks nodes that
lack a topology key as ignored (when all keys are required); counting then covers every
snapshot node whose domain was seeded, so pods on infeasible nodes of a seeded domain
count too (SC11). Weights are `ln(size + 2)`; hostname constraints are never seeded and
count the node's own pods on the spot, without inclusion policies. Scores are summed
as float64 in constraint order and rounded half away from zero, as Go's `math.Round`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np

from extender.framework.interface import MAX_NODE_SCORE, NodeScore
from extender.model import Node, Pod
from extender.plugins.podtopologyspread.common import (
    Constraint,
    EligibleMasks,
    Inclusion,
    counts_pods,
    has_keys,
)
from extender.plugins.podtopologyspread.filtering import plain_counted, topology_keys
from extender.plugins.podtopologyspread.index import SpreadIndex
from extender.state.nodeset import NodeIndex, NodeSet, Reads
from extender.state.snapshot import ClusterSnapshot

PRE_SCORE_KEY = "PreScorePodTopologySpread"


def go_round(x: float) -> int:
    """`math.Round` for x >= 0: half away from zero, exact (no `x + 0.5` error)."""
    r = math.floor(x)
    return int(r + 1 if x - r >= 0.5 else r)


@dataclass(slots=True)
class PreScoreState:
    constraints: list[Constraint]
    keys: tuple[str, ...]
    require_all: bool
    ignored: frozenset[str]  # this and the next four: shared per candidate set (`seed`)
    live: np.ndarray  # per candidate (request order): not ignored
    seeded: list[frozenset[str] | None]  # None for hostname constraints
    seeded_codes: list[np.ndarray | None]  # the same, per label code of the universe
    weights: list[float]
    inclusion: Inclusion
    counts: list[np.ndarray | None] | None = None  # fast path, lazily: per label code of `layer`
    layer: NodeIndex | None = None  # the snapshot's node layer `counts` is over
    reference: tuple[list[dict[str, int] | None], dict[str, list[Pod]]] | None = None


def new_state(
    constraints: list[Constraint], require_all: bool, nodes: NodeSet, inclusion: Inclusion
) -> PreScoreState:
    """The pod's PreScore state; what it holds about the candidates depends only on the
    constraints' topology keys (`seed`), so it is computed once per candidate set."""
    keys = topology_keys(constraints)
    layout = tuple((c.topology_key, c.is_hostname) for c in constraints)
    ignored, live, seeded, seeded_codes, weights = nodes.memo(
        ("PTS seeded", layout, require_all), lambda: seed(constraints, keys, require_all, nodes), Reads.CANDIDATES)
    return PreScoreState(constraints, keys, require_all, ignored, live, seeded, seeded_codes, weights, inclusion)


def seed(constraints: list[Constraint], keys: tuple[str, ...], require_all: bool, nodes: NodeSet
         ) -> tuple[frozenset[str], np.ndarray, list[frozenset[str] | None], list[np.ndarray | None], list[float]]:
    """Seed domains from the candidates with vectors over the universe's label codes (no
    per-node loop): nodes lacking a key are ignored when all keys are required, and
    otherwise seed the empty domain, as `labels[key]` reads "" in Go. Reads only each
    constraint's topology key and whether it is the hostname: shared, never mutated."""
    universe = nodes.universe
    uidx = nodes.uidx
    live = np.ones(len(uidx), dtype=bool)
    ignored: frozenset[str] = frozenset()
    if require_all and keys:
        live = np.logical_and.reduce([universe.codes(k)[0][uidx] >= 0 for k in keys])
        if not live.all():
            ignored = frozenset(compress(nodes.order, ~live))
    seeded: list[frozenset[str] | None] = []
    seeded_codes: list[np.ndarray | None] = []
    for c in constraints:
        if c.is_hostname:
            seeded.append(None)
            seeded_codes.append(None)
            continue
        codes, values = universe.codes(c.topology_key)
        present = (np.flatnonzero(np.bincount(codes[uidx][live] + 1)) - 1).tolist()  # codes in use, -1 too
        domains = frozenset(values[code] if code >= 0 else "" for code in present)
        seeded.append(domains)
        mask = np.zeros(len(values), dtype=bool)
        mask[[code for code, value in enumerate(values) if value in domains]] = True
        mask.flags.writeable = False
        seeded_codes.append(mask)
    weights = []
    distinct = int(np.count_nonzero(np.bincount(uidx, minlength=len(universe.nodes)))) if len(uidx) else 0
    for domains in seeded:
        size = distinct - len(ignored) if domains is None else len(domains)
        weights.append(math.log(size + 2))
    live.flags.writeable = False
    return ignored, live, seeded, seeded_codes, weights


def indexed_counts(index: SpreadIndex, pod: Pod, st: PreScoreState, masks: EligibleMasks) -> list[np.ndarray | None]:
    """Per constraint (None: hostname), matching pods per label code of the snapshot's
    node layer, on the eligible nodes, kept for the seeded domains only (0 elsewhere).
    A node lacking the key counts into the domain "" (`labels[key]` in Go), which
    matters only where some node's value is "" and that domain is seeded."""
    layer = index.nodes
    keys = st.keys if st.require_all else ()
    out: list[np.ndarray | None] = []
    for c, seeded in zip(st.constraints, st.seeded_codes, strict=True):
        if seeded is None:
            out.append(None)
            continue
        codes, values = layer.codes(c.topology_key)
        per_code = np.zeros(len(values), dtype=np.int64)
        if counts_pods(c):
            eligible = masks.eligible(c, keys)
            own = index.own_counts(pod.namespace, c.selector)
            labelled = eligible & (codes >= 0)
            per_code = np.bincount(codes[labelled], weights=own[labelled], minlength=len(values)).astype(np.int64)
            blank = layer.code_of(c.topology_key).get("")
            if blank is not None:
                per_code[blank] += int(own[eligible & (codes < 0)].sum())
        out.append(np.where(seeded, per_code, 0))
    return out


def reference_counts(
    snapshot: ClusterSnapshot, pod: Pod, st: PreScoreState
) -> tuple[list[dict[str, int] | None], dict[str, list[Pod]]]:
    pods_on: dict[str, list[Pod]] = {}
    for p in snapshot.pods:
        if plain_counted(p) and p.namespace == pod.namespace:
            pods_on.setdefault(p.node_name, []).append(p)
    out: list[dict[str, int] | None] = [
        None if d is None else dict.fromkeys(d, 0) for d in st.seeded
    ]
    for node in snapshot.nodes.nodes:
        if st.require_all and not has_keys(node, st.keys):
            continue
        for c, counts in zip(st.constraints, out, strict=True):
            if counts is None or not st.inclusion.eligible(node, c):
                continue
            value = node.labels.get(c.topology_key, "")
            if value in counts and counts_pods(c):
                counts[value] += sum(1 for p in pods_on.get(node.name, ()) if c.selector.matches(p.labels))
    return out, pods_on


def raw_score(
    st: PreScoreState, counts: list[dict[str, int] | None], node: Node, own: Mapping[int, int]
) -> int:
    """`own[i]`: matching pods on the node itself, for hostname constraint i."""
    if node.name in st.ignored:
        return 0
    labels = node.labels
    return raw_from_values(st, counts, [labels.get(c.topology_key) for c in st.constraints], own)


def raw_from_values(
    st: PreScoreState,
    counts: list[dict[str, int] | None],
    values: Sequence[str | None],
    own: Mapping[int, int],
) -> int:
    """The raw score of a node whose constraint i has topology value `values[i]`
    (None: the node lacks the key). Float sum in constraint order, then Go rounding."""
    score = 0.0
    for i, c in enumerate(st.constraints):
        value = values[i]
        if value is None:
            continue
        domain = counts[i]
        cnt = own.get(i, 0) if domain is None else domain.get(value, 0)
        score += cnt * st.weights[i] + float(c.max_skew - 1)
    return go_round(score)


def normalize(st: PreScoreState, scores: list[NodeScore]) -> None:
    """Upstream NormalizeScore: ignored nodes 0; maxScore == 0 -> 100; else
    100 * (max + min - s) // max over the non-ignored nodes."""
    live = [s.score for s in scores if s.name not in st.ignored]
    max_score = max([0, *live])
    min_score = min(live) if live else 0
    for s in scores:
        if s.name in st.ignored:
            s.score = 0
        elif max_score == 0:
            s.score = MAX_NODE_SCORE
        else:
            s.score = MAX_NODE_SCORE * (max_score + min_score - s.score) // max_score


def raw_vector(
    st: PreScoreState, nodes: NodeSet, counts: list[np.ndarray | None], own: Mapping[int, np.ndarray]
) -> np.ndarray:
    """`raw_score` for every candidate at once (the batch path). `counts[i]`: matching
    pods per label code of the snapshot's layer (`indexed_counts`); `own[i]`: matching
    pods per universe node, for hostname constraint i. The same float64 operations in
    the same order as `raw_from_values`, so the results are bit-identical."""
    uidx = nodes.uidx
    score = np.zeros(len(uidx))
    for i, c in enumerate(st.constraints):
        codes, values = nodes.universe.codes(c.topology_key)
        node_codes = codes[uidx]
        domain = counts[i]
        if domain is None:
            cnt = own[i][uidx] if i in own else np.zeros(len(uidx), dtype=np.int64)
        else:
            cnt = _over(domain, st.layer, c.topology_key, nodes.universe)[node_codes]  # code -1: masked below
        term = cnt * st.weights[i] + float(c.max_skew - 1)
        score = score + np.where(node_codes >= 0, term, 0.0)
    floor = np.floor(score)
    rounded = (floor + (score - floor >= 0.5)).astype(np.int64)
    rounded[~st.live] = 0
    return rounded


def _over(per_code: np.ndarray, layer: NodeIndex, key: str, universe: NodeIndex) -> np.ndarray:
    """Counts per label code of `key` in `layer` as counts per code of `universe`, with
    a last slot (0) for code -1: the vector itself over the same layer, mapped by value
    over another (a Nodes-mode request's nodes)."""
    if universe is layer:
        return np.append(per_code, 0)
    by_value = dict(zip(layer.codes(key)[1], per_code.tolist(), strict=False))
    values = universe.codes(key)[1]
    return np.fromiter((by_value.get(v, 0) for v in (*values, None)), dtype=np.int64, count=len(values) + 1)


def normalize_values(st: PreScoreState, raw: np.ndarray) -> np.ndarray:
    """`normalize` on a vector (the batch path)."""
    live = raw[st.live]
    max_score = max(int(live.max()), 0) if len(live) else 0
    min_score = int(live.min()) if len(live) else 0
    if max_score == 0:
        values = np.full(len(raw), MAX_NODE_SCORE, dtype=np.int64)
    else:
        values = MAX_NODE_SCORE * (max_score + min_score - raw) // max_score
    values[~st.live] = 0
    return values
