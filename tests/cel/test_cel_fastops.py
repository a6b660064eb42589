"""The evaluator's fast paths (``extender.cel.fastops``: operands read in place, charges
fused, typed conversions, one-closure unary calls) against the generic closures they
shortcut (``fastops.FAST = False``): the same outcome, message and units used at every
cost limit, so the limit stops a fused charge at the unit where the unfused charges stop
(the generic closures are what ``test_cel_oracle`` holds to cel-go's units)."""

from __future__ import annotations

import os
import random
import secrets

from kubegen import KubeGen

from extender.cel import fastops
from extender.cel.environment import CompileError
from extender.cel.program import build, evaluate

TAINTS = [("node.example.com/kernel-version", "5.16.1", "NoSchedule"), ("", "", ""),
          ("k", "42", "NoExecute"), ("zone-a1-rack-7", "1Gi", "PreferNoSchedule")]

#: every fused form: variable/constant operands on either side, taint fields against
#: constants and computed strings, sizes of fields, conversions, operands that fail
#: (overflow, division by zero, a failed conversion) before, between and after leaves
SHAPES = [
    "[1, 2, 3].all(x, [4, 5].all(y, x + y > 0 && x * y != 7 && x - y < 10))",
    "[1, 2, 3].exists(x, 3 - x == 0 || 10 / x == 5 || 2 % x == 0)",
    "lists.range(4).all(x, lists.range(3).all(y, (x + y) % 7 != 3 || taint.effect == "
    "'NoSchedule' || x < 0))",
    "lists.range(5).all(x, x + size(taint.key) > 0 && size(taint.value) - x != 99)",
    "lists.range(4).all(x, taint.key.startsWith('zone-') || taint.key.endsWith('version') "
    "|| x >= 0)",
    "lists.range(6).all(x, string(x * 2) != taint.value && taint.value != string(x))",
    "lists.range(6).all(x, int(taint.key.size()) != x - 100 && taint.value != '')",
    "lists.range(6).all(x, '' != taint.key || 'NoSchedule' == taint.effect)",
    "lists.range(3).all(x, 9223372036854775807 + x > 0 || x * 9223372036854775807 > 1)",
    "lists.range(3).all(x, x / (x - 1) >= 0 || (x - 1) % x == 0)",
    "lists.range(3).exists(x, int(taint.value) + x == 43 || x - int(taint.key) == 0)",
    "lists.range(3).all(x, string(x) == string(taint.value) || 1 + 1 == 2)",
    "[1, 2].all(x, x == 1 || x != 2) && 5 + 3 == 8 && -9223372036854775808 % -1 == 0",
    "lists.range(3).all(x, lists.range(3).exists_one(y, x * y == 2 - x))",
    "lists.range(4).map(x, x * size(taint.key)).filter(y, y % 2 == 0).size() >= 0",
]


def outcomes(expression: str, limits: list[int]) -> list:
    """(outcome, units used) per taint and limit.  The message is not compared: a fast
    path's error says what the stock function's says without its name prefix (as it
    always has; cel-go's messages are not what the oracle compares either)."""
    built = build(expression)
    return [evaluate(built.runner, *taint, cost_limit=limit)[::2]
            for taint in TAINTS for limit in limits]


#: the most units an expression may use here: every limit is walked twice per taint
MOST_UNITS = 100_000


def most_units(expression: str) -> int:
    built = build(expression)
    return max(evaluate(built.runner, *taint, cost_limit=10**9)[2] for taint in TAINTS)


def limits_of(expression: str, rng: random.Random) -> list[int]:
    """Every limit up to the most an evaluation uses when that is small, else a sample
    with the ends."""
    most = most_units(expression)
    assert most < MOST_UNITS, f"too costly for this test: {expression}"
    if most <= 150:
        return list(range(most + 2))
    return sorted({0, 1, most - 1, most, most + 1, *rng.sample(range(most), 40)})


def corpus(seed: int) -> list[str]:
    """60 generated expressions that compile and stay under `MOST_UNITS` (the generator
    sometimes nests ranges into hundreds of thousands of units: seed 3334765632)."""
    gen = KubeGen(seed)
    out = []
    while len(out) < 60:
        expression = gen.expression()
        try:
            if most_units(expression) >= MOST_UNITS:
                continue
        except CompileError:
            continue
        out.append(expression)
    return out


def assert_same_at_every_limit(expressions: list[str], rng: random.Random) -> int:
    compared = 0
    for expression in expressions:
        limits = limits_of(expression, rng)
        fast = outcomes(expression, limits)
        fastops.FAST = False
        try:
            generic = outcomes(expression, limits)
        finally:
            fastops.FAST = True
        assert fast == generic, expression
        compared += len(fast)
    return compared


def test_fused_shapes_charge_as_the_generic_closures_at_every_limit():
    assert assert_same_at_every_limit(SHAPES, random.Random(0)) > 3_000


def test_generated_expressions_charge_as_the_generic_closures(record_property):
    """A new corpus each run (the seed drawn in the test, not at collection: xdist's
    workers must collect the same test ids); `CEL_ORACLE_SEED` replays one."""
    seed = int(os.environ.get("CEL_ORACLE_SEED") or secrets.randbits(32))
    record_property("seed", seed)
    print(f"seed {seed}")
    assert assert_same_at_every_limit(corpus(seed), random.Random(seed)) > 1_000


def test_the_fast_paths_are_taken():
    """The switch really selects the other compilation (else the comparisons above
    compare a path with itself)."""
    expression = "lists.range(3).all(x, x + 1 > 0 && taint.key != '' && string(x) != '')"
    fast = _closures(build(expression).runner.root)
    fastops.FAST = False
    try:
        generic = _closures(build(expression).runner.root)
    finally:
        fastops.FAST = True
    assert {"var_const", "then_const", "field_equals", "typed_conversion"} <= fast
    assert not {"var_const", "then_const", "field_equals", "typed_conversion"} & generic


def _closures(fn) -> set[str]:
    """The names of the functions a compiled closure reaches through its cells."""
    seen, stack = set(), [fn]
    while stack:
        f = stack.pop()
        seen.add(f)
        for cell in f.__closure__ or ():
            value = cell.cell_contents
            for v in value if isinstance(value, list) else [value]:
                if getattr(v, "__closure__", None) is not None and v not in seen:
                    stack.append(v)
    return {f.__name__ for f in seen}
