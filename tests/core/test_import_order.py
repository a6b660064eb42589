"""Multiprocess metrics only work if no metric exists before `serve` sets
PROMETHEUS_MULTIPROC_DIR: importing the modules creates no metric, `metrics.install()`
creates them all, once, whatever was imported before it."""

from __future__ import annotations

import os
import subprocess
import sys


def run(code: str) -> str:
    """`code`'s output in a fresh interpreter, not in multiprocess mode to begin with."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


OURS = "[n for n in REGISTRY._names_to_collectors if n.startswith(('extender_', 'scheduler_', 'controller_runtime_'))]"


def test_importing_and_configuring_creates_no_metric():
    code = (
        "import extender.cli, extender.config, extender.server.launcher, extender.server.app, extender.engine;"
        "from extender import metrics; from prometheus_client import REGISTRY;"
        "extender.config.build_config({'annotation_prefix': 'a.io'});"  # validates with matching
        f"print(metrics.installed(), {OURS})"
    )
    assert run(code) == "False []"


def test_a_collector_asked_for_before_install_says_so():
    code = (
        "from extender import metrics\n"
        "try:\n    metrics.BINDINGS_TOTAL\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    assert "extender.metrics.install()" in run(code)


def test_install_creates_every_collector_once():
    code = (
        "from extender import metrics; from prometheus_client import REGISTRY;"
        "metrics.install(); first = metrics.BINDINGS_TOTAL; n = len(" + OURS + ");"
        "metrics.install(); print(metrics.BINDINGS_TOTAL is first, n == len(" + OURS + "), n > 40)"
    )
    assert run(code) == "True True True"


def test_multiprocess_mode_set_up_after_prometheus_client_was_imported(tmp_path):
    """`serve` decides on multiprocess mode after the configuration is read, when
    prometheus-client is long imported: `install()` still writes the workers' files."""
    code = (
        "import extender.server.app, prometheus_client;"  # prometheus-client imported first
        "from extender.server.multiproc import prepare_multiprocess_metrics;"
        "from extender import metrics;"
        "import os; os.environ['PROMETHEUS_MULTIPROC_DIR'] = " + repr(str(tmp_path)) + ";"
        "prepare_multiprocess_metrics(); metrics.install();"
        "metrics.BINDINGS_TOTAL.labels('success').inc(3);"
        "from prometheus_client import CollectorRegistry, multiprocess;"
        "registry = CollectorRegistry(); multiprocess.MultiProcessCollector(registry);"
        "print(registry.get_sample_value('extender_bindings_total', {'result': 'success'}))"
    )
    assert run(code) == "3.0"
    assert any(p.name.startswith("counter_") and p.suffix == ".db" for p in tmp_path.iterdir())


def test_serving_imports_nothing_of_the_kubectl_plugin():
    """`extender serve` runs without the kubectl-extender distribution (a dependency that
    may be removed): neither the command line it parses nor the modules that serve import
    the plugin's package (tests/deploy/test_release.py serves with it uninstalled)."""
    code = (
        "import sys, extender.cli, extender.server.launcher, extender.server.app, extender.events,"
        " extender.drift.evaluate, extender.server.explain_routes, extender.server.whatif_routes,"
        " extender.whatif.answer, extender.explain;"
        "extender.cli.build_parser(change_flags=False).parse_args(['serve', '--cluster', 'c.yaml']);"
        "print(sorted(m for m in sys.modules if m.startswith('kubectl_extender')))"
    )
    assert run(code) == "[]"
