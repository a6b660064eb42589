"""An immutable view of the cluster, built once per state change.

Everything a request needs that does not depend on the pod is precomputed here:
the node index (taint groups, inverted label index) and pods grouped by namespace.
Plugins with heavier needs (PodTopologySpread's per-namespace label index) hang their
own derived indexes off `derived`, built lazily once per snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from cachetools import LRUCache

from extender.model import Node, Pod
from extender.model.parse import ModelError, existing_pod_from_dict, node_from_dict
from extender.state.loader import ClusterFileError
from extender.state.nodeset import NodeIndex, get_or_build

WORKLOAD_KINDS = ("Service", "ReplicaSet", "StatefulSet", "ReplicationController")
MEMO_SIZE = 128  # entries can be node-name sets of the whole cluster: ~0.25 MB each at 5k nodes


def _workloads_by_namespace(snapshot: ClusterSnapshot) -> dict[tuple[str, str], list[dict[str, Any]]]:
    index: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for kind, objects in snapshot.workloads.items():
        for w in objects:
            namespace = (w.get("metadata") or {}).get("namespace") or "default"
            index.setdefault((kind, namespace), []).append(w)
    return index


class ClusterSnapshot:
    def __init__(
        self,
        nodes: Iterable[Node],
        pods: Iterable[Pod] = (),
        workloads: dict[str, list[dict[str, Any]]] | None = None,
        generation: int = 0,
    ) -> None:
        self.nodes = NodeIndex(list(nodes))
        self.pods: list[Pod] = list(pods)
        self.pods_by_namespace: dict[str, list[Pod]] = {}
        for pod in self.pods:
            self.pods_by_namespace.setdefault(pod.namespace, []).append(pod)
        self.workloads = workloads or {k: [] for k in WORKLOAD_KINDS}
        self.generation = generation
        self._derived: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._memo: LRUCache = LRUCache(MEMO_SIZE)
        self._memo_lock = threading.Lock()

    def derived(self, key: str, build: Callable[[ClusterSnapshot], Any]) -> Any:
        """Get or build (once, thread-safely) an index derived from this snapshot."""
        value = self._derived.get(key)
        if value is None:
            with self._lock:
                value = self._derived.get(key)
                if value is None:
                    value = build(self)
                    self._derived[key] = value
        return value

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """Per-snapshot memo of pure, pod-shape-keyed answers.

        Pods of one workload share their constraints, so e.g. "which nodes fail these
        tolerations" is answered once per snapshot, not once per pod. The snapshot is
        immutable, so entries never go stale; a new snapshot starts empty. `compute`
        runs outside the lock (a racing duplicate is harmless: answers are pure).
        """
        return get_or_build(self._memo, self._memo_lock, key, compute)

    def workloads_in(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Workload objects of one kind in one namespace (indexed once per snapshot)."""
        return self.derived("workloads-by-namespace", _workloads_by_namespace).get((kind, namespace), [])

    def counts(self) -> dict[str, int]:
        out = {"nodes": len(self.nodes.nodes), "pods": len(self.pods)}
        for kind in WORKLOAD_KINDS:
            out[kind.lower() + "s"] = len(self.workloads.get(kind, ()))
        return out

    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]], generation: int = 0) -> ClusterSnapshot:
        nodes, pods = [], []
        workloads: dict[str, list[dict[str, Any]]] = {k: [] for k in WORKLOAD_KINDS}
        seen_nodes: set[str] = set()
        for i, obj in enumerate(objects):
            kind = obj.get("kind")
            try:
                if kind == "Node":
                    node = node_from_dict(obj)
                    if not node.name:
                        raise ModelError("node without metadata.name")
                    if node.name in seen_nodes:
                        raise ModelError(f"duplicate node {node.name!r}")
                    seen_nodes.add(node.name)
                    nodes.append(node)
                elif kind == "Pod":
                    pods.append(existing_pod_from_dict(obj))
                elif kind in workloads:
                    workloads[kind].append(obj)
            except ModelError as exc:
                raise ClusterFileError(f"object #{i} ({kind}): {exc}") from exc
        return cls(nodes, pods, workloads, generation)
