"""The attacks of issue #28 against a live `extender serve` (file mode, webhook on): what
kube-scheduler, the kubelet and the API server see meanwhile, and the worker's RSS.

    python -m perf.attacks [--seconds 20] [--only NAME ...] [--server-arg=--threads=8]

Three streams run through every scenario, as their real clients do:
* `verbs`: kube-scheduler's `/filter` on one kept-alive connection, every 20 ms;
* `probe`: a kubelet probe, `GET /healthz` on `--metrics-listen`, a new connection each
  time, 1 s timeout (kubelet's default `timeoutSeconds`), every 100 ms;
* `review`: an AdmissionReview over HTTPS, a new connection each time (the worst case:
  the API server keeps its connections), 5 s timeout (the manifests'), every 200 ms.

Scenarios (an attacker reopens whatever the server closes):
* `idle`: nothing, the baseline;
* `silent-tls`: 80 TCP connections to the webhook that never start a handshake;
* `slow-bytes`: 64 TLS clients (handshake done) sending a request one byte every 4 s;
* `idle-health`: 70 idle connections to the health listener, opened 10 ms apart;
* `huge-reviews`: 12 clients sending 58 MB AdmissionReviews (over the body limit),
  each again 0.1 s after its answer;
* `max-reviews`: the same with AdmissionReviews just under the 8 MiB limit;
* `stalled-bodies`: 16 `/filter` bodies of 30 MB that stop 1 KiB short, held;
* `nodes-mode`: 8 clients sending 21 MB Nodes-mode `/filter` requests back to back;
* `health-bodies` (issue #35): 49 connections to `--metrics-listen`, each sending
  ~1 MB of a 1 MiB `POST /healthz` body and stalling, 48 MiB together, reopened when closed;
* `empty-lists`: 4 clients sending 8 MiB Nodes-mode `/filter` bodies of empty lists
  (~18x their size once parsed);
* `cel-reviews`: 10 clients sending 62 KB AdmissionReviews with six 10 KiB CEL list
  literals each, giving up after 5 s.

The report gives each stream's p50/p99/max and failures, and the worker's peak RSS
against the documented ceiling (base + --memory-limit-bytes + 6 x --max-inflight-bytes).
"""

from __future__ import annotations

import copy
import http.client
import json
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import psutil

from perf import options
from perf.http_driver import REPO, Server, free_port
from perf.output import write_result
from perf.stats import summarize

NAMES = ["od-a1", "od-a2", "od-b1", "spot-a1", "spot-b1", "spot-c1"]  # examples/cluster.yaml
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "uid": "u-web"},
       "spec": {"containers": [{"name": "c", "image": "x"}], "tolerations": [
           {"key": "sla", "operator": "Gt", "value": "500", "effect": "NoSchedule"}]}}
FILTER = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": NAMES})
MIB = 1 << 20


def review_body(pad: int = 0) -> bytes:
    pod = copy.deepcopy(POD)
    if pad:
        pod["metadata"]["annotations"] = {"example.com/pad": "x" * pad}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "default", "object": pod}})


def kubelet_node(i: int) -> dict:
    """A node roughly as the kubelet registers it (~3 KB of JSON, no image list)."""
    name = f"ip-10-12-{i // 250}-{i % 250}.eu-west-1.compute.internal"
    conditions = [{"type": t, "status": "False", "lastHeartbeatTime": "2026-11-26T09:00:00Z",
                   "lastTransitionTime": "2026-11-20T10:00:30Z", "reason": f"KubeletHasNo{t}",
                   "message": f"kubelet has no {t.lower()}"} for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "uid": f"00000000-0000-4000-8000-{i:012d}", "resourceVersion": "123456789",
        "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                   "topology.kubernetes.io/zone": f"eu-west-1{'abc'[i % 3]}", "topology.kubernetes.io/region": "eu-west-1",
                   "node.kubernetes.io/instance-type": "m6i.4xlarge", "eks.amazonaws.com/nodegroup": "general"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"providerID": f"aws:///eu-west-1a/i-{i:017x}", "podCIDR": "10.244.12.0/24"},
        "status": {"capacity": {"cpu": "16", "memory": "65023132Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
                   "allocatable": {"cpu": "15890m", "memory": "64006300Ki", "pods": "110", "ephemeral-storage": "95551679124"},
                   "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": f"10.12.{i // 250}.{i % 250}"},
                                 {"type": "Hostname", "address": name}],
                   "nodeInfo": {"kernelVersion": "6.1.112-122.189.amzn2023.x86_64", "osImage": "Amazon Linux 2023",
                                "containerRuntimeVersion": "containerd://1.7.22", "kubeletVersion": "v1.30.4",
                                "kubeProxyVersion": "v1.30.4", "operatingSystem": "linux", "architecture": "amd64"}}}


def nodes_mode_body(size: int) -> bytes:
    """A Nodes-mode filter request of about `size` bytes."""
    one = len(orjson.dumps(kubelet_node(0)))
    return orjson.dumps({"Pod": POD, "Nodes": {"items": [kubelet_node(i) for i in range(size // (one + 1))]},
                         "NodeNames": None})


def tls_pair(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


class Target(Server):
    """`extender serve` with the webhook and the health listener on known ports."""

    def __init__(self, work: Path, extra: list[str]) -> None:
        super().__init__(REPO / "examples" / "cluster.yaml", work / "server.log")
        self.cert, self.key = tls_pair(work)
        self.hook_port, self.metrics_port = free_port(), free_port()
        self.extra = extra
        self.client_tls = ssl.create_default_context(cafile=str(self.cert))

    def command(self) -> list[str]:
        return [*super().command(), "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                "--webhook-listen", f"127.0.0.1:{self.hook_port}", "--tls-cert-file", str(self.cert),
                "--tls-private-key-file", str(self.key), *self.extra]

    def worker(self) -> psutil.Process:
        return psutil.Process(self.proc.pid).children()[0]


# --- the streams legitimate clients send --------------------------------------------------

class Stream:
    def __init__(self, name: str, every: float, call: Callable[[], int]) -> None:
        self.name, self.every, self.call = name, every, call
        self.took: list[float] = []
        self.failures = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                ok = self.call() == 200
            except (OSError, http.client.HTTPException, ssl.SSLError):
                ok = False
            self.took.append(time.perf_counter() - started)
            self.failures += not ok
            stop.wait(self.every)

    def report(self) -> dict:
        return {**summarize(self.took), "failures": self.failures}


def streams(target: Target) -> list[Stream]:
    verbs = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)

    def verb() -> int:
        try:
            verbs.request("POST", "/filter", body=FILTER, headers={"Content-Type": "application/json"})
            response = verbs.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            verbs.close()
            raise

    def probe() -> int:
        conn = http.client.HTTPConnection("127.0.0.1", target.metrics_port, timeout=1.0)
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    review = review_body()

    def admission() -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", target.hook_port, context=target.client_tls, timeout=5.0)
        try:
            conn.request("POST", "/validate", body=review, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    return [Stream("verbs", 0.02, verb), Stream("probe", 0.1, probe), Stream("review", 0.2, admission)]


# --- attacks -------------------------------------------------------------------------------

def _held(count: int, opener: Callable[[], socket.socket], stop: threading.Event, step: float = 0.01,
          feed: Callable[[socket.socket, int], None] | None = None, every: float = 0.5) -> None:
    """Keep `count` connections open (reopening closed ones); `feed` sends on each."""
    socks: list[socket.socket | None] = [None] * count
    tick = 0
    while not stop.is_set():
        for i in range(count):
            sock = socks[i]
            if sock is not None and closed(sock):
                sock.close()
                socks[i] = sock = None
            if sock is None:
                try:
                    socks[i] = opener()
                except OSError:
                    continue
                if step:
                    time.sleep(step)
            elif feed is not None:
                try:
                    feed(sock, tick)
                except OSError:
                    pass
        tick += 1
        stop.wait(every)
    for sock in socks:
        if sock is not None:
            sock.close()


def closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (EOF or reset), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def silent_tls(target: Target, stop: threading.Event, count: int = 80) -> None:
    _held(count, lambda: socket.create_connection(("127.0.0.1", target.hook_port)), stop)


def slow_bytes(target: Target, stop: threading.Event, count: int = 64, every: float = 4.0) -> None:
    head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b" " * 100_000

    def opener() -> socket.socket:
        raw = socket.create_connection(("127.0.0.1", target.hook_port), timeout=5)
        return target.client_tls.wrap_socket(raw, server_hostname="localhost")

    _held(count, opener, stop, feed=lambda sock, tick: sock.send(head[tick:tick + 1]), every=every)


def idle_health(target: Target, stop: threading.Event, count: int = 70) -> None:
    _held(count, lambda: socket.create_connection(("127.0.0.1", target.metrics_port)), stop)


def reviews(target: Target, stop: threading.Event, count: int = 12, size: int = 8 * MIB - 4096) -> None:
    """`count` clients sending reviews of `size` bytes back to back (a declared size
    only, when it is over the limit: the server answers before the body)."""
    body = review_body(max(0, size - len(review_body()))) if size <= 8 * MIB else None

    def client() -> None:
        while not stop.is_set():
            try:
                raw = socket.create_connection(("127.0.0.1", target.hook_port), timeout=10)
                with target.client_tls.wrap_socket(raw, server_hostname="localhost") as sock:
                    length = len(body) if body is not None else size
                    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length)
                    if body is not None:
                        sock.sendall(body)
                    sock.recv(4096)
            except OSError:
                pass
            stop.wait(0.1)  # a flood of bare TLS handshakes would be another attack

    _threads(count, client)


def stalled_bodies(target: Target, stop: threading.Event, count: int = 16, size: int = 30 * MIB) -> None:
    chunk = b" " * MIB

    def opener() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", target.port), timeout=10)
        sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        try:
            for _ in range(size // MIB - 1):
                sock.sendall(chunk)
        except OSError:
            pass  # refused (413 / 503) while sending
        return sock

    _held(count, opener, stop, step=0, every=0.5)


def nodes_mode(target: Target, stop: threading.Event, count: int = 8, size: int = 21 * MIB) -> None:
    _filters(target, stop, nodes_mode_body(size), count)


def _filters(target: Target, stop: threading.Event, body: bytes, count: int, pause: float = 0.0) -> None:
    """`count` clients sending `/filter` with `body`, `pause` seconds apart (0.05 s after
    a broken connection)."""
    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=60)
        while not stop.is_set():
            try:
                conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                conn.close()
                stop.wait(0.05)
            stop.wait(pause)

    _threads(count, client)


def stalled_posts(port: int, path: str, stop: threading.Event, count: int = 49, fill: int = 48 * MIB,
                  tls: ssl.SSLContext | None = None) -> None:
    """Issue #35's attack: `count` clients each sending a `POST path` body of a declared
    1 MiB and stalling before its end, so that together they hold `fill` bytes, head
    included, to the byte (the in-flight budget the server had for everything: its
    default, 48 MiB); each reconnects as soon as the server closes it."""
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path.encode(), 1 << 20)
    body = b"{" * (fill // count - len(head))

    def client() -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                if tls is not None:
                    sock = tls.wrap_socket(sock, server_hostname="localhost")
                with sock:
                    sock.sendall(head + body)
                    sock.settimeout(1.0)
                    while not stop.is_set() and sock.recv(4096):
                        pass  # an answer (503, 413, 405): the server closes it next
                    continue
            except TimeoutError:
                continue
            except OSError:
                pass
            stop.wait(0.2)  # refused or reset: again

    _threads(count, client)


def health_bodies(target: Target, stop: threading.Event) -> None:
    stalled_posts(target.metrics_port, "/healthz", stop)


def empty_lists_body(size: int) -> bytes:
    """A Nodes-mode filter request of about `size` bytes, its one node padded with empty
    lists (a field no model reads: parsed, then ignored)."""
    pad = b"[]," * (size // 3)
    node = b'{"metadata":{"name":"n1"},"x":[' + pad + b'[]]}'
    return b'{"Pod":' + orjson.dumps(POD) + b',"Nodes":{"items":[' + node + b']},"NodeNames":null}'


def empty_lists(target: Target, stop: threading.Event, count: int = 4, size: int = 8 * MIB - 4096) -> None:
    _filters(target, stop, empty_lists_body(size), count, pause=0.05)


def cel_review_body(n: int, lists: int = 6) -> bytes:
    """An AdmissionReview of a Pod whose tolerations annotation holds `lists` CEL
    expressions, each a ~10 KiB list literal (distinct by `n`: never compiled before)."""
    items = ",".join(f"'v{n}-{i}'" for i in range(1300))
    expressions = [f"taint.value in [{items}]"[:10 * 1024 - 8].rpartition(",")[0] + f",'{k}']"
                   for k in range(lists)]
    tolerations = json.dumps([{"expression": e} for e in expressions])
    pod = copy.deepcopy(POD)
    pod["metadata"]["annotations"] = {"scheduling-extender.io/tolerations": tolerations}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"u{n}", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "default", "object": pod}})


def cel_reviews(target: Target, stop: threading.Event, count: int = 10, timeout: float = 5.0) -> None:
    sent = iter(range(10**9))

    def client() -> None:
        while not stop.is_set():
            try:
                raw = socket.create_connection(("127.0.0.1", target.hook_port), timeout=timeout)
                with target.client_tls.wrap_socket(raw, server_hostname="localhost") as sock:
                    body = cel_review_body(next(sent))
                    sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                                 % len(body) + body)
                    sock.recv(4096)  # gives up at `timeout`
            except OSError:
                pass

    _threads(count, client)


def _threads(count: int, target: Callable[[], None]) -> None:
    threads = [threading.Thread(target=target, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


SCENARIOS: dict[str, Callable[[Target, threading.Event], None] | None] = {
    "idle": None,
    "silent-tls": silent_tls,
    "slow-bytes": slow_bytes,
    "idle-health": idle_health,
    "huge-reviews": lambda t, s: reviews(t, s, size=58_000_000),
    "max-reviews": reviews,
    "stalled-bodies": stalled_bodies,
    "nodes-mode": nodes_mode,
    "health-bodies": health_bodies,
    "empty-lists": empty_lists,
    "cel-reviews": cel_reviews,
}


class PeakRSS:
    """The worker's resident memory, sampled every 20 ms."""

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.peak = self.base = process.memory_info().rss
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.peak


def run_scenario(target: Target, name: str, seconds: float) -> dict:
    attack = SCENARIOS[name]
    stop_attack, stop_streams = threading.Event(), threading.Event()
    rss = PeakRSS(target.worker())
    attacker = None
    if attack is not None:
        attacker = threading.Thread(target=attack, args=(target, stop_attack), daemon=True)
        attacker.start()
        time.sleep(min(3.0, seconds / 4))  # the attack in place before measuring
    legit = streams(target)
    threads = [threading.Thread(target=s.run, args=(stop_streams,), daemon=True) for s in legit]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop_streams.set()
    for t in threads:
        t.join()
    stop_attack.set()
    if attacker is not None:
        attacker.join(timeout=30)
    peak = rss.close()
    return {"scenario": name, **{s.name: s.report() for s in legit},
            "rss_base_mb": round(rss.base / 1e6, 1), "rss_peak_mb": round(peak / 1e6, 1)}


def run(seconds: float, only: list[str], server_args: list[str]) -> dict:
    work = Path(tempfile.mkdtemp(prefix="attacks-"))
    target = Target(work, server_args)
    target.start()
    try:
        results = []
        for name in only or SCENARIOS:
            results.append(run_scenario(target, name, seconds))
            print(json.dumps(results[-1]), flush=True)
            time.sleep(2)  # what the attack left (closing connections, shed requests) settles
        alive = target.alive()
    finally:
        target.stop()
    return {"seconds": seconds, "server_args": server_args, "results": results, "server_survived": alive}


def markdown(report: dict) -> str:
    lines = [f"{report['seconds']:g} s per scenario; server args: `{' '.join(report['server_args']) or '(defaults)'}`",
             "", "| scenario | verbs p50 / p99 ms | probe p99 / max ms (failed) | review p99 / max ms (failed) "
             "| worker RSS base → peak MB |", "| --- | --- | --- | --- | --- |"]
    for r in report["results"]:
        v, p, w = r["verbs"], r["probe"], r["review"]
        lines.append(f"| {r['scenario']} | {v.get('p50_ms')} / {v.get('p99_ms')} ({v['failures']}) | "
                     f"{p.get('p99_ms')} / {p.get('max_ms')} ({p['failures']}) | "
                     f"{w.get('p99_ms')} / {w.get('max_ms')} ({w['failures']}) | "
                     f"{r['rss_base_mb']} → {r['rss_peak_mb']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("attacks", __doc__, whole_doc=True, seconds=20.0, server_arg=[],
                            out=REPO / "perf" / "results" / "attacks.json")
    parser.add_argument("--only", action="append", default=[], choices=list(SCENARIOS))
    ns = parser.parse_args(argv)
    report = run(ns.seconds, ns.only, ns.server_arg)
    write_result(ns.out, report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
