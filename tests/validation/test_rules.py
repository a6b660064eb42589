"""API validation of the annotation channel: one row per rule, with the exact message."""

from __future__ import annotations

import json

import pytest

from extender.features import FeatureGates, parse_feature_gates
from extender.validation import check_pod
from extender.validation.limits import (
    MAX_ANNOTATION_BYTES,
    MAX_EXPRESSIONS_PER_POD,
    MAX_TOLERATIONS_PER_POD,
)

P = "scheduling-extender.io"
T = f"metadata.annotations[{P}/tolerations]"
A = f"metadata.annotations[{P}/node-affinity]"
REQ = f"{A}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
PREF = f"{A}.preferredDuringSchedulingIgnoredDuringExecution"
LABEL_VALUE_ERR = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
GATES = FeatureGates()
ALL_OPS = '"Equal", "Exists", "Lt", "Gt", "SemverGt", "SemverLt", "SemverEq"'


def tol_errors(tolerations, gates: FeatureGates = GATES, spec=()):
    text = tolerations if isinstance(tolerations, str) else json.dumps(tolerations)
    check = check_pod({f"{P}/tolerations": text}, list(spec), P, gates)
    return [str(e) for e in check.errors]


def aff_errors(affinity, gates: FeatureGates = GATES):
    check = check_pod({f"{P}/node-affinity": json.dumps(affinity)}, [], P, gates)
    return [str(e) for e in check.errors]


TOLERATION_RULES = [
    # operators and values
    ({"key": "k", "operator": "Gt", "value": "950"}, []),
    ({"key": "k", "operator": "Gt", "value": "08"},
     [f'{T}[0].value: Invalid value: "08": must be a canonical decimal integer within int64']),
    ({"key": "k", "operator": "Lt", "value": "9223372036854775808"},
     [f'{T}[0].value: Invalid value: "9223372036854775808": must be a canonical decimal integer within int64']),
    ({"key": "k", "operator": "Lt", "value": "+5"},
     [f'{T}[0].value: Invalid value: "+5": must be a canonical decimal integer within int64']),
    ({"key": "k", "operator": "Lt", "value": "-5"}, []),
    ({"key": "k", "operator": "SemverGt", "value": "v1.2.3"}, []),
    ({"key": "k", "operator": "SemverGt", "value": "1.2.3+build.5"}, []),
    ({"key": "k", "operator": "SemverEq", "value": "v1.2.x"},
     [f'{T}[0].value: Invalid value: "v1.2.x": Invalid character(s) found in patch number "x"']),
    ({"key": "k", "operator": "In", "value": "a"},
     [f'{T}[0].operator: Unsupported value: "In": supported values: {ALL_OPS}']),
    ({"key": "k", "operator": "equal", "value": "a"},
     [f'{T}[0].operator: Unsupported value: "equal": supported values: {ALL_OPS}']),
    # arity: Equal needs a label value, Exists none
    ({"key": "k", "operator": "Equal", "value": "a b"}, [f'{T}[0].operator: Invalid value: "a b": {LABEL_VALUE_ERR}']),
    ({"key": "k", "operator": "Exists", "value": "v", "effect": "NoSchedule"},
     [f'{T}[0].operator: Invalid value: core.Toleration{{Key:"k", Operator:"Exists", Value:"v", '
      f'Effect:"NoSchedule", TolerationSeconds:(*int64)(nil)}}: value must be empty when `operator` is \'Exists\'']),
    # key
    ({"operator": "Equal", "value": "v"},
     [f'{T}[0].operator: Invalid value: "Equal": operator must be Exists when `key` is empty, which means '
      '"match all values and all keys"']),
    (None, [f'{T}[0].operator: Invalid value: "": operator must be Exists when `key` is empty, which means '
            '"match all values and all keys"']),
    ({"operator": "Exists"}, []),
    ({"key": "a/b/c", "operator": "Exists"},
     [f'{T}[0].key: Invalid value: "a/b/c": a valid label key must consist of alphanumeric characters, \'-\', '
      "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
      "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
      "subdomain prefix and '/' (e.g. 'example.com/MyName')"]),
    # effect and tolerationSeconds
    ({"key": "k", "operator": "Exists", "effect": "NoScheduled"},
     [f'{T}[0].effect: Unsupported value: "NoScheduled": supported values: "NoSchedule", "PreferNoSchedule", '
      '"NoExecute"']),
    ({"key": "k", "operator": "Exists", "tolerationSeconds": 5},
     [f"{T}[0].effect: Invalid value: \"\": effect must be 'NoExecute' when `tolerationSeconds` is set"]),
    # CEL expressions (KEP-5500)
    ({"expression": "taint.key == 'a'"}, []),
    ({"expression": "taint.key == 'a'", "tolerationSeconds": 30}, []),
    ({"expression": "taint.key == 'a'", "key": "a"},
     [f'{T}[0].expression: Invalid value: "taint.key == \'a\'": expression cannot be used with key, value, '
      "operator, or effect fields"]),
    ({"expression": "taint.key == " + "'" + "a" * 10240 + "'"},
     [f"{T}[0].expression: Too long: may not be more than 10240 bytes"]),
    ({"expression": "taint.key"},
     [f'{T}[0].expression: Invalid value: "taint.key": expression must evaluate to bool, not string']),
    # every error is listed, in order
    ([{"key": "k", "operator": "Gt", "value": "x"}, {"key": "k", "operator": "Bad"}],
     [f'{T}[0].value: Invalid value: "x": must be a canonical decimal integer within int64',
      f'{T}[1].operator: Unsupported value: "Bad": supported values: {ALL_OPS}']),
]


@pytest.mark.parametrize("toleration, expected", TOLERATION_RULES)
def test_toleration_rules(toleration, expected):
    tolerations = toleration if isinstance(toleration, list) else [toleration]
    assert tol_errors(tolerations) == expected


def test_expression_compile_errors_are_reported_on_the_expression():
    (message,) = tol_errors([{"expression": "taint.key.nope()"}])
    assert message.startswith(f'{T}[0].expression: Invalid value: "taint.key.nope()": ')


GATED = [
    ("TaintTolerationComparisonOperators=false,TaintTolerationNodeAffinitySemverComparisonOperators=false",
     {"key": "k", "operator": "Gt", "value": "5"},
     f'{T}[0].operator: Unsupported value: "Gt": supported values: "Equal", "Exists"'),
    ("TaintTolerationNodeAffinitySemverComparisonOperators=false", {"key": "k", "operator": "SemverLt", "value": "1"},
     f'{T}[0].operator: Unsupported value: "SemverLt": supported values: "Equal", "Exists", "Lt", "Gt"'),
    ("TaintTolerationCEL=false", {"expression": "true"},
     f"{T}[0].expression: Forbidden: requires the TaintTolerationCEL feature gate"),
]


@pytest.mark.parametrize("gates, toleration, message", GATED)
def test_gate_off_rejects_the_operator(gates, toleration, message):
    assert tol_errors([toleration], parse_feature_gates(gates)) == [message]


def term(*requirements, fields=()):
    return {"matchExpressions": list(requirements), **({"matchFields": list(fields)} if fields else {})}


def required(*terms):
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}


AFFINITY_RULES = [
    (required(term({"key": "k", "operator": "In", "values": ["a"]})), []),
    ({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
     [f"{REQ}: Required value: must have at least one node selector term"]),
    (required(term({"key": "k", "operator": "In"})),
     [f"{REQ}[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"]),
    (required(term({"key": "k", "operator": "Exists", "values": ["a"]})),
     [f"{REQ}[0].matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or "
      "'DoesNotExist'"]),
    (required(term({"key": "k", "operator": "Gt", "values": ["1", "2"]})),
     [f"{REQ}[0].matchExpressions[0].values: Required value: must be specified single value when `operator` is "
      "'Lt' or 'Gt'"]),
    (required(term({"key": "k", "operator": "SemverGt", "values": ["1.0.0", "2.0.0"]})),
     [f"{REQ}[0].matchExpressions[0].values: Required value: must be specified single value when `operator` is "
      "'SemverLt' or 'SemverGt' or 'SemverEq'"]),
    # KEP-5721's ValidateNodeSelectorRequirement: field.Invalid on `values`, the whole list
    (required(term({"key": "k", "operator": "SemverGt", "values": ["v1.2.x"]})),
     [f'{REQ}[0].matchExpressions[0].values: Invalid value: []string{{"v1.2.x"}}: Invalid character(s) found '
      'in patch number "x"']),
    (required(term({"key": "k", "operator": "SemverGt", "values": ["1.0.0", "x"]})),
     [f"{REQ}[0].matchExpressions[0].values: Required value: must be specified single value when `operator` is "
      "'SemverLt' or 'SemverGt' or 'SemverEq'",
      f'{REQ}[0].matchExpressions[0].values: Invalid value: []string{{"1.0.0", "x"}}: Invalid character(s) found '
      'in major number "x"']),
    (required(term({"key": "k", "operator": "SemverGt", "values": ["1.2.3+meta"]})), []),
    (required(term({"key": "k", "operator": "Bogus", "values": ["a"]})),
     [f'{REQ}[0].matchExpressions[0].operator: Invalid value: "Bogus": not a valid selector operator']),
    (required(term({"key": "k", "operator": "In", "values": ["a b"]})),
     [f'{REQ}[0].matchExpressions[0].values[0]: Invalid value: "a b": {LABEL_VALUE_ERR}']),
    (required(term(fields=[{"key": "metadata.name", "operator": "SemverGt", "values": ["1.0.0"]}])),
     [f'{REQ}[0].matchFields[0].operator: Invalid value: "SemverGt": not a valid selector operator']),
    (required(term(fields=[{"key": "metadata.labels", "operator": "In", "values": ["n1"]}])),
     [f'{REQ}[0].matchFields[0].key: Invalid value: "metadata.labels": not a valid field selector key']),
    (required(term(fields=[{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}])),
     [f"{REQ}[0].matchFields[0].values: Required value: must be only one value when `operator` is 'In' or "
      "'NotIn' for node field selector"]),
    (required(term(fields=[{"key": "metadata.name", "operator": "In", "values": ["Node_1"]}])),
     [f'{REQ}[0].matchFields[0].values[0]: Invalid value: "Node_1": a lowercase RFC 1123 subdomain must consist '
      "of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
      "(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
      "[a-z0-9])?)*')"]),
    (required(term({"key": "", "operator": "Exists"})),
     [f'{REQ}[0].matchExpressions[0].key: Invalid value: "": name part must be non-empty',
      f'{REQ}[0].matchExpressions[0].key: Invalid value: "": name part must consist of alphanumeric characters, '
      "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
      "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]),
    (required(term({"key": "k", "operator": "Gt", "values": ["-5"]})),
     [f'{REQ}[0].matchExpressions[0].values[0]: Invalid value: "-5": {LABEL_VALUE_ERR}']),
    (required(term(), term({"key": "k", "operator": "DoesNotExist"})), []),
    ({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]},
     [f"{PREF}[0].weight: Invalid value: 0: must be in the range 1-100"]),
    ({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "preference": {}}]},
     [f"{PREF}[0].weight: Invalid value: 101: must be in the range 1-100"]),
    ({"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": term({"key": "k", "operator": "In", "values": ["a b"]})}]}, []),
]


@pytest.mark.parametrize("affinity, expected", AFFINITY_RULES)
def test_node_affinity_rules(affinity, expected):
    assert aff_errors(affinity) == expected


def test_semver_affinity_with_gate_off_is_not_a_valid_operator():
    gates = parse_feature_gates("TaintTolerationNodeAffinitySemverComparisonOperators=false")
    assert aff_errors(required(term({"key": "k", "operator": "SemverEq", "values": ["1.0.0"]})), gates) == [
        f'{REQ}[0].matchExpressions[0].operator: Invalid value: "SemverEq": not a valid selector operator']


# --- per-pod limits -------------------------------------------------------------------


def test_annotation_size_limit_is_checked_before_parsing():
    text = "[" + " " * MAX_ANNOTATION_BYTES + "]"
    assert tol_errors(text) == [f"{T}: Too long: may not be more than {MAX_ANNOTATION_BYTES} bytes"]


def test_tolerations_per_pod_count_spec_and_annotation_together():
    spec = [{"key": f"s{i}", "operator": "Exists"} for i in range(MAX_TOLERATIONS_PER_POD)]
    assert tol_errors([{"key": "k", "operator": "Exists"}], spec=spec) == [
        f"{T}: Too many: {MAX_TOLERATIONS_PER_POD + 1}: must have at most {MAX_TOLERATIONS_PER_POD} "
        "tolerations per pod (spec and annotation)"]
    assert tol_errors([], spec=spec) == []


def test_tolerations_per_pod_limit_applies_to_spec_alone_too():
    spec = [{"key": f"s{i}", "operator": "Exists"} for i in range(MAX_TOLERATIONS_PER_POD + 1)]
    check = check_pod({}, spec, P, FeatureGates())
    assert [str(e) for e in check.errors] == [
        f"spec.tolerations: Too many: {MAX_TOLERATIONS_PER_POD + 1}: must have at most {MAX_TOLERATIONS_PER_POD} "
        "tolerations per pod (spec and annotation)"]


def test_expressions_per_pod():
    tolerations = [{"expression": f"taint.key == 'k{i}'"} for i in range(MAX_EXPRESSIONS_PER_POD + 1)]
    assert tol_errors(tolerations) == [
        f"{T}: Too many: {MAX_EXPRESSIONS_PER_POD + 1}: must have at most {MAX_EXPRESSIONS_PER_POD} CEL expressions "
        "per pod (spec and annotation)"]


# --- warnings ---------------------------------------------------------------------------


def warnings_of(tolerations, spec=()):
    return list(check_pod({f"{P}/tolerations": json.dumps(tolerations)}, list(spec), P, FeatureGates()).warnings)


def test_warning_no_execute_from_the_annotation():
    assert warnings_of([{"key": "k", "operator": "Exists", "effect": "NoExecute"}]) == [
        f"{T}[0]: a NoExecute taint can only be tolerated from spec.tolerations: the node's taint manager evicts "
        "a pod that only this annotation lets onto the node"]


def test_warning_duplicate_of_a_spec_toleration():
    spec = [{"key": "x", "operator": "Exists"}, {"key": "k", "value": "v"}]
    assert warnings_of([{"key": "k", "operator": "Equal", "value": "v"}], spec) == [
        f"{T}[0]: duplicates spec.tolerations[1]"]


def test_warning_unknown_field():
    assert warnings_of([{"key": "k", "operator": "Exists", "Effect": "NoSchedule"}]) == [
        f'unknown field "{T}[0].Effect"']


def test_warning_expression_cost_close_to_the_limit():
    assert warnings_of([{"expression": "lists.range(140000).all(i, i >= 0)"}]) == [
        f"{T}[0].expression: estimated cost 840012 is close to the limit of 1000000"]
    assert warnings_of([{"expression": "lists.range(100000).all(i, i >= 0)"}]) == []  # 600012
