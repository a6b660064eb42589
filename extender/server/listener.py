"""A small HTTP/1.1 listener on its own threads, for a few fixed routes.

Two users: `--metrics-listen` (GET routes, and `/explain` through `dispatch` when
`--explain-endpoint` is on) and the admission webhook (`--webhook-listen`, a POST route
over HTTPS whose certificate is re-read when it rotates).

`/healthz`, `/readyz` and `/metrics` are served here (`--metrics-listen`) as well as on
the main listener: here they never queue behind verb work, because nothing else runs on
these threads and no request reaches the gunicorn event loop or its pool. Answers are
computed by plain callables; the Python work of a probe is a few microseconds, so even
with verbs holding the GIL a probe waits at most a few of the interpreter's 5 ms switch
intervals.

Bounded by design: at most `max_connections` connections are served at once (others are
closed on accept), each read and write has `timeout` seconds, and only the request head
is read for GET routes; a POST body needs a Content-Length of at most `max_body_bytes`
(411 / 413 otherwise). With SO_REUSEPORT every gunicorn worker binds the same address,
so any live worker answers. An `ssl.SSLContext` (or a callable returning the current
one, for certificate rotation) turns it into HTTPS.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("extender.http")

# path -> () -> (status, content type, body)
Route = Callable[[], tuple[int, str, bytes]]
# path -> (request body) -> (status, content type, body)
PostRoute = Callable[[bytes], tuple[int, str, bytes]]
SSLContexts = ssl.SSLContext | Callable[[], ssl.SSLContext] | None
JSON = "application/json"
# (status, content type, body, extra headers)
Reply = tuple[int, str, bytes, dict[str, str]]
# Routes a fixed table cannot name (path parameters, query strings): (method, request
# target as sent, body or None for GET) -> Reply, or None when the path is not its own.
# Each owner keeps its routes in its own module (`extender.server.explain_routes`).
Dispatch = Callable[[str, str, bytes | None], Reply | None]


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int,
                 ssl_context: SSLContexts, name: str) -> None:
        self.name = name
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.slots = threading.BoundedSemaphore(max_connections)
        self.ssl_context = ssl_context
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if hasattr(socket, "SO_REUSEPORT"):  # every gunicorn worker binds the same port
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("connection refused: too many open connections",
                        extra={"listener": self.name, "client": str(client_address)})
            self.shutdown_request(request)  # over the connection cap: closed at once
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            if self.ssl_context is not None:
                request.settimeout(self.RequestHandlerClass.timeout)
                context = self.ssl_context() if callable(self.ssl_context) else self.ssl_context
                request = context.wrap_socket(request, server_side=True)
            super().process_request_thread(request, client_address)
        except (OSError, ssl.SSLError):
            self.shutdown_request(request)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address) -> None:
        log.debug("listener connection error", exc_info=True)


class Listener:
    """`routes` (GET) and `post_routes` served on `address` (HOST:PORT) by daemon
    threads; `start`, `stop`."""

    def __init__(self, address: str, routes: dict[str, Route], *,
                 post_routes: dict[str, PostRoute] | None = None, max_body_bytes: int = 1 << 20,
                 timeout: float = 5.0, max_connections: int = 64, ssl_context: SSLContexts = None,
                 name: str = "metrics-listener", dispatch: Dispatch | None = None) -> None:
        table = dict(routes)
        posts = dict(post_routes or {})

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus and kubelet use
            server_version = "extender"
            sys_version = ""

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.partition("?")[0]
                route = table.get(path)
                if route is None:
                    if self._dispatched("GET", None):
                        return
                    # 405 for a POST-only path (`GET /validate`)
                    self._send(405 if path in posts else 404, JSON, b'{"error":"method not allowed"}'
                               if path in posts else b'{"error":"not found"}')
                    return
                try:
                    code, kind, body = route()
                except Exception:
                    log.exception("listener route failed", extra={"path": self.path})
                    code, kind, body = 500, "application/json", b'{"error":"internal error"}'
                self._send(code, kind, body)

            def do_HEAD(self) -> None:  # noqa: N802
                self.do_GET()

            def do_POST(self) -> None:  # noqa: N802
                length = self.headers.get("Content-Length")
                if length is None or not length.isdigit():
                    self.close_connection = True
                    self._send(411, JSON, b'{"error":"a Content-Length header is required"}')
                    return
                if int(length) > max_body_bytes:
                    self.close_connection = True  # the body is never read
                    self._send(413, JSON, b'{"error":"request body exceeds the limit of %d bytes"}'
                               % max_body_bytes)
                    return
                body = self.rfile.read(int(length))
                path = self.path.partition("?")[0]
                route = posts.get(path)
                if route is None and self._dispatched("POST", body):
                    return
                if route is None:  # 405 for a GET-only path, as the main listener answers
                    self._send(405 if path in table else 404, JSON,
                               b'{"error":"method not allowed"}' if path in table else b'{"error":"not found"}')
                    return
                try:
                    code, kind, payload = route(body)
                except Exception:
                    log.exception("listener route failed", extra={"path": self.path})
                    code, kind, payload = 500, JSON, b'{"error":"internal error"}'
                self._send(code, kind, payload)

            def _dispatched(self, method: str, body: bytes | None) -> bool:
                """Offer the request to `dispatch`; True when it answered."""
                if dispatch is None:
                    return False
                try:
                    reply = dispatch(method, self.path, body)
                except Exception:
                    log.exception("listener route failed", extra={"path": self.path})
                    reply = 500, JSON, b'{"error":"internal error"}', {}
                if reply is None:
                    return False
                self._send(*reply)
                return True

            def _send(self, code: int, kind: str, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                pass  # probes every few seconds: no access log

        Handler.timeout = timeout
        self.name = name
        self.server = _Server(split_address(address), Handler, max_connections, ssl_context, name)
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> Listener:
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.5},
                                       name=self.name, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
