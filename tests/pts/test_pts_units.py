"""Focused behaviours beyond the catalogue: nominated pods, default selectors, phases,
selector errors, rounding, missing PreFilter state."""

from __future__ import annotations

import pytest
from pts_harness import FakeCel, node_obj, pod_obj, world

from extender.features import FeatureGates
from extender.framework import Code, CycleState
from extender.framework.handle import Handle
from extender.plugins.podtopologyspread import PodTopologySpread, filtering
from extender.plugins.podtopologyspread.common import default_selector
from extender.plugins.podtopologyspread.scoring import PRE_SCORE_KEY, go_round
from extender.plugins.podtopologyspread.selector import (
    EVERYTHING,
    NOTHING,
    SelectorError,
    parse_label_selector,
)
from extender.state import ClusterSnapshot
from extender.validation.pod import pod_from_dict

ZONE = "zone"


def two_zones() -> list[dict]:
    return [node_obj("n1", {ZONE: "a", "h": "n1"}), node_obj("n2", {ZONE: "b", "h": "n2"})]


def spread_pod(selector=None, name="web-new", priority=0, uid="", when="DoNotSchedule", key=ZONE) -> dict:
    c = {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
         "labelSelector": {"matchLabels": {"app": "web"}} if selector is None else selector}
    meta = {"name": name, "namespace": "default", "labels": {"app": "web"}, "uid": uid}
    return {"metadata": meta, "spec": {"priority": priority, "topologySpreadConstraints": [c]}}


def verdicts(objs, pod_raw, gates=None) -> dict[str, dict[str, str]]:
    w = world(objs, pod_raw, gates)
    out = {}
    for fast in (True, False):
        res = w.framework(fast).run_filter(w.state(), w.pod, w.nodeset())
        assert not res.error, res.error
        out["batch" if fast else "reference"] = {
            n.name: str(res.statuses[n.name].code) if n.name in res.statuses else "Success"
            for n in w.snapshot.nodes.nodes
        }
    assert out["batch"] == out["reference"]
    return out["batch"]


# --- nominated pods --------------------------------------------------------------------------


def test_nominated_pods_with_higher_or_equal_priority_count_on_their_node() -> None:
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "n1")]
    assert verdicts(objs, spread_pod()) == {"n1": "Unschedulable", "n2": "Success"}
    nominees = [pod_obj(f"nom{i}", {"app": "web"}, nominated="n2", priority=5) for i in range(2)]
    assert verdicts(objs + nominees, spread_pod(priority=5)) == {"n1": "Unschedulable", "n2": "Unschedulable"}


def test_lower_priority_nominated_pods_are_ignored() -> None:
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "n1")]
    nominees = [pod_obj(f"nom{i}", {"app": "web"}, nominated="n2", priority=1) for i in range(2)]
    assert verdicts(objs + nominees, spread_pod(priority=5)) == {"n1": "Unschedulable", "n2": "Success"}


def test_the_incoming_pod_itself_is_not_its_own_nominee() -> None:
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "n1")]
    me = pod_obj("web-new", {"app": "web"}, nominated="n2")
    other = pod_obj("nom", {"app": "web"}, nominated="n2")
    assert verdicts(objs + [me], spread_pod()) == {"n1": "Unschedulable", "n2": "Success"}
    # one real nominee on n2 gives {a:1, b:1} there: min 1, skew 1 + 1 - 1 = 1 still fits
    assert verdicts(objs + [me, other], spread_pod()) == {"n1": "Unschedulable", "n2": "Success"}
    assert verdicts(objs + [me, other, pod_obj("nom2", {"app": "web"}, nominated="n2")], spread_pod()) == {
        "n1": "Unschedulable", "n2": "Unschedulable"}


def test_nominated_pods_in_other_namespaces_do_not_count() -> None:
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "n1")]
    nominees = [pod_obj(f"nom{i}", {"app": "web"}, ns="other", nominated="n2") for i in range(3)]
    assert verdicts(objs + nominees, spread_pod()) == {"n1": "Unschedulable", "n2": "Success"}


def test_empty_selector_counts_no_existing_pods_but_nominated_ones_via_add_pod() -> None:
    """Upstream quirk: countPodsMatchSelector skips an Empty selector, AddPod does not."""
    objs = two_zones() + [pod_obj(f"w{i}", {"x": "y"}, "n2") for i in range(3)]
    assert verdicts(objs, spread_pod(selector={})) == {"n1": "Success", "n2": "Success"}
    nominees = [pod_obj(f"nom{i}", {"x": "y"}, nominated="n2") for i in range(2)]
    assert verdicts(objs + nominees, spread_pod(selector={})) == {"n1": "Success", "n2": "Unschedulable"}


def test_explain_mentions_nominated_pods() -> None:
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "n1")]
    nominees = [pod_obj(f"nom{i}", {"app": "web"}, nominated="n2") for i in range(2)]
    w = world(objs + nominees, spread_pod())
    res = w.framework(True).run_filter(w.state(explain=True), w.pod, w.nodeset())
    assert "with 2 nominated pod(s)" in " ".join(res.statuses["n2"].details)


# --- which pods count ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "phase,terminating,node,counted",
    [("Running", False, "n1", True), ("Pending", False, "n1", True), ("Succeeded", False, "n1", False),
     ("Failed", False, "n1", False), ("Running", True, "n1", False), ("Pending", False, "", False)],
)
def test_which_existing_pods_count(phase, terminating, node, counted) -> None:
    p = pod_obj("w1", {"app": "web"}, node, terminating=terminating, phase=phase)
    p["status"]["phase"] = phase
    got = verdicts(two_zones() + [p], spread_pod())
    assert got["n1"] == ("Unschedulable" if counted else "Success")


def test_pods_on_nodes_unknown_to_the_snapshot_are_ignored() -> None:
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "gone")]
    assert verdicts(objs, spread_pod()) == {"n1": "Success", "n2": "Success"}


# --- selectors ---------------------------------------------------------------------------------


def test_selector_null_and_empty() -> None:
    assert parse_label_selector(None) is NOTHING and not NOTHING.matches({})
    assert parse_label_selector({}) == EVERYTHING and EVERYTHING.empty and EVERYTHING.matches({"a": "b"})
    sel = parse_label_selector({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]})
    assert sel.matches({}) and sel.matches({"a": "y"}) and not sel.matches({"a": "x"})


@pytest.mark.parametrize(
    "raw",
    [{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
     {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
     {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     {"matchLabels": {"bad key!": "v"}}],
)
def test_invalid_selectors_are_errors(raw) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(raw)


def test_invalid_selector_makes_prefilter_and_prescore_error() -> None:
    bad = {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}
    w = world(two_zones(), spread_pod(selector=bad))
    _, status = w.plugin.pre_filter(w.state(), w.pod, w.nodeset())
    assert status.code is Code.ERROR
    assert status.message().startswith("get constraints from pod: obtaining pod's hard topology spread constraints: ")
    w = world(two_zones(), spread_pod(selector=bad, when="ScheduleAnyway"))
    status = w.plugin.pre_score(w.state(), w.pod, w.nodeset())
    assert status.message().startswith("calculating preScoreState: obtaining pod's soft topology spread constraints: ")


def test_filter_without_prefilter_state_is_an_error() -> None:
    w = world(two_zones(), spread_pod())
    status = w.plugin.filter(w.state(), w.pod, w.snapshot.nodes.nodes[0])
    assert status.code is Code.ERROR
    assert status.message() == 'reading "PreFilterPodTopologySpread" from cycleState: not found'


# --- default selectors -------------------------------------------------------------------------


def _default(objs, labels, owner=None) -> str:
    meta = {"name": "p", "namespace": "default", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    return str(default_selector(pod_from_dict({"metadata": meta}), ClusterSnapshot.from_objects(objs)))


def wl(kind: str, name: str, spec: dict, ns: str = "default", api: str = "apps/v1") -> dict:
    return {"kind": kind, "apiVersion": api, "metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_default_selector_sources() -> None:
    objs = [
        wl("Service", "s1", {"selector": {"app": "web"}}, api="v1"),
        wl("Service", "s2", {"selector": {"tier": "fe"}}, api="v1"),
        wl("Service", "s3", {"selector": {"app": "other"}}, api="v1"),
        wl("Service", "s4", {}, api="v1"),
        wl("Service", "s5", {"selector": {"app": "web"}}, ns="elsewhere", api="v1"),
        wl("Service", "s6", {"selector": {"zz": "1"}}, api="v1"),
        wl("ReplicationController", "rc", {"selector": {"rc": "1"}}, api="v1"),
        wl("ReplicaSet", "rs", {"selector": {"matchExpressions": [{"key": "rs", "operator": "Exists"}]}}),
        wl("StatefulSet", "ss", {"selector": {"matchLabels": {"ss": "1"}}}),
    ]
    labels = {"app": "web", "tier": "fe", "rc": "1", "rs": "x", "ss": "1"}
    assert _default(objs, labels) == "app=web,tier=fe"
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "name": "rc"}
    assert _default(objs, labels, rc) == "app=web,rc=1,tier=fe"
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}
    assert _default(objs, labels, rs) == "app=web,rs,tier=fe"
    ss = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ss"}
    assert _default(objs, labels, ss) == "app=web,ss=1,tier=fe"
    assert _default(objs, labels, {**rs, "apiVersion": "extensions/v1beta1"}) == "app=web,tier=fe"
    assert _default(objs, labels, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}) == "app=web,tier=fe"
    assert _default(objs, {"none": "1"}) == "<everything>"


def test_system_defaults_spread_by_service_and_keep_zoneless_nodes() -> None:
    """System defaulting: hostname maxSkew 3 + zone maxSkew 5, ScheduleAnyway; nodes
    without a zone are not ignored (requireAllTopologies is false)."""
    host = "kubernetes.io/hostname"
    objs = [node_obj(f"n{i}", {host: f"n{i}"}) for i in range(3)]
    objs += [pod_obj(f"w{i}", {"app": "web"}, "n0") for i in range(4)]
    objs.append(wl("Service", "web", {"selector": {"app": "web"}}, api="v1"))
    pod = {"metadata": {"name": "new", "namespace": "default", "labels": {"app": "web"}}, "spec": {}}
    w = world(objs, pod)
    state = w.state()
    assert w.plugin.pre_score(state, w.pod, w.nodeset()).is_success
    st = state.read(PRE_SCORE_KEY)
    assert [(c.topology_key, c.max_skew) for c in st.constraints] == [(host, 3), ("topology.kubernetes.io/zone", 5)]
    assert st.ignored == set()
    for fast in (True, False):
        out = w.framework(fast).run_score(w.state(), w.pod, w.nodeset())
        # raw: n0 = round(4 * ln(5) + 2) = 8, n1 = n2 = 2 (zone constraint: no label, no term)
        assert list(out.scores["PodTopologySpread"]) == [25, 100, 100]
    _, status = w.plugin.pre_filter(w.state(), w.pod, w.nodeset())
    assert status.code is Code.SKIP


def test_gate_off_ignores_inclusion_policy_fields() -> None:
    pod = spread_pod()
    pod["spec"]["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = "Ignore"
    pod["spec"]["nodeSelector"] = {ZONE: "a"}
    objs = two_zones() + [pod_obj("w1", {"app": "web"}, "n2")]
    gates = FeatureGates(node_inclusion_policy=False)
    # gate off: affinity honoured -> only zone a counted; n2's domain is absent -> count 0
    assert verdicts(objs, pod, gates) == {"n1": "Success", "n2": "Success"}
    # gate on: Ignore -> {a:0, b:1}: n2 skew 1 + 1 - 0 = 2
    assert verdicts(objs, pod) == {"n1": "Success", "n2": "Unschedulable"}


def test_go_round_half_away_from_zero() -> None:
    assert [go_round(x) for x in (0.0, 0.49999999999999994, 0.5, 1.5, 2.5, 2.4999, 7.5)] == [0, 0, 1, 2, 3, 2, 8]


def test_invalid_plugin_args_raise_config_error() -> None:
    from extender.config import ConfigError

    with pytest.raises(ConfigError, match="defaultingType"):
        PodTopologySpread(Handle(FeatureGates(), FakeCel(), {"PodTopologySpread": {"defaultingType": "Bogus"}}))


def test_state_is_per_cycle() -> None:
    w = world(two_zones(), spread_pod())
    state = CycleState()
    with pytest.raises(KeyError):
        w.plugin.pre_filter(state, w.pod, w.nodeset())
    assert filtering.PRE_FILTER_KEY not in state._data


def test_seeded_domains_are_shared_per_candidate_set_and_follow_a_relabel():
    """PreScore's domains, ignored nodes and weights depend only on the candidates and
    the constraints' topology keys: one answer per candidate set for every pod, and a
    relabel (the set carried into the new node layer) computes them again."""
    from extender.model.parse import node_from_dict
    from extender.plugins.podtopologyspread.common import Constraint
    from extender.plugins.podtopologyspread.scoring import new_state
    from extender.plugins.podtopologyspread.selector import from_map
    from extender.state import NodeSet

    zone = "topology.kubernetes.io/zone"
    snapshot = ClusterSnapshot.from_objects([node_obj("a", {zone: "z1"}), node_obj("b", {zone: "z2"}),
                                             node_obj("c", {})])
    nodes = NodeSet(None, snapshot.nodes, ["a", "b", "c"])
    zone_c = Constraint(1, zone, from_map({"app": "x"}))
    other = Constraint(3, zone, from_map({"app": "y"}))  # another pod, same topology key
    first, second = new_state([zone_c], True, nodes, None), new_state([other], True, nodes, None)
    assert first.seeded == [{"z1", "z2"}] and first.ignored == {"c"} and first.live.tolist() == [True, True, False]
    assert second.seeded is first.seeded and second.live is first.live and second.constraints == [other]
    assert new_state([zone_c], False, nodes, None).seeded == [{"z1", "z2", ""}]  # c seeds ""
    relabelled = snapshot.nodes.evolve({"c": node_from_dict(node_obj("c", {zone: "z3"}))})
    after = new_state([zone_c], True, nodes.rebased(relabelled), None)
    assert after.seeded == [{"z1", "z2", "z3"}] and after.ignored == frozenset()
