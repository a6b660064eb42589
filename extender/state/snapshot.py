"""One consistent view of the cluster: a node layer, a pod layer, a workload layer and
a volume layer (PersistentVolumes and their claims).

A request reads one `ClusterSnapshot` from start to end. Layers are immutable and
shared: a pod event produces a new snapshot with a new pod layer (sharing every
untouched namespace) and the *same* node layer, so everything memoised on the node
layer (taint groups, label index, toleration and affinity answers, candidate sets)
survives binds. `memo` is the one memo of plugins: `reads` says what an answer reads
(`Reads`) and so on which layer it is kept; answers that read pods live as long as
this snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from extender.caching import ByteLRU
from extender.model import Node, Pod
from extender.model.parse import ModelError, existing_pod_from_dict, node_from_dict
from extender.state.layers import (
    WORKLOAD_KINDS,
    PodLayer,
    PodLayerWriter,
    WorkloadLayer,
    WorkloadLayerWriter,
)
from extender.state.loader import ClusterFileError
from extender.state.nodeset import NodeIndex, Reads
from extender.state.volumes import (
    EMPTY_VOLUMES,
    VOLUME_KINDS,
    VolumeLayer,
    parse_volume,
    volume_layer,
)

__all__ = ["WORKLOAD_KINDS", "ClusterSnapshot", "Reads"]
MEMO_SIZE = 128  # entries can be node-name sets of the whole cluster: ~0.25 MB each at 5k


class ClusterSnapshot:
    """`ClusterSnapshot(nodes, pods, workloads, volumes=...)` builds the layers (files,
    tests; `volumes` may be a published layer to share); `from_layers` combines
    published layers (the store)."""

    def __init__(
        self,
        nodes: Iterable[Node],
        pods: Iterable[Pod] = (),
        workloads: dict[str, list[dict[str, Any]]] | None = None,
        generation: int = 0,
        volumes: VolumeLayer | Iterable[Any] = (),
    ) -> None:
        pod_writer = PodLayerWriter()
        for pod in pods:
            pod_writer.put(pod)
        work_writer = WorkloadLayerWriter()
        for kind, objects in (workloads or {}).items():
            for obj in objects:
                work_writer.put(kind, obj)
        layer = volumes if isinstance(volumes, VolumeLayer) else volume_layer(volumes)
        self._setup(NodeIndex(list(nodes)), pod_writer.publish(), work_writer.publish(), generation, layer)

    @classmethod
    def from_layers(
        cls, nodes: NodeIndex, pods: PodLayer, workloads: WorkloadLayer, generation: int = 0,
        volumes: VolumeLayer = EMPTY_VOLUMES, resource_versions: Mapping[str, str] | None = None,
    ) -> ClusterSnapshot:
        """`resource_versions`: kind -> the API resourceVersion the kind's objects are
        current to ("" while a kind relists); the store's feeds set them."""
        snap = cls.__new__(cls)
        snap._setup(nodes, pods, workloads, generation, volumes)
        if resource_versions:
            snap.resource_versions = dict(resource_versions)
        return snap

    def with_pods(self, pods: PodLayer, generation: int | None = None) -> ClusterSnapshot:
        """This snapshot with another pod layer (every other layer shared)."""
        return ClusterSnapshot.from_layers(self.nodes, pods, self.workload_layer,
                                           self.generation if generation is None else generation,
                                           self.volume_layer, self.resource_versions)

    def _setup(self, nodes: NodeIndex, pods: PodLayer, workloads: WorkloadLayer, generation: int,
               volumes: VolumeLayer) -> None:
        self.nodes = nodes
        self.pod_layer = pods
        self.workload_layer = workloads
        self.volume_layer = volumes
        self.generation = generation
        self.resource_versions: dict[str, str] = {}  # kind -> resourceVersion (live state only)
        self._derived: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._memo = ByteLRU.counted("memo", MEMO_SIZE)

    @property
    def versions(self) -> tuple[int, int, int, int]:
        """(node, pod, workload, volume layer) versions: equal tuples, equal state."""
        return (self.nodes.version, self.pod_layer.version, self.workload_layer.version,
                self.volume_layer.version)

    @property
    def state_version(self) -> str:
        """The API resourceVersion of each watched kind this snapshot is current to, as
        `Kind=rv,...` (the `X-Extender-State-Version` answer header; "" without a live
        feed). A kind relisting has an empty version: its objects are mid-replacement."""
        return self._derived_once("state-version", lambda s: ",".join(
            f"{kind}={rv}" for kind, rv in s.resource_versions.items()))

    @property
    def pods(self) -> list[Pod]:
        """Every pod (built on first use: reference paths and explain, not the fast path)."""
        return self._derived_once("pods", lambda s: list(s.pod_layer))

    @property
    def pods_by_namespace(self) -> dict[str, list[Pod]]:
        return self._derived_once("pods-by-namespace", lambda s: {
            ns: list(bucket) for ns, bucket in s.pod_layer.namespaces.items()
        })

    @property
    def workloads(self) -> dict[str, list[dict[str, Any]]]:
        return self.workload_layer.by_kind

    def _derived_once(self, key: str, build: Callable[[ClusterSnapshot], Any]) -> Any:
        """Get or build (once, thread-safely, never evicted) a view of this snapshot."""
        value = self._derived.get(key)
        if value is None:
            with self._lock:
                value = self._derived.get(key)
                if value is None:
                    value = build(self)
                    self._derived[key] = value
        return value

    def memo(self, key: Hashable, compute: Callable[[], Any], reads: Reads = Reads.PODS) -> Any:
        """The memo of pure, pod-shape-keyed answers over this snapshot, kept as long as
        what they read (`reads`) stands: `Reads.PODS` with this snapshot, `Reads.NODES`
        and `Reads.TAINTS` on the node layer (`NodeIndex.memo`: they outlive pod events,
        and taint-only answers node relabels too), `Reads.VOLUMES` on the volume layer.

        Pods of one workload share their constraints, so an answer is computed once per
        snapshot (or layer), not once per pod. `compute` runs outside the lock (a racing
        duplicate is harmless: answers are pure); None is never kept."""
        if reads is Reads.PODS:
            return self._memo.get_or_build(key, compute)
        if reads is Reads.VOLUMES:
            return self.volume_layer.memo(key, compute)
        return self.nodes.memo(key, compute, reads)

    def workloads_in(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Workload objects of one kind in one namespace."""
        return self.workload_layer.in_namespace(kind, namespace)

    def counts(self) -> dict[str, int]:
        out = {"nodes": len(self.nodes.nodes), "pods": self.pod_layer.count}
        for kind in WORKLOAD_KINDS:
            out[kind.lower() + "s"] = len(self.workloads.get(kind, ()))
        out["persistentvolumes"] = len(self.volume_layer.volumes)
        out["persistentvolumeclaims"] = self.volume_layer.claim_count
        return out

    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]], generation: int = 0) -> ClusterSnapshot:
        nodes, pods, workloads, volumes = parse_objects(objects)
        return cls(nodes, pods, workloads, generation, volumes)


def parse_objects(objects: Iterable[Mapping[str, Any]]) -> tuple[list[Node], list[Pod], dict[str, list], list]:
    """Validate and parse a whole cluster dump (ClusterFileError names the bad object):
    nodes, pods, raw workload objects by kind, PV and PVC models."""
    nodes: list[Node] = []
    pods: list[Pod] = []
    workloads: dict[str, list] = {k: [] for k in WORKLOAD_KINDS}
    volumes: list = []
    seen: set[str] = set()
    for i, obj in enumerate(objects):
        kind = obj.get("kind")
        try:
            if kind == "Node":
                node = node_from_dict(obj)
                if not node.name:
                    raise ModelError("node without metadata.name")
                if node.name in seen:
                    raise ModelError(f"duplicate node {node.name!r}")
                seen.add(node.name)
                nodes.append(node)
            elif kind == "Pod":
                pods.append(existing_pod_from_dict(obj))
            elif kind in workloads:
                workloads[kind].append(obj)
            elif kind in VOLUME_KINDS:
                volumes.append(parse_volume(kind, obj))
        except ModelError as exc:
            raise ClusterFileError(f"object #{i} ({kind}): {exc}") from exc
    return nodes, pods, workloads, volumes
