"""cel-go ext.Strings v2 (cel-go ext/strings_test.go cases, ported as data) and the
Kubernetes regex library."""

import time

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.program import compile_program, run_program


def ev(expr: str, key: str = "k", value: str = "v"):
    return celeval.ev(expr, key, value)


STRING_TRUE = [
    "'tacocat'.charAt(3) == 'o'", "'tacocat'.charAt(7) == ''",
    "'©αT'.charAt(0) == '©' && '©αT'.charAt(1) == 'α' && '©αT'.charAt(2) == 'T'",
    "'tacocat'.indexOf('') == 0", "'tacocat'.indexOf('ac') == 1",
    "'tacocat'.indexOf('none') == -1", "'tacocat'.indexOf('', 3) == 3",
    "'tacocat'.indexOf('a', 3) == 5", "'tacocat'.indexOf('at', 3) == 5",
    "'ta©o©αT'.indexOf('©') == 2", "'ta©o©αT'.indexOf('©', 3) == 4",
    "'ta©o©αT'.indexOf('©αT', 3) == 4", "'ta©o©αT'.indexOf('©α', 5) == -1",
    "'ijk'.indexOf('k') == 2", "'hello wello'.indexOf('hello wello') == 0",
    "'hello wello'.indexOf('ello', 6) == 7", "'hello wello'.indexOf('elbo room!!') == -1",
    "'tacocat'.indexOf('a', 30) == -1",
    "'tacocat'.lastIndexOf('') == 7", "'tacocat'.lastIndexOf('at') == 5",
    "'tacocat'.lastIndexOf('none') == -1", "'tacocat'.lastIndexOf('', 3) == 3",
    "'tacocat'.lastIndexOf('a', 3) == 1", "'ta©o©αT'.lastIndexOf('©') == 4",
    "'ta©o©αT'.lastIndexOf('©', 3) == 2", "'ta©o©αT'.lastIndexOf('©α', 4) == 4",
    "'hello wello'.lastIndexOf('ello', 6) == 1", "'hello wello'.lastIndexOf('low') == -1",
    "'hello wello'.lastIndexOf('hello wello') == 0",
    "'bananananana'.lastIndexOf('nana', 7) == 6", "'tacocat'.lastIndexOf('a', 30) == -1",
    "'TacoCat'.lowerAscii() == 'tacocat'", "'TacoCÆt'.lowerAscii() == 'tacocÆt'",
    "'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'",
    "'tacoCat'.upperAscii() == 'TACOCAT'", "'tacoCαt'.upperAscii() == 'TACOCαT'",
    "'12 days 12 hours'.replace('{0}', '2') == '12 days 12 hours'",
    "'{0} days {0} hours'.replace('{0}', '2') == '2 days 2 hours'",
    "'{0} days {0} hours'.replace('{0}', '2', 1).replace('{0}', '23') == '2 days 23 hours'",
    "'1 ©αT taco'.replace('αT', 'o©α') == '1 ©o©α taco'",
    "'abc'.replace('', '-') == '-a-b-c-'", "'abc'.replace('', '-', 2) == '-a-bc'",
    "'aaa'.replace('a', 'b', 0) == 'aaa'", "'aaa'.replace('a', 'b', -1) == 'bbb'",
    "'hello world'.split(' ') == ['hello', 'world']",
    "'hello world events!'.split(' ', 0) == []",
    "'hello world events!'.split(' ', 1) == ['hello world events!']",
    "'hello world events!'.split(' ', 2) == ['hello', 'world events!']",
    "'o©o©o©o'.split('©', -1) == ['o', 'o', 'o', 'o']",
    "'abc'.split('') == ['a', 'b', 'c']", "'abc'.split('', 2) == ['a', 'bc']",
    "''.split(',') == ['']", "''.split('') == []",
    "'tacocat'.substring(4) == 'cat'", "'tacocat'.substring(7) == ''",
    "'tacocat'.substring(0, 4) == 'taco'", "'tacocat'.substring(4, 4) == ''",
    "'ta©o©αT'.substring(2, 6) == '©o©α'", "'ta©o©αT'.substring(7, 7) == ''",
    "' \\f\\n\\r\\t\\vtext  '.trim() == 'text'",
    "'\\u0085\\u00a0\\u1680text'.trim() == 'text'",
    "'text\\u2000\\u2001\\u2002\\u2003\\u2004\\u2004\\u2006\\u2007\\u2008\\u2009'.trim() == 'text'",
    "'\\u200atext\\u2028\\u2029\\u202F\\u205F\\u3000'.trim() == 'text'",
    "'\\u180etext\\u200b\\u200c\\u200d\\u2060\\ufeff'.trim() == "
    "'\\u180etext\\u200b\\u200c\\u200d\\u2060\\ufeff'",
    "['x', 'y'].join() == 'xy'", "['x', 'y'].join('-') == 'x-y'", "[].join() == ''",
    "[].join('-') == ''",
    'strings.quote("first\\nsecond") == "\\"first\\\\nsecond\\""',
    'strings.quote("bell\\a") == "\\"bell\\\\a\\""',
    'strings.quote("\\bbackspace") == "\\"\\\\bbackspace\\""',
    'strings.quote("\\fform feed") == "\\"\\\\fform feed\\""',
    'strings.quote("carriage \\r return") == "\\"carriage \\\\r return\\""',
    'strings.quote("horizontal tab\\t") == "\\"horizontal tab\\\\t\\""',
    'strings.quote("vertical \\v tab") == "\\"vertical \\\\v tab\\""',
    'strings.quote("double \\\\\\\\ slash") == "\\"double \\\\\\\\\\\\\\\\ slash\\""',
    'strings.quote("verbatim") == "\\"verbatim\\""',
    'strings.quote("ends with \\\\") == "\\"ends with \\\\\\\\\\""',
    'strings.quote("mid string \\" quote") == "\\"mid string \\\\\\" quote\\""',
    "strings.quote('single-quote with \"double quote\"') == "
    "\"\\\"single-quote with \\\\\\\"double quote\\\\\\\"\\\"\"",
    'strings.quote("завтра") == "\\"завтра\\""',
]


@pytest.mark.parametrize("expr", STRING_TRUE)
def test_strings_true(expr):
    assert ev(expr) == ("true", "")


STRING_ERRORS = [
    ("'tacocat'.charAt(30) == ''", "index out of range: 30"),
    ("'tacocat'.charAt(-1) == ''", "index out of range: -1"),
    ("'tacocat'.indexOf('a', -1) == -1", "index out of range: -1"),
    ("'tacocat'.lastIndexOf('a', -1) == -1", "index out of range: -1"),
    ("'tacocat'.substring(40) == 'cat'", "index out of range: 40"),
    ("'tacocat'.substring(-1) == 'cat'", "index out of range: -1"),
    ("'tacocat'.substring(1, 50) == 'cat'", "index out of range: 50"),
    ("'tacocat'.substring(49, 50) == 'cat'", "index out of range: 49"),
    ("'tacocat'.substring(4, 3) == ''", "invalid substring range. start: 4, end: 3"),
    ("dyn(42).charAt(2) == ''", "no such overload: charAt(int, int)"),
]


@pytest.mark.parametrize("expr,fragment", STRING_ERRORS)
def test_strings_errors(expr, fragment):
    kind, message = ev(expr)
    assert kind == "runtime"
    assert fragment in message


STATIC_REJECTS = [
    ("(42).charAt(2) == ''", "found no matching overload for 'charAt' applied to 'int.(int)'"),
    ("'hello'.charAt(true) == ''", "applied to 'string.(bool)'"),
    ("'42'.indexOf('4', 0, 1) == 0", "applied to 'string.(string, int, int)'"),
    ("'42'.replace(2, 1) == '41'", "found no matching overload for 'replace'"),
    ("'42'.split('2', '1') == ['4']", "found no matching overload for 'split'"),
    ("'hello'.substring(1, 2, 3) == ''", "found no matching overload for 'substring'"),
    ("lowerAscii('A') == 'a'", "found no matching overload for 'lowerAscii' applied to "
     "'(string)'"),
    ("'abc'.reverse() == 'cba'", "found no matching overload for 'reverse' applied to "
     "'string.()'"),
    ("format('%d', [1]) == '1'", "found no matching overload for 'format' applied to "
     "'(string, list(int))'"),  # format() is a member function (printf.py)
    ("'%d'.format(1) == '1'", "found no matching overload for 'format' applied to "
     "'string.(int)'"),
    ("strings.nope('a') == 'a'", "undeclared reference to 'strings.nope'"),
]


@pytest.mark.parametrize("expr,fragment", STATIC_REJECTS)
def test_strings_static_errors(expr, fragment):
    with pytest.raises(CompileError) as info:
        compile_program(expr)
    assert fragment in str(info.value)


# --- regex ------------------------------------------------------------------------

REGEX_TRUE = [
    "'zone-a1-rack-03'.matches('^zone-a[12]-rack-[0-9]+$')",
    "matches('abc', 'b')", "!'abc'.matches('^b')", "'abc\\n'.matches('c\\n$')",
    "!'abc\\n'.matches('c$')", "!'١'.matches('\\\\d')", "'x'.matches('\\\\Qx\\\\E')",
    "'123 abc 456'.find('[0-9]+') == '123'", "'abc'.find('[0-9]+') == ''",
    "'123 abc 456'.findAll('[0-9]+') == ['123', '456']",
    "'123 abc 456'.findAll('[0-9]*') == ['123', '', '', '', '', '456']",
    "'baaab'.findAll('a*') == ['', 'aaa', '']", "'abc'.findAll('') == ['', '', '', '']",
    "'123 abc 456'.findAll('[0-9]+', 1) == ['123']",
    "'123 abc 456'.findAll('[0-9]+', 0) == []",
    "'123 abc 456'.findAll('[0-9]+', -1) == ['123', '456']",
    "'xébé'.findAll('é|b') == ['é', 'b', 'é']",
]


@pytest.mark.parametrize("expr", REGEX_TRUE)
def test_regex_true(expr):
    assert ev(expr) == ("true", "")


@pytest.mark.parametrize("pattern", ["(", "a(?=b)", "(a)\\\\1", "a{1001}", "[z-a]"])
def test_invalid_constant_pattern_is_a_compile_error(pattern):
    with pytest.raises(CompileError, match="invalid regular expression"):
        compile_program(f"taint.key.matches('{pattern}')")


def test_invalid_dynamic_pattern_is_a_runtime_error():
    kind, message = ev("taint.key.matches(taint.value)", "k", "(")
    assert kind == "runtime"
    assert "invalid regular expression '('" in message


def test_redos_pattern_is_linear_with_re2():
    """A backtracking engine takes ~2^62 steps here; RE2 a few microseconds. The bound
    counts this thread's CPU time, which a busy machine does not stretch as it
    stretches the clock (the compile is outside it)."""
    program = compile_program("taint.value.matches('^(a+)+$')")
    long_input = compile_program("('a' + taint.value + taint.value).matches('^(a+)+$')")
    start = time.thread_time()
    assert run_program(program, "k", "a" * 62 + "b", "") == ("false", "")
    assert run_program(long_input, "k", "a" * 63, "") == ("true", "")
    assert time.thread_time() - start < 0.1
