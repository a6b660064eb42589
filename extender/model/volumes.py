"""Slim PersistentVolumes and PersistentVolumeClaims: what volume node affinity reads.

A pod's claims (`Pod.volume_claims`) are resolved against these. A bound claim names
its volume (`volume_name`); for an unbound claim the in-tree binder (kube-scheduler's
VolumeBinding) later picks a volume among the candidates `FindMatchingVolume` accepts,
so the fields it filters on are kept too (class, capacity, volume mode, access modes,
the claim's selector, the volume's phase and claimRef). Quantities stay as their text:
they are parsed (exactly, `resource.Quantity` rules) only when a claim is unbound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.model.objects import NodeSelector
from extender.model.parse import (
    ModelError,
    _list,
    _obj,
    _str,
    _str_map,
    node_selector_term,
)

BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
FILESYSTEM = "Filesystem"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    storage_class: str = ""
    claim_ref: tuple[str, str, str] | None = None  # (namespace, name, uid)
    phase: str = ""
    deleting: bool = False
    capacity: str = ""  # spec.capacity.storage, as written
    volume_mode: str = FILESYSTEM
    access_modes: tuple[str, ...] = ()
    node_affinity: NodeSelector | None = None  # spec.nodeAffinity.required


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str = ""
    volume_name: str = ""
    storage_class: str = ""
    request: str = ""  # spec.resources.requests.storage, as written
    volume_mode: str = FILESYSTEM
    access_modes: tuple[str, ...] = ()
    selector: Mapping[str, Any] | None = None  # spec.selector (a LabelSelector), raw
    selected_node: str = ""  # set while a volume is provisioned for one node


def _modes(raw: Any, where: str) -> tuple[str, ...]:
    return tuple(sorted(_str(m, f"{where}[]") for m in _list(raw, where)))


def _storage(raw: Any, where: str) -> str:
    """A quantity as text (JSON numbers are quantities too: `storage: 5`)."""
    value = _obj(raw, where).get("storage")
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ModelError(f"{where}.storage: expected a quantity, got {type(value).__name__}")
    return str(value)


def _class(annotations: Mapping[str, str], spec: Mapping[str, Any], where: str) -> str:
    """`GetPersistentVolume(Claim)Class`: the beta annotation when present (even empty)."""
    beta = annotations.get(BETA_STORAGE_CLASS)
    return beta if beta is not None else _str(spec.get("storageClassName"), f"{where}.spec.storageClassName")


def pv_from_dict(raw: Any) -> PersistentVolume:
    raw = _obj(raw, "persistentvolume")
    meta = _obj(raw.get("metadata"), "persistentvolume.metadata")
    spec = _obj(raw.get("spec"), "persistentvolume.spec")
    status = _obj(raw.get("status"), "persistentvolume.status")
    name = _str(meta.get("name"), "persistentvolume.metadata.name")
    if not name:
        raise ModelError("persistentvolume without metadata.name")
    where = f"persistentvolume {name!r}"
    annotations = _str_map(meta.get("annotations"), f"{where}.metadata.annotations")
    ref_raw = spec.get("claimRef")
    claim_ref = None
    if ref_raw is not None:
        ref = _obj(ref_raw, f"{where}.spec.claimRef")
        claim_ref = (_str(ref.get("namespace"), f"{where}.spec.claimRef.namespace"),
                     _str(ref.get("name"), f"{where}.spec.claimRef.name"),
                     _str(ref.get("uid"), f"{where}.spec.claimRef.uid"))
    affinity = _obj(spec.get("nodeAffinity"), f"{where}.spec.nodeAffinity")
    required = affinity.get("required")
    selector = None
    if required is not None:
        req_where = f"{where}.spec.nodeAffinity.required"
        terms = _list(_obj(required, req_where).get("nodeSelectorTerms"), f"{req_where}.nodeSelectorTerms")
        selector = NodeSelector(tuple(node_selector_term(t, f"{req_where}.nodeSelectorTerms[{i}]")
                                      for i, t in enumerate(terms)))
    return PersistentVolume(
        name=name,
        labels=_str_map(meta.get("labels"), f"{where}.metadata.labels"),
        annotations=annotations,
        storage_class=_class(annotations, spec, where),
        claim_ref=claim_ref,
        phase=_str(status.get("phase"), f"{where}.status.phase"),
        deleting=meta.get("deletionTimestamp") is not None,
        capacity=_storage(spec.get("capacity"), f"{where}.spec.capacity"),
        volume_mode=_str(spec.get("volumeMode"), f"{where}.spec.volumeMode") or FILESYSTEM,
        access_modes=_modes(spec.get("accessModes"), f"{where}.spec.accessModes"),
        node_affinity=selector,
    )


def pvc_from_dict(raw: Any) -> PersistentVolumeClaim:
    raw = _obj(raw, "persistentvolumeclaim")
    meta = _obj(raw.get("metadata"), "persistentvolumeclaim.metadata")
    spec = _obj(raw.get("spec"), "persistentvolumeclaim.spec")
    name = _str(meta.get("name"), "persistentvolumeclaim.metadata.name")
    if not name:
        raise ModelError("persistentvolumeclaim without metadata.name")
    namespace = _str(meta.get("namespace"), "persistentvolumeclaim.metadata.namespace") or "default"
    where = f"persistentvolumeclaim {namespace}/{name}"
    annotations = _str_map(meta.get("annotations"), f"{where}.metadata.annotations")
    selector = spec.get("selector")
    if selector is not None:
        selector = _obj(selector, f"{where}.spec.selector")
    resources = _obj(spec.get("resources"), f"{where}.spec.resources")
    return PersistentVolumeClaim(
        namespace=namespace,
        name=name,
        uid=_str(meta.get("uid"), f"{where}.metadata.uid"),
        volume_name=_str(spec.get("volumeName"), f"{where}.spec.volumeName"),
        storage_class=_class(annotations, spec, where),
        request=_storage(resources.get("requests"), f"{where}.spec.resources.requests"),
        volume_mode=_str(spec.get("volumeMode"), f"{where}.spec.volumeMode") or FILESYSTEM,
        access_modes=_modes(spec.get("accessModes"), f"{where}.spec.accessModes"),
        selector=selector,
        selected_node=annotations.get(SELECTED_NODE, ""),
    )

