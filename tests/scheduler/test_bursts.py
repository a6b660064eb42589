"""Bursts of replicas with hard zone + hostname spread through the kube-scheduler
simulator at full speed: 0 maxSkew violations, checked after every bind.

The check after each bind: the truth (the API double) must hold the pod on the node
the scheduler chose, and the placement of every pod placed so far (bound, or assumed
with its binding in flight, as kube-scheduler's cache holds them) must satisfy every
constraint's maxSkew. The end state is then checked against the truth alone.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from harness import HOST, ZONE, cluster, hard_spread, node, pod

ZONES = ("a", "b", "c")
NODES = [node(f"n-{z}{i}", z, cpu="64") for z in ZONES for i in range(4)]
BURSTS, REPLICAS = 3, 200


def skew(placed: dict, app_keys: set, key: str, domains: dict[str, str]) -> int:
    counts = Counter({d: 0 for d in set(domains.values())})
    for k, n in placed.items():
        if k in app_keys:
            counts[domains[n]] += 1
    return max(counts.values()) - min(counts.values())


def test_bursts_keep_max_skew_after_every_bind(tmp_path):
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in NODES}
    host_of = {n: n for n in zone_of}
    apps: dict[str, set] = {}
    violations: list[str] = []
    lock = threading.Lock()

    def check(key, node_name):
        truth = api.get("pods", key[1], key[0])
        if truth["spec"].get("nodeName") != node_name:
            violations.append(f"{key} is on {truth['spec'].get('nodeName')} in the truth, not {node_name}")
        placed = sched.placed()
        with lock:
            for app, keys in apps.items():
                for topo, domains in ((ZONE, zone_of), (HOST, host_of)):
                    if skew(placed, keys, topo, domains) > 1:
                        violations.append(f"after binding {key}: {app} {topo} skew > 1")

    with cluster(NODES, tmp_path, on_bind=check) as (api, served, sched):
        rates = []
        for b in range(BURSTS):
            labels = {"app": f"burst{b}"}
            spread = [hard_spread(ZONE, labels), hard_spread(HOST, labels)]
            pods = [pod(f"burst{b}-{i}", labels, spread=spread) for i in range(REPLICAS)]
            with lock:
                apps[f"burst{b}"] = {("default", p["metadata"]["name"]) for p in pods}
            started = time.perf_counter()
            sched.submit(pods)
            stats = sched.run(timeout=120)
            rates.append(REPLICAS / (time.perf_counter() - started))
            print(f"burst {b}: {rates[-1]:.0f} pods/s")
        assert not sched.errors, sched.errors[:5]
        assert violations == []
        assert stats.scheduled == BURSTS * REPLICAS and stats.unschedulable == 0
        truth = {("default", p["metadata"]["name"]): p["spec"].get("nodeName") for p in api.objects("pods")}
        assert all(truth.values())
        for app, keys in apps.items():
            assert skew(truth, keys, ZONE, zone_of) <= 1, app
            assert skew(truth, keys, HOST, host_of) <= 1, app
        assert served.metric("extender_inflight_pending_pods") == 0
        assert served.metric("extender_inflight_expired_total") == 0  # every answered pod came back
        print(f"\nsimulator throughput, in-flight accounting on: {', '.join(f'{r:.0f}' for r in rates)} pods/s")
