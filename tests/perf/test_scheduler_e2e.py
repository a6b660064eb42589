"""The end-to-end benchmark through the real kube-scheduler runs at a tiny size (no
timing asserted: the numbers are `make perf`'s): both modes schedule the workload's
pods without a placement problem, the breakdown is there and the report renders it.
Fails, naming it, without `$KUBE_SCHEDULER_BINARY` (tests/e2e/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.report import render_scheduler_e2e
from perf.scheduler_e2e import run_workloads
from testing.harness import require_binary


def test_both_modes_schedule_a_workload_and_the_report_renders_it(tmp_path: Path) -> None:
    binary = require_binary()
    pods = 10
    out = run_workloads(30, 120, pods, ("sp-inclusion",), log=lambda _m: None, workdir=tmp_path,
                        binary=binary, warmup=3, rounds=2)
    assert [(r["round"], r["mode"]) for r in out["runs"]] == [
        (0, "in-tree"), (0, "extender"), (1, "extender"), (1, "in-tree")]  # alternated, ABBA
    assert list(out["modes"]) == ["in-tree", "extender"]
    for mode in out["modes"].values():
        w = mode["workloads"]["sp-inclusion"]
        assert w["problems"] == 0, w["problem_examples"]
        assert w["wrongly_unschedulable"] == 0, w["wrongly_unschedulable_examples"]
        assert w["scheduled"] + w["unschedulable"] == 2 * pods and w["scheduled"] > 0
        assert w["pods_per_s"] > 0 and w["algorithm_ms_per_pod"] > 0 and len(w["pods_per_s_runs"]) == 2
        assert w["cpu_ms_per_pod"]["kube_scheduler"] > 0
    ext = out["modes"]["extender"]["workloads"]["sp-inclusion"]
    assert ext["extender_handler_mean_ms"]["filter"] > 0 and ext["extender_handler_mean_ms"]["bind"] > 0
    assert ext["cpu_ms_per_pod"]["extender"] > 0
    assert ext["wire_bytes_per_pod"]["filter request"] > ext["wire_bytes_per_pod"]["filter answer"] > 0
    assert out["modes"]["in-tree"]["workloads"]["sp-inclusion"]["extender_calls_ms_per_pod"] is None
    assert "extender" not in out["modes"]["in-tree"]["workloads"]["sp-inclusion"]["cpu_ms_per_pod"]
    assert out["ratio"]["sp-inclusion"] > 0 and len(out["ratio_per_round"]) == 2
    table = "\n".join(render_scheduler_e2e(out))
    assert "| sp-inclusion |" in table and "kube-scheduler threshold" in table and " KB |" in table


def test_an_unknown_workload_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown workloads \\['sp-nope'\\]"):
        run_workloads(50, 500, 1, ("sp-nope",), log=lambda _m: None, workdir=tmp_path, binary="unused")


def test_the_ceiling_mode_replays_the_extenders_answers_and_kube_scheduler_binds(tmp_path: Path) -> None:
    binary = require_binary()
    pods = 10
    out = run_workloads(30, 120, pods, ("sp-inclusion",), log=lambda _m: None, workdir=tmp_path,
                        binary=binary, warmup=3, rounds=1, modes=("in-tree", "replay"))
    ceiling = out["modes"]["replay"]["workloads"]["sp-inclusion"]
    assert ceiling["scheduled"] == pods and ceiling["placements_checked"] is False
    assert ceiling["cpu_ms_per_pod"]["replay"] >= 0 and ceiling["extender_calls_ms_per_pod"] is not None
    # the extender answered the first filter and prioritize of the workload, never a bind
    wire = ceiling["wire_bytes_per_pod"] or {}
    assert wire.get("filter request", 0) > 0 and "bind request" not in wire
    assert out["ratio_ceiling"]["sp-inclusion"] > 0 and "ratio" not in out
    table = "\n".join(render_scheduler_e2e(out))
    assert "**The ceiling**" in table and "| sp-inclusion |" in table
