"""Driver 2: the real server (`extender serve`, gunicorn) over loopback HTTP.

The client keeps one HTTP/1.1 keep-alive connection per thread (as kube-scheduler's
Go client does), sets TCP_NODELAY like Go, and sends headers and body in one write
(`Connection`, a minimal client: `http.client` adds ~0.2 ms a call). Any 40 ms
Nagle/delayed-ACK stall left is then the server's, and shows in p99/max, which we
report alongside a stall count.

Request bodies are encoded before timing starts; the prioritize body is built from the
filter response between the two timed requests (kube-scheduler does its own work
there too), so only server round trips are timed.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil

from extender.server.launcher import WORKER
from perf.stats import stalls, summarize
from testing.live import free_port

REPO = Path(__file__).resolve().parent.parent


def extender_bin() -> str:
    """The venv's `extender` script next to the running interpreter."""
    candidate = Path(sys.executable).parent / "extender"
    return str(candidate) if candidate.exists() else "extender"


@dataclass
class Server:
    """`extender serve` (or, with `noop=True`, the do-nothing app) as a subprocess on
    127.0.0.1."""

    cluster: Path
    log_path: Path
    workers: int = 1
    threads: int = 4
    noop: bool = False  # perf._noop_app instead of the extender: the HTTP floor
    # The floor runs the product's own stack: gunicorn with the extender's worker.
    noop_target: str = "perf._noop_app:app"
    port: int = 0
    proc: subprocess.Popen | None = None
    cold_start_s: float | None = None

    def command(self) -> list[str]:
        if self.noop:
            return [sys.executable, "-m", "gunicorn", self.noop_target, "-k", WORKER,
                    "-w", str(self.workers),
                    "-b", f"127.0.0.1:{self.port}", "--log-level", "warning"]
        return [extender_bin(), "serve", "--cluster", str(self.cluster),
                "--listen", f"127.0.0.1:{self.port}", "--workers", str(self.workers),
                "--threads", str(self.threads), "--log-level", "warning", "--reload-interval", "0",
                # never binds: no in-flight waits (file mode switches them off too)
                "--inflight-wait", "0",
                "--metrics-listen", f"127.0.0.1:{free_port()}"]  # loopback only, never 8889

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait for /readyz 200; returns cold start (spawn to ready) seconds."""
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # the server makes its own
        started = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     cwd=REPO, env=env)
        deadline = started + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
            if _ready(self.port) and self.owns_port():
                self.cold_start_s = time.perf_counter() - started
                return self.cold_start_s
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout}s: {self.log_tail()}")

    def owns_port(self) -> bool:
        """True if our process tree holds the listening socket. Guards against a
        stranger on a recycled port answering /readyz (other test servers run on this
        machine); if the check itself is not permitted, trust /readyz."""
        if self.proc is None:
            return False
        try:
            master = psutil.Process(self.proc.pid)
            procs = [master, *master.children(recursive=True)]
            for proc in procs:
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr.port == self.port:
                        return True
        except (psutil.AccessDenied, AttributeError):
            return True
        except psutil.Error:
            return False
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of the gunicorn master and its workers, MB (10^6 bytes)."""
        if self.proc is None:
            return {}
        try:
            master = psutil.Process(self.proc.pid)
            workers = master.children(recursive=True)
            m = master.memory_info().rss / 1e6
            w = [c.memory_info().rss / 1e6 for c in workers]
        except psutil.Error:
            return {}
        return {"master_mb": round(m, 1), "worker_mb": round(max(w, default=0.0), 1),
                "total_mb": round(m + sum(w), 1)}

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def _ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        conn.request("GET", "/readyz")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


class Connection:
    """A minimal keep-alive HTTP/1.1 client: one prebuilt write per request (request
    line, headers and body), TCP_NODELAY as Go sets it, the response read by its
    Content-Length. `http.client` costs ~0.2 ms more per call on this machine (header
    parsing through `email`), client time that is not the server's and that
    kube-scheduler's Go client does not spend."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.sock.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(1 << 18)
            if not chunk:
                raise ConnectionError(f"POST {path}: connection closed before the response headers")
            data += chunk
        header, _, rest = data.partition(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = next((int(line.split(b":", 1)[1]) for line in lines[1:]
                       if line.lower().startswith(b"content-length:")), None)
        if length is None:
            raise ConnectionError(f"POST {path}: response without Content-Length")
        parts, got = [rest], len(rest)
        while got < length:
            chunk = self.sock.recv(length - got)
            if not chunk:
                raise ConnectionError(f"POST {path}: connection closed mid-body")
            parts.append(chunk)
            got += len(chunk)
        return status, b"".join(parts)

    def close(self) -> None:
        self.sock.close()


def connect(port: int) -> Connection:
    return Connection(port)


def post(conn: Connection, path: str, body: bytes) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    status, data = conn.post(path, body)
    elapsed = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"POST {path}: HTTP {status}: {data[:200]!r}")
    return elapsed, data


def handler_totals(port: int) -> dict[str, tuple[float, float]]:
    """verb -> (seconds, requests) from the server's own
    `extender_http_request_duration_seconds` (decode -> engine -> encode), so client
    latency can be split into handler time and everything around it (the listener,
    the socket)."""
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "extender_http_request_duration_seconds":
            continue
        for sample in family.samples:
            verb = sample.labels.get("verb", "")
            slot = out.setdefault(verb, [0.0, 0.0])
            if sample.name.endswith("_sum"):
                slot[0] += sample.value
            elif sample.name.endswith("_count"):
                slot[1] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def handler_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
                  ) -> dict[str, float]:
    """Mean server-side handler ms per verb between two `handler_totals` readings."""
    out = {}
    for verb, (total, count) in after.items():
        b_total, b_count = before.get(verb, (0.0, 0.0))
        if count > b_count:
            out[verb] = round((total - b_total) / (count - b_count) * 1000, 3)
    return out


@dataclass
class Request:
    """A pre-encoded filter request plus what is needed to build its prioritize body."""

    pod_json: bytes
    filter_body: bytes


def names_requests(pods: list[dict[str, Any]], names: list[str]) -> list[Request]:
    names_json = orjson.dumps(names)
    out = []
    for pod in pods:
        pj = orjson.dumps(pod)
        out.append(Request(pj, b'{"Pod":' + pj + b',"Nodes":null,"NodeNames":' + names_json + b"}"))
    return out


def nodes_requests(pods: list[dict[str, Any]], node_dicts: list[dict[str, Any]]) -> list[Request]:
    nodes_json = orjson.dumps({"metadata": {}, "items": node_dicts})
    out = []
    for pod in pods:
        pj = orjson.dumps(pod)
        out.append(Request(pj, b'{"Pod":' + pj + b',"Nodes":' + nodes_json + b',"NodeNames":null}'))
    return out


def _pair(conn: Connection, req: Request, mode: str
          ) -> tuple[float, float | None, dict[str, Any]]:
    f_s, data = post(conn, "/filter", req.filter_body)
    result = orjson.loads(data)
    if mode == "names":
        feasible = result.get("NodeNames") or []
        if len(feasible) < 2:
            return f_s, None, result
        body = (b'{"Pod":' + req.pod_json + b',"Nodes":null,"NodeNames":'
                + orjson.dumps(feasible) + b"}")
    else:
        items = (result.get("Nodes") or {}).get("items") or []
        if len(items) < 2:
            return f_s, None, result
        body = (b'{"Pod":' + req.pod_json + b',"Nodes":'
                + orjson.dumps({"metadata": {}, "items": items}) + b',"NodeNames":null}')
    p_s, _ = post(conn, "/prioritize", body)
    return f_s, p_s, result


def run_http(port: int, requests: list[Request], mode: str, concurrency: int = 1,
             warmup: int | list[Request] = 3) -> dict[str, Any]:
    """Send filter+prioritize pairs; `concurrency` threads share the request list.

    `warmup`: how many of `requests` to send first, untimed, or a list of warm-up
    requests of their own (e.g. the first pod of every shape), whose latencies are
    reported apart as `warmup_pair`: the cost of a shape the server has not seen."""
    conn = connect(port)
    warm = requests[:warmup] if isinstance(warmup, int) else warmup
    lat_warm = []
    for req in warm:
        f_s, p_s, _ = _pair(conn, req, mode)
        lat_warm.append(f_s + (p_s or 0.0))
    conn.close()
    lat_f: list[float] = []
    lat_p: list[float] = []
    lat_pair: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []

    def worker(chunk: list[Request]) -> None:
        c = connect(port)
        try:
            for req in chunk:
                f_s, p_s, _ = _pair(c, req, mode)
                with lock:
                    lat_f.append(f_s)
                    if p_s is not None:
                        lat_p.append(p_s)
                    lat_pair.append(f_s + (p_s or 0.0))
        except Exception as exc:  # report, do not hang the run
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            c.close()

    chunks = [requests[i::concurrency] for i in range(concurrency)]
    threads = [threading.Thread(target=worker, args=(ch,)) for ch in chunks]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if errors and len(lat_pair) < len(requests) // 2:
        raise ConnectionError(f"{len(errors)} client thread(s) failed: {errors[0]}")
    return {
        "mode": mode,
        "concurrency": concurrency,
        "filter": summarize(lat_f),
        "prioritize": summarize(lat_p),
        "pair": summarize(lat_pair),
        "warmup_pair": summarize(lat_warm),
        "pairs_per_s": round(len(lat_pair) / wall, 1) if wall > 0 else None,
        "stalls": {"filter": stalls(lat_f), "prioritize": stalls(lat_p)},
        "errors": errors[:5],
        "_samples": {"filter": lat_f, "prioritize": lat_p, "pair": lat_pair},
    }
