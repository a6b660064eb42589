"""Pod-side indexes for PodTopologySpread, so counting costs O(matching pods + nodes).

Upstream walks every node's pod list for every request; at 100k pods that is the whole
request budget. The pod layer keeps these indexes up to date event by event
(`extender.state.layers`) and answers selectors with set algebra:

* per namespace, label key -> value -> ids of the *counted* pods (assigned to a node,
  phase not Succeeded/Failed, no deletionTimestamp: what the scheduler cache holds and
  `countPodsMatchSelector` keeps);
* per namespace, the unassigned pods that carry `status.nominatedNodeName`;
* node-side helpers: names of nodes that carry a set of label keys, and node names per
  distinct taint tuple (eligibility under `nodeTaintsPolicy` is decided per tuple).

Selectors are duck-typed (`nothing`, `requirements` of `key`/`op`/`values` with ops
In/NotIn/Exists/DoesNotExist) so this module does not depend on the plugin package.
Results per (namespace, selector) are memoized per namespace bucket: a pod event
replaces the bucket of its namespace only, so other namespaces keep their answers.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from extender.model import Pod, Taint

if TYPE_CHECKING:
    from extender.state.snapshot import ClusterSnapshot

INDEX_KEY = "pod-label-index"
TERMINAL_PHASES = ("Succeeded", "Failed")
_MEMO_LIMIT = 512


def counted(pod: Pod) -> bool:
    """Pods that occupy a node for spreading purposes (upstream informer + plugin filters)."""
    return bool(pod.node_name) and not pod.terminating and pod.phase not in TERMINAL_PHASES


def nominated(pod: Pod) -> bool:
    """Pods still waiting in the queue with a nominated node (the scheduler's nominator)."""
    return not pod.node_name and bool(pod.nominated_node_name) and pod.phase not in TERMINAL_PHASES


class NamespacePods:
    """The pods of one namespace: counted pods with an inverted label index, nominated
    pods, and every pod by name.

    Maintained incrementally (`put`/`remove`, O(the pod's labels)) on a private copy
    (`copy`, C-level container copies) that is then published and never mutated again:
    readers of a published bucket need no lock. Ids of removed pods are reused, so
    memory stays flat under churn.
    """

    __slots__ = ("pods", "node_of", "pid_of", "all_ids", "by_label", "_nominated", "_memo", "_fresh",
                 "_free")

    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}
        self.node_of: list[str] = []
        self.pid_of: dict[str, int] = {}
        self.all_ids: set[int] = set()
        self.by_label: dict[str, dict[str, set[int]]] = {}
        self._nominated: dict[str, Pod] = {}
        self._memo: dict[Any, Mapping[str, int]] = {}
        self._fresh: set[Any] = set()  # containers already copied since `copy`
        self._free: list[int] = []  # ids of removed pods, for reuse

    @property
    def nominated(self) -> list[Pod]:
        return list(self._nominated.values())

    def copy(self) -> NamespacePods:
        """A private, mutable copy sharing the inner label sets until they are touched."""
        new = NamespacePods.__new__(NamespacePods)
        new.pods = dict(self.pods)
        new.node_of = list(self.node_of)
        new.pid_of = dict(self.pid_of)
        new.all_ids = set(self.all_ids)
        new.by_label = dict(self.by_label)
        new._nominated = dict(self._nominated)
        new._memo = {}
        new._fresh = set()
        new._free = list(self._free)
        return new

    def seal(self) -> NamespacePods:
        """Done mutating: forget which containers were copied (they are shared next)."""
        self._fresh = set()
        return self

    def _values(self, key: str) -> dict[str, set[int]]:
        inner = self.by_label.get(key)
        if inner is None:
            inner = self.by_label[key] = {}
            self._fresh.add(key)
        elif key not in self._fresh:
            inner = self.by_label[key] = dict(inner)
            self._fresh.add(key)
        return inner

    def _ids(self, key: str, value: str) -> set[int]:
        inner = self._values(key)
        ids = inner.get(value)
        if ids is None:
            ids = inner[value] = set()
            self._fresh.add((key, value))
        elif (key, value) not in self._fresh:
            ids = inner[value] = set(ids)
            self._fresh.add((key, value))
        return ids

    def add(self, pod: Pod) -> None:
        """Index a counted pod (bulk build; `put` is the general entry point)."""
        if self._free:
            pid = self._free.pop()
            self.node_of[pid] = pod.node_name
        else:
            pid = len(self.node_of)
            self.node_of.append(pod.node_name)
        self.pid_of[pod.name] = pid
        self.all_ids.add(pid)
        for key, value in pod.labels.items():
            self._ids(key, value).add(pid)

    def put(self, pod: Pod) -> None:
        """Add or replace a pod of this namespace."""
        self.remove(pod.name)
        self.pods[pod.name] = pod
        if counted(pod):
            self.add(pod)
        elif nominated(pod):
            self._nominated[pod.name] = pod

    def remove(self, name: str) -> Pod | None:
        old = self.pods.pop(name, None)
        if old is None:
            return None
        self._nominated.pop(name, None)
        pid = self.pid_of.pop(name, None)
        if pid is not None:
            self.all_ids.discard(pid)
            self.node_of[pid] = ""
            self._free.append(pid)
            for key, value in old.labels.items():
                ids = self._ids(key, value)
                ids.discard(pid)
                if not ids:
                    inner = self._values(key)
                    del inner[value]
                    if not inner:
                        del self.by_label[key]
        return old

    def _ids_for(self, req: Any) -> tuple[set[int], bool]:
        """(ids, positive): the ids the requirement selects, or (when not positive) the
        ids it excludes."""
        by_value = self.by_label.get(req.key, {})
        if req.op in ("In", "NotIn"):
            hit: set[int] = set()
            for value in req.values:
                hit |= by_value.get(value, set())
            return hit, req.op == "In"
        present: set[int] = set()
        for ids in by_value.values():
            present |= ids
        return present, req.op == "Exists"

    def matching_ids(self, selector: Any) -> set[int]:
        if selector.nothing:
            return set()
        sets = [self._ids_for(r) for r in selector.requirements]
        positives = sorted((s for s, pos in sets if pos), key=len)
        result = set(positives[0]) if positives else set(self.all_ids)
        for ids in positives[1:]:
            result &= ids
            if not result:
                return result
        for ids, pos in sets:
            if not pos:
                result -= ids
        return result

    def node_counts(self, selector: Any) -> Mapping[str, int]:
        """Matching counted pods per node name (memoized per selector)."""
        hit = self._memo.get(selector)
        if hit is None:
            node_of = self.node_of
            hit = Counter(node_of[i] for i in self.matching_ids(selector))
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[selector] = hit
        return hit


_EMPTY = NamespacePods()


class SpreadIndex:
    """Everything PodTopologySpread needs from a snapshot that does not depend on the pod.

    A view, built in O(1): the pod layer's per-namespace buckets (shared by every
    snapshot until their namespace changes) and the node layer. Node-only answers are
    memoised on the node layer, so they survive pod events. The snapshot is held
    weakly: a strong reference would make a cycle (snapshot -> derived -> index ->
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

    def node_counts(self, namespace: str, selector: Any) -> Mapping[str, int]:
        return self.namespace(namespace).node_counts(selector)

    def domain_counts(
        self, namespace: str, selector: Any, key: str, eligible: frozenset[str]
    ) -> Mapping[str, int]:
        """Matching counted pods per value of `key` (absent label -> ""), counting only
        pods on `eligible` nodes; memoized per (namespace, selector, key, eligible) and
        node layer version (the bucket outlives node changes, the labels read do not)."""
        ns = self.namespace(namespace)
        memo_key = (selector, key, eligible, self.nodes.version)
        hit = ns._memo.get(memo_key)
        if hit is None:
            by_name = self.nodes.by_name
            out: dict[str, int] = {}
            for name, n in ns.node_counts(selector).items():
                if name in eligible:
                    value = by_name[name].labels.get(key, "")
                    out[value] = out.get(value, 0) + n
            hit = out
            if len(ns._memo) >= _MEMO_LIMIT:
                ns._memo.clear()
            ns._memo[memo_key] = hit
        return hit

    def nodes_with_keys(self, keys: tuple[str, ...]) -> frozenset[str]:
        """Names of snapshot nodes carrying every key in `keys` (node-layer memo)."""
        nodes = self.nodes

        def compute() -> frozenset[str]:
            index = nodes.label_index()
            result: frozenset[str] | set[str] = nodes.names
            for key in keys:
                present: set[str] = set()
                for names in index.get(key, {}).values():
                    present |= names
                result = result & present
            return frozenset(result)

        return nodes.memo(("PTS with keys", keys), compute)

    def taint_group_names(self) -> dict[tuple[Taint, ...], frozenset[str]]:
        nodes = self.nodes
        return nodes.memo(("PTS taint group names",), lambda: {
            taints: frozenset(n.name for n in group) for taints, group in nodes.taint_groups().items()
        })


def spread_index(snapshot: ClusterSnapshot) -> SpreadIndex:
    return snapshot.derived(INDEX_KEY, SpreadIndex)
