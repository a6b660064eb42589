"""End to end through the kube-scheduler simulator: pods/s for the scheduler_perf-like
workloads, next to kube-scheduler's own thresholds at 5,000 nodes.

    .venv/bin/python -m perf.scheduler_e2e [--nodes 5000] [--cluster-pods 50000]
                                           [--pods 500] [--workloads sp-hard-spread,...]

1. The API-server double runs in its own process (`perf.churn.Double`), loaded with
   `perf.generate`'s cluster (nodes, their taints and labels, the pods already running).
2. One `extender serve --kubeconfig` with its defaults, as shipped, lists and watches it
   (`tests.scheduler.harness.Served`).
3. The kube-scheduler simulator (`tests.doubles.scheduler`), configured like manifests/
   (filter, prioritize, bind and preempt verbs, nodeCacheCapable, weight 1,
   percentageOfNodesToScore 100), schedules `--pods` pods of each `perf.workloads.
   SCHEDULER_PERF` workload in turn, all against the same cluster (each workload's
   pods are a different app, so one does not count another's). The pods are created
   pending before the clock starts, as scheduler_perf creates them; pods/s is the wall
   clock from the first scheduling cycle to the last bind. The binding cycle goes
   straight to the extender's bind (`--bind-delay-ms 0`): these pods have no volumes,
   so upstream's PreBind plugins have nothing to do (the tests' 0-5 ms of simulated
   PreBind work would be the simulator's time, and would show up as the extender's
   in-flight wait).

Where the time goes, per pod: the extender's filter + prioritize round trips (on the
scheduling cycle's critical path; with the server's own handler time beside them), the
bind round trip (in the binding threads, overlapping the next cycles), and the
simulator's own in-tree work (the cycle's wall clock minus its extender calls:
NodeResourcesFit, LeastAllocated, JSON, selectHost). Every placement is replayed
through `perf.check.Checker` (taints, affinity, hard spread; 0 violations expected),
and every pod left unscheduled is checked against the final state: a node it
tolerates, matches and fits without breaking a hard spread is a wrong "unschedulable".

Results go to perf/out/scheduler_e2e.json and are printed; `make perf` puts them in the
report. Throughput is reported, never asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from perf.check import Checker
from perf.churn import Double
from perf.http_driver import handler_means, handler_totals
from perf.live_state import ROOT
from perf.workloads import CEL_ORACLES, SCHEDULER_PERF

# (nodes, pods already in the cluster, pods scheduled per workload, workloads or None = all)
FULL = (5000, 50_000, 1000, None)
QUICK = (500, 5_000, 100, ("sp-hard-spread", "sp-default-spread"))


class RemoteApi:
    """The part of `FakeApiServer`'s in-process API the simulator uses, over the REST
    API of a double in another process (so the double's work is not the simulator's)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._local = threading.local()

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = orjson.dumps(body) if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
        if resp.status >= 300 and resp.status != 404:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {payload[:200]!r}")
        return resp.status, orjson.loads(payload)

    @staticmethod
    def _path(resource: str, name: str = "", namespace: str = "") -> str:
        base = f"/api/v1/namespaces/{quote(namespace)}/{resource}" if namespace else f"/api/v1/{resource}"
        return f"{base}/{quote(name)}" if name else base

    def objects(self, resource: str) -> list[dict]:
        return self._call("GET", self._path(resource))[1]["items"]

    def create(self, resource: str, obj: dict) -> dict:
        ns = obj["metadata"].get("namespace", "default")
        return self._call("POST", self._path(resource, namespace=ns), obj)[1]

    def get(self, resource: str, name: str, namespace: str = "") -> dict | None:
        status, obj = self._call("GET", self._path(resource, name, namespace))
        return None if status == 404 else obj

    def update(self, resource: str, obj: dict) -> dict:
        md = obj["metadata"]
        return self._call("PUT", self._path(resource, md["name"], md.get("namespace", "")), obj)[1]

    def delete(self, resource: str, name: str, namespace: str = "") -> dict:
        return self._call("DELETE", self._path(resource, name, namespace))[1]

    def bind(self, namespace: str, name: str, node: str) -> dict:
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        return self._call("POST", self._path("pods", name, namespace) + "/binding", binding)[1]


def _ms(seconds: float, count: int) -> float | None:
    return round(seconds / count * 1000, 3) if count else None


def wrongly_unschedulable(checker: Checker, pods: list[dict], nodes: list[dict], placed: dict[str, int]
                          ) -> list[str]:
    """Pods left unscheduled although, in the final state, some node tolerates, matches
    and has room for them without breaking a hard spread (`placed`: node -> pods added)."""
    from tests.doubles.scheduler import allocatable_of, requests_of

    wrong = []
    for pod in pods:
        cpu, mem = requests_of(pod)
        for node in nodes:
            name = node["metadata"]["name"]
            acpu, amem = allocatable_of(node)
            used = placed.get(name, (0, 0))
            if used[0] + cpu > acpu or used[1] + mem > amem:
                continue
            if not checker.check_one(pod, name):
                wrong.append(f"{pod['metadata']['name']}: {name} was feasible")
                break
    return wrong


def run_workloads(nodes: int, cluster_pods: int, pods: int, workloads: tuple[str, ...] | None,
                  log=print, workdir: Path | None = None, bind_delay_ms: tuple[float, float] = (0.0, 0.0)
                  ) -> dict[str, Any]:
    """Every workload of SCHEDULER_PERF (or the named ones) through one double, one
    extender and one simulator; see the module docstring."""
    from tests.doubles.scheduler import Scheduler, key_of, requests_of
    from tests.scheduler.harness import Served

    unknown = sorted(set(workloads or ()) - {w.name for w, _ in SCHEDULER_PERF})
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; known: {[w.name for w, _ in SCHEDULER_PERF]}")
    chosen = [(w, t) for w, t in SCHEDULER_PERF if workloads is None or w.name in workloads]
    own_dir = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="extender-sched-e2e-"))
    out: dict[str, Any] = {"nodes": nodes, "cluster_pods": cluster_pods, "pods_per_workload": pods,
                           "bind_delay_ms": list(bind_delay_ms),
                           "loadavg_before": round(os.getloadavg()[0], 2), "workloads": {}}
    started = time.monotonic()
    double = Double(nodes, cluster_pods, workdir)
    served = sched = None
    try:
        t0 = time.monotonic()
        served = Served(double.kubeconfig, workdir / "extender.log")  # defaults, as shipped
        out["extender_sync_s"] = round(time.monotonic() - t0, 2)
        api = RemoteApi(double.port)
        node_dicts = api.objects("nodes")
        existing = api.objects("pods")
        log(f"scheduler e2e {nodes} nodes / {cluster_pods} pods: up in {time.monotonic() - started:.1f} s "
            f"(extender synced in {out['extender_sync_s']} s)")
        placements: list[tuple[dict, str]] = []
        lock = threading.Lock()
        sched = Scheduler(api, served.url, weight=1, seed=1, max_attempts=3,
                          bind_delay=(bind_delay_ms[0] / 1000, bind_delay_ms[1] / 1000),
                          on_assume=lambda key, node: placements.append((sched._pods[key], node)))
        checker = Checker(node_dicts, existing, CEL_ORACLES)
        added: dict[str, tuple[int, int]] = {}
        for index, (w, threshold) in enumerate(chosen):
            batch = [w.pod(800_000 + index * 100_000 + i) for i in range(pods)]
            sched.submit(batch)
            time.sleep(0.5)  # the pending pods' watch events reach the extender untimed
            before_stats = (sched.stats.scheduled, sched.stats.unschedulable, sched.stats.cycles,
                            sched.stats.cycle_seconds, sched.stats.bind_errors, sched.stats.cycle_cpu_seconds)
            before_calls = {v: list(t) for v, t in sched.ext.timings.items()}
            before_handler = handler_totals(served.port)
            before_wait = _inflight_wait(served)
            first = len(placements)
            t0 = time.perf_counter()
            sched.run(timeout=3600)
            wall = time.perf_counter() - t0
            handler = handler_means(before_handler, handler_totals(served.port))
            wait_s = _inflight_wait(served) - before_wait
            calls = {v: (t[0] - before_calls.get(v, [0, 0.0])[0], t[1] - before_calls.get(v, [0, 0.0])[1])
                     for v, t in sched.ext.timings.items()}
            scheduled = sched.stats.scheduled - before_stats[0]
            unschedulable = sched.stats.unschedulable - before_stats[1]
            cycles = sched.stats.cycles - before_stats[2]
            cycle_s = sched.stats.cycle_seconds - before_stats[3]
            with lock:
                mine = placements[first:]
            violations = checker.replay(mine)
            for pod, node in mine:
                cpu, mem = requests_of(pod)
                prev = added.get(node, (0, 0))
                added[node] = (prev[0] + cpu, prev[1] + mem)
            placed_keys = {key_of(p) for p, _ in mine}
            # the truth: every placed pod is bound in the API to the node it was placed on
            truth = {key_of(p): (p.get("spec") or {}).get("nodeName") for p in api.objects("pods")
                     if key_of(p) in placed_keys}
            mismatches = [f"{k[0]}/{k[1]}: placed on {node}, bound to {truth.get(k)}"
                          for k, node in ((key_of(p), n) for p, n in mine) if truth.get(k) != node]
            left = [p for p in batch if key_of(p) not in placed_keys]
            used = _used_by_node(node_dicts, existing, added)
            wrong = wrongly_unschedulable(checker, left, node_dicts, used)
            on_path = sum(calls.get(v, (0, 0.0))[1] for v in ("filter", "prioritize", "preempt"))
            res = {
                "description": w.description, "kube_scheduler_threshold_pods_per_s": threshold,
                "pods": pods, "scheduled": scheduled, "unschedulable": unschedulable,
                "bind_errors": sched.stats.bind_errors - before_stats[4], "cycles": cycles,
                "wall_s": round(wall, 2), "pods_per_s": round(pods / wall, 1) if wall > 0 else None,
                # per pod: what bounds the rate (the cycle is sequential; binds overlap it)
                "extender_ms_per_pod": _ms(on_path, pods),
                # of which filter waited for the previous pod's bind (--inflight-wait)
                "inflight_wait_ms_per_pod": _ms(wait_s, pods),
                "simulator_ms_per_pod": _ms(cycle_s - on_path, pods),
                # CPU time of the scheduling thread in its cycles (socket calls included):
                # below simulator_ms_per_pod when the machine or the GIL is busy
                "simulator_thread_cpu_ms_per_pod": _ms(sched.stats.cycle_cpu_seconds - before_stats[5], pods),
                "outside_cycles_ms_per_pod": _ms(wall - cycle_s, pods),
                "round_trip_mean_ms": {v: _ms(s, n) for v, (n, s) in calls.items() if n},
                "server_handler_mean_ms": handler,
                "violations": len(violations),
                "truth_mismatches": len(mismatches), "truth_mismatch_examples": mismatches[:5],
                "violation_examples": [v.as_dict() for v in violations[:5]],
                "wrongly_unschedulable": len(wrong), "wrongly_unschedulable_examples": wrong[:5],
                "errors": sched.errors[-5:] if sched.errors else [],
                "loadavg": round(os.getloadavg()[0], 2),
            }
            out["workloads"][w.name] = res
            log(f"  {w.name}: {res['pods_per_s']} pods/s (kube-scheduler {threshold:g}); per pod: extender "
                f"{res['extender_ms_per_pod']} ms (in-flight wait {res['inflight_wait_ms_per_pod']}), simulator {res['simulator_ms_per_pod']} ms; "
                f"scheduled {scheduled}, unschedulable {unschedulable}, violations {len(violations)}, "
                f"wrongly unschedulable {len(wrong)}, load {res['loadavg']}")
    finally:
        if sched is not None:
            sched.close()
        if served is not None:
            served.stop()
        double.stop()
    if own_dir:
        shutil.rmtree(workdir, ignore_errors=True)
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    return out


def _inflight_wait(served) -> float:
    """Seconds the extender's verbs have waited for pods answered but not yet bound."""
    return served.metric("extender_inflight_wait_seconds_sum")


def _used_by_node(nodes: list[dict], existing: list[dict], added: dict[str, tuple[int, int]]
                  ) -> dict[str, tuple[int, int]]:
    """cpu/memory requested per node: the cluster's running pods plus the placed ones."""
    from tests.doubles.scheduler import requests_of

    used = {n["metadata"]["name"]: list(added.get(n["metadata"]["name"], (0, 0))) for n in nodes}
    for pod in existing:
        where = (pod.get("spec") or {}).get("nodeName")
        if where in used:
            cpu, mem = requests_of(pod)
            used[where][0] += cpu
            used[where][1] += mem
    return {k: (v[0], v[1]) for k, v in used.items()}


def for_report(full: bool, notes: list[str], log=print) -> dict[str, Any]:
    """What `make perf` (FULL) or `make perf-quick` (QUICK) runs; a failure or a wrong
    placement becomes a note of the report rather than ending the run."""
    nodes, cluster_pods, pods, workloads = FULL if full else QUICK
    try:
        out = run_workloads(nodes, cluster_pods, pods, workloads, log=log)
    except Exception as exc:  # report, keep going
        notes.append(f"scheduler e2e {nodes} nodes failed: {type(exc).__name__}: {exc}")
        log(f"scheduler e2e failed: {exc}")
        return {"nodes": nodes, "error": f"{type(exc).__name__}: {exc}"}
    for name, w in out["workloads"].items():
        if w["violations"] or w["wrongly_unschedulable"] or w["bind_errors"] or w["truth_mismatches"]:
            notes.append(f"scheduler e2e {name}: {w['violations']} violations, {w['wrongly_unschedulable']} "
                         f"wrongly unschedulable, {w['bind_errors']} bind errors, {w['truth_mismatches']} "
                         f"pods not bound where placed: {(w['violation_examples'] + w['truth_mismatch_examples'] + w['wrongly_unschedulable_examples'])[:3]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.scheduler_e2e", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=FULL[0])
    parser.add_argument("--cluster-pods", type=int, default=FULL[1])
    parser.add_argument("--pods", type=int, default=FULL[2], help="pods scheduled per workload")
    parser.add_argument("--workloads", default="", help="comma list (default: all five)")
    parser.add_argument("--bind-delay-ms", default="0",
                        help="simulated PreBind work before each bind: MS or MIN,MAX (uniform)")
    parser.add_argument("--out", type=Path, default=ROOT / "perf" / "out" / "scheduler_e2e.json")
    ns = parser.parse_args(argv)
    names = tuple(w for w in ns.workloads.split(",") if w) or None
    try:
        low, _, high = ns.bind_delay_ms.partition(",")
        delay = (float(low), float(high or low))
        result = run_workloads(ns.nodes, ns.cluster_pods, ns.pods, names,
                               log=lambda m: print(m, file=sys.stderr, flush=True), bind_delay_ms=delay)
    except ValueError as exc:  # a bad --workloads or --bind-delay-ms
        parser.error(str(exc))
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2)
    ns.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
