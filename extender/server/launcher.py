"""Start gunicorn in-process with our defaults (gthread workers, TCP_NODELAY).

Prometheus multiprocess mode is switched on before any metric is created, so that
`/metrics` aggregates every worker; a dead worker's live gauges are dropped.
"""

from __future__ import annotations

import os
import tempfile

from gunicorn.app.base import BaseApplication

from extender.config import Config


def prepare_multiprocess_metrics() -> str:
    """Point prometheus-client at a fresh directory; must run before importing metrics."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        path = tempfile.mkdtemp(prefix="extender-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    else:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.unlink(os.path.join(path, name))
    return path


class ExtenderServer(BaseApplication):
    def __init__(self, config: Config) -> None:
        self.config = config
        super().__init__()

    def load_config(self) -> None:
        c = self.config
        settings = {
            "bind": c.listen,
            "workers": c.workers,
            "threads": c.threads,
            "worker_class": "gthread",
            "timeout": 30,
            "graceful_timeout": 10,
            "keepalive": 75,
            "loglevel": c.log_level,
            "accesslog": None,
            "child_exit": _child_exit,
            "post_fork": _post_fork,
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
        return create_app(self.config)


def _post_fork(server, worker) -> None:  # noqa: ARG001 - gunicorn hook signature
    from extender.logs import setup_logging

    setup_logging(server.cfg.loglevel)


def _child_exit(server, worker) -> None:  # noqa: ARG001 - gunicorn hook signature
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def serve(config: Config) -> int:
    prepare_multiprocess_metrics()
    ExtenderServer(config).run()
    return 0
