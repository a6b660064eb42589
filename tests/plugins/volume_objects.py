"""Builders for the volume tests: nodes, PersistentVolumes, claims and pods as the API
server returns them (plain dicts), so every test goes through the same parsing."""

from __future__ import annotations

import orjson

ANNOTATION = "scheduling-extender.io/node-affinity"
KERNEL = "node.kubernetes.io/kernel-version"
HOST = "kubernetes.io/hostname"


def node(name: str, **labels: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {HOST: name, **labels}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def kernel_node(name: str, version: str | None) -> dict:
    return node(name, **({} if version is None else {KERNEL: version}))


def requirement(key: str, operator: str, *values: str) -> dict:
    out = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def selector(*terms: list[dict]) -> dict:
    """A NodeSelector: each argument is one term's matchExpressions (terms are ORed)."""
    return {"nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}


def annotation(*terms: list[dict]) -> str:
    """The PV annotation text: a JSON VolumeNodeAffinity."""
    return orjson.dumps({"required": selector(*terms)}).decode()


def pv(name: str, *, spec: dict | None = None, ann: str | None = None, storage_class: str = "fast",
       capacity: str = "10Gi", claim: tuple[str, str] | None = None, phase: str = "Available",
       labels: dict | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",)) -> dict:
    obj: dict = {"kind": "PersistentVolume", "apiVersion": "v1",
                 "metadata": {"name": name, "labels": dict(labels or {})},
                 "spec": {"capacity": {"storage": capacity}, "accessModes": list(modes),
                          "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                          "csi": {"driver": "example.csi.io", "volumeHandle": name}},
                 "status": {"phase": phase}}
    if ann is not None:
        obj["metadata"]["annotations"] = {ANNOTATION: ann}
    if spec is not None:
        obj["spec"]["nodeAffinity"] = {"required": spec}
    if claim is not None:
        obj["spec"]["claimRef"] = {"namespace": claim[0], "name": claim[1]}
        obj["status"]["phase"] = "Bound" if phase == "Available" else phase
    return obj


def pvc(name: str, *, volume: str = "", storage_class: str = "fast", request: str = "5Gi",
        namespace: str = "default", selector_labels: dict | None = None, selected_node: str = "",
        modes: tuple[str, ...] = ("ReadWriteOnce",)) -> dict:
    obj: dict = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                 "metadata": {"name": name, "namespace": namespace, "annotations": {}},
                 "spec": {"storageClassName": storage_class, "accessModes": list(modes),
                          "resources": {"requests": {"storage": request}}},
                 "status": {"phase": "Bound" if volume else "Pending"}}
    if volume:
        obj["spec"]["volumeName"] = volume
        obj["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    if selector_labels:
        obj["spec"]["selector"] = {"matchLabels": dict(selector_labels)}
    if selected_node:
        obj["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = selected_node
    return obj


def pod(name: str, *claims: str, ephemeral: tuple[str, ...] = (), namespace: str = "default") -> dict:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    volumes += [{"name": v, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for v in ephemeral]
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "default-scheduler", "volumes": volumes,
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
