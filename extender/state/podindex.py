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

import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

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


CHUNKS = 64  # a ChunkedMap copy-on-write update copies 1/64 of it


class ChunkedMap:
    """A dict split into `CHUNKS` dicts by key hash, so that a copy costs O(CHUNKS) and
    an update of the copy copies one chunk: the persistent map of the pod layer (a bind
    in a 10,000-pod namespace must not copy 10,000 entries)."""

    __slots__ = ("chunks", "size", "_fresh")

    def __init__(self, chunks: list[dict] | None = None, size: int = 0) -> None:
        self.chunks: list[dict] = chunks if chunks is not None else [{} for _ in range(CHUNKS)]
        self.size = size
        self._fresh: set[int] = set() if chunks is not None else set(range(CHUNKS))

    def copy(self) -> ChunkedMap:
        return ChunkedMap(list(self.chunks), self.size)

    def get(self, key: Any, default: Any = None) -> Any:
        return self.chunks[hash(key) % CHUNKS].get(key, default)

    def __contains__(self, key: Any) -> bool:
        return key in self.chunks[hash(key) % CHUNKS]

    def __len__(self) -> int:
        return self.size

    def _own(self, key: Any) -> dict:
        i = hash(key) % CHUNKS
        chunk = self.chunks[i]
        if i not in self._fresh:
            chunk = self.chunks[i] = dict(chunk)
            self._fresh.add(i)
        return chunk

    def set(self, key: Any, value: Any) -> None:
        chunk = self._own(key)
        if key not in chunk:
            self.size += 1
        chunk[key] = value

    def pop(self, key: Any) -> Any:
        if key not in self:
            return None
        self.size -= 1
        return self._own(key).pop(key)

    def values(self) -> Iterator[Any]:
        for chunk in self.chunks:
            yield from chunk.values()

    def keys(self) -> Iterator[Any]:
        for chunk in self.chunks:
            yield from chunk


# Node names as small integers, so a namespace's pod -> node column is a numpy array
# (copied in microseconds) and per-node counts are one bincount. Append-only: codes stay
# valid across every layer version.
_NODE_CODES: dict[str, int] = {"": 0}
_NODE_NAMES: list[str] = [""]
_CODES_LOCK = threading.Lock()


def node_code(name: str) -> int:
    code = _NODE_CODES.get(name)
    if code is None:
        with _CODES_LOCK:
            code = _NODE_CODES.get(name)
            if code is None:
                code = _NODE_CODES[name] = len(_NODE_NAMES)
                _NODE_NAMES.append(name)
    return code


class NamespacePods:
    """The pods of one namespace: counted pods with an inverted label index, nominated
    pods, and every pod by name.

    Maintained incrementally (`put`/`remove`, O(the pod's labels)) on a private copy
    (`copy`: chunked maps and numpy columns, microseconds whatever the namespace's
    size) that is then published and never mutated again: readers of a published
    bucket need no lock. A counted pod has an id (its slot in `node_codes`); ids of
    removed pods are reused, so memory stays flat under churn.
    """

    __slots__ = ("entries", "node_codes", "alive", "by_label", "_nominated", "_memo", "_fresh",
                 "_free", "_top")

    def __init__(self) -> None:
        self.entries = ChunkedMap()  # name -> (Pod, id or -1 when not counted)
        self.node_codes = np.zeros(16, dtype=np.int32)  # id -> node code
        self.alive = np.zeros(16, dtype=bool)  # id -> in use
        self.by_label: dict[str, ChunkedMap] = {}  # key -> value -> ids
        self._nominated: dict[str, Pod] = {}
        self._memo: dict[Any, Mapping[str, int]] = {}
        self._fresh: set[Any] = set()  # containers already copied since `copy`
        self._free: list[int] = []  # ids of removed pods, for reuse
        self._top = 0  # ids ever handed out (high-water mark)

    @property
    def nominated(self) -> list[Pod]:
        return list(self._nominated.values())

    @property
    def pods(self) -> dict[str, Pod]:
        """Every pod of the namespace by name (built per call: not for hot paths)."""
        return {pod.name: pod for pod, _ in self.entries.values()}

    def get(self, name: str) -> Pod | None:
        entry = self.entries.get(name)
        return entry[0] if entry is not None else None

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Pod]:
        for pod, _ in self.entries.values():
            yield pod

    @property
    def all_ids(self) -> set[int]:
        return set(np.flatnonzero(self.alive[: self._top]).tolist())

    def copy(self) -> NamespacePods:
        """A private, mutable copy sharing everything until it is touched."""
        new = NamespacePods.__new__(NamespacePods)
        new.entries = self.entries.copy()
        new.node_codes = self.node_codes.copy()
        new.alive = self.alive.copy()
        new.by_label = dict(self.by_label)
        new._nominated = dict(self._nominated)
        new._memo = {}
        new._fresh = set()
        new._free = list(self._free)
        new._top = self._top
        return new

    def seal(self) -> NamespacePods:
        """Done mutating: forget which containers were copied (they are shared next)."""
        self._fresh = set()
        return self

    def _values(self, key: str) -> ChunkedMap:
        inner = self.by_label.get(key)
        if inner is None:
            inner = self.by_label[key] = ChunkedMap()
            self._fresh.add(key)
        elif key not in self._fresh:
            inner = self.by_label[key] = inner.copy()
            self._fresh.add(key)
        return inner

    def _ids(self, key: str, value: str) -> set[int]:
        inner = self._values(key)
        ids = inner.get(value)
        if ids is None:
            ids = set()
            inner.set(value, ids)
            self._fresh.add((key, value))
        elif (key, value) not in self._fresh:
            ids = set(ids)
            inner.set(value, ids)
            self._fresh.add((key, value))
        return ids

    def _new_id(self) -> int:
        if self._free:
            return self._free.pop()
        pid = self._top
        self._top += 1
        if pid >= len(self.node_codes):
            grow = max(16, 2 * len(self.node_codes))
            self.node_codes = np.resize(self.node_codes, grow)
            alive = np.zeros(grow, dtype=bool)
            alive[: len(self.alive)] = self.alive
            self.alive = alive
        return pid

    def put(self, pod: Pod) -> None:
        """Add or replace a pod of this namespace."""
        self.remove(pod.name)
        pid = -1
        if counted(pod):
            pid = self._new_id()
            self.node_codes[pid] = node_code(pod.node_name)
            self.alive[pid] = True
            for key, value in pod.labels.items():
                self._ids(key, value).add(pid)
        elif nominated(pod):
            self._nominated[pod.name] = pod
        self.entries.set(pod.name, (pod, pid))

    add = put  # the bulk-build name

    def remove(self, name: str) -> Pod | None:
        entry = self.entries.pop(name)
        if entry is None:
            return None
        old, pid = entry
        self._nominated.pop(name, None)
        if pid >= 0:
            self.alive[pid] = False
            self.node_codes[pid] = 0
            self._free.append(pid)
            for key, value in old.labels.items():
                ids = self._ids(key, value)
                ids.discard(pid)
                if not ids:
                    inner = self._values(key)
                    inner.pop(value)
                    if not len(inner):
                        del self.by_label[key]
        return old

    def _ids_for(self, req: Any) -> tuple[set[int], bool]:
        """(ids, positive): the ids the requirement selects, or (when not positive) the
        ids it excludes."""
        by_value = self.by_label.get(req.key)
        if req.op in ("In", "NotIn"):
            hit: set[int] = set()
            if by_value is not None:
                for value in req.values:
                    hit |= by_value.get(value, set())
            return hit, req.op == "In"
        present: set[int] = set()
        if by_value is not None:
            for ids in by_value.values():
                present |= ids
        return present, req.op == "Exists"

    def matching_ids(self, selector: Any) -> set[int]:
        if selector.nothing:
            return set()
        sets = [self._ids_for(r) for r in selector.requirements]
        positives = sorted((s for s, pos in sets if pos), key=len)
        result = set(positives[0]) if positives else self.all_ids
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
            ids = self.matching_ids(selector)
            hit = {}
            if ids:
                codes = self.node_codes[np.fromiter(ids, dtype=np.intp, count=len(ids))]
                counts = np.bincount(codes)
                present = np.flatnonzero(counts)
                names = _NODE_NAMES
                hit = dict(zip([names[c] for c in present.tolist()], counts[present].tolist(), strict=True))
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
