"""Building the engine under test, and cheap snapshot copies for the simulation."""

from __future__ import annotations

from extender.cel import CelCache
from extender.config import Config, build_config
from extender.engine import Extender
from extender.model import Pod
from extender.state import ClusterSnapshot, ClusterSource, StaticSource
from extender.state.layers import PodLayerWriter


def default_config() -> Config:
    """Defaults only: the harness must not pick up the developer's EXTENDER_* variables."""
    return build_config({}, env={})


def new_extender(config: Config, source: ClusterSource, fast: bool = True) -> Extender:
    """A fresh Extender with its own CEL cache (fast and reference must not share
    memoized CEL results, or the reference would be flattered)."""
    cel = CelCache(config.cel_program_cache_size, config.cel_result_cache_size)
    return Extender(config, source, cel=cel, fast=fast)


MutableSource = StaticSource  # swapped after every bind by the simulation


def fork_snapshot(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The same (immutable) layers in a new snapshot: per-snapshot memos start empty."""
    return snapshot.with_pods(snapshot.pod_layer)


def extend_snapshot(snapshot: ClusterSnapshot, pod: Pod) -> ClusterSnapshot:
    """A new snapshot = `snapshot` + one bound pod, as the live state applies a watch
    event: the pod layer's writer copies the pod's namespace bucket and adds the pod;
    the node layer (and everything memoised on it) and the workload layer are shared.
    The original snapshot is untouched."""
    writer = PodLayerWriter(snapshot.pod_layer)
    writer.put(pod)
    return snapshot.with_pods(writer.publish(), snapshot.generation + 1)
