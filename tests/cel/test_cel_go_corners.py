"""The ten classes of difference hand-written probes found in the corners no generator
reached, each a row with cel-go's answer (v0.26, Kubernetes' environment; every row is
also run through the oracle here, so a row that stops being cel-go's answer fails).

Outcomes: ``true``/``false``, ``error`` (evaluation error), ``compile`` (compile error).
"""

from __future__ import annotations

import pytest
from test_cel_oracle import oracle_binary, run_oracle

from extender.cel.environment import CompileError
from extender.cel.program import build, evaluate

TAINT = {"key": "env.example.com/dev", "value": "5.16.1", "effect": "NoSchedule"}
ROWS = [
    # 1. lists and maps as map keys: kept by identity (cel-go keys its Go map by pointer)
    ("map keys", "{[1]: 1}.size() == 1", "true"),
    ("map keys", "{[1]: 1, [1]: 2}.size() == 2", "true"),
    ("map keys", "{{1: 2}: 1}.exists(k, k[1] == 2)", "true"),
    ("map keys", "[1] in {[1]: 1}", "false"),
    ("map keys", "{[1]: 1} == {[1]: 1}", "false"),
    ("map keys", "{[1]: 1}[[1]] == 1", "compile"),
    ("map keys", "{[1]: 1}[[taint.key.size()]] == 1", "error"),
    ("map keys", "{[taint.key]: 1}.size() == 1", "true"),
    ("map keys", "{dyn(1): 'a', dyn(1u): 'b'}.size() == 2", "true"),
    ("map keys", "{dyn(1): 'a', dyn(1.0): 'b'}[1.0] == 'b'", "true"),
    ("map keys", "{dyn(true): 'd', dyn(1u): 'e'}[1] == 'e'", "true"),
    # 2. isInteger / asInteger: Quantity.AsInt64 refuses an inf.Dec and a negative scale
    ("asInteger", "quantity('1.5Gi').asInteger() == 1610612736", "error"),
    ("asInteger", "quantity('1.5Gi').isInteger()", "false"),
    ("asInteger", "quantity('0.5Ki').isInteger()", "false"),
    ("asInteger", "quantity('1500m').isInteger()", "false"),
    ("asInteger", "quantity('0.0').isInteger()", "false"),
    ("asInteger", "quantity('9223372036854775807').isInteger()", "false"),
    ("asInteger", "quantity('100Ti').isInteger()", "false"),
    ("asInteger", "quantity('1.5k').asInteger() == 1500", "true"),
    ("asInteger", "quantity('1e18').isInteger()", "true"),
    ("asInteger", "quantity('1').add(9223372036854775807).isInteger()", "false"),
    # 3. asApproximateFloat: float64(mantissa) * math.Pow10(exponent)
    ("asApproximateFloat", "quantity('1').add(quantity('1m')).asApproximateFloat() == 1.001",
     "false"),
    ("asApproximateFloat", "quantity('1001m').asApproximateFloat() == 1.0010000000000001",
     "true"),
    ("asApproximateFloat", "quantity('7Ei').asApproximateFloat() == 8070450532247928832.0",
     "true"),
    ("asApproximateFloat", "quantity('5').sub(-9223372036854775808).asApproximateFloat() < 0.0",
     "true"),
    # 4. %e without narrow spaces
    ("format %e", "'%e'.format([1234.5]) == '1.234500×10⁰³'", "true"),
    ("format %e", "'%e'.format([-1e-300]) == '-1.000000×10⁻³⁰⁰'", "true"),
    # 5. %e pads to the width (the precision)
    ("format %e pad", "'%e'.format([double('inf')]) == '∞'", "false"),
    ("format %e pad", "'%e'.format([double('inf')]) == '     ∞'", "true"),
    ("format %e pad", "'%e'.format([double('nan')]) == '   NaN'", "true"),
    ("format %e pad", "'%.20e'.format([1.5]) == '       1.500000×10⁰⁰'", "true"),
    ("format %e pad", "'%.0e'.format([double('-inf')]) == '-∞'", "true"),
    # 6. negative zero
    ("format -0.0", "'%f'.format([-0.0]) == '0.000000'", "true"),
    ("format -0.0", "'%e'.format([-0.0]) == '0.000000×10⁰⁰'", "true"),
    ("format -0.0", "'%.2f'.format([-0.0001]) == '-0.00'", "true"),
    ("format -0.0", "'%s'.format([-0.0]) == '-0'", "true"),
    # 7. duration(int)
    ("duration(int)", "duration(1) == duration('1ns')", "compile"),
    ("duration(int)", "duration(dyn(1)) == duration('1ns')", "compile"),
    ("duration(int)", "duration(taint.key.size()) == duration('19ns')", "error"),
    ("duration(int)", "timestamp(1) == timestamp('1970-01-01T00:00:01Z')", "true"),
    # 8. trailing commas
    ("trailing comma", "[1, 2, 3,].size() == 3", "true"),
    ("trailing comma", "[,].size() == 0", "true"),
    ("trailing comma", "{,}.size() == 0", "true"),
    ("trailing comma", "{'a': 1,}.a == 1", "true"),
    ("trailing comma", "[?optional.of(1),].size() == 1", "true"),
    ("trailing comma", "size('a',) == 1", "compile"),
    ("trailing comma", "[1,,].size() == 1", "compile"),
    ("trailing comma", "(1,) == 1", "compile"),
    # 9. a float literal ends in a digit
    ("float literal", "5. == 5.0", "compile"),
    ("float literal", "-5. == -5.0", "compile"),
    ("float literal", "1.e3 == 1000.0", "compile"),
    ("float literal", ".5e-3 == 0.0005", "true"),
    # 10. nesting: cel-go's per-rule and per-operator counters
    ("nesting", "[" * 249 + "]" * 249 + " != []", "true"),
    ("nesting", "[" * 250 + "]" * 250 + " != []", "true"),
    ("nesting", "[" * 251 + "]" * 251 + " != []", "compile"),
    ("nesting", "[] != " + "[" * 249 + "]" * 249, "true"),
    ("nesting", "[] != " + "[" * 250 + "]" * 250, "compile"),
    ("nesting", " + ".join(["1"] * 250) + " > 0", "true"),
    ("nesting", " + ".join(["1"] * 251) + " > 0", "compile"),
    ("nesting", "(" * 248 + "taint.key != ''" + ")" * 248, "true"),
    ("nesting", "(" * 249 + "taint.key != ''" + ")" * 249, "compile"),
    ("nesting", "1 + (" * 124 + "1" + ")" * 124 + " > 0", "true"),
    ("nesting", "1 + (" * 125 + "1" + ")" * 125 + " > 0", "compile"),
    ("nesting", "'a'" + ".lowerAscii()" * 249 + " == 'a'", "true"),
    ("nesting", "'a'" + ".lowerAscii()" * 250 + " == 'a'", "compile"),
]


def outcome(expression: str) -> str:
    try:
        built = build(expression)
    except CompileError:
        return "compile"
    kind, _message, _used = evaluate(built.runner, TAINT["key"], TAINT["value"],
                                     TAINT["effect"])
    return kind if kind in ("true", "false") else "error"


@pytest.mark.parametrize("cls, expression, expected", ROWS,
                         ids=[f"{c}-{i}" for i, (c, _e, _x) in enumerate(ROWS)])
def test_corner_row(cls, expression, expected):
    assert outcome(expression) == expected


def test_the_rows_are_cel_gos_answers(tmp_path):
    references = run_oracle(oracle_binary(), [e for _c, e, _x in ROWS], [TAINT], tmp_path)
    got = []
    for (_cls, expression, expected), reference in zip(ROWS, references, strict=True):
        answer = "compile" if reference["compile"] else reference["r"][0]["v"]
        if answer != expected:
            got.append((expression[:80], answer, expected))
    assert not got
