"""Start gunicorn in-process with our defaults: the master, `--workers` processes of
`extender.server.worker.ExtenderWorker` (each serving the verbs' port with
`extender.server.listener`), the app preloaded.

With several workers, Prometheus multiprocess mode (`extender.server.multiproc`) is
switched on (by `extender serve`) before `extender.metrics.install()` creates the
metrics, so that `/metrics` aggregates every worker; a dead worker's live gauges are
dropped. One worker keeps its metrics in memory.
"""

from __future__ import annotations

import os
import resource
import sys

from gunicorn.app.base import BaseApplication
from prometheus_client import multiprocess

from extender.config import Config, ConfigError
from extender.logs import gunicorn_logconfig, setup_logging
from extender.server.app import MAX_CONNECTIONS, METRICS_INTERVAL, create_app, health_routes
from extender.server.explain_routes import ExplainRoutes
from extender.server.listener import Listener
from extender.server.opening import open_source, start_in_worker
from extender.server.webhook import start_webhook
from extender.server.whatif_routes import SideRoutes, WhatIfRoutes
from extender.state.gcfreeze import return_large_blocks
from extender.state.source import ClusterSource

SWITCH_INTERVAL = 0.001  # seconds; see _post_fork
WORKER = "extender.server.worker.ExtenderWorker"  # both --worker-class values (see App)


class ExtenderServer(BaseApplication):
    """gunicorn with the app preloaded. File mode: the cluster file is parsed once, in
    the master, and shared copy-on-write by the forked workers; each worker then watches
    the file itself (threads do not survive a fork) and catches up right after forking
    (falling back to the last good file a previous worker loaded), so a restarted
    worker never serves a stale file. Live mode: each worker starts its own watch after
    the fork (one worker, the default, is one watch)."""

    def __init__(self, config: Config, source: ClusterSource | None = None) -> None:
        self.config = config
        self.source = source
        super().__init__()

    def load_config(self) -> None:
        raise_open_files_limit()
        return_large_blocks()  # before the state is loaded and the workers forked
        c = self.config
        settings = {
            "bind": c.listen,
            "workers": c.workers,
            "worker_class": WORKER,
            "timeout": 30,
            "graceful_timeout": 10,
            "loglevel": c.log_level,
            "logconfig_dict": gunicorn_logconfig(c.log_level),
            "accesslog": None,
            "child_exit": _child_exit,
            "post_fork": self._post_fork,
            "preload_app": True,
        }
        if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 25.1
            settings["control_socket_disable"] = True  # no socket in $HOME; read-only roots
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self):
        setup_logging(self.config.log_level)
        if self.source is None:
            self.source = open_source(self.config, serving=True)
        return create_app(self.config, source=self.source)

    def _post_fork(self, server, worker) -> None:  # noqa: ARG002 - gunicorn hook signature
        setup_logging(server.cfg.loglevel)
        if self.source is not None:
            start_in_worker(self.source)
        # A thread waiting for the GIL gets it after at most this long. Each socket call
        # of a probe waits once, so with the pool busy Python's default interval adds up
        # to probes slow enough to fail under load; a shorter one keeps them quick
        # (perf/PERFORMANCE.md). Without contention it costs nothing (the interval only
        # matters while another thread waits).
        sys.setswitchinterval(SWITCH_INTERVAL)
        self._start_metrics_listener(server.app.wsgi().engine)
        if self.config.webhook_listen:
            start_webhook(self.config)

    def _start_metrics_listener(self, engine) -> None:
        """`--metrics-listen`: health and metrics on their own threads in every worker
        (SO_REUSEPORT), never queued behind verb work (see extender.server.listener)."""
        if not self.config.metrics_listen:
            return
        Listener(self.config.metrics_listen, health_routes(engine, METRICS_INTERVAL),
                 dispatch=explain_dispatch(engine)).start()


def explain_dispatch(engine):
    """`/explain` and `/drift` (`extender.server.explain_routes`) and `/whatif`
    (`extender.server.whatif_routes`) on the side listener; each answers 404 saying how
    to turn it on while its flag is off."""
    c = engine.config
    return SideRoutes(ExplainRoutes(engine, c.explain_endpoint, c.explain_rate, c.explain_burst,
                                    drift=engine.drift, drift_enabled=c.drift_endpoint),
                      WhatIfRoutes(engine, c.whatif_endpoint, engine.drift, c.explain_rate, c.explain_burst))


def check_metrics_listen(address: str) -> None:
    """Fail at start-up, with the flag named, if `--metrics-listen` cannot be bound
    (rather than in every forked worker)."""
    if not address:
        return
    try:
        probe = Listener(address, {})
    except OSError as exc:
        raise ConfigError(f"--metrics-listen: cannot listen on {address}: {exc.strerror or exc}") from None
    probe.close()


def raise_open_files_limit() -> None:
    """Up the soft RLIMIT_NOFILE to the hard limit (at most MAX_CONNECTIONS + 1,024):
    every connection is a file descriptor, and the usual soft limit is 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_CONNECTIONS + 1024
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _child_exit(server, worker) -> None:  # noqa: ARG001 - gunicorn hook signature
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # one worker: metrics live in its memory
    multiprocess.mark_process_dead(worker.pid)


