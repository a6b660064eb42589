"""Kubernetes CEL ``format`` library: the cases of kubernetes ``library/format_test.go``
(TestFormat, including the generated name-lookup and pairwise-comparison cases), plus
apimachinery / kube-openapi edge cases for every format and the cost rules."""

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.lib.format import FORMATS, mask_trailing_dash
from extender.cel.program import compile_program
from extender.cel.tracker import call_cost

LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                 "characters, '-' or '.', and must start and end with an alphanumeric character "
                 "(e.g. 'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
               "start with an alphabetic character, and end with an alphanumeric character "
               "(e.g. 'my-name',  or 'abc-123', regex used for validation is "
               "'[a-z]([-a-z0-9]*[a-z0-9])?')")
QUALIFIED_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                 "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
                 "or '123-abc', regex used for validation is "
                 "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
                   "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                   "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                   "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def cel_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def messages(fmt: str, value: str):
    """Evaluate ``format.<fmt>().validate(value)``: None when valid, else the messages."""
    valid = f"format.{fmt}().validate({cel_str(value)}) == optional.none()"
    kind, _ = ev(valid)
    assert kind in ("true", "false")
    if kind == "true":
        return None
    out = []
    for i in range(5):
        expr = (f"format.{fmt}().validate({cel_str(value)}).value().size() > {i}")
        if ev(expr) != ("true", ""):
            break
        out.append(FORMATS[fmt].validate(value)[i])
        check = (f"format.{fmt}().validate({cel_str(value)}).value()[{i}] == "
                 f"{cel_str(out[-1])}")
        assert ev(check) == ("true", "")
    return out


def ev(expr: str, key: str = "k", value: str = ""):
    return celeval.ev(expr, key, value)


# format_test.go TestFormat: (format, input, expected messages or None)
UPSTREAM = [
    ("dns1123Label", "my-label-name", None),
    ("dns1123Subdomain", "apiextensions.k8s.io", None),
    ("qualifiedName", "apiextensions.k8s.io/v1beta1", None),
    ("dns1123LabelPrefix", "my-label-prefix-", None),
    ("dns1123SubdomainPrefix", "mysubdomain.prefix.-", None),
    ("dns1035LabelPrefix", "my-label-prefix-", None),
    ("uri", "http://example.com", None),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", None),
    ("byte", "aGVsbG8=", None),
    ("date", "2021-01-01", None),
    ("datetime", "2021-01-01T00:00:00Z", None),
    ("dns1123Label", "contains a space", [LABEL_MSG]),
    ("dns1123Subdomain", "contains a space", [SUBDOMAIN_MSG]),
    ("dns1035Label", "contains a space", [DNS1035_MSG]),
    ("qualifiedName", "contains a space", [QUALIFIED_MSG]),
    ("dns1123LabelPrefix", "contains a space-", [LABEL_MSG]),
    ("dns1123SubdomainPrefix", "contains a space-", [SUBDOMAIN_MSG]),
    ("dns1035LabelPrefix", "contains a space-", [DNS1035_MSG]),
    ("dns1123Label", "my-label-name", None),
    ("dns1123Subdomain", "example.com", None),
    ("dns1035Label", "my-label-name", None),
    ("qualifiedName", "my.name", None),
    ("byte", "aGVsbG8=", None),
    ("byte", "aGVsbG8", ["invalid base64"]),
    ("date", "2020-01-01", None),
    ("date", "2020-01-32", ["invalid date"]),
    ("datetime", "2020-01-01T00:00:00Z", None),
    ("datetime", "2020-01-32T00:00:00Z", ["invalid datetime"]),
    ("labelValue", "my-cool-label-Value", None),
    ("labelValue", "my-cool-label-Value!!\n\n!!!", [LABEL_VALUE_MSG]),
]

# apimachinery / strfmt / net/url behaviour beyond the upstream table
EDGE = [
    ("dns1123Label", "a.b", ["must not contain dots"]),
    ("dns1123Label", "a" * 63, None),
    ("dns1123Label", "a" * 64, ["must be no more than 63 bytes"]),
    ("dns1123Label", "a" * 63 + ".", ["must be no more than 63 bytes", LABEL_MSG]),
    ("dns1123Label", "", [LABEL_MSG]),
    ("dns1123Label", "My-name", [LABEL_MSG]),
    ("dns1123Label", "-a", [LABEL_MSG]),
    ("dns1123Subdomain", "a" * 254, ["must be no more than 253 bytes"]),
    ("dns1123Subdomain", "a..b", [SUBDOMAIN_MSG]),
    ("dns1035Label", "1abc", [DNS1035_MSG]),
    ("dns1035Label", "abc-1", None),
    ("dns1035Label", "a" * 64, ["must be no more than 63 bytes"]),
    # maskTrailingDash drops the last two bytes and appends 'a'
    ("dns1123LabelPrefix", "a-", None),
    ("dns1123LabelPrefix", "ab-", None),
    ("dns1123LabelPrefix", "a.-", None),  # 'a.-' -> 'aa'
    ("dns1123LabelPrefix", "a.b-", ["must not contain dots"]),  # -> 'a.a'
    ("dns1035LabelPrefix", "1-", None),  # -> 'a'
    ("dns1123LabelPrefix", "a" * 64 + "-", ["must be no more than 63 bytes"]),
    ("dns1123LabelPrefix", "é-", [LABEL_MSG]),
    ("dns1123SubdomainPrefix", "Example-", [SUBDOMAIN_MSG]),
    ("qualifiedName", "example.com/MyName", None),
    ("qualifiedName", "/a", ["prefix part must be non-empty"]),
    ("qualifiedName", "a/", ["name part must be non-empty", QUALIFIED_MSG]),
    ("qualifiedName", "a" * 64, ["name part must be no more than 63 bytes"]),
    ("qualifiedName", "Example.com/a", ["prefix part " + SUBDOMAIN_MSG]),
    ("labelValue", "", None),
    ("labelValue", "a" * 64, ["must be no more than 63 bytes"]),
    ("labelValue", "-a", [LABEL_VALUE_MSG]),
    ("uri", "/absolute/path?q=1", None),
    ("uri", "not a uri", ['parse "not a uri": invalid URI for request']),
    ("uri", "", ['parse "": empty url']),
    ("uri", "http://[::1", ["parse \"http://[::1\": missing ']' in host"]),
    ("uri", "http://a b.com/", ['parse "http://a b.com/": invalid character " " in host name']),
    ("uuid", "123E4567-E89B-12D3-A456-426614174000", None),
    ("uuid", "123e4567e89b12d3a456426614174000", None),  # hyphens are optional
    ("uuid", "123e4567-e89b-12d3-a456-42661417400", ["does not match the UUID format"]),
    ("uuid", "123e4567-e89b-12d3-a456-42661417400g", ["does not match the UUID format"]),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000\n", ["does not match the UUID format"]),
    ("byte", "", ["invalid base64"]),
    ("byte", "aGVsbA==", None),
    ("byte", "aGVsbA=", ["invalid base64"]),
    ("byte", "a+b/", None),
    ("byte", "a-b_", ["invalid base64"]),  # URL alphabet is not accepted
    ("date", "2020-02-29", None),
    ("date", "2021-02-29", ["invalid date"]),
    ("date", "2000-02-29", None),
    ("date", "1900-02-29", ["invalid date"]),
    ("date", "0000-01-01", None),
    ("date", "2020-04-31", ["invalid date"]),
    ("date", "2020-1-01", ["invalid date"]),
    ("date", "2020-13-01", ["invalid date"]),
    ("date", "2020-00-10", ["invalid date"]),
    ("date", "2020-01-00", ["invalid date"]),
    ("date", "2020-01-01T00:00:00Z", ["invalid date"]),
    ("date", "+020-01-01", ["invalid date"]),
    ("datetime", "2020-01-01T23:59:59.123456+01:00", None),
    ("datetime", "2020-01-01t00:00:00z", None),
    ("datetime", "2020-01-01T00:00:00ZT", None),  # strfmt ignores a third 't'-part
    ("datetime", "2020-01-01T24:00:00Z", ["invalid datetime"]),
    ("datetime", "2020-01-01T00:60:00Z", ["invalid datetime"]),
    ("datetime", "2020-01-01T00:00:60Z", ["invalid datetime"]),
    ("datetime", "2020-01-01 00:00:00Z", ["invalid datetime"]),
    ("datetime", "2020-01-01T00:00:00", ["invalid datetime"]),
    ("datetime", "2020-01-01T00:00:00+0100", ["invalid datetime"]),
    ("datetime", "2021-02-29T00:00:00Z", ["invalid datetime"]),
    ("datetime", "", ["invalid datetime"]),
]


@pytest.mark.parametrize("fmt,value,expected", UPSTREAM + EDGE)
def test_validate(fmt, value, expected):
    assert FORMATS[fmt].validate(value) == (expected or [])
    assert messages(fmt, value) == expected


def test_upstream_message_for_bad_label_value_is_a_single_list_element():
    expr = ("format.labelValue().validate('my-cool-label-Value!!\\n\\n!!!') == "
            f"optional.of([{cel_str(LABEL_VALUE_MSG)}])")
    assert ev(expr) == ("true", "")


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_named_lookup_and_comparison(name):
    assert ev(f"format.named('{name}').hasValue()") == ("true", "")
    assert ev(f"format.named('{name}').value() == format.{name}()") == ("true", "")
    for other in sorted(FORMATS):
        if other != name:
            assert ev(f"format.{name}() == format.{other}()") == ("false", "")
            assert ev(f"format.{name}() != format.{other}()") == ("true", "")


def test_unknown_format_name():
    assert ev("format.named('unknown').hasValue()") == ("false", "")
    assert ev("format.named('DNS1123Label') == optional.none()") == ("true", "")
    assert ev("format.named(taint.key).hasValue()", key="uuid") == ("true", "")


def test_validating_taint_fields():
    expr = "format.qualifiedName().validate(taint.key) == optional.none()"
    assert ev(expr, key="example.com/gpu") == ("true", "")
    assert ev(expr, key="bad key") == ("false", "")
    expr = "format.named('labelValue').value().validate(taint.value).hasValue()"
    assert ev(expr, value="ok") == ("false", "")
    assert ev(expr, value="not ok") == ("true", "")


def test_prefix_panic_is_a_runtime_error():
    kind, msg = ev("format.dns1123LabelPrefix().validate('-').hasValue()")
    assert kind == "runtime"
    assert "internal error: runtime error: slice bounds out of range [:-1]" in msg


def test_mask_trailing_dash_works_on_bytes():
    assert mask_trailing_dash("abc") == "abc"
    assert mask_trailing_dash("ab-") == "aa"
    assert mask_trailing_dash("é-") == "\x00a"  # half of 'é' dangles, as in Go
    assert mask_trailing_dash("aé-") == "a\x00a"
    assert mask_trailing_dash("ééé-") == "éé\x00a"


COMPILE_ERRORS = [
    ("format.dns1123Label('x') == format.uuid()",
     "found no matching overload for 'format.dns1123Label' applied to '(string)'"),
    ("format.named(1).hasValue()", "found no matching overload for 'format.named' applied to "
     "'(int)'"),
    ("format.uuid().validate(1).hasValue()", "found no matching overload for 'validate' "
     "applied to 'kubernetes.NamedFormat.(int)'"),
    ("'x'.validate('x').hasValue()", "found no matching overload for 'validate'"),
    ("format.named('uuid').validate('x').hasValue()",
     "applied to 'optional_type(kubernetes.NamedFormat).(string)'"),
    ("format.nope() == format.uuid()", "undeclared reference to 'format.nope'"),
    ("format.uuid() == 'uuid'", "applied to '(kubernetes.NamedFormat, string)'"),
]


@pytest.mark.parametrize("expr,fragment", COMPILE_ERRORS)
def test_compile_errors(expr, fragment):
    with pytest.raises(CompileError) as info:
        compile_program(expr)
    assert fragment in str(info.value)


def test_runtime_cost_is_kubernetes_call_cost():
    # ceil((1 + len) * 0.1) * ceil(MaxRegexSize * 0.25)
    def cost(fmt: str, text: str) -> int:
        return call_cost("validate", "format-validate", [FORMATS[fmt], text], None)

    assert cost("dns1123Label", "my-label-name") == 2 * 8
    assert cost("qualifiedName", "a" * 317) == 32 * 15
    assert cost("uri", "http://example.com") == 2 * 276  # Kubernetes' urlLength: 1103
    assert cost("date", "") == 1 * 18
    assert call_cost("format.named", "format-named", ["uuid"], None) == 1


def test_the_estimate_is_kubernetes_not_a_bound_of_the_runtime_cost():
    """Kubernetes estimates every format with MaxNameFormatRegexSize (128), whatever the
    receiver: ``uri`` (urlLength 1103) costs more at run time than estimated."""
    for name in FORMATS:
        expr = f"format.{name}().validate(taint.key).hasValue()"
        assert compile_program(expr).estimated_cost == 2 + 32 * 32 + 2, name
    uri = "format.uri().validate(taint.key).hasValue()"
    assert celeval.used(uri, "a" * 317) == 1 + 2 + 32 * 276 + 1 > celeval.estimate(uri)[1]
    assert celeval.ev(uri, "a" * 317, cost_limit=celeval.estimate(uri)[1])[0] == "cost"
    named = "format.named(taint.value).value().validate(taint.key).hasValue()"
    assert celeval.estimate(named) == (7, 1031)
