"""CEL toleration benchmark: compile, cached-program evaluation and memo-hit costs.

Run ``python perf/cel_bench.py`` (prints JSON) or call ``run_cel_bench()``.  The memo hit
must be at least 100x cheaper than compile + evaluate (issue 3).
"""

from __future__ import annotations

import json
import statistics
import time

from extender.cel import CelCache
from extender.cel.program import compile_program, run_program
from extender.model.objects import Taint

EXPRESSIONS = {
    "startsWith": ("taint.key.startsWith('env.example.com/')",
                   Taint("env.example.com/dev", "", "NoSchedule")),
    "semver": ("taint.key == 'node.example.com/kernel-version' && "
               "semver(taint.value).isGreaterThan(semver('5.15.0'))",
               Taint("node.example.com/kernel-version", "5.16.1", "NoSchedule")),
    "matches": ("taint.key.matches('^zone-a[12]-rack-[0-9]+$')",
                Taint("zone-a1-rack-03", "", "NoSchedule")),
}


def _median_us(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


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
    return {"expressions": results, "min_ratio": worst, "memo_100x_cheaper": worst >= 100}


if __name__ == "__main__":
    print(json.dumps(run_cel_bench(), indent=2))
