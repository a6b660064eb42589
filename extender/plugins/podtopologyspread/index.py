"""PodTopologySpread's view of a snapshot: everything it needs that does not depend on
the pod, answered from the pod layer's per-namespace indexes (`extender.state.podindex`)
and the node layer, and built once per snapshot (`spread_index`)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from extender.state.podindex import NamespacePods, node_code
from extender.state.snapshot import ClusterSnapshot, Reads

INDEX_KEY = "pod-label-index"

_EMPTY = NamespacePods()


class SpreadIndex:
    """Everything PodTopologySpread needs from a snapshot that does not depend on the pod.

    A view, built in O(1): the pod layer's per-namespace buckets (shared by every
    snapshot until their namespace changes) and the node layer. Node-only answers are
    memoised on the node layer, so they survive pod events. The snapshot is held
    weakly: a strong reference would make a cycle (snapshot -> memo -> index ->
    snapshot) that only a full collection frees."""

    __slots__ = ("_snapshot", "namespaces", "nodes")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = weakref.ref(snapshot)
        self.namespaces: Mapping[str, NamespacePods] = snapshot.pod_layer.namespaces
        self.nodes = snapshot.nodes

    @property
    def snapshot(self) -> ClusterSnapshot:
        snapshot = self._snapshot()
        if snapshot is None:  # pragma: no cover - readers hold their snapshot
            raise RuntimeError("SpreadIndex used after its snapshot was released")
        return snapshot

    def namespace(self, namespace: str) -> NamespacePods:
        return self.namespaces.get(namespace, _EMPTY)

    def own_counts(self, namespace: str, selector: Any) -> np.ndarray:
        """Matching counted pods on each node of the snapshot's node layer, as an int64
        vector over it (read-only), memoized per snapshot: a gather from the
        per-selector counts by node code (`NamespacePods.code_counts`, patched as pods
        come and go), no loop over names."""

        def compute() -> np.ndarray:
            vector = self.own_vector(namespace, selector, self.nodes)
            vector.flags.writeable = False
            return vector

        return self.snapshot.memo(("PTS own", namespace, selector), compute, Reads.PODS)

    def own_vector(self, namespace: str, selector: Any, universe: Any) -> np.ndarray:
        """Matching counted pods on each node of `universe` (a NodeIndex), as an int64
        vector over it: a gather from the per-selector counts by node code."""
        codes = universe.memo(("node codes",), lambda: np.fromiter(
            (node_code(n.name) for n in universe.nodes), dtype=np.intp, count=len(universe.nodes)),
            Reads.TAINTS)
        by_code = self.namespace(namespace).code_counts(selector)
        out = np.zeros(len(codes), dtype=np.int64)
        known = codes < len(by_code)
        out[known] = by_code[codes[known]]
        return out


def spread_index(snapshot: ClusterSnapshot) -> SpreadIndex:
    return snapshot.memo(INDEX_KEY, lambda: SpreadIndex(snapshot), Reads.PODS)
