"""The pod layer's per-namespace buckets, indexed so that PodTopologySpread's counting
costs O(matching pods + nodes) (the plugin's view of them: `SpreadIndex` in
`extender.plugins.podtopologyspread.index`).

Upstream walks every node's pod list for every request; at 100k pods that is the whole
request budget. The pod layer keeps these indexes up to date event by event
(`extender.state.layers`) and answers selectors with set algebra:

* per namespace, label key -> value -> ids of the *counted* pods (assigned to a node,
  phase not Succeeded/Failed, no deletionTimestamp: what the scheduler cache holds and
  `countPodsMatchSelector` keeps);
* per namespace, the unassigned pods that carry `status.nominatedNodeName`.

Selectors are duck-typed (`nothing`, `requirements` of `key`/`op`/`values` with ops
In/NotIn/Exists/DoesNotExist) so this module does not depend on the plugin package.
Counts per (namespace, selector), matching pods per node code (`code_counts`), are
memoized per namespace bucket: a pod event replaces the bucket of its namespace only, so
other namespaces keep their answers, and the new bucket carries its predecessor's counts
patched for the pod that came or went (selectors also answer `matches(labels)`), so a
bind costs no recount.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from extender.caching import ByteLRU
from extender.model import Pod

TERMINAL_PHASES = ("Succeeded", "Failed")
# selectors whose counts a bucket carries; every counted pod event checks each one, and
# each holds a vector over every node name seen (40 KB at 5,000 nodes)
_MEMO_LIMIT = 128


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


LARGE_IDS = 256  # a label value's id set past this size becomes a ChunkedIds


class ChunkedIds:
    """The ids of a label value held by many pods, split into `CHUNKS` sets by id, so
    that a copy costs O(CHUNKS) and an update of the copy copies one chunk: the watch
    publishes a new bucket after every chunk of events, and a bind in a namespace where
    10,000 pods carry `app=web` must not copy 10,000 ids. Read as an iterable of ids
    (`set.update`, `set.intersection_update`, `set(...)`)."""

    __slots__ = ("chunks", "size", "_fresh")

    def __init__(self, chunks: list[set[int]], size: int, fresh: set[int]) -> None:
        self.chunks, self.size, self._fresh = chunks, size, fresh

    @classmethod
    def of(cls, ids: set[int]) -> ChunkedIds:
        chunks: list[set[int]] = [set() for _ in range(CHUNKS)]
        for pid in ids:
            chunks[pid % CHUNKS].add(pid)
        return cls(chunks, len(ids), set(range(CHUNKS)))

    def copy(self) -> ChunkedIds:
        return ChunkedIds(list(self.chunks), self.size, set())

    def _own(self, pid: int) -> set[int]:
        i = pid % CHUNKS
        chunk = self.chunks[i]
        if i not in self._fresh:
            chunk = self.chunks[i] = set(chunk)
            self._fresh.add(i)
        return chunk

    def add(self, pid: int) -> None:
        chunk = self._own(pid)
        if pid not in chunk:
            self.size += 1
            chunk.add(pid)

    def discard(self, pid: int) -> None:
        if pid in self.chunks[pid % CHUNKS]:
            self.size -= 1
            self._own(pid).discard(pid)

    def __contains__(self, pid: object) -> bool:
        return isinstance(pid, int) and pid in self.chunks[pid % CHUNKS]

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(self.chunks)


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

    __slots__ = ("entries", "node_codes", "alive", "by_label", "_nominated", "_code_memo", "_fresh", "_free", "_top")

    def __init__(self) -> None:
        self.entries = ChunkedMap()  # name -> (Pod, id or -1 when not counted)
        self.node_codes = np.zeros(16, dtype=np.int32)  # id -> node code
        self.alive = np.zeros(16, dtype=bool)  # id -> in use
        self.by_label: dict[str, ChunkedMap] = {}  # key -> value -> ids
        self._nominated: dict[str, Pod] = {}
        self._code_memo = ByteLRU.counted("memo", _MEMO_LIMIT)  # selector -> counts by node code
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
        # Counts per selector are carried and patched as pods come and go (`_patch_memo`),
        # not recounted by the first request after every bind.
        new._code_memo = self._code_memo.copy()
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

    def _ids(self, key: str, value: str) -> set[int] | ChunkedIds:
        """The ids of pods labelled `key=value`, this copy's own (copied on first touch:
        a small set whole, a large one chunk by chunk)."""
        inner = self._values(key)
        ids = inner.get(value)
        if ids is None:
            ids = set()
            inner.set(value, ids)
            self._fresh.add((key, value))
        elif (key, value) not in self._fresh:
            ids = ids.copy()
            if isinstance(ids, set) and len(ids) > LARGE_IDS:
                ids = ChunkedIds.of(ids)
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
            self._patch_memo(pod, 1)
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
            self._patch_memo(old, -1)
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

    def _patch_memo(self, pod: Pod, delta: int) -> None:
        """A counted pod came (+1) or went (-1): patch the carried counts of every
        selector that matches it (O(memo entries) selector checks, one vector copy per
        entry it changes; published vectors are never mutated)."""
        for selector, by_code, _ in self._code_memo.entries():
            if selector.matches(pod.labels):
                code = node_code(pod.node_name)
                patched = np.zeros(max(len(by_code), code + 1), dtype=np.int64)
                patched[: len(by_code)] = by_code
                patched[code] += delta
                self._code_memo.put(selector, patched)

    def _ids_for(self, req: Any) -> tuple[set[int], bool]:
        """(ids, positive): the ids the requirement selects, or (when not positive) the
        ids it excludes."""
        by_value = self.by_label.get(req.key)
        if req.op in ("In", "NotIn"):
            hit: set[int] = set()
            if by_value is not None:
                for value in req.values:
                    hit.update(by_value.get(value, ()))
            return hit, req.op == "In"
        present: set[int] = set()
        if by_value is not None:
            for ids in by_value.values():
                present.update(ids)
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

    def code_counts(self, selector: Any) -> np.ndarray:
        """Matching counted pods per node code (`node_code`; codes past the end: 0),
        memoized per selector and patched as pods come and go."""
        def count() -> np.ndarray:
            ids = self.matching_ids(selector)
            codes = self.node_codes[np.fromiter(ids, dtype=np.intp, count=len(ids))]
            return np.bincount(codes, minlength=len(_NODE_NAMES)).astype(np.int64)

        return self._code_memo.get_or_build(selector, count)
