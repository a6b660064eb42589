"""Builders and the reference oracle of the drift tests.

Objects are plain dicts as the API server returns them. `reference` is the plain path
the tracker is checked against: for every running pod, the whole pod parsed as
`/filter` parses a pending one, and the extender's per-node reference plugins
(`fast=False`) run on its node alone, in an explain run, with the pod itself taken out
of the state; TaintToleration's Score for PreferNoSchedule.
"""

from __future__ import annotations

import json

from extender.api.candidates import resolve
from extender.config import Config
from extender.drift import attach_tracker
from extender.engine import Extender
from extender.explain import key_details, snapshot_without
from extender.state import StaticSource
from extender.state.store import Store
from extender.validation.pod import pod_from_dict

SLA = "example.com/sla"
KERNEL = "example.com/kernel-version"
PREFIX = "scheduling-extender.io"
TOLERATIONS = f"{PREFIX}/tolerations"
AFFINITY = f"{PREFIX}/node-affinity"
PLUGINS = ("TaintToleration", "NodeAffinity", "VolumeNodeAffinity")


def node(name: str, taints: list[dict] | None = None, **labels: str) -> dict:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": list(taints or [])}}


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict:
    return {"key": key, "value": value, "effect": effect}


def pod(name: str, node_name: str = "", *, tolerations: list[dict] | None = None, annotations: dict | None = None,
        node_selector: dict | None = None, affinity: dict | None = None, claims: tuple[str, ...] = (),
        namespace: str = "default", phase: str = "Running", labels: dict | None = None,
        spread: list[dict] | None = None, uid: str = "", deleting: bool = False, scheduler: str = "",
        owner: str = "") -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_name:
        spec["nodeName"] = node_name
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity is not None:
        spec["affinity"] = {"nodeAffinity": affinity}
    if claims:
        spec["volumes"] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    if spread is not None:
        spec["topologySpreadConstraints"] = spread
    meta: dict = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}",
                  "labels": dict(labels or {}),
                  "annotations": {k: v if isinstance(v, str) else json.dumps(v) for k, v in (annotations or {}).items()}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                    "uid": f"uid-{owner}", "controller": True}]
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec,
            "status": {"phase": phase if node_name else "Pending"}}


def required(*expressions: dict) -> dict:
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": list(expressions)}]}}


def expr(key: str, operator: str, *values: str) -> dict:
    out: dict = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def pv(name: str, annotation: dict | None = None, spec: dict | None = None, claim: tuple[str, str] | None = None) -> dict:
    obj: dict = {"kind": "PersistentVolume", "apiVersion": "v1", "metadata": {"name": name, "annotations": {}},
                 "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                          "storageClassName": "fast"},
                 "status": {"phase": "Bound" if claim else "Available"}}
    if annotation is not None:
        obj["metadata"]["annotations"][AFFINITY] = json.dumps(annotation)
    if spec is not None:
        obj["spec"]["nodeAffinity"] = {"required": spec}
    if claim is not None:
        obj["spec"]["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return obj


def pvc(name: str, volume: str = "", namespace: str = "default") -> dict:
    return {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "metadata": {"name": name, "namespace": namespace},
            "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"], "volumeName": volume,
                     "resources": {"requests": {"storage": "5Gi"}}},
            "status": {"phase": "Bound" if volume else "Pending"}}


def selector(*expressions: dict) -> dict:
    return {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}


KIND_PLURAL = {"Node": "nodes", "Pod": "pods", "PersistentVolume": "persistentvolumes",
               "PersistentVolumeClaim": "persistentvolumeclaims"}


class Cluster:
    """A store with a tracker bound to an engine's plugins, fed object by object; the
    truth (the raw objects) is kept beside it for the reference oracle."""

    def __init__(self, config: Config | None = None, objects: list[dict] = ()) -> None:
        self.config = config or Config(drift_report=True)
        self.store = Store()
        self.tracker = attach_tracker(self.store, self.config)
        self.engine = Extender(self.config, StaticSource(self.store.snapshot()))
        fallback, profiles = self.engine.plugins_by_profile()  # as `extender.drift.drift_for` binds it
        self.tracker.bind(fallback, spread=self.config.drift_topology_spread, profiles=profiles)
        self.truth: dict[tuple[str, str, str], dict] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict) -> None:
        md = obj["metadata"]
        scoped = obj["kind"] in ("Pod", "PersistentVolumeClaim")
        self.truth[(obj["kind"], md.get("namespace", "default") if scoped else "", md["name"])] = obj
        self.store.upsert(obj["kind"], obj)

    def delete(self, kind: str, name: str, namespace: str = "default") -> None:
        scoped = kind in ("Pod", "PersistentVolumeClaim")
        self.truth.pop((kind, namespace if scoped else "", name), None)
        self.store.delete(kind, namespace if scoped else "", name)

    def settle(self) -> dict:
        self.tracker.settle()
        return self.report()

    def report(self) -> dict[tuple[str, str], dict]:
        """pod -> {(plugin, reason, severity): details}, as the tracker has it."""
        return {key: {(v.plugin, v.reason, v.severity): v.details for v in d.violations}
                for key, d in self.tracker.entries()}

    def pods(self) -> list[dict]:
        return [o for (kind, _, _), o in self.truth.items() if kind == "Pod"]


def running(raw: dict) -> bool:
    return bool(raw["spec"].get("nodeName")) and raw["status"].get("phase") not in ("Succeeded", "Failed") \
        and raw["metadata"].get("deletionTimestamp") is None


def reference(cluster: Cluster) -> dict[tuple[str, str], dict]:
    """pod -> {(plugin, reason, "hard" or "preferred"): details} by the reference
    plugins (see the module docstring); hard = /filter rejects (NoSchedule and NoExecute
    taints alike, as the filter does not tell them apart)."""
    snapshot = cluster.store.snapshot()
    engine = Extender(cluster.config, StaticSource(snapshot), fast=False)
    out: dict[tuple[str, str], dict] = {}
    for raw in cluster.pods():
        node_name = raw["spec"].get("nodeName")
        if not running(raw) or node_name not in snapshot.nodes.by_name:
            continue
        pod = pod_from_dict(raw, cluster.config.annotation_prefix, gates=cluster.config.feature_gates)
        snap = snapshot_without(snapshot, pod)
        outcome = engine.run_filter(engine.new_state(snap, explain=True), pod, resolve(snap, [node_name]),
                                    run_all=True)
        found = {}
        for plugin in PLUGINS:
            status = outcome.per_plugin.get(plugin, {}).get(node_name)
            if status is not None and not status.is_success:
                found[(plugin, status.reasons[0], "hard")] = tuple(key_details(status.details))
        plugin = next(p for p in engine.framework.plugins if p.name == "TaintToleration")
        if pod.tolerations_error:  # PreFilter rejects every node: Score never runs for it
            out[(pod.namespace, pod.name)] = found
            continue
        state = engine.new_state(snap)
        plugin.pre_score(state, pod, None)
        count, _ = plugin.score(state, pod, snap.nodes.by_name[node_name])
        if count:
            found[("TaintToleration", "node(s) had untolerated taint(s)", "preferred")] = count
        if found:
            out[(pod.namespace, pod.name)] = found
    return out


def comparable(report: dict[tuple[str, str], dict]) -> dict[tuple[str, str], set]:
    """The tracker's report in the reference's terms: required and evicting are `hard`."""
    return {key: {(p, r, "preferred" if s == "preferred" else "hard") for p, r, s in found}
            for key, found in report.items()}
