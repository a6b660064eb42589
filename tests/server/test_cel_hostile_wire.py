"""No CEL input reaches a client as a crash: the grammar's corners and every library
function over hostile values, sent through `/filter`, `/prioritize`, the admission
webhook, `extender validate` and `extender explain`, are each answered (a verdict, a CEL
error or a refusal with a message), never a 500, a traceback or an exception.

The expressions: hand-written syntax corners (literal forms, trailing commas, nesting past
the limits, reserved names, message construction, the optional syntax misused), one call
of every declared function overload per hostile argument (extremes, special doubles,
invalid UTF-8, lists and maps as map keys, values of another type through ``dyn``), and a
fixed sample of the corner generator (``tests/cel/cornergen.py``).
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import orjson
import pytest
from conftest import EXAMPLES

from extender.cel.lib import REGISTRY
from extender.cel.limits import MAX_EXPRESSION_BYTES
from extender.cli import main
from extender.config import Config
from extender.features import FeatureGates
from extender.server.app import create_app
from extender.server.webhook import review
from testing.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cel"))
from cornergen import CornerGen  # noqa: E402

PREFIX = "scheduling-extender.io"

SYNTAX = [
    "", " ", "//", "(", ")", "[", "{", "'", "'''", "b'", "r'\\", "\x00", "taint.key == '\x00'",
    "[1, 2, 3,].size() == 3", "[,] == []", "{,} == {}", "[1,,]", "f(1,)", "5. == 5.0",
    "5.e3 == 1", ".5 == 0.5", "1e999 > 0.0", "-9223372036854775809 < 0", "18446744073709551616u",
    "0x", "0xg", "1__0", "'\\q'", "'\\ud800' == ''", "b'\\u00ff'", "'\\U00110000'",
    "{[1]: 1}.size() == 1", "{{1: 2}: 1}[{1: 2}] == 1", "{[1]: 1}[[1]] == 1",
    "{b'a': 1}.size() == 1", "{dyn(1): 'a', dyn(1u): 'b', dyn(1.0): 'c', dyn(true): 'd'}.size() == 4",
    "google.protobuf.Duration{seconds: 1} == duration('1s')", "Foo{a: 1,}", "x.?y", "[?1]",
    "{?1: 2}", "__opt_elem__(1)", "taint.?key.orValue('') == ''", "taint[?'key'].hasValue()",
    "has(1)", "has(taint)", "[1].all(1, true)", "[1].map(x, x, x, x)", "taint.key.exists(x, x)",
    "if", "in", "null.foo", "true ? 1", "!-1", "-!true", "--9223372036854775808 < 0",
    "[" * 260 + "]" * 260 + " != []", "(" * 300 + "true" + ")" * 300,
    " + ".join(["1"] * 300) + " > 0", "'a'" + ".lowerAscii()" * 260 + " == 'a'",
    "x" * (MAX_EXPRESSION_BYTES + 1), "taint.key == '" + "é" * 5200 + "'",
    "lists.range(100000).size() > 0", "[1].all(x, [1].all(y, x == y)) && " * 40 + "true",
]

#: hostile samples per declared parameter type
SAMPLES = {
    "int": ["0", "-9223372036854775808", "9223372036854775807", "-1"],
    "uint": ["0u", "18446744073709551615u"],
    "double": ["double('inf')", "double('-inf')", "double('nan')", "-0.0", "5e-324", "1e308"],
    "string": ["''", "'\\x00'", "'%s%d%e%'", "'(a*)*b'", "'['", "'é' + 'x'", "'-'",
               "'" + "a" * 300 + "'", "'1.5Gi'", "'::1'", "'0.0.0.0/0'", "'v1.2.3'"],
    "bytes": ["b''", "b'\\xff\\xfe'"],
    "bool": ["true"],
    "null_type": ["null"],
    "duration": ["duration('-2562047h47m16.854775808s')", "duration('2562047h47m16.854775807s')"],
    "timestamp": ["timestamp('0001-01-01T00:00:00Z')", "timestamp('9999-12-31T23:59:59.999999999Z')"],
    "list": ["[]", "[[1], {'a': 1}, null, -0.0]", "[1, 'a', 1.5, b'x']"],
    "map": ["{}", "{[1]: 1}", "{dyn(1): 1, dyn(1u): 2}", "{'a': {'b': [1]}}"],
    "type": ["int", "type(null)"],
    "Quantity": ["quantity('9223372036854775807Ei')", "quantity('-0.0000000001')"],
    "Semver": ["semver('0.0.0-0')"],
    "IP": ["ip('::ffff:1.2.3.4')"],
    "CIDR": ["cidr('::/0')"],
    "URL": ["url('https://[::1]:80/%zz?q#f')"],
    "Format": ["format.dns1123Label()"],
    "optional_type": ["optional.none()", "optional.of(double('nan'))"],
}
ANY = ["dyn(" + v + ")" for kind in ("int", "double", "string", "list", "map", "null_type",
                                      "bytes", "duration") for v in SAMPLES[kind][:2]]


def _samples(param: object) -> list[str]:
    name = param if isinstance(param, str) else param[0]
    if name == "param" or name == "dyn":
        return ANY
    return SAMPLES.get(name, ANY[:3]) + ANY[:2]


def library_calls() -> list[str]:
    """One call of every declared overload per hostile sample of each argument."""
    calls = []
    for name, overloads in sorted(REGISTRY.items()):
        if not name[0].isalpha():  # operators: the syntax corners and cornergen cover them
            continue
        for ov in overloads:
            params = list(ov.params)
            for i, param in enumerate(params or [None]):
                for sample in _samples(param) if param is not None else [""]:
                    args = [_samples(p)[0] for p in params]
                    if param is not None:
                        args[i] = sample
                    if ov.member:
                        call = f"({args[0]}).{name}({', '.join(args[1:])})"
                    else:
                        call = f"{name}({', '.join(args)})"
                    calls.append(f"type({call}) != null_type")
    return list(dict.fromkeys(calls))


def corpus() -> list[str]:
    gen = CornerGen(49)
    return SYNTAX + library_calls() + [gen.expression() for _ in range(150)]


CORPUS = corpus()


@pytest.fixture(scope="module")
def client():
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), reload_interval=0)
    return Client(create_app(config))


def pod(name: str, expression: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": name,
                         "annotations": {f"{PREFIX}/tolerations":
                                         json.dumps([{"expression": expression}])}},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "tolerations": [{"expression": expression}]}}


def test_the_corpus_covers_every_library_function():
    names = {n for n in REGISTRY if n[0].isalpha()}
    missing = {n for n in names if not any(f"{n}(" in c for c in CORPUS)}
    assert not missing
    assert len(CORPUS) > 1000


def test_no_cel_input_gives_a_500_on_the_verbs(client):
    nodes = ["od-a1", "spot-a1", "x"]
    answered = {"filter": 0, "prioritize": 0}
    for i, expression in enumerate(CORPUS):
        body = orjson.dumps({"Pod": pod(f"p{i}", expression), "NodeNames": nodes})
        for verb in answered:
            response = client.post(f"/{verb}", data=body)
            assert response.status_code == 200, (verb, expression[:200], response.data[:500])
            answer = orjson.loads(response.data)
            if verb == "filter":
                assert answer["Error"] or answer["NodeNames"] is not None, expression[:200]
            answered[verb] += 1
    assert answered == {"filter": len(CORPUS), "prioritize": len(CORPUS)}


def test_no_cel_input_crashes_the_webhook():
    refused = 0
    for i, expression in enumerate(CORPUS):
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"uid": f"u{i}", "operation": "CREATE",
                                       "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                       "name": f"p{i}", "namespace": "default",
                                       "object": pod(f"p{i}", expression)}}).encode()
        answer = review(body, PREFIX, FeatureGates())["response"]
        assert answer["uid"] == f"u{i}"
        if not answer["allowed"]:
            refused += 1
            assert answer["status"]["code"] == 422 and answer["status"]["message"]
    assert 0 < refused < len(CORPUS)


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def test_no_cel_input_crashes_validate_or_explain(tmp_path):
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": [pod(f"p{i}", e) for i, e in enumerate(CORPUS)]}))
    code, text = _run(["validate", str(pods)])
    assert code == 1 and f"{len(CORPUS)} object(s) checked" in text, text[-500:]
    assert "Traceback" not in text
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                  "items": [pod(f"p{i}", e) for i, e in enumerate(CORPUS)
                                            if i % 7 == 0 or i < len(SYNTAX)]}))
    code, text = _run(["explain", "--cluster", str(EXAMPLES / "cluster.yaml"),
                       "--pod", str(sample), "--candidates", "od-a1,spot-a1"])
    assert code == 0
    report = orjson.loads(text)
    assert report and "Traceback" not in text
