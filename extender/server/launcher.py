"""Start gunicorn in-process with our defaults (`InlineWorker`, gthread answering
complete small requests on its event loop; gunicorn sets TCP_NODELAY on TCP listeners).

With several workers, Prometheus multiprocess mode (`extender.server.multiproc`) is
switched on (by `extender serve`) before any metric is created, so that `/metrics`
aggregates every worker; a dead worker's live gauges are dropped. One worker keeps its
metrics in memory.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from extender.config import Config
from extender.logs import gunicorn_logconfig

WORKER_CLASSES = {"inline": "extender.server.worker.InlineWorker", "gthread": "gthread"}

if TYPE_CHECKING:
    from extender.state.source import ClusterSource


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
        c = self.config
        settings = {
            "bind": c.listen,
            "workers": c.workers,
            "threads": c.threads,
            "worker_class": WORKER_CLASSES[c.worker_class],
            "timeout": 30,
            "graceful_timeout": 10,
            "keepalive": 75,
            "loglevel": c.log_level,
            "logconfig_dict": gunicorn_logconfig(c.log_level),
            "accesslog": None,
            "logger_class": "extender.server.launcher.QuietAccessLogger",
            "child_exit": _child_exit,
            "post_fork": self._post_fork,
            "preload_app": True,
            "limit_request_line": 8190,
        }
        if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 25.1
            settings["control_socket_disable"] = True  # no socket in $HOME; read-only roots
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self):
        from extender.logs import setup_logging
        from extender.server.app import create_app

        setup_logging(self.config.log_level)
        if self.source is None:
            from extender.state.select import open_source

            self.source = open_source(self.config)
        return create_app(self.config, source=self.source)

    def _post_fork(self, server, worker) -> None:  # noqa: ARG002 - gunicorn hook signature
        from extender.logs import setup_logging

        setup_logging(server.cfg.loglevel)
        from extender.state.select import start_in_worker

        if self.source is not None:
            start_in_worker(self.source)


class QuietAccessLogger(Logger):
    """gunicorn's logger, minus access-line work when there is no access log: with a
    logging config given, gunicorn builds every request's access atoms (~6% of a
    request) even though `gunicorn.access` sits at WARNING and drops them."""

    @property
    def access_log_enabled(self) -> bool:
        return bool(self.cfg.accesslog)


def _child_exit(server, worker) -> None:  # noqa: ARG001 - gunicorn hook signature
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # one worker: metrics live in its memory
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


