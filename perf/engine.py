"""Building the engine under test, and cheap snapshot copies for the simulation."""

from __future__ import annotations

import threading

from extender.cel import CelCache
from extender.config import Config, build_config
from extender.model import Pod
from extender.service import Extender
from extender.state import ClusterSnapshot, ClusterSource, StaticSource, podindex


def default_config() -> Config:
    """Defaults only: the harness must not pick up the developer's EXTENDER_* variables."""
    return build_config({}, env={})


def new_extender(config: Config, source: ClusterSource, fast: bool = True,
                 remember_answers: bool = False) -> Extender:
    """A fresh Extender with its own CEL cache (fast and reference must not share
    memoized CEL results, or the reference would be flattered). Answers are not
    remembered per pod shape unless asked: the harness times the engine computing
    every answer, and reports reuse separately."""
    cel = CelCache(config.cel_program_cache_size, config.cel_result_cache_size)
    return Extender(config, source, cel=cel, fast=fast, remember_answers=remember_answers)


MutableSource = StaticSource  # swapped after every bind by the simulation


# Derived indexes that depend only on nodes and workloads, which a bind does not change.
POD_INDEPENDENT_DERIVED = frozenset({"workloads-by-namespace"})


def _copy_state(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A shallow copy whose private caches (derived indexes, memos) and locks are fresh.

    Done generically over `_`-prefixed attributes, so caches the engine adds later are
    reset too: a new snapshot must start with empty caches (its answers may differ)."""
    new = ClusterSnapshot.__new__(ClusterSnapshot)
    for name, value in snapshot.__dict__.items():
        if name.startswith("_"):
            if isinstance(value, type(threading.Lock())):
                value = threading.Lock()
            elif hasattr(value, "maxsize") and hasattr(value, "clear"):
                value = type(value)(value.maxsize)  # cachetools caches
            elif isinstance(value, dict):
                value = {}
        new.__dict__[name] = value
    return new


def fork_snapshot(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The same state with empty caches, so carried-forward indexes built on the fork
    can never leak into (mutate) the caller's snapshot."""
    return _copy_state(snapshot)


def extend_snapshot(snapshot: ClusterSnapshot, pod: Pod, carry_indexes: bool = False
                    ) -> ClusterSnapshot:
    """A new snapshot = `snapshot` + one bound pod, without re-indexing the nodes.

    `ClusterSnapshot.__init__` would rebuild the node index and regroup 50,000 pods on
    every bind (tens of ms); sharing the immutable node index and copying only the pod
    lists keeps a bind at ~0.1 ms. Derived indexes (`_derived`) start empty, exactly as
    after a reload, so plugins rebuild what they hang off the snapshot; memos start
    empty too.

    `carry_indexes=True` instead moves PodTopologySpread's pod index forward by adding
    the one pod (what an incremental, watch-fed state would do), and keeps derived
    indexes listed in POD_INDEPENDENT_DERIVED. It mutates the index
    the old snapshot holds, so use it only when the old snapshot is discarded (the
    simulation, which starts from `fork_snapshot`); if the index's internals differ from what is expected, it silently
    falls back to a rebuild.
    """
    new = _copy_state(snapshot)
    new.pods = [*snapshot.pods, pod]
    by_ns = dict(snapshot.pods_by_namespace)
    by_ns[pod.namespace] = [*by_ns.get(pod.namespace, ()), pod]
    new.pods_by_namespace = by_ns
    new.generation = snapshot.generation + 1
    if carry_indexes:
        _carry_spread_index(snapshot, new, pod)
        for key, value in snapshot._derived.items():
            if key in POD_INDEPENDENT_DERIVED:
                new._derived[key] = value
    return new


def _carry_spread_index(old: ClusterSnapshot, new: ClusterSnapshot, pod: Pod) -> bool:
    index = old._derived.get(podindex.INDEX_KEY)
    if index is None:
        return False
    try:
        moved = podindex.SpreadIndex.__new__(podindex.SpreadIndex)
        moved.snapshot = new
        moved.namespaces = index.namespaces
        moved._with_keys = index._with_keys  # node-only facts: nodes did not change
        moved._taint_names = index._taint_names
        ns = moved._ns(pod.namespace)
        if podindex.counted(pod):
            ns.add(pod)
        elif podindex.nominated(pod):
            ns.nominated.append(pod)
        ns._memo.clear()
    except (AttributeError, TypeError):
        return False
    new._derived[podindex.INDEX_KEY] = moved
    return True
