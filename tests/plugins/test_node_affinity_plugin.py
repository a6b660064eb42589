"""NodeAffinity plugin tables ported as data from upstream tests.

Source (kubernetes/kubernetes, facts only):
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go: TestNodeAffinity
(PreFilter Skip / PreFilterResult / conflict, Filter with and without PreFilter) and
TestNodeAffinityPriority (normalisation {18, 100, 36}, PreScore Skip and Error).
Rows that need `NodeAffinityArgs.addedAffinity` are not ported (plugin args not supported).

Every row runs `filter` (per node) and `filter_nodes` (batch), and `score` and `score_nodes`,
asserting identical results.
"""

from __future__ import annotations

import pytest
from plugin_harness import snapshot_backed, verdict

from extender.features import FeatureGates
from extender.framework import Code, CycleState, NodeScore, PreFilterResult, Status
from extender.framework.handle import Handle
from extender.framework.verdicts import failing
from extender.model.parse import node_from_dict
from extender.plugins.nodeaffinity import NodeAffinity
from extender.state import NodeSet
from extender.validation.pod import pod_from_dict

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_CONFLICT = "pod affinity terms conflict"
NAME_PART_ERROR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)


def plugin() -> NodeAffinity:
    return NodeAffinity(Handle(FeatureGates(), cel=None))


def node(name, labels=None):
    return node_from_dict({"metadata": {"name": name, "labels": labels or {}}})


def pod(spec=None, annotations=None):
    meta = {"name": "p", "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return pod_from_dict({"metadata": meta, "spec": spec or {}})


def expr(key, op, *values):
    req = {"key": key, "operator": op}
    if values:
        req["values"] = list(values)
    return req


def name_in(*values):
    return {"key": "metadata.name", "operator": "In", "values": list(values)}


def term(exprs=None, fields=None):
    out = {}
    if exprs is not None:
        out["matchExpressions"] = exprs
    if fields is not None:
        out["matchFields"] = fields
    return out


def required(*terms, node_selector=None):
    spec = {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
    }}}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return spec




SUCCESS = (Code.SUCCESS, "")
REJECT = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_POD)
SKIP = (Code.SKIP, "")
CONFLICT = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_CONFLICT)

# ---------------------------------------------------------------------------------------------
# TestNodeAffinity:
# (name, pod spec, node labels, node name, want filter, want prefilter, want prefilter names,
#  run prefilter)
# ---------------------------------------------------------------------------------------------

NODE_AFFINITY = [
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, None, "", REJECT, SUCCESS, None, True),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, "", SUCCESS, SUCCESS, None,
     True),
    ("node labels are superset", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar", "baz": "blah"},
     "", SUCCESS, SUCCESS, None, True),
    ("node labels are subset", {"nodeSelector": {"foo": "bar", "baz": "blah"}}, {"foo": "bar"},
     "", REJECT, SUCCESS, None, True),
    ("matchExpressions In matches", required(term([expr("foo", "In", "bar", "value2")])),
     {"foo": "bar"}, "", SUCCESS, SUCCESS, None, True),
    ("matchExpressions Gt matches", required(term([expr("kernel-version", "Gt", "0204")])),
     {"kernel-version": "0206"}, "", SUCCESS, SUCCESS, None, True),
    ("matchExpressions NotIn matches", required(term([expr("mem-type", "NotIn", "DDR", "DDR2")])),
     {"mem-type": "DDR3"}, "", SUCCESS, SUCCESS, None, True),
    ("matchExpressions Exists matches", required(term([expr("GPU", "Exists")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", SUCCESS, SUCCESS, None, True),
    ("affinity does not match node labels", required(term([expr("foo", "In", "value1", "value2")])),
     {"foo": "bar"}, "", REJECT, SUCCESS, None, True),
    ("empty MatchExpressions matches no objects", required(term([])), {"foo": "bar"}, "", REJECT,
     SUCCESS, None, True),
    ("no Affinity", {}, {"foo": "bar"}, "", SUCCESS, SKIP, None, True),
    ("Affinity but nil NodeSelector", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": None}}}, {"foo": "bar"}, "", SUCCESS,
     SKIP, None, True),
    ("multiple matchExpressions ANDed match",
     required(term([expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", SUCCESS, SUCCESS, None, True),
    ("multiple matchExpressions ANDed do not match",
     required(term([expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", REJECT, SUCCESS, None, True),
    ("multiple NodeSelectorTerms ORed",
     required(term([expr("foo", "In", "bar", "value2")]),
              term([expr("diffkey", "In", "wrong", "value2")])),
     {"foo": "bar"}, "", SUCCESS, SUCCESS, None, True),
    ("Affinity and nodeSelector both satisfied",
     required(term([expr("foo", "Exists")]), node_selector={"foo": "bar"}), {"foo": "bar"}, "",
     SUCCESS, SUCCESS, None, True),
    ("Affinity matches but nodeSelector not",
     required(term([expr("foo", "Exists")]), node_selector={"foo": "bar"}), {"foo": "barrrrrr"},
     "", REJECT, SUCCESS, None, True),
    ("invalid value in Affinity term",
     required(term([expr("foo", "NotIn", "invalid value: ___@#$%^")])), {"foo": "bar"}, "",
     REJECT, SUCCESS, None, True),
    ("matchFields In matches", required(term(fields=[name_in("node1")])), None, "node1", SUCCESS,
     SUCCESS, {"node1"}, True),
    ("matchFields In does not match", required(term(fields=[name_in("node1")])), None, "node2",
     REJECT, SUCCESS, {"node1"}, True),
    ("two terms: matchFields no, matchExpressions yes",
     required(term(fields=[name_in("node1"), name_in("node2")]), term([expr("foo", "In", "bar")])),
     {"foo": "bar"}, "node2", SUCCESS, SUCCESS, None, True),
    ("one term: matchFields no, matchExpressions yes",
     required(term([expr("foo", "In", "bar")], [name_in("node1")])), {"foo": "bar"}, "node2",
     REJECT, SUCCESS, {"node1"}, True),
    ("one term: both match",
     required(term([expr("foo", "In", "bar")], [name_in("node1")])), {"foo": "bar"}, "node1",
     SUCCESS, SUCCESS, {"node1"}, True),
    ("two terms: neither matches",
     required(term(fields=[name_in("node1")]), term([expr("foo", "In", "not-match-to-bar")])),
     {"foo": "bar"}, "node2", REJECT, SUCCESS, None, True),
    ("two terms of node.Name affinity",
     required(term(fields=[name_in("node1")]), term(fields=[name_in("node2")])), None, "node2",
     SUCCESS, SUCCESS, {"node1", "node2"}, True),
    ("two conflicting matchFields requirements",
     required(term(fields=[name_in("node1"), name_in("node2")])), {"foo": "bar"}, "node2",
     REJECT, CONFLICT, None, True),
    ("nodeSelector matches even if PreFilter is not called", {"nodeSelector": {"foo": "bar"}},
     {"foo": "bar", "baz": "blah"}, "", SUCCESS, None, None, False),
    ("node affinity matches even if PreFilter is not called",
     required(term([expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")])),
     {"GPU": "NVIDIA-GRID-K1"}, "", SUCCESS, None, None, False),
    # spec §6.4 extras
    ("spec: empty non-nil nodeSelector does not skip", {"nodeSelector": {}}, {"foo": "bar"}, "",
     SUCCESS, SUCCESS, None, True),
    ("spec: NotIn metadata.name does not restrict",
     required(term(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["node1"]}])),
     None, "node2", SUCCESS, SUCCESS, None, True),
    ("spec: In metadata.name with several values",
     required(term(fields=[name_in("node1", "node2")])), None, "node2", REJECT, SUCCESS,
     {"node1", "node2"}, True),
    # upstream node_affinity.go PreFilter: zero nodeSelectorTerms -> (nil, nil), no conflict;
    # Filter then rejects (a selector without terms matches nothing).
    ("code: zero terms -> PreFilter Success, Filter rejects", required(), {"foo": "bar"}, "n",
     REJECT, SUCCESS, None, True),
    ("code: null terms -> PreFilter Success, Filter rejects", {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}}}},
     {"foo": "bar"}, "n", REJECT, SUCCESS, None, True),
    ("spec: nodeSelector reject not run through PreFilter", {"nodeSelector": {"a": "b"}},
     {"a": "c"}, "", REJECT, None, None, False),
    ("spec: SemverGt affinity", required(term([expr("kernel", "SemverGt", "5.10")])),
     {"kernel": "6.1.0"}, "", SUCCESS, SUCCESS, None, True),
    ("spec: SemverLt affinity fails", required(term([expr("kernel", "SemverLt", "5.10")])),
     {"kernel": "6.1.0"}, "", REJECT, SUCCESS, None, True),
]


@pytest.mark.parametrize(
    "spec, labels, name, want, want_pre, want_names, run_pre",
    [pytest.param(*row[1:], id=row[0]) for row in NODE_AFFINITY],
)
def test_node_affinity(spec, labels, name, want, want_pre, want_names, run_pre):
    p = plugin()
    the_pod = pod(spec)
    n = node(name or "node", labels)
    nodes = NodeSet([n])

    ref_state, fast_state = CycleState(), CycleState()
    if run_pre:
        ref_result, ref_status = p.pre_filter(ref_state, the_pod, nodes)
        fast_result, fast_status = p.pre_filter(fast_state, the_pod, nodes)
        assert verdict(ref_status) == want_pre
        assert verdict(fast_status) == want_pre
        if want_names is None:
            assert ref_result is None
        else:
            assert ref_result == PreFilterResult(frozenset(want_names))
        assert fast_result == ref_result

    ref = p.filter(ref_state, the_pod, n)
    fails = failing(p.filter_nodes(fast_state, the_pod, nodes), nodes)
    assert set(fails) <= {n.name}
    assert verdict(ref) == want
    assert verdict(fails.get(n.name, Status())) == want

    memo_state, memo_nodes = snapshot_backed([n])
    if run_pre:
        memo_result, memo_status = p.pre_filter(memo_state, the_pod, memo_nodes)
        assert memo_result == ref_result
        assert verdict(memo_status) == want_pre
    assert verdict(failing(p.filter_nodes(memo_state, the_pod, memo_nodes), memo_nodes).get(n.name, Status())) == want


def test_filter_batch_over_many_nodes_matches_reference():
    """Each TestNodeAffinity pod against all the table's nodes at once: batch == per node."""
    p = plugin()
    nodes = [node(name or f"n{i}", labels) for i, (_, _, labels, name, *_rest)
             in enumerate(NODE_AFFINITY)]
    unique = {n.name: n for n in nodes}
    node_set = NodeSet(list(unique.values()))
    for row in NODE_AFFINITY:
        the_pod = pod(row[1])
        ref_state, fast_state = CycleState(), CycleState()
        p.pre_filter(ref_state, the_pod, node_set)
        p.pre_filter(fast_state, the_pod, node_set)
        fails = failing(p.filter_nodes(fast_state, the_pod, node_set), node_set)
        memo_state, memo_nodes = snapshot_backed(list(unique.values()))
        p.pre_filter(memo_state, the_pod, memo_nodes)
        memo_fails = failing(p.filter_nodes(memo_state, the_pod, memo_nodes), memo_nodes)
        for n in node_set:
            ref = p.filter(ref_state, the_pod, n)
            assert verdict(fails.get(n.name, Status())) == verdict(ref), (row[0], n.name)
            assert verdict(memo_fails.get(n.name, Status())) == verdict(ref), (row[0], n.name)


def test_malformed_affinity_annotation_rejects_in_prefilter():
    """spec §0.6: a malformed node-affinity annotation is UnschedulableAndUnresolvable with a
    reason that names the annotation."""
    the_pod = pod(annotations={"scheduling-extender.io/node-affinity": "[1, 2"})
    result, status = plugin().pre_filter(CycleState(), the_pod, NodeSet([node("a")]))
    assert result is None
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "scheduling-extender.io/node-affinity" in status.message()


def test_affinity_annotation_required_is_anded_with_spec():
    """spec §0.6: the annotation's required selector must match in addition to the spec's."""
    ann = ('{"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": '
           '[{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}')
    the_pod = pod(required(term([expr("gpu", "Exists")])),
                  annotations={"scheduling-extender.io/node-affinity": ann})
    p = plugin()
    nodes = [node("both", {"gpu": "1", "zone": "a"}), node("gpu-only", {"gpu": "1"}),
             node("zone-only", {"zone": "a"})]
    node_set = NodeSet(nodes)
    state = CycleState()
    assert p.pre_filter(state, the_pod, node_set)[1].is_success
    fails = failing(p.filter_nodes(state, the_pod, node_set), node_set)
    assert set(fails) == {"gpu-only", "zone-only"}
    for n in nodes:
        assert verdict(p.filter(state, the_pod, n)) == verdict(fails.get(n.name, Status()))


# ---------------------------------------------------------------------------------------------
# TestNodeAffinityPriority: (name, pod spec, nodes [(name, labels)], expected, run PreScore,
#                            want PreScore code)
# ---------------------------------------------------------------------------------------------

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}


def preferred(*entries):
    return {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": p} for w, p in entries
    ]}}}


AFFINITY1 = preferred((2, term([expr("foo", "In", "bar")])))
AFFINITY2 = preferred(
    (2, term([expr("foo", "In", "bar")])),
    (4, term([expr("key", "In", "value")])),
    (5, term([expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1")])),
)

PRIORITY = [
    ("all nodes same priority as NodeAffinity is nil", {},
     [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)], [0, 0, 0], False, None),
    ("no node matches preferred terms", AFFINITY1,
     [("node1", LABEL4), ("node2", LABEL2), ("node3", LABEL3)], [0, 0, 0], True, Code.SUCCESS),
    ("only node1 matches", AFFINITY1,
     [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)], [100, 0, 0], True, Code.SUCCESS),
    ("all nodes match with different priorities", AFFINITY2,
     [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)], [18, 100, 36], True,
     Code.SUCCESS),
    ("priorities correct even if PreScore is not called", AFFINITY2,
     [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)], [18, 100, 36], False, None),
    # spec §6.2/§6.4 extras
    ("spec: weight-0 term ignored", preferred((0, term([expr("foo", "Exists")])),
                                              (3, term([expr("key", "Exists")]))),
     [("node1", LABEL1), ("node2", LABEL2)], [0, 100], True, Code.SUCCESS),
    ("spec: Gt/Lt and matchFields in preferred terms",
     preferred((1, term([expr("n", "Gt", "5")])), (3, term(fields=[name_in("node2")]))),
     [("node1", {"n": "6"}), ("node2", {"n": "1"}), ("node3", {"n": "x"})], [33, 100, 0], True,
     Code.SUCCESS),
    ("spec: Semver operators in preferred terms",
     preferred((2, term([expr("v", "SemverGt", "1.0.0")])), (2, term([expr("v", "SemverEq", "1")]))),
     [("node1", {"v": "1.0.0"}), ("node2", {"v": "v1.2"}), ("node3", {})], [100, 100, 0], True,
     Code.SUCCESS),
]


def run_scores(p: NodeAffinity, the_pod, nodes, run_pre):
    node_set = NodeSet(nodes)
    ref_state, fast_state = CycleState(), CycleState()
    if run_pre:
        assert p.pre_score(ref_state, the_pod, node_set).is_success
        assert p.pre_score(fast_state, the_pod, node_set).is_success
    raw = []
    for n in nodes:
        value, status = p.score(ref_state, the_pod, n)
        assert status.is_success
        raw.append(value)
    assert list(p.score_nodes(fast_state, the_pod, node_set)) == raw, "score_nodes disagrees"
    memo_state, memo_nodes = snapshot_backed(nodes)
    if run_pre:
        assert p.pre_score(memo_state, the_pod, memo_nodes).is_success
    assert list(p.score_nodes(memo_state, the_pod, memo_nodes)) == raw, "snapshot-backed path"
    scores = [NodeScore(n.name, s) for n, s in zip(nodes, raw, strict=True)]
    assert p.normalize_score(ref_state, the_pod, scores).is_success
    normalized = [s.score for s in scores]
    assert list(p.normalize_values(fast_state, the_pod, node_set, raw)) == normalized
    return raw, normalized


@pytest.mark.parametrize(
    "spec, nodes, expected, run_pre, want_pre",
    [pytest.param(*row[1:], id=row[0]) for row in PRIORITY],
)
def test_node_affinity_priority(spec, nodes, expected, run_pre, want_pre):
    p = plugin()
    built = [node(name, labels) for name, labels in nodes]
    _, normalized = run_scores(p, pod(spec), built, run_pre)
    assert normalized == expected


def test_prescore_skip_when_pod_has_no_preferred_affinity():
    status = plugin().pre_score(CycleState(), pod(), NodeSet([node("node1", LABEL1)]))
    assert status.code is Code.SKIP


def test_prescore_does_not_skip_for_empty_preferred_list():
    """spec §6.4: Skip only when the preferred list is nil; an empty list is parsed."""
    status = plugin().pre_score(CycleState(), pod(preferred()), NodeSet([node("node1", LABEL1)]))
    assert status.code is Code.SUCCESS


def test_prescore_error_on_broken_affinity():
    the_pod = pod(preferred((2, term([expr("invalid key", "In", "bar")]))))
    status = plugin().pre_score(CycleState(), the_pod, NodeSet([node("node1", LABEL1)]))
    assert status.code is Code.ERROR
    assert NAME_PART_ERROR in status.message()


def test_normalize_score_upstream_example():
    """spec §6.4: raw {2, 11, 4} -> {18, 100, 36}."""
    scores = [NodeScore("node1", 2), NodeScore("node5", 11), NodeScore("node2", 4)]
    assert plugin().normalize_score(CycleState(), pod(), scores).is_success
    assert [s.score for s in scores] == [18, 100, 36]
