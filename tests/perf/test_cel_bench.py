"""perf/cel_bench.py's at-limit set stays at the limit (the units/s it reports are
meaningful only for expressions the admission estimate accepts and that cost ~1 M)."""

from __future__ import annotations

from extender.cel import MAX_COST
from extender.cel.program import compile_program
from extender.cel.runtime import Activation
from perf.cel_bench import AT_LIMIT, TAINT_DEPENDENT, compile_depths


def test_the_at_limit_expressions_compile_just_under_the_limit():
    estimates = {name: compile_program(expr).estimated_cost for name, (expr, _t) in AT_LIMIT.items()}
    at_limit = {n: e for n, e in estimates.items() if not n.startswith("issue #23")}
    assert all(900_000 < e <= MAX_COST for e in at_limit.values()), at_limit
    assert estimates["issue #23: 20x20x20 nested all()"] == 45_891


def test_the_cel_go_comparison_set_is_admitted_and_runs_every_iteration():
    for name, (expr, taint) in TAINT_DEPENDENT.items():
        program = compile_program(expr)
        assert program.estimated_cost <= MAX_COST, name
        activation = Activation(MAX_COST)
        program.runner.run((taint.key, taint.value, taint.effect), activation)
        assert activation.used > program.estimated_cost // 2, name  # no early exit


def test_the_depth_series_reports_every_depth():
    depths = compile_depths()
    assert depths["248"]["outcome"] == "compiled"
    assert depths["250"]["outcome"].startswith("expression is nested too deeply")
