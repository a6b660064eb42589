"""Differential property test: on generated clusters the indexed batch path
(`filter_nodes`/`score_nodes` over the pod label index) and the plain per-node
reference path (`filter`/`score`) give identical statuses (codes, reasons and explain
details) and identical normalized scores."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pts_harness import node_obj, pod_obj, world

from extender.features import FeatureGates

HOST = "kubernetes.io/hostname"
KEYS = ["zone", HOST, "rack"]
TAINTS = [
    None,
    {"key": "sla", "value": "800", "effect": "NoSchedule"},
    {"key": "sla", "value": "700", "effect": "NoExecute"},
    {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
]
SELECTORS = [
    None,
    {},
    {"matchLabels": {"app": "web"}},
    {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]},
    {"matchExpressions": [{"key": "ver", "operator": "In", "values": ["1", "2"]}]},
    {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "ver", "operator": "DoesNotExist"}]},
]
maybe = st.none

nodes_st = st.lists(
    st.fixed_dictionaries({
        "zone": st.sampled_from(["z1", "z2", "z3", "z1", "z2", None]),
        "host": st.sampled_from([True, True, True, False]),
        "rack": st.sampled_from(["r1", "r2", "r1", None]),
        "foo": st.booleans(),
        "taint": st.sampled_from(TAINTS),
    }),
    min_size=1, max_size=10,
)
pods_st = st.lists(
    st.fixed_dictionaries({
        "node": st.integers(0, 11),
        "assigned": st.sampled_from([True, True, True, False]),
        "ns": st.sampled_from(["default", "default", "other"]),
        "app": st.sampled_from(["web", "web", "web", "db", None]),
        "ver": st.sampled_from(["1", "2", None]),
        "phase": st.sampled_from(["Running", "Running", "Succeeded"]),
        "terminating": st.sampled_from([False, False, False, True]),
        "priority": st.integers(0, 2),
    }),
    max_size=60,
)
constraint_st = st.fixed_dictionaries({
    "maxSkew": st.integers(1, 3),
    "topologyKey": st.sampled_from(KEYS),
    "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
    "labelSelector": st.sampled_from(SELECTORS),
}, optional={
    "minDomains": st.integers(1, 4),
    "nodeAffinityPolicy": st.sampled_from(["Honor", "Ignore"]),
    "nodeTaintsPolicy": st.sampled_from(["Honor", "Ignore"]),
    "matchLabelKeys": st.just(["ver"]),
})
scenario_st = st.fixed_dictionaries({
    "nodes": nodes_st,
    "pods": pods_st,
    "constraints": st.lists(constraint_st, max_size=3) | st.lists(constraint_st, min_size=1, max_size=2),
    "ver": st.sampled_from(["1", "2", None]),
    "tolerate": st.booleans(),
    "node_selector": st.booleans(),
    "priority": st.integers(0, 2),
    "service": st.booleans(),
    "system": st.booleans(),
    "gates": st.tuples(st.booleans(), st.booleans()),
    "candidates": st.lists(st.integers(0, 11), max_size=12),
    "explain": st.booleans(),
})


def build(s: dict):
    objs = []
    names = []
    for i, n in enumerate(s["nodes"]):
        name = f"n{i}"
        names.append(name)
        labels = {k: v for k, v in (("zone", n["zone"]), ("rack", n["rack"])) if v}
        if n["host"]:
            labels[HOST] = name
        if n["foo"]:
            labels["foo"] = "x"
        objs.append(node_obj(name, labels, [n["taint"]] if n["taint"] else []))
    for j, p in enumerate(s["pods"]):
        node = names[p["node"] % len(names)] if p["node"] < 11 else "ghost"
        labels = {k: v for k, v in (("app", p["app"]), ("ver", p["ver"])) if v}
        if p["assigned"]:
            objs.append(pod_obj(f"p{j}", labels, node, p["ns"], p["terminating"], phase=p["phase"]))
        else:
            objs.append(pod_obj(f"p{j}", labels, "", p["ns"], nominated=node, priority=p["priority"]))
    if s["service"]:
        objs.append({"kind": "Service", "metadata": {"name": "svc", "namespace": "default"},
                     "spec": {"selector": {"app": "web"}}})
    labels = {"app": "web", **({"ver": s["ver"]} if s["ver"] else {})}
    spec: dict = {"topologySpreadConstraints": s["constraints"], "priority": s["priority"]}
    if s["tolerate"]:
        spec["tolerations"] = [{"key": "sla", "operator": "Gt", "value": "750", "effect": "NoSchedule"}]
    if s["node_selector"]:
        spec["nodeSelector"] = {"foo": "x"}
    pod = {"metadata": {"name": "incoming", "namespace": "default", "labels": labels}, "spec": spec}
    args = {"defaultingType": "System"} if s["system"] else {
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
            {"maxSkew": 2, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"},
        ],
    }
    gates = FeatureGates(node_inclusion_policy=s["gates"][0], match_label_keys=s["gates"][1])
    w = world(objs, pod, gates, args)
    cands = list(dict.fromkeys(names[c % len(names)] for c in s["candidates"])) or names
    return w, cands


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario_st)
def test_batch_and_reference_agree(s: dict) -> None:
    w, cands = build(s)
    nodeset = w.nodeset(cands)
    results = []
    for fast in (True, False):
        out = w.framework(fast).run_filter(w.state(s["explain"]), w.pod, nodeset)
        assert not out.error, out.error
        statuses = {k: (v.code, v.reasons, v.details) for k, v in out.statuses.items()}
        score = w.framework(fast).run_score(w.state(), w.pod, nodeset)
        assert not score.error, score.error
        scores = score.scores["PodTopologySpread"]
        scores = None if scores is None else list(scores)
        assert scores is None or all(0 <= x <= 100 for x in scores)
        results.append((statuses, scores))
    assert results[0] == results[1]
