"""The verbs' port: `/filter`, `/prioritize`, `/bind`, `/preempt` (also under one URL
prefix), `/healthz`, `/readyz`, `/metrics`, served by `extender.server.listener`.

One route to every answer: bytes arrive on the listener's event loop, a whole request
is placed in a lane (`App.place`) and `extender.server.verbs.answer` turns its body into
the verb's status and JSON. Where it runs:

* on the event loop (`LOOP`): a verb whose CEL work is memoised or cheap (the CEL cache
  raises `lane.NeedsCostlierLane` otherwise, before anything is written), and the probes;
* on a pool thread (`POOL`, `--threads`): with `--worker-class pool` every verb; a
  body over `INLINE_MAX_BYTES` (a Nodes-mode request: tens of milliseconds of parsing);
  and any verb while pods answered by `filter` are in flight, because it may then wait
  for a `bind` (`extender.engine.inflight`) that the loop must stay free to read;
* in the expensive lane (`EXPENSIVE`, one thread per `EXPENSIVE_SLOTS`, its own queue):
  a request whose CEL programs are estimated past what a pool thread may run, so it
  never holds a thread cheap work needs;
* in the bind lane (`BIND`, `BIND_THREADS` threads): `bind` waits for its API call up
  to a second (the call itself goes on in `extender.engine.binding`); kube-scheduler runs
  each binding in a goroutine of its own and may have dozens out at once, so binds
  never queue behind filter work nor hold the threads it needs.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
    multiprocess,
)

from extender import metrics
from extender.cel.limits import EXPENSIVE_SLOTS
from extender.config import Config
from extender.drift import drift_for
from extender.engine.binding import BIND_CONNECTIONS
from extender.engine.extender import STATE_VERSION_HEADER, Extender
from extender.events import recorder_for
from extender.request import deadline, lane
from extender.server import multiproc
from extender.server.http1 import JSON, Refused, Reply, Request
from extender.server.inflight_bytes import VERBS_INFLIGHT_BYTES
from extender.server.listener import LOOP, Listener, Route, Routes
from extender.server.opening import open_source, start_in_worker
from extender.server.tls import ReloadingContext, client_policy
from extender.server.verbs import answer, verb_of
from extender.state import ClusterSource

TEXT = "text/plain; charset=utf-8"
POOL, EXPENSIVE, BIND = lane.POOL, lane.EXPENSIVE, "bind"
INLINE_MAX_BYTES = 1 << 20  # larger bodies are answered on a pool thread
BIND_THREADS = BIND_CONNECTIONS  # each answers within a second (`extender.engine.binding`)
# kube-scheduler gives up on an extender call after its httpTimeout (5 s by default): a
# request that has not fully arrived by then is not worth its buffer any longer.
REQUEST_READ_TIMEOUT = 5.0
KEEPALIVE = 75.0  # seconds a kept-alive connection may wait for its next request
MAX_CONNECTIONS = 10_000  # per worker; beyond, the oldest idle connection makes room


METRICS_READS = 3  # tries at the workers' files before /metrics answers an error
METRICS_INTERVAL = 0.2  # seconds between two expositions at least on --metrics-listen (`Coalesced`)


def _metrics_payload() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        main_pid = multiproc.MAIN_PID or os.getpid()
        ProcessCollector(registry=registry, pid=lambda: main_pid)  # keeps process_*
        # Another worker may be creating or growing its file while this one reads them
        # all (prometheus-client cannot map a file still empty): read again.
        for attempt in range(METRICS_READS):
            try:
                return generate_latest(registry)
            except (ValueError, OSError) as exc:
                if attempt == METRICS_READS - 1:
                    raise
                logging.getLogger("extender.metrics").warning(
                    "reading the workers' metric files failed; reading again", extra={"error": str(exc)})
    return generate_latest()


def metrics_body(engine: Extender) -> bytes:
    """The /metrics exposition, with the readiness gauge brought up to date first (any
    listener serving /metrics should answer through this)."""
    metrics.CLUSTER_STATE_READY.set(1 if engine.source.ready() else 0)
    return _metrics_payload()


class Coalesced:
    """A payload made at most once for any number of requests waiting for it, and at
    most every `interval` seconds: a request is answered with the latest payload whose
    making started after it arrived (`deadline.arrival`), so it is never older than the
    request; one that arrives sooner than `interval` after the last making started
    waits for the next, and every request waiting meanwhile shares it. Scrapes flooding
    `/metrics` then cost one exposition every `interval`, not one each: the thread that
    makes them holds the GIL a bounded share of the time, and the event loop (the
    probes) keeps the rest."""

    def __init__(self, make: Callable[[], bytes], interval: float = 0.0) -> None:
        self.make = make
        self.interval = interval
        self._lock = threading.Lock()
        self._latest: tuple[float, bytes] = (-math.inf, b"")

    def __call__(self) -> bytes:
        asked = deadline.arrival()
        asked = time.monotonic() if asked is None else asked
        with self._lock:
            started, payload = self._latest
            if started < asked:
                wait = started + self.interval - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                started = time.monotonic()
                payload = self.make()
                self._latest = (started, payload)
            return payload


def health_routes(engine: Extender, metrics_interval: float = 0.0) -> dict[str, Route]:
    """`/healthz`, `/readyz`, `/metrics`: the verbs' port and `--metrics-listen` serve
    the same answers. `metrics_interval`: seconds between two expositions at least
    (`Coalesced`; `METRICS_INTERVAL` on `--metrics-listen`, whose `/metrics` has a thread
    of its own to wait on; none on the verbs' port, whose pool threads answer verbs)."""

    def healthz() -> tuple[int, str, bytes]:
        # a live state unready for --max-unready: restart (the source's `liveness`)
        alive, why = engine.source.liveness()
        return (200 if alive else 503), TEXT, why.encode()

    def readyz() -> tuple[int, str, bytes]:
        ok, why = engine.source.readiness()
        return (200 if ok else 503), TEXT, why.encode()

    exposition = Coalesced(lambda: metrics_body(engine), metrics_interval)

    def metrics_view() -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, exposition()

    return {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics_view}


class App(Routes):
    """The verbs and the health routes of one engine; `place` decides each request's
    lane (see the module docstring)."""

    def __init__(self, engine: Extender, config: Config) -> None:
        super().__init__(health_routes(engine), pool=POOL)
        self.engine = engine
        self.config = config
        self.on_loop = config.worker_class == "inline"

    def place(self, request: Request):
        verb = verb_of(request.path) if request.method == "POST" else None
        if verb is None:
            return super().place(request)
        if verb == "bind":
            return BIND
        if not self.on_loop or request.body_size > INLINE_MAX_BYTES or self.engine.inflight.has_pending():
            return POOL
        return LOOP

    def takes_body(self, request: Request) -> bool:
        return request.method == "POST" and verb_of(request.path) is not None

    def refuse_body(self, request: Request) -> Refused | None:
        if verb_of(request.path) is not None:  # a verb by another method
            return None if request.method == "POST" else Refused(405, "method not allowed")
        return super().refuse_body(request)

    def __call__(self, request: Request) -> Reply:
        verb = verb_of(request.path)
        if verb is None:
            return super().__call__(request)
        if request.method != "POST":
            return 405, JSON, b'{"error":"method not allowed"}', {}
        self.engine.take_state_version()  # nothing left over from another call on this thread
        code, body = answer(self.engine, verb, request.body)
        version = self.engine.take_state_version()
        return code, JSON, body, ({STATE_VERSION_HEADER: version} if version else {})


def create_app(config: Config, source: ClusterSource | None = None, extender: Extender | None = None) -> App:
    """`source` defaults to the config's cluster file, watched for changes. Pass one in
    (the gunicorn launcher does, loading it once in the master before forking). The
    metrics are installed first (once per process: `extender serve` has already)."""
    metrics.install()
    if source is None:
        source = open_source(config)
        start_in_worker(source)  # under gunicorn the master handles HUP
    VERBS_INFLIGHT_BYTES.configure(config.max_inflight_bytes)  # the verbs' in-flight byte budget
    if extender is None:
        extender = Extender(config, source)
        extender.events = recorder_for(extender)  # --record-events
        extender.drift = drift_for(extender)  # --drift-*
    return App(extender, config)


def serve(app: Routes, config: Config, sockets: list | None = None, address: str | None = None) -> Listener:
    """The verbs' listener (not started) for `app`, on gunicorn's `sockets` or on
    `address`; HTTPS with `--verbs-tls`, its certificate re-read when it rotates."""
    tls = check = None
    if config.verbs_tls:
        tls = ReloadingContext(config.tls_cert_file, config.tls_private_key_file, config.client_ca_file).current
        check = client_policy(config)
    return Listener(address, app=app, sockets=sockets, name="verbs", ssl_context=tls, client_check=check,
                    foreground=True, pools={POOL: config.threads, EXPENSIVE: EXPENSIVE_SLOTS, BIND: BIND_THREADS},
                    max_body_bytes=config.max_body_bytes, timeout=REQUEST_READ_TIMEOUT,
                    idle_timeout=KEEPALIVE, max_connections=MAX_CONNECTIONS,
                    max_per_client=MAX_CONNECTIONS, budget=VERBS_INFLIGHT_BYTES)
