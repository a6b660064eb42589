"""The `bind` verb: create the `pods/binding` subresource for kube-scheduler.

With `bindVerb` configured, kube-scheduler's binding cycle calls us instead of its
DefaultBinder (`schedule_one.go` `extendersBinding`, `extender.go` `Bind`), with
`ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`, and treats a non-empty
`ExtenderBindingResult.Error` (or a non-200 answer) as a failed binding: it forgets
the assumed pod and re-queues it. We assume the pod on the node in our own state
*before* the API call (so the next pod's answer already counts it), forget it if the
call fails, and let the watch confirm it (`extender.engine.inflight`).

kube-scheduler waits for our answer only until its `httpTimeout`; its own DefaultBinder
waits for the API however long it takes, keeping the pod assumed (counted) meanwhile.
So the binding runs in the background (`Bindings`) and the verb waits for it only
until what is left of `--request-deadline`, and at most `ANSWER_WITHIN` (a healthy API
server binds in milliseconds; the threads answering `bind` are not held by a slow one):

* the API answered in time: success, or an Error (the call was refused: not applied;
  the assumption is forgotten);
* it has not (a slow API server): the answer is success. The outcome is unknown, which
  is not a failure: the pod stays assumed in kube-scheduler's cache and ours, and the
  binding goes on until it is settled. A call that ends without a verdict (timed out,
  connection lost, 5xx, 409) is settled by a GET of the pod: bound to our node (done),
  bound elsewhere or gone (forgotten; the watch has the truth), or still unbound (the
  write did not land: posted again, with back-off). The watch showing the pod bound or
  deleted settles it too. Only a binding that cannot be settled for `SETTLE_FOR`
  seconds is given up (logged as an error).

API access is the live source's (`--kubeconfig` or `--in-cluster`): the binding is posted
on kept-alive connections of its own (`extender.engine.bindpost`), the settling GET
through the generic client; in file mode the verb answers an Error (there is no API to
bind through). A pod or namespace name the API server would refuse is an Error without a
call: it never becomes part of a path.
"""

from __future__ import annotations

import copy
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import orjson

from extender import metrics
from extender.api.wire import WireError, go_fields
from extender.engine import bindpost
from extender.engine.inflight import InFlight
from extender.matching.labels import is_dns1123_label, is_dns1123_subdomain
from extender.state import ClusterSource

log = logging.getLogger("extender.bind")

ERR_NO_API = "the bind verb needs API access: run in live mode (--kubeconfig or --in-cluster)"
DEFAULT_BIND_SECONDS = 4.0  # with --request-deadline 0: its default, below httpTimeout 5 s
MIN_BIND_SECONDS = 0.05  # less time than this left: answer an Error without calling
# bind verb calls answered at once: kube-scheduler binds in parallel (one goroutine a pod)
BIND_CONNECTIONS = 64
# bindings out with the API at once (threads, and connections kept): a slow API server
# holds each for seconds while kube-scheduler goes on binding
BINDING_THREADS = 256
# a healthy API server binds in milliseconds: one that has not answered in this long is
# slow, and the verb answers without it (the binding goes on; module docstring)
ANSWER_WITHIN = 1.0
# a binding call's own timeout: the API server's default request timeout (--request-timeout
# 1m); past it the outcome is unknown and settled by a GET
CALL_SECONDS = 60.0
SETTLE_FOR = 300.0  # seconds an unsettled binding is retried before it is given up
RETRY = (0.2, 5.0)  # back-off between settling attempts: first, longest
# DNS-1123 names, as the API server validates a pod's name (subdomain) and a namespace
# (label): anything else never reaches a path (`..`, `/`, `?`, spaces, upper case)
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
LABEL = re.compile(_LABEL)


class BindError(RuntimeError):
    """The API server refused the binding (`reached`), or was never reached: this call
    was not applied. The message goes to the scheduler."""

    def __init__(self, message: str, reached: bool = True) -> None:
        super().__init__(message)
        self.reached = reached


class BindUnknown(RuntimeError):
    """The call ended without saying whether the binding was applied (timed out,
    connection lost, 5xx, 409): a GET of the pod settles it."""


# (namespace, name, uid, node, timeout seconds) -> None, or raises BindError / BindUnknown.
# A binder may also have `lookup(namespace, name, uid, timeout) -> node name ("" unbound)
# or None (gone or replaced)`, raising BindUnknown when it cannot tell.
PostBinding = Callable[[str, str, str, str, float], None]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def decode_binding_args(data: Any) -> BindingArgs:
    """`ExtenderBindingArgs` (Go field names, matched as encoding/json does)."""
    if not isinstance(data, dict):
        raise WireError("ExtenderBindingArgs must be a JSON object")
    fields = go_fields(data, ("PodName", "PodNamespace", "PodUID", "Node"))
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = fields.get(name) or ""
        if not isinstance(value, str):
            raise WireError(f"ExtenderBindingArgs.{name} must be a string")
        values[name] = value
    if not values["PodName"] or not values["Node"]:
        raise WireError("ExtenderBindingArgs.PodName and .Node are required")
    namespace = values["PodNamespace"] or "default"
    # the names become the API path (/api/v1/namespaces/NS/pods/NAME/binding): checked
    # as the API server checks them, so `..` or a `/` never reaches another path
    if is_dns1123_subdomain(values["PodName"]):
        raise WireError(f"ExtenderBindingArgs.PodName {values['PodName'][:300]!r} is not a valid pod name "
                        "(a lowercase RFC 1123 subdomain)")
    if not is_dns1123_label(namespace):
        raise WireError(f"ExtenderBindingArgs.PodNamespace {namespace[:100]!r} is not a valid namespace "
                        "(a lowercase RFC 1123 label)")
    return BindingArgs(values["PodName"], namespace, values["PodUID"], values["Node"])


def name_problem(namespace: str, name: str) -> str:
    """Why the API server would refuse these names ("" when it would not): a pod's name
    is a DNS-1123 subdomain (253 characters at most), a namespace a label (63)."""
    if len(namespace) > 63 or not LABEL.fullmatch(namespace):
        return f"invalid namespace {namespace!r}: not a DNS-1123 label"
    if len(name) > 253 or not SUBDOMAIN.fullmatch(name):
        return f"invalid pod name {name!r}: not a DNS-1123 subdomain"
    return ""


def binding_body(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    """The `v1.Binding` kube-scheduler's DefaultBinder posts (UID set: a recreated pod
    of the same name is never bound by mistake)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


class ApiBinder:
    """Posts bindings with the live source's API access and identity (--kubeconfig or
    --in-cluster), on a client of its own: a pool sized for parallel binds (the
    watches' pool holds their streams) and no retries (the deadline is the caller's)."""

    def __init__(self, api_client) -> None:
        from kubernetes import client

        configuration = copy.copy(api_client.configuration)
        configuration.connection_pool_maxsize = BINDING_THREADS
        configuration.retries = False
        self.api = client.CoreV1Api(client.ApiClient(configuration))

    def close(self) -> None:
        """Close the client's connections (tests; the server keeps them for its life)."""
        self.api.api_client.close()

    def __call__(self, namespace: str, name: str, uid: str, node: str,
                 timeout: float = DEFAULT_BIND_SECONDS) -> None:
        from kubernetes.client.exceptions import ApiException

        where = f"binding pod {namespace}/{name} to node {node}"
        problem = name_problem(namespace, name)
        if problem:  # never part of a path
            raise BindError(f"{where}: {problem}")
        try:
            # _preload_content=False: the client's model rejects the API's answer (a Status)
            response = self.api.create_namespaced_pod_binding(
                name, namespace, binding_body(namespace, name, uid, node),
                _preload_content=False, _request_timeout=timeout)
            response.read()  # drained, the connection goes back to the pool
            response.release_conn()
        except ApiException as exc:
            text = f"{where}: {exc.status} {exc.reason}: {(exc.body or b'')[:300]!r}"
            if exc.status == 409 or (exc.status or 0) >= 500:  # already assigned, or the server failed
                raise BindUnknown(text) from None
            raise BindError(text) from None
        except Exception as exc:  # noqa: BLE001 - timed out, unreachable, connection lost
            raise _transport_error(where, exc, timeout) from None

    def lookup(self, namespace: str, name: str, uid: str, timeout: float = DEFAULT_BIND_SECONDS) -> str | None:
        """Where the API has the pod: its node ("" unbound), or None when it is gone or
        is another pod of that name (another UID). BindUnknown when it cannot tell."""
        from kubernetes.client.exceptions import ApiException

        try:
            pod = orjson.loads(self._read_pod(namespace, name, timeout))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise BindUnknown(f"reading pod {namespace}/{name}: {exc.status} {exc.reason}") from None
        except Exception as exc:  # noqa: BLE001 - unreachable, timed out
            raise BindUnknown(f"reading pod {namespace}/{name}: {exc}") from None
        if uid and (pod.get("metadata") or {}).get("uid") not in (None, uid):
            return None
        return (pod.get("spec") or {}).get("nodeName") or ""

    def _read_pod(self, namespace: str, name: str, timeout: float) -> bytes:
        """GET the pod, once more when a pooled connection turns out closed before any
        answer (a server that closed it after a 504 races the pool's liveness check):
        a read is idempotent, and Go's HTTP client retries it the same way."""
        from urllib3.exceptions import ProtocolError

        for attempt in (1, 2):
            try:
                response = self.api.read_namespaced_pod(name, namespace, _preload_content=False,
                                                        _request_timeout=timeout)
                break
            except ProtocolError:
                if attempt == 2:
                    raise
        data = response.data
        response.release_conn()
        return data


def _transport_error(where: str, exc: BaseException, timeout: float) -> RuntimeError:
    """A call that failed below HTTP: not applied if it never reached the server
    (connection refused or not made in time), unknown otherwise."""
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ReadTimeoutError

    if isinstance(exc, (NewConnectionError, ConnectTimeoutError)):
        return BindError(f"{where}: {exc}", reached=False)
    if isinstance(exc, ReadTimeoutError):
        return BindUnknown(f"{where}: no answer from the API server within {timeout:.2f} s")
    return BindUnknown(f"{where}: {exc}")


class LeanBinder:
    """The bind verb's binder (`PostBinding`) posting through a `bindpost.Poster` (kept-alive
    connections of its own, the request pre-formatted); the rare read that settles an
    unknown outcome (`lookup`) stays on the generic client."""

    def __init__(self, api_client: Any) -> None:
        self.poster = bindpost.Poster(api_client.configuration, dict(getattr(api_client, "default_headers", {}) or {}))
        self.generic = ApiBinder(api_client)
        self._told = False

    def close(self) -> None:
        """Close the kept connections (tests; the server keeps them for its life)."""
        self.poster.close()
        self.generic.close()

    def lookup(self, namespace: str, name: str, uid: str, timeout: float = DEFAULT_BIND_SECONDS) -> str | None:
        return self.generic.lookup(namespace, name, uid, timeout)

    def __call__(self, namespace: str, name: str, uid: str, node: str,
                 timeout: float = DEFAULT_BIND_SECONDS) -> None:
        where = f"binding pod {namespace}/{name} to node {node}"
        problem = name_problem(namespace, name)
        if problem:
            raise BindError(f"{where}: {problem}")
        try:
            answer = self.poster.post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                                      orjson.dumps(binding_body(namespace, name, uid, node)), timeout)
        except bindpost.Unsupported as exc:  # the credentials changed kind since the start
            if not self._told:
                self._told = True
                log.warning("posting this binding through the generic kubernetes client", extra={"why": str(exc)})
            return self.generic(namespace, name, uid, node, timeout)
        except bindpost.NotConnected as exc:
            raise BindError(f"{where}: {exc}", reached=False) from None
        except TimeoutError:
            raise BindUnknown(f"{where}: no answer from the API server within {timeout:.2f} s") from None
        except OSError as exc:  # Lost, and whatever else the socket said after sending
            raise BindUnknown(f"{where}: {bindpost.why(exc)}") from None
        status = answer.status
        if status in (200, 201):
            return
        text = f"{where}: {status} {answer.reason}: {answer.body[:300]!r}"
        if status == 409 or status >= 500:  # already assigned, or the server failed
            raise BindUnknown(text)
        raise BindError(text)


def binder_for(source: ClusterSource) -> PostBinding | None:
    """The API binder for a live source (`LeanBinder`; the generic client's `ApiBinder`
    where its configuration asks for what the lean one does not do); None in file mode
    (no API access)."""
    api_client = source.api_client
    if api_client is None:
        return None
    try:
        return LeanBinder(api_client)
    except (bindpost.Unsupported, OSError, ValueError, AttributeError) as exc:  # ssl.SSLError is an OSError
        log.warning("posting bindings through the generic kubernetes client", extra={"why": str(exc)})
        return ApiBinder(api_client)


def _failed(inflight: InFlight, ns: str, name: str, message: str) -> dict[str, str]:
    inflight.forget(ns, name)
    metrics.BINDINGS_TOTAL.labels("error").inc()
    metrics.count_error_answer("bind")
    return {"Error": message}


def refused(inflight: InFlight, args: BindingArgs, message: str) -> dict[str, str]:
    """An Error answer without a binding call (the state cannot vouch for anything)."""
    return _failed(inflight, args.pod_namespace, args.pod_name, message)


@dataclass(frozen=True)
class Outcome:
    """How a binding ended: `bound`, or not (`message` says why)."""

    bound: bool
    message: str = ""


class Bindings:
    """The bind verb's bindings, each run to its outcome on a thread of its own (see the
    module docstring): the verb waits for one only as long as kube-scheduler does."""

    def __init__(self, inflight: InFlight, post: PostBinding | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] | None = None) -> None:
        self.inflight = inflight
        self.post = post
        self.clock = clock
        self._stop = threading.Event()
        self.sleep = sleep or self._stop.wait
        self._pool = _Threads(BINDING_THREADS, "binding")
        self._unsettled = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop retrying (tests; a serving process binds until it exits)."""
        self._stop.set()
        self._pool.shutdown()

    def bind(self, args: BindingArgs, timeout: float) -> dict[str, str]:
        """`ExtenderBindingResult`: assume, bind, answer within `timeout` seconds (what
        is left of the request's deadline) or `ANSWER_WITHIN`, whichever is sooner."""
        ns, name = args.pod_namespace, args.pod_name
        if self.post is None:
            return _failed(self.inflight, ns, name, ERR_NO_API)
        if timeout < MIN_BIND_SECONDS:
            log.warning("no time left to bind before kube-scheduler's httpTimeout",
                        extra={"pod": f"{ns}/{name}", "node": args.node})
            return _failed(self.inflight, ns, name, f"binding pod {ns}/{name}: the request waited past its "
                           "deadline (--request-deadline) before the binding call; not bound")
        assumed = self.inflight.assume(ns, name, args.pod_uid, args.node)
        if not assumed:
            log.info("binding a pod without assuming it (no store, or a pod unknown here)",
                     extra={"pod": f"{ns}/{name}", "node": args.node})
        answered = threading.Event()
        future = self._pool.submit(self._settle, args, answered, assumed)
        try:
            outcome = future.result(timeout=min(timeout, ANSWER_WITHIN))
        except FutureTimeout:
            answered.set()
            if not future.done():  # the API has not said yet: not a failure (module docstring)
                with self._lock:
                    self._unsettled += 1
                    metrics.BINDINGS_UNSETTLED.set(self._unsettled)
                future.add_done_callback(self._settled_late)
                metrics.BINDINGS_TOTAL.labels("pending").inc()
                log.info("the API server has not answered the binding yet; answering success and settling "
                         "it in the background", extra={"pod": f"{ns}/{name}", "node": args.node})
                return {"Error": ""}
            outcome = future.result()
        answered.set()
        if not outcome.bound:
            log.warning("binding failed", extra={"pod": f"{ns}/{name}", "node": args.node, "error": outcome.message})
            return _failed(self.inflight, ns, name, outcome.message)
        metrics.BINDINGS_TOTAL.labels("success").inc()
        return {"Error": ""}

    def _settled_late(self, future) -> None:
        with self._lock:
            self._unsettled -= 1
            metrics.BINDINGS_UNSETTLED.set(self._unsettled)

    def _settle(self, args: BindingArgs, answered: threading.Event, assumed: bool) -> Outcome:
        """Bind and settle (on a pool thread): the outcome, once the API said."""
        ns, name, uid, node = args.pod_namespace, args.pod_name, args.pod_uid, args.node
        started = self.clock()
        delay = RETRY[0]
        unknown = ""
        while True:
            try:
                self.post(ns, name, uid, node, CALL_SECONDS)
                return self._done(args, answered, True)
            except BindError as exc:  # this call was not applied; an earlier one may have been
                if exc.reached or not unknown:
                    return self._done(args, answered, False, str(exc))
            except BindUnknown as exc:
                unknown = str(exc)
            where = self._lookup(ns, name, uid)  # settles what the calls could not say
            if where == node:
                return self._done(args, answered, True)
            if where is None or where:
                why = "the pod is gone" if where is None else f"the pod is bound to node {where}"
                return self._done(args, answered, False, f"binding pod {ns}/{name} to node {node}: {why}")
            if assumed and not self._still_assumed(ns, name):  # the watch showed it meanwhile
                return self._done(args, answered, True)
            if self.clock() - started > SETTLE_FOR:
                return self._done(args, answered, False, f"{unknown}; not settled in {SETTLE_FOR:.0f} s")
            log.info("binding outcome unknown and the pod is not bound; posting it again",
                     extra={"pod": f"{ns}/{name}", "node": node, "error": unknown, "retry_in": round(delay, 2)})
            if self.sleep(delay):
                return Outcome(False, "stopped")
            delay = min(delay * 2, RETRY[1])

    def _lookup(self, ns: str, name: str, uid: str) -> str | None:
        """The pod's node per the API ("" unbound, None gone); "" when the binder cannot
        look (a test double) or the API does not answer: then the binding is posted
        again, and a 409 says the rest."""
        lookup = getattr(self.post, "lookup", None)
        if lookup is None:
            return ""
        try:
            return lookup(ns, name, uid, DEFAULT_BIND_SECONDS)
        except BindUnknown:
            return ""

    def _still_assumed(self, ns: str, name: str) -> bool:
        store = self.inflight.store
        return store is None or (ns, name) in store.assumed()

    def _done(self, args: BindingArgs, answered: threading.Event, bound: bool, message: str = "") -> Outcome:
        """Record a settled binding: bound (the assumption now ends by observation) or
        not (forgotten). After the answer went out, it is logged here."""
        ns, name = args.pod_namespace, args.pod_name
        if bound:
            self.inflight.bound(ns, name)
        if answered.is_set():
            if bound:
                log.info("binding settled: bound", extra={"pod": f"{ns}/{name}", "node": args.node})
            else:
                self.inflight.forget(ns, name)
                log.error("a binding answered as in progress did not land; kube-scheduler still counts the pod "
                          "on the node (until it restarts, or the pod is deleted)",
                          extra={"pod": f"{ns}/{name}", "node": args.node, "error": message})
        return Outcome(bound, message)


class _Threads:
    """A fixed set of daemon threads running submitted calls (a binding being settled
    never holds up the process's exit, as an executor's threads would)."""

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = size, name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        with self._lock:
            if self._started < self.size:
                self._started += 1
                threading.Thread(target=self._run, name=f"{self.name}-{self._started}", daemon=True).start()
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if future is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                future.set_exception(exc)

    def shutdown(self) -> None:
        for _ in range(self._started):
            self._queue.put((None, None, None))
