"""`POST /whatif` on the side listener (`--metrics-listen`, with `--whatif-endpoint`):
the engine on the live state plus a list of changes, before they are made
(`extender.whatif`), for `kubectl extender what-if`.

Admitted like `/drift` (`extender.server.auth`): off by default (404 saying how to turn
it on); a bearer token checked with a TokenReview, of a user a SubjectAccessReview
allows `list` on pods and on nodes cluster-wide (the answer names pods of every
namespace and the nodes' taints and labels); without an API server (file mode) loopback
clients only. Then, in this order, nothing past a refusal being computed:

* 400 for a body that is not a request (`extender.whatif.changes` says what is wrong,
  where: an unknown node or volume, a malformed taint, label or selector);
* 413 past the bounds: more than `MAX_CHANGES` changes, more than `MAX_NODES_TOUCHED`
  nodes touched (what the hypothetical layer's copies cost), more than `MAX_PODS`
  pods asked about; the listener's 1 MiB body limit before that;
* 429 with Retry-After past the token bucket (`--explain-rate`, `--explain-burst`'s
  values, a bucket of its own) or while another what-if is computed (one at a time per
  process: its memory is the touched nodes' copies and one explain at a time);
* 503 while the state has not synced or is stale, and when the CEL work runs past
  `SECONDS` (finished evaluations stay memoised: a retry gets further). Past the same
  budget, pending pods are no longer evaluated and the answer counts them
  (`pending.incomplete`).

Pending pods are listed from the API server with the extender's own credentials
(`spec.nodeName=`, at most `MAX_PENDING`), or read from the cluster file. Never on the
verbs' path, and nothing is written into the state the verbs read.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import orjson

from extender.api import expansion
from extender.engine import Extender
from extender.ratelimit import TokenBucket
from extender.request.deadline import DeadlineExceeded, request_deadline
from extender.server.auth import Access, AuthError, Guard, guard_for
from extender.server.explain_routes import refusal, state_info, with_snapshot
from extender.server.http1 import JSON, Refused, Reply, Request
from extender.state import ClusterSource, FileSource
from extender.state.loader import load_objects
from extender.whatif import MAX_PENDING, TimeLimit, WhatIfError, answer

log = logging.getLogger("extender.whatif")

PATH = "/whatif"
SECONDS = 20.0  # the whole what-if's budget (CEL work past it: 503)
API_TIMEOUT = (3.0, 10.0)
DISABLED = ("the what-if endpoint is off: start the extender with --whatif-endpoint=true "
            "(env EXTENDER_WHATIF_ENDPOINT, config whatifEndpoint: true)")
ACCESS = (Access("list", "pods"), Access("list", "nodes"))

PendingReader = Callable[[], list[dict[str, Any]]]


def api_pending_reader(api_client: Any) -> PendingReader:
    """The pods no node was chosen for yet, from the API server (the extender watches
    pods: it may list them)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def read() -> list[dict[str, Any]]:
        try:
            response = core.list_pod_for_all_namespaces(
                field_selector="spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed", limit=MAX_PENDING,
                _preload_content=False, _request_timeout=API_TIMEOUT)
            try:
                return orjson.loads(response.data).get("items") or []
            finally:
                response.release_conn()
        except Exception as exc:  # unreachable server, timeout, a refusal, an unreadable answer
            raise Refused(502, f"listing the pending pods from the API server: {exc}") from None

    return read


def pending_reader_for(source: ClusterSource) -> PendingReader:
    if source.api_client is not None:
        return api_pending_reader(source.api_client)
    if isinstance(source, FileSource):
        def read() -> list[dict[str, Any]]:
            try:
                return [o for o in load_objects(source.path) if o.get("kind") == "Pod"]
            except ValueError as exc:
                raise Refused(503, f"reading the cluster file: {exc}") from None
        return read
    return list


def _error(status: int, message: str, headers: dict[str, str] | None = None,
           extra: dict[str, Any] | None = None) -> Reply:
    return status, JSON, orjson.dumps({"error": message, **(extra or {})}), dict(headers or {})


class WhatIfRoutes:
    """The side listener's dispatch for `/whatif` (see the module docstring)."""

    def __init__(self, engine: Extender, enabled: bool, tracker: Any = None, rate: float = 1.0, burst: int = 5,
                 seconds: float = SECONDS, guard: Guard | None = None, pending: PendingReader | None = None) -> None:
        self.engine = engine
        self.enabled = enabled
        self.tracker = tracker
        self.bucket = TokenBucket(rate, burst)
        self.seconds = seconds
        self.guard = guard if guard is not None else guard_for(engine.source)
        self.pending = pending if pending is not None else pending_reader_for(engine.source)
        self._busy = threading.Lock()

    @staticmethod
    def takes_body(method: str, path: str) -> bool:
        return method == "POST" and path == PATH

    @staticmethod
    def owns(path: str) -> bool:
        return path == PATH or path.startswith(PATH + "/")

    def __call__(self, request: Request) -> Reply | None:
        if not self.owns(request.path):
            return None
        try:
            return 200, JSON, self.serve(request), {}
        except Refused as exc:
            return _error(exc.status, str(exc), exc.headers, exc.extra)
        except AuthError as exc:
            return _error(exc.status, str(exc), exc.headers)
        except Exception:  # a bug: logged, answered as one, never a traceback
            log.exception("the what-if failed")
            return _error(500, "the what-if failed: see the extender's log")

    def serve(self, request: Request) -> bytes:
        if not self.enabled:
            raise Refused(404, DISABLED)
        if request.path != PATH:
            raise Refused(404, f"expected {PATH}")
        if request.method != "POST":
            raise Refused(405, f"use POST {PATH} with a JSON request", {"Allow": "POST"})
        user = self.guard.authenticate(request.header, request.client)
        for access in ACCESS:
            self.guard.authorize(user, access)
        expansion.account(request.body)
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise Refused(400, f"the body must be a what-if request as JSON: {exc}") from None
        wait = self.bucket.try_take()
        if wait:
            raise Refused(429, f"too many what-ifs: at most {self.bucket.rate:g} per second "
                          f"(burst {self.bucket.burst}); retry in {wait:.1f}s",
                          {"Retry-After": str(max(1, math.ceil(wait)))})
        if not self._busy.acquire(blocking=False):
            raise Refused(429, "another what-if is being computed; retry", {"Retry-After": "1"})
        try:
            return self._answer(body)
        finally:
            self._busy.release()

    def _answer(self, body: Any) -> bytes:
        source = self.engine.source
        info = state_info(source)
        why = refusal(source, info)
        if why is not None:
            raise Refused(503, f"cluster state not synced or stale: {why}", {"Retry-After": "5"}, {"state": info})
        if self.tracker is None:
            raise Refused(503, "the what-if needs the drift report's running pods: it needs a cluster state "
                          "(--kubeconfig, --in-cluster or --cluster)")
        try:
            with request_deadline(self.seconds):
                result = answer(self.engine, self.tracker, body, self.pending(), TimeLimit(self.seconds))
        except WhatIfError as exc:
            raise Refused(exc.status, str(exc)) from None
        except DeadlineExceeded as exc:
            raise Refused(503, f"{exc} (finished evaluations are kept: a retry gets further)",
                          {"Retry-After": "1"}) from None
        result["state"] = with_snapshot(info, source.snapshot())
        return orjson.dumps(result)


class SideRoutes:
    """The side listener's dispatchers, asked in turn (the first that owns a path answers)."""

    def __init__(self, *dispatchers: Any) -> None:
        self.dispatchers = dispatchers

    def takes_body(self, method: str, path: str) -> bool:
        return any(d.takes_body(method, path) for d in self.dispatchers)

    def owns(self, path: str) -> bool:
        return any(d.owns(path) for d in self.dispatchers)

    def __call__(self, request: Request) -> Reply | None:
        for dispatch in self.dispatchers:
            reply = dispatch(request)
            if reply is not None:
                return reply
        return None
