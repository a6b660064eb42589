"""Build model objects from Kubernetes JSON (dicts), once, with clear errors.

The pod being scheduled, whose constraints include the annotation channel, is built by
`extender.validation.pod` from the pieces here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.model.objects import (
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PreferredSchedulingTerm,
    Taint,
    Toleration,
)

DEFAULT_ANNOTATION_PREFIX = "scheduling-extender.io"


class ModelError(ValueError):
    """An object whose fields have the wrong JSON types."""


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case first: ABC isinstance checks are slow
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list:
    if type(value) is list:
        return value
    if value is None:
        return []
    if not isinstance(value, list):
        raise ModelError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ModelError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def _str_map(value: Any, where: str) -> dict[str, str]:
    mapping = _obj(value, where)
    if type(mapping) is dict and set(map(type, mapping.values())) <= {str}:
        return mapping  # the common case, checked in C; model objects never mutate it
    result = {}
    for k, v in mapping.items():
        result[k] = _str(v, f"{where}[{k!r}]")
    return result


def _int(value: Any, where: str, default: int = 0, bits: int = 64) -> int:
    """An integer field of Go type int64 (or int32, `bits`): a number out of its range
    fails to decode, as in Go, so kube-scheduler can never send one."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{where}: expected an integer, got {type(value).__name__}")
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ModelError(f"{where}: {value} is out of range for int{bits}")
    return value


# --- nodes --------------------------------------------------------------------------


def taint_from_dict(raw: Any, where: str) -> Taint:
    raw = _obj(raw, where)
    return Taint(
        _str(raw.get("key"), f"{where}.key"),
        _str(raw.get("value"), f"{where}.value"),
        _str(raw.get("effect"), f"{where}.effect"),
    )


def node_from_dict(raw: Any, keep_raw: bool = False) -> Node:
    raw = _obj(raw, "node")
    meta = _obj(raw.get("metadata"), "node.metadata")
    spec = _obj(raw.get("spec"), "node.spec")
    name = _str(meta.get("name"), "node.metadata.name")
    where = f"node {name!r}"
    taints = tuple(
        taint_from_dict(t, f"{where}.spec.taints[{i}]")
        for i, t in enumerate(_list(spec.get("taints"), f"{where}.spec.taints"))
    )
    unschedulable = spec.get("unschedulable") or False
    if not isinstance(unschedulable, bool):
        raise ModelError(f"{where}.spec.unschedulable: expected a boolean")
    return Node(
        name=name,
        labels=_str_map(meta.get("labels"), f"{where}.metadata.labels"),
        taints=taints,
        unschedulable=unschedulable,
        raw=raw if keep_raw else None,
    )


# --- tolerations and affinity -------------------------------------------------------


def toleration_from_dict(raw: Any, where: str, source: str = "spec") -> Toleration:
    raw = _obj(raw, where)
    seconds = raw.get("tolerationSeconds")
    return Toleration(
        key=_str(raw.get("key"), f"{where}.key"),
        operator=_str(raw.get("operator"), f"{where}.operator"),
        value=_str(raw.get("value"), f"{where}.value"),
        effect=_str(raw.get("effect"), f"{where}.effect"),
        toleration_seconds=None if seconds is None else _int(seconds, f"{where}.tolerationSeconds"),
        expression=_str(raw.get("expression"), f"{where}.expression"),
        source=source,
    )


def _requirement(raw: Any, where: str) -> NodeSelectorRequirement:
    raw = _obj(raw, where)
    values = tuple(_str(v, f"{where}.values[]") for v in _list(raw.get("values"), f"{where}.values"))
    return NodeSelectorRequirement(
        _str(raw.get("key"), f"{where}.key"), _str(raw.get("operator"), f"{where}.operator"), values
    )


def node_selector_term(raw: Any, where: str) -> NodeSelectorTerm:
    raw = _obj(raw, where)
    exprs = _list(raw.get("matchExpressions"), f"{where}.matchExpressions")
    fields = _list(raw.get("matchFields"), f"{where}.matchFields")
    return NodeSelectorTerm(
        tuple(_requirement(r, f"{where}.matchExpressions[{i}]") for i, r in enumerate(exprs)),
        tuple(_requirement(r, f"{where}.matchFields[{i}]") for i, r in enumerate(fields)),
    )


def node_affinity_from_dict(raw: Any, where: str) -> tuple[NodeSelector | None, tuple, bool]:
    """Return (required selector or None, preferred terms, preferred-list-present)."""
    raw = _obj(raw, where)
    req_raw = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if req_raw is not None:
        req_where = f"{where}.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _list(_obj(req_raw, req_where).get("nodeSelectorTerms"), f"{req_where}.nodeSelectorTerms")
        required = NodeSelector(
            tuple(node_selector_term(t, f"{req_where}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
        )
    pref_raw = raw.get("preferredDuringSchedulingIgnoredDuringExecution")
    pref_where = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, p in enumerate(_list(pref_raw, pref_where)):
        p = _obj(p, f"{pref_where}[{i}]")
        preferred.append(
            PreferredSchedulingTerm(
                _int(p.get("weight"), f"{pref_where}[{i}].weight", bits=32),
                node_selector_term(p.get("preference"), f"{pref_where}[{i}].preference"),
            )
        )
    return required, tuple(preferred), pref_raw is not None


# --- pods ---------------------------------------------------------------------------


def pod_volume_claims(spec: Mapping[str, Any], pod_name: str) -> tuple[tuple[str, bool], ...]:
    """(claim name, ephemeral?) of every volume backed by a claim, in volume order: a
    `persistentVolumeClaim` volume names its claim; a generic `ephemeral` volume's claim
    is `<pod name>-<volume name>` (upstream `ephemeral.VolumeClaimName`)."""
    out = []
    for i, volume in enumerate(_list(spec.get("volumes"), "pod.spec.volumes")):
        volume = _obj(volume, f"pod.spec.volumes[{i}]")
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            out.append((_str(_obj(claim, f"pod.spec.volumes[{i}].persistentVolumeClaim").get("claimName"),
                             f"pod.spec.volumes[{i}].persistentVolumeClaim.claimName"), False))
        elif volume.get("ephemeral") is not None:
            out.append((f"{pod_name}-{_str(volume.get('name'), f'pod.spec.volumes[{i}].name')}", True))
    return tuple(out)



def _is_deleting(meta: Mapping[str, Any]) -> bool:
    return meta.get("deletionTimestamp") is not None


# What `pod_from_dict` reads, kept from a pending pod in the cluster state (see below).
PENDING_FIELDS = {
    "metadata": ("name", "namespace", "uid", "labels", "annotations", "ownerReferences", "deletionTimestamp"),
    "spec": ("nodeName", "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "priority",
             "preemptionPolicy", "volumes", "schedulerName"),
    "status": ("phase", "nominatedNodeName"),
}


def pending_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a pod `pod_from_dict` reads, as the API server holds them."""
    out: dict[str, Any] = {}
    for part, names in PENDING_FIELDS.items():
        section = raw.get(part)
        if isinstance(section, Mapping):
            out[part] = {n: section[n] for n in names if n in section}
    return out


def existing_pod_from_dict(raw: Any) -> Pod:
    """A pod already in the cluster: only what counting and defaulting read.

    Skips tolerations, affinity and annotations; at 100k pods that saves time and memory.
    A pod not yet bound keeps, in `raw`, the fields `pod_from_dict` reads
    (`pending_fields`): when kube-scheduler asks about it, that copy is preferred over
    `ExtenderArgs.Pod`, which the scheduler re-serializes from its own Go types and so
    strips of every field its version does not know (a CEL toleration `expression`
    reaches us from v1.30 as `{}`).
    """
    raw = _obj(raw, "pod")
    meta = _obj(raw.get("metadata"), "pod.metadata")
    spec = _obj(raw.get("spec"), "pod.spec")
    status = _obj(raw.get("status"), "pod.status")
    node_name = _str(spec.get("nodeName"), "pod.spec.nodeName")
    return Pod(
        namespace=_str(meta.get("namespace"), "pod.metadata.namespace") or "default",
        name=_str(meta.get("name"), "pod.metadata.name"),
        uid=_str(meta.get("uid"), "pod.metadata.uid"),
        labels=_str_map(meta.get("labels"), "pod.metadata.labels"),
        node_name=node_name,
        priority=_int(spec.get("priority"), "pod.spec.priority", bits=32),
        phase=_str(status.get("phase"), "pod.status.phase"),
        terminating=_is_deleting(meta),
        nominated_node_name=_str(status.get("nominatedNodeName"), "pod.status.nominatedNodeName"),
        raw=None if node_name else pending_fields(raw),
    )
