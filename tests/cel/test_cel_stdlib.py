"""CEL standard library semantics on our cel-python environment (cel-go behaviour)."""

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.program import compile_program


def ev(expr: str, key: str = "k", value: str = "v", effect: str = "NoSchedule"):
    return celeval.ev(expr, key, value, effect)


TRUE_CASES = [
    # arithmetic: truncating division, Go remainder sign, doubles
    "5 / -2 == -2", "-5 % 3 == -2", "7 % -3 == 1", "2.5 * 2.0 == 5.0", "1.0 / 0.0 > 1e308",
    "-1.0 / 0.0 < -1e308", "10u / 3u == 3u", "10u % 3u == 1u",
    # heterogeneous runtime equality and K8s cross-type numeric ordering
    "dyn(1) == 1.0", "dyn(1u) == 1", "dyn(1) != 'a'", "1 < 1.5", "2u > 1", "1.5 >= 1u",
    "[1, 2] == [1, 2]", "{'a': 1} == {'a': 1}", "dyn([1]) != dyn(['1'])",
    "3 > 2.5", "!(3 < 2.5)", "1 == dyn(1.0) && 1 <= 1.0",
    # strings, bytes, lists
    "'a' + 'b' == 'ab'", "b'a' + b'b' == b'ab'", "[1] + [2] == [1, 2]", "'a' < 'b'",
    "b'a' < b'b'", "false < true", "size('héllo') == 5", "'héllo'.size() == 5",
    "size(b'\\xff') == 1", "size([1, 2]) == 2", "size({'a': 1}) == 1",
    "'abc'.contains('b')", "'abc'.startsWith('ab')", "'abc'.endsWith('bc')",
    "1 in [1, 2]", "has(taint.key)", "!has(dyn(taint).nope)",
    "'key' in dyn(taint)", "dyn(taint)['key'] == taint.key",
    # conversions (strict, cel-go rules)
    "int('-12') == -12", "int('+12') == 12", "int(2.9) == 2", "int(-2.9) == -2",
    "int(7u) == 7", "uint('12') == 12u", "uint(3) == 3u", "double('1e3') == 1000.0",
    "double('-Inf') < 0.0", "double(3) == 3.0", "string(true) == 'true'",
    "string(false) == 'false'", "string(1.5) == '1.5'", "string(123456789.0) == '1.23456789e+08'",
    "string(-0.0) == '-0'", "string(100000.0) == '100000'", "string(1e21) == '1e+21'",
    "string(12u) == '12'", "string(b'abc') == 'abc'", "bytes('é') == b'\\xc3\\xa9'",
    "bool('true') && bool('T') && bool('1') && !bool('FALSE') && !bool('f')",
    "duration('1h30m') == duration('5400s')", "duration('1.5s') > duration('1s')",
    "string(duration('1.5s')) == '1.5s'", "string(duration('90m')) == '5400s'",
    "timestamp('2023-01-01T00:00:00Z').getFullYear() == 2023",
    "timestamp('2023-01-01T00:00:00Z') - timestamp('2022-01-01T00:00:00Z') == "
    "duration('8760h')",
    # logic: short circuit and commutative error absorption
    "true || 1 / 0 > 1", "1 / 0 > 1 || true", "!(false && 1 / 0 > 1)",
    "!(1 / 0 > 1 && false)", "true ? true : 1 / 0 > 1", "false ? 1 / 0 > 1 : true",
    "dyn(taint).nope == 'x' || true",
    # macros
    "[1, 2].all(x, x > 0)", "[0, 1].exists(x, 1 / x > 0)", "[1, 2].exists_one(x, x > 1)",
    "[1, 2, 3].map(x, x * 2) == [2, 4, 6]", "[1, 2, 3].filter(x, x > 1) == [2, 3]",
    "{'a': 1, 'b': 2}.map(k, k) == ['a', 'b']", "{'a': 1}.all(k, k == 'a')",
    "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]",
]


@pytest.mark.parametrize("expr", TRUE_CASES)
def test_true(expr):
    assert ev(expr) == ("true", "")


ERROR_CASES = [
    ("9223372036854775807 + 1 > 0", "integer overflow"),
    ("-9223372036854775807 - 2 < 0", "integer overflow"),
    ("9223372036854775807 * 2 > 0", "integer overflow"),
    ("-(-9223372036854775807 - 1) > 0", "integer overflow"),
    ("(-9223372036854775807 - 1) / -1 > 0", "integer overflow"),
    ("1u - 2u > 0u", "unsigned integer overflow"),
    ("1 / 0 > 0", "division by zero"),
    ("1 % 0 > 0", "modulus by zero"),
    # a conversion of a constant fails the program instead (test_constant_conversions_...)
    ("int(taint.value + ' 1') == 1", "cannot parse 'v 1' as int"),
    ("int(taint.value.replace('v', '0x10')) == 16", "cannot parse '0x10' as int"),
    ("int(taint.value.replace('v', '1_000')) == 1000", "cannot parse '1_000' as int"),
    ("int(taint.value.replace('v', '١٢')) == 12", "as int"),
    ("uint(taint.value.replace('v', '-1')) == 1u", "as uint"),
    # Go ParseFloat accepts '1_0.5' (tests/cel/test_cel_go_classes.py); these it rejects
    ("double(taint.value.replace('v', '1__0.5')) == 10.5", "as double"),
    ("double(taint.value.replace('v', '0x10')) == 16.0", "as double"),
    ("double(taint.value.replace('v', '1e400')) > 0.0", "out of range"),
    ("int(1e19 * double(size(taint.value))) > 0", "integer overflow"),
    ("uint(size(taint.value) - 2) > 0u", "unsigned integer overflow"),
    ("bool(taint.value)", "cannot parse 'v' as bool"),
    ("string(bytes(taint.value) + b'\\xff') == ''", "invalid UTF-8"),
    ("dyn('abc')[0] == 'a'", "no such key: 0"),
    ("[1, 2][-1] == 2", "index out of bounds: -1"),
    ("[1, 2][2] == 2", "index out of bounds: 2"),
    ("{'a': 1}['b'] == 1", "no such key"),
    ("dyn(taint).nope == 'x'", "no such key: nope"),
    ("dyn(taint).nope == 'x' && true", "no such key"),
    ("[1, 0].all(x, 1 / x > 0)", "division by zero"),
    ("[0, 1].exists_one(x, 1 / x > 0)", "division by zero"),
    ("dyn(1) < 'a'", "no such overload"),
    ("dyn(1) + 1.0 > 0.0", "no such overload"),
    ("duration(taint.value) > duration('1s')", "invalid duration"),
]


@pytest.mark.parametrize("expr,fragment", ERROR_CASES)
def test_runtime_errors_mean_no_match(expr, fragment):
    kind, message = ev(expr)
    assert kind == "runtime"
    assert fragment in message


def test_duration_literal_checked_at_compile_time():
    with pytest.raises(CompileError, match="invalid duration argument"):
        compile_program("duration('1x') > duration('1s')")


@pytest.mark.parametrize("expr", [
    "int(' 1') == 1", "int('0x10') == 16", "uint('-1') == 1u", "double('0x10') == 16.0",
    "int(1e19) > 0", "uint(-1) > 0u", "bool('yes')", "string(b'\\xff') == ''",
    "int(string(bytes('x'))) == 1 || taint.key != ''",
])
def test_constant_conversions_fail_the_program(expr):
    """cel-go evaluates a type conversion of a constant when it builds the program
    (OptOptimize); its error fails the program, so admission refuses the expression."""
    with pytest.raises(CompileError, match="program: "):
        compile_program(expr)


def test_non_bool_dynamic_result():
    assert ev("dyn(taint.key)")[0] == "non-bool"
    assert "evaluated to string" in ev("dyn(taint.key)")[1]


def test_taint_fields_are_bound():
    assert ev("taint.key == 'a' && taint.value == 'b' && taint.effect == 'NoExecute'",
              "a", "b", "NoExecute") == ("true", "")
    assert ev("taint.value == ''", "a", "", "") == ("true", "")
