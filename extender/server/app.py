"""The Flask app: health, readiness, metrics, and the verbs.

The verbs' hot path is `extender.server.verbs.VerbRoutes`, installed in front of Flask
as WSGI middleware; Flask's own verb routes (used for chunked bodies and anything the
fast path does not recognise) answer through the same `answer` function.
"""

from __future__ import annotations

import os
import time

from flask import Flask, Response, request
from gunicorn.http.errors import ParseException
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extender.api.wire import encode
from extender.config import Config
from extender.server.budget import BODIES, SMALL_REQUEST
from extender.server.listener import Route
from extender.server.verbs import (
    SHED_HEADERS,
    VERBS,
    VerbRoutes,
    answer,
    observe,
    off_loop,
    shed_answer,
    too_large,
)
from extender.service import Extender
from extender.state import ClusterSource, readiness

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def _flask_view(route: Route):
    def view() -> Response:
        code, kind, body = route()
        return Response(body, status=code, content_type=kind)

    return view


def _json(body: object, status: int = 200) -> Response:
    return Response(encode(body), status=status, mimetype=JSON)


def _metrics_payload() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import ProcessCollector, multiprocess

        from extender.server import multiproc

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        main_pid = multiproc.MAIN_PID or os.getpid()
        ProcessCollector(registry=registry, pid=lambda: main_pid)  # keeps process_*
        return generate_latest(registry)
    return generate_latest()


def metrics_body(engine: Extender) -> bytes:
    """The /metrics exposition, with the readiness gauge brought up to date first (any
    listener serving /metrics should answer through this)."""
    from extender import metrics

    metrics.CLUSTER_STATE_READY.set(1 if engine.source.ready() else 0)
    return _metrics_payload()


def health_routes(engine: Extender) -> dict[str, Route]:
    """`/healthz`, `/readyz`, `/metrics` as plain callables: the Flask app and the
    separate `--metrics-listen` listener serve the same answers."""

    def healthz() -> tuple[int, str, bytes]:
        return 200, TEXT, b"ok"

    def readyz() -> tuple[int, str, bytes]:
        ok, why = readiness(engine.source)
        return (200 if ok else 503), TEXT, why.encode()

    def metrics_view() -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, metrics_body(engine)

    return {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics_view}


def _expected_size(limit: int) -> int:
    """The bytes a body will hold, for the in-flight budget: its Content-Length; for a
    chunked one (unknown until read, at most `limit`), what a small request holds."""
    if request.content_length is not None:
        return min(request.content_length, limit)
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    return min(SMALL_REQUEST, limit) if chunked else 0


def create_app(config: Config, source: ClusterSource | None = None, extender: Extender | None = None) -> Flask:
    """`source` defaults to the config's cluster file, watched for changes. Pass one in
    (the gunicorn launcher does, loading it once in the master before forking)."""
    if source is None:
        from extender.state.select import open_source, start_in_worker

        source = open_source(config)
        start_in_worker(source)  # under gunicorn the master handles HUP
    engine = extender or Extender(config, source)
    BODIES.configure(config.max_inflight_bytes)  # the process's in-flight byte budget
    app = Flask("extender")
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
    app.extensions["extender"] = engine

    def verb(name: str) -> Response:
        """A verb whose body VerbRoutes did not take (chunked, or not a plain length)."""
        started = time.perf_counter()
        with BODIES.admit(_expected_size(config.max_body_bytes)) as ok:
            if not ok:
                code, payload = shed_answer(name)
                return Response(payload, status=code, mimetype=JSON, headers=SHED_HEADERS)
            try:
                body = request.get_data(cache=False)
            except RequestEntityTooLarge:
                code, payload = too_large(config.max_body_bytes)
                observe(name, code, started)
            except ParseException as exc:  # broken chunked framing met while reading (TLS path)
                code, payload = 400, encode({"error": f"malformed request body: {exc}"})
                observe(name, code, started)
            else:
                code, payload = answer(engine, name, body)
        return Response(payload, status=code, mimetype=JSON)

    for name in VERBS:
        def view(prefix: str = "", name: str = name) -> Response:
            return verb(name)

        for prefix in ("", "/<path:prefix>"):
            app.add_url_rule(f"{prefix}/{name}", f"{name}{prefix}", view, methods=["POST"])

    for path, route in health_routes(engine).items():
        app.add_url_rule(path, path.strip("/"), _flask_view(route), methods=["GET"])

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        if code == 413:
            message = f"request body exceeds the limit of {config.max_body_bytes} bytes"
        else:
            message = exc.description or exc.name
        return _json({"error": message}, code)

    routes = VerbRoutes(app.wsgi_app, engine, config.max_body_bytes)
    app.wsgi_app = routes
    app.answer_verb = routes.respond  # InlineWorker's way to the verbs without WSGI
    app.off_loop = lambda name: off_loop(engine, name)  # InlineWorker: to a pool thread
    return app
