"""The end-to-end benchmark through the kube-scheduler simulator runs at a tiny size
(no timing asserted: the numbers are `make perf`'s): every workload's pods are placed
without breaking a hard constraint, bound in the API where they were placed, and a pod
left unscheduled had no feasible node. Also: the simulator's vectorised in-tree
scoring matches upstream's integer formula."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perf.report import render_scheduler_e2e
from perf.scheduler_e2e import run_workloads
from perf.workloads import SCHEDULER_PERF
from tests.doubles.scheduler import MAX_NODE_SCORE, Scheduler


def test_every_workload_end_to_end_places_pods_within_the_constraints(tmp_path: Path) -> None:
    pods = 30
    out = run_workloads(50, 500, pods, None, log=lambda _m: None, workdir=tmp_path)
    assert list(out["workloads"]) == [w.name for w, _ in SCHEDULER_PERF]
    for name, w in out["workloads"].items():
        assert w["violations"] == 0, (name, w["violation_examples"])
        assert w["truth_mismatches"] == 0, (name, w["truth_mismatch_examples"])
        assert w["wrongly_unschedulable"] == 0, (name, w["wrongly_unschedulable_examples"])
        assert w["bind_errors"] == 0 and not w["errors"], (name, w["errors"])
        assert w["scheduled"] + w["unschedulable"] == pods, name
        assert w["scheduled"] > 0, name
        # the split of the time is there and adds up to no more than the wall clock
        assert w["round_trip_mean_ms"]["filter"] > 0 and w["round_trip_mean_ms"]["bind"] > 0
        assert 0 < w["extender_ms_per_pod"] and 0 < w["simulator_ms_per_pod"]
        assert (w["extender_ms_per_pod"] + w["simulator_ms_per_pod"]) * pods / 1000 <= w["wall_s"] + 0.01
    table = "\n".join(render_scheduler_e2e(out))
    assert "kube-scheduler threshold" in table and all(name in table for name in out["workloads"])


def _upstream_least_allocated(alloc: tuple[int, int], used: tuple[int, int], req: tuple[int, int]) -> int:
    """leastRequestedScore per resource (0 when capacity is 0 or exceeded), mean of cpu and memory."""
    parts = []
    for capacity, requested in ((alloc[0], used[0] + req[0]), (alloc[1], used[1] + req[1])):
        parts.append(0 if capacity == 0 or requested > capacity else (capacity - requested) * MAX_NODE_SCORE // capacity)
    return sum(parts) // 2


def test_vectorised_least_allocated_matches_the_upstream_formula() -> None:
    sched = Scheduler.__new__(Scheduler)  # only the arrays the scoring reads
    alloc = [(4000, 16 * 2**30), (1000, 2**30), (0, 2**30), (8000, 0), (2000, 8 * 2**30)]
    used = [(100, 2**30), (900, 2**29), (0, 0), (0, 0), (2000, 8 * 2**30)]
    sched._alloc = np.array(alloc, dtype=np.int64)
    free = sched._alloc - np.array(used, dtype=np.int64)
    for req in ((100, 64 * 2**20), (1500, 2**30), (0, 0)):
        got = sched._least_allocated(np.arange(len(alloc)), req, free).tolist()
        assert got == [_upstream_least_allocated(a, u, req) for a, u in zip(alloc, used, strict=True)]


def test_an_unknown_workload_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown workloads \\['sp-nope'\\]"):
        run_workloads(50, 500, 1, ("sp-nope",), log=lambda _m: None, workdir=tmp_path)
