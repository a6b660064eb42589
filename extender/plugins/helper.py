"""Helpers shared by plugins (upstream `pkg/scheduler/framework/plugins/helper`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from extender.framework import NodeScore, Status
from extender.framework.handle import SNAPSHOT_KEY
from extender.matching.tolerations import do_not_schedule
from extender.state.nodeset import Reads


def default_normalize_score(max_priority: int, reverse: bool, scores: list[NodeScore]) -> Status:
    """`DefaultNormalizeScore`: scale to [0, max_priority] by the maximum (integer
    division); all zero stays zero, or becomes max_priority when reversed."""
    max_count = max((s.score for s in scores), default=0)
    if max_count == 0:
        if reverse:
            for s in scores:
                s.score = max_priority
        return Status()
    for s in scores:
        value = max_priority * s.score // max_count
        s.score = max_priority - value if reverse else value
    return Status()


def default_normalize_values(max_priority: int, reverse: bool, raw: Sequence[int]) -> np.ndarray:
    """`default_normalize_score` on a vector (the batch path: no NodeScore objects)."""
    raw = np.asarray(raw, dtype=np.int64)
    max_count = int(raw.max()) if len(raw) else 0
    if max_count == 0:
        return np.full(len(raw), max_priority, dtype=np.int64) if reverse else raw
    scaled = max_priority * raw // max_count
    return max_priority - scaled if reverse else scaled


def universe_values(
    state, nodes, key, by_name: Callable[[], Mapping[str, int]], reads: Reads = Reads.NODES,
) -> np.ndarray:
    """A sparse name -> value answer (names outside the universe are dropped) as a
    vector over the universe, memoized per pod shape (`key`) where `universe_memo`
    applies, as long as what it `reads` stands."""

    def vector() -> np.ndarray:
        return nodes.universe.vector(by_name())

    values = universe_memo(state, nodes, key, vector, reads)
    return vector() if values is None else values


def universe_memo(state, nodes, key, compute, reads: Reads = Reads.NODES):
    """Answer over the snapshot's whole node universe, memoized per pod shape (`key`)
    as long as what it `reads` stands (`ClusterSnapshot.memo`: node-layer answers
    survive pod events and binds, taint-only ones also node events that change no
    taint); None when memoising does not apply: explain runs (they want details) and
    `Nodes`-mode requests (their nodes are not the snapshot's)."""
    snapshot = state.get(SNAPSHOT_KEY)
    if snapshot is None or state.explain or nodes.universe is not snapshot.nodes:
        return None
    return snapshot.memo(key, compute, reads)


def untolerated_mask(universe, pod, matcher, gates) -> np.ndarray:
    """Universe nodes with a NoSchedule/NoExecute taint the pod does not tolerate, as a
    bool vector over the universe (read-only: shared).

    One answer per node layer and toleration set, shared by TaintToleration's Filter and
    PodTopologySpread's `nodeTaintsPolicy: Honor`; each distinct taint is checked once
    (`extender.state.taints`)."""
    def compute() -> np.ndarray:
        table = universe.taint_table()
        mask = table.any_per_node(table.flags(lambda t: do_not_schedule(t) and not matcher.tolerated(t)))
        mask.flags.writeable = False
        return mask

    return universe.memo(("untolerated", pod.tolerations, gates), compute, Reads.TAINTS)
