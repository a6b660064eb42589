"""`python -m perf run --quick|--full`: every driver at every size, then the report.

Quick mode (`make perf-quick`, < 2 minutes) runs 500 and 1,000 nodes with few
requests; full mode (`make perf`) adds 5,000 nodes / 50,000 pods, where the bar is
defined. The order per size is: generate -> load -> in-process (mixed, then each
workload alone, each compared with the reference path as kube-scheduler reads the
answers) -> HTTP (NodeNames sequential and at concurrency 4, full Nodes sequential)
-> simulation.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extender.state import ClusterSnapshot, load_objects
from perf.cel_bench import run_cel_bench
from perf.churn import run_size as churn_size
from perf.engine import default_config, new_extender
from perf.generate import generate_cluster, write_cluster
from perf.http_driver import (
    Server,
    handler_means,
    handler_totals,
    names_requests,
    nodes_requests,
    run_http,
)
from perf.inprocess import codec_costs, collect, compare_reference, run_inprocess, simulate, speedup
from perf.report import evaluate_bar, machine, write_report
from perf.scheduler_e2e import for_report as scheduler_e2e
from perf.workloads import CEL_ORACLES, SCHEDULER_PERF, WORKLOADS, distinct_shapes, mixed_pods

OUT = Path(__file__).resolve().parent / "out"


@dataclass(frozen=True)
class Profile:
    name: str
    sizes: tuple[tuple[int, int], ...]
    mixed: int  # in-process mixed requests
    ref_mixed: int  # of which answered by the reference too
    per_workload: int
    ref_per_workload: int
    http_seq: int
    http_c4: int
    http_nodes: int
    http_noop: int  # requests to the do-nothing server (the HTTP floor)
    sim_pods: dict[int, int]  # nodes -> simulated pods
    churn: tuple[tuple[int, int, int], ...] = ()  # (nodes, pods, scheduled pods) for perf.churn
    sched_perf_pods: int = 0  # per scheduler_perf-like workload, simulated at the largest size


QUICK = Profile("quick", ((500, 10_000), (1000, 10_000)), mixed=120, ref_mixed=20,
                per_workload=6, ref_per_workload=2, http_seq=150, http_c4=120, http_nodes=15,
                http_noop=100,
                sim_pods={500: 300, 1000: 300}, churn=((1000, 10_000, 60),), sched_perf_pods=30)
FULL = Profile("full", ((500, 10_000), (1000, 10_000), (5000, 50_000)), mixed=600, ref_mixed=40,
               per_workload=30, ref_per_workload=3, http_seq=1500, http_c4=1000, http_nodes=100,
               http_noop=500,
               sim_pods={500: 1000, 1000: 1000, 5000: 2000},
               churn=((1000, 10_000, 300), (5000, 50_000, 600), (15_000, 150_000, 400)),
               sched_perf_pods=300)


def measure_cold_start(path: Path, log_path: Path) -> float:
    """Spawn `extender serve` on the cluster file, wait for /readyz 200, stop it."""
    server = Server(path, log_path, workers=1, threads=4)
    try:
        return server.start()
    finally:
        server.stop()


def log(message: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_size(nodes: int, pods: int, profile: Profile, seed: int, out_dir: Path,
             notes: list[str]) -> dict[str, Any]:
    size: dict[str, Any] = {"nodes": nodes, "pods": pods, "seed": seed}
    config = default_config()

    t0 = time.perf_counter()
    cluster, info = generate_cluster(nodes, pods, seed)
    path = write_cluster(cluster, out_dir / f"cluster-{nodes}-{pods}.json")
    del cluster
    size["generate_s"] = round(time.perf_counter() - t0, 2)
    size["cluster_file"] = str(path)
    size["cluster_mb"] = round(path.stat().st_size / 1e6, 1)
    size["features"] = info.feature_counts
    log(f"{nodes} nodes / {pods} pods: generated {size['cluster_mb']} MB in {size['generate_s']} s")

    # Cold start first, while this process is small: later the harness holds millions
    # of objects (snapshot, raw objects, answers), and a server spawned then starts
    # 0.5-2 s slower on this 2-vCPU machine for reasons that are the harness's.
    cold_start = measure_cold_start(path, out_dir / f"cold-{nodes}.log")
    log(f"  cold start (spawn to /readyz 200): {cold_start:.2f} s")

    t0 = time.perf_counter()
    objects = load_objects(path)
    snapshot = ClusterSnapshot.from_objects(objects)
    size["load_s"] = round(time.perf_counter() - t0, 2)
    size["taint_groups"] = len(snapshot.nodes.taint_groups())
    node_dicts = [o for o in objects if o.get("kind") == "Node"]
    pod_dicts = [o for o in objects if o.get("kind") == "Pod"]
    names = [n.name for n in snapshot.nodes.nodes]
    # The harness holds the raw objects *and* the snapshot (millions of GC-tracked
    # objects); without freezing them every gen-2 collection in a timed region costs
    # hundreds of ms and in-process p99 measures the harness, not the engine.
    gc.collect()
    gc.freeze()
    log(f"  loaded in-process in {size['load_s']} s ({size['taint_groups']} distinct taint sets)")

    # --- driver 1 + reference ------------------------------------------------------
    from extender.state import StaticSource

    source = StaticSource(snapshot)
    fast = new_extender(config, source, fast=True)
    ref = new_extender(config, source, fast=False)
    mixed = mixed_pods(profile.mixed)
    answers, summary = run_inprocess(fast, mixed, names)
    summary["_samples"] = {"pair": collect(answers).pair}
    ref_answers, cmp = compare_reference(answers[: profile.ref_mixed], ref, names)
    cmp["speedup"] = speedup(collect(answers[: profile.ref_mixed]), collect(ref_answers))
    cmp["latency"] = collect(ref_answers).summary()
    inproc: dict[str, Any] = {"mixed": summary, "codec": codec_costs(answers[:50], names)}
    log(f"  in-process mixed: pair p50 {summary['pair'].get('p50_ms')} ms; reference "
        f"speed-up {cmp['speedup'].get('pair', {}).get('speedup')}x, mismatches {cmp['mismatches']}")

    per: dict[str, Any] = {}
    for w in WORKLOADS:
        wpods = [w.pod(100_000 + i) for i in range(profile.per_workload)]
        w_answers, w_summary = run_inprocess(fast, wpods, names, warmup=1)
        w_summary.pop("plugins", None)
        subset = w_answers[: profile.ref_per_workload]
        w_ref, w_cmp = compare_reference(subset, ref, names, max_mismatches=3)
        w_summary["speedup"] = speedup(collect(subset), collect(w_ref))
        w_summary["mismatches"] = w_cmp["mismatches"]
        if w_cmp["examples"]:
            w_summary["mismatch_examples"] = w_cmp["examples"]
        per[w.name] = w_summary
    inproc["workloads"] = per
    size["inprocess"] = inproc
    size["reference"] = cmp
    del fast, ref
    gc.collect()

    # --- driver 2: HTTP --------------------------------------------------------------
    server = Server(path, out_dir / f"server-{nodes}.log", workers=1, threads=4)
    http: dict[str, Any] = {}
    http_pods = mixed_pods(max(profile.http_seq, profile.http_c4), start=200_000)
    # Warm-up: the first pod of every shape the workloads make (three variants at most),
    # timed apart: what a shape costs before the server has answered it once.
    shapes = [w.pod(900_000 + k) for k in range(3) for w in WORKLOADS]
    phases = [
        ("names_seq", lambda: names_requests(http_pods[: profile.http_seq], names), "names", 1,
         lambda: names_requests(shapes, names)),
        ("names_seq_distinct", lambda: names_requests(distinct_shapes(http_pods[: profile.http_seq]),
                                                      names), "names", 1,
         lambda: names_requests(distinct_shapes(shapes), names)),
        ("names_c4", lambda: names_requests(http_pods[: profile.http_c4], names), "names", 4,
         lambda: names_requests(shapes, names)),
        ("nodes_seq", lambda: nodes_requests(http_pods[: profile.http_nodes], node_dicts),
         "nodes", 1, lambda: 1),
    ]
    try:
        cold = server.start()
        http["server"] = {"cold_start_s": round(cold_start, 3), "start_s_busy_harness": round(cold, 3),
                          "rss_mb_ready": server.rss_mb(), "restarts": 0}
        log(f"  server ready in {cold:.2f} s, RSS {http['server']['rss_mb_ready']}")
        for key, build, mode, conc, warm in phases:
            for attempt in (1, 2):  # one restart if the server vanished under us
                try:
                    reqs = build()
                    before = handler_totals(server.port)
                    http[key] = run_http(server.port, reqs, mode, conc, warmup=warm())
                    # includes the warm-up requests: a mean, not a percentile
                    http[key]["server_handler_mean_ms"] = handler_means(
                        before, handler_totals(server.port))
                    break
                except (ConnectionError, OSError) as exc:
                    why = f"{type(exc).__name__}: {exc}; server alive={server.alive()}"
                    notes.append(f"{nodes} nodes {key}: attempt {attempt} failed ({why}); "
                                 f"log tail: {server.log_tail(5)[:300]}")
                    log(f"  {key} failed: {why}")
                    if attempt == 2:
                        break
                    server.stop()
                    server.start()
                    http["server"]["restarts"] += 1
        http["server"]["rss_mb"] = server.rss_mb()
        seq = http.get("names_seq") or {}
        distinct = http.get("names_seq_distinct") or {}
        log(f"  HTTP NodeNames: pair p50 {_get_p(seq, 'p50_ms')} ms p99 {_get_p(seq, 'p99_ms')} ms "
            f"(distinct shapes: {_get_p(distinct, 'p50_ms')} / {_get_p(distinct, 'p99_ms')} ms);"
            f" c=4 {(http.get('names_c4') or {}).get('pairs_per_s')} pairs/s; "
            f"RSS {http['server']['rss_mb']}")
        for key in ("names_seq", "names_seq_distinct", "names_c4", "nodes_seq"):
            if key not in http:
                continue
            st = http[key]["stalls"]
            if st["filter"]["count"] or st["prioritize"]["count"]:
                notes.append(f"{nodes} nodes {key}: slow outliers (>= 35 ms and >= 4x p50; a "
                             f"Nagle/delayed-ACK stall sits at ~40 ms, other values point to "
                             f"GC or CPU contention): {st}")
            if http[key]["errors"]:
                notes.append(f"{nodes} nodes {key}: HTTP errors: {http[key]['errors']}")
    except Exception as exc:
        http["error"] = f"{type(exc).__name__}: {exc}"
        notes.append(f"{nodes} nodes: HTTP driver failed: {http['error'][:500]}")
        log(f"  HTTP driver failed: {exc}")
    finally:
        server.stop()
    if profile.http_noop:
        floor = Server(path, out_dir / f"noop-{nodes}.log", workers=1, threads=4, noop=True)
        try:
            floor.start()
            floor_pods = mixed_pods(profile.http_noop, start=300_000)
            http["noop_floor"] = run_http(floor.port, names_requests(floor_pods, names), "names", 1)
            log(f"  no-op server floor: pair p50 {http['noop_floor']['pair'].get('p50_ms')} ms")
        except Exception as exc:
            notes.append(f"{nodes} nodes: no-op floor server failed: {exc}")
        finally:
            floor.stop()
    size["http"] = http

    # --- driver 3: simulation ------------------------------------------------------
    sim_n = profile.sim_pods.get(nodes, 0)
    if sim_n:
        sim_pods = mixed_pods(sim_n, start=500_000)
        sim = simulate(lambda src: new_extender(config, src, fast=True), snapshot, node_dicts,
                       pod_dicts, sim_pods, CEL_ORACLES, seed=seed,
                       annotation_prefix=config.annotation_prefix)
        size["simulation"] = sim
        log(f"  simulation: {sim['pods']} pods at {sim['pods_per_s']} pods/s, "
            f"{sim['violations']} violations, unschedulable {sim['unschedulable']}")
        if sim["violations"]:
            notes.append(f"{nodes} nodes: simulation found {sim['violations']} hard-constraint "
                         f"violations: {sim['violation_examples'][:3]}")
    if profile.sched_perf_pods and nodes == profile.sizes[-1][0]:
        size["scheduler_perf"] = {}
        for w, threshold in SCHEDULER_PERF:
            res = simulate(lambda src: new_extender(config, src, fast=True), snapshot, node_dicts, pod_dicts,
                           [w.pod(700_000 + i) for i in range(profile.sched_perf_pods)], CEL_ORACLES,
                           seed=seed, annotation_prefix=config.annotation_prefix)
            size["scheduler_perf"][w.name] = {
                "description": w.description, "kube_scheduler_threshold_pods_per_s": threshold,
                **{k: res[k] for k in ("pods", "bound", "pods_per_s", "mean_ms", "violations", "unschedulable")}}
            log(f"  scheduler_perf-like {w.name}: {res['pods_per_s']} pods/s "
                f"(kube-scheduler threshold {threshold:g}), violations {res['violations']}")
    gc.unfreeze()
    mism = cmp["mismatches"] + sum(w.get("mismatches", 0) for w in per.values())
    if mism:
        notes.append(f"{nodes} nodes: {mism} answers differ from the reference path "
                     f"(examples in sizes[].reference / inprocess.workloads)")
    return size


def _get_p(run: dict[str, Any], key: str) -> Any:
    return (run.get("pair") or {}).get(key)


def run(full: bool, seed: int = 1, out_dir: Path = OUT) -> dict[str, Any]:
    profile = FULL if full else QUICK
    out_dir.mkdir(parents=True, exist_ok=True)  # the churn servers' logs go there first
    # SIGTERM -> SystemExit, so `finally: server.stop()` reaps the servers we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    load_before = os.getloadavg()
    notes: list[str] = []
    if not full:
        notes.append("quick run: small sizes and few requests; the bar is defined at 5,000 nodes "
                     "/ 50,000 pods (`make perf`), so 'met' here is indicative only")
    log(f"{profile.name} run")
    # The churn benchmark first (the bar): a server fed by the live source, a bind
    # between every two pods, and once more with no two pods alike (perf/churn.py).
    churn = []
    for nodes, pods, scheduled in profile.churn:
        try:
            churn.append(churn_size(nodes, pods, scheduled, out_dir, log=log, distinct=True))
        except Exception as exc:  # report, keep going
            notes.append(f"churn {nodes} nodes failed: {type(exc).__name__}: {exc}")
            log(f"churn {nodes} nodes failed: {exc}")
    sizes = []
    for nodes, pods in profile.sizes:
        sizes.append(run_size(nodes, pods, profile, seed, out_dir, notes))
        gc.collect()
    # end to end through the real kube-scheduler, with the extender and with its in-tree
    # plugins (full: 5,000 nodes; quick: 500 nodes)
    e2e = scheduler_e2e(full, notes, log=log)
    report: dict[str, Any] = {
        "churn": churn,
        "scheduler_e2e": e2e,
        "meta": {**machine(), "seed": seed},
        "mode": profile.name,
        "sizes": sizes,
        "cel": run_cel_bench(),
        "bar": evaluate_bar(sizes[-1]) if sizes else {},
        "notes": notes,
    }
    report["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["meta"]["loadavg_before"] = [round(x, 2) for x in load_before]
    report["meta"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    if load_before[0] > 0.5 * (os.cpu_count() or 1):
        notes.append(f"machine was busy when the run started (1-min load {load_before[0]:.1f} "
                     f"on {os.cpu_count()} CPUs): latencies are pessimistic; re-run on a quiet box")
    paths = write_report(report, out_dir)
    print(paths["summary"].read_text())
    log(f"wrote {', '.join(str(p) for p in paths.values())} in {report['meta']['elapsed_s']} s")
    return report


__all__ = ["FULL", "QUICK", "Profile", "run", "run_size"]
