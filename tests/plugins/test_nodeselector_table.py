"""Node selector / node affinity matching tables ported as data from upstream tests.

Sources (kubernetes/kubernetes, facts only):
- staging/src/k8s.io/component-helpers/scheduling/corev1/helpers_test.go:
  TestMatchNodeSelectorTerms;
- staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go:
  TestNodeSelectorMatch, TestPreferredSchedulingTermsScore,
  TestNodeSelectorRequirementsAsSelector (error rows), TestPodMatchesNodeSelectorAndAffinityTerms.
Rows marked "spec" come from semantics.md §0.2, §6.1-§6.3.

Every match is checked on all paths: `matches(node)` (reference),
`matching_names(index, universe)` (set algebra) and `matching_mask(layer)` (label codes,
the fast path), which must agree.
"""

from __future__ import annotations

import pytest

from extender.matching.nodeselector import (
    RequirementError,
    compile_selector,
    compile_term,
    preferred_terms,
    required_affinity,
)
from extender.model import NodeSelector
from extender.model.parse import node_affinity_from_dict, node_from_dict
from extender.state import NodeSet
from extender.validation.pod import pod_from_dict

NAME_PART_ERROR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def node(name="", labels=None):
    return node_from_dict({"metadata": {"name": name, "labels": labels or {}}})


def expr(key, op, *values):
    req = {"key": key, "operator": op}
    if values:
        req["values"] = list(values)
    return req


def field(op, *values, key="metadata.name"):
    return {"key": key, "operator": op, "values": list(values)}


def term(exprs=None, fields=None):
    out = {}
    if exprs is not None:
        out["matchExpressions"] = exprs
    if fields is not None:
        out["matchFields"] = fields
    return out


def selector(*terms) -> NodeSelector:
    required, _, _ = node_affinity_from_dict(
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}, "t"
    )
    return required


def fast_match(compiled, n) -> bool:
    nodes = NodeSet([n])
    by_names = n.name in compiled.matching_names(nodes.label_index(), nodes.universe.names)
    assert bool(compiled.matching_mask(nodes.universe)[0]) is by_names, "the label-code path disagrees"
    return by_names


def both_paths(compiled, n) -> bool:
    ref = compiled.matches(n)
    assert fast_match(compiled, n) is ref, "fast path disagrees with the reference path"
    return ref


# ---------------------------------------------------------------------------------------------
# TestMatchNodeSelectorTerms: (name, terms, node name, node labels, want)
# "nil terms" with a nil node is represented by a selector without terms.
# ---------------------------------------------------------------------------------------------

MATCH_NODE_SELECTOR_TERMS = [
    ("nil terms", [], "n", {}, False),
    ("node label matches matchExpressions terms",
     [term([expr("label_1", "In", "label_1_val")])], "n", {"label_1": "label_1_val"}, True),
    ("node field matches matchFields terms",
     [term(fields=[field("In", "host_1")])], "host_1", {}, True),
    ("invalid node field requirement",
     [term(fields=[field("In", "host_1", "host_2")])], "host_1", {}, False),
    ("fieldSelectorTerm with node labels",
     [term(fields=[field("In", "host_1")])], "not_host_1", {"metadata.name": "host_1"}, False),
    ("labelSelectorTerm with node fields",
     [term([expr("metadata.name", "In", "host_1")])], "host_1", {}, False),
    ("labelSelectorTerm and fieldSelectorTerm set, only node fields",
     [term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")])], "host_1", {}, False),
    ("labelSelectorTerm and fieldSelectorTerm set, both matched",
     [term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")])], "host_1",
     {"label_1": "label_1_val"}, True),
    ("labelSelectorTerm and fieldSelectorTerm set, one mismatched",
     [term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")])], "host_1",
     {"label_1": "label_1_val-failed"}, False),
    ("multi-selector, both node fields and labels (one mismatched)",
     [term([expr("label_1", "In", "label_1_val")]), term(fields=[field("In", "host_1")])],
     "host_1", {"label_1": "label_1_val-failed"}, True),
]


@pytest.mark.parametrize(
    "terms, name, labels, want",
    [pytest.param(t, n, lab, w, id=d) for d, t, n, lab, w in MATCH_NODE_SELECTOR_TERMS],
)
def test_match_node_selector_terms(terms, name, labels, want):
    sel = selector(*terms)
    assert both_paths(compile_selector(sel), node(name, labels)) is want


def test_match_node_selector_terms_is_stateless():
    """TestMatchNodeSelectorTermsStateless: matching leaves the selector untouched."""
    raw = [term([expr("label_1", "In", "label_2_val", "label_1_val")],
                [field("In", "host_2", "host_1")])]
    sel = selector(*raw)
    before = repr(sel)
    compile_selector(sel).matches(node("host_1", {"label_1": "label_1_val"}))
    assert repr(sel) == before
    assert sel.terms[0].match_expressions[0].values == ("label_2_val", "label_1_val")


# ---------------------------------------------------------------------------------------------
# TestNodeSelectorMatch
# ---------------------------------------------------------------------------------------------


def test_node_selector_match_collects_errors_of_broken_terms():
    """Row "invalid field selector and label selector": terms 0 and 2 are invalid; the lazy
    selector keeps term 1 and records one error per broken term."""
    sel = selector(
        term(fields=[field("In", "host_1", "host_2")]),
        term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")]),
        term([expr("invalid key", "In", "label_value")]),
    )
    compiled = compile_selector(sel)
    assert len(compiled.terms) == 1
    assert len(compiled.errors) == 2
    assert "must have one element" in compiled.errors[0]
    assert NAME_PART_ERROR in compiled.errors[1]
    assert both_paths(compiled, node("host_1", {"label_1": "label_1_val"})) is True
    assert both_paths(compiled, node("host_1", {})) is False


NODE_SELECTOR_MATCH = [
    ("node matches field selector, but not labels",
     [term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")])], "host_1", {}, False),
    ("node matches field selector and label selector",
     [term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")])], "host_1",
     {"label_1": "label_1_val"}, True),
    ("second term matches",
     [term([expr("label_1", "In", "label_1_val")]), term(fields=[field("In", "host_1")])],
     "host_1", {}, True),
]


@pytest.mark.parametrize(
    "terms, name, labels, want",
    [pytest.param(t, n, lab, w, id=d) for d, t, n, lab, w in NODE_SELECTOR_MATCH],
)
def test_node_selector_match(terms, name, labels, want):
    compiled = compile_selector(selector(*terms))
    assert compiled.errors == ()
    assert both_paths(compiled, node(name, labels)) is want


# ---------------------------------------------------------------------------------------------
# TestNodeSelectorRequirementsAsSelector (error and Gt/Lt rows) + spec §6.2/§6.3/§0.2
# (name, requirement, error substring or None)
# ---------------------------------------------------------------------------------------------

REQUIREMENT_PARSE = [
    ("In with values", expr("foo", "In", "bar", "baz"), None),
    ("Exists with values", expr("foo", "Exists", "bar", "baz"),
     "values set must be empty for exists and does not exist"),
    ("Gt 1", expr("foo", "Gt", "1"), None),
    ("Lt 7", expr("bar", "Lt", "7"), None),
    ("spec: In without values", expr("foo", "In"),
     "for 'in', 'notin' operators, values set can't be empty"),
    ("spec: Gt with two values", expr("foo", "Gt", "1", "2"),
     "for 'Gt', 'Lt' operators, exactly one value is required"),
    ("spec: Gt non-integer", expr("foo", "Gt", "1.5"),
     "for 'Gt', 'Lt' operators, the value must be an integer"),
    ("spec: Gt leading zeros parse (ParseInt)", expr("foo", "Gt", "007"), None),
    ("spec: Gt -5 is not a label value", expr("foo", "Lt", "-5"), "a valid label must be"),
    ("spec: Gt +5 is not a label value", expr("foo", "Gt", "+5"), "a valid label must be"),
    ("spec: unknown operator", expr("foo", "Like", "x"), "Unsupported value"),
    ("spec: invalid value in NotIn", expr("foo", "NotIn", "invalid value: ___@#$%^"),
     "a valid label must be"),
    ("spec: SemverGt one value", expr("v", "SemverGt", "v1.2.3"), None),
    ("spec: SemverGt build metadata allowed", expr("v", "SemverEq", "1.0.0+build.1"), None),
    ("spec: SemverLt two values", expr("v", "SemverLt", "1.0.0", "2.0.0"), "exactly one value"),
    ("spec: SemverEq unparsable", expr("v", "SemverEq", "1.2-beta"), "semantic version"),
]


@pytest.mark.parametrize(
    "req, error", [pytest.param(r, e, id=d) for d, r, e in REQUIREMENT_PARSE]
)
def test_requirement_parse(req, error):
    sel = selector(term([req]))
    if error is None:
        compile_term(sel.terms[0], True)
    else:
        with pytest.raises(RequirementError) as info:
            compile_term(sel.terms[0], True)
        assert error in str(info.value)


@pytest.mark.parametrize(
    "req",
    [field("Exists"), field("Gt", "1"), field("SemverGt", "1.0.0"), field("In"),
     field("NotIn", "a", "b")],
    ids=["Exists", "Gt", "SemverGt", "In-no-values", "NotIn-two-values"],
)
def test_match_fields_only_in_notin_with_one_value(req):
    """spec §6.1 / §0.2: matchFields takes In/NotIn with exactly one value; a semver
    requirement is allowed only in matchExpressions."""
    sel = selector(term(fields=[req]))
    with pytest.raises(RequirementError):
        compile_term(sel.terms[0], True)
    compiled = compile_selector(sel)
    assert compiled.terms == () and len(compiled.errors) == 1


def test_semver_operator_with_gate_off_is_unsupported():
    sel = selector(term([expr("v", "SemverGt", "1.0.0")]))
    with pytest.raises(RequirementError):
        compile_term(sel.terms[0], False)
    compiled = compile_selector(sel, False)
    assert both_paths(compiled, node("n", {"v": "2.0.0"})) is False
    assert both_paths(compile_selector(sel, True), node("n", {"v": "2.0.0"})) is True


# ---------------------------------------------------------------------------------------------
# TestPreferredSchedulingTermsScore
# ---------------------------------------------------------------------------------------------


def preferred(*entries):
    _, terms, _ = node_affinity_from_dict(
        {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": w, "preference": p} for w, p in entries
        ]},
        "t",
    )
    return terms


def score(terms, n) -> int:
    ref = sum(t.weight for t in terms if t.term.matches(n))
    nodes = NodeSet([n])
    fast = sum(
        t.weight for t in terms
        if n.name in t.term.matching_names(nodes.label_index(), nodes.universe.names)
    )
    assert fast == ref
    assert sum(t.weight * int(t.term.matching_mask(nodes.universe)[0]) for t in terms) == ref
    return ref


def test_preferred_terms_invalid_field_and_label_selector_fail_the_set():
    terms = preferred(
        (1, term(fields=[field("In", "host_1", "host_2")])),
        (1, term([expr("label_1", "In", "label_1_val")], [field("In", "host_1")])),
        (1, term([expr("invalid key", "In", "label_value")])),
    )
    with pytest.raises(RequirementError) as info:
        preferred_terms(terms, True)
    assert "must have one element" in str(info.value)


def test_preferred_terms_invalid_key_alone_fails_the_set():
    terms = preferred((1, term([expr("invalid key", "In", "label_value")])))
    with pytest.raises(RequirementError) as info:
        preferred_terms(terms, True)
    assert NAME_PART_ERROR in str(info.value)


def test_preferred_terms_invalid_but_zero_weight_not_reported():
    terms = preferred((0, term(fields=[field("In", "host_1", "host_2")])))
    assert preferred_terms(terms, True) == ()
    assert score((), node("host_1")) == 0


def test_preferred_terms_first_and_third_match():
    terms = preferred(
        (5, term(fields=[field("In", "host_1")])),
        (7, term([expr("unknown_label", "In", "unknown_label_val")])),
        (11, term([expr("label_1", "In", "label_1_val")])),
    )
    compiled = preferred_terms(terms, True)
    assert score(compiled, node("host_1", {"label_1": "label_1_val"})) == 16


def test_preferred_terms_skip_empty_preference():
    """spec §6.4: a term with an empty preference is skipped (never an error)."""
    terms = preferred((3, term()), (4, term([expr("a", "Exists")])))
    compiled = preferred_terms(terms, True)
    assert [t.weight for t in compiled] == [4]
    assert score(compiled, node("n", {"a": ""})) == 4


# ---------------------------------------------------------------------------------------------
# TestPodMatchesNodeSelectorAndAffinityTerms: (name, pod spec, node labels, node name, want)
# ---------------------------------------------------------------------------------------------


def required(*terms):
    return {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
    }}}


POD_MATCHES = [
    ("no selector", {}, None, "", True),
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, None, "", False),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, "", True),
    ("node labels are superset", {"nodeSelector": {"foo": "bar"}},
     {"foo": "bar", "baz": "blah"}, "", True),
    ("node labels are subset", {"nodeSelector": {"foo": "bar", "baz": "blah"}},
     {"foo": "bar"}, "", False),
    ("matchExpressions In matches", required(term([expr("foo", "In", "bar", "value2")])),
     {"foo": "bar"}, "", True),
    ("matchExpressions Gt matches", required(term([expr("kernel-version", "Gt", "0204")])),
     {"kernel-version": "0206"}, "", True),
    ("matchExpressions NotIn matches", required(term([expr("mem-type", "NotIn", "DDR", "DDR2")])),
     {"mem-type": "DDR3"}, "", True),
    ("matchExpressions Exists matches", required(term([expr("GPU", "Exists")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", True),
    ("affinity does not match labels", required(term([expr("foo", "In", "value1", "value2")])),
     {"foo": "bar"}, "", False),
    ("nil []NodeSelectorTerm", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}}}},
     {"foo": "bar"}, "", False),
    ("empty []NodeSelectorTerm", required(), {"foo": "bar"}, "", False),
    ("empty MatchExpressions matches nothing", required(term([])), {"foo": "bar"}, "", False),
    ("no Affinity", {}, {"foo": "bar"}, "", True),
    ("Affinity but nil NodeSelector", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": None}}}, {"foo": "bar"}, "", True),
    ("multiple matchExpressions ANDed match",
     required(term([expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", True),
    ("multiple matchExpressions ANDed do not match",
     required(term([expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", False),
    ("multiple terms ORed",
     required(term([expr("foo", "In", "bar", "value2")]),
              term([expr("diffkey", "In", "wrong", "value2")])),
     {"foo": "bar"}, "", True),
    ("affinity and nodeSelector both satisfied",
     {"nodeSelector": {"foo": "bar"}, **required(term([expr("foo", "Exists")]))},
     {"foo": "bar"}, "", True),
    ("affinity matches but nodeSelector not",
     {"nodeSelector": {"foo": "bar"}, **required(term([expr("foo", "Exists")]))},
     {"foo": "barrrrrr"}, "", False),
    ("invalid value in affinity term",
     required(term([expr("foo", "NotIn", "invalid value: ___@#$%^")])), {"foo": "bar"}, "", False),
    ("matchFields In matches", required(term(fields=[field("In", "node_1")])), None, "node_1",
     True),
    ("matchFields In does not match", required(term(fields=[field("In", "node_1")])), None,
     "node_2", False),
    ("two terms: matchFields no, matchExpressions yes",
     required(term(fields=[field("In", "node_1")]), term([expr("foo", "In", "bar")])),
     {"foo": "bar"}, "node_2", True),
    ("one term: matchFields no, matchExpressions yes",
     required(term([expr("foo", "In", "bar")], [field("In", "node_1")])),
     {"foo": "bar"}, "node_2", False),
    ("one term: both match",
     required(term([expr("foo", "In", "bar")], [field("In", "node_1")])),
     {"foo": "bar"}, "node_1", True),
    ("two terms: neither matches",
     required(term(fields=[field("In", "node_1")]), term([expr("foo", "In", "not-match-to-bar")])),
     {"foo": "bar"}, "node_2", False),
    # spec §6.1-§6.3 and §0.2 extras
    ("spec: NotIn with absent label is true", required(term([expr("foo", "NotIn", "x")])), {},
     "", True),
    ("spec: DoesNotExist", required(term([expr("foo", "DoesNotExist")])), {"bar": "1"}, "", True),
    ("spec: Gt absent label is false", required(term([expr("n", "Gt", "1")])), {}, "", False),
    ("spec: Gt label not an integer", required(term([expr("n", "Gt", "1")])), {"n": "x2"}, "",
     False),
    ("spec: Lt strict", required(term([expr("n", "Lt", "5")])), {"n": "5"}, "", False),
    ("spec: Lt label with leading zeros", required(term([expr("n", "Lt", "10")])), {"n": "007"},
     "", True),
    ("spec: Gt negative requirement is a parse error", required(term([expr("n", "Gt", "-5")])),
     {"n": "3"}, "", False),
    ("spec: nodeSelector exact value only", {"nodeSelector": {"foo": "bar"}}, {"foo": "Bar"}, "",
     False),
    ("spec: empty nodeSelector map is no constraint", {"nodeSelector": {}}, {}, "", True),
    ("spec: SemverGt node newer", required(term([expr("k8s", "SemverGt", "v1.30")])),
     {"k8s": "v1.31.2"}, "", True),
    ("spec: SemverGt node older", required(term([expr("k8s", "SemverGt", "v1.30")])),
     {"k8s": "1.29.9"}, "", False),
    ("spec: SemverLt absent label", required(term([expr("k8s", "SemverLt", "2.0.0")])), {}, "",
     False),
    ("spec: SemverEq equal modulo v-prefix", required(term([expr("k8s", "SemverEq", "1.2.3")])),
     {"k8s": "v1.2.3"}, "", True),
    ("spec: SemverEq node label unparsable", required(term([expr("k8s", "SemverEq", "1.2.3")])),
     {"k8s": "latest"}, "", False),
    ("spec: broken term does not spoil a valid one",
     required(term([expr("invalid key", "Exists")]), term([expr("foo", "Exists")])),
     {"foo": "x"}, "", True),
]


@pytest.mark.parametrize(
    "spec, labels, name, want",
    [pytest.param(s, lab, n, w, id=d) for d, s, lab, n, w in POD_MATCHES],
)
def test_pod_matches_node_selector_and_affinity_terms(spec, labels, name, want):
    pod = pod_from_dict({"metadata": {"name": "p"}, "spec": spec})
    req = required_affinity(pod.node_selector, pod.affinity.required, True)
    # upstream uses unnamed nodes where matchFields play no role; name them for the index
    assert both_paths(req, node(name or "node", labels)) is want


def test_node_without_name_ignores_match_fields():
    """spec §6.1: matchFields use metadata.name, and only if the node has a non-empty name: a
    node without a name ignores matchFields entirely. Both paths must agree."""
    sel = selector(term([expr("foo", "In", "bar")], [field("In", "node_1")]))
    compiled = compile_selector(sel)
    nameless = node("", {"foo": "bar"})
    assert compiled.matches(nameless) is True
    assert fast_match(compiled, nameless) is True


def test_field_requirement_on_other_keys_reads_empty():
    """spec §6.1: a matchFields key other than metadata.name reads as ""."""
    n = node("n1", {"foo": "bar"})
    assert both_paths(compile_selector(selector(term(fields=[field("In", "", key="spec.x")]))), n)
    assert not both_paths(
        compile_selector(selector(term(fields=[field("In", "n1", key="spec.x")]))), n
    )
    assert both_paths(
        compile_selector(selector(term(fields=[field("NotIn", "n1", key="spec.x")]))), n
    )
    assert not both_paths(compile_selector(selector(term(fields=[field("NotIn", "n1")]))), n)
