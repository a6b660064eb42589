"""The cluster state every feed writes into and every request reads from.

Feeds (the API-server watch in `extender.state.live`, the cluster file in
`extender.state.source`) hand the store raw objects; the store parses them into the
slim models, drops updates that change nothing a plugin reads (node heartbeats and
conditions, pod status other than phase and nominatedNodeName, resourceVersion churn)
before they touch anything, and applies the rest to the layer they belong to in
O(the object). `snapshot()` returns one immutable, consistent `ClusterSnapshot` for a
whole request; a changed layer is published (sealed and combined with the unchanged
ones) at most once per read, so bursts of events cost one publish.

Assumed pods (kube-scheduler's cache; the `bind` verb) are an overlay on the pod layer,
kept in `extender.state.assumed`; the store applies them to the pod layer under its lock.

Feeds that know the API's resourceVersion pass it with each change (`upsert`,
`delete`, `advance` for bookmarks and relists): every snapshot carries, per kind, the
resourceVersion its objects are current to (`ClusterSnapshot.resource_versions`), set
under the same lock as the change, so a snapshot never claims a version its content
does not match. A kind that is relisting has no version ("").
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from extender import metrics
from extender.model import Node, Pod
from extender.model.parse import ModelError, existing_pod_from_dict, node_from_dict
from extender.model.volumes import PersistentVolume
from extender.state.assumed import AssumedPods, PodKey
from extender.state.layers import WORKLOAD_KINDS, PodLayerWriter, WorkloadLayerWriter
from extender.state.nodeset import NodeIndex
from extender.state.snapshot import ClusterSnapshot, parse_objects
from extender.state.volumes import VOLUME_KINDS, VolumeLayerWriter, parse_volume

log = logging.getLogger("extender.state")

KINDS = ("Node", "Pod", *WORKLOAD_KINDS, *VOLUME_KINDS)
# the topology keys of upstream's default (system) spreading, which most pods get
DEFAULT_TOPOLOGY_KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
CLUSTER_SCOPED = ("Node", "PersistentVolume")


class StoreObserver(Protocol):
    """Told of every change the store applies (`Store.observer`), e.g. the drift report
    (`extender.drift`). `raw` is the object as the feed delivered it and `model` the
    store's slim model; both None for a deletion. Called once the change is applied (a
    snapshot taken afterwards holds it), under the store's lock for nodes and volumes:
    keep it to bookkeeping and never take the store's lock from another thread while
    holding a lock this call takes. Pods are reported on every upsert, also when
    nothing the plugins read changed (a pod's scheduling constraints are not in its
    slim model), and workloads not at all."""

    def changed(self, kind: str, namespace: str, name: str, raw: Mapping[str, Any] | None,
                model: Any | None) -> None: ...

    def start(self) -> None:
        """Start its threads, in the process that serves (`extender.server.opening`)."""


def prepare_nodes(nodes: NodeIndex) -> None:
    """Build the node-side indexes every request needs before the layer is served (the
    first request after a change would otherwise pay for them)."""
    nodes.taint_groups()
    for key in DEFAULT_TOPOLOGY_KEYS:
        nodes.codes(key)  # also builds the label index


def node_fingerprint(node: Node) -> tuple:
    return (node.labels, node.taints, node.unschedulable)


def pod_fingerprint(pod: Pod) -> tuple:
    # `raw`: a pending pod's scheduling fields (None once bound), see existing_pod_from_dict
    return (pod.uid, pod.labels, pod.node_name, pod.phase, pod.terminating,
            pod.nominated_node_name, pod.priority, pod.raw)


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a raw object; namespace "default" when absent."""
    md = obj.get("metadata") or {}
    return (md.get("namespace") or "default", md.get("name") or "")


class Store:
    """Nodes, pods, workloads and volumes, written by feeds, read as snapshots."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, Node] = {}
        self._node_layer = NodeIndex([])
        self._node_changes: dict[str, Node | None] = {}  # since the last publish
        self._pods = PodLayerWriter()
        self._workloads = WorkloadLayerWriter()
        self._volumes = VolumeLayerWriter()
        self.assumptions = AssumedPods()  # the bind verb's overlay on the pod layer
        self._resource_versions: dict[str, str] = {}  # kind -> resourceVersion the content is current to
        self._generation = 0
        self._snapshot = self._combine()
        self._dirty = False
        self.observer: StoreObserver | None = None  # set before the first feed writes

    # --- reading -------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """The current consistent state (publishes pending changes first)."""
        if self._dirty:
            return self.publish()
        return self._snapshot

    def publish(self) -> ClusterSnapshot:
        with self._lock:
            if not self._dirty:
                return self._snapshot
            if self._node_changes:
                old = self._node_layer
                if len(self._node_changes) * 4 < len(old.nodes):
                    layer = old.evolve(self._node_changes)  # O(changes)
                else:
                    layer = NodeIndex(list(self._nodes.values()))
                prepare_nodes(layer)
                old.release()
                self._node_layer = layer
                self._node_changes = {}
            self._generation += 1
            self._snapshot = self._combine()
            self._dirty = False
            for kind, n in self._snapshot.counts().items():
                metrics.CLUSTER_STATE_OBJECTS.labels(kind).set(n)
            return self._snapshot

    def _combine(self) -> ClusterSnapshot:
        return ClusterSnapshot.from_layers(
            self._node_layer, self._pods.publish(), self._workloads.publish(), self._generation,
            self._volumes.publish(), self._resource_versions,
        )

    def keys(self, kind: str) -> set[tuple[str, str]]:
        """(namespace, name) of every object of `kind` held ("" namespace for nodes)."""
        with self._lock:
            if kind == "Node":
                return {("", n) for n in self._nodes}
            if kind == "Pod":
                return self._pods.keys()
            if kind in VOLUME_KINDS:
                return self._volumes.keys(kind)
            return set(self._workloads.objects[kind])

    # --- writing -------------------------------------------------------------------

    def upsert(self, kind: str, obj: Mapping[str, Any], rv: str = "", listed_at: float | None = None) -> bool:
        """Add or update one raw object; False when nothing a plugin reads changed.
        Raises ModelError for an object that cannot be parsed. `rv`: the kind is current
        to this resourceVersion once the object is in (a watch event's). `listed_at`:
        the object comes from a list that started then (`replace`)."""
        if kind == "Node":
            node = node_from_dict(obj)
            if not node.name:
                raise ModelError("node without metadata.name")
            with self._lock:
                self._at_version(kind, rv)
                old = self._nodes.get(node.name)
                if old is not None and node_fingerprint(old) == node_fingerprint(node):
                    return False
                self._nodes[node.name] = node
                self._node_changes[node.name] = node
                self._dirty = True
                self._observe(kind, "", node.name, obj, node)
                return True
        if kind == "Pod":
            pod = existing_pod_from_dict(obj)
            if not pod.name:
                raise ModelError("pod without metadata.name")
            self._observe(kind, pod.namespace, pod.name, obj, pod)
            with self._lock:
                self._at_version(kind, rv)
                return self._put_pod(pod, listed_at)
        if kind in WORKLOAD_KINDS:
            with self._lock:
                self._at_version(kind, rv)
                changed = self._workloads.put(kind, obj)
                self._dirty |= changed
                return changed
        if kind in VOLUME_KINDS:
            volume = parse_volume(kind, obj)
            with self._lock:
                self._at_version(kind, rv)
                changed = self._volumes.put(volume)
                self._dirty |= changed
                if changed:
                    self._observe(kind, getattr(volume, "namespace", ""), volume.name, obj, volume)
                return changed
        raise ModelError(f"unknown kind {kind!r}")

    def delete(self, kind: str, namespace: str, name: str, rv: str = "") -> bool:
        """Remove one object; False when it was not there (`rv` as for `upsert`)."""
        with self._lock:
            self._at_version(kind, rv)
            if kind == "Node":
                if self._nodes.pop(name, None) is None:
                    return False
                self._node_changes[name] = None
                self._dirty = True
                self._observe(kind, "", name, None, None)
                return True
            if kind == "Pod":
                key = (namespace or "default", name)
                if key in self.assumptions:
                    self.assumptions.end(key)
                removed = self._pods.remove(*key) is not None
                self._dirty |= removed
                self._observe(kind, *key, None, None)
                return removed
            if kind in VOLUME_KINDS:
                scope = "" if kind in CLUSTER_SCOPED else namespace or "default"
                removed = self._volumes.remove(kind, scope, name)
                self._dirty |= removed
                if removed:
                    self._observe(kind, scope, name, None, None)
                return removed
            changed = self._workloads.remove(kind, namespace, name)
            self._dirty |= changed
            return changed

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
        """Make `kind` hold exactly `objects` (a relist, consumed page by page: the lock
        is taken per object, so readers and other kinds' feeds are never held up by a
        50,000-pod list). Unchanged objects touch nothing. Returns (changed, rejected);
        unparseable objects are logged, counted and skipped. A pod assumed by `bind` is
        removed only if its binding succeeded before this list started (a list taken
        before may not show it yet)."""
        changed = rejected = 0
        started = time.monotonic()
        with self._lock:
            self._resource_versions[kind] = ""  # mid-replacement: no single version (see `advance`)
        stale = self.keys(kind)
        for obj in objects:
            key = ("", (obj.get("metadata") or {}).get("name") or "") if kind in CLUSTER_SCOPED else object_key(obj)
            stale.discard(key)
            try:
                changed += self.upsert(kind, obj, listed_at=started)
            except ModelError as exc:
                rejected += 1
                log.error("object rejected", extra={"kind": kind, "object": "/".join(key), "error": str(exc)})
        for namespace, name in stale:
            if kind == "Pod" and self._listed_too_early((namespace, name), started):
                continue
            changed += self.delete(kind, namespace, name)
        return changed, rejected

    def load(self, objects: Iterable[Mapping[str, Any]]) -> int:
        """Replace everything with a validated cluster dump (all or nothing); returns
        how many objects changed. Unchanged nodes keep the node layer (and its memos)."""
        if self.observer is not None and not isinstance(objects, list):
            objects = list(objects)  # read twice: parsed, then the raw pods for the observer
        nodes, pods, workloads, volumes = parse_objects(objects)
        changed = 0
        with self._lock:
            by_name = {n.name: n for n in nodes}
            for name in set(self._nodes) - by_name.keys():
                changed += self.delete("Node", "", name)
            for node in nodes:
                old = self._nodes.get(node.name)
                if old is None or node_fingerprint(old) != node_fingerprint(node):
                    self._nodes[node.name] = node
                    self._node_changes[node.name] = node
                    self._dirty = True
                    self._observe("Node", "", node.name, None, node)
                    changed += 1
            keep = {(p.namespace, p.name) for p in pods}
            for key in self.keys("Pod") - keep:
                changed += self.delete("Pod", *key)
            if self.observer is not None:
                for obj in objects:
                    if obj.get("kind") == "Pod":
                        self._observe("Pod", *object_key(obj), obj, None)
            for pod in pods:
                changed += self._put_pod(pod)
            for kind in WORKLOAD_KINDS:
                c, _ = self.replace(kind, workloads[kind])
                changed += c
            changed += self._load_volumes(volumes)
        return changed

    def _load_volumes(self, volumes: list) -> int:
        """Make the volume layer hold exactly `volumes` (parsed models); caller holds the lock."""
        changed = 0
        keep = {("" if isinstance(v, PersistentVolume) else v.namespace, v.name): v for v in volumes}
        for kind in VOLUME_KINDS:
            for namespace, name in self._volumes.keys(kind) - keep.keys():
                changed += self.delete(kind, namespace, name)
        for (namespace, _), volume in keep.items():
            if self._volumes.put(volume):
                changed += 1
                kind = "PersistentVolume" if isinstance(volume, PersistentVolume) else "PersistentVolumeClaim"
                self._observe(kind, namespace, volume.name, None, volume)
        self._dirty |= bool(changed)
        return changed

    def version_of(self, kind: str) -> str:
        """The resourceVersion `kind` is current to in the store ("" unknown, relisting)."""
        return self._resource_versions.get(kind, "")

    def advance(self, kind: str, rv: str) -> None:
        """`kind` is current to resourceVersion `rv` with no change (a bookmark, the end
        of a relist). Publishes only when the kind had no version (after a relist)."""
        if not rv:
            return
        with self._lock:
            self._resource_versions[kind] = rv
            if not self._snapshot.resource_versions.get(kind):
                self._dirty = True

    def _at_version(self, kind: str, rv: str) -> None:
        """Under the lock: the kind is current to `rv` once this change is in (a
        relisting kind keeps no version until `advance`)."""
        if rv and self._resource_versions.get(kind, None) != "":
            self._resource_versions[kind] = rv

    def _put_pod(self, pod: Pod, listed_at: float | None = None) -> bool:
        if self.assumptions.holds_back(pod, listed_at):
            return False
        key = (pod.namespace, pod.name)
        old = self._pods.get(*key)
        if old is not None and pod_fingerprint(old) == pod_fingerprint(pod):
            return False
        self._pods.put(pod)
        self._dirty = True
        return True

    def _observe(self, kind: str, namespace: str, name: str, raw: Mapping[str, Any] | None, model: Any) -> None:
        """The one point where applied changes are reported (`StoreObserver`)."""
        if self.observer is not None:
            self.observer.changed(kind, namespace, name, raw, model)

    # --- assumed pods (the overlay for the bind verb, `extender.state.assumed`) -------

    def assume(self, pod: Pod, node_name: str) -> None:
        """Count `pod` on `node_name` from now on, before the binding API call returns."""
        key = (pod.namespace, pod.name)
        with self._lock:
            bound = dataclasses.replace(pod, node_name=node_name, raw=None)
            self.assumptions.assume(key, bound, self._pods.get(*key))
            self._pods.put(bound)
            self._dirty = True

    def bound(self, namespace: str, name: str) -> None:
        """The binding call succeeded: from now on only the state ends the assumption."""
        with self._lock:
            self.assumptions.bound((namespace, name))

    def oldest_unconfirmed_bind(self, after: float = 0.0) -> tuple[PodKey, float] | None:
        """The pod bound longest ago (after `after`, monotonic) that the watch has not
        shown yet, with when it was bound; None if there is none."""
        with self._lock:
            return self.assumptions.oldest_unconfirmed_bind(after)

    def forget(self, namespace: str, name: str) -> bool:
        """Drop an assumption (the bind failed): the pod is what the watch last said."""
        key = (namespace, name)
        with self._lock:
            if key not in self.assumptions:
                return False
            watched = self.assumptions.end(key)
            if watched is None:
                self._pods.remove(*key)
            else:
                self._pods.put(watched)
            self._dirty = True
            return True

    def assumed(self) -> dict[PodKey, str]:
        """Assumed pods still waiting for the watch: (namespace, name) -> node name."""
        with self._lock:
            return self.assumptions.nodes()

    def _listed_too_early(self, key: PodKey, started: float) -> bool:
        """An assumed pod missing from a list that started before its binding succeeded
        (or while the call is still out): the watch from that list will show it."""
        with self._lock:
            return self.assumptions.listed_too_early(key, started)
