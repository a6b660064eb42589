"""How long a frozen watch stream goes unnoticed, by `--max-staleness` (issue #32).

    .venv/bin/python -m perf.staleness [--values 60,30,20,15] [--trials 3]

A live source against the API-server double (the example cluster). Two cases:

* **quiet**: only the Node stream falls silent (a half-dead connection; the other kinds'
  streams and the API are fine) and a node is tainted; nothing is being scheduled, so
  no bind or pod witnesses the stream: only the silence watchdog, which probes a
  stream silent for `probe_interval(max_staleness)`, finds it. Reported: seconds from
  the taint to the state holding it (the stream resumed), and the probe requests per
  minute the quiet cluster costs (every kind is silent there).
* **unreachable**: the API stops answering (every request hangs): seconds until the
  verbs refuse (`stale`), i.e. how long verdicts are still given on the last state.

The double sends a bookmark every second on a healthy stream; a real API server about
once a minute, so on a real quiet cluster the probes are most of the confirmations.
Results go to perf/results/staleness.json and docs/operate/failures.md quotes them.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from perf import options
from perf.output import write_result

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results" / "staleness.json"
OPENAPI_CLIENT = "OpenAPI-Generator"


def _source(api, tmp: Path, max_staleness: float):
    from extender.state.kubeapi import Backoff
    from extender.state.live import LiveSource

    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    source = LiveSource.connect(str(kubeconfig), False, max_staleness=max_staleness,
                                backoff=lambda: Backoff(0.05, 1.0)).start()
    if not source.wait_synced(30):
        raise RuntimeError("the live source did not sync")
    return source


def _probes(api) -> int:
    """Probe requests so far: one-second watches (`timeoutSeconds=1`)."""
    return sum(1 for r in list(api.requests) if re.search(r"timeoutSeconds=1(&|$)", r))


def quiet(max_staleness: float, tmp: Path) -> tuple[float, float]:
    """(seconds a taint on a frozen Node stream went unseen, probe requests per minute)."""
    from extender.state import load_objects
    from testing.apiserver import FakeApiServer

    with FakeApiServer(bookmark_interval=60.0) as api:
        api.load(load_objects(ROOT / "extender" / "data" / "cluster.yaml"))
        source = _source(api, tmp, max_staleness)
        try:
            time.sleep(2.0)  # settled, the streams open
            before = _probes(api)
            probes_from = time.monotonic()
            api.freeze_watches(agent=OPENAPI_CLIENT, resource="nodes")
            node = api.objects("nodes")[0]
            spec = node.setdefault("spec", {})
            spec["taints"] = [*(spec.get("taints") or []), {"key": "maintenance", "value": "now", "effect": "NoSchedule"}]
            api.update("nodes", node)
            tainted = time.monotonic()
            name = node["metadata"]["name"]
            while not any(t.key == "maintenance" for t in source.snapshot().nodes.by_name[name].taints):
                if time.monotonic() - tainted > 4 * max_staleness:
                    raise RuntimeError("the frozen Node stream was never found")
                time.sleep(0.05)
            unseen = time.monotonic() - tainted
            probes = _probes(api) - before
            return unseen, 60.0 * probes / max(time.monotonic() - probes_from, 1e-9)
        finally:
            source.stop(timeout=1.0)


def unreachable(max_staleness: float, tmp: Path) -> float:
    """Seconds from the API hanging to the verbs refusing (`stale`)."""
    from extender.state import load_objects
    from testing.apiserver import FakeApiServer

    with FakeApiServer(bookmark_interval=60.0) as api:
        api.load(load_objects(ROOT / "extender" / "data" / "cluster.yaml"))
        source = _source(api, tmp, max_staleness)
        try:
            time.sleep(2.0)
            api.freeze_watches(agent=OPENAPI_CLIENT)
            api.faults.delay_seconds, api.faults.delay_match = 3600.0, ""  # every new request hangs
            hung = time.monotonic()
            while source.unready() is None:
                time.sleep(0.05)
            return time.monotonic() - hung
        finally:
            api.faults.delay_seconds = 0.0
            source.stop(timeout=1.0)


def main(argv: list[str] | None = None) -> None:
    parser = options.parser("staleness", __doc__)
    parser.add_argument("--values", default="60,30,20,15", help="--max-staleness values to compare")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    from extender.state.watchdog import probe_interval

    rows = []
    for value in (float(v) for v in args.values.split(",")):
        unseen, rates, refused = [], [], []
        for _ in range(args.trials):
            with tempfile.TemporaryDirectory() as tmp:
                seconds, rate = quiet(value, Path(tmp))
                unseen.append(seconds)
                rates.append(rate)
                refused.append(unreachable(value, Path(tmp)))
        row = {"max_staleness": value, "probe_interval": round(probe_interval(value), 1),
               "frozen_node_stream_unseen_s": [round(s, 1) for s in unseen],
               "probes_per_minute": round(statistics.median(rates), 1),
               "unreachable_until_refused_s": [round(s, 1) for s in refused]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS, {"measured": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1)


if __name__ == "__main__":
    main()
