"""Seeded, deterministic synthetic clusters shaped like `examples/cluster.yaml`, at scale.

The output is an ordinary `kind: List` cluster file (JSON, because orjson loads 50,000
pods an order of magnitude faster than YAML) that `extender serve --cluster` reads.

Why the mix looks the way it does: the engine's fast path groups nodes by their exact
taint tuple and answers label questions from an inverted index, so a benchmark with a
single taint shape would flatter it. The generator therefore produces the variety a
real fleet has: per-rack dedicated taints, numeric SLA values on spot nodes, version
taints whose values differ, maintenance-window PreferNoSchedule taints, GPU pools,
NoExecute not-ready nodes and cordons. Everything is drawn from one `random.Random(seed)`
in a fixed order, so a seed always yields byte-identical output.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

GENERATOR_VERSION = 1

ZONE_LETTERS = "abcdefgh"
RACK_SIZE = 20  # nodes per rack
SUBZONES_PER_ZONE = 2  # zone-a -> cells a1, a2 (rack taint keys zone-a1-rack-07, KEP-5500 story 3)

LIFECYCLE_LABEL = "node.example.com/lifecycle"
KERNEL_KEY = "node.example.com/kernel-version"
CNI_KEY = "node.example.com/cni-version"
SLA_KEY = "node.example.com/sla"
ZONE_KEY = "topology.kubernetes.io/zone"
HOSTNAME_KEY = "kubernetes.io/hostname"
RACK_KEY = "topology.example.com/rack"
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"

# (value, weight): the fleet is mostly current, with a tail of old kernels and CNIs.
KERNELS = [("5.4.0", 8), ("5.10.12", 10), ("5.15.2", 15), ("6.1.0", 30), ("6.8.0", 37)]
CNIS = [("1.2.0", 10), ("1.3.0", 20), ("1.4.2", 50), ("1.5.0", 20)]
SLA_VALUES = ["500", "800", "900", "950", "990", "999"]
ENVS = ["dev", "staging", "qa"]
INSTANCE_TYPES = ["m6i.2xlarge", "m6i.4xlarge", "c6i.4xlarge", "r6i.2xlarge"]
NAMESPACES = ["shop", "payments", "search", "analytics", "batch", "platform", "ml"]

# Workloads the benchmark pods refer to, always present whatever the size:
# (namespace, app, kind, replicas as a fraction of M, minimum replicas)
ANCHORS = [
    ("shop", "frontend", "Deployment", 0.01, 40),
    ("payments", "ledger", "StatefulSet", 0.002, 10),
    ("perf", "bench", "Deployment", 0.0004, 4),
]


@dataclass
class ClusterInfo:
    """What the generator decided, for workloads and tests (not written to the file)."""

    nodes: int
    pods: int
    seed: int
    zones: list[str] = field(default_factory=list)
    racks: list[str] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)
    cordoned: list[str] = field(default_factory=list)
    feature_counts: dict[str, int] = field(default_factory=dict)


def zone_count(nodes: int) -> int:
    """3 zones for small clusters, up to 5 at 5,000 nodes (what regional fleets use)."""
    if nodes < 1000:
        return 3
    if nodes < 5000:
        return 4
    return 5


def _weighted(rng: random.Random, pairs: list[tuple[str, int]]) -> str:
    values = [v for v, _ in pairs]
    weights = [w for _, w in pairs]
    return rng.choices(values, weights)[0]


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def _node(rng: random.Random, index: int, zone: str, cell: str, rack: str,
          info: ClusterInfo, rack_taint: str | None) -> dict[str, Any]:
    counts = info.feature_counts
    spot = rng.random() < 0.25
    lifecycle = "spot" if spot else "on-demand"
    name = f"{cell}-{'spot' if spot else 'od'}-{index:05d}"
    kernel = _weighted(rng, KERNELS)
    cni = _weighted(rng, CNIS)
    labels = {
        HOSTNAME_KEY: name,
        ZONE_KEY: zone,
        "topology.kubernetes.io/region": "region-1",
        RACK_KEY: rack,
        LIFECYCLE_LABEL: lifecycle,
        KERNEL_KEY: kernel,
        CNI_KEY: cni,
        "node.kubernetes.io/instance-type": rng.choice(INSTANCE_TYPES),
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    taints: list[dict[str, str]] = []
    if spot:
        taints.append({"key": SLA_KEY, "value": rng.choice(SLA_VALUES), "effect": "NoSchedule"})
        counts["spot_sla_taint"] += 1
    if _version_tuple(kernel) < (6, 0, 0) and rng.random() < 0.5:
        taints.append({"key": KERNEL_KEY, "value": kernel, "effect": "NoSchedule"})
        counts["kernel_taint"] += 1
    if _version_tuple(cni) < (1, 4, 0):
        taints.append({"key": CNI_KEY, "value": "v" + cni, "effect": "PreferNoSchedule"})
        counts["cni_taint"] += 1
    roll = rng.random()
    if roll < 0.06:
        env = rng.choice(ENVS)
        taints.append({"key": f"env.example.com/{env}", "value": "", "effect": "NoSchedule"})
        labels["env.example.com/name"] = env
        counts["env_taint"] += 1
    elif roll < 0.09:
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
        labels["nvidia.com/gpu.present"] = "true"
        counts["gpu_taint"] += 1
    if rng.random() < 0.08:
        day = rng.choice(["mon", "tue", "wed", "thu", "fri", "sat", "sun"])
        taints.append({"key": "node.example.com/maintenance-window", "value": day,
                       "effect": "PreferNoSchedule"})
        counts["maintenance_prefer_taint"] += 1
    if rack_taint is not None:
        effect = "NoSchedule" if rack_taint == "hard" else "PreferNoSchedule"
        taints.append({"key": rack, "value": "", "effect": effect})
        counts[f"rack_taint_{rack_taint}"] += 1
    if rng.random() < 0.005:
        taints.append({"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoExecute"})
        counts["not_ready_noexecute"] += 1
    spec: dict[str, Any] = {}
    if rng.random() < 0.01:
        spec["unschedulable"] = True
        taints.append({"key": UNSCHEDULABLE_TAINT_KEY, "value": "", "effect": "NoSchedule"})
        info.cordoned.append(name)
        counts["cordoned"] += 1
    if taints:
        spec["taints"] = taints
    else:
        counts["untainted"] += 1
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": _uid(rng), "labels": labels},
        "spec": spec,
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            # what kube-scheduler's NodeResourcesFit reads (the extender does not)
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
            "nodeInfo": {"kernelVersion": kernel, "kubeletVersion": "v1.34.1"},
        },
    }


def _nodes(rng: random.Random, info: ClusterInfo) -> list[dict[str, Any]]:
    zones = [f"zone-{ZONE_LETTERS[i]}" for i in range(zone_count(info.nodes))]
    info.zones = zones
    out: list[dict[str, Any]] = []
    rack_ids: dict[str, int] = {}
    for index in range(info.nodes):
        zone = zones[index % len(zones)]
        per_zone = index // len(zones)
        cell_no = (per_zone // RACK_SIZE) % SUBZONES_PER_ZONE + 1
        rack_no = per_zone // (RACK_SIZE * SUBZONES_PER_ZONE) + 1
        cell = f"{zone[-1]}{cell_no}"
        rack = f"zone-{cell}-rack-{rack_no:02d}"
        rack_id = rack_ids.get(rack)
        if rack_id is None:
            rack_id = rack_ids[rack] = len(rack_ids) + 1
            info.racks.append(rack)
        # Dedicated racks: every 7th rack is tainted hard, every 11th softly.
        rack_taint = "hard" if rack_id % 7 == 0 else ("soft" if rack_id % 11 == 0 else None)
        out.append(_node(rng, index, zone, cell, rack, info, rack_taint))
    info.node_names = [n["metadata"]["name"] for n in out]
    return out


def _default_tolerations() -> list[dict[str, Any]]:
    """What the DefaultTolerationSeconds admission plugin adds to every pod."""
    return [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
    ]


def _workload_objects(rng: random.Random, namespace: str, app: str, kind: str, replicas: int
                      ) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Any]]:
    """Controller objects + Service for one app; returns (objects, pod labels, ownerRef)."""
    uid = _uid(rng)
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": app, "namespace": namespace},
        "spec": {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    if kind == "Deployment":
        hash_ = f"{rng.getrandbits(32):08x}"[:10]
        rs_name = f"{app}-{hash_}"
        labels = {"app": app, "pod-template-hash": hash_}
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": namespace, "uid": _uid(rng)},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}}},
        }
        rs = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "namespace": namespace, "uid": uid,
                         "labels": dict(labels),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                              "name": app, "controller": True,
                                              "uid": deployment["metadata"]["uid"]}]},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)}},
        }
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": uid,
                 "controller": True, "blockOwnerDeletion": True}
        return [deployment, rs, service], labels, owner
    labels = {"app": app, "controller-revision-hash": f"{app}-{rng.getrandbits(24):06x}"}
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": app, "namespace": namespace, "uid": uid},
        "spec": {"replicas": replicas, "serviceName": app,
                 "selector": {"matchLabels": {"app": app}}},
    }
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": app, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}
    return [sts, service], labels, owner


def _pod(rng: random.Random, namespace: str, name: str, labels: dict[str, str],
         owner: dict[str, Any], node: str, phase: str = "Running",
         terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": _uid(rng),
                            "labels": labels, "ownerReferences": [owner]}
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": f"registry.example.com/{name.split('-')[0]}:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
            "tolerations": _default_tolerations(),
        },
        "status": {"phase": phase},
    }


def _apps(rng: random.Random, info: ClusterInfo) -> list[tuple[str, str, str, int]]:
    """(namespace, app, kind, replicas) summing to exactly `info.pods` pods."""
    apps: list[tuple[str, str, str, int]] = []
    total = 0
    for namespace, app, kind, fraction, minimum in ANCHORS:
        replicas = min(max(minimum, int(info.pods * fraction)), max(info.pods - total, 0))
        apps.append((namespace, app, kind, replicas))
        total += replicas
    serial = 0
    while total < info.pods:
        serial += 1
        namespace = rng.choice(NAMESPACES)
        kind = "StatefulSet" if rng.random() < 0.2 else "Deployment"
        replicas = min(rng.choice([1, 2, 3, 3, 5, 8, 12, 20, 30, 50, 100]), info.pods - total)
        apps.append((namespace, f"svc{serial:04d}", kind, replicas))
        total += replicas
    return apps


def generate_cluster(nodes: int, pods: int, seed: int = 1) -> tuple[dict[str, Any], ClusterInfo]:
    """Build the cluster `kind: List` object and a summary of what it contains."""
    rng = random.Random(seed)
    info = ClusterInfo(nodes=nodes, pods=pods, seed=seed)
    info.feature_counts = dict.fromkeys(
        ["spot_sla_taint", "kernel_taint", "cni_taint", "env_taint", "gpu_taint",
         "maintenance_prefer_taint", "rack_taint_hard", "rack_taint_soft", "not_ready_noexecute",
         "cordoned", "untainted", "services", "replicasets", "statefulsets", "succeeded_pods",
         "terminating_pods"], 0)
    node_objs = _nodes(rng, info)
    placeable = [n for n in info.node_names if n not in set(info.cordoned)]
    items: list[dict[str, Any]] = list(node_objs)
    pod_items: list[dict[str, Any]] = []
    counts = info.feature_counts
    for namespace, app, kind, replicas in _apps(rng, info):
        objects, labels, owner = _workload_objects(rng, namespace, app, kind, replicas)
        items.extend(objects)
        counts["services"] += 1
        counts["replicasets" if kind == "Deployment" else "statefulsets"] += 1
        prefix = owner["name"]
        for i in range(replicas):
            name = f"{prefix}-{i}" if kind == "StatefulSet" else f"{prefix}-{rng.getrandbits(20):05x}{i}"
            pod_labels = dict(labels)
            if kind == "StatefulSet":
                pod_labels["statefulset.kubernetes.io/pod-name"] = name
            phase, terminating = "Running", False
            if namespace == "batch":  # Job-like churn lives in batch only (see module doc)
                roll = rng.random()
                if roll < 0.05:
                    phase = "Succeeded"
                    counts["succeeded_pods"] += 1
                elif roll < 0.07:
                    terminating = True
                    counts["terminating_pods"] += 1
            pod_items.append(_pod(rng, namespace, name, pod_labels, owner, rng.choice(placeable),
                                  phase, terminating))
    items.extend(pod_items)
    cluster = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": "", "annotations": {
            "perf.example.com/generator": f"perf.generate v{GENERATOR_VERSION}",
            "perf.example.com/seed": str(seed),
            "perf.example.com/nodes": str(nodes),
            "perf.example.com/pods": str(pods),
        }},
        "items": items,
    }
    return cluster, info


def node_objects(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in cluster["items"] if o.get("kind") == "Node"]


def pod_objects(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in cluster["items"] if o.get("kind") == "Pod"]


def write_cluster(cluster: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(cluster))
    return out
