"""Toleration matching tables ported as data from upstream Kubernetes tests.

Sources (kubernetes/kubernetes, facts only, no Go code):
- staging/src/k8s.io/api/core/v1/toleration_test.go: TestTolerationToleratesTaint (with the
  TaintTolerationComparisonOperators gate flag per row) and TestCompareNumericValues;
- staging/src/k8s.io/api/core/v1/taint_test.go: TestTaintToString;
- staging/src/k8s.io/component-helpers/scheduling/corev1/helpers_test.go:
  TestFindMatchingUntoleratedTaint.
Extra rows from semantics.md §0.1, §0.2, §3.1, §3.3 are marked "spec".
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from extender.features import FeatureGates
from extender.matching.tolerations import TolerationMatcher, do_not_schedule, tolerates
from extender.model import Taint, Toleration

GATE_ON = FeatureGates()
GATE_OFF = FeatureGates(comparison_operators=False)
SEMVER_OFF = FeatureGates(semver_operators=False)

SLA = "node.kubernetes.io/sla"
NS, PNS, NE = "NoSchedule", "PreferNoSchedule", "NoExecute"


def tol(key="", op="", value="", effect="", expression="") -> Toleration:
    return Toleration(key=key, operator=op, value=value, effect=effect, expression=expression)


# ---------------------------------------------------------------------------------------------
# TestTolerationToleratesTaint: (description, toleration, taint, gate, expect_tolerated)
# ---------------------------------------------------------------------------------------------

TOLERATES_TAINT = [
    ("same key and effect, Exists, taint without value",
     tol("foo", "Exists", effect=NS), Taint("foo", "", NS), False, True),
    ("same key and effect, Exists, taint with value",
     tol("foo", "Exists", effect=NS), Taint("foo", "bar", NS), False, True),
    ("same effect, empty key with Exists matches all taints",
     tol("", "Exists", effect=NS), Taint("foo", "bar", NS), False, True),
    ("same key, effect and value, Equal",
     tol("foo", "Equal", "bar", NS), Taint("foo", "bar", NS), False, True),
    ("same key and effect, different values, Equal",
     tol("foo", "Equal", "value1", NS), Taint("foo", "value2", NS), False, False),
    ("same key and value, different effects, Equal",
     tol("foo", "Equal", "bar", NS), Taint("foo", "bar", NE), False, False),
    ("Gt: taint value less than toleration value",
     tol(SLA, "Gt", "950", NS), Taint(SLA, "800", NS), True, False),
    ("Gt: taint value greater than toleration value",
     tol(SLA, "Gt", "750", NS), Taint(SLA, "950", NS), True, True),
    ("Lt: taint value greater than toleration value",
     tol(SLA, "Lt", "800", NS), Taint(SLA, "950", NS), True, False),
    ("Lt: taint value less than toleration value",
     tol(SLA, "Lt", "950", NS), Taint(SLA, "800", NS), True, True),
    ("Gt: equal numeric values",
     tol(SLA, "Gt", "950", NS), Taint(SLA, "950", NS), True, False),
    ("Gt: non-numeric taint value",
     tol(SLA, "Gt", "950", NS), Taint(SLA, "high", NS), True, False),
    ("Gt: negative values, taint below threshold",
     tol("test-key", "Gt", "-100", NS), Taint("test-key", "-200", NS), True, False),
    ("Gt: large int64 threshold, taint below",
     tol("test-key", "Gt", "9223372036854775806", NS), Taint("test-key", "100", NS), True, False),
]


@pytest.mark.parametrize(
    "toleration, taint, gate, expected",
    [pytest.param(t, n, g, e, id=d) for d, t, n, g, e in TOLERATES_TAINT],
)
def test_toleration_tolerates_taint(toleration, taint, gate, expected):
    gates = GATE_ON if gate else GATE_OFF
    assert tolerates(toleration, taint, gates, None) is expected


@pytest.mark.parametrize(
    "toleration, taint",
    [pytest.param(t, n, id=d) for d, t, n, g, e in TOLERATES_TAINT if g and e],
)
def test_gt_lt_never_tolerate_with_gate_off(toleration, taint):
    """spec §3.1: with the gate off Lt/Gt are false before any comparison."""
    assert tolerates(toleration, taint, GATE_ON, None) is True
    assert tolerates(toleration, taint, GATE_OFF, None) is False


@pytest.mark.parametrize(
    "toleration, taint",
    [pytest.param(t, n, id=d) for d, t, n, g, e in TOLERATES_TAINT if not g],
)
def test_non_numeric_rows_ignore_the_gate(toleration, taint):
    assert tolerates(toleration, taint, GATE_ON, None) == tolerates(toleration, taint, GATE_OFF, None)


# ---------------------------------------------------------------------------------------------
# TestCompareNumericValues, exercised through tolerates() with matching key and effect:
# (description, toleration value, taint value, operator, expected)
# The two rows with operators Equal/Exists are not ported: they call the private numeric
# comparator directly, which has no counterpart in tolerates().
# ---------------------------------------------------------------------------------------------

COMPARE_NUMERIC = [
    ("Gt taint greater", "100", "200", "Gt", True),
    ("Gt taint less", "200", "100", "Gt", False),
    ("Gt equal", "100", "100", "Gt", False),
    ("Gt negatives taint greater", "-100", "-50", "Gt", True),
    ("Gt negatives taint less", "-50", "-100", "Gt", False),
    ("Gt zero and positive", "0", "1", "Gt", True),
    ("Gt large int64 taint greater", "9223372036854775806", "9223372036854775807", "Gt", True),
    ("Lt taint less", "200", "100", "Lt", True),
    ("Lt taint greater", "100", "200", "Lt", False),
    ("Lt equal", "100", "100", "Lt", False),
    ("Lt negatives taint less", "-50", "-100", "Lt", True),
    ("Lt negatives taint greater", "-100", "-50", "Lt", False),
    ("Lt zero and negative", "0", "-1", "Lt", True),
    ("Gt toleration non-numeric", "abc", "100", "Gt", False),
    ("Gt toleration empty", "", "100", "Gt", False),
    ("Gt toleration leading zero", "0100", "200", "Gt", False),
    ("Gt toleration plus sign", "+100", "200", "Gt", False),
    ("Gt toleration floating point", "100.5", "200", "Gt", False),
    ("Gt toleration just minus", "-", "100", "Gt", False),
    ("Gt taint non-numeric", "100", "xyz", "Gt", False),
    ("Gt taint empty", "100", "", "Gt", False),
    ("Gt taint leading zero", "100", "0200", "Gt", False),
    ("Lt taint plus sign", "100", "+200", "Lt", False),
    ("Lt taint spaces", "100", " 200 ", "Lt", False),
    ("Gt both zero", "0", "0", "Gt", False),
    ("Lt both zero", "0", "0", "Lt", False),
    ("Gt max int64 taint", "0", "9223372036854775807", "Gt", True),
    ("Lt min int64 taint", "0", "-9223372036854775808", "Lt", True),
    # spec §3.3 outcome/matching tables
    ("spec: Gt -1 vs 0", "-1", "0", "Gt", True),
    ("spec: Gt taint -0 not canonical", "-1", "-0", "Gt", False),
    ("spec: Gt taint beyond int64", "0", "9223372036854775808", "Gt", False),
    ("spec: Lt toleration beyond int64", "12345678901234567890", "5", "Lt", False),
    ("spec: Gt underscore", "1_000", "2000", "Gt", False),
    ("spec: Gt exponent", "1", "1e3", "Gt", False),
    ("spec: Gt hex", "1", "0x10", "Gt", False),
    ("spec: Gt unicode digits", "1", "\u0665", "Gt", False),
]


@pytest.mark.parametrize(
    "tol_value, taint_value, op, expected",
    [pytest.param(a, b, o, e, id=d) for d, a, b, o, e in COMPARE_NUMERIC],
)
def test_compare_numeric_values_through_tolerates(tol_value, taint_value, op, expected):
    toleration = tol("k", op, tol_value, NS)
    assert tolerates(toleration, Taint("k", taint_value, NS), GATE_ON, None) is expected
    assert tolerates(toleration, Taint("k", taint_value, NS), GATE_OFF, None) is False


# ---------------------------------------------------------------------------------------------
# Extender operators (spec §0.2, §3.5): SemverGt/Lt/Eq compare taint OP toleration.
# ---------------------------------------------------------------------------------------------

SEMVER = [
    ("SemverGt taint newer (KEP example)", "SemverGt", "v1.5.0", "v2.0.0", True),
    ("SemverGt taint older", "SemverGt", "v2.0.0", "v1.5.0", False),
    ("SemverGt equal", "SemverGt", "1.5.0", "1.5.0", False),
    ("SemverLt taint older", "SemverLt", "1.10.0", "1.9.0", True),
    ("SemverLt taint newer", "SemverLt", "1.9.0", "1.10.0", False),
    ("SemverEq tolerant forms", "SemverEq", "v1.2", "1.2.0", True),
    ("SemverEq build metadata ignored", "SemverEq", "1.0.0+build", "1.0.0", True),
    ("SemverLt pre-release lower", "SemverLt", "1.0.0", "1.0.0-rc.1", True),
    ("SemverGt unparsable taint", "SemverGt", "1.0.0", "high", False),
    ("SemverGt unparsable toleration", "SemverGt", "1.2-beta", "2.0.0", False),
    ("SemverEq both unparsable", "SemverEq", "x", "x", False),
]


@pytest.mark.parametrize(
    "op, tol_value, taint_value, expected",
    [pytest.param(o, a, b, e, id=d) for d, o, a, b, e in SEMVER],
)
def test_semver_operators(op, tol_value, taint_value, expected):
    toleration = tol("version", op, tol_value, NS)
    taint = Taint("version", taint_value, NS)
    assert tolerates(toleration, taint, GATE_ON, None) is expected
    assert tolerates(toleration, taint, SEMVER_OFF, None) is False
    # the key and effect checks come first, as for every operator (spec §3.5)
    assert tolerates(toleration, Taint("other", taint_value, NS), GATE_ON, None) is False
    assert tolerates(toleration, Taint("version", taint_value, NE), GATE_ON, None) is False


# ---------------------------------------------------------------------------------------------
# spec §3.1: rules around the operator switch.
# ---------------------------------------------------------------------------------------------

SPEC_RULES = [
    ("empty operator means Equal", tol("foo", "", "bar", NS), Taint("foo", "bar", NS), True),
    ("empty effect matches every effect", tol("foo", "Equal", "bar"), Taint("foo", "bar", NE), True),
    ("Exists ignores a set value", tol("foo", "Exists", "zzz", NS), Taint("foo", "bar", NS), True),
    ("Equal empty equals empty", tol("foo", "Equal", "", NS), Taint("foo", "", NS), True),
    ("empty-key Equal matches any key with that value",
     tol("", "Equal", "bar", NS), Taint("anything", "bar", NS), True),
    ("lower-case operator is unknown", tol("foo", "exists", "", NS), Taint("foo", "", NS), False),
    ("lower-case equal is unknown", tol("foo", "equal", "bar", NS), Taint("foo", "bar", NS), False),
    ("lower-case gt is unknown", tol("k", "gt", "1", NS), Taint("k", "5", NS), False),
    ("Equal is byte-exact", tol("foo", "Equal", "Bar", NS), Taint("foo", "bar", NS), False),
    ("key mismatch", tol("foo", "Exists"), Taint("food", "", NS), False),
]


@pytest.mark.parametrize(
    "toleration, taint, expected", [pytest.param(t, n, e, id=d) for d, t, n, e in SPEC_RULES]
)
def test_spec_operator_rules(toleration, taint, expected):
    assert tolerates(toleration, taint, GATE_ON, None) is expected


@dataclass(frozen=True)
class _Outcome:
    matched: bool
    kind: str = "true"
    message: str = ""


class FakeCel:
    """`expression` = the taint key it matches; anything else does not match."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Taint]] = []

    def evaluate(self, expression: str, taint: Taint) -> _Outcome:
        self.calls.append((expression, taint))
        hit = expression == taint.key
        return _Outcome(hit, "true" if hit else "false")


def test_expression_tolerations_use_cel_and_reject_mixed_fields():
    """spec §0.7: expression alone goes to CEL; combined with key/operator/value/effect it is
    invalid and never matches; no CEL engine (cel=None) or the gate off never matches."""
    cel = FakeCel()
    taint = Taint("gpu", "a100", NS)
    assert tolerates(tol(expression="gpu"), taint, GATE_ON, cel) is True
    assert tolerates(tol(expression="cpu"), taint, GATE_ON, cel) is False
    assert tolerates(tol(expression="gpu"), taint, GATE_ON, None) is False
    assert tolerates(tol(expression="gpu"), taint, FeatureGates(cel=False), cel) is False
    for mixed in (tol("gpu", expression="gpu"), tol(op="Exists", expression="gpu"),
                  tol(value="a100", expression="gpu"), tol(effect=NS, expression="gpu")):
        assert tolerates(mixed, taint, GATE_ON, cel) is False
    assert [c[0] for c in cel.calls] == ["gpu", "cpu"]


# ---------------------------------------------------------------------------------------------
# TestTaintToString: (taint, expected string)
# ---------------------------------------------------------------------------------------------

TAINT_TO_STRING = [
    (Taint("foo", "bar", NS), "foo=bar:NoSchedule"),
    (Taint("foo", "", NS), "foo:NoSchedule"),
    (Taint("foo"), "foo"),
    (Taint("foo", "bar"), "foo=bar:"),
]


@pytest.mark.parametrize("taint, expected", TAINT_TO_STRING, ids=[e for _, e in TAINT_TO_STRING])
def test_taint_to_string(taint, expected):
    assert str(taint) == expected


# ---------------------------------------------------------------------------------------------
# TestFindMatchingUntoleratedTaint:
# (description, tolerations, taints, filter, gate, expect_tolerated)
# Filters: "all" = accepts every taint, "none" = accepts none, None = no filter,
# "noexecute" = effect NoExecute only. `expectError` has no counterpart: on master the
# matcher returns a plain bool (spec, "Versions and conventions").
# ---------------------------------------------------------------------------------------------

FILTERS = {
    "all": lambda t: True,
    "none": lambda t: False,
    None: None,
    "noexecute": lambda t: t.effect == NE,
}

FIND_UNTOLERATED = [
    ("empty tolerations tolerate empty taints", [], [], "all", False, True),
    ("non-empty tolerations tolerate empty taints", [tol("foo", "Exists", effect=NS)], [], "all",
     False, True),
    ("tolerations match all taints", [tol("foo", "Exists", effect=NS)], [Taint("foo", "", NS)],
     "all", False, True),
    ("no taint passes the filter", [tol("foo", "Exists", effect=NS)], [Taint("bar", "", NS)],
     "none", False, True),
    ("nil filter applies to all taints", [tol("foo", "Exists", effect=NS)],
     [Taint("bar", "", NS)], None, False, False),
    ("tolerations match the filtered taints", [tol("foo", "Exists", effect=NE)],
     [Taint("foo", "", NE), Taint("bar", "", NS)], "noexecute", False, True),
    ("Gt below threshold", [tol(SLA, "Gt", "950", NS)], [Taint(SLA, "800", NS)], "all", True,
     False),
    ("Gt above threshold", [tol(SLA, "Gt", "750", NS)], [Taint(SLA, "950", NS)], "all", True,
     True),
    ("Lt above threshold", [tol(SLA, "Lt", "800", NS)], [Taint(SLA, "950", NS)], "all", True,
     False),
    ("Gt non-numeric taint", [tol(SLA, "Gt", "950", NS)], [Taint(SLA, "high", NS)], "all", True,
     False),
    ("Gt parse error ignored when a later toleration matches",
     [tol(SLA, "Gt", "950", NS), tol(SLA, "Exists", effect=NS)], [Taint(SLA, "high", NS)],
     "all", True, True),
]


@pytest.mark.parametrize(
    "tolerations, taints, keep, gate, expected",
    [pytest.param(a, b, f, g, e, id=d) for d, a, b, f, g, e in FIND_UNTOLERATED],
)
def test_find_matching_untolerated_taint(tolerations, taints, keep, gate, expected):
    matcher = TolerationMatcher(tolerations, GATE_ON if gate else GATE_OFF, None)
    found = matcher.first_untolerated(taints, FILTERS[keep])
    assert (found is None) is expected
    if found is not None:
        assert found in taints


def test_first_untolerated_is_first_in_node_order():
    """spec §3.1: the first kept taint (node order) nobody tolerates is returned."""
    taints = [Taint("a", "", PNS), Taint("b", "", NS), Taint("c", "", NE), Taint("d", "", NS)]
    matcher = TolerationMatcher([tol("b", "Exists")], GATE_ON, None)
    assert matcher.first_untolerated(taints, do_not_schedule) == Taint("c", "", NE)
    assert matcher.first_untolerated(taints, None) == Taint("a", "", PNS)
    assert matcher.tolerated(Taint("b", "x", NE)) is True
    assert matcher.tolerated(Taint("z", "", NS)) is False


def test_do_not_schedule_filter():
    assert do_not_schedule(Taint("k", "", NS)) is True
    assert do_not_schedule(Taint("k", "", NE)) is True
    assert do_not_schedule(Taint("k", "", PNS)) is False
    assert do_not_schedule(Taint("k", "", "")) is False
