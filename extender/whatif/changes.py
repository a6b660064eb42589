"""A what-if request's changes, validated, and the hypothetical state they make.

The request (`POST /whatif`'s body, `extender whatif --request`):

    {"changes": [
       {"nodes": ["a", "b"] | "selector": "pool=spot",
        "taint": "KEY=VALUE:EFFECT" | "KEY:EFFECT-" | "KEY-"
        | "label": "KEY=VALUE" | "KEY-"
        | "cordon": true | false
        | "remove": true},
       {"volume": "pv-name", "annotation": "KEY=VALUE" | "KEY-"}],
     "pods": [a Pod, or a workload with spec.template, ...]}

Taints and labels are written as `kubectl taint` and `kubectl label` write them. A taint
with a key and effect the node already has gets the new value (`kubectl taint
--overwrite`); `KEY-` removes every taint with that key, `KEY:EFFECT-` the one with that
effect; a label is set or, with `KEY-`, removed. A cordon sets `spec.unschedulable` and
the `node.kubernetes.io/unschedulable:NoSchedule` taint the node lifecycle controller adds
right after it (an uncordon removes both). A change selects its nodes by name or by
a label selector (`kubectl -l`'s syntax), read from the state *before* any change, and
applies to them in order after the changes before it.

The hypothetical state shares everything it does not change with the snapshot: a node
layer evolved from the snapshot's (`NodeIndex.evolve`, O(touched nodes)), private (it
carries none of the live layer's candidate sets), the same pod and workload layers, and
a volume layer with the touched PersistentVolumes replaced. Nothing here writes into the
snapshot: the verbs never see a what-if.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.matching.labels import validate_label_key, validate_label_value
from extender.model import Node, Taint
from extender.model.objects import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE
from extender.state import ClusterSnapshot
from extender.state.volumes import VolumeLayerWriter
from extender.whatif.selector import SelectorError, parse_selector

EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
MAX_CHANGES = 100  # changes per request
MAX_NODES_TOUCHED = 20000  # distinct nodes the changes touch (their new copies are the cost)
MAX_PODS = 10  # pods and workload templates asked "where could it go"
NODE_OPS = ("taint", "label", "cordon", "remove")
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)


class WhatIfError(ValueError):
    """A request the what-if cannot answer: its HTTP status (400, 413) and why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Change:
    """One change: an operation (`op`: taint, untaint, label, unlabel, cordon, remove,
    annotate, unannotate) on some nodes (by `names` or `selector`) or on one volume."""

    op: str
    names: tuple[str, ...] = ()
    selector: str = ""
    taint: Taint | None = None  # taint: the taint set; untaint: key and effect ("" = any)
    key: str = ""  # label / annotation key
    value: str = ""
    volume: str = ""
    text: str = ""  # as the request wrote it (for the answer)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"change": self.text}
        if self.volume:
            out["volume"] = self.volume
        elif self.selector:
            out["selector"] = self.selector
        else:
            out["nodes"] = list(self.names)
        return out


@dataclass
class Plan:
    """The validated changes and pods of one request."""

    changes: list[Change]
    pods: list[dict[str, Any]] = field(default_factory=list)


def _where(i: int) -> str:
    return f"changes[{i}]"


def parse_taint(text: str, where: str) -> Change:
    """`KEY=VALUE:EFFECT` (set), `KEY[=VALUE]:EFFECT-` or `KEY-` (remove), as `kubectl taint`."""
    if not isinstance(text, str) or not text:
        raise WhatIfError(f"{where}.taint: expected KEY=VALUE:EFFECT, KEY:EFFECT- or KEY-, got {text!r}")
    remove = text.endswith("-")
    spec = text[:-1] if remove else text
    head, colon, effect = spec.partition(":")
    key, eq, value = head.partition("=")
    errors = [f"key {key!r}: {e}" for e in validate_label_key(key)]
    if eq and not remove or value:
        errors += [f"value {value!r}: {e}" for e in validate_label_value(value)]
    if colon or not remove:
        if effect not in EFFECTS:
            errors.append(f"effect {effect!r}: expected one of {', '.join(EFFECTS)}")
    if errors:
        raise WhatIfError(f"{where}.taint {text!r}: " + "; ".join(errors))
    if remove:
        return Change("untaint", taint=Taint(key, "", effect), text=f"taint {text}")
    return Change("taint", taint=Taint(key, value, effect), text=f"taint {text}")


def parse_key_value(text: Any, where: str, what: str) -> tuple[str, str, bool]:
    """`KEY=VALUE` (set) or `KEY-` (remove): (key, value, remove)."""
    if not isinstance(text, str) or not text:
        raise WhatIfError(f"{where}: expected KEY=VALUE or KEY-, got {text!r}")
    if text.endswith("-") and "=" not in text:
        key, value, remove = text[:-1], "", True
    else:
        key, eq, value = text.partition("=")
        if not eq:
            raise WhatIfError(f"{where} {text!r}: expected KEY=VALUE or KEY-")
        remove = False
    errors = [f"key {key!r}: {e}" for e in validate_label_key(key)]
    if what == "label" and not remove:
        errors += [f"value {value!r}: {e}" for e in validate_label_value(value)]
    if errors:
        raise WhatIfError(f"{where} {text!r}: " + "; ".join(errors))
    return key, value, remove


def parse_change(raw: Any, i: int) -> Change:
    where = _where(i)
    if not isinstance(raw, Mapping):
        raise WhatIfError(f"{where}: expected an object")
    if "volume" in raw:
        volume, annotation = raw.get("volume"), raw.get("annotation")
        if not isinstance(volume, str) or not volume:
            raise WhatIfError(f"{where}.volume: expected a PersistentVolume's name")
        unknown = set(raw) - {"volume", "annotation"}
        if unknown or annotation is None:
            raise WhatIfError(f"{where}: a volume change takes \"volume\" and \"annotation\" (KEY=VALUE or KEY-)"
                              + (f", not {', '.join(sorted(map(str, unknown)))}" if unknown else ""))
        key, value, remove = parse_key_value(annotation, f"{where}.annotation", "annotation")
        return Change("unannotate" if remove else "annotate", key=key, value=value, volume=volume,
                      text=f"annotate {annotation}")
    ops = [op for op in NODE_OPS if op in raw]
    unknown = set(raw) - {*NODE_OPS, "nodes", "selector"}
    if unknown:
        raise WhatIfError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))[:200]}; expected "
                          "nodes or selector, and one of taint, label, cordon, remove (or volume and annotation)")
    if len(ops) != 1:
        raise WhatIfError(f"{where}: expected exactly one of taint, label, cordon, remove, got {len(ops)}")
    op = ops[0]
    if op == "taint":
        change = parse_taint(raw["taint"], where)
    elif op == "label":
        key, value, remove = parse_key_value(raw["label"], f"{where}.label", "label")
        change = Change("unlabel" if remove else "label", key=key, value=value, text=f"label {raw['label']}")
    elif op == "cordon":
        if not isinstance(raw["cordon"], bool):
            raise WhatIfError(f"{where}.cordon: expected true (cordon) or false (uncordon)")
        change = Change("cordon" if raw["cordon"] else "uncordon", text="cordon" if raw["cordon"] else "uncordon")
    else:
        if raw["remove"] is not True:
            raise WhatIfError(f"{where}.remove: expected true")
        change = Change("remove", text="remove")
    names, selector = raw.get("nodes"), raw.get("selector")
    if (names is None) == (selector is None):
        raise WhatIfError(f"{where}: expected either nodes (a list of names) or selector (a label selector)")
    if names is not None:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise WhatIfError(f"{where}.nodes: expected a non-empty list of node names")
        return dataclasses.replace(change, names=tuple(dict.fromkeys(names)))
    if not isinstance(selector, str) or not selector.strip():
        raise WhatIfError(f"{where}.selector: expected a label selector such as pool=spot")
    try:
        parse_selector(selector)
    except SelectorError as exc:
        raise WhatIfError(f"{where}.selector {selector!r}: {exc}") from None
    return dataclasses.replace(change, selector=selector)


def workload_pod(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A Pod as given, or the pod a workload's `spec.template` makes (named after it)."""
    if not isinstance(obj, Mapping):
        raise WhatIfError(f"{where}: expected a Pod or a workload object")
    kind = obj.get("kind", "Pod")
    if kind == "Pod":
        return dict(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    template = spec.get("template")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    if not isinstance(template, Mapping):
        raise WhatIfError(f"{where}: a {kind} without spec.template (expected a Pod or a workload)")
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else "workload"
    pod_meta = {**tmeta, "name": f"{name}-template", "namespace": meta.get("namespace") or "default"}
    return {"kind": "Pod", "apiVersion": "v1", "metadata": pod_meta, "spec": template.get("spec") or {}}


def parse_request(body: Any) -> Plan:
    """The request's plan (WhatIfError: 400 for what is malformed, 413 past the bounds)."""
    if not isinstance(body, Mapping):
        raise WhatIfError("the body must be a JSON object with \"changes\" (and optionally \"pods\")")
    unknown = set(body) - {"changes", "pods", "apiVersion", "kind"}
    if unknown:
        raise WhatIfError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))[:200]}: expected changes, pods")
    raw_changes = body.get("changes")
    if not isinstance(raw_changes, list) or not raw_changes:
        raise WhatIfError("changes: expected a non-empty list of changes")
    if len(raw_changes) > MAX_CHANGES:
        raise WhatIfError(f"changes: {len(raw_changes)} changes, at most {MAX_CHANGES} per request", 413)
    pods = body.get("pods") or []
    if not isinstance(pods, list):
        raise WhatIfError("pods: expected a list of Pods or workloads")
    if len(pods) > MAX_PODS:
        raise WhatIfError(f"pods: {len(pods)} pods, at most {MAX_PODS} per request", 413)
    return Plan([parse_change(c, i) for i, c in enumerate(raw_changes)],
                [workload_pod(p, f"pods[{i}]") for i, p in enumerate(pods)])


# --- the hypothetical state -------------------------------------------------------------


@dataclass
class Hypothesis:
    """The state after the changes, and what they touched."""

    snapshot: ClusterSnapshot
    nodes: dict[str, tuple[Node, Node | None]]  # touched node -> (before, after; None: removed)
    volumes: dict[str, Any]  # touched volume -> its new PersistentVolume
    selected: list[int]  # nodes each change selected


def select(change: Change, snapshot: ClusterSnapshot, i: int) -> list[str]:
    """The nodes a change applies to, read from the state before any change."""
    if change.names:
        unknown = [n for n in change.names if n not in snapshot.nodes.by_name]
        if unknown:
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise WhatIfError(f"{_where(i)}.nodes: no such node(s) in the cluster state: "
                              f"{', '.join(unknown[:5])}{more}")
        return list(change.names)
    matches = parse_selector(change.selector)
    return [n.name for n in snapshot.nodes.nodes if matches(n.labels)]


def changed_node(node: Node, change: Change) -> Node | None:
    """`node` after one change (None: removed)."""
    op = change.op
    if op == "remove":
        return None
    if op == "cordon" or op == "uncordon":
        # what the node lifecycle controller does next (TaintNodesByCondition): the
        # unschedulable taint comes and goes with spec.unschedulable
        taints = tuple(t for t in node.taints if t != UNSCHEDULABLE_TAINT)
        if op == "cordon":
            taints += (UNSCHEDULABLE_TAINT,)
        return dataclasses.replace(node, unschedulable=op == "cordon", taints=taints)
    if op == "label" or op == "unlabel":
        labels = dict(node.labels)
        if op == "label":
            labels[change.key] = change.value
        else:
            labels.pop(change.key, None)
        return dataclasses.replace(node, labels=labels)
    t = change.taint
    if op == "taint":
        taints, replaced = [], False
        for old in node.taints:
            if old.key == t.key and old.effect == t.effect:
                if not replaced:
                    taints.append(t)
                replaced = True
            else:
                taints.append(old)
        if not replaced:
            taints.append(t)
        return dataclasses.replace(node, taints=tuple(taints))
    kept = tuple(old for old in node.taints if not (old.key == t.key and (not t.effect or old.effect == t.effect)))
    return dataclasses.replace(node, taints=kept) if len(kept) != len(node.taints) else node


def hypothesize(snapshot: ClusterSnapshot, plan: Plan, max_nodes: int | None = None) -> Hypothesis:
    """The snapshot with the plan's changes applied, as a layer over it (see the module
    docstring). WhatIfError for an unknown node or volume (400) and past `max_nodes`
    touched nodes (413; default `MAX_NODES_TOUCHED`)."""
    max_nodes = MAX_NODES_TOUCHED if max_nodes is None else max_nodes
    current: dict[str, Node | None] = {}
    selected: list[int] = []
    writer = VolumeLayerWriter(snapshot.volume_layer)
    volumes: dict[str, Any] = {}
    for i, change in enumerate(plan.changes):
        if change.volume:
            pv = writer.get("PersistentVolume", "", change.volume)
            if pv is None:
                raise WhatIfError(f"{_where(i)}.volume: no PersistentVolume {change.volume!r} in the cluster state")
            annotations = dict(pv.annotations)
            if change.op == "annotate":
                annotations[change.key] = change.value
            else:
                annotations.pop(change.key, None)
            volumes[pv.name] = dataclasses.replace(pv, annotations=annotations)
            writer.put(volumes[pv.name])
            selected.append(1)
            continue
        names = select(change, snapshot, i)
        selected.append(len(names))
        for name in names:
            node = current[name] if name in current else snapshot.nodes.by_name[name]
            if node is None:
                continue  # removed by an earlier change
            current[name] = changed_node(node, change)
        if len(current) > max_nodes:
            raise WhatIfError(f"the changes touch {len(current)}+ nodes, at most {max_nodes} per request", 413)
    before = snapshot.nodes.by_name
    touched = {name: (before[name], node) for name, node in current.items() if node is not before[name]}
    layer = snapshot.nodes.evolve({name: after for name, (_, after) in touched.items()}, carry=False) \
        if touched else snapshot.nodes
    hypothetical = ClusterSnapshot.from_layers(layer, snapshot.pod_layer, snapshot.workload_layer,
                                               snapshot.generation, writer.publish(), snapshot.resource_versions)
    return Hypothesis(hypothetical, touched, volumes, selected)
