"""The volume layer of cluster state: PersistentVolumes and PersistentVolumeClaims.

Like the pod layer, immutable once published and versioned on its own, so a PV or PVC
event neither throws away node-side memos nor pod indexes. Claims live in namespace
buckets (a claim event copies only its namespace's bucket); volumes are cluster-scoped,
one dict (copied in C on a publish that changed one). Indexes a request needs (volumes
by storage class) are built on first use, once per published layer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from extender.caching import ByteLRU
from extender.model.volumes import (
    PersistentVolume,
    PersistentVolumeClaim,
    pv_from_dict,
    pvc_from_dict,
)

PV, PVC = "PersistentVolume", "PersistentVolumeClaim"
VOLUME_KINDS = (PV, PVC)
_VERSIONS = itertools.count(1)
# one entry per claim in use (its checks) and a few indexes: the claims of the cluster's
# pending pods, far more than a scheduling queue holds at once
VOLUME_MEMO_SIZE = 4096


def _sealed(mapping: Mapping) -> Mapping:
    """A read-only view; an existing view is shared, not copied (a writer hands over the
    dicts it built, and an unchanged part of the previous layer is reused)."""
    return mapping if isinstance(mapping, MappingProxyType) else MappingProxyType(dict(mapping))


class VolumeLayer:
    """Every PersistentVolume by name and every claim by namespace and name, at one version."""

    __slots__ = ("version", "volumes", "claims", "_memo")

    def __init__(self, volumes: Mapping[str, PersistentVolume],
                 claims: Mapping[str, Mapping[str, PersistentVolumeClaim]]) -> None:
        self.version = next(_VERSIONS)
        self.volumes: Mapping[str, PersistentVolume] = _sealed(volumes)
        self.claims: Mapping[str, Mapping[str, PersistentVolumeClaim]] = _sealed(claims)
        self._memo = ByteLRU.counted("memo", VOLUME_MEMO_SIZE)

    def claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        bucket = self.claims.get(namespace)
        return bucket.get(name) if bucket is not None else None

    @property
    def claim_count(self) -> int:
        return sum(len(b) for b in self.claims.values())

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """An answer that reads this layer alone (`Reads.VOLUMES`: plugins ask through
        `ClusterSnapshot.memo`), kept as long as the layer. `compute` runs outside the
        lock (it may ask for other answers; a racing duplicate is harmless: the answers
        are pure)."""
        return self._memo.get_or_build(key, compute)

    def by_class(self) -> Mapping[str, tuple[PersistentVolume, ...]]:
        """Volumes per storage class (`pvCache.ListPVs(class)`), in name order."""
        def build() -> dict[str, tuple[PersistentVolume, ...]]:
            out: dict[str, list[PersistentVolume]] = {}
            for name in sorted(self.volumes):
                pv = self.volumes[name]
                out.setdefault(pv.storage_class, []).append(pv)
            return {k: tuple(v) for k, v in out.items()}
        return self.memo("by-class", build)

    def __iter__(self):
        yield from self.volumes.values()
        for bucket in self.claims.values():
            yield from bucket.values()


EMPTY_VOLUMES = VolumeLayer({}, {})


def parse_volume(kind: str, obj: Mapping[str, Any]) -> PersistentVolume | PersistentVolumeClaim:
    """The slim model of a raw PV or PVC (ModelError for a malformed one)."""
    return pv_from_dict(obj) if kind == PV else pvc_from_dict(obj)


class VolumeLayerWriter:
    """Applies volume events to private copies of what they touch; `publish` seals them."""

    def __init__(self, layer: VolumeLayer = EMPTY_VOLUMES) -> None:
        self.layer = layer
        self._volumes: dict[str, PersistentVolume] | None = None  # copied on first change
        self._buckets: dict[str, dict[str, PersistentVolumeClaim]] = {}  # touched namespaces

    def _volume_map(self) -> dict[str, PersistentVolume]:
        if self._volumes is None:
            self._volumes = dict(self.layer.volumes)
        return self._volumes

    def _bucket(self, namespace: str) -> dict[str, PersistentVolumeClaim]:
        bucket = self._buckets.get(namespace)
        if bucket is None:
            bucket = self._buckets[namespace] = dict(self.layer.claims.get(namespace, {}))
        return bucket

    def get(self, kind: str, namespace: str, name: str) -> PersistentVolume | PersistentVolumeClaim | None:
        if kind == PV:
            return (self._volumes if self._volumes is not None else self.layer.volumes).get(name)
        bucket = self._buckets.get(namespace)
        return bucket.get(name) if bucket is not None else self.layer.claim(namespace, name)

    def put(self, obj: PersistentVolume | PersistentVolumeClaim) -> bool:
        """Add or replace one object; False when an equal one is already there."""
        if isinstance(obj, PersistentVolume):
            if self.get(PV, "", obj.name) == obj:
                return False
            self._volume_map()[obj.name] = obj
            return True
        if self.get(PVC, obj.namespace, obj.name) == obj:
            return False
        self._bucket(obj.namespace)[obj.name] = obj
        return True

    def remove(self, kind: str, namespace: str, name: str) -> bool:
        if self.get(kind, namespace, name) is None:
            return False
        if kind == PV:
            del self._volume_map()[name]
        else:
            del self._bucket(namespace)[name]
        return True

    def keys(self, kind: str) -> set[tuple[str, str]]:
        """(namespace, name) of every object of `kind` ("" namespace for volumes)."""
        if kind == PV:
            volumes = self._volumes if self._volumes is not None else self.layer.volumes
            return {("", name) for name in volumes}
        out = {(ns, name) for ns, bucket in self.layer.claims.items() if ns not in self._buckets
               for name in bucket}
        out.update((ns, name) for ns, bucket in self._buckets.items() for name in bucket)
        return out

    @property
    def dirty(self) -> bool:
        return self._volumes is not None or bool(self._buckets)

    def publish(self) -> VolumeLayer:
        """The layer with every change so far (the same object when nothing changed)."""
        if not self.dirty:
            return self.layer
        claims = dict(self.layer.claims)
        for namespace, bucket in self._buckets.items():
            if bucket:
                claims[namespace] = MappingProxyType(bucket)
            else:
                claims.pop(namespace, None)
        volumes = MappingProxyType(self._volumes) if self._volumes is not None else self.layer.volumes
        self.layer = VolumeLayer(volumes, MappingProxyType(claims))
        self._volumes, self._buckets = None, {}
        return self.layer


def volume_layer(objects: Iterable[PersistentVolume | PersistentVolumeClaim]) -> VolumeLayer:
    writer = VolumeLayerWriter()
    for obj in objects:
        writer.put(obj)
    return writer.publish()
