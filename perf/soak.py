"""`make soak` / `python -m perf.soak --minutes M`: a long run at a steady request rate
with cluster-state churn, watching memory and latency over time.

A real `extender serve` (file mode, reload every second) answers an open-loop stream
of `/filter` and `/prioritize` calls (50 a second by default; the pods are the perf
workloads' mix, many distinct shapes, NodeNames sometimes a random subset) while the
cluster file is rewritten every `--churn` seconds (a node cordoned or uncordoned, a
taint value changed). Every `--sample` seconds it records the server's RSS (master and
workers) and the window's p50/p99 latency and errors. Writes `soak.json` and
`soak.png` (RSS and p99 over time) to `--out` (default perf/out/soak). Not part of
`make test`: it is a duration test.

Verdict (exit code 1 when it fails): 0 errors, no worker restart, RSS after the
warm-up (the first fifth) within +-10% of its median, and the last window's p99 within
2x the first post-warm-up window's (+1 ms).
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

from perf import options
from perf.generate import generate_cluster, write_cluster
from perf.http_driver import Connection, extender_bin, free_port
from perf.output import write_result
from perf.stats import percentile
from perf.workloads import mixed_pods

OUT = Path(__file__).resolve().parent / "out" / "soak"


class Churn:
    """Rewrites the cluster file: one small change per call, atomically (rename)."""

    def __init__(self, cluster: dict[str, Any], path: Path, seed: int) -> None:
        self.cluster = cluster
        self.path = path
        self.rng = random.Random(seed)
        self.nodes = [o for o in cluster["items"] if o.get("kind") == "Node"]
        self.changes = 0

    def step(self) -> None:
        node = self.rng.choice(self.nodes)
        spec = node.setdefault("spec", {})
        if self.rng.random() < 0.5:
            spec["unschedulable"] = not spec.get("unschedulable", False)
        else:
            taints = [t for t in spec.get("taints", []) if t.get("key") != "soak.example.com/churn"]
            taints.append({"key": "soak.example.com/churn", "value": str(self.rng.randint(0, 999)),
                           "effect": "PreferNoSchedule"})
            spec["taints"] = taints
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self.cluster))
        os.replace(tmp, self.path)
        self.changes += 1


def start_server(cluster: Path, worker_class: str, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [extender_bin(), "serve", "--cluster", str(cluster), "--listen", f"127.0.0.1:{port}",
           "--metrics-listen", f"127.0.0.1:{free_port()}", "--worker-class", worker_class,
           "--reload-interval", "1", "--log-level", "warning",
           # the soak client is not a scheduler: it never binds, so with in-flight
           # accounting every pod would wait --inflight-wait for the one before it
           "--inflight-wait", "0"]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = Connection(port)
            conn.sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            if conn.sock.recv(100).startswith(b"HTTP/1.1 200"):
                conn.close()
                return proc, port
            conn.close()
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server not ready after 120 s")


def rss_mb(proc: psutil.Process) -> tuple[float, list[int]]:
    procs = [proc, *proc.children(recursive=True)]
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20, sorted(p.pid for p in procs[1:])


def soak(minutes: float, rate: float, sample: float, churn_every: float, nodes: int,
         worker_class: str, out: Path, seed: int = 1, clients: int = 4) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="extender-soak-"))
    cluster, _ = generate_cluster(nodes, nodes * 10, seed)
    path = write_cluster(cluster, workdir / "cluster.json")
    churn = Churn(cluster, path, seed)
    names = [o["metadata"]["name"] for o in churn.nodes]
    pods = mixed_pods(400)
    rng = random.Random(seed)
    bodies = []
    for i, pod in enumerate(pods):
        subset = names if i % 3 else rng.sample(names, k=max(1, len(names) // 2))
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": subset})
        bodies.append(("/filter" if i % 2 else "/prioritize", body))

    proc, port = start_server(path, worker_class, out / "server.log")
    server = psutil.Process(proc.pid)
    work: queue.Queue = queue.Queue()
    results: list[tuple[float, float, int]] = []  # (time since start, latency s, status)
    lock = threading.Lock()
    started = time.monotonic()
    end = started + minutes * 60

    def client() -> None:
        conn = Connection(port)
        while True:
            item = work.get()
            if item is None:
                break
            verb, body = item
            t0 = time.perf_counter()
            try:
                status, _ = conn.post(verb, body)
            except OSError:
                status = 599
                conn.close()
                conn = Connection(port)
            with lock:
                results.append((time.monotonic() - started, time.perf_counter() - t0, status))
        conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    samples: list[dict[str, Any]] = []
    first_rss, workers = rss_mb(server)
    next_send = next_sample = next_churn = started
    i = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if now >= next_send:  # open loop: the schedule does not wait for answers
            work.put(bodies[i % len(bodies)])
            i += 1
            next_send += 1 / rate
        if now >= next_churn:
            churn.step()
            next_churn += churn_every
        if now >= next_sample:
            rss, pids = rss_mb(server)
            with lock:
                window = [r for r in results if r[0] >= now - started - sample]
            lat = sorted(r[1] for r in window)
            samples.append({"t": round(now - started, 1), "rss_mb": round(rss, 1), "workers": pids,
                            "requests": len(window),
                            "errors": sum(1 for r in window if r[2] != 200),
                            "p50_ms": round(percentile(lat, 50) * 1000, 3) if lat else None,
                            "p99_ms": round(percentile(lat, 99) * 1000, 3) if lat else None})
            print(json.dumps(samples[-1]), flush=True)
            next_sample += sample
        time.sleep(max(0.0, min(next_send, next_sample, next_churn, end) - time.monotonic()))
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join(timeout=30)
    final_rss, final_workers = rss_mb(server)
    proc.terminate()
    proc.wait(timeout=30)
    return verdict(samples, results, workers, final_workers, churn.changes, first_rss, final_rss,
                   {"minutes": minutes, "rate": rate, "sample_s": sample, "churn_s": churn_every,
                    "nodes": nodes, "worker_class": worker_class, "seed": seed})


def verdict(samples: list[dict[str, Any]], results: list[tuple[float, float, int]],
            workers: list[int], final_workers: list[int], changes: int, first_rss: float,
            final_rss: float, params: dict[str, Any]) -> dict[str, Any]:
    errors = sum(1 for r in results if r[2] != 200)
    settled = samples[max(1, len(samples) // 5):]
    rss = sorted(s["rss_mb"] for s in settled)
    median = rss[len(rss) // 2] if rss else first_rss
    drift = max((abs(r - median) / median for r in rss), default=0.0)
    p99s = [s["p99_ms"] for s in settled if s["p99_ms"] is not None]
    p99_ok = not p99s or p99s[-1] <= 2 * p99s[0] + 1.0
    report = {
        "params": params, "requests": len(results), "errors": errors, "state_changes": changes,
        "worker_restarts": workers != final_workers, "rss_start_mb": round(first_rss, 1),
        "rss_end_mb": round(final_rss, 1), "rss_settled_median_mb": round(median, 1),
        "rss_settled_max_drift": round(drift, 4), "p99_first_ms": p99s[0] if p99s else None,
        "p99_last_ms": p99s[-1] if p99s else None,
        "p99_overall_ms": round(percentile(sorted(r[1] for r in results), 99) * 1000, 3) if results else None,
        "samples": samples,
    }
    report["ok"] = errors == 0 and workers == final_workers and drift <= 0.10 and p99_ok
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] / 60 for s in report["samples"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(t, [s["rss_mb"] for s in report["samples"]], marker="o")
    top.set_ylabel("server RSS (MB)")
    p = report["params"]
    top.set_title(f"soak: {p['rate']:g} req/s, {p['nodes']} nodes, churn every {p['churn_s']:g} s, "
                  f"{p['worker_class']}")
    bottom.plot(t, [s["p99_ms"] for s in report["samples"]], marker="o", label="p99")
    bottom.plot(t, [s["p50_ms"] for s in report["samples"]], marker=".", label="p50")
    bottom.set_ylabel("latency per window (ms)")
    bottom.set_xlabel("minutes")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("soak", __doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=50.0, help="requests a second")
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--churn", type=float, default=5.0, help="seconds between state changes")
    options.add(parser, nodes=500)
    parser.add_argument("--worker-class", default="inline", choices=("inline", "pool", "gthread"))
    options.add(parser, seed=1, out=OUT, helps={"out": "directory for soak.json and soak.png"})
    ns = parser.parse_args(argv)
    out = Path(ns.out)
    report = soak(ns.minutes, ns.rate, ns.sample, ns.churn, ns.nodes, ns.worker_class, out, ns.seed)
    write_result(out / "soak.json", report)
    plot(report, out / "soak.png")
    summary = {k: v for k, v in report.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
