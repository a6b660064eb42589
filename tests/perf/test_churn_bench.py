"""The churn benchmark runs end to end at a tiny size (no timing asserted: the numbers
are the benchmark's, `make perf`), and its bookkeeping is right: every pod is bound or
deleted, the node updates happen, the mixed workload and the no-two-alike variant are
measured."""

from __future__ import annotations

from pathlib import Path

from perf.churn import DISTINCT, NODE_UPDATE_EVERY, run_size


def test_churn_benchmark_binds_every_pod_and_reports_both_workloads(tmp_path: Path) -> None:
    requests, warmup = NODE_UPDATE_EVERY + 10, 4
    out = run_size(60, 300, requests, tmp_path, log=lambda _m: None, warmup=warmup, distinct=True)
    assert set(out["runs"]) == {"off", DISTINCT}
    for run in out["runs"].values():
        assert run["pods"] == requests + warmup
        assert run["bound"] + run["infeasible"] == run["pods"]
        assert run["bound"] > 0
        assert run["node_updates"] == (requests + warmup - 1) // NODE_UPDATE_EVERY
        assert run["pair"]["n"] == requests and len(run["pair_ms_series"]) == requests
        assert run["initial_sync_s"] > 0 and run["rss_after"]["worker_mb"] > 0
    assert "bar" not in out  # no bar is defined at 60 nodes
