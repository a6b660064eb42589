"""Multiprocess metrics only work if no metric exists before `serve` sets
PROMETHEUS_MULTIPROC_DIR: importing the CLI must not create metrics."""

from __future__ import annotations

import subprocess
import sys


def test_cli_and_config_do_not_import_metrics():
    code = (
        "import sys, extender.cli, extender.config, extender.server.multiproc, extender.server.launcher;"
        "extender.config.build_config({'annotation_prefix': 'a.io'});"  # validates with matching
        "print('extender.metrics' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
