"""The pod and workload layers of cluster state: immutable once published, each with
a version of its own (the node layer is `NodeIndex`).

A layer is changed through its writer, event by event, in O(the object): the writer
copies only the namespace bucket an event touches (once per batch of events, with
C-level container copies) and `publish` hands out a new immutable layer that shares
every untouched bucket with the previous one. Readers hold a published layer for a
whole request and never see a half-applied event.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from extender.model import Pod
from extender.state.podindex import NamespacePods

WORKLOAD_KINDS = ("Service", "ReplicaSet", "StatefulSet", "ReplicationController")
_VERSIONS = itertools.count(1)


class PodLayer:
    """Every pod, by namespace (`NamespacePods` buckets, with PodTopologySpread's label
    index and counts), at one version."""

    __slots__ = ("version", "namespaces", "count")

    def __init__(self, namespaces: Mapping[str, NamespacePods], count: int) -> None:
        self.version = next(_VERSIONS)
        self.namespaces: Mapping[str, NamespacePods] = MappingProxyType(dict(namespaces))
        self.count = count

    def __iter__(self) -> Iterator[Pod]:
        for bucket in self.namespaces.values():
            yield from bucket

    def get(self, namespace: str, name: str) -> Pod | None:
        bucket = self.namespaces.get(namespace)
        return bucket.get(name) if bucket is not None else None


EMPTY_PODS = PodLayer({}, 0)


class PodLayerWriter:
    """Applies pod events to private copies of the touched buckets; `publish` seals them."""

    def __init__(self, layer: PodLayer = EMPTY_PODS) -> None:
        self.layer = layer
        self._dirty: dict[str, NamespacePods] = {}
        self._count = layer.count

    def get(self, namespace: str, name: str) -> Pod | None:
        bucket = self._dirty.get(namespace)
        if bucket is not None:
            return bucket.get(name)
        return self.layer.get(namespace, name)

    def _bucket(self, namespace: str) -> NamespacePods:
        bucket = self._dirty.get(namespace)
        if bucket is None:
            published = self.layer.namespaces.get(namespace)
            bucket = published.copy() if published is not None else NamespacePods()
            self._dirty[namespace] = bucket
        return bucket

    def put(self, pod: Pod) -> None:
        bucket = self._bucket(pod.namespace)
        if pod.name not in bucket.entries:
            self._count += 1
        bucket.put(pod)

    def remove(self, namespace: str, name: str) -> Pod | None:
        if self.get(namespace, name) is None:
            return None
        self._count -= 1
        return self._bucket(namespace).remove(name)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def keys(self) -> set[tuple[str, str]]:
        """(namespace, name) of every pod, published or pending."""
        out: set[tuple[str, str]] = set()
        for ns, bucket in self.layer.namespaces.items():
            if ns not in self._dirty:
                out.update((ns, name) for name in bucket.entries.keys())
        for ns, bucket in self._dirty.items():
            out.update((ns, name) for name in bucket.entries.keys())
        return out

    def publish(self) -> PodLayer:
        """The layer with every change so far (the same object when nothing changed)."""
        if not self._dirty:
            return self.layer
        namespaces = dict(self.layer.namespaces)
        for name, bucket in self._dirty.items():
            if len(bucket):
                namespaces[name] = bucket.seal()
            else:
                namespaces.pop(name, None)
        self._dirty = {}
        self.layer = PodLayer(namespaces, self._count)
        return self.layer


def slim_workload(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What PodTopologySpread's default selectors read of a workload object: its kind,
    name, namespace and `spec.selector` (status, replicas and the rest never matter)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    slim: dict[str, Any] = {
        "kind": obj.get("kind"),
        "metadata": {"name": meta.get("name") or "", "namespace": meta.get("namespace") or "default"},
    }
    if isinstance(spec, Mapping) and "selector" in spec:
        slim["spec"] = {"selector": spec["selector"]}
    return slim


class WorkloadLayer:
    """Services, ReplicaSets, StatefulSets and ReplicationControllers, slim, by kind and
    by (kind, namespace)."""

    __slots__ = ("version", "by_kind", "_by_namespace")

    def __init__(self, by_kind: Mapping[str, list[dict[str, Any]]]) -> None:
        self.version = next(_VERSIONS)
        self.by_kind = {k: list(by_kind.get(k, ())) for k in WORKLOAD_KINDS}
        self._by_namespace: dict[tuple[str, str], list[dict[str, Any]]] | None = None

    def in_namespace(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        index = self._by_namespace
        if index is None:
            index = {}
            for k, objects in self.by_kind.items():
                for w in objects:
                    ns = (w.get("metadata") or {}).get("namespace") or "default"
                    index.setdefault((k, ns), []).append(w)
            self._by_namespace = index
        return index.get((kind, namespace), [])


class WorkloadLayerWriter:
    """Workload objects by kind and (namespace, name); a publish is O(workloads) but
    only happens when a selector, a name or the set of objects changed."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {k: {} for k in WORKLOAD_KINDS}
        self.layer = WorkloadLayer({})
        self._dirty = False

    def put(self, kind: str, obj: Mapping[str, Any]) -> bool:
        slim = slim_workload(obj)
        md = slim["metadata"]
        key = (md["namespace"], md["name"])
        if self.objects[kind].get(key) == slim:
            return False
        self.objects[kind][key] = slim
        self._dirty = True
        return True

    def remove(self, kind: str, namespace: str, name: str) -> bool:
        if self.objects[kind].pop((namespace or "default", name), None) is None:
            return False
        self._dirty = True
        return True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def publish(self) -> WorkloadLayer:
        if self._dirty:
            self.layer = WorkloadLayer({k: list(v.values()) for k, v in self.objects.items()})
            self._dirty = False
        return self.layer
