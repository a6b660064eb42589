"""The ceiling of extender mode: a front for `extender serve` that answers kube-scheduler
from remembered bytes, so the extender's answers cost (almost) no CPU.

    python -m perf.replay --listen PORT --upstream PORT [--refresh 50]

Why: in extender mode kube-scheduler still encodes every feasible node's name, sends it
twice a pod, decodes the answers and runs its remaining filters on every node. How fast
kube-scheduler can schedule when the extender's own work is free bounds what any
extender can reach through the protocol on this machine; `perf.scheduler_e2e
--modes in-tree,extender,replay` measures it beside the other two modes.

What it does: a `POST /scheduler/<verb>` is keyed by verb and workload (the pod's name
without its index: the first `"name"` of the body, which kube-scheduler encodes first).
The first request of a key, and every `--refresh`-th after it, goes to the real
extender and its answer's bytes are kept; the others get the kept bytes at once, with
the body read but never parsed. A kept answer is the real answer for an earlier pod of
the same workload: the same size, the same names, though not always the right scores or
nodes for this pod (placements are not checked in this mode). Refreshing keeps a kept
filter answer inside the nodes kube-scheduler still sends (it rejects an answer naming a
node it did not send). Everything else (and `bind`: the mode's kube-scheduler binds
itself) is forwarded. One thread per connection; kube-scheduler keeps its connection.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import socket
import threading

POD_NAME = re.compile(rb'"name" *: *"([^"]*?)-?[0-9]*"')
HEAD_END = b"\r\n\r\n"


def answer(status: int, body: bytes) -> bytes:
    reason = http.client.responses.get(status, "")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class Replay:
    """The kept answers, and the connection (one per thread) to the real extender."""

    def __init__(self, upstream: int, refresh: int) -> None:
        self.upstream, self.refresh = upstream, max(1, refresh)
        self.kept: dict[tuple[bytes, bytes], tuple[int, bytes]] = {}
        self.seen: dict[tuple[bytes, bytes], int] = {}
        self.lock = threading.Lock()
        self.local = threading.local()
        self.forwarded = self.replayed = 0

    def forward(self, path: bytes, body: bytes) -> tuple[int, bytes]:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        try:
            conn.request("POST", path.decode(), body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self.local.conn = None
            raise

    def handle(self, path: bytes, body: bytes) -> tuple[int, bytes]:
        verb = path.rsplit(b"/", 1)[-1]
        m = POD_NAME.search(body, 0, 4096)
        if verb not in (b"filter", b"prioritize") or m is None:
            return self.forward(path, body)
        key = (verb, m.group(1))
        with self.lock:
            n = self.seen.get(key, 0)
            self.seen[key] = n + 1
            kept = self.kept.get(key) if n % self.refresh else None
        if kept is not None:
            self.replayed += 1
            return kept
        status, data = self.forward(path, body)
        if status == 200:
            with self.lock:
                self.kept[key] = (status, data)
        self.forwarded += 1
        return status, data


def serve_connection(replay: Replay, sock: socket.socket) -> None:
    buf = b""
    with sock:
        while True:
            while HEAD_END not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, buf = buf.split(HEAD_END, 1)
            lines = head.split(b"\r\n")
            path = lines[0].split(b" ")[1]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buf) < length:
                chunk = sock.recv(max(65536, length - len(buf)))
                if not chunk:
                    return
                buf += chunk
            body, buf = buf[:length], buf[length:]
            try:
                status, data = replay.handle(path, body)
            except Exception as exc:  # the upstream failed: say so, keep the connection
                status, data = 502, json.dumps({"Error": f"replay: {type(exc).__name__}: {exc}"}).encode()
            sock.sendall(answer(status, data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perf.replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--upstream", type=int, required=True, help="port of `extender serve` on 127.0.0.1")
    parser.add_argument("--refresh", type=int, default=50, help="ask the extender again every N requests of a key")
    ns = parser.parse_args(argv)
    server = socket.create_server(("127.0.0.1", ns.listen))
    print(f"replaying on 127.0.0.1:{ns.listen} for 127.0.0.1:{ns.upstream}", flush=True)
    serve(Replay(ns.upstream, ns.refresh), server)
    return 0


def serve(replay: Replay, server: socket.socket) -> None:
    """Accept connections on `server` until it is closed, each in a thread of its own."""
    while True:
        try:
            sock, _ = server.accept()
        except OSError:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve_connection, args=(replay, sock), daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main())
