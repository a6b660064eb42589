"""Flask routes for the extender verbs, health and metrics.

Bodies are decoded with orjson straight from the request bytes and answered with
pre-encoded bytes; no per-node dicts are built beyond what the answer contains.
Malformed JSON -> 400, oversized body -> 413, well-formed but invalid args -> 200 with
`Error` set (what kube-scheduler expects), anything unexpected -> 500. Clients never see
a stack trace; every error is logged.
"""

from __future__ import annotations

import logging
import os
import time

from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extender import metrics
from extender.api.wire import WireError, decode_args, encode, error_filter_result
from extender.config import Config
from extender.model.parse import ModelError
from extender.service import Extender, ScoringError
from extender.state import ClusterSource, FileSource

log = logging.getLogger("extender.http")
JSON = "application/json"


def _json(body: object, status: int = 200) -> Response:
    return Response(encode(body), status=status, mimetype=JSON)


def _metrics_payload() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()


def create_app(config: Config, source: ClusterSource | None = None, extender: Extender | None = None) -> Flask:
    """`source` defaults to the config's cluster file, watched for changes. Pass one in
    (the gunicorn launcher does, loading it once in the master before forking)."""
    if source is None:
        file_source = FileSource(config.cluster, poll_seconds=config.reload_interval)
        file_source.start(install_sighup=False)  # under gunicorn the master handles HUP
        source = file_source
    engine = extender or Extender(config, source)
    app = Flask("extender")
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
    app.extensions["extender"] = engine

    def verb(name: str, handler) -> Response:
        started = time.perf_counter()
        code = 500
        try:
            body = request.get_data(cache=False)
            args = decode_args(body)
            response = _json(handler(args))
        except RequestEntityTooLarge:
            response = _json({"error": f"request body exceeds the limit of {config.max_body_bytes} bytes"}, 413)
        except WireError as exc:
            if exc.malformed:
                response = _json({"error": str(exc)}, 400)
            elif name == "filter":
                response = _json(error_filter_result(str(exc)))
            else:
                response = _json({"error": str(exc)}, 400)
            log.warning("bad request", extra={"verb": name, "error": str(exc)})
        except ModelError as exc:
            log.warning("invalid arguments", extra={"verb": name, "error": str(exc)})
            response = _json({"error": str(exc)}, 400)
        except ScoringError as exc:
            log.error("scoring failed", extra={"verb": name, "error": str(exc)})
            response = _json({"error": str(exc)}, 500)
        except Exception:
            log.exception("internal error", extra={"verb": name})
            response = _json({"error": "internal error (see the extender's log)"}, 500)
        code = response.status_code
        metrics.HTTP_REQUESTS_TOTAL.labels(name, str(code)).inc()
        metrics.HTTP_REQUEST_DURATION.labels(name).observe(time.perf_counter() - started)
        return response

    def filter_view(prefix: str = "") -> Response:
        return verb("filter", engine.filter)

    def prioritize_view(prefix: str = "") -> Response:
        return verb("prioritize", engine.prioritize)

    for prefix in ("", "/<path:prefix>"):
        app.add_url_rule(f"{prefix}/filter", f"filter{prefix}", filter_view, methods=["POST"])
        app.add_url_rule(f"{prefix}/prioritize", f"prioritize{prefix}", prioritize_view, methods=["POST"])

    @app.get("/healthz")
    def healthz() -> Response:
        return Response(b"ok", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        if engine.source.ready():
            return Response(b"ok", mimetype="text/plain")
        return Response(b"cluster state not loaded", status=503, mimetype="text/plain")

    @app.get("/metrics")
    def metrics_view() -> Response:
        return Response(_metrics_payload(), mimetype=CONTENT_TYPE_LATEST)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        if code == 413:
            message = f"request body exceeds the limit of {config.max_body_bytes} bytes"
        else:
            message = exc.description or exc.name
        return _json({"error": message}, code)

    return app
