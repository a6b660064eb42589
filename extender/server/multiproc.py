"""Prometheus multiprocess set-up, made before `extender.metrics.install()` creates any metric."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# The process that set multiprocess mode up (gunicorn's master): its process_* metrics
# are the server's, since the multiprocess registry has none of its own.
MAIN_PID: int | None = None


def prepare_multiprocess_metrics() -> str:
    """Point prometheus-client at a fresh directory; must run before `metrics.install()`."""
    global MAIN_PID
    MAIN_PID = os.getpid()
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        path = tempfile.mkdtemp(prefix="extender-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
        atexit.register(_remove_if_creator, path, os.getpid())
    else:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.unlink(os.path.join(path, name))
    return path


def _remove_if_creator(path: str, creator: int) -> None:
    """Remove the directory we created, in the process that created it only: forked
    gunicorn workers inherit atexit handlers and must not pull it from under the rest."""
    if os.getpid() == creator:
        shutil.rmtree(path, ignore_errors=True)
