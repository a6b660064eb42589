"""Per-snapshot indexes for PodTopologySpread, so counting costs O(matching pods + nodes).

Upstream walks every node's pod list for every request; at 100k pods that is the whole
request budget. A snapshot is immutable, so we index once (lazily, via
`ClusterSnapshot.derived`) and answer selectors with set algebra:

* per namespace, label key -> value -> ids of the *counted* pods (assigned to a node,
  phase not Succeeded/Failed, no deletionTimestamp: what the scheduler cache holds and
  `countPodsMatchSelector` keeps);
* per namespace, the unassigned pods that carry `status.nominatedNodeName`;
* node-side helpers: names of nodes that carry a set of label keys, and node names per
  distinct taint tuple (eligibility under `nodeTaintsPolicy` is decided per tuple).

Selectors are duck-typed (`nothing`, `requirements` of `key`/`op`/`values` with ops
In/NotIn/Exists/DoesNotExist) so this module does not depend on the plugin package.
Results per (namespace, selector) are memoized for the life of the snapshot.
"""

from __future__ import annotations

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
    """Counted pods of one namespace with an inverted label index."""

    __slots__ = ("node_of", "all_ids", "by_label", "nominated", "_memo")

    def __init__(self) -> None:
        self.node_of: list[str] = []
        self.all_ids: set[int] = set()
        self.by_label: dict[str, dict[str, set[int]]] = {}
        self.nominated: list[Pod] = []
        self._memo: dict[Any, Mapping[str, int]] = {}

    def add(self, pod: Pod) -> None:
        pid = len(self.node_of)
        self.node_of.append(pod.node_name)
        self.all_ids.add(pid)
        for key, value in pod.labels.items():
            self.by_label.setdefault(key, {}).setdefault(value, set()).add(pid)

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
    """Everything PodTopologySpread needs from a snapshot that does not depend on the pod."""

    __slots__ = ("snapshot", "namespaces", "_with_keys", "_taint_names")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.namespaces: dict[str, NamespacePods] = {}
        for pod in snapshot.pods:
            if counted(pod):
                self._ns(pod.namespace).add(pod)
            elif nominated(pod):
                self._ns(pod.namespace).nominated.append(pod)
        self._with_keys: dict[tuple[str, ...], frozenset[str]] = {}
        self._taint_names: dict[tuple[Taint, ...], frozenset[str]] | None = None

    def _ns(self, namespace: str) -> NamespacePods:
        ns = self.namespaces.get(namespace)
        if ns is None:
            ns = self.namespaces[namespace] = NamespacePods()
        return ns

    def namespace(self, namespace: str) -> NamespacePods:
        return self.namespaces.get(namespace, _EMPTY)

    def node_counts(self, namespace: str, selector: Any) -> Mapping[str, int]:
        return self.namespace(namespace).node_counts(selector)

    def domain_counts(
        self, namespace: str, selector: Any, key: str, eligible: frozenset[str]
    ) -> Mapping[str, int]:
        """Matching counted pods per value of `key` (absent label -> ""), counting only
        pods on `eligible` nodes; memoized per (namespace, selector, key, eligible)."""
        ns = self.namespace(namespace)
        memo_key = (selector, key, eligible)
        hit = ns._memo.get(memo_key)
        if hit is None:
            by_name = self.snapshot.nodes.by_name
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
        """Names of snapshot nodes carrying every key in `keys`."""
        hit = self._with_keys.get(keys)
        if hit is None:
            index = self.snapshot.nodes.label_index()
            result: frozenset[str] | set[str] = self.snapshot.nodes.names
            for key in keys:
                present: set[str] = set()
                for names in index.get(key, {}).values():
                    present |= names
                result = result & present
            hit = self._with_keys[keys] = frozenset(result)
        return hit

    def taint_group_names(self) -> dict[tuple[Taint, ...], frozenset[str]]:
        if self._taint_names is None:
            self._taint_names = {
                taints: frozenset(n.name for n in group)
                for taints, group in self.snapshot.nodes.taint_groups().items()
            }
        return self._taint_names


def spread_index(snapshot: ClusterSnapshot) -> SpreadIndex:
    return snapshot.derived(INDEX_KEY, SpreadIndex)
