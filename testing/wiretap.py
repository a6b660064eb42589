"""A recording proxy between kube-scheduler and the extender (the scheduler's
`urlPrefix` points here; every request is forwarded unchanged, the answer returned
unchanged).

It observes the protocol from outside both processes, which the truth needs: the
scheduler binds asynchronously, so the order of binds in the API is not the order of
its decisions. A pod's scheduling cycle calls `filter` once, after the previous cycle
assumed its pod, so the time of the last `filter` call for a pod before its bind is
when it was placed (`decision_times`). The tap also keeps the last `ExtenderArgs.Pod`
the scheduler sent for each pod (`last_pod`): the scheduler's own re-serialization.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import orjson

from testing.apiserver import QuietServer

Key = tuple[str, str]


@dataclass(frozen=True)
class Call:
    verb: str
    pod: Key
    at: float  # time.monotonic() when the request arrived
    seconds: float  # the extender's round trip
    nodes: int  # NodeNames / candidates in the request


class WireTap:
    def __init__(self, upstream_port: int, connect_wait: float = 60.0) -> None:
        self.upstream_port = upstream_port
        self.connect_wait = connect_wait
        self.calls: list[Call] = []
        # (low, high) seconds slept, uniformly, before a `bind` is forwarded: what
        # kube-scheduler's PreBind plugins (volume binding, DRA) add between a pod's
        # filter answer and its bind (perf/inflight_mix.py)
        self.prebind: tuple[float, float] = (0.0, 0.0)
        self.last_pod: dict[Key, dict] = {}
        self._lock = threading.Lock()
        self._httpd = QuietServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="wiretap",
                                        daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> WireTap:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def record(self, verb: str, body: bytes, at: float, seconds: float) -> None:
        try:
            args = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if not isinstance(args, dict):
            return
        args = {k.lower(): v for k, v in args.items()}
        if verb == "bind":
            key = (args.get("podnamespace") or "", args.get("podname") or "")
            nodes = 1
        else:
            pod = args.get("pod") or {}
            md = pod.get("metadata") or {}
            key = (md.get("namespace") or "default", md.get("name") or "")
            nodes = len(args.get("nodenames") or args.get("nodenametometavictims") or [])
            with self._lock:
                self.last_pod[key] = pod
        with self._lock:
            self.calls.append(Call(verb, key, at, seconds, nodes))

    def decision_times(self) -> dict[Key, list[float]]:
        """pod -> the times of its `filter` calls, in order."""
        out: dict[Key, list[float]] = defaultdict(list)
        with self._lock:
            for c in self.calls:
                if c.verb == "filter":
                    out[c.pod].append(c.at)
        return out

    def verbs(self, pod: Key | None = None) -> list[str]:
        with self._lock:
            return [c.verb for c in self.calls if pod is None or c.pod == pod]


def _handler(tap: WireTap) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            at = time.monotonic()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if tap.prebind[1] and self.path.rstrip("/").endswith("/bind"):
                time.sleep(random.uniform(*tap.prebind))
            deadline = at + tap.connect_wait
            while True:
                conn = getattr(self, "_upstream", None)
                if conn is None:
                    conn = self._upstream = http.client.HTTPConnection("127.0.0.1", tap.upstream_port, timeout=30)
                try:
                    conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    status, payload = resp.status, resp.read()
                    break
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self._upstream = None
                    if isinstance(exc, ConnectionRefusedError) and time.monotonic() < deadline:
                        time.sleep(0.05)  # the extender is still starting
                        continue
                    status, payload = 502, f"wiretap: extender unreachable: {exc}".encode()
                    break
            tap.record(self.path.rstrip("/").rsplit("/", 1)[-1], body, at, time.monotonic() - at)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
