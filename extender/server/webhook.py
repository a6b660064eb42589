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
an event loop and two route threads in each gunicorn worker (so its reviews are in that
worker's `/metrics`), TLS per connection from a `ReloadingContext` (so a rotated
certificate is used from the next connection on). Handshake, head and body of a review
share one deadline (`REQUEST_TIMEOUT`); a connection never holds a thread while it
waits, so silent or slow clients cannot lock reviews out.

Body limit (`MAX_REVIEW_BYTES`, 8 MiB): etcd stores no object over 1.5 MiB (its
request limit; kube-apiserver itself refuses write bodies over 3 MiB,
`MaxRequestBodyBytes`), about 3 MiB once written as JSON; an UPDATE review carries two
objects (`object`, `oldObject`) and a small envelope: under 8 MiB. A larger review is of
an object that cannot be stored anyway; it is answered 413 before its body is read.
Its bytes, and what they become once parsed, count in the webhook's own in-flight
budget (`WEBHOOK_LIMIT`, `extender.server.inflight_bytes`): never the verbs'.

Work bounded per review, so that no client can hold the webhook: a review has `ADMISSION_DEADLINE` seconds from its
arrival (the manifests' `timeoutSeconds` is 2: the API server gives up first and applies
its `failurePolicy`), stops at the next check once its client has closed the connection
(`extender.request.deadline`), compiles at most `REVIEW_COMPILE_BYTES` of new CEL
(`extender.validation.rules`) and holds no lock the verbs wait for (each thread parses CEL
with its own parser). Reviews run on two pool
threads; one that needs more than a little compiling moves to a lane of its own
(`extender.request.lane`, one thread), so an ordinary review never queues behind compiles.
A review past its deadline is answered 503: the API server then applies the webhook's
`failurePolicy`, as it would had the webhook not answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

from extender import metrics
from extender.api import expansion
from extender.features import FeatureGates
from extender.request import deadline, lane
from extender.schedconfig import SchedulerConfiguration
from extender.server.http1 import JSON
from extender.server.inflight_bytes import SMALL_REQUEST, WEBHOOK_LIMIT, InflightBytes
from extender.server.listener import Listener, PostRoute, Route, Routes
from extender.server.tls import ReloadingContext, client_policy
from extender.state import gcfreeze
from extender.validation.field import aggregate
from extender.validation.rules import admission, compile_budget, configure_slow_expressions
from extender.validation.workloads import (
    CHECKED_KINDS,
    PERSISTENT_VOLUME,
    check_object,
    pod_template,
    ratcheted_gates,
)

log = logging.getLogger("extender.webhook")

API_VERSION = "admission.k8s.io/v1"
# seconds for the TLS handshake, head and body of a review together (the API server
# waits `timeoutSeconds`, at most 30; the manifests set 5), and again for the answer
REQUEST_TIMEOUT = 10.0
MAX_CONNECTIONS = 1024  # open connections (waiting in the poller, no thread each)
MAX_REVIEW_BYTES = 8 << 20  # see the module docstring
MAX_WARNING_CHARS = 512
VALIDATE = "/validate"  # the route, and the `webhook` label of its metrics
ADMISSION_DEADLINE = 4.0  # seconds from a review's arrival (see the module docstring)
POOL_THREADS = 2  # reviews; those compiling more move to one thread of their own


class BadReview(ValueError):
    """Not an AdmissionReview v1: answered 400."""


def _mapping_at(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """`obj[key]` when it is a mapping, else an empty one (a malformed part reads as absent)."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping_at(_mapping_at(obj, "metadata"), "annotations")


def _channel(obj: Mapping[str, Any] | None, kind: str, prefix: str) -> tuple:
    """What the validator reads from an object: our annotations and the tolerations."""
    if not isinstance(obj, Mapping):
        return ()
    if kind == PERSISTENT_VOLUME:
        return (_annotations(obj).get(f"{prefix}/node-affinity"),
                orjson.dumps(_mapping_at(obj, "spec").get("nodeAffinity")))
    found = pod_template({**obj, "kind": kind})
    if found is None:
        return ()
    template = found[0]
    annotations = _annotations(template)
    names = (f"{prefix}/tolerations", f"{prefix}/node-affinity")
    return (tuple(annotations.get(n) for n in names),
            orjson.dumps(_mapping_at(template, "spec").get("tolerations")))


def _request(body: bytes) -> Mapping[str, Any]:
    expansion.account(body)
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


def review(body: bytes, prefix: str, gates: FeatureGates, profiles: SchedulerConfiguration | None = None
           ) -> dict[str, Any]:
    """The AdmissionReview response for a request body; raises BadReview. `profiles`
    (`--scheduler-config`): warnings by the pods' own profile (`check_object`)."""
    request = _request(body)
    kind_info = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    kind = str(kind_info.get("kind") or "")
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    checked, gates = _what_to_check(request, kind, prefix, gates)
    if checked:
        with admission(), compile_budget():
            result = check_object({**request["object"], "kind": kind}, prefix, gates, profiles)
        _verdict(response, result, kind, request)
        _record(request, kind, result, response)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _what_to_check(request: Mapping[str, Any], kind: str, prefix: str,
                   gates: FeatureGates) -> tuple[bool, FeatureGates]:
    """Whether the object is checked, and under which gates: a create or an update of a
    checked kind, not of a subresource; an update only when what the validator reads
    changed, with the gates ratcheted to what the old object already used."""
    operation = request.get("operation")
    obj = request.get("object")
    checked = (kind in CHECKED_KINDS and operation in ("CREATE", "UPDATE") and isinstance(obj, dict)
               and not request.get("subResource"))
    if checked and operation == "UPDATE":
        checked = _channel(obj, kind, prefix) != _channel(request.get("oldObject"), kind, prefix)
        gates = ratcheted_gates(request.get("oldObject"), kind, prefix, gates)
    return checked, gates


def _verdict(response: dict[str, Any], result: Any, kind: str, request: Mapping[str, Any]) -> None:
    """The check's errors as a 422 denial, its warnings as the response's warnings."""
    if result.errors:
        name = result.name or str(request.get("name") or "")
        response["allowed"] = False
        response["status"] = {"code": 422, "reason": "Invalid",
                              "message": f'{kind} "{name}" is invalid: {aggregate(result.errors)}'}
    if result.warnings:
        response["warnings"] = [w[:MAX_WARNING_CHARS] for w in result.warnings]


def _record(request: Mapping[str, Any], kind: str, result: Any, response: dict[str, Any]) -> None:
    """A checked review's metric and log line."""
    operation = request.get("operation")
    metrics.ADMISSION_REVIEWS_TOTAL.labels(kind, str(operation),
                                          str(response["allowed"]).lower()).inc()
    log.info("admission review", extra={
        "uid": request["uid"], "kind": kind, "operation": operation, "object": result.name,
        "namespace": str(request.get("namespace") or ""), "allowed": response["allowed"],
        "errors": len(result.errors)})


# --- transport ----------------------------------------------------------------------


def validate_route(prefix: str, gates: FeatureGates, seconds: float = ADMISSION_DEADLINE,
                   profiles: SchedulerConfiguration | None = None) -> PostRoute:
    """`POST /validate`: a review within `seconds` of its arrival (503 past it)."""
    requests, latency, in_flight = (metrics.WEBHOOK_REQUESTS_TOTAL, metrics.WEBHOOK_LATENCY,
                                    metrics.WEBHOOK_IN_FLIGHT.labels(VALIDATE))

    def reviewed(body: bytes) -> bytes:
        with deadline.request_deadline(seconds):
            if len(body) > SMALL_REQUEST:  # no full GC passes over its objects (see verbs.answer)
                with gcfreeze.collector_paused():
                    return orjson.dumps(review(body, prefix, gates, profiles))
            return orjson.dumps(review(body, prefix, gates, profiles))

    def answer(body: bytes) -> tuple[int, str, bytes]:
        try:
            return 200, JSON, reviewed(body)
        except BadReview as exc:
            return 400, JSON, orjson.dumps({"error": str(exc)})
        except deadline.DeadlineExceeded as exc:  # or its client left: nobody reads this
            log.warning("admission review not finished", extra={"error": str(exc)})
            return 503, JSON, orjson.dumps({"error": f"the review was not finished: {exc}"})

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
                     max_body_bytes: int = MAX_REVIEW_BYTES, max_connections: int = MAX_CONNECTIONS,
                     seconds: float = ADMISSION_DEADLINE, profiles: SchedulerConfiguration | None = None,
                     **limits: Any) -> Listener:
    """The webhook's HTTPS listener (not started): `POST /validate`, and `GET /healthz`
    for a probe; the serving certificate is re-read per connection when it changed.
    `limits`: the listener's (`client_check`: `extender.server.tls.ClientPolicy`)."""
    ok: Route = lambda: (200, "text/plain", b"ok")  # noqa: E731 - a one-line route
    limits.setdefault("timeout", REQUEST_TIMEOUT)
    limits.setdefault("budget", InflightBytes(WEBHOOK_LIMIT, name="webhook"))
    routes = Routes({"/healthz": ok, "/readyz": ok}, {VALIDATE: validate_route(prefix, gates, seconds, profiles)},
                    pool=lane.POOL)
    return Listener(listen, app=routes, pools={lane.POOL: POOL_THREADS, lane.EXPENSIVE: 1},
                    max_body_bytes=max_body_bytes, max_connections=max_connections,
                    ssl_context=tls.current, name="webhook-listener", **limits)


def _listener_for(config: Any) -> Listener:
    tls = ReloadingContext(config.tls_cert_file, config.tls_private_key_file, config.client_ca_file)
    profiles = config.profiles() if config.scheduler_config else None  # by each pod's own profile
    return webhook_listener(config.webhook_listen, tls, config.annotation_prefix, config.feature_gates,
                            profiles=profiles, client_check=client_policy(config))


def check_webhook(config: Any) -> None:
    """Fail at start-up, before gunicorn forks, on unreadable TLS files or a busy port
    (raises OSError / ssl.SSLError): the listener is built once and closed again."""
    _listener_for(config).close()


def start_webhook(config: Any) -> Listener:
    """Start the webhook listener of `extender serve` (`--webhook-listen` and TLS flags)
    in a gunicorn worker: every worker binds the port (SO_REUSEPORT) and counts its
    reviews in its own metrics, which that worker's `/metrics` exports."""
    configure_slow_expressions(config.request_deadline, config.slow_cel_expressions == "deny")
    listener = _listener_for(config)
    log.info("admission webhook listening", extra={"listen": config.webhook_listen,
                                                    "clientCertificates": bool(config.client_ca_file)})
    return listener.start()
