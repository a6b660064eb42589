"""Shared helpers for the PodTopologySpread tests: parse the spec §5 catalogue
(`pts_catalogue.md`, the upstream unit tests as data) into cluster objects, and build
plugins / frameworks / engines over them."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.features import FeatureGates
from extender.framework import CycleState, Framework
from extender.framework.handle import SNAPSHOT_KEY, Handle
from extender.plugins.podtopologyspread import PodTopologySpread
from extender.state import ClusterSnapshot, NodeSet
from extender.validation.pod import pod_from_dict

CATALOGUE = Path(__file__).with_name("pts_catalogue.md")
NAME = "PodTopologySpread"
MODES = {"DNS": "DoNotSchedule", "SA": "ScheduleAnyway"}


class CelOutcome:
    def __init__(self, matched: bool) -> None:
        self.matched = matched
        self.kind = "true" if matched else "false"
        self.message = ""


class FakeCel:
    """Stands in for extender.cel.CelCache where CEL is not under test."""

    def evaluate(self, expression: str, taint: Any) -> CelOutcome:
        return CelOutcome(False)


# --- tiny notation parsers ----------------------------------------------------------------


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside (), {} and []."""
    out, depth, cur = [], 0, []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if depth == 0 and text.startswith(sep, i):
            out.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur))
    return [p.strip() for p in out]


def groups(text: str) -> list[str]:
    """Balanced top-level `( ... )` groups."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
    return out


def _value(v: str) -> str:
    return "" if v == '""' else v


def label_map(text: str) -> dict[str, str]:
    """`{a=1,b=""}` -> dict."""
    inner = text.strip()[1:-1].strip()
    out = {}
    for part in split_top(inner):
        key, _, value = part.partition("=")
        out[key.strip()] = _value(value.strip())
    return out


def values_list(text: str) -> list[str]:
    inner = text.strip()[1:-1]
    return [_value(v.strip()) for v in inner.split(",")]


def selector(text: str) -> dict[str, Any] | None:
    """`nil`, `{}`, `{foo=bar}`, `{foo Exists && bar In (a)}` -> LabelSelector dict."""
    text = text.strip()
    if text == "nil":
        return None
    inner = text[1:-1].strip()
    sel: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in inner.split("&&"))):
        if "=" in part and " " not in part:
            key, _, value = part.partition("=")
            sel.setdefault("matchLabels", {})[key] = _value(value)
            continue
        key, op, *rest = part.split(" ", 2)
        expr: dict[str, Any] = {"key": key, "operator": op}
        if rest:
            expr["values"] = values_list(rest[0])
        sel.setdefault("matchExpressions", []).append(expr)
    return sel


def constraint(text: str) -> dict[str, Any]:
    parts = split_top(text)
    c: dict[str, Any] = {"maxSkew": int(parts[0]), "topologyKey": parts[1], "whenUnsatisfiable": MODES.get(parts[2], parts[2])}
    for part in parts[3:]:
        key, _, value = part.partition("=")
        if key == "sel":
            c["labelSelector"] = selector(value)
        elif key == "minDomains":
            c["minDomains"] = int(value)
        elif key == "matchLabelKeys":
            c["matchLabelKeys"] = ast.literal_eval(value)
        else:
            c[key] = value
    return c


def taint(text: str) -> dict[str, str]:
    kv, _, effect = text.rpartition(":")
    key, _, value = kv.partition("=")
    return {"key": key, "value": value, "effect": effect}


NODE_RE = re.compile(r"(?P<name>[\w.-]+)(?P<labels>\{[^}]*\})(?:\[(?P<taint>[^\]]*)\])?")
POD_RE = re.compile(
    r"(?P<node>[\w.-]+):(?P<labels>\{[^}]*\})(?:x(?P<n>\d+))?(?:@ns=(?P<ns>[\w-]+))?(?P<term>\[terminating\])?"
)


def node_obj(name: str, labels: dict[str, str], taints: list[dict] | None = None) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {"taints": taints or []}}


def pod_obj(
    name: str, labels: dict[str, str], node: str = "", ns: str = "default", terminating: bool = False,
    nominated: str = "", priority: int = 0, phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase if node else "Pending"}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": node, "priority": priority}, "status": status}


# --- cases ----------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    title: str
    f: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.id


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for line in CATALOGUE.read_text().splitlines():
        if line.startswith("#### "):
            ident, _, title = line[5:].partition(" — ")
            cases.append(Case(ident.strip(), title.strip()))
        elif line.startswith("- ") and cases:
            key, _, value = line[2:].partition(": ")
            cases[-1].f[key.strip()] = value.strip()
    return cases


def cases_with(key: str) -> list[Case]:
    return [c for c in load_cases() if key in c.f]


def gates_of(case: Case, production: bool = False) -> FeatureGates:
    if production:
        return FeatureGates()
    text = case.f["args"].split("gates(test):")[1]
    flags = dict(p.strip().split("=") for p in text.split(","))
    return FeatureGates(
        node_inclusion_policy=flags["NodeInclusionPolicy"] == "True",
        match_label_keys=flags["MatchLabelKeys"] == "True",
    )


def args_of(case: Case) -> dict[str, Any]:
    text = case.f["args"].split("; gates(test):")[0]
    if text.startswith("System"):
        return {"defaultingType": "System"}
    defaults = [constraint(g) for g in groups(text.partition("defaults=")[2])]
    return {"defaultingType": "List", "defaultConstraints": defaults}


def objects_of(case: Case) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    nodes = case.f["nodes"]
    if nodes != "(none)":
        for part in nodes.split("; "):
            m = NODE_RE.fullmatch(part.strip())
            assert m, part
            taints = [taint(m["taint"])] if m["taint"] else []
            objs.append(node_obj(m["name"], label_map(m["labels"]), taints))
    pods = case.f["existing pods (node:labels xN)"]
    if pods != "(none)":
        for i, part in enumerate(pods.split("; ")):
            m = POD_RE.fullmatch(part.strip())
            assert m, part
            for j in range(int(m["n"] or 1)):
                objs.append(
                    pod_obj(f"e{i}-{j}", label_map(m["labels"]), m["node"], m["ns"] or "default", bool(m["term"]))
                )
    if "services" in case.f:
        sel = label_map(case.f["services"].partition("selector=")[2])
        objs.append({"kind": "Service", "metadata": {"name": "svc", "namespace": "default"}, "spec": {"selector": sel}})
    if "replicaSets" in case.f:
        name, _, sel = case.f["replicaSets"].partition(" selector=")
        objs.append({
            "kind": "ReplicaSet", "apiVersion": "apps/v1",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"selector": selector(sel)},
        })
    return objs


def incoming_of(case: Case) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "incoming", "namespace": "default"}
    spec: dict[str, Any] = {}
    for part in case.f["incoming pod"].split("; "):
        key, _, value = part.partition("=") if not part.startswith("requiredNodeAffinity") else part.partition(": ")
        if key == "labels":
            meta["labels"] = label_map(value)
        elif key == "constraints":
            if value != "none":
                spec["topologySpreadConstraints"] = [constraint(g) for g in groups(value)]
        elif key == "nodeSelector":
            spec["nodeSelector"] = label_map(value)
        elif key == "requiredNodeAffinity":
            k, op, vals = value.split(" ", 2)
            expr = {"key": k, "operator": op, "values": values_list(vals)}
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}
        elif key == "tolerations":
            k, op = value.split(" ")
            spec["tolerations"] = [{"key": k, "operator": op}]
        elif key == "controller":
            kind, _, name = value.partition("/")
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": name, "controller": True}]
        else:
            raise AssertionError(f"unknown incoming pod field {part!r}")
    return {"metadata": meta, "spec": spec}


def counts_of(text: str) -> list[dict[str, int]]:
    """`c0:{"zone1":3} | c1:{...}` -> list of dicts."""
    return [json.loads(part.strip().partition(":")[2]) for part in text.split(" | ")]


def statuses_of(text: str) -> dict[str, str]:
    return dict(p.strip().split("=") for p in text.split(","))


# --- building plugins and frameworks -----------------------------------------------------------


@dataclass
class World:
    snapshot: ClusterSnapshot
    pod: Any
    plugin: PodTopologySpread
    handle: Handle

    def state(self, explain: bool = False) -> CycleState:
        state = CycleState(explain=explain)
        state.write(SNAPSHOT_KEY, self.snapshot)
        return state

    def nodeset(self, names: list[str] | None = None) -> NodeSet:
        nodes = self.snapshot.nodes
        if names is None:
            return NodeSet(nodes.nodes, nodes)
        return NodeSet([nodes.by_name[n] for n in names], nodes)

    def framework(self, fast: bool) -> Framework:
        return Framework([self.plugin], {NAME: 1}, fast=fast)


def world(
    objs: list[dict[str, Any]], pod_raw: dict[str, Any], gates: FeatureGates | None = None,
    args: dict[str, Any] | None = None, cel: Any = None,
) -> World:
    gates = gates or FeatureGates()
    handle = Handle(gates, cel or FakeCel(), {NAME: args} if args is not None else {})
    snapshot = ClusterSnapshot.from_objects(objs)
    return World(snapshot, pod_from_dict(pod_raw), PodTopologySpread(handle), handle)


def case_world(case: Case, production: bool = False, extra: list[dict] | None = None) -> World:
    objs = objects_of(case) + list(extra or [])
    return world(objs, incoming_of(case), gates_of(case, production), args_of(case))
