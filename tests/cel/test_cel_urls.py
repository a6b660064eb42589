"""Kubernetes CEL urls library: the ``urls.go`` doc examples, ``cost_test.go`` TestURLsCost,
and Go ``url.ParseRequestURI`` / ``url.Parse`` behaviour (error texts as Go prints them)."""

import pytest

from extender.cel.environment import CompileError
from extender.cel.lib import gourl
from extender.cel.program import compile_program, run_program, taint_activation
from extender.cel.runtime import Activation


def ev(expr: str, value: str = ""):
    return run_program(compile_program(expr), "k", value, "NoSchedule")


TRUE = [
    # urls.go doc examples
    "isURL('https://user:pass@example.com:80/path?query=val#fragment')",
    "isURL('/absolute-path')", "!isURL('https://a:b:c/')", "!isURL('../relative-path')",
    "url('/path').getScheme() == ''", "url('https://example.com/').getScheme() == 'https'",
    "url('https://example.com:80/').getHost() == 'example.com:80'",
    "url('https://example.com/').getHost() == 'example.com'",
    "url('https://[::1]:80/').getHost() == '[::1]:80'",
    "url('https://[::1]/').getHost() == '[::1]'", "url('/path').getHost() == ''",
    "url('https://example.com:80/').getHostname() == 'example.com'",
    "url('https://127.0.0.1:80/').getHostname() == '127.0.0.1'",
    "url('https://[::1]:80/').getHostname() == '::1'", "url('/path').getHostname() == ''",
    "url('https://example.com:80/').getPort() == '80'",
    "url('https://example.com/').getPort() == ''", "url('/path').getPort() == ''",
    "url('https://example.com/path').getEscapedPath() == '/path'",
    "url('https://example.com/path with spaces/').getEscapedPath() == "
    "'/path%20with%20spaces/'",
    "url('https://example.com').getEscapedPath() == ''",
    "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == "
    "{'k1': ['a'], 'k2': ['b', 'c']}",
    "url('https://example.com/path?key with spaces=value with spaces').getQuery() == "
    "{'key with spaces': ['value with spaces']}",
    "url('https://example.com/path?').getQuery() == {}",
    "url('https://example.com/path').getQuery() == {}",
    # Go details
    "url('HTTPS://Example.com/').getScheme() == 'https'",
    "url('HTTPS://Example.com/').getHost() == 'Example.com'",
    "url('HTTP://x/') == url('http://x/')", "url('http://x/a') != url('http://x/b')",
    "url('http://x/a#frag').getEscapedPath() == '/a'",
    "url('http://x/a?b=1#frag').getQuery() == {'b': ['1']}",
    "url('http://x/a%2Fb').getEscapedPath() == '/a%2Fb'",
    "url('http://x/%41').getEscapedPath() == '/%41'",
    "url('http://x/ü').getEscapedPath() == '/%C3%BC'",
    "url('http://x/?a=1+2&b=%20&c&;d=1&e=%zz&a=3').getQuery() == "
    "{'a': ['1 2', '3'], 'b': [' '], 'c': ['']}",
    "url('mailto:user@example.com').getHost() == ''", "isURL('*')", "isURL('a:b')",
    "url('http://[fe80::1%25en0]:8080/').getHostname() == 'fe80::1%en0'",
    "url('http://[fe80::1%25en0]:8080/').getPort() == '8080'",
    "url('http://user@host:/').getPort() == ''",
    "url('http://user@host:/').getHostname() == 'host'",
    "!isURL('')", "!isURL('example.com')", "!isURL('http://x/\\n')", "!isURL(':foo')",
    "!isURL('http://x/%zz')", "!isURL('http://[::1/')", "!isURL('http://[::1]x/')",
    "!isURL('http://[1.2.3.4]/')", "!isURL('http://ex ample.com/')",
    "!isURL('http://us^er@x/')", "!isURL('http://%41.com/')", "isURL('http://%C3%BC.com/')",
    "isURL('//x/y')", "!isURL('http://x/#%zz')",
]


@pytest.mark.parametrize("expr", TRUE)
def test_true(expr):
    assert ev(expr) == ("true", "")


def test_fragment_is_checked_by_parse():
    # ParseRequestURI sees '#frag%' as part of the path -> bad escape; isURL agrees
    assert ev("isURL('http://x/#a%')") == ("false", "")
    kind, msg = ev("url('http://x/#a%').getHost() == 'x'")
    assert kind == "runtime" and 'invalid URL escape "%"' in msg


RUNTIME_ERRORS = [
    ("url('../relative-path').getHost() == ''", "URL parse error during conversion from "
     'string: parse "../relative-path": invalid URI for request'),
    ("url('https://a:b:c/').getHost() == ''", 'parse "https://a:b:c/": invalid port ":c" '
     "after host"),
    ("url('').getHost() == ''", 'parse "": empty url'),
    ("url(':x').getHost() == ''", 'parse ":x": missing protocol scheme'),
    ("url('http://x/%4').getHost() == ''", 'invalid URL escape "%4"'),
    ("url('http://a b/').getHost() == ''", 'invalid character " " in host name'),
]


@pytest.mark.parametrize("expr,message", RUNTIME_ERRORS)
def test_runtime_errors(expr, message):
    kind, msg = ev(expr)
    assert kind == "runtime" and message in msg


def test_taint_value():
    expr = "isURL(taint.value) && url(taint.value).getHostname().endsWith('.example.com')"
    assert ev(expr, "https://api.example.com:443/v1") == ("true", "")
    assert ev(expr, "https://example.org/") == ("false", "")
    assert ev(expr, "not a url") == ("false", "")


def test_compile_errors():
    with pytest.raises(CompileError, match="found no matching overload for 'getHost'"):
        compile_program("'https://x'.getHost() == 'x'")
    with pytest.raises(CompileError, match="found no matching overload for 'url'"):
        compile_program("url(1) == url('/')")


ESCAPES = [(b"/a b", b"/a%20b"), (b"/a?b", b"/a%3Fb"), (b"/a:@&=+$,;", b"/a:@&=+$,;"),
           (b"/\xff", b"/%FF"), (b"/~-_.", b"/~-_.")]


@pytest.mark.parametrize("raw,escaped", ESCAPES)
def test_path_escape(raw, escaped):
    assert gourl.escape(raw, gourl.PATH) == escaped
    assert gourl.unescape(escaped, gourl.PATH) == raw


# cost_test.go TestURLsCost's expressions; the units are cel-go v0.26's with Kubernetes'
# environment (url() of a 22-byte constant: 3; URL equality: 1 at run time, estimated by
# the right side's size, read twice): (suffix, estimated max, runtime)
URL = "url('https:://kubernetes.io/')"
COSTS = [(".getScheme()", 4, 4), (".getHostname()", 4, 4), (".getHost()", 4, 4),
         (".getPort()", 4, 4), (".getEscapedPath()", 4, 4), (".getQuery()", 4, 4),
         (" == url('https:://kubernetes.io/')", 9, 7), (" == url('http://x.b')", 5, 5)]


@pytest.mark.parametrize("suffix,estimate,runtime", COSTS)
def test_costs(suffix, estimate, runtime):
    program = compile_program(f"[{URL}{suffix}].size() == 1")  # a bool-valued wrapper
    activation = Activation(10**6)
    program.runner.run(taint_activation("k", "v", "e"), activation)
    assert program.estimated_cost - 12 == estimate  # list literal 10, size 1, == 1
    assert activation.used - 12 == runtime
