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
from extender.model.parse import ModelError, pod_from_dict, pod_volume_claims

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


def running_node(raw: Mapping[str, Any]) -> str:
    """The node a pod runs on, or "" when it is not running there for the report's
    purposes: unbound, terminated (Succeeded/Failed) or being deleted."""
    spec = raw.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if not node or not isinstance(node, str):
        return ""
    meta = raw.get("metadata")
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp") is not None:
        return ""
    status = raw.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return "" if phase in TERMINAL_PHASES else node


def _field(section: Any, name: str) -> Any:
    return section.get(name) if isinstance(section, Mapping) else None


class Shapes:
    """The interning table: constraint text -> `Shape`, held weakly (a shape lives as
    long as a tracked pod or a memo entry refers to it)."""

    def __init__(self, prefix: str, gates: FeatureGates, spread: bool = False) -> None:
        self.prefix = prefix
        self.gates = gates
        self.spread = spread  # keep topology spread constraints (the opt-in spread report)
        self._annotations = (f"{prefix}/tolerations", f"{prefix}/node-affinity")
        self._table: weakref.WeakValueDictionary[bytes, Shape] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._table)

    def constraint_fields(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The parts of a pod that decide where it may run, as a minimal pod object."""
        meta, spec = raw.get("metadata"), raw.get("spec")
        annotations = _field(meta, "annotations")
        kept: dict[str, Any] = {}
        if isinstance(annotations, Mapping):
            kept = {k: annotations[k] for k in self._annotations if k in annotations}
        out_spec = {k: v for k in ("tolerations", "nodeSelector") if (v := _field(spec, k)) is not None}
        node_affinity = _field(_field(spec, "affinity"), "nodeAffinity")
        if node_affinity is not None:
            out_spec["affinity"] = {"nodeAffinity": node_affinity}
        out_meta: dict[str, Any] = {"annotations": kept} if kept else {}
        if self.spread:
            constraints = _field(spec, "topologySpreadConstraints")
            if constraints is not None:
                out_spec["topologySpreadConstraints"] = constraints
            else:  # default constraints read the pod's controller (ReplicaSet, ...)
                owners = _field(meta, "ownerReferences")
                if isinstance(owners, list):
                    controllers = [o for o in owners if isinstance(o, Mapping) and o.get("controller") is True]
                    if controllers:
                        out_meta["ownerReferences"] = controllers
        return {"metadata": out_meta, "spec": out_spec}

    def intern(self, raw: Mapping[str, Any]) -> Shape | None:
        """The pod's `Shape` (None when its constraint fields do not even parse as a
        pod's: the API server never stores such a pod)."""
        fields = self.constraint_fields(raw)
        try:
            text = orjson.dumps(fields)
        except TypeError:
            return None
        hit = self._table.get(text)
        if hit is not None:
            return hit
        try:
            pod = pod_from_dict(fields, self.prefix, keep_raw=False, gates=self.gates)
        except ModelError:
            return None
        sources: list[str] = []
        if _field(_field(_field(fields["spec"], "affinity"), "nodeAffinity"),
                  "requiredDuringSchedulingIgnoredDuringExecution") is not None:
            sources.append("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
        while len(sources) < len(pod.affinity.required):
            sources.append(f"metadata.annotations[{self._annotations[1]}].requiredDuringSchedulingIgnoredDuringExecution")
        shape = Shape(pod, required_affinity(pod.node_selector, pod.affinity.required,
                                             self.gates.semver_operators), tuple(sources))
        with self._lock:
            return self._table.setdefault(text, shape)

    def running(self, raw: Mapping[str, Any], uid: str = "") -> Running | None:
        """What the report tracks of a pod, or None when it is not running on a node."""
        node = running_node(raw)
        if not node:
            return None
        shape = self.intern(raw)
        if shape is None:
            return None
        meta = raw.get("metadata")
        try:
            claims = pod_volume_claims(raw.get("spec") or {}, str(_field(meta, "name") or ""))
        except ModelError:
            claims = ()
        return Running(node, uid or str(_field(meta, "uid") or ""), shape, claims)
