"""What the drift report keeps of a running pod: its node, and its scheduling
constraints as one interned `Shape`.

The cluster state keeps bound pods slim (what counting reads: labels, node, phase), so
the report reads a pod's constraints from the raw object the watch delivers: spec
tolerations, nodeSelector and required node affinity, the annotation channel's
tolerations and node affinity, topology spread constraints (for the opt-in spread
report) and the claims of its volumes. The constraint fields are parsed once per
distinct text (`Shapes.intern`), by the same `pod_from_dict` and annotation validation
as `/filter`: the pods of one workload share one `Shape`, its compiled affinity and
every verdict memoised for it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from extender.features import FeatureGates
from extender.matching.nodeselector import RequiredAffinity, required_affinity
from extender.model import Pod
from extender.model.parse import ModelError, pod_volume_claims
from extender.validation.pod import pod_from_dict

TERMINAL_PHASES = ("Succeeded", "Failed")
Key = tuple[str, str]  # (namespace, name)


class Shape:
    """One distinct set of scheduling constraints (interned: compared by identity).

    `pod` is a nameless Pod carrying the effective constraints exactly as `/filter`
    parses them (spec + annotation channel, validation errors included); `required` is
    compiled once and shared by every pod of the shape. `sources` names where each
    required selector came from, in `pod.affinity.required`'s order (for the report's
    details)."""

    __slots__ = ("pod", "required", "sources", "__weakref__")

    def __init__(self, pod: Pod, required: RequiredAffinity, sources: tuple[str, ...]) -> None:
        self.pod = pod
        self.required = required
        self.sources = sources


@dataclass(frozen=True, slots=True)
class Running:
    """A running pod as the report tracks it: where it runs and what it asks for."""

    node: str
    uid: str
    shape: Shape
    claims: tuple[tuple[str, bool], ...] = ()  # (claim name, generic ephemeral?)


_EMPTY: Mapping[str, Any] = {}


def _section(value: Any) -> Mapping[str, Any]:
    """A JSON object's section, or an empty one for anything else (a feed validates
    what it hands over; a cluster file may not)."""
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return _EMPTY


def running_node(meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    """The node a pod runs on, or "" when it is not running there for the report's
    purposes: unbound, terminated (Succeeded/Failed) or being deleted."""
    node = spec.get("nodeName")
    if not node or type(node) is not str:
        return ""
    if meta.get("deletionTimestamp") is not None or status.get("phase") in TERMINAL_PHASES:
        return ""
    return node


class Shapes:
    """The interning table: constraint text -> `Shape`, held weakly (a shape lives as
    long as a tracked pod or a memo entry refers to it)."""

    def __init__(self, prefix: str, gates: FeatureGates, spread: bool = False, owners: bool = False) -> None:
        """`spread`: keep topology spread constraints (the opt-in spread report);
        `owners`: and the controller of pods without any, whose default constraints
        read it (only when the configured defaults are DoNotSchedule: upstream's
        System defaults never are, and the controller makes a shape per workload)."""
        self.prefix = prefix
        self.gates = gates
        self.spread = spread
        self.owners = spread and owners
        self._annotations = (f"{prefix}/tolerations", f"{prefix}/node-affinity")
        self._table: weakref.WeakValueDictionary[bytes, Shape] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._table)

    def key_parts(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> list[Any]:
        """The parts of a pod that decide where it may run, as they are written: spec
        tolerations, nodeSelector and node affinity, the two annotations, the profile
        that placed it (`schedulerName`: its plugins and their arguments judge it), and
        the spread constraints, or the controller, for the spread report."""
        annotations = _section(meta.get("annotations"))
        tolerations, affinity = self._annotations
        parts = [spec.get("tolerations"), spec.get("nodeSelector"), _section(spec.get("affinity")).get("nodeAffinity"),
                 annotations.get(tolerations), annotations.get(affinity), spec.get("schedulerName")]
        if self.spread:
            constraints = spec.get("topologySpreadConstraints")
            parts.append(constraints)
            owners = meta.get("ownerReferences")
            if constraints is None and self.owners and isinstance(owners, list):
                # default constraints read the pod's controller (its ReplicaSet, ...)
                parts.append([o for o in owners if isinstance(o, Mapping) and o.get("controller") is True])
        return parts

    def minimal_pod(self, parts: list[Any]) -> dict[str, Any]:
        """A pod object with only these parts (what `/filter` would parse of them)."""
        tolerations, selector, affinity, ann_tolerations, ann_affinity, scheduler = parts[:6]
        spec: dict[str, Any] = {k: v for k, v in (("tolerations", tolerations), ("nodeSelector", selector),
                                                  ("schedulerName", scheduler)) if v is not None}
        if affinity is not None:
            spec["affinity"] = {"nodeAffinity": affinity}
        if len(parts) > 6 and parts[6] is not None:
            spec["topologySpreadConstraints"] = parts[6]
        annotations = {k: v for k, v in zip(self._annotations, (ann_tolerations, ann_affinity), strict=True)
                       if v is not None}
        meta: dict[str, Any] = {"annotations": annotations} if annotations else {}
        if len(parts) > 7:
            meta["ownerReferences"] = parts[7]
        return {"metadata": meta, "spec": spec}

    def intern(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Shape | None:
        """The pod's `Shape`, parsed once per distinct constraint text (None when the
        parts do not even parse as a pod's: the API server never stores such a pod)."""
        parts = self.key_parts(meta, spec)
        try:
            text = orjson.dumps(parts)
        except TypeError:
            return None
        hit = self._table.get(text)
        if hit is not None:
            return hit
        fields = self.minimal_pod(parts)
        try:
            pod = pod_from_dict(fields, self.prefix, keep_raw=False, gates=self.gates)
        except ModelError:
            return None
        sources: list[str] = []
        if _section(parts[2]).get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
            sources.append("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
        while len(sources) < len(pod.affinity.required):
            sources.append(f"metadata.annotations[{self._annotations[1]}].requiredDuringSchedulingIgnoredDuringExecution")
        shape = Shape(pod, required_affinity(pod.node_selector, pod.affinity.required,
                                             self.gates.semver_operators), tuple(sources))
        with self._lock:
            return self._table.setdefault(text, shape)

    def running(self, raw: Mapping[str, Any], uid: str = "") -> Running | None:
        """What the report tracks of a pod, or None when it is not running on a node."""
        meta, spec = _section(raw.get("metadata")), _section(raw.get("spec"))
        node = running_node(meta, spec, _section(raw.get("status")))
        if not node:
            return None
        shape = self.intern(meta, spec)
        if shape is None:
            return None
        claims: tuple[tuple[str, bool], ...] = ()
        if spec.get("volumes"):
            try:
                claims = pod_volume_claims(spec, str(meta.get("name") or ""))
            except ModelError:
                pass
        return Running(node, uid or str(meta.get("uid") or ""), shape, claims)
