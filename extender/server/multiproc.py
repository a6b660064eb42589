"""Prometheus multiprocess set-up, importable before anything that creates a metric."""

from __future__ import annotations

import os
import tempfile


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
