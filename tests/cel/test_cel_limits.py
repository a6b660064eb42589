"""Compile-time validation and every limit: length, syntax, names, arity, depth,
estimated cost, runtime cost, recursion."""

import sys
import threading

import celeval
import pytest

from extender.cel import MAX_COST, MAX_EXPRESSION_BYTES, CelCache
from extender.cel.environment import CompileError
from extender.cel.limits import MAX_NESTING_DEPTH
from extender.cel.program import compile_program, run_program

L50 = "[" + ",".join(["0"] * 50) + "]"
NESTED_345 = f"{L50}.all(a, {L50}.all(b, {L50}.all(c, taint.key != '')))"


def test_public_constants():
    assert (MAX_EXPRESSION_BYTES, MAX_COST) == (10240, 1_000_000)


def test_length_limit_is_in_utf8_bytes():
    ok = "taint.key == '" + "a" * (MAX_EXPRESSION_BYTES - 15) + "'"
    assert len(ok.encode()) == MAX_EXPRESSION_BYTES
    compile_program(ok)
    with pytest.raises(CompileError) as info:
        compile_program(ok.replace("'a", "'é", 1))  # one more byte, same characters
    assert str(info.value) == "expression exceeds the maximum length of 10240 bytes"


COMPILE_ERRORS = [
    ("", "expression is empty"),
    ("taint.key ==", "syntax error"),
    ("taint.key.startsWith('a'", "syntax error"),
    ("x == 1", "undeclared reference to 'x' (in container '')"),
    ("nodeName == 'a'", "undeclared reference to 'nodeName'"),
    ("foo(taint.key)", "undeclared reference to 'foo' (in container '')"),
    ("taint.key.foo()", "undeclared reference to 'foo'"),
    ("taint.key > 5", "found no matching overload for '_>_' applied to '(string, int)'"),
    ("taint.key + 1 == 'a'", "found no matching overload for '_+_' applied to '(string, int)'"),
    ("taint.key.startsWith()", "found no matching overload for 'startsWith' applied to "
     "'string.()'"),
    ("taint.key.startsWith('a', 'b')", "applied to 'string.(string, string)'"),
    ("startsWith(taint.key, 'a')", "found no matching overload for 'startsWith' applied to "
     "'(string, string)'"),
    ("size(taint.key, 1) > 0", "found no matching overload for 'size'"),
    ("1 == 1.0", "found no matching overload for '_==_' applied to '(int, double)'"),
    ("taint.key", "expression must evaluate to bool, not string"),
    ("taint.value.size()", "expression must evaluate to bool, not int"),
    ("[true]", "expression must evaluate to bool, not list(bool)"),
    ("taint.key.matches('[')", "invalid regular expression '['"),
    ("matches(taint.key, '(?P<x')", "invalid regular expression"),
    ("taint.key.find('(') == ''", "invalid regular expression '('"),
    ("timestamp('yesterday') > timestamp('2020-01-01T00:00:00Z')",
     "invalid timestamp argument"),
    ("[1, 'a'] == []", "expected type 'int' but found 'string'"),
    ("has(taint)", "invalid argument to has() macro"),
    ("9223372036854775808 > 0", "integer literal 9223372036854775808 is out of range"),
    ("'%d'.format([1.5]) == '1'", "decimal clause can only be used on integers, was given double"),
    ("taint.?key == 'k'", "found no matching overload for '_==_' applied to "
     "'(optional_type(string), string)'"),
    ("'.?' == taint.key &&", "syntax error"),  # '.?' inside a string is not optional syntax
    ("optional.none() == 1", "found no matching overload for '_==_' applied to "
     "'(optional_type(dyn), int)'"),
    ("format.dns1123Label() == 'x'", "found no matching overload for '_==_' applied to "
     "'(kubernetes.NamedFormat, string)'"),
    ("cel.bind(x, 1, x > 0)", "undeclared reference to 'x'"),  # no bind macro
    ("math.greatest(1, 2) == 2", "undeclared reference to 'math.greatest'"),
    ("Foo{a: 1} == 1", "message construction is not supported"),
]


@pytest.mark.parametrize("expr,fragment", COMPILE_ERRORS)
def test_compile_errors(expr, fragment):
    with pytest.raises(CompileError) as info:
        compile_program(expr)
    assert fragment in str(info.value)
    assert len(str(info.value)) <= 300


def test_compile_error_messages_are_truncated():
    expr = "taint.key == '" + "x" * 2000 + "' && " + "y" * 500 + " > 0"
    with pytest.raises(CompileError) as info:
        compile_program("(" + expr)
    assert len(str(info.value)) <= 300


@pytest.mark.parametrize("shape", [
    lambda n: " + ".join(["1"] * n) + " > 0",
    lambda n: "[" * n + "1" + "]" * n + " != []",
    lambda n: "string(" * n + "'x'" + ")" * n + " == 'x'",
    lambda n: "[1].all(x, " * n + "true" + ")" * n,
    lambda n: "(" * n + "taint.key == 'k'" + ")" * n,
])
def test_nesting_limit_is_cel_gos_250(shape):
    """240 levels evaluate (also on a thread, as the server runs them); past 250 it is
    a compile error, never a RecursionError."""
    program = compile_program(shape(240))
    result: list = []
    worker = threading.Thread(target=lambda: result.append(run_program(program, "k", "", "")))
    worker.start()
    worker.join()
    assert result == [("true", "")]
    for n in (260, 600):
        with pytest.raises(CompileError, match=f"more than {MAX_NESTING_DEPTH} levels"):
            compile_program(shape(n))


@pytest.mark.parametrize("shape", [
    lambda n: "!" * (2 * n) + "true",
    lambda n: "-" * (2 * n) + "1 == 1",
    lambda n: " && ".join(["taint.key != 'x'"] * n),
    lambda n: " || ".join([f"taint.key == 'x{i}'" for i in range(n)] + ["true"]),
])
def test_flat_in_cel_go_even_unary_runs_and_balanced_chains(shape):
    """cel-go drops even runs of ``!``/``-`` and balances ``&&``/``||`` chains, so these
    never hit the nesting limit."""
    assert run_program(compile_program(shape(400)), "k", "", "") == ("true", "")


def test_recursion_limit_covers_the_nesting_limit():
    # celpy.Environment() sets 2500; extender.cel raises it for 250 levels at import.
    from extender.cel.environment import RECURSION_LIMIT

    assert sys.getrecursionlimit() >= RECURSION_LIMIT > 2500


def test_nested_comprehension_admitted_as_cel_go_admits_it():
    """50 x 50 x 50 iterations: cel-go estimates 660,711 units (an iteration costs the
    loop condition, 2, and the step, 1 + the body's), so Kubernetes admits it; run, it
    uses 635,201."""
    assert len(NESTED_345) == 345
    program = compile_program(NESTED_345)
    assert (program.estimated_min, program.estimated_cost) == (161, 660711)
    assert celeval.used(NESTED_345) == 635201
    assert run_program(program, "k", "", "") == ("true", "")


def test_nested_comprehension_rejected_by_estimate():
    deeper = NESTED_345.replace("taint.key != ''", "taint.key.startsWith(taint.value)")
    with pytest.raises(CompileError) as info:
        compile_program(deeper)
    msg = str(info.value)
    assert msg.startswith("estimated cost ") and msg.endswith(" exceeds the limit of 1000000")
    assert int(msg.split()[2]) > 1_000_000


@pytest.mark.parametrize("expr", [
    "lists.range(int(taint.value)).size() > 0",
    "dyn(taint).key.split('').all(c, c.split('').all(d, d.split('').all(e, e != '')))",
    "taint.key.replace('', taint.key).replace('', taint.key).replace('', taint.key).size() > 0",
])
def test_unbounded_or_huge_estimates_are_rejected(expr):
    with pytest.raises(CompileError, match="estimated cost"):
        compile_program(expr)


@pytest.mark.parametrize("expr,bound", [
    ("taint.key.startsWith('env.example.com/')", 10),
    ("taint.key.matches('^zone-a[12]-rack-[0-9]+$')", 500),
    ("taint.key.split('/').all(p, p.size() < 64)", 5000),
])
def test_small_expressions_have_small_estimates(expr, bound):
    assert compile_program(expr).estimated_cost <= bound


def test_runtime_cost_budget_aborts():
    program = compile_program(f"{L50}.all(a, {L50}.all(b, taint.key != ''))")
    assert program.estimated_cost < MAX_COST
    kind, message = run_program(program, "k", "", "", cost_limit=1000)
    assert kind == "cost"
    assert message.startswith("operation cancelled: actual cost limit exceeded")
    # the same program within budget
    assert run_program(program, "k", "", "")[0] == "true"


def test_runtime_cost_charges_match_the_estimate_for_worst_case_inputs():
    program = compile_program("taint.key.split('').all(c, c != 'x')")
    key = "a" * 317
    kind, _ = run_program(program, key, "", "", cost_limit=program.estimated_cost)
    assert kind == "true"


@pytest.mark.parametrize("expression, estimate", [
    ("lists.range(999988).size() > 0", 1000001),
    ("lists.range(30000).sort().size() > 0", 1800030024),
    ("lists.range(int(taint.value)).size() > 0", 2**64 - 1),
])
def test_big_ranges_are_rejected_by_the_estimate(expression, estimate):
    """cel-go estimates lists.range(n) at n + 11 units (the list's size, a call, a list),
    so the estimate bounds every list an expression can build from a range; a range of
    a computed size has no bound."""
    error = CelCache().compile_error(expression)
    assert error == f"estimated cost {estimate} exceeds the limit of 1000000"


@pytest.mark.parametrize("expression, estimate", [
    ("lists.range(4000).size() > 0", 4013),
    ("lists.range(3300).map(x, x).size() > 0", 46224),
    ("[lists.range(2000), lists.range(2000)].flatten().size() > 0", 4047),
])
def test_ranges_cel_go_admits(expression, estimate):
    assert CelCache().compile_error(expression) is None
    assert compile_program(expression).estimated_cost == estimate


def test_ranges_under_the_bound_still_work():
    from extender.model import Taint

    # 1,000 elements: well under the static bound.
    outcome = CelCache().evaluate("lists.range(1000).size() == 1000", Taint("k", "v", "NoSchedule"))
    assert outcome.matched, outcome


@pytest.mark.parametrize("expr,used", [
    # range 490,011 + distinct 2 n^2 + 11 (cel-go's tracker; the oracle gives the same
    # formula's 32,004,022 for n = 4,000)
    ("lists.range(490000).distinct().size() > 0", 490_011 + 2 * 490_000**2 + 11),
    ("lists.range(490000).sort().size() > 0", 490_011 + 2 * 490_000**2 + 11),
    ("sets.contains(lists.range(490000), lists.range(490000))", 2 * 490_011 + 490_000**2 + 1),
    ("sets.equivalent(lists.range(490000), lists.range(490000))",
     2 * 490_011 + 2 * 490_000**2 + 1),
])
def test_quadratic_list_calls_over_the_budget_never_run(expr, used):
    """A quadratic list call the budget cannot pay is cancelled with cel-go's units before
    it runs: run, these would take hours here (this test would never end).  The server
    only runs admitted programs, but taints it is sent are not bounded by validation."""
    from extender.cel.program import build, evaluate

    kind, message, units = evaluate(build(expr).runner, "k", "v", "NoSchedule")
    assert (kind, units) == ("cost", used)
    assert message.startswith("operation cancelled: actual cost limit exceeded")
