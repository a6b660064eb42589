"""cel-go ext.Sets, ext.Lists v3, the Kubernetes lists library and comprehension macros
(including the two-variable forms)."""

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.program import compile_program


def ev(expr: str, key: str = "k", value: str = "v"):
    return celeval.ev(expr, key, value)


TRUE = [
    # ext.Sets (cel-go ext/sets_test.go style)
    "sets.contains([], [])", "sets.contains([1], [])", "sets.contains([1, 2], [2])",
    "!sets.contains([1], [1, 2])", "sets.contains([1, 2, 2], [2, 2, 1])",
    "sets.contains([1], [dyn(1.0), dyn(1u)])", "sets.contains([[1], [2, 3]], [[2, 3]])",
    "sets.equivalent([], [])", "sets.equivalent([1, 2], [2, 1, 1])",
    "!sets.equivalent([1, 2], [1])", "sets.equivalent([1], [dyn(1u), dyn(1.0)])",
    "sets.intersects([1, 2], [2, 3])", "!sets.intersects([], [])", "!sets.intersects([1], [])",
    "sets.intersects([1], [dyn(1.0)])", "!sets.intersects(['a'], ['b'])",
    "sets.contains(taint.key.split('/'), ['dev'])",
    # ext.Lists v3
    "[1, 2, 3, 4].slice(1, 3) == [2, 3]", "[1, 2].slice(2, 2) == []",
    # literals are homogeneous (Kubernetes' validator): mixed elements go through dyn
    "[[dyn(1)], [dyn(2), dyn([3])]].flatten() == [dyn(1), dyn(2), dyn([3])]",
    "[[dyn(1)], [dyn(2), dyn([3])]].flatten(2) == [1, 2, 3]",
    "[dyn(1), dyn([2])].flatten(0) == [dyn(1), dyn([2])]", "[1, 2, 1, 3, 2].distinct() == [1, 2, 3]",
    "[dyn(1), dyn(1.0), dyn(1u)].distinct() == [dyn(1)]", "lists.range(4) == [0, 1, 2, 3]",
    "lists.range(0) == []", "[1, 2, 3].reverse() == [3, 2, 1]",
    "[3, 1, 2].sort() == [1, 2, 3]", "['b', 'a', 'B'].sort() == ['B', 'a', 'b']",
    "[3, 1, 2].sortBy(x, -x) == [3, 2, 1]",
    "['aa', 'b', 'ccc'].sortBy(s, s.size()) == ['b', 'aa', 'ccc']",
    # K8s lists
    "[1, 2, 3].isSorted()", "![2, 1].isSorted()", "[].isSorted()",
    "[1, 2, 3].sum() == 6", "[1.5, 2.5].sum() == 4.0", "[1u, 2u].sum() == 3u",
    "[].sum() == 0", "[duration('1s'), duration('2s')].sum() == duration('3s')",
    "[3, 1, 2].min() == 1", "[3, 1, 2].max() == 3", "['b', 'a'].min() == 'a'",
    "[1, 2, 1].indexOf(1) == 0", "[1, 2, 1].lastIndexOf(1) == 2", "[1].indexOf(5) == -1",
    "[1].lastIndexOf(5) == -1",
    # two-variable comprehensions (cel-go ext.TwoVarComprehensions)
    "[10, 20].all(i, v, v == (i + 1) * 10)", "{'a': 1, 'b': 2}.all(k, v, v > 0)",
    "[1, 2].exists(i, v, i == 1 && v == 2)", "{'a': 1, 'b': 2}.exists(k, v, k == 'b' && v == 2)",
    "[1, 2, 3].existsOne(i, v, v == 2)", "[1, 2, 3].exists_one(i, v, i == 0)",
    "[1, 2].transformList(i, v, i + v) == [1, 3]",
    "[1, 2, 3].transformList(i, v, v > 1, v * 2) == [4, 6]",
    "{'a': 1, 'b': 2}.transformList(k, v, k) == ['a', 'b']",
    "[5, 6].transformMap(i, v, v) == {0: 5, 1: 6}",
    "{'a': 1, 'b': 2}.transformMap(k, v, v > 1, v * 10) == {'b': 20}",
    "{'a': 1}.transformMapEntry(k, v, {v: k}) == {1: 'a'}",
    "[1, 2].transformMapEntry(i, v, v > 1, {'k' + string(v): i}) == {'k2': 1}",
    # macros over taint data
    "taint.key.split('.').exists(p, p == 'example')",
    "taint.key.split('/').map(p, p.size()).max() > 3",
    # Kubernetes' isSorted only looks for a comparison that says "greater": an int
    # compared with a string is an error value, not 1, so cel-go answers true.
    "[dyn(1), dyn('a')].isSorted()",
]


@pytest.mark.parametrize("expr", TRUE)
def test_true(expr):
    assert ev(expr, "env.example.com/dev") == ("true", "")


ERRORS = [
    ("[1, 2].slice(-1, 1) == []", "cannot slice(-1, 1), negative indexes not supported"),
    ("[1, 2].slice(2, 1) == []",
     "cannot slice(2, 1), start index must be less than or equal to end index"),
    ("[1, 2].slice(0, 3) == []", "cannot slice(0, 3), list is length 2"),
    ("[1].flatten(-1) == []", "level must be non-negative"),
    # added in order (cel-go's oracle, seed 3735366622): a partial sum out of int64 is an
    # overflow even though the whole sum, MIN + 9, is in range
    ("[-7, -9223372036854775808, 16].sum() < 0", "integer overflow"),
    ("[-9223372036854775808, -7, 16].sortBy(y, y).sum() < 0", "integer overflow"),
    ("[].min() == 0", "min called on empty list"),
    ("[].max() == 0", "max called on empty list"),
    ("[dyn(1), dyn('a')].sort() == []", "list elements must have the same type"),
    ("{'a': 1, 'b': 1}.transformMapEntry(k, v, {v: k}).size() == 1",
     "insert failed: key 1 already exists"),
    ("[1, 0].map(x, 1 / x).size() == 2", "division by zero"),
    ("[1, 0].filter(x, 1 / x > 0).size() == 1", "division by zero"),
]


@pytest.mark.parametrize("expr,fragment", ERRORS)
def test_errors(expr, fragment):
    kind, message = ev(expr)
    assert kind == "runtime"
    assert fragment in message


STATIC = [
    ("sets.contains([1], ['a'])", "found no matching overload for 'sets.contains'"),
    ("[[1], [2, [3]]].flatten().size() > 0", "expected type 'list(int)' but found 'list(dyn)'"),
    ("sets.intersects([1], [1.0])", "applied to '(list(int), list(double))'"),
    ("[1, 'a'].size() == 2", "expected type 'int' but found 'string'"),
    ("{'a': 1, 'b': 'x'}.size() == 2", "expected type 'int' but found 'string'"),
    # the macros' expansions: @result && pred, pred ? @result + [x] : @result
    ("[1].all(x, x)", "expected type 'bool' but found 'int'"),
    ("[1].filter(x, x + 1).size() > 0", "found no matching overload for '_?_:_'"),
    ("'abc'.all(c, c == 'a')", "cannot be the range of a comprehension"),
    ("[1].all(x.y, true)", "argument must be a simple name"),
    ("[1].all(i, i, true)", "duplicate variable name: i"),
    ("[1].map(x, x).first() == 1", "found no matching overload for '_==_' applied to "
     "'(optional_type(int), int)'"),
    ("[1].all(x, y > 0)", "undeclared reference to 'y'"),
]


@pytest.mark.parametrize("expr,fragment", STATIC)
def test_static_errors(expr, fragment):
    with pytest.raises(CompileError) as info:
        compile_program(expr)
    assert fragment in str(info.value)


def test_comprehension_error_absorption():
    assert ev("[0, 1].exists(x, 1 / x > 0)") == ("true", "")
    assert ev("![1, 0].all(x, x > 0 && 1 / x > 0)") == ("true", "")
    assert ev("[1, 0].all(x, 1 / x > 0)")[0] == "runtime"
    assert ev("[0, 1].exists(x, 1 / x > 5)")[0] == "runtime"


def test_comprehension_variables_shadow_taint():
    assert ev("['x'].all(taint, taint == 'x')") == ("true", "")
