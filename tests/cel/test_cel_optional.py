"""cel-go optional types, function forms: cases after cel-go's optional library tests and
the cel-spec ``optionals`` conformance suite (values written as boolean expressions),
plus the extender's handling of the unparseable optional syntax."""

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.lib.optional import NONE, Optional, optional_of_non_zero_value
from extender.cel.limits import MAX_COST
from extender.cel.program import compile_program
from extender.cel.values import cel_equal, to_cel


def ev(expr: str, key: str = "k", value: str = "v"):
    return celeval.ev(expr, key, value)


TRUE = [
    # construction and hasValue
    "optional.of(1).hasValue()", "!optional.none().hasValue()",
    "optional.of('').hasValue()", "optional.of(optional.none()).hasValue()",
    "optional.of(null).hasValue()",
    # ofNonZeroValue: zero values of every Zeroer kind give none
    "!optional.ofNonZeroValue(0).hasValue()", "!optional.ofNonZeroValue(0u).hasValue()",
    "!optional.ofNonZeroValue(0.0).hasValue()", "!optional.ofNonZeroValue('').hasValue()",
    "!optional.ofNonZeroValue(b'').hasValue()", "!optional.ofNonZeroValue(false).hasValue()",
    "!optional.ofNonZeroValue([]).hasValue()", "!optional.ofNonZeroValue({}).hasValue()",
    "!optional.ofNonZeroValue(null).hasValue()",
    "!optional.ofNonZeroValue(duration('0s')).hasValue()",
    "!optional.ofNonZeroValue(timestamp('0001-01-01T00:00:00Z')).hasValue()",
    "optional.ofNonZeroValue(timestamp('1970-01-01T00:00:00Z')).hasValue()",
    "optional.ofNonZeroValue(1).hasValue()", "optional.ofNonZeroValue([0]).hasValue()",
    "optional.ofNonZeroValue({'a': 0}).hasValue()", "optional.ofNonZeroValue(true).hasValue()",
    "optional.ofNonZeroValue(quantity('0')).hasValue()",  # opaque values are never zero
    # value / orValue / or
    "optional.of(42).value() == 42", "optional.of('abc').value().size() == 3",
    "optional.none().orValue(42) == 42", "optional.of(1).orValue(42) == 1",
    "optional.of(42).or(optional.none()) == optional.of(42)",
    "optional.none().or(optional.of(42)) == optional.of(42)",
    "optional.none().or(optional.none()) == optional.none()",
    "optional.none().or(optional.none()).orValue(7) == 7",
    "optional.ofNonZeroValue(taint.value).orValue('default') == 'v'",
    # short-circuit: the argument of or/orValue is not evaluated when there is a value
    "optional.of(1).orValue(1 / 0) == 1",
    "optional.of(1).or(optional.of(1 / 0)).value() == 1",
    "optional.of(1).or(optional.of(1 / 0)).hasValue()",
    # equality
    "optional.none() == optional.none()", "optional.of(1) == optional.of(1)",
    "optional.of(1) != optional.of(2)", "optional.of(1) != optional.none()",
    "optional.none() != optional.of(1)", "optional.of([1, 2]) == optional.of([1, 2])",
    "optional.of(dyn(1)) == optional.of(dyn(1.0))",  # heterogeneous numeric equality inside
    "optional.of(optional.none()) != optional.none()",
    "[optional.of(1), optional.none()] == [optional.of(1), optional.none()]",
    # lists: first / last (optional library v2)
    "[1, 2, 3].first() == optional.of(1)", "[1, 2, 3].last() == optional.of(3)",
    "[].first() == optional.none()", "!([].last().hasValue())",
    "taint.key.split('/').last().value() == 'k'",
    "['a'].first().value() == ['a'].last().value()",
    # optional.unwrap / unwrapOpt
    "optional.unwrap([optional.of(1), optional.none(), optional.of(3)]) == [1, 3]",
    "[optional.none(), optional.of('x')].unwrapOpt() == ['x']",
    "optional.unwrap([optional.none()]) == []",
    # optMap / optFlatMap macros
    "optional.of(2).optMap(x, x * 21) == optional.of(42)",
    "optional.none().optMap(x, x * 21) == optional.none()",
    "optional.of(2).optFlatMap(x, optional.of(x + 1)) == optional.of(3)",
    "optional.of(2).optFlatMap(x, optional.none()) == optional.none()",
    "optional.none().optFlatMap(x, optional.of(x)) == optional.none()",
    "optional.none().optMap(x, 1 / 0) == optional.none()",  # the body is not evaluated
    "optional.of(taint.key).optMap(k, k + '/x').value() == 'k/x'",
    # in comprehensions and with dyn
    "[optional.of(1), optional.none()].filter(o, o.hasValue()).size() == 1",
    "dyn(optional.of(1)).value() == 1",
]


@pytest.mark.parametrize("expr", TRUE)
def test_true(expr):
    assert ev(expr) == ("true", "")


RUNTIME_ERRORS = [
    ("optional.none().value() == 1", "optional.none() dereference"),
    ("[].first().value() == 1", "optional.none() dereference"),
    ("optional.of(1).or(optional.none()).value() == 1 && optional.none().value() == 2",
     "optional.none() dereference"),
    ("optional.none().orValue(1 / 0) == 1", "division by zero"),
    ("optional.none().or(optional.of(1 / 0)).hasValue()", "division by zero"),
    ("optional.of(1).optMap(x, 1 / 0).hasValue()", "division by zero"),
    ("dyn(1).value() == 1", "no such overload"),
    ("dyn(optional.of(1)).optFlatMap(x, dyn(x)).hasValue()", "no such overload: hasValue"),
]


@pytest.mark.parametrize("expr,message", RUNTIME_ERRORS)
def test_runtime_errors(expr, message):
    kind, msg = ev(expr)
    assert kind == "runtime" and message in msg


COMPILE_ERRORS = [
    ("optional.of(1) == 1", "found no matching overload for '_==_' applied to "
     "'(optional_type(int), int)'"),
    ("optional.of(1) == optional.of('a')", "applied to '(optional_type(int), "
     "optional_type(string))'"),
    ("optional.of(1).value() == 'a'", "applied to '(int, string)'"),
    ("optional.of(1).orValue('a') == 1", "found no matching overload for 'orValue' applied to "
     "'optional_type(int).(string)'"),
    ("optional.of(1).or(2) == optional.of(1)", "found no matching overload for 'or'"),
    ("taint.key.hasValue()", "found no matching overload for 'hasValue' applied to "
     "'string.()'"),
    ("optional.of(1).hasValue(1)", "found no matching overload for 'hasValue'"),
    ("hasValue(optional.of(1))", "found no matching overload for 'hasValue' applied to "
     "'(optional_type(int))'"),
    ("taint.key.first() == optional.none()", "found no matching overload for 'first'"),
    ("optional.of()", "found no matching overload for 'optional.of' applied to '()'"),
    ("optional.of(1).optMap(x, x)", "expression must evaluate to bool, not "
     "optional_type(int)"),
    # the expansion's ternary: opt.hasValue() ? <x bound to opt.value()> : optional.none()
    ("optional.of(1).optFlatMap(x, x) == optional.none()",
     "found no matching overload for '_?_:_'"),
    ("taint.key.optMap(x, x) == optional.none()",
     "found no matching overload for 'hasValue' applied to 'string.()'"),
    ("optional.of(true)", "expression must evaluate to bool, not optional_type(bool)"),
    # optional syntax: rewritten before parsing, then checked like cel-go
    ("taint.?foo.hasValue()", "undefined field 'foo'"),
    ("taint[?'key'].hasValue()", "found no matching overload for '_[?_]'"),
    ("[1, 2][?1.0].hasValue()", "found no matching overload for '_[?_]'"),
    ("[1, ?2] == [1, 2]", "expected type 'optional_type(int)' but found 'int'"),
    ("[1, 2][?1u] == optional.of(2)", "found no matching overload for '_[?_]'"),
    # homogeneous literals: string and dyn elements
    ("[?taint.?key, ?dyn(taint).?nope] == ['k']", "expected type 'string' but found 'dyn'"),
    ("__opt_field__(taint, 'key').hasValue()", "identifiers starting with '__opt_' are "
     "reserved"),
    ("taint.?key.", "syntax error"),
]


@pytest.mark.parametrize("expr", [
    "taint.?key == optional.of('k')", "taint.?key.orValue('x') == 'k'",
    "taint.?key.value().startsWith('k')", "dyn(taint).?nope.orValue('d') == 'd'",
    "{'a': 1}[?'a'] == optional.of(1)", "!{'a': 1}[?'b'].hasValue()",
    "[1, 2][?5].orValue(0) == 0", "![1, 2][?-1].hasValue()", "[1, 2][?1] == optional.of(2)",
    "[?optional.of(1)].size() == 1", "[1, ?optional.none(), 2] == [1, 2]",
    "[?dyn(taint).?key, ?dyn(taint).?nope] == ['k']",
    "{?'a': optional.none()}.size() == 0",
    "{'a': 1, ?'b': optional.of(2)} == {'a': 1, 'b': 2}",
    "optional.of({'a': 1}).?a.value() == 1", "optional.none().?a == optional.none()",
    "[[?optional.none()], [1]][?0].value() == []",
    "'[?' + taint.key + '.?' == '[?k.?'",
])
def test_optional_syntax(expr):
    assert ev(expr) == ("true", "")


def test_optional_selection_has_no_declared_size():
    """cel-go sizes ``taint.key`` by its declared maximum, but ``taint.?key`` (a call of
    ``_?._``) and anything read through an optional have no size: contains() is
    unbounded there, and admission refuses it."""
    assert celeval.estimate("taint.key.contains('x')") == (2, 34)
    assert celeval.estimate("taint.?key.value().contains('x')")[1] > MAX_COST
    with pytest.raises(CompileError, match="estimated cost"):
        compile_program("taint.?key.value().contains('x')")


@pytest.mark.parametrize("expr,fragment", COMPILE_ERRORS)
def test_compile_errors(expr, fragment):
    with pytest.raises(CompileError) as info:
        compile_program(expr)
    assert fragment in str(info.value)


def test_optional_syntax_inside_string_literals_is_plain_text():
    assert ev("taint.key == 'a.?b' || taint.key == \"[?\"", key="a.?b") == ("true", "")
    with pytest.raises(CompileError) as info:
        compile_program("taint.key == 'x.?y' &&")
    assert str(info.value).startswith("syntax error")


def test_result_types_are_inferred():
    program = compile_program("optional.of(taint.key).orValue('x').startsWith('k')")
    assert ev("optional.of(taint.key).orValue('x').startsWith('k')") == ("true", "")
    assert program.estimated_cost < 100


def test_sizes_do_not_flow_through_optionals():
    # cel-go computes no size for optional.of(x): its value() is of unknown size
    assert celeval.estimate("optional.of(taint.key).value().contains('x')")[1] > MAX_COST
    assert celeval.estimate("optional.of(taint.key).orValue('').size() > 0") == (6, 6)


def test_runtime_values():
    assert optional_of_non_zero_value(to_cel(0)) is NONE
    some = optional_of_non_zero_value(to_cel("x"))
    assert isinstance(some, Optional) and some.value == "x"
    assert cel_equal(Optional(to_cel(1)), Optional(to_cel(1)))
    assert not cel_equal(Optional(to_cel(1)), NONE)
    assert repr(NONE) == "optional.none()"
