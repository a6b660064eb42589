"""The candidate nodes of one request, with indexes that let plugins work per group.

A `NodeSet` built from a cluster snapshot shares the snapshot's precomputed indexes
(nodes grouped by taint tuple, an inverted label index); one built from a request's
full `Nodes` list computes them lazily, once per request. Plugins ask for groups and
sets instead of looping over nodes, so a 5,000-node request costs
O(distinct taint sets + set operations) rather than O(nodes x plugins) Python calls.

Per-node answers travel as numpy vectors: a `NodeIndex` (the universe) turns name sets
and label values into masks and codes over its nodes, and a `NodeSet` gathers universe
vectors into request order (`uidx`). A NodeSet resolved from a NodeNames list is shared
by every request that sends the same list (`NodeIndex.candidates`), so its lazily built
arrays and the wire encoder's templates are paid for once.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from extender.caching import ByteLRU, memory_share
from extender.model import Node
from extender.state.nodeindexes import (
    LabelIndex,
    TaintGroups,
    apply_changes,
    build_label_index,
    group_by_taints,
    label_changes,
    patched_codes,
    patched_groups,
    patched_label_index,
    patched_unschedulable,
    same_places,
)
from extender.state.taints import TaintTable

_VERSIONS = itertools.count(1)  # every NodeIndex is one node-layer version
NODE_MEMO_SIZE = 128  # entries can be node-name sets of the whole cluster: ~0.25 MB each at 5k
CANDIDATE_SETS = 32  # distinct NodeNames lists remembered per snapshot (~0.5 MB each at 5k)


class Reads(enum.Enum):
    """What a memoised answer reads, which decides how long it is kept (`memo`):

    * TAINTS: node names, positions and taints only: kept on the node layer and carried
      into the next one when a node event changes none of those (a relabel, a cordon);
    * NODES: anything on the nodes (labels too): kept as long as the node layer;
    * CANDIDATES: one candidate set over its node layer (`NodeSet`): kept with the set;
    * PODS: the pods too: kept with one snapshot (every pod event makes a new one);
    * VOLUMES: PersistentVolumes and claims only: kept with the volume layer."""

    TAINTS = "taints"
    NODES = "nodes"
    CANDIDATES = "candidates"
    PODS = "pods"
    VOLUMES = "volumes"


def new_memo() -> ByteLRU:
    """The memo of one layer (`Reads`)."""
    return ByteLRU.counted("memo", NODE_MEMO_SIZE)


def new_candidate_sets() -> ByteLRU:
    """Candidate sets of one node layer (see NodeIndex.candidates): a fresh cache per
    layer, since positions and encodings belong to the layer."""
    return ByteLRU("candidate-sets", max_entries=CANDIDATE_SETS,
                   max_item_bytes=memory_share("candidate-sets") // 4)


def object_array(items: list) -> np.ndarray:
    """A 1-D object array of `items` (never reinterpreted as a 2-D or bytes array)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def position_table(names: list[str]) -> dict[str, int]:
    """Name -> position, its keys fresh copies of `names` allocated side by side and its
    values one `range`'s ints. kube-scheduler's NodeNames come in a new order for every
    pod, so each name's lookup lands on a random entry, and a hit compares the request's
    string with the key: the nodes' own name strings lie scattered over the heap with
    the rest of each Node, one cache miss each. Copies side by side took a 5,000-name
    lookup from 1.56 to 0.75-1.0 ms in `extender serve` on a core of its own
    (perf/PERFORMANCE.md, 2026-11-28 11:25)."""
    try:
        keys = orjson.loads(orjson.dumps(names))
    except orjson.JSONEncodeError:  # a name orjson will not write (a lone surrogate)
        keys = names
    return dict(zip(keys, range(len(keys)), strict=True))


class NodeIndex:
    """Indexes over a fixed collection of nodes (a snapshot's, or one request's).

    In cluster state it is the *node layer*: immutable, with a `version` of its own,
    shared by every snapshot until a node changes. Answers that read nodes only (which
    nodes a toleration set rejects, affinity masks, ...) are memoised here (`memo`), so
    pod events and binds never throw them away."""

    __slots__ = ("nodes", "by_name", "names", "unschedulable", "_taint_groups", "_label_index", "_with_key",
                 "_candidates", "_lock", "_position", "_codes", "_code_of", "version", "_memo", "_taint_memo",
                 "__weakref__")

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.version = next(_VERSIONS)
        self._memo = new_memo()
        self._taint_memo = new_memo()  # answers that read only taints (`Reads.TAINTS`)
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.names = frozenset(self.by_name)
        self.unschedulable = frozenset(n.name for n in self.nodes if n.unschedulable)
        self._taint_groups: TaintGroups | None = None
        self._label_index: LabelIndex | None = None
        self._with_key: dict[str, frozenset[str]] = {}
        self._candidates = new_candidate_sets()
        self._lock = threading.Lock()
        self._position: dict[str, int] | None = None
        self._codes: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._code_of: dict[str, dict[str, int]] = {}

    def evolve(self, changes: Mapping[str, Node | None], carry: bool = True) -> NodeIndex:
        """A new layer = this one with `changes` applied (name -> new Node, or None for a
        deletion), in O(changed nodes + their taint groups and label index entries) plus
        C-level copies of the name tables; this layer is not modified. `carry=False`: a
        private layer (a what-if) that shares none of this layer's candidate sets, whose
        encoder templates the verbs keep. Each step is a function of
        `extender.state.nodeindexes` (positions stay put: the label codes are patched)."""
        new = NodeIndex.__new__(NodeIndex)
        new.version = next(_VERSIONS)
        new._memo = new_memo()
        new._candidates = new_candidate_sets()
        new._lock = threading.Lock()
        new._with_key = {}
        nodes = list(self.nodes)
        by_name = dict(self.by_name)
        position = dict(self._position) if self._position is not None else position_table(
            [n.name for n in nodes])
        moved, removed, added = apply_changes(nodes, by_name, position, changes)
        new.nodes, new.by_name, new._position = nodes, by_name, position
        new._taint_memo = None
        new._taint_memo = self._carry_into(new, same_places(removed, added), carry)
        new.names = self.names if by_name.keys() == self.names else frozenset(by_name)
        new.unschedulable = patched_unschedulable(self.unschedulable, removed, added)
        new._taint_groups = None
        if self._taint_groups is not None:
            new._taint_groups = patched_groups(self._taint_groups, removed, added)
        new._label_index = None
        if self._label_index is not None:
            new._label_index = patched_label_index(self._label_index, *label_changes(removed, added))
        new._codes, new._code_of = patched_codes(self._codes, self._code_of, nodes, moved)
        return new

    def _carry_into(self, new: NodeIndex, pairs: list[tuple[Node, Node]] | None, carry: bool) -> ByteLRU:
        """What stays valid in `new` when every node kept its name and place (`pairs`):
        this layer's candidate sets, rebased onto `new` (unless not `carry`), and, when no
        taint changed either, the taint memo: returned (copied), or a fresh memo."""
        taint_memo = None
        if pairs is not None:
            with self._lock:
                if all(o.taints == n.taints for o, n in pairs):  # e.g. a relabel
                    taint_memo = self._taint_memo.copy()
                for key, cands, size in self._candidates.entries() if carry else ():  # still valid
                    if getattr(cands, "nodes", None) is not None and cands.nodes.universe is self:
                        new._candidates.put(key, dataclasses.replace(cands, nodes=cands.nodes.rebased(new)), size)
        return taint_memo if taint_memo is not None else new_memo()

    def code_of(self, key: str) -> dict[str, int]:
        """Label value -> its code in `codes(key)`."""
        hit = self._code_of.get(key)
        if hit is None:
            hit = self._code_of[key] = {value: code for code, value in enumerate(self.codes(key)[1])}
        return hit

    # --- vectors over the index (position i = self.nodes[i]) --------------------------

    def positions(self, names: Iterable[str]) -> np.ndarray:
        """Positions of `names` (all in this index) as an index array."""
        if self._position is None:
            self._position = position_table([n.name for n in self.nodes])
        return np.fromiter(map(self._position.__getitem__, names), dtype=np.intp)

    def lookup(self, names: Sequence[str]) -> np.ndarray:
        """Positions of `names`, -1 for a name this index does not hold: one dict lookup
        a name (kube-scheduler's lists come in a new order for every pod)."""
        if self._position is None:
            self._position = position_table([n.name for n in self.nodes])
        try:  # every name known (the rule): item lookups cost two thirds of get's with a default
            return np.fromiter(map(self._position.__getitem__, names), dtype=np.intp, count=len(names))
        except KeyError:
            return np.fromiter(map(self._position.get, names, itertools.repeat(-1)), dtype=np.intp, count=len(names))

    def mask_of(self, names: Iterable[str]) -> np.ndarray:
        """Boolean mask over this index of `names` (all in it)."""
        mask = np.zeros(len(self.nodes), dtype=bool)
        mask[self.positions(names)] = True
        return mask

    def vector(self, by_name: Mapping[str, int], default: int = 0) -> np.ndarray:
        """An int64 value per node from a sparse name -> value map (names this index
        does not hold are dropped)."""
        out = np.full(len(self.nodes), default, dtype=np.int64)
        if not by_name.keys() <= self.by_name.keys():
            by_name = {n: v for n, v in by_name.items() if n in self.by_name}
        if by_name:
            out[self.positions(by_name.keys())] = np.fromiter(by_name.values(), dtype=np.int64)
        return out

    def codes(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Each node's value of label `key` as a code into the returned value list
        (-1: no such label), built once per key from the inverted label index."""
        hit = self._codes.get(key)
        if hit is None:
            by_value = self.label_index().get(key, {})
            values = list(by_value)
            # intp: codes index other vectors (per value, per domain), and an index array
            # of another width makes numpy cast it element by element on every gather
            codes = np.full(len(self.nodes), -1, dtype=np.intp)
            for code, value in enumerate(values):
                codes[self.positions(by_value[value])] = code
            hit = self._codes[key] = (codes, values)
        return hit

    def candidates(self, key: bytes, build: Callable[[], Any], size: Callable[[Any], int]) -> Any:
        """The candidate set of a request whose NodeNames array had the JSON text `key`,
        built once per distinct text (kube-scheduler sends the same list for pod after
        pod) and kept with this index, so it dies with its snapshot; `size` estimates
        its bytes (see extender.caching)."""
        return self._candidates.get_or_build(key, build, size)

    def release(self) -> None:
        """This layer was replaced: drop its caches. Candidate sets point back at their
        universe (a reference cycle only a full collection would free); clearing them
        lets reference counting free the layer as soon as its last reader is done.
        A reader still holding the layer just recomputes what it asks for."""
        with self._lock:
            self._candidates.clear()
            self._memo.clear()
            self._taint_memo.clear()

    def memo(self, key: Hashable, compute: Callable[[], Any], reads: Reads = Reads.NODES) -> Any:
        """A memo of pure answers that read only this node layer (and the pod shape in
        `key`): `Reads.NODES` lives exactly as long as the layer; `Reads.TAINTS` (the
        answer reads nothing but node names, positions and taints) is carried into the
        next layer when a node event changes none of those (a relabel, a cordon: the
        common node updates), instead of being recomputed after every one. Plugins call
        it through `ClusterSnapshot.memo` or `NodeSet.memo`."""
        if reads is Reads.TAINTS:
            return self._taint_memo.get_or_build(key, compute)
        if reads is Reads.NODES:
            return self._memo.get_or_build(key, compute)
        raise ValueError(f"a node layer memoises what reads nodes or taints, not {reads}")

    def names_with_key(self, key: str) -> frozenset[str]:
        """Names of the nodes that carry label `key` (any value), cached per key."""
        hit = self._with_key.get(key)
        if hit is None:
            hit = frozenset().union(*self.label_index().get(key, {}).values())
            self._with_key[key] = hit
        return hit

    def taint_groups(self) -> TaintGroups:
        if self._taint_groups is None:
            self._taint_groups = group_by_taints(self.nodes)
        return self._taint_groups

    def taint_table(self) -> TaintTable:
        """The taints as vectors (`extender.state.taints`), built once per layer and
        carried into the next while no taint changes."""
        return self.memo(("taint table",), lambda: TaintTable(
            {taints: self.positions(n.name for n in group) for taints, group in self.taint_groups().items()},
            len(self.nodes)), Reads.TAINTS)

    def name_array(self) -> np.ndarray:
        """The nodes' names as an object array (position order), kept while names and
        places stand."""
        return self.memo(("name array",), lambda: object_array([n.name for n in self.nodes]), Reads.TAINTS)

    def label_index(self) -> LabelIndex:
        if self._label_index is None:
            self._label_index = build_label_index(self.nodes)
        return self._label_index


class NodeSet:
    """Candidate nodes (in request order) plus the index they can be answered from.

    `universe` may hold more nodes than the candidates (a snapshot answering a
    `NodeNames` subset); set-valued answers computed over the universe are intersected
    with `names`, which is cheap in C.
    """

    __slots__ = ("_nodes", "_names", "_order", "universe", "_taint_groups", "_uidx", "templates", "_position",
                 "_order_array", "encoded_names", "_memo")

    def __init__(
        self,
        nodes: Sequence[Node] | None,
        universe: NodeIndex | None = None,
        names: Iterable[str] | None = None,
        uidx: np.ndarray | None = None,
    ) -> None:
        """From node objects, or (fast) from `names` in order plus the `universe` that
        holds them (and, when known, their positions in it; with positions alone the
        names are read from the universe when asked): then no Node object is touched
        until a plugin asks for `nodes`."""
        self._nodes = None if nodes is None else list(nodes)
        self._order: list[str] | None
        if names is not None:
            self._order = list(names)
        elif uidx is not None and universe is not None:
            self._order = None
        else:
            self._order = [n.name for n in self._nodes or ()]
        self._names: frozenset[str] | None = None  # built when asked (5,000 names: 0.1 ms)
        if universe is None:
            universe = NodeIndex(self._nodes or [])
            self._names = universe.names
        self.universe = universe
        self._taint_groups: TaintGroups | None = None
        self._uidx: np.ndarray | None = uidx
        # The wire encoder's templates and remembered answers (`api.answers`);
        # None: this set serves a single request, not worth templates.
        self.templates: ByteLRU | None = None
        self._position: dict[str, int] | None = None
        self._order_array: np.ndarray | None = None
        # the candidates' names as the wire encoder writes them, kept here for it
        # (`extender.api.templatecache.json_names`); state never reads it
        self.encoded_names: np.ndarray | None = None
        self._memo: ByteLRU | None = None

    def rebased(self, universe: NodeIndex) -> NodeSet:
        """The same candidates over `universe`, a layer evolved from this set's with
        every node in its place (only replaced nodes): what depends on names and
        positions is shared (positions, encoded names, the encoder's templates and
        remembered answers, which are keyed by the exact result they encode); what reads
        nodes (`nodes`, taint groups) is rebuilt on demand."""
        new = NodeSet.__new__(NodeSet)
        new._nodes = None
        new._order, new._names, new.universe = self._order, self._names, universe
        new._taint_groups = None
        new._uidx, new.templates, new._position = self._uidx, self.templates, self._position
        new._order_array, new.encoded_names = self._order_array, self.encoded_names
        new._memo = None  # its answers read node labels
        return new

    def memo(self, key: Hashable, compute: Callable[[], Any], reads: Reads = Reads.CANDIDATES) -> Any:
        """Pure answers computed over these candidates (`Reads`): `Reads.CANDIDATES`
        (e.g. the spread domains they seed) once per candidate set: kube-scheduler sends
        the same list pod after pod, and the set dies with its layer; `Reads.NODES` and
        `Reads.TAINTS` once per node layer of the universe (whichever list asks).
        Answers are shared: callers never mutate them."""
        if reads is not Reads.CANDIDATES:
            return self.universe.memo(key, compute, reads)
        memo = self._memo
        if memo is None:
            memo = self._memo = new_memo()
        return memo.get_or_build(key, compute)

    def names_where(self, mask: np.ndarray) -> list[str]:
        """The candidates' names where `mask` is set, in request order."""
        if self._order_array is None:
            self._order_array = object_array(self.order)
        return self._order_array[mask].tolist()

    @property
    def order(self) -> list[str]:
        """The candidates' names in request order."""
        if self._order is None:
            self._order = self.universe.name_array()[self._uidx].tolist()
        return self._order

    @property
    def names(self) -> frozenset[str]:
        """The candidates' names, as a set."""
        if self._names is None:
            self._names = frozenset(self.order)
        return self._names

    @property
    def distinct(self) -> bool:
        """No name twice (always so for NodeNames against a snapshot)."""
        return len(self.order) == len(self.names)

    def mask_of(self, names: Iterable[str]) -> np.ndarray:
        """Boolean mask over the candidates (request order) of `names`, all candidates;
        a name the request repeats is set wherever it appears."""
        if not self.distinct:
            wanted = frozenset(names)
            return np.fromiter(map(wanted.__contains__, self.order), dtype=bool, count=len(self.order))
        if self._position is None:
            self._position = {name: i for i, name in enumerate(self.order)}
        mask = np.zeros(len(self.order), dtype=bool)
        mask[np.fromiter(map(self._position.__getitem__, names), dtype=np.intp)] = True
        return mask

    @property
    def uidx(self) -> np.ndarray:
        """The candidates' positions in the universe, in request order."""
        if self._uidx is None:
            self._uidx = self.universe.positions(self.order)
        return self._uidx

    def gather(self, universe_values: np.ndarray) -> np.ndarray:
        """A universe-wide vector cut down to the candidates, in request order."""
        return universe_values[self.uidx]

    @property
    def nodes(self) -> list[Node]:
        """The candidates' Node objects in order (built on first use)."""
        if self._nodes is None:
            self._nodes = list(map(self.universe.by_name.__getitem__, self.order))
        return self._nodes

    @property
    def is_full(self) -> bool:
        return len(self.names) == len(self.universe.names)

    def __len__(self) -> int:
        return len(self._uidx) if self._order is None else len(self._order)

    def __iter__(self):
        return iter(self.nodes)

    def taint_groups(self) -> TaintGroups:
        """Candidates grouped by their exact taint tuple."""
        if self._taint_groups is None:
            if self.is_full:
                self._taint_groups = self.universe.taint_groups()
            else:
                self._taint_groups = group_by_taints(self.nodes)
        return self._taint_groups

    def label_index(self) -> LabelIndex:
        """Inverted label index of the universe (intersect results with `names`)."""
        return self.universe.label_index()
