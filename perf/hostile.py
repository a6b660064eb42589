"""Hostile-pod benchmark: health and a cheap pod's latency while 8 expensive pods are
being answered, against a real `extender serve` over loopback.

    python -m perf.hostile [--seconds 20] [--health-url URL ...] [--server-arg=--threads=8]

Each of 8 client threads sends, back to back, `/filter` for a pod whose CEL toleration
is expensive (two nested `all` over list literals, a fresh expression every request so
neither the memo nor the answer cache helps: ~0.7 M cost units per taint, ~1-2 s here,
three distinct taints per request, so a request runs into `--request-deadline`).  Meanwhile
one thread probes each health URL every 50 ms and one sends a cheap pod's `/filter`
every 100 ms.  The report gives p50/p95/p99/max per stream and how the hostile requests
ended (verdict or deadline `Error`).  `--health-url` is repeatable: pass the main
listener's `/healthz` and, where the server has one, the separate metrics listener's.
"""

from __future__ import annotations

import http.client
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from perf import options
from perf.http_driver import REPO, Server
from perf.output import write_result
from perf.stats import summarize

HOSTILE_PODS = 8
NODES = [f"node-{i}" for i in range(30)]
TAINTS = [("dedicated", "gpu", "NoSchedule"), ("zone", "a", "NoSchedule"),
          ("example.com/kernel", "5.15.0", "NoSchedule")]


def cluster_doc() -> dict:
    """30 nodes cycling through 3 taints: every request has 3 distinct taints."""
    items = []
    for i, name in enumerate(NODES):
        key, value, effect = TAINTS[i % len(TAINTS)]
        items.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                      "spec": {"taints": [{"key": key, "value": value, "effect": effect}]},
                      "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def body(name: str, expression: str | None) -> bytes:
    spec: dict = {"containers": [{"name": "c", "image": "x"}]}
    if expression is not None:
        spec["tolerations"] = [{"expression": expression}]
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": spec,
           "metadata": {"name": name, "namespace": "default", "uid": name}}
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": NODES})


def hostile_expression(n: int) -> str:
    """Admitted (566,011 cel-go units estimated) and ~1 s of CPU per taint: 62,500
    quantity parses of distinct strings, among the slowest work per unit the libraries
    have (a plain nested all() at the limit takes ~0.15 s: no longer hostile)."""
    firsts = "[" + ",".join(repr(str(i)) for i in range(1, 251)) + "]"
    seconds = "[" + ",".join(repr(f".{j}Mi") for j in range(1, 251)) + "]"
    return (f"{firsts}.all(a, {seconds}.all(b, quantity(a + b)"
            f".isLessThan(quantity('{n + 1}00Gi'))))")  # n: no two requests alike


class Client:
    """One keep-alive connection; `call` returns (seconds, status, body)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path or "/"
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def call(self, method: str = "GET", payload: bytes | None = None,
             path: str | None = None) -> tuple[float, int, bytes]:
        started = time.perf_counter()
        try:
            self.conn.request(method, path or self.path, body=payload,
                              headers={"Content-Type": "application/json"})
            response = self.conn.getresponse()
            data = response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            data, status = b"", 0
        return time.perf_counter() - started, status, data


def run(seconds: float, health_urls: list[str], server_args: list[str]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="hostile-"))
    cluster = work / "cluster.json"
    cluster.write_bytes(orjson.dumps(cluster_doc()))

    class HostileServer(Server):
        def command(self) -> list[str]:
            # its clients never bind (no scheduler here): without this, in-flight
            # accounting makes each pod of the namespace wait for the one before it
            return [*super().command(), "--inflight-wait", "0", *server_args]

    server = HostileServer(cluster, work / "server.log")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    health_urls = [u.replace("{port}", str(server.port)) for u in health_urls] or [
        f"{base}/healthz"]
    stop = threading.Event()
    health: dict[str, list[float]] = {u: [] for u in health_urls}
    cheap: list[float] = []
    hostile: list[float] = []
    outcomes = {"verdict": 0, "deadline_error": 0, "other_error": 0}
    failures: dict[str, int] = {}
    counter = iter(range(10**9))
    lock = threading.Lock()

    def hostile_loop() -> None:
        client = Client(f"{base}/filter")
        while not stop.is_set():
            with lock:
                n = next(counter)
            took, status, data = client.call("POST", body(f"hostile-{n}", hostile_expression(n)))
            answer = orjson.loads(data) if status == 200 else {}
            kind = ("deadline_error" if "deadline" in (answer.get("Error") or "") else
                    "verdict" if status == 200 and not answer.get("Error") else "other_error")
            with lock:
                hostile.append(took)
                outcomes[kind] += 1

    def health_loop(url: str) -> None:
        client = Client(url)
        while not stop.is_set():
            took, status, _ = client.call()
            health[url].append(took)  # a failure counts with its time (30 s client timeout)
            if status != 200:
                with lock:
                    failures[url] = failures.get(url, 0) + 1
            time.sleep(0.05)

    def cheap_loop() -> None:
        client = Client(f"{base}/filter")
        payload = body("cheap", "taint.key.startsWith('zone')")
        while not stop.is_set():
            took, status, _ = client.call("POST", payload)
            cheap.append(took)
            if status != 200:
                with lock:
                    failures["cheap"] = failures.get("cheap", 0) + 1
            time.sleep(0.1)

    threads = [threading.Thread(target=hostile_loop) for _ in range(HOSTILE_PODS)]
    threads += [threading.Thread(target=health_loop, args=(u,)) for u in health_urls]
    threads.append(threading.Thread(target=cheap_loop))
    try:
        for t in threads:
            t.start()
        time.sleep(seconds)
    finally:
        stop.set()
        for t in threads:
            t.join()
        server.stop()

    ms = summarize  # seconds in, milliseconds out

    return {"seconds": seconds, "server_args": server_args, "hostile_pods": HOSTILE_PODS,
            "health_ms": {u: ms(v) for u, v in health.items()}, "cheap_filter_ms": ms(cheap),
            "hostile_filter_ms": ms(hostile), "hostile_outcomes": outcomes,
            "failed_probes": failures}


def markdown(report: dict) -> str:
    lines = [f"Hostile pods: {report['hostile_pods']} concurrent expensive `/filter` streams "
             f"for {report['seconds']:g} s; server args: `{' '.join(report['server_args'])}`",
             "", "| stream | n | p50 ms | p90 ms | p99 ms | max ms |", "| --- | --- | --- | --- | --- | --- |"]
    rows = [(f"health {u}", s) for u, s in report["health_ms"].items()]
    rows += [("cheap pod /filter", report["cheap_filter_ms"]),
             ("hostile pod /filter", report["hostile_filter_ms"])]
    for name, s in rows:
        lines.append(f"| {name} | {s.get('n')} | {s.get('p50_ms')} | {s.get('p90_ms')} | "
                     f"{s.get('p99_ms')} | {s.get('max_ms')} |")
    lines += ["", f"Hostile outcomes: {report['hostile_outcomes']}; failed probes (no "
              f"answer within 30 s): {report['failed_probes'] or 'none'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("hostile", __doc__, whole_doc=True, seconds=20.0, server_arg=[],
                            out=REPO / "perf" / "results" / "hostile.json")
    parser.add_argument("--health-url", action="append", default=[],
                        help="health URL to probe (repeatable; '{port}' = the main port; "
                        "default the main listener's /healthz)")
    ns = parser.parse_args(argv)
    report = run(ns.seconds, ns.health_url, ns.server_arg)
    write_result(ns.out, report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

