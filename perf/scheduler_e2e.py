"""End to end through the real kube-scheduler: pods/s for the scheduler_perf-like
workloads, next to kube-scheduler's own thresholds at 5,000 nodes and next to the same
kube-scheduler running its in-tree plugins on the same pods, in the same run.

    KUBE_SCHEDULER_BINARY=/path/kube-scheduler .venv/bin/python -m perf.scheduler_e2e \\
        [--sizes 5000,15000] [--rounds 2] [--pods 1000] [--workloads sp-hard-spread,...]

(`make perf-scheduler-e2e` runs exactly this, with the binary from `.ci/kube-scheduler`;
`make perf` runs one size, 5,000 nodes, `make perf-quick` 500.)

1. Per size, the API-server double runs in its own process (`perf.churn.Double`), loaded
   with `perf.generate`'s cluster (10 running pods a node): nodes with taints, labels
   and allocatable.
2. The two modes alternate against that double, `--rounds` times each (in-tree then
   extender, then extender then in-tree, ...: a drift of the machine's load over the run
   weighs on both alike), each run with a fresh kube-scheduler (v1.30.6 code,
   `$KUBE_SCHEDULER_BINARY`) configured exactly as tests/e2e configure it
   (`testing.harness.scheduler_config`, from manifests/base/kube-scheduler-config.yaml):
   - **in-tree**: no extender; TaintToleration, NodeAffinity, NodeUnschedulable and
     PodTopologySpread enabled again: the baseline. The workloads' pods need nothing
     the in-tree plugins lack (their tolerations are the default Exists ones), so both
     modes schedule the very same pods;
   - **extender**: `extender serve --config manifests/base/extender.yaml` as shipped
     and the shipped configuration (the four plugins off, filter/prioritize/preempt/
     bind verbs).
   - **replay** (the ceiling; only with `--modes ...,replay`): kube-scheduler configured
     as in extender mode but binding pods itself, `perf/replay.py` in front of `extender
     serve` answering filter and prioritize from the kept bytes of an earlier pod's real
     answer, at ~0 CPU. What kube-scheduler itself costs in extender mode: how fast any
     extender could go here. Placements are not checked (a replayed answer is an earlier
     pod's); `ratio_ceiling` is its pods/s over in-tree's.
   Each run schedules a 50-pod warm-up (untimed), then each workload of
   `perf.workloads.SCHEDULER_PERF`: `--pods` pods created pending (as scheduler_perf
   creates them), timed from the first create to the last bind the double reports.
   The workloads' pods are deleted at the end of a run, so every run starts from one
   cluster.
3. Where the time goes, per pod, from kube-scheduler's own metrics (a loopback secure
   port) and the extender's: the wall clock per pod; the scheduling algorithm
   (`scheduling_algorithm_duration`: filter + score, extender calls included; the
   sequential part of a cycle), of it the in-tree plugins
   (`framework_extension_point_duration` PreFilter/Filter/PreScore/Score); what is left
   of the algorithm is the extender calls as the scheduler sees them (HTTP, both sides'
   JSON, our handler); our handler time per verb (decode, engine, encode; `bind`
   includes its API call) and the in-flight wait inside `filter`; the bytes on the wire
   per pod (`extender_http_body_bytes_total`: what kube-scheduler sent, what we
   answered, per verb); the CPU seconds per pod of kube-scheduler, of `extender serve`
   (master and worker) and of the double; the wall clock outside the algorithm (queue,
   assume, informer events; binds run beside the next cycles); and the attempt
   (`scheduling_attempt_duration`: cycle plus its binding cycle).
4. Checks on the truth (the double's binds): every placement tolerates its node's
   taints, matches its affinity and cordon (`testing.check`, independent of `extender/`);
   hard spread holds in the end state (max - min over the eligible domains <= maxSkew,
   which every valid sequence of decisions keeps; tests/e2e replays every decision); a
   pod left unscheduled has no feasible node in the end state.

The headline is the ratio extender / in-tree per workload (pods/s, the mean over each
mode's runs; the ratio of every round is kept too), which holds across machines better
than pods/s. Results go to perf/out/scheduler_e2e.json and are printed; `make perf`
puts them in the report. Throughput is reported, never asserted.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from perf import options
from perf.churn import Double, py_spy
from perf.http_driver import free_port, handler_means, handler_totals
from perf.live_state import ROOT
from perf.report import render_scheduler_e2e
from perf.workloads import CEL_ORACLES, SCHEDULER_PERF, Workload
from testing.check import Checker

# (nodes, pods already in the cluster, pods scheduled per workload, workloads or None = all)
FULL = (5000, 50_000, 1000, None)
QUICK = (500, 5_000, 60, None)
SIZES = (5000, 15_000)  # `make perf-scheduler-e2e`: each with 10 running pods a node
ROUNDS = 2  # runs of each mode per size, alternated
MODES = ("in-tree", "extender")
# The ceiling (not run unless asked): kube-scheduler configured as in extender mode, the
# extender's answers replayed from memory at ~0 CPU (`perf.replay`), kube-scheduler binding
# itself. How fast any extender could go through the protocol on this machine.
CEILING = "replay"
WARMUP = 50
Key = tuple[str, str]
BYTES_LINE = re.compile(r'^extender_http_body_bytes_total\{(?=.*direction="(?P<direction>\w+)")'
                        r'(?=.*verb="(?P<verb>\w+)")[^}]*\} (?P<value>[0-9.e+]+)$')


class RemoteApi:
    """Pods in the double (another process) over its REST API, one connection per thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._local = threading.local()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = orjson.dumps(body) if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read()
        if resp.status >= 300 and resp.status != 404:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {payload[:200]!r}")
        return resp.status, orjson.loads(payload)

    def items(self, path: str) -> tuple[list[dict], str]:
        body = self.call("GET", path)[1]
        return body["items"], body["metadata"]["resourceVersion"]

    def create_pod(self, pod: dict) -> None:
        self.call("POST", f"/api/v1/namespaces/{quote(pod['metadata']['namespace'])}/pods", pod)

    def delete_pod(self, key: Key) -> None:
        self.call("DELETE", f"/api/v1/namespaces/{quote(key[0])}/pods/{quote(key[1])}")


class BindWatch:
    """A pod watch from one resourceVersion on: when each pod got its node, and which
    were reported unschedulable (PodScheduled=False, Unschedulable), as the double says."""

    def __init__(self, port: int, resource_version: str) -> None:
        self.bound: dict[Key, tuple[str, float]] = {}
        self.unschedulable: set[Key] = set()
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        self._conn.request("GET", f"/api/v1/pods?watch=true&resourceVersion={resource_version}")
        self._resp = self._conn.getresponse()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while line := self._resp.readline():
                event = orjson.loads(line)
                obj = event.get("object") or {}
                md = obj.get("metadata") or {}
                key = (md.get("namespace") or "default", md.get("name") or "")
                where = (obj.get("spec") or {}).get("nodeName")
                with self._lock:
                    if where and key not in self.bound and event.get("type") != "DELETED":
                        self.bound[key] = (where, time.monotonic())
                    elif any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                             for c in (obj.get("status") or {}).get("conditions") or []):
                        self.unschedulable.add(key)
        except (OSError, http.client.HTTPException, ValueError):
            return

    def settled(self, keys: list[Key]) -> tuple[int, int]:
        with self._lock:
            bound = sum(1 for k in keys if k in self.bound)
            return bound, sum(1 for k in keys if k not in self.bound and k in self.unschedulable)

    def close(self) -> None:
        # shutdown, not close: close() would wait for the reader thread's lock forever
        if self._conn.sock is not None:
            self._conn.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)
        self._conn.close()


class SchedulerMetrics:
    """kube-scheduler's /metrics on its loopback secure port (self-signed, anonymous)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10, context=self._ctx)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def healthy(self) -> bool:
        """Serving (v1.30 has no /readyz here; the warm-up pods show it schedules)."""
        try:
            return self.get("/healthz")[0] == 200
        except OSError:
            return False

    def totals(self) -> dict[str, float]:
        """Sums and counts of the histograms the breakdown uses, for this profile."""
        from prometheus_client.parser import text_string_to_metric_families

        out: Counter = Counter()
        for family in text_string_to_metric_families(self.get("/metrics")[1]):
            for s in family.samples:
                labels = s.labels
                if s.name in ("scheduler_scheduling_attempt_duration_seconds_sum",
                              "scheduler_scheduling_attempt_duration_seconds_count"):
                    out[f"attempt_{labels.get('result')}_{s.name.rsplit('_', 1)[1]}"] += s.value
                elif s.name in ("scheduler_scheduling_algorithm_duration_seconds_sum",
                                "scheduler_scheduling_algorithm_duration_seconds_count"):
                    out[f"algorithm_{s.name.rsplit('_', 1)[1]}"] += s.value
                elif s.name == "scheduler_framework_extension_point_duration_seconds_sum":
                    out[f"point_{labels.get('extension_point')}"] += s.value
        return dict(out)


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def _ms(seconds: float | None, count: int) -> float | None:
    return round(seconds / count * 1000, 3) if count and seconds is not None else None


def _for_profile(pod: dict, scheduler_name: str) -> dict:
    pod["spec"]["schedulerName"] = scheduler_name
    return pod


class Mode:
    """One kube-scheduler (and, in extender mode, one `extender serve`) against the double."""

    def __init__(self, name: str, binary: str, kubeconfig: Path, workdir: Path) -> None:
        from testing.harness import Process, start_extender, start_scheduler, wait_for

        self.name = name
        self.extender = self.replay = None
        self.extender_metrics = 0
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        extender_port = None
        if name in ("extender", CEILING):
            self.extender, extender_port, self.extender_metrics = start_extender(
                kubeconfig, workdir, ("--log-level", "warning"), timeout=600)
        self.extender_sync_s = round(time.monotonic() - t0, 2)
        edit = None
        if name == CEILING:
            replay_port = free_port()
            self.replay = Process("replay", [sys.executable, "-m", "perf.replay", f"--listen={replay_port}",
                                             f"--upstream={extender_port}"], workdir / "replay.log")
            if not wait_for(lambda: _listening(replay_port) or not self.replay.alive(), 30, 0.05) \
                    or not self.replay.alive():
                self.stop()
                raise RuntimeError(f"perf.replay did not start:\n{self.replay.tail()}")
            extender_port, edit = replay_port, _scheduler_binds
        port = free_port()
        self.scheduler = start_scheduler(binary, kubeconfig, workdir, extender_port, edit=edit, secure_port=port)
        self.metrics = SchedulerMetrics(port)
        if not wait_for(lambda: self.metrics.healthy() or not self.scheduler.alive(), 600, 0.2) \
                or not self.scheduler.alive():
            self.stop()
            raise RuntimeError(f"kube-scheduler ({name}) did not start serving:\n{self.scheduler.tail()}")
        self.scheduler_sync_s = round(time.monotonic() - t0 - self.extender_sync_s, 2)

    def extender_totals(self) -> tuple[dict[str, tuple[float, float]], float, dict[str, float]]:
        """(handler seconds and requests per verb, in-flight wait seconds, body bytes per
        `<verb> <direction>`) so far."""
        if self.extender is None:
            return {}, 0.0, {}
        from testing.live import request

        text = request(self.extender_metrics, "GET", "/metrics")[1].decode()
        wait = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("extender_inflight_wait_seconds_sum"))
        wire: dict[str, float] = {}
        for line in text.splitlines():
            m = BYTES_LINE.match(line)
            if m:
                wire[f"{m['verb']} {m['direction']}"] = float(m["value"])
        return handler_totals(self.extender_metrics), wait, wire

    def cpu_seconds(self, double: Double) -> dict[str, float]:
        """User + system CPU seconds so far of kube-scheduler, of `extender serve` (its
        processes) and of the API-server double."""
        import psutil

        def tree(pid: int) -> float:
            try:
                root = psutil.Process(pid)
                return sum(sum(p.cpu_times()[:2]) for p in (root, *root.children(recursive=True)))
            except psutil.Error:
                return 0.0

        out = {"kube_scheduler": tree(self.scheduler.proc.pid), "double": tree(double.proc.pid)}
        if self.extender is not None:
            out["extender"] = tree(self.extender.proc.pid)
        if self.replay is not None:
            out["replay"] = tree(self.replay.proc.pid)
        return out

    def stop(self) -> None:
        if getattr(self, "scheduler", None) is not None:
            self.scheduler.stop()
        for proc in (self.replay, self.extender):
            if proc is not None:
                proc.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _scheduler_binds(config: dict) -> None:
    """The ceiling mode's kube-scheduler binds pods itself (as in-tree mode does)."""
    for extender in config["extenders"]:
        extender.pop("bindVerb", None)


def run_batch(api: RemoteApi, watch: BindWatch, pods: list[dict], timeout: float) -> tuple[float, float]:
    """Create `pods`, wait until every one is bound or reported unschedulable (and the
    binds have stopped for a second); (seconds from the first create to the last bind,
    seconds spent creating)."""
    keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
    t0 = time.monotonic()
    for pod in pods:
        api.create_pod(pod)
    created = time.monotonic() - t0
    deadline = t0 + timeout
    last, since = (-1, -1), time.monotonic()
    while time.monotonic() < deadline:
        state = watch.settled(keys)
        if state != last:
            last, since = state, time.monotonic()
        if sum(state) == len(keys) and time.monotonic() - since > 1.0:
            break
        time.sleep(0.05)
    else:
        raise RuntimeError(f"{len(keys) - sum(last)} of {len(keys)} pods neither bound nor unschedulable "
                           f"after {timeout:.0f} s")
    ends = [watch.bound[k][1] for k in keys if k in watch.bound]
    return (max(ends) - t0 if ends else 0.0), created


def check_placements(checker: Checker, placements: list[tuple[dict, str]]) -> list[str]:
    """Taints, cordon, affinity of every placement; hard spread on the end state."""
    problems = [str(v.as_dict()) for pod, node in placements for v in checker.check_one(pod, node, spread=False)]
    if not placements:
        return problems
    pod = placements[0][0]
    hard = [c for c in pod["spec"].get("topologySpreadConstraints") or []
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    if not hard:
        return problems
    eligible = checker.eligible_nodes(pod, hard)
    for i, c in enumerate(hard):
        key = c["topologyKey"]
        counts = Counter({checker.nodes[n]["metadata"]["labels"][key]: 0 for n in eligible[i]})
        counts.update(checker.nodes[n]["metadata"]["labels"][key] for _, n in placements if n in eligible[i])
        skew = max(counts.values()) - min(counts.values()) if counts else 0
        if skew > int(c["maxSkew"]):
            problems.append(f"{key}: end-state skew {skew} > maxSkew {c['maxSkew']}")
    return problems


def wrongly_unschedulable(checker: Checker, pods: list[dict], nodes: list[dict],
                          used: dict[str, tuple[int, int]]) -> list[str]:
    """Pods left unscheduled although, in the end state, some node tolerates, matches and
    has room for them without breaking a hard spread (`checker` has every placement)."""
    from testing.truth import allocatable_of, requests_of

    wrong = []
    for pod in pods:
        cpu, mem = requests_of(pod)
        for node in nodes:
            name = node["metadata"]["name"]
            acpu, amem, _ = allocatable_of(node)
            have = used.get(name, (0, 0))
            if have[0] + cpu <= acpu and have[1] + mem <= amem and not checker.check_one(pod, name):
                wrong.append(f"{pod['metadata']['name']}: {name} was feasible")
                break
    return wrong


def run_mode(name: str, binary: str, double: Double, api: RemoteApi, chosen: list[tuple[Workload, float]],
             pods: int, nodes: list[dict], existing: list[dict], workdir: Path, log,
             warmup: int = WARMUP, profile: Path | None = None) -> dict[str, Any]:
    from testing.harness import SCHEDULER_NAME
    from testing.truth import requests_of

    _, rv = api.items("/api/v1/namespaces/perf/pods?limit=1")
    watch = BindWatch(double.port, rv)
    mode = Mode(name, binary, double.kubeconfig, workdir / name)
    made: list[Key] = []
    out: dict[str, Any] = {"extender_sync_s": mode.extender_sync_s, "scheduler_sync_s": mode.scheduler_sync_s,
                           "workloads": {}}
    try:
        warm = [_for_profile(SCHEDULER_PERF[-1][0].pod(900_000 + i), SCHEDULER_NAME) for i in range(warmup)]
        for p in warm:
            p["metadata"]["name"] = f"warmup-{p['metadata']['name']}"
        made += [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in warm]
        run_batch(api, watch, warm, timeout=600)
        checker = Checker(nodes, existing, CEL_ORACLES)
        used: dict[str, list[int]] = {n["metadata"]["name"]: [0, 0] for n in nodes}
        for p in existing:
            if (where := p["spec"].get("nodeName")) in used:
                c, m = requests_of(p)
                used[where][0] += c
                used[where][1] += m
        spy = None
        if profile is not None and mode.extender is not None:  # every busy thread of the worker
            profile.mkdir(parents=True, exist_ok=True)
            spy = py_spy(mode.extender.proc, profile / f"scheduler-e2e-{len(nodes)}.txt", gil=False)
        for index, (w, threshold) in enumerate(chosen):
            batch = [_for_profile(w.pod(800_000 + index * 100_000 + i), SCHEDULER_NAME) for i in range(pods)]
            keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in batch]
            made += keys
            sched_before, (handler_before, wait_before, wire_before) = mode.metrics.totals(), mode.extender_totals()
            cpu_before = mode.cpu_seconds(double)
            wall, create_s = run_batch(api, watch, batch, timeout=3600)
            cpu = _delta(cpu_before, mode.cpu_seconds(double))
            sched = _delta(sched_before, mode.metrics.totals())
            handler_after, wait_after, wire_after = mode.extender_totals()
            wire = _delta(wire_before, wire_after)
            placements = [(p, watch.bound[k][0]) for p, k in zip(batch, keys, strict=True) if k in watch.bound]
            left = [p for p, k in zip(batch, keys, strict=True) if k not in watch.bound]
            problems, wrong = [], []
            if name != CEILING:  # replayed answers are an earlier pod's: nothing to check
                problems = check_placements(checker, placements)
                checker.replay(placements)  # commit them: the next workloads and the checks see them
                for p, where in placements:
                    c, m = requests_of(p)
                    used[where][0] += c
                    used[where][1] += m
                wrong = wrongly_unschedulable(checker, left, nodes, {k: (v[0], v[1]) for k, v in used.items()})
            scheduled = len(placements)
            cycles = int(sched.get("attempt_scheduled_count", 0) + sched.get("attempt_unschedulable_count", 0)
                         + sched.get("attempt_error_count", 0))
            cycle_s = sum(v for k, v in sched.items() if k.startswith("attempt_") and k.endswith("_sum"))
            in_tree_s = sum(sched.get(f"point_{p}", 0.0) for p in ("PreFilter", "Filter", "PreScore", "Score"))
            algorithm_s = sched.get("algorithm_sum", 0.0)
            handler = handler_means(handler_before, handler_after)
            res = {
                "description": w.description, "kube_scheduler_threshold_pods_per_s": threshold,
                "pods": pods, "scheduled": scheduled, "unschedulable": len(left), "attempts": cycles,
                "wall_s": round(wall, 2), "create_s": round(create_s, 2),
                "pods_per_s": round(scheduled / wall, 1) if wall > 0 else None,
                # per pod (ms). The algorithm (filter + score) is the sequential part of
                # the scheduling cycle; an attempt also counts its binding cycle, which
                # runs beside the next pods' cycles
                "wall_ms_per_pod": _ms(wall, scheduled),
                "attempt_ms_per_pod": _ms(cycle_s, pods),
                "algorithm_ms_per_pod": _ms(algorithm_s, pods),
                "in_tree_plugins_ms_per_pod": _ms(in_tree_s, pods),
                "extender_calls_ms_per_pod": _ms(algorithm_s - in_tree_s, pods) if mode.extender else None,
                "outside_algorithm_ms_per_pod": _ms(wall - algorithm_s, pods),
                "extender_handler_mean_ms": handler or None,
                "inflight_wait_ms_per_pod": _ms(wait_after - wait_before, pods) if mode.extender else None,
                # CPU per pod of each process (ms), and the bytes of the verbs' bodies per pod
                "cpu_ms_per_pod": {k: _ms(v, pods) for k, v in cpu.items()},
                "wire_bytes_per_pod": {k: round(v / pods) for k, v in sorted(wire.items()) if v} or None,
                "placements_checked": name != CEILING,
                "problems": len(problems), "problem_examples": problems[:5],
                "wrongly_unschedulable": len(wrong), "wrongly_unschedulable_examples": wrong[:5],
                "loadavg": round(os.getloadavg()[0], 2),
            }
            out["workloads"][w.name] = res
            log(f"  {name} {w.name}: {res['pods_per_s']} pods/s (kube-scheduler threshold {threshold:g}); "
                f"per pod: wall {res['wall_ms_per_pod']} ms, algorithm {res['algorithm_ms_per_pod']} ms, "
                f"in-tree plugins {res['in_tree_plugins_ms_per_pod']}, "
                f"extender calls {res['extender_calls_ms_per_pod']} (our handler {handler}, in-flight wait "
                f"{res['inflight_wait_ms_per_pod']}); CPU {res['cpu_ms_per_pod']}, bytes {res['wire_bytes_per_pod']}; "
                f"unschedulable {len(left)}, problems {len(problems)}, "
                f"wrongly unschedulable {len(wrong)}, load {res['loadavg']}")
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=120)
    finally:
        mode.stop()
        watch.close()
        for key in made:  # the next mode starts from the same cluster
            api.delete_pod(key)
    return out


def run_workloads(nodes: int, cluster_pods: int, pods: int, workloads: tuple[str, ...] | None,
                  log=print, workdir: Path | None = None, modes: tuple[str, ...] = MODES,
                  binary: str | None = None, warmup: int = WARMUP, rounds: int = 1,
                  profile: Path | None = None) -> dict[str, Any]:
    """The chosen workloads (default: all five) in each mode, `rounds` runs of each,
    alternated (see the module docstring). `runs`: every run; `modes`: per mode, each
    workload's figures averaged over its runs (problems summed); `ratio`: extender /
    in-tree mean pods/s per workload, `ratio_per_round` the same per round."""
    from testing.harness import BINARY_ENV, scheduler_binary

    unknown = sorted(set(workloads or ()) - {w.name for w, _ in SCHEDULER_PERF})
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; known: {[w.name for w, _ in SCHEDULER_PERF]}")
    if set(modes) - {*MODES, CEILING}:
        raise ValueError(f"unknown modes {sorted(set(modes) - {*MODES, CEILING})}; known: {[*MODES, CEILING]}")
    binary = binary or scheduler_binary()
    if binary is None:
        raise ValueError(f"{BINARY_ENV} is not set: the benchmark runs the real kube-scheduler "
                         "(`make perf-scheduler-e2e` sets it through .ci/kube-scheduler)")
    chosen = [(w, t) for w, t in SCHEDULER_PERF if workloads is None or w.name in workloads]
    own_dir = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="extender-sched-e2e-"))
    out: dict[str, Any] = {"nodes": nodes, "cluster_pods": cluster_pods, "pods_per_workload": pods,
                           "kube_scheduler": "v1.30.6", "warmup_pods": warmup, "rounds": rounds,
                           "loadavg_before": round(os.getloadavg()[0], 2), "runs": [], "modes": {}}
    started = time.monotonic()
    double = Double(nodes, cluster_pods, workdir)
    try:
        api = RemoteApi(double.port)
        node_dicts, _ = api.items("/api/v1/nodes")
        existing, _ = api.items("/api/v1/pods")
        out["double_start_s"] = round(time.monotonic() - started, 1)
        log(f"scheduler e2e {nodes} nodes / {cluster_pods} pods: double up in {out['double_start_s']} s")
        for round_ in range(rounds):
            for name in (modes if round_ % 2 == 0 else modes[::-1]):  # ABBA: a drift weighs on both
                log(f" round {round_ + 1} of {rounds}: {name}")
                run = run_mode(name, binary, double, api, chosen, pods, node_dicts, existing,
                               workdir / f"round-{round_}", log, warmup, profile)
                out["runs"].append({"round": round_, "mode": name, **run})
    finally:
        double.stop()
    if own_dir:
        shutil.rmtree(workdir, ignore_errors=True)
    for name in modes:
        out["modes"][name] = {"workloads": _mean_workloads([r["workloads"] for r in out["runs"] if r["mode"] == name])}
    if "in-tree" in out["modes"] and "extender" in out["modes"]:
        out["ratio"] = _ratio(out["modes"]["in-tree"]["workloads"], out["modes"]["extender"]["workloads"])
        by_round = {(r["round"], r["mode"]): r["workloads"] for r in out["runs"]}
        out["ratio_per_round"] = [_ratio(by_round[(k, "in-tree")], by_round[(k, "extender")]) for k in range(rounds)]
        log(f"{nodes} nodes, extender / in-tree pods/s: {out['ratio']} (per round {out['ratio_per_round']})")
    if "in-tree" in out["modes"] and CEILING in out["modes"]:
        out["ratio_ceiling"] = _ratio(out["modes"]["in-tree"]["workloads"], out["modes"][CEILING]["workloads"])
        log(f"{nodes} nodes, ceiling ({CEILING}) / in-tree pods/s: {out['ratio_ceiling']}")
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    return out


def _ratio(base: dict[str, Any], ext: dict[str, Any]) -> dict[str, float]:
    return {n: round(ext[n]["pods_per_s"] / base[n]["pods_per_s"], 2)
            for n in ext if n in base and ext[n]["pods_per_s"] and base[n]["pods_per_s"]}


def _mean_workloads(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each workload's figures over several runs of one mode: numbers (and numbers in
    maps) averaged, problem counts summed, the examples and the runs' pods/s kept."""

    def mean(values: list[Any]) -> Any:
        present = [v for v in values if v is not None]
        if not present:
            return None
        if all(isinstance(v, dict) for v in present):
            return {k: mean([v.get(k) for v in present]) for k in dict.fromkeys(k for v in present for k in v)}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            return round(sum(present) / len(present), 3)
        return present[0]

    out: dict[str, Any] = {}
    for name in dict.fromkeys(n for run in runs for n in run):
        each = [run[name] for run in runs if name in run]
        merged = {k: mean([w.get(k) for w in each]) for k in each[0]}
        for k in ("problems", "wrongly_unschedulable", "scheduled", "unschedulable"):
            merged[k] = sum(w[k] for w in each)
        for k in ("problem_examples", "wrongly_unschedulable_examples"):
            merged[k] = [x for w in each for x in w[k]][:5]
        merged["pods_per_s_runs"] = [w["pods_per_s"] for w in each]
        out[name] = merged
    return out


def run_sizes(sizes: tuple[int, ...], rounds: int, pods: int, workloads: tuple[str, ...] | None,
              log=print, modes: tuple[str, ...] = MODES, profile: Path | None = None) -> dict[str, Any]:
    """`run_workloads` at each size (10 running pods a node), one double after another."""
    out: dict[str, Any] = {"sizes": []}
    for nodes in sizes:
        out["sizes"].append(run_workloads(nodes, 10 * nodes, pods, workloads, log=log, modes=modes, rounds=rounds,
                                          profile=profile))
    out["ratio"] = {str(s["nodes"]): s.get("ratio") for s in out["sizes"]}
    return out


def for_report(full: bool, notes: list[str], log=print) -> dict[str, Any]:
    """What `make perf` (FULL) or `make perf-quick` (QUICK) runs; a failure or a wrong
    placement becomes a note of the report rather than ending the run."""
    nodes, cluster_pods, pods, workloads = FULL if full else QUICK
    try:
        out = run_workloads(nodes, cluster_pods, pods, workloads, log=log, warmup=WARMUP if full else 20,
                            rounds=ROUNDS if full else 1)
    except Exception as exc:  # report, keep going
        notes.append(f"scheduler e2e {nodes} nodes failed: {type(exc).__name__}: {exc}")
        log(f"scheduler e2e failed: {exc}")
        return {"nodes": nodes, "error": f"{type(exc).__name__}: {exc}"}
    for mode, m in out["modes"].items():
        for name, w in m["workloads"].items():
            if w["problems"] or w["wrongly_unschedulable"]:
                notes.append(f"scheduler e2e {mode} {name}: {w['problems']} placement problems, "
                             f"{w['wrongly_unschedulable']} wrongly unschedulable: "
                             f"{(w['problem_examples'] + w['wrongly_unschedulable_examples'])[:3]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("scheduler_e2e", __doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="comma list of node counts, each with 10 running pods a node (default 5000,15000)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="runs of each mode per size, alternated")
    options.add(parser, pods=FULL[2], helps={"pods": "pods scheduled per workload"})
    parser.add_argument("--workloads", default="", help="comma list (default: all five)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma list of in-tree, extender, {CEILING} (the ceiling: perf/replay.py)")
    options.add(parser, out=ROOT / "perf" / "out" / "scheduler_e2e.json")
    parser.add_argument("--profile", type=Path, default=None,
                        help="directory: py-spy records every busy thread of the extender's worker (raw stacks)")
    ns = parser.parse_args(argv)
    names = tuple(w for w in ns.workloads.split(",") if w) or None
    modes = tuple(m for m in ns.modes.split(",") if m)
    try:
        sizes = tuple(int(n) for n in ns.sizes.split(",") if n)
    except ValueError:
        parser.error(f"--sizes: expected node counts, got {ns.sizes!r}")
    try:
        result = run_sizes(sizes, ns.rounds, ns.pods, names, modes=modes,
                           log=lambda m: print(m, file=sys.stderr, flush=True), profile=ns.profile)
    except ValueError as exc:  # a bad --workloads / --modes, or no binary
        parser.error(str(exc))
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2)
    ns.out.write_text(text + "\n")
    print("\n".join(line for size in result["sizes"] for line in render_scheduler_e2e(size)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
