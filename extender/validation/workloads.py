"""Validate any Kubernetes object that is or carries a pod template.

Pods are checked where they are; the workload kinds at the path of their pod template
(`spec.template` for Deployments, StatefulSets, DaemonSets, ReplicaSets,
ReplicationControllers and Jobs; `spec.jobTemplate.spec.template` for CronJobs;
`template` for PodTemplates), so a bad annotation is caught when the workload is
applied, not when its controller's pods stay Pending. PersistentVolumes carry a
node-affinity annotation of their own. Other kinds are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.features import FeatureGates
from extender.validation.annotations import check_pod, check_volume
from extender.validation.field import FieldError, invalid, key

TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


@dataclass(frozen=True, slots=True)
class ObjectCheck:
    kind: str
    name: str
    namespace: str
    checked: bool  # False: a kind without a pod template
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_template(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """(the pod or pod template object, its path prefix) or None for other kinds."""
    path = TEMPLATE_PATHS.get(str(obj.get("kind") or ""))
    if path is None:
        return None
    node: Any = obj
    for part in path:
        node = _mapping(node).get(part)
    return _mapping(node), ".".join(path)


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _mapping(obj.get("metadata"))
    name = meta.get("name") or meta.get("generateName") or ""
    return str(name), str(meta.get("namespace") or "")


PERSISTENT_VOLUME = "PersistentVolume"
CHECKED_KINDS = (*TEMPLATE_PATHS, PERSISTENT_VOLUME)


def check_object(obj: Mapping[str, Any], prefix: str, gates: FeatureGates) -> ObjectCheck:
    kind = str(obj.get("kind") or "")
    name, namespace = _name(obj)
    if kind == PERSISTENT_VOLUME:
        meta = _mapping(obj.get("metadata"))
        check = check_volume(_mapping(meta.get("annotations")), _mapping(obj.get("spec")).get("nodeAffinity"),
                             prefix, gates)
        return ObjectCheck(kind, name, namespace, True, check.errors, check.warnings)
    found = pod_template(obj)
    if found is None:
        return ObjectCheck(kind, name, namespace, checked=False)
    template, base = found
    meta_path = f"{base}.metadata" if base else "metadata"
    spec_path = f"{base}.spec" if base else "spec"
    raw_annotations = _mapping(_mapping(template.get("metadata")).get("annotations"))
    annotations: dict[str, str] = {}
    errors: list[FieldError] = []
    for ann in (f"{prefix}/tolerations", f"{prefix}/node-affinity"):
        value = raw_annotations.get(ann)
        if value is None:
            continue
        if not isinstance(value, str):  # YAML `key: 5` or a list: the API server wants strings
            errors.append(invalid(key(f"{meta_path}.annotations", ann), str(value), "annotation values must be strings"))
            continue
        annotations[ann] = value
    tolerations = _mapping(template.get("spec")).get("tolerations")
    check = check_pod(annotations, tolerations if isinstance(tolerations, list) else [], prefix, gates,
                      meta_path, spec_path)
    return ObjectCheck(kind, name, namespace, True, tuple(errors) + check.errors, check.warnings)
