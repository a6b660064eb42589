"""Hostile annotation text: the decoder answers a value or a GoJSONError, never anything
else, and agrees with a strict JSON parser on what is valid JSON."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.features import FeatureGates
from extender.validation import check_pod
from extender.validation.gojson import GoJSONError, JObj, Num, loads
from extender.validation.goschema import NODE_AFFINITY, TOLERATIONS, decode

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


def plain(value):
    """Our parse tree back to ordinary Python values (numbers as their JSON text)."""
    if isinstance(value, JObj):
        return {k: plain(v) for k, v in value}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Num):
        return json.loads(value)
    return value


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_valid_json_parses_to_the_same_value(value):
    text = json.dumps(value)
    assert plain(loads(text)) == json.loads(text)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60) | st.text(alphabet='[]{}",:0123456789.eE+-tfnrulsa \\u', max_size=40))
def test_arbitrary_text_never_crashes(text):
    for schema in (TOLERATIONS, NODE_AFFINITY):
        try:
            decode(text, schema)
        except GoJSONError:
            pass
    for name in ("tolerations", "node-affinity"):
        check_pod({f"p.io/{name}": text}, [], "p.io", FeatureGates())  # never raises


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["key", "operator", "value", "effect", "tolerationSeconds",
                                                 "expression", "Key"]), JSON, max_size=5), max_size=4))
def test_any_shaped_tolerations_are_decoded_or_rejected_cleanly(tolerations):
    check = check_pod({"p.io/tolerations": json.dumps(tolerations)}, [], "p.io", FeatureGates())
    assert all(str(e).startswith("metadata.annotations[p.io/tolerations]") for e in check.errors)
