"""Go `encoding/json` (sigs.k8s.io/json) decoding of the annotations: one table per rule.

Expected texts are Go's own (`json.Unmarshal` errors, `SyntaxError` messages).
"""

from __future__ import annotations

import pytest

from extender.validation.gojson import GoJSONError, JObj, Num, loads
from extender.validation.goschema import NODE_AFFINITY, TOLERATIONS, decode

# --- syntax: Go's scanner messages ----------------------------------------------------

SYNTAX = [
    ("", "unexpected end of JSON input"),
    ("   ", "unexpected end of JSON input"),
    ("[{", "unexpected end of JSON input"),
    ("[1,]", "invalid character ']' looking for beginning of value"),
    ("[,]", "invalid character ',' looking for beginning of value"),
    ('{"a" 1}', "invalid character '1' after object key"),
    ('{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
    ("{,}", "invalid character ',' looking for beginning of object key string"),
    ("[1 2]", "invalid character '2' after array element"),
    ("[] x", "invalid character 'x' after top-level value"),
    ("01", "invalid character '1' after top-level value"),
    ("[1.]", "invalid character ']' after decimal point in numeric literal"),
    ("[1e]", "invalid character ']' in exponent of numeric literal"),
    ("-a", "invalid character 'a' in numeric literal"),
    ("nope", "invalid character 'o' in literal null (expecting 'u')"),
    ("trux", "invalid character 'x' in literal true (expecting 'e')"),
    ('"a\x01"', "invalid character '\\x01' in string literal"),
    ('"\\x"', "invalid character 'x' in string escape code"),
    ('"\\u12g4"', "invalid character 'g' in \\u hexadecimal character escape"),
    ("NaN", "invalid character 'N' looking for beginning of value"),
    ("[Infinity]", "invalid character 'I' looking for beginning of value"),
    ("'a'", "invalid character '\\'' looking for beginning of value"),
    ("\ufeff[]", "invalid character 'ï' looking for beginning of value"),
]


@pytest.mark.parametrize("text, message", SYNTAX)
def test_syntax_errors_read_like_go(text, message):
    with pytest.raises(GoJSONError) as info:
        loads(text)
    assert str(info.value) == message


# --- nesting: Go's limit is 10,000 levels, whatever is inside -------------------------


def test_nesting_up_to_ten_thousand_levels_is_accepted():
    assert isinstance(loads("[" * 10_000 + "]" * 10_000), list)


def test_nesting_beyond_ten_thousand_levels_is_malformed():
    with pytest.raises(GoJSONError, match="^exceeded max depth$"):
        loads("[" * 10_001 + "]" * 10_001)


def test_deep_unknown_field_is_ignored_like_go():
    """orjson stops at 1,024 levels; Go skips a 3,000-level unknown field."""
    text = '[{"key": "a", "operator": "Exists", "x": ' + "[" * 3000 + "]" * 3000 + "}]"
    assert decode(text, TOLERATIONS).value == [{"key": "a", "operator": "Exists"}]


# --- strings: surrogates and bad UTF-8 become U+FFFD --------------------------------------

STRINGS = [
    ('"\\ud800"', "\ufffd"),  # lone high surrogate
    ('"\\udc00"', "\ufffd"),  # lone low surrogate
    ('"\\ud800x"', "\ufffdx"),
    ('"\\ud800\\udc00"', "\U00010000"),  # a valid pair
    ('"\\ud800\\u0041"', "\ufffdA"),  # a high surrogate then a non-surrogate escape
    ('"\\udc00\\ud800"', "\ufffd\ufffd"),
    ('"\\ud800\\ud800\\udc00"', "\ufffd\U00010000"),
    ('"\\u0000"', "\x00"),
    ('"\\/\\b\\f\\n\\r\\t\\"\\\\"', '/\b\f\n\r\t"\\'),
    ('"\ud800"', "\ufffd\ufffd\ufffd"),  # a raw lone surrogate: 3 invalid UTF-8 bytes
    ('"é"', "é"),
]


@pytest.mark.parametrize("text, expected", STRINGS)
def test_strings_decode_like_go(text, expected):
    assert loads(text) == expected


def test_lone_surrogate_in_a_toleration_value_is_accepted_as_replacement_char():
    decoded = decode('[{"key": "k", "operator": "Equal", "value": "\\ud800"}]', TOLERATIONS)
    assert decoded.value[0]["value"] == "\ufffd"


# --- field names: case-sensitive; unknown fields ignored and reported ------------------


def test_field_names_are_case_sensitive():
    decoded = decode('[{"Key": "a", "OPERATOR": "Exists", "key": "b"}]', TOLERATIONS)
    assert decoded.value == [{"key": "b"}]
    assert decoded.unknown_fields == ((0, "Key"), (0, "OPERATOR"))


def test_objects_keep_duplicates_in_order():
    assert loads('{"a": 1, "a": 2}') == JObj([("a", Num("1")), ("a", Num("2"))])


def test_duplicate_field_last_wins():
    assert decode('[{"key": "a", "key": "b"}]', TOLERATIONS).value == [{"key": "b"}]


def test_duplicate_field_with_a_type_error_first_is_still_an_error():
    with pytest.raises(GoJSONError, match="Toleration.key of type string"):
        decode('[{"key": 5, "key": "b"}]', TOLERATIONS)


def test_repeated_struct_field_merges_into_the_earlier_value():
    text = ('{"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": '
            '{"matchExpressions": []}, "preference": {"matchFields": []}}]}')
    term = decode(text, NODE_AFFINITY).value["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term == {"weight": 5, "preference": {"matchExpressions": [], "matchFields": []}}


# --- integers: Go's ranges per field type ------------------------------------------------

TSEC = "json: cannot unmarshal number {} into Go struct field Toleration.tolerationSeconds of type int64"
WEIGHT = ("json: cannot unmarshal number {} into Go struct field PreferredSchedulingTerm."
          "preferredDuringSchedulingIgnoredDuringExecution.weight of type int32")

INT64_CASES = [
    ("9223372036854775807", 9223372036854775807),
    ("-9223372036854775808", -9223372036854775808),
    ("-0", 0),
    ("0", 0),
    ("9223372036854775808", TSEC.format("9223372036854775808")),
    ("-9223372036854775809", TSEC.format("-9223372036854775809")),
    ("18446744073709551616", TSEC.format("18446744073709551616")),
    ("1" + "0" * 5000, TSEC.format("1" + "0" * 5000)),
    ("1.0", TSEC.format("1.0")),
    ("1e2", TSEC.format("1e2")),
    ("1e400", TSEC.format("1e400")),
    ('"5"', "json: cannot unmarshal string into Go struct field Toleration.tolerationSeconds of type int64"),
    ("true", "json: cannot unmarshal bool into Go struct field Toleration.tolerationSeconds of type int64"),
    ("null", None),
]


@pytest.mark.parametrize("literal, expected", INT64_CASES)
def test_toleration_seconds_is_an_int64(literal, expected):
    text = f'[{{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": {literal}}}]'
    if isinstance(expected, str):
        with pytest.raises(GoJSONError) as info:
            decode(text, TOLERATIONS)
        assert str(info.value) == expected
        assert info.value.path == (0, "tolerationSeconds")
    else:
        assert decode(text, TOLERATIONS).value[0]["tolerationSeconds"] == expected


INT32_CASES = [
    ("2147483647", 2147483647),
    ("-2147483648", -2147483648),
    ("2147483648", WEIGHT.format("2147483648")),
    ("-2147483649", WEIGHT.format("-2147483649")),
    ("9223372036854775808", WEIGHT.format("9223372036854775808")),
    ("10.5", WEIGHT.format("10.5")),
    ("null", 0),
]


@pytest.mark.parametrize("literal, expected", INT32_CASES)
def test_preferred_weight_is_an_int32(literal, expected):
    text = f'{{"preferredDuringSchedulingIgnoredDuringExecution": [{{"weight": {literal}, "preference": {{}}}}]}}'
    if isinstance(expected, str):
        with pytest.raises(GoJSONError) as info:
            decode(text, NODE_AFFINITY)
        assert str(info.value) == expected
    else:
        term = decode(text, NODE_AFFINITY).value["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert term.get("weight", 0) == expected


def test_huge_integer_in_an_unknown_field_is_fine():
    assert decode('[{"key": "k", "n": 1' + "0" * 400 + "}]", TOLERATIONS).value == [{"key": "k"}]


# --- types: Go's UnmarshalTypeError texts, the first mismatch wins -------------------

TYPE_CASES = [
    ('{"key": "a"}', TOLERATIONS, "json: cannot unmarshal object into Go value of type []v1.Toleration"),
    ('"x"', TOLERATIONS, "json: cannot unmarshal string into Go value of type []v1.Toleration"),
    ("[]", NODE_AFFINITY, "json: cannot unmarshal array into Go value of type v1.NodeAffinity"),
    ('[{"key": 5}]', TOLERATIONS, "json: cannot unmarshal number into Go struct field Toleration.key of type string"),
    ('[{"key": ["a"]}]', TOLERATIONS,
     "json: cannot unmarshal array into Go struct field Toleration.key of type string"),
    ("[5]", TOLERATIONS, "json: cannot unmarshal number into Go value of type v1.Toleration"),
    ('[{"key": 5, "value": 6}]', TOLERATIONS,
     "json: cannot unmarshal number into Go struct field Toleration.key of type string"),
    ('{"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": '
     '[{"key": "k", "operator": "In", "values": "a"}]}]}}', NODE_AFFINITY,
     "json: cannot unmarshal string into Go struct field NodeSelectorRequirement.requiredDuringScheduling"
     "IgnoredDuringExecution.nodeSelectorTerms.matchExpressions.values of type []string"),
    ('{"requiredDuringSchedulingIgnoredDuringExecution": []}', NODE_AFFINITY,
     "json: cannot unmarshal array into Go struct field NodeAffinity.requiredDuringSchedulingIgnored"
     "DuringExecution of type v1.NodeSelector"),
]


@pytest.mark.parametrize("text, schema, message", TYPE_CASES)
def test_type_mismatches_read_like_go(text, schema, message):
    with pytest.raises(GoJSONError) as info:
        decode(text, schema)
    assert str(info.value) == message
    assert not info.value.syntax


# --- null: leaves values alone, nils pointers and slices -----------------------------

NULL_CASES = [
    ("null", TOLERATIONS, None),
    ("[null]", TOLERATIONS, [None]),
    ('[{"key": null, "operator": "Exists"}]', TOLERATIONS, [{"operator": "Exists"}]),
    ('[{"key": "a", "key": null}]', TOLERATIONS, [{"key": "a"}]),
    ('{"requiredDuringSchedulingIgnoredDuringExecution": null}', NODE_AFFINITY,
     {"requiredDuringSchedulingIgnoredDuringExecution": None}),
    ('{"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": '
     '[{"key": "k", "operator": "In", "values": ["a", null]}]}]}}', NODE_AFFINITY,
     {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
         {"key": "k", "operator": "In", "values": ["a", None]}]}]}}),
]


@pytest.mark.parametrize("text, schema, value", NULL_CASES)
def test_null_follows_go(text, schema, value):
    assert decode(text, schema).value == value
