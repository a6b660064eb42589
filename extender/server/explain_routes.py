"""`GET /explain/{namespace}/{pod}` and `POST /explain` on the side listener
(`--metrics-listen`, with `--explain-endpoint`): "why is my pod pending?" answered from
the live state, for `kubectl extender why` and `kubectl extender explain -f`. And
`GET /drift` (with `--drift-endpoint`): the drift report (`extender.drift`), for
`kubectl extender drift`. Both show pods' constraints and nodes' taints and labels, so
both pass the one gate of this module (`ExplainRoutes.admit`): whatever admits a
client to /explain admits it to /drift, and nothing else does.

The answer is `extender explain --output json`'s contract (`extender.explain`) plus the
`state` it was computed on (mode, resourceVersion, age, object counts). By default each
result is the summary view (nodes grouped by reason with counts and a few examples;
`filter`, `prioritize` and `nodes` cut down to those examples, `omittedNodes` says how
many were left out); `?nodes=all` returns every node. `?examples=N` (0..50) and
`?candidates=a,b` as for the CLI.

Authenticated (`extender.server.auth`), since it shows what the cluster holds: a bearer token, checked with a
TokenReview, of a user a SubjectAccessReview allows `get` on the pod (GET) or `list` on
pods in the posted pod's namespace (POST); without an API server (file mode) loopback
clients only. Never on the verbs' path: the side listener's own threads serve it. Bounded: one
explanation at a time per process, a token bucket per user shared with /drift
(`--explain-rate`, `--explain-burst`; 429 with Retry-After), the verbs'
`--request-deadline` from the request's arrival on the reviews, the pod's read and CEL
work (503, retry: finished evaluations stay memoised; no API call once the client has
gone), CEL's cost limits as for the verbs, the listener's 1 MiB
body limit, and a cap on the answer's size. Read-only: the scheduler_* metrics do not
count it, nothing is assumed or answered. Like the verbs, it answers an error (503)
while the state has not synced or is stale, never an explanation of a partial state.

The pod of a GET is read from the API server with the extender's own credentials (the
live state keeps only what counting needs of other pods), or from the cluster file.
"""

from __future__ import annotations

import io
import logging
import math
import re
import sys
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import flask
import orjson
from flask import Response
from werkzeug.datastructures import MultiDict

from extender.api import expansion
from extender.drift.report import QueryError, Reports, parse_query
from extender.engine import Extender
from extender.explain import EXAMPLES, MAX_EXAMPLES, explain_pod
from extender.matching.labels import is_dns1123_label, is_dns1123_subdomain
from extender.model.parse import ModelError
from extender.ratelimit import Buckets
from extender.request import deadline
from extender.request.deadline import DeadlineExceeded, request_deadline
from extender.request.foreground import FOREGROUND
from extender.server.auth import (
    FLASK_KEY,
    TOKEN_HEADERS,
    Access,
    AuthError,
    Guard,
    User,
    authenticated,
    authorized,
    guard_for,
)
from extender.server.http1 import JSON, Refused, Reply, Request
from extender.state import ClusterSnapshot, ClusterSource, FileSource
from extender.state.loader import load_objects

log = logging.getLogger("extender.explain")

MAX_ANSWER_BYTES = 32 << 20  # ~500 bytes per node in the full view: 60k+ nodes
API_TIMEOUT = (3.0, 5.0)  # (connect, read) seconds for reading the pod
DISABLED = ("the explain endpoint is off: start the extender with --explain-endpoint=true "
            "(env EXTENDER_EXPLAIN_ENDPOINT, config explainEndpoint: true)")
DRIFT_DISABLED = ("the drift endpoint is off: start the extender with --drift-endpoint=true "
                  "(env EXTENDER_DRIFT_ENDPOINT, config driftEndpoint: true)")
PATHS = ("/explain", "/drift")  # this module's paths (and what is under them)


# targets `early` reads as werkzeug does (no escapes, no `+`, no `;`): Flask reads others
_PLAIN = re.compile(r"[A-Za-z0-9/?=&,._~-]*")


def _retry_after(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


# --- the Flask app behind the listener ----------------------------------------------


def wsgi_environ(request: Request, path: str, query: str) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of `request` for the Flask app: its method (HEAD is
    asked as GET, and a GET's body is dropped), `path` (as the target spells it; `urlsplit`
    drops a fragment) and `query`, the credentials (`TOKEN_HEADERS`, nothing else), the
    client's address. Strings are "WSGI strings", as werkzeug reads them back: the UTF-8
    bytes of the target's (latin-1) text, one byte per character."""
    get = request.method in ("GET", "HEAD")
    body = b"" if get else request.body
    environ: dict[str, Any] = {
        "REMOTE_ADDR": request.client,
        "REQUEST_METHOD": "GET" if get else request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": _wsgi_string(unquote(urlsplit(path).path)),
        "QUERY_STRING": _wsgi_string(query),
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "HTTP_HOST": "localhost",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    if body:
        environ["CONTENT_LENGTH"] = str(len(body))
    for name in TOKEN_HEADERS:
        if value := request.header(name):
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    return environ


def _wsgi_string(text: str) -> str:
    return text.encode("utf-8").decode("latin-1")


def call_wsgi(app: Callable[..., Any], environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """Run a WSGI app on `environ`: its status line, headers and whole body (an app that
    never starts a response is a bug, answered 500 by the listener)."""
    answer: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info:
            raise exc_info[1].with_traceback(exc_info[2])
        answer[:] = [status, headers]
        return chunks.append

    result = app(environ, start_response)
    try:
        chunks.extend(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = answer
    return status, headers, b"".join(chunks)


# --- where the explained pod comes from ------------------------------------------------

PodReader = Callable[[str, str], dict[str, Any]]  # (namespace, name) -> raw pod, or Refused


def api_pod_reader(api_client: Any) -> PodReader:
    """GET the pod from the API server (the extender's service account: it watches
    pods, so it may read them)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)

    def read(namespace: str, name: str) -> dict[str, Any]:
        if deadline.client_gone():  # nobody to answer: no API call
            raise Refused(503, "the client has gone", _retry_after(1))
        left = deadline.remaining()
        if left is not None and left <= 0:
            raise Refused(503, "the request deadline passed before the pod could be read: retry", _retry_after(1))
        timeout = API_TIMEOUT if left is None else (min(API_TIMEOUT[0], left), min(API_TIMEOUT[1], left))
        try:
            response = core.read_namespaced_pod(name, namespace, _preload_content=False,
                                                _request_timeout=timeout)
            try:
                return orjson.loads(response.data)
            finally:
                response.release_conn()
        except ApiException as exc:
            if exc.status == 404:
                raise Refused(404, f"pod {namespace}/{name} not found") from None
            raise Refused(502, f"reading pod {namespace}/{name} from the API server: "
                          f"{exc.status} {exc.reason}") from None
        except Exception as exc:  # unreachable server, timeout, unreadable answer
            raise Refused(502, f"reading pod {namespace}/{name} from the API server: {exc}") from None

    return read


def file_pod_reader(source: FileSource) -> PodReader:
    """The pod as the cluster file holds it (read again for each request: file mode is
    for demos and tests, and the endpoint is rate-limited)."""
    def read(namespace: str, name: str) -> dict[str, Any]:
        try:
            objects = load_objects(source.path)
        except ValueError as exc:
            raise Refused(503, f"reading the cluster file: {exc}") from None
        for obj in objects:
            meta = obj.get("metadata") or {}
            if obj.get("kind") == "Pod" and meta.get("name") == name and (meta.get("namespace") or "default") == namespace:
                return obj
        raise Refused(404, f"pod {namespace}/{name} not found in the cluster file")

    return read


def pod_reader_for(source: ClusterSource) -> PodReader | None:
    if source.api_client is not None:
        return api_pod_reader(source.api_client)
    if isinstance(source, FileSource):
        return file_pod_reader(source)
    return None


# --- the state an answer was computed on -----------------------------------------------


def newest_version(versions: dict[str, str]) -> str:
    """The highest of the kinds' resourceVersions (etcd revisions: integers; opaque
    strings are compared only when every one is an integer)."""
    numbers = [int(v) for v in versions.values() if v.isdigit()]
    if numbers and len(numbers) == len(versions):
        return str(max(numbers))
    return versions.get("Pod", "")


def state_info(source: ClusterSource) -> dict[str, Any]:
    """Mode, readiness, resourceVersions and age of `source`, read *before* its snapshot
    is taken: the snapshot then holds at least everything up to these versions."""
    ok, why = source.readiness()
    reflectors = source.reflectors
    mode = "live" if reflectors else "file" if isinstance(source, FileSource) else type(source).__name__
    info: dict[str, Any] = {"mode": mode, "ready": ok, "status": why}
    if reflectors:
        versions = {kind: r.resource_version for kind, r in reflectors.items()}
        info["resourceVersion"] = newest_version(versions)
        info["resourceVersions"] = versions
    if isinstance(source, FileSource):
        info["path"] = str(source.path)
    age = source.age()
    if age is not None:
        # live: seconds since the least recently confirmed kind was confirmed (events,
        # bookmarks); file: seconds since the file stopped matching what is served
        info["ageSeconds"] = round(age, 3)
    return info


def refusal(source: ClusterSource, info: dict[str, Any]) -> str | None:
    """Why no explanation may be computed now, or None: the verbs' own test
    (`unready()`: (reason, message) before every kind has listed and once the state is
    stale), and what /readyz says."""
    why = source.unready()
    if why:
        return why[1] if isinstance(why, tuple) else str(why)
    return None if info["ready"] else info["status"]


def with_snapshot(info: dict[str, Any], snapshot: ClusterSnapshot) -> dict[str, Any]:
    return {**info, "generation": snapshot.generation, "objects": snapshot.counts()}


# --- the routes ------------------------------------------------------------------------


class ExplainRoutes:
    """The side listener's `dispatch` for `/explain`: a Flask app (routing, 404/405, the
    JSON errors) behind the listener's (method, target, body) -> Reply call."""

    def __init__(self, engine: Extender, enabled: bool, rate: float = 1.0, burst: int = 5,
                 deadline: float | None = None, reader: PodReader | None = None,
                 drift: Any = None, drift_enabled: bool = False, guard: Guard | None = None) -> None:
        """`drift`: the drift report's tracker (`engine.drift`), served at /drift while
        `drift_enabled`. `guard`: who may ask (default: the source's TokenReview and
        SubjectAccessReview, or loopback only in file mode)."""
        self.engine = engine
        self.enabled = enabled
        self.drift = drift
        self.drift_enabled = drift_enabled
        self.rate, self.burst = rate, burst
        self.bucket = Buckets(rate, burst)  # per user, /explain and /drift together
        self.reports = Reports()
        self.deadline = engine.config.request_deadline if deadline is None else deadline
        self.reader = reader if reader is not None else pod_reader_for(engine.source)
        self.guard = guard if guard is not None else guard_for(engine.source)
        self._busy = threading.Lock()
        self.app = explain_app(self)

    @staticmethod
    def takes_body(method: str, path: str) -> bool:
        """POSTs to its paths (`POST /explain/...` is read, then answered 405 by Flask)."""
        return method == "POST" and (path == "/explain" or path.startswith("/explain/"))

    @staticmethod
    def owns(path: str) -> bool:
        """A path of this module's (a body sent where none is taken is then 413 or 405, not 404)."""
        return any(path == p or path.startswith(p + "/") for p in PATHS)

    def __call__(self, request: Request) -> Reply | None:
        path, _, query = request.target.partition("?")
        if not self.owns(path):
            return None
        with request_deadline(self.deadline):  # reviews and CEL work alike, from its arrival
            status, headers, body = call_wsgi(self.app, wsgi_environ(request, path, query))
        extra = {k: v for k, v in headers if k not in ("Content-Type", "Content-Length")}
        kind = next((v for k, v in headers if k.lower() == "content-type"), JSON)
        return int(status.split()[0]), kind, body, extra

    def admit(self, path: str) -> None:
        """The gate in front of every route of this module (`/explain`, `/drift`): Refused
        unless the client may have the answer. Today that is only the route's own flag
        (off by default); who reaches the listener is decided outside it (the API
        server's service proxy with RBAC, the NetworkPolicy: docs/operate/troubleshooting.md).
        Anything that authenticates or authorizes a request for these views belongs
        here, once, for all of them."""
        if path == "/drift" or path.startswith("/drift/"):
            if not self.drift_enabled:
                raise Refused(404, DRIFT_DISABLED)
        elif not self.enabled:
            raise Refused(404, DISABLED)

    def drift_report(self, user: User) -> Response:
        """The drift report as of the tracker's last settle, with the state it read;
        503 while the state has not synced or is stale (the report would be partial).
        Under `user`'s rate limit, as /explain; built once per settle and query."""
        try:
            query = parse_query(flask.request.args)
        except QueryError as exc:
            raise Refused(400, str(exc)) from None
        self._take(user, "drift reports")
        source = self.engine.source
        info = state_info(source)
        why = refusal(source, info)
        if why is not None:
            raise Refused(503, f"cluster state not synced or stale: {why}", _retry_after(5), {"state": info})
        if self.drift is None:
            raise Refused(503, "the drift report is not running: it needs a cluster state "
                          "(--kubeconfig, --in-cluster or --cluster)")
        answer = self.reports.get(self.drift, **query)
        answer["state"] = with_snapshot(info, source.snapshot())
        FOREGROUND.yield_to()  # kube-scheduler's calls first: the copy below holds the GIL
        return Response(orjson.dumps(answer), mimetype=JSON)

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        if self.reader is None:
            raise Refused(404, "this cluster state has no pod objects to read: POST the pod to /explain")
        return self.reader(namespace, name)

    def _take(self, user: User, what: str) -> None:
        """Refused (429) past `user`'s rate (`--explain-rate`, `--explain-burst`)."""
        wait = self.bucket.try_take(user.name)
        if wait:
            raise self._too_many(what, wait)

    def _too_many(self, what: str, wait: float) -> Refused:
        return Refused(429, f"too many {what}: at most {self.rate:g} per second per user "
                       f"(burst {self.burst}); retry in {wait:.1f}s", _retry_after(wait))

    def early(self, request: Request) -> Reply | None:
        """The 429 of a request past its user's rate limit, answered on the listener's
        loop (`Routes.place`), before Flask and the pool: the very reply Flask would
        give, decided only when nothing needs asking (its route on, its target plain
        and valid, its token and its access cached as accepted, its user's bucket
        empty). Admins asking again at once after a 429 sent hundreds a second, each
        through Flask on a pool thread. None otherwise: Flask answers, as before."""
        if request.method not in ("GET", "HEAD") or not _PLAIN.fullmatch(request.target):
            return None
        path, _, query = request.target.partition("?")
        args = MultiDict(parse_qsl(query, keep_blank_values=True))
        try:
            if path == "/drift" and self.drift_enabled:
                parse_query(args)
                namespace = args.getlist("namespace")
                access, what = Access("list", "pods", namespace[-1] if namespace else ""), "drift reports"
            elif path.startswith("/explain/") and path.count("/") == 3 and self.enabled:
                access, what = _pod_access(*path.split("/")[2:]), "explanations"
                _options(args)
            else:
                return None
        except (QueryError, Refused):
            return None  # Flask says what is wrong
        cached = getattr(self.guard, "cached", None)
        user = cached(request.header, request.client, access) if cached is not None else None
        wait = self.bucket.wait(user.name) if user is not None else 0.0
        if not wait:
            return None
        refusal = self._too_many(what, wait)
        return refusal.status, JSON, orjson.dumps({"error": str(refusal), **refusal.extra}), dict(refusal.headers)

    def answer(self, user: User, pod: Callable[[], dict[str, Any]]) -> Response:
        options = _options(flask.request.args)
        self._take(user, "explanations")
        if not self._busy.acquire(blocking=False):
            raise Refused(429, "another explanation is being computed; retry", _retry_after(1))
        try:
            return Response(self._explain(options, pod), mimetype=JSON)
        finally:
            self._busy.release()

    def _explain(self, options: dict[str, Any], pod: Callable[[], dict[str, Any]]) -> bytes:
        source = self.engine.source
        info = state_info(source)
        why = refusal(source, info)
        if why is not None:
            raise Refused(503, f"cluster state not synced or stale: {why}", _retry_after(5), {"state": info})
        pod_raw = pod()
        snapshot = source.snapshot()
        try:
            with request_deadline(self.deadline):
                result = explain_pod(self.engine, pod_raw, options["candidates"], snapshot, options["examples"],
                                     every_node=options["all"])
        except ModelError as exc:
            raise Refused(422, f"the pod cannot be explained: {exc}") from None
        except DeadlineExceeded as exc:
            raise Refused(503, f"{exc} (finished evaluations are kept: a retry gets further)",
                          _retry_after(1)) from None
        answer = {"results": [result], "state": with_snapshot(info, snapshot),
                  "view": "all" if options["all"] else "summary"}
        data = orjson.dumps(answer)
        if len(data) > MAX_ANSWER_BYTES:
            raise Refused(413, f"the answer would be {len(data)} bytes, over the limit of {MAX_ANSWER_BYTES}: "
                          "use the summary view or ?candidates=")
        return data


def _pod_access(namespace: str, name: str) -> Access:
    """GET /explain/NAMESPACE/POD tells about that pod: its reader's right (asked once
    the names are checked: no review for a malformed request)."""
    # RFC 1123 label (namespaces) and subdomain (pod names), as the API server validates them
    if not is_dns1123_label(namespace):
        raise Refused(400, f"invalid namespace {namespace[:100]!r}")
    if is_dns1123_subdomain(name):
        raise Refused(400, f"invalid pod name {name[:300]!r}")
    return Access("get", "pods", namespace, name)


def explain_app(routes: ExplainRoutes) -> flask.Flask:
    app = flask.Flask("extender.explain")
    app.extensions[FLASK_KEY] = routes.guard
    _add_routes(app, routes)
    _add_error_handlers(app)
    return app


def _add_routes(app: flask.Flask, routes: ExplainRoutes) -> None:
    """The gate before every request, then GET /drift, POST /explain and
    GET /explain/NAMESPACE/POD, each asking the API server about its reader first."""

    @app.before_request
    def gate() -> None:
        routes.admit(flask.request.path)

    @app.get("/drift")
    def drift() -> Response:
        user = authenticated()
        namespace = flask.request.args.getlist("namespace")
        # the pods it lists: those of one namespace, or of all ("" is every namespace)
        authorized(user, Access("list", "pods", namespace[-1] if namespace else ""))
        return routes.drift_report(user)

    @app.post("/explain")
    def explain_posted() -> Response:
        user = authenticated()  # before the body is parsed
        pod = _pod_from_body(flask.request.get_data())
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
        authorized(user, Access("list", "pods", namespace or "default"))  # the pods it is counted with
        return routes.answer(user, lambda: pod)

    @app.get("/explain/<namespace>/<name>")
    def explain_named(namespace: str, name: str) -> Response:
        access = _pod_access(namespace, name)  # names checked before any review
        user = authenticated()
        authorized(user, access)
        return routes.answer(user, lambda: routes.read(namespace, name))


def _add_error_handlers(app: flask.Flask) -> None:
    """Every refusal as a JSON `{"error": ...}` with its status; Flask's own 404, 405 and
    500 worded for the route the client was after."""

    @app.errorhandler(Refused)
    def refused(exc: Refused) -> Response:
        return Response(orjson.dumps({"error": str(exc), **exc.extra}), exc.status, exc.headers, mimetype=JSON)

    @app.errorhandler(AuthError)
    def unauthorized(exc: AuthError) -> Response:
        return refused(Refused(exc.status, str(exc), exc.headers))

    @app.errorhandler(404)
    def not_found(_exc: Exception) -> Response:
        if flask.request.path.startswith("/drift"):
            return refused(Refused(404, "expected /drift"))
        return refused(Refused(404, "expected /explain/NAMESPACE/POD"))

    @app.errorhandler(405)
    def wrong_method(_exc: Exception) -> Response:
        if flask.request.path.startswith("/drift"):
            return refused(Refused(405, "use GET /drift"))
        return refused(Refused(405, "use GET /explain/NAMESPACE/POD or POST /explain with a pod"))

    @app.errorhandler(500)
    def failed(_exc: Exception) -> Response:  # logged by Flask
        return refused(Refused(500, "the explanation failed: see the extender's log"))


def _pod_from_body(body: bytes) -> dict[str, Any]:
    """A Pod object as JSON (the plugin converts YAML). JSON only: YAML aliases make
    small bodies expand into huge documents."""
    expansion.account(body)
    try:
        pod = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Refused(400, f"the body must be a Pod as JSON: {exc}") from None
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        raise Refused(400, "the body must be one Pod object (kind: Pod)")
    return pod


def _options(args: MultiDict) -> dict[str, Any]:
    def one(name: str, default: str) -> str:
        values = args.getlist(name)
        return values[-1] if values else default

    view = one("nodes", "summary")
    if view not in ("summary", "all"):
        raise Refused(400, f"nodes: expected summary or all, got {view[:50]!r}")
    examples = one("examples", str(EXAMPLES))
    if not examples.isdigit() or int(examples) > MAX_EXAMPLES:
        raise Refused(400, f"examples: expected an integer 0..{MAX_EXAMPLES}, got {examples[:50]!r}")
    raw = one("candidates", "")
    candidates = [c for c in (part.strip() for part in raw.split(",")) if c] or None
    return {"all": view == "all", "examples": int(examples), "candidates": candidates}
