"""Performance harness for the extender (issue 5): generator, workloads, drivers, report.

Run with `python -m perf run --quick|--full` (`make perf-quick` / `make perf`), or
`python -m perf generate ...` to write a synthetic cluster file. Nothing here is
imported by the extender itself; the harness only drives it from the outside
(in-process through `extender.engine.Extender`, over HTTP through `extender serve`).
In-process, the metrics are installed here, as `extender serve` installs them at start-up.
"""

from extender import metrics

metrics.install()
