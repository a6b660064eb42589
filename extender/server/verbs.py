"""The two scheduler verbs as bytes in, (status, bytes) out, and a bare-WSGI fast path.

kube-scheduler calls `filter` and `prioritize` for every pod, so their HTTP handling is
kept below Flask: `VerbRoutes` answers `POST /filter`, `POST /prioritize` (and the same
under one URL prefix) straight from the WSGI environ, and hands everything else
(health, metrics, odd paths, chunked bodies, other methods) to the Flask app, which
serves the verbs too, through `answer`, so both paths give identical answers. On this
project's benchmark machine Flask's request/response objects cost ~0.9 ms per pair.

Error mapping: malformed JSON -> 400, oversized body -> 413, well-formed but invalid
args -> 200 with `Error` set for filter (what kube-scheduler expects) and 400 for
prioritize, including a score plugin failing on the pod (e.g. a preferred term that does
not parse fails PreScore: the input is at fault), a cluster state that cannot give a
verdict (not synced yet, stale: `extender.gate`) -> 200 with `Error` for filter and
bind, 503 for prioritize and preempt, anything unexpected -> 500. Clients never see a
stack trace; every error is logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from extender import metrics
from extender.api.wire import WireError, decode_args, decode_json, encode, error_filter_result
from extender.binding import decode_binding_args
from extender.gate import StateNotReady
from extender.model.parse import ModelError
from extender.preemption import decode_preemption_args
from extender.server.budget import BODIES, RETRY_AFTER_SECONDS, SMALL_REQUEST, shed
from extender.service import Extender, ScoringError
from extender.state import heap

log = logging.getLogger("extender.http")
JSON_HEADERS = "application/json"
VERBS = ("filter", "prioritize", "bind", "preempt")
REASONS = {200: "200 OK", 400: "400 Bad Request", 413: "413 Request Entity Too Large",
           500: "500 Internal Server Error", 503: "503 Service Unavailable"}
SHED_HEADERS = [("Retry-After", str(RETRY_AFTER_SECONDS))]


def too_large(limit: int) -> tuple[int, bytes]:
    return 413, encode({"error": f"request body exceeds the limit of {limit} bytes"})


def shed_answer(verb: str | None = None) -> tuple[int, bytes]:
    """503 for a request over the in-flight byte budget (`extender.server.budget`); the
    caller adds `Retry-After`."""
    shed("verbs")
    if verb is not None:
        observe(verb, 503, time.perf_counter())
    return 503, encode({"error": "too many request bytes in flight; retry"})


def answer(engine: Extender, verb: str, body: bytes) -> tuple[int, bytes]:
    """Status code and JSON body for one verb call; records the HTTP metrics. A large
    body (a Nodes-mode request) is answered with the cyclic collector paused
    (`extender.state.heap`): its millions of objects otherwise set off full passes with
    the GIL held, which every other thread (probes included) waited for."""
    if len(body) > SMALL_REQUEST:
        with heap.collector_paused():
            return _answer(engine, verb, body)
    return _answer(engine, verb, body)


def _answer(engine: Extender, verb: str, body: bytes) -> tuple[int, bytes]:
    started = time.perf_counter()
    try:
        if verb == "bind":
            result = 200, encode(engine.bind(decode_binding_args(decode_json(body))))
        elif verb == "preempt":
            result = 200, encode(engine.preempt(decode_preemption_args(decode_json(body))))
        elif verb == "filter":
            result = 200, engine.filter_bytes(decode_args(body))
        else:
            result = 200, engine.prioritize_bytes(decode_args(body))
    except WireError as exc:
        log.warning("bad request", extra={"verb": verb, "error": str(exc)})
        if verb == "filter" and not exc.malformed:
            result = 200, encode(error_filter_result(str(exc)))
        else:
            result = 400, encode({"error": str(exc)})
    except ModelError as exc:
        log.warning("invalid arguments", extra={"verb": verb, "error": str(exc)})
        result = 400, encode({"error": str(exc)})
    except StateNotReady as exc:  # prioritize, preempt: no Error field (extender.gate)
        result = 503, encode({"error": str(exc)})
    except ScoringError as exc:  # a plugin refused the pod: the request is at fault
        log.warning("scoring failed", extra={"verb": verb, "error": str(exc)})
        result = 400, encode({"error": str(exc)})
    except Exception:
        log.exception("internal error", extra={"verb": verb})
        result = 500, encode({"error": "internal error (see the extender's log)"})
    observe(verb, result[0], started)
    return result


def observe(verb: str, code: int, started: float) -> None:
    metrics.child(metrics.HTTP_REQUESTS_TOTAL, verb, str(code)).inc()
    metrics.child(metrics.HTTP_REQUEST_DURATION, verb).observe(time.perf_counter() - started)


def off_loop(engine: Extender, verb: str) -> bool:
    """Whether `verb` must be answered on a pool thread rather than a worker's event
    loop: `bind` blocks on an API call, and while pods are in flight any other verb may
    wait for a `bind` (`extender.inflight`), which the loop must stay free to read."""
    return verb == "bind" or engine.inflight.has_pending()


def verb_of(path: str) -> str | None:
    """A verb's name for `/filter` or `/<prefix>/filter` (prefix not starting
    with a slash, as Flask's `<path:prefix>` rule requires); None otherwise."""
    head, _, last = path.rpartition("/")
    if last not in VERBS:
        return None
    if head == "" or (head.startswith("/") and len(head) > 1 and head[1] != "/"):
        return last
    return None


class VerbRoutes:
    """WSGI middleware: the verbs without Flask, everything else through `app`."""

    def __init__(self, app: Callable, engine: Extender, max_body_bytes: int) -> None:
        self.app = app
        self.engine = engine
        self.limit = max_body_bytes

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        verb = verb_of(environ.get("PATH_INFO", "")) if environ.get("REQUEST_METHOD") == "POST" else None
        length = environ.get("CONTENT_LENGTH") or ""
        if verb is None or not length.isdigit() or environ.get("HTTP_TRANSFER_ENCODING"):
            return self.app(environ, start_response)
        size = int(length)
        with BODIES.admit(min(size, self.limit)) as admitted:  # unless the transport charged it
            if admitted:
                code, body = self.respond(verb, size, lambda: environ["wsgi.input"].read(size))
            else:
                code, body = shed_answer(verb)
        headers = [("Content-Type", JSON_HEADERS), ("Content-Length", str(len(body)))]
        start_response(REASONS[code], headers + SHED_HEADERS if code == 503 else headers)
        return [body]

    def respond(self, verb: str, size: int, read: Callable[[], bytes]) -> tuple[int, bytes]:
        """Status and body for a verb call with a `size`-byte body that `read` returns
        (never read when over the limit). `InlineWorker` calls this directly (as the
        app's `answer_verb`) for requests it has already buffered."""
        if size > self.limit:
            started = time.perf_counter()
            code, body = too_large(self.limit)
            observe(verb, code, started)
            return code, body
        return answer(self.engine, verb, read())
