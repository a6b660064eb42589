"""`python -m perf.busy`: health and a cheap pod's latency while expensive requests keep
the server busy, per worker class.

`--expensive` clients send, back to back, full-`Nodes` requests for every node of a
generated cluster, each pod with a unique label (no answer is reused): tens of
milliseconds of Python each. Meanwhile one client probes `/healthz` on the metrics
listener and on the main listener, and another sends a cheap `/filter` (NodeNames, a
plain pod), every `--interval` seconds. Prints and writes `busy.json` (p50/p99/max per
probe, per worker class) to `--out` (default perf/out/busy).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from perf.generate import generate_cluster, write_cluster
from perf.http_driver import Connection, extender_bin, free_port
from perf.stats import percentile

OUT = Path(__file__).resolve().parent / "out" / "busy"


def _get(port: int, path: str) -> float:
    conn = Connection(port)
    try:
        started = time.perf_counter()
        conn.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        while conn.sock.recv(65536):
            pass
        return time.perf_counter() - started
    finally:
        conn.close()


def _summary(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2),
            "max_ms": round(ms[-1], 2) if ms else float("nan")}


def run_class(worker_class: str, threads: int, cluster_path: Path, node_dicts: list[dict[str, Any]],
              names: list[str], seconds: float, expensive: int, interval: float) -> dict[str, Any]:
    port, metrics_port = free_port(), free_port()
    cmd = [extender_bin(), "serve", "--cluster", str(cluster_path), "--listen", f"127.0.0.1:{port}",
           "--metrics-listen", f"127.0.0.1:{metrics_port}", "--worker-class", worker_class,
           "--threads", str(threads), "--reload-interval", "0", "--log-level", "error"]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _get(port, "/readyz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        nodes_json = orjson.dumps({"metadata": {}, "items": node_dicts})
        cheap = orjson.dumps({"Pod": {"metadata": {"name": "cheap", "namespace": "default"}, "spec": {}},
                              "Nodes": None, "NodeNames": names})
        stop = threading.Event()
        heavy: list[float] = []
        lock = threading.Lock()

        def expensive_client(k: int) -> None:
            conn = Connection(port)
            i = 0
            while not stop.is_set():
                pod = {"metadata": {"name": f"heavy-{k}-{i}", "namespace": "default",
                                    "labels": {"unique": f"{k}-{i}"}},
                       "spec": {"tolerations": [{"key": "node.example.com/sla", "operator": "Gt",
                                                 "value": str(i % 900), "effect": "NoSchedule"}]}}
                body = b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":' + nodes_json + b',"NodeNames":null}'
                started = time.perf_counter()
                conn.post("/filter", body)
                with lock:
                    heavy.append(time.perf_counter() - started)
                i += 1
            conn.close()

        workers = [threading.Thread(target=expensive_client, args=(k,)) for k in range(expensive)]
        for t in workers:
            t.start()
        time.sleep(1.0)  # let them fill the server
        probes: dict[str, list[float]] = {"healthz (metrics listener)": [], "healthz (main listener)": [],
                                          "cheap /filter": []}
        cheap_conn = Connection(port)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            probes["healthz (metrics listener)"].append(_get(metrics_port, "/healthz"))
            probes["healthz (main listener)"].append(_get(port, "/healthz"))
            started = time.perf_counter()
            cheap_conn.post("/filter", cheap)
            probes["cheap /filter"].append(time.perf_counter() - started)
            time.sleep(interval)
        stop.set()
        for t in workers:
            t.join(timeout=60)
        cheap_conn.close()
        out = {name: _summary(values) for name, values in probes.items()}
        out["expensive /filter"] = _summary(heavy)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.busy", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--expensive", type=int, default=8, help="clients sending expensive requests")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--classes", default="inline,gthread", help="worker classes, comma-separated")
    parser.add_argument("--out", default=str(OUT))
    ns = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="extender-busy-"))
    cluster, _ = generate_cluster(ns.nodes, ns.nodes * 5, 1)
    path = write_cluster(cluster, workdir / "cluster.json")
    node_dicts = [o for o in cluster["items"] if o.get("kind") == "Node"]
    names = [n["metadata"]["name"] for n in node_dicts]
    report: dict[str, Any] = {"params": vars(ns)}
    for worker_class in ns.classes.split(","):
        report[worker_class] = run_class(worker_class, ns.threads, path, node_dicts, names,
                                         ns.seconds, ns.expensive, ns.interval)
        print(worker_class, json.dumps(report[worker_class]), flush=True)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "busy.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
