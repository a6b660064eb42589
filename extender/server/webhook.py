"""Validating admission webhook: `POST /validate`, AdmissionReview `admission.k8s.io/v1`.

`review(body, prefix, gates)` is the pure part: the validator of `extender.validation`
applied to Pods (CREATE; UPDATE only when the annotation channel changed, so existing
pods are never blocked by a later rule), to the pod templates of Deployments,
StatefulSets, DaemonSets, ReplicaSets, ReplicationControllers, Jobs and CronJobs, and to
PersistentVolumes (their node-affinity annotation; UPDATE likewise only when it or
`spec.nodeAffinity` changed). A
denial lists every error in `status.message`; warnings go to `response.warnings`
(kubectl prints them). A body that is not an AdmissionReview v1 is answered 400.

The transport is `extender.server.listener.Listener` (the one `--metrics-listen` uses):
threads of each gunicorn worker (so its reviews are in that worker's `/metrics`), TLS per connection from a `ReloadingContext` (so a
rotated certificate is used from the next connection on), handshake and every read
under a timeout in the connection's own thread, never on the accept loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

from extender import metrics
from extender.features import FeatureGates
from extender.server.listener import JSON, Listener, PostRoute, Route
from extender.server.tls import ReloadingContext
from extender.validation.field import aggregate
from extender.validation.rules import admission, configure_slow_expressions
from extender.validation.workloads import (
    CHECKED_KINDS,
    PERSISTENT_VOLUME,
    check_object,
    pod_template,
    ratcheted_gates,
)

log = logging.getLogger("extender.webhook")

API_VERSION = "admission.k8s.io/v1"
CONNECTION_TIMEOUT = 10.0  # seconds for the TLS handshake and each read
MAX_CONNECTIONS = 64  # open connections served at once (one thread each)
MAX_WARNING_CHARS = 512
VALIDATE = "/validate"  # the route, and the `webhook` label of its metrics


class BadReview(ValueError):
    """Not an AdmissionReview v1: answered 400."""


def _channel(obj: Mapping[str, Any] | None, kind: str, prefix: str) -> tuple:
    """What the validator reads from an object: our annotations and the tolerations."""
    if not isinstance(obj, Mapping):
        return ()
    if kind == PERSISTENT_VOLUME:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        return (annotations.get(f"{prefix}/node-affinity"), orjson.dumps(spec.get("nodeAffinity")))
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
    checked = (kind in CHECKED_KINDS and operation in ("CREATE", "UPDATE") and isinstance(obj, dict)
               and not request.get("subResource"))
    if checked and operation == "UPDATE":
        checked = _channel(obj, kind, prefix) != _channel(request.get("oldObject"), kind, prefix)
        gates = ratcheted_gates(request.get("oldObject"), kind, prefix, gates)
    if checked:
        with admission():
            result = check_object({**obj, "kind": kind}, prefix, gates)
        if result.errors:
            name = result.name or str(request.get("name") or "")
            response["allowed"] = False
            response["status"] = {"code": 422, "reason": "Invalid",
                                  "message": f'{kind} "{name}" is invalid: {aggregate(result.errors)}'}
        if result.warnings:
            response["warnings"] = [w[:MAX_WARNING_CHARS] for w in result.warnings]
        metrics.ADMISSION_REVIEWS_TOTAL.labels(kind, str(operation),
                                              str(response["allowed"]).lower()).inc()
        log.info("admission review", extra={
            "uid": request["uid"], "kind": kind, "operation": operation, "object": result.name,
            "namespace": str(request.get("namespace") or ""), "allowed": response["allowed"],
            "errors": len(result.errors)})
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


# --- transport ----------------------------------------------------------------------


def validate_route(prefix: str, gates: FeatureGates) -> PostRoute:
    requests, latency, in_flight = (metrics.WEBHOOK_REQUESTS_TOTAL, metrics.WEBHOOK_LATENCY,
                                    metrics.WEBHOOK_IN_FLIGHT.labels(VALIDATE))

    def answer(body: bytes) -> tuple[int, str, bytes]:
        try:
            return 200, JSON, orjson.dumps(review(body, prefix, gates))
        except BadReview as exc:
            return 400, JSON, orjson.dumps({"error": str(exc)})

    def route(body: bytes) -> tuple[int, str, bytes]:
        started = time.perf_counter()
        in_flight.inc()
        try:
            status, kind, out = answer(body)
        finally:
            in_flight.dec()
        latency.labels(VALIDATE).observe(time.perf_counter() - started)
        requests.labels(VALIDATE, str(status)).inc()
        return status, kind, out

    return route


def webhook_listener(listen: str, tls: ReloadingContext, prefix: str, gates: FeatureGates,
                     max_body_bytes: int = 16 << 20, max_connections: int = MAX_CONNECTIONS) -> Listener:
    """The webhook's HTTPS listener (not started): `POST /validate`, and `GET /healthz`
    for a probe; the serving certificate is re-read per connection when it changed."""
    ok: Route = lambda: (200, "text/plain", b"ok")  # noqa: E731 - a one-line route
    return Listener(listen, {"/healthz": ok, "/readyz": ok},
                    post_routes={VALIDATE: validate_route(prefix, gates)},
                    max_body_bytes=max_body_bytes, timeout=CONNECTION_TIMEOUT,
                    max_connections=max_connections, ssl_context=tls.current, name="webhook-listener")


def _listener_for(config: Any) -> Listener:
    tls = ReloadingContext(config.tls_cert_file, config.tls_private_key_file, config.client_ca_file)
    return webhook_listener(config.webhook_listen, tls, config.annotation_prefix,
                            config.feature_gates, max_body_bytes=config.max_body_bytes)


def check_webhook(config: Any) -> None:
    """Fail at start-up, before gunicorn forks, on unreadable TLS files or a busy port
    (raises OSError / ssl.SSLError): the listener is built once and closed again."""
    _listener_for(config).server.server_close()


def start_webhook(config: Any) -> Listener:
    """Start the webhook listener of `extender serve` (`--webhook-listen` and TLS flags)
    in a gunicorn worker: every worker binds the port (SO_REUSEPORT) and counts its
    reviews in its own metrics, which that worker's `/metrics` exports."""
    configure_slow_expressions(config.request_deadline, config.slow_cel_expressions == "deny")
    listener = _listener_for(config)
    log.info("admission webhook listening", extra={"listen": config.webhook_listen,
                                                    "clientCertificates": bool(config.client_ca_file)})
    return listener.start()
