"""`extender serve` with a CEL stub when `extender.cel.CelCache` does not exist yet,
and what-if switches for experiments the report quotes.

Only used by the harness while the CEL engine is being written (the report says so);
with the real engine present this behaves exactly like the `extender` script. The stub
is installed before gunicorn forks, so the worker inherits it.

`PERF_GC_FREEZE=1` (what-if, `python -m perf whatif`): after the worker has built the
app (and so loaded the cluster), run `gc.collect(); gc.freeze()`, to measure what
moving the long-lived snapshot out of the collector's reach does to p99.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    from perf.engine import StubCelCache, cel_cache_class

    cls, _ = cel_cache_class()
    if cls is None:
        import importlib

        module = importlib.import_module("extender.cel")
        module.CelCache = StubCelCache  # type: ignore[attr-defined]
    if os.environ.get("PERF_GC_FREEZE") == "1":
        _patch_gc_freeze()
    from extender.cli import main as cli_main

    return cli_main(sys.argv[1:])


def _patch_gc_freeze() -> None:
    import gc

    from extender.server import app as app_module

    original = app_module.create_app

    def create_app(*args, **kwargs):
        app = original(*args, **kwargs)
        gc.collect()
        gc.freeze()
        return app

    app_module.create_app = create_app


if __name__ == "__main__":
    sys.exit(main())
