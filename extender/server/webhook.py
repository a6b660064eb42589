"""Validating admission webhook: `POST /validate`, AdmissionReview `admission.k8s.io/v1`.

`review(body, prefix, gates)` is the pure part: the validator of `extender.validation`
applied to Pods (CREATE; UPDATE only when the annotation channel changed, so existing
pods are never blocked by a later rule) and to the pod templates of Deployments,
StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs and CronJobs. A
denial lists every error in `status.message`; warnings go to `response.warnings`
(kubectl prints them). A body that is not an AdmissionReview v1 is answered 400.

`SideListener` is the HTTPS transport: a small threaded stdlib server in a background
thread of the serving process, TLS per connection from a `ReloadingContext` (so a
rotated certificate is used from the next connection on), handshake and every read
under a timeout in the connection's own thread, never on the accept loop.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from extender.features import FeatureGates
from extender.server.tls import ReloadingContext
from extender.validation.field import aggregate
from extender.validation.workloads import TEMPLATE_PATHS, check_object, pod_template

log = logging.getLogger("extender.webhook")

API_VERSION = "admission.k8s.io/v1"
CONNECTION_TIMEOUT = 10.0  # seconds for the TLS handshake and each read
MAX_CONNECTIONS = 64  # open connections served at once (one thread each)
MAX_WARNING_CHARS = 512


class BadReview(ValueError):
    """Not an AdmissionReview v1: answered 400."""


def _channel(obj: Mapping[str, Any] | None, kind: str, prefix: str) -> tuple:
    """What the validator reads from an object: our annotations and the tolerations."""
    if not isinstance(obj, Mapping):
        return ()
    found = pod_template({**obj, "kind": kind})
    if found is None:
        return ()
    template = found[0]
    meta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    spec = template.get("spec") if isinstance(template.get("spec"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    names = (f"{prefix}/tolerations", f"{prefix}/node-affinity")
    return (tuple(annotations.get(n) for n in names), orjson.dumps(spec.get("tolerations")))


def _request(body: bytes) -> Mapping[str, Any]:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"request body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview("expected an AdmissionReview object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(f"expected apiVersion {API_VERSION} and kind AdmissionReview, got "
                        f"{review.get('apiVersion')!r} / {review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview("request.uid: required")
    return request


def review(body: bytes, prefix: str, gates: FeatureGates) -> dict[str, Any]:
    """The AdmissionReview response for a request body; raises BadReview."""
    request = _request(body)
    kind_info = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    kind = str(kind_info.get("kind") or "")
    operation = request.get("operation")
    obj = request.get("object")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    checked = (kind in TEMPLATE_PATHS and operation in ("CREATE", "UPDATE") and isinstance(obj, dict)
               and not request.get("subResource"))
    if checked and operation == "UPDATE":
        checked = _channel(obj, kind, prefix) != _channel(request.get("oldObject"), kind, prefix)
    if checked:
        result = check_object({**obj, "kind": kind}, prefix, gates)
        if result.errors:
            name = result.name or str(request.get("name") or "")
            response["allowed"] = False
            response["status"] = {"code": 422, "reason": "Invalid",
                                  "message": f'{kind} "{name}" is invalid: {aggregate(result.errors)}'}
        if result.warnings:
            response["warnings"] = [w[:MAX_WARNING_CHARS] for w in result.warnings]
        log.info("admission review", extra={
            "uid": request["uid"], "kind": kind, "operation": operation, "object": result.name,
            "namespace": str(request.get("namespace") or ""), "allowed": response["allowed"],
            "errors": len(result.errors)})
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


# --- transport ----------------------------------------------------------------------

Route = Callable[[bytes], tuple[int, bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: SideListener
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("webhook http", extra={"line": format % args})

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path in ("/healthz", "/readyz"):
            self._send(200, b"ok", "text/plain")
        else:
            self._send(404, orjson.dumps({"error": f"no route for GET {self.path}"}))

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        route = self.server.routes.get(self.path.split("?", 1)[0])
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send(411, orjson.dumps({"error": "a Content-Length header is required"}))
            return
        size = int(length)
        if size > self.server.max_body_bytes:
            self.close_connection = True
            self._send(413, orjson.dumps({"error": f"request body exceeds the limit of "
                                                   f"{self.server.max_body_bytes} bytes"}))
            return
        body = self.rfile.read(size)
        if route is None:
            self._send(404, orjson.dumps({"error": f"no route for POST {self.path}"}))
            return
        code, payload = route(body)
        self._send(code, payload)


class SideListener(ThreadingHTTPServer):
    """A threaded HTTPS (or, without TLS, HTTP) listener for a few POST routes, run in
    a daemon thread. Small and self-contained so that it can host other side routes."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], routes: dict[str, Route], tls: ReloadingContext | None,
                 max_body_bytes: int = 16 << 20, max_connections: int = MAX_CONNECTIONS) -> None:
        self.routes = routes
        self.tls = tls
        self.max_body_bytes = max_body_bytes
        self._slots = threading.BoundedSemaphore(max_connections)
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.settimeout(CONNECTION_TIMEOUT)
        if self.tls is not None:  # the handshake happens on first read, in the handler thread
            sock = self.tls.current().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, at most `max_connections` at once: beyond that a
        new connection is closed at once (the API server retries) instead of piling up."""
        if not self._slots.acquire(blocking=False):
            log.warning("webhook connection refused: too many open connections",
                        extra={"client": str(client_address)})
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("webhook connection failed", exc_info=True, extra={"client": str(client_address)})

    def start(self) -> SideListener:
        self._thread = threading.Thread(target=self.serve_forever, name="webhook-listener", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def validate_route(prefix: str, gates: FeatureGates) -> Route:
    def route(body: bytes) -> tuple[int, bytes]:
        try:
            return 200, orjson.dumps(review(body, prefix, gates))
        except BadReview as exc:
            return 400, orjson.dumps({"error": str(exc)})

    return route


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def start_webhook(config: Any) -> SideListener:
    """Start the webhook listener of `extender serve` (`--webhook-listen` and TLS flags)."""
    tls = ReloadingContext(config.tls_cert_file, config.tls_private_key_file, config.client_ca_file)
    listener = SideListener(parse_listen(config.webhook_listen),
                            {"/validate": validate_route(config.annotation_prefix, config.feature_gates)},
                            tls, max_body_bytes=config.max_body_bytes)
    log.info("admission webhook listening", extra={"listen": config.webhook_listen,
                                                    "clientCertificates": bool(config.client_ca_file)})
    return listener.start()
