"""CEL toleration benchmark: compile, evaluation and memo-hit costs, units per second on
expressions at the cost limit, and compile time over the nesting series.

    python -m perf.cel_bench                 # JSON
    python -m perf.cel_bench --ab REV        # also time REV's engine on the same
                                             # expressions, interleaved (A/B in one run)

``run_cel_bench()`` is what ``make perf`` records.  The reference figure is the KEP's:
Kubernetes sizes the 1,000,000-unit per-call limit at "roughly 0.1 second" of cel-go,
i.e. 10 M units/s.  Issue #23 asks for at least 2 M units/s on the at-limit set and at
most 10 µs for a simple member call.  The memo hit must stay at least 100x cheaper than
compile + evaluate (issue 3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from extender.cel import CelCache
from extender.cel.program import compile_program, run_program
from extender.cel.runtime import Budget
from extender.model.objects import Taint

CEL_GO_UNITS_PER_SECOND = 10_000_000  # KEP-5500 / PerCallLimit: 1,000,000 units ~ 0.1 s
TARGET_UNITS_PER_SECOND = 2_000_000  # issue #23
LONG_KEY = Taint("node.example.com/" + "k" * 300, "5.16.1", "NoSchedule")  # 317 bytes

EXPRESSIONS = {
    "startsWith": ("taint.key.startsWith('env.example.com/')",
                   Taint("env.example.com/dev", "", "NoSchedule")),
    "semver": ("taint.key == 'node.example.com/kernel-version' && "
               "semver(taint.value).isGreaterThan(semver('5.15.0'))",
               Taint("node.example.com/kernel-version", "5.16.1", "NoSchedule")),
    "matches": ("taint.key.matches('^zone-a[12]-rack-[0-9]+$')",
                Taint("zone-a1-rack-03", "", "NoSchedule")),
}


def _list(n: int, item: str = "0") -> str:
    return "[" + ",".join([item] * n) + "]"


def _range(n: int) -> str:
    return "[" + ",".join(map(str, range(n))) + "]"


#: name -> (expression, taint): estimates just under 1,000,000 units, and taints that
#: make the runtime cost reach (most of) the estimate; plus the two from issue #23.
AT_LIMIT = {
    "issue #23: 64x64 nested all()": (
        f"{_list(64)}.all(a, {_list(64)}.all(b, taint.key != 'x'))", LONG_KEY),
    "issue #23: 20x20x20 nested all()": (
        f"{_list(20)}.all(a, {_list(20)}.all(b, {_list(20)}.all(c, taint.key != '')))",
        LONG_KEY),
    "nested all(), int arithmetic": (
        f"{_range(285)}.all(a, {_range(285)}.all(b, a + b >= 0))", LONG_KEY),
    "nested exists(), string equality": (
        f"{_list(285)}.exists(a, {_list(285)}.exists(b, taint.key == 'x'))", LONG_KEY),
    "split('') scan of the key": (
        f"{_list(235)}.all(a, taint.key.split('').all(c, c != '/' || a >= 0))", LONG_KEY),
    "map().filter() chain": (
        f"{_range(215)}.all(a, {_range(215)}.map(x, x * 2).filter(y, y > a).size() >= 0)",
        LONG_KEY),
    "matches() per element": (
        f"{_list(4900)}.all(a, taint.key.matches('^[a-z0-9.-]+/[a-z0-9-]+$'))", LONG_KEY),
    "quantity() parses (library-bound)": (
        f"{_range(200)}.all(a, {_range(200)}.all(b, quantity(string(a * 200 + b) + 'Mi')"
        ".isLessThan(quantity('100Gi'))))", LONG_KEY),
}

DEPTHS = (50, 100, 150, 200, 248, 250, 1000)


def _median_us(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def units_used(expression: str, taint: Taint) -> int:
    budget = Budget(10**9)
    compile_program(expression).runner.run((taint.key, taint.value, taint.effect), budget)
    return budget.used


def time_evaluation(expression: str, taint: Taint, repeats: int) -> float:
    """Median seconds of one evaluation of an already compiled program."""
    program = compile_program(expression)
    return _median_us(lambda: run_program(program, taint.key, taint.value, taint.effect),
                      repeats) / 1e6


def at_limit(repeats: int = 5) -> dict:
    rows = {}
    for name, (expression, taint) in AT_LIMIT.items():
        estimate = compile_program(expression).estimated_cost
        used = units_used(expression, taint)
        seconds = time_evaluation(expression, taint, repeats)
        rows[name] = {"estimated_cost": estimate, "units_used": used,
                      "ms_per_evaluation": round(seconds * 1e3, 2),
                      "units_per_second": round(used / seconds),
                      "share_of_cel_go_speed": round(used / seconds / CEL_GO_UNITS_PER_SECOND, 3)}
    return rows


def compile_depths() -> dict:
    """Compile time (ms) of nested list literals by depth, and the outcome."""
    out = {}
    for depth in DEPTHS:
        expression = "[" * depth + "1" + "]" * depth + " != []"
        start = time.perf_counter()
        try:
            compile_program(expression)
            outcome = "compiled"
        except Exception as exc:  # CompileError: the nesting / length message
            outcome = str(exc)
        out[str(depth)] = {"ms": round((time.perf_counter() - start) * 1e3, 1),
                           "outcome": outcome}
    return out


def run_cel_bench(compiles: int = 200, evaluations: int = 2000, memo_hits: int = 20000) -> dict:
    results: dict = {}
    for name, (expr, taint) in EXPRESSIONS.items():
        compile_us = _median_us(lambda e=expr: compile_program(e), compiles)
        program = compile_program(expr)
        eval_us = _median_us(lambda p=program, t=taint: run_program(p, t.key, t.value, t.effect),
                             evaluations)
        cache = CelCache()
        cache.evaluate(expr, taint)
        memo_us = _median_us(lambda c=cache, e=expr, t=taint: c.evaluate(e, t), memo_hits)
        results[name] = {
            "compile_us": round(compile_us, 2),
            "eval_cached_program_us": round(eval_us, 2),
            "memo_hit_us": round(memo_us, 3),
            "ratio_compile_eval_over_memo": round((compile_us + eval_us) / memo_us, 1),
        }
    worst = min(r["ratio_compile_eval_over_memo"] for r in results.values())
    limit_rows = at_limit()
    slowest = min(r["units_per_second"] for r in limit_rows.values())
    return {"expressions": results, "min_ratio": worst, "memo_100x_cheaper": worst >= 100,
            "at_limit": limit_rows, "min_units_per_second": slowest,
            "cel_go_units_per_second": CEL_GO_UNITS_PER_SECOND,
            "meets_2m_units_per_second": slowest >= TARGET_UNITS_PER_SECOND,
            "member_call_us": results["startsWith"]["eval_cached_program_us"],
            "compile_depths": compile_depths(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


# --- A/B against another revision's engine, in one run ----------------------------------

_CHILD = """
import json, statistics, sys, time
from extender.cel.program import compile_program, run_program
exprs = json.loads(sys.stdin.read())
out = {}
for name, (expression, key, value, effect) in exprs.items():
    p = compile_program(expression)
    t = time.perf_counter(); run_program(p, key, value, effect); out[name] = time.perf_counter() - t
print(json.dumps(out))
"""


def ab(revision: str, rounds: int = 3) -> dict:
    """Seconds per evaluation, this tree (A) and ``revision``'s engine (B), interleaved
    round by round so both see the same machine load."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(repo), "archive", revision, "extender"],
                             check=True, capture_output=True).stdout
    exprs = {n: (e, t.key, t.value, t.effect) for n, (e, t) in AT_LIMIT.items()}
    a: dict[str, list[float]] = {n: [] for n in exprs}
    b: dict[str, list[float]] = {n: [] for n in exprs}
    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=BytesIO(archive)).extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        for _ in range(rounds):
            for name, (expression, taint) in AT_LIMIT.items():
                a[name].append(time_evaluation(expression, taint, 1))
            done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(exprs),
                                  env=env, check=True, capture_output=True, text=True, cwd=tmp)
            for name, seconds in json.loads(done.stdout).items():
                b[name].append(seconds)
    return {name: {"a_ms": round(statistics.median(a[name]) * 1e3, 2),
                   "b_ms": round(statistics.median(b[name]) * 1e3, 2),
                   "speedup": round(statistics.median(b[name]) / statistics.median(a[name]), 1)}
            for name in exprs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ab", metavar="REV", help="also time REV's engine (git revision)")
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args(argv)
    report = run_cel_bench()
    if ns.ab:
        report["ab"] = {"revision": ns.ab, "rows": ab(ns.ab, ns.rounds)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
