"""Differential property test: the batch fast paths and the per-node reference paths must give
identical `filter` and `prioritize` answers on generated clusters and pods.

Clusters: nodes with labels from a small per-key vocabulary (plain, integer and semver-ish
values), taints with numeric / semver / plain values and every effect, cordoned nodes. Pods:
tolerations with every operator (Equal, Exists, Gt, Lt, SemverGt/Lt/Eq, an unknown one, CEL
expressions through a fake engine, annotation tolerations), nodeSelector, required and preferred
node affinity with every operator (incl. Gt/Lt/Semver and broken requirements) and matchFields on
metadata.name. Feature gates vary. Both request modes are exercised: NodeNames (a subset of the
snapshot, sometimes with an unknown name) and full Nodes.

Values are drawn per key from small vocabularies so that comparisons collide often (equal
values, boundary values, unparsable values on the same key).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api.wire import decode_args
from extender.config import Config
from extender.engine.extender import Extender, ScoringError
from extender.features import FeatureGates
from extender.framework import CycleState, Status
from extender.framework.handle import Handle
from extender.framework.verdicts import failing
from extender.model import Taint
from extender.plugins.nodeaffinity import NodeAffinity
from extender.plugins.nodeunschedulable import NodeUnschedulable
from extender.plugins.tainttoleration import TaintToleration
from extender.state import ClusterSnapshot, NodeSet, StaticSource
from extender.validation.pod import pod_from_dict

INTS = ["0", "1", "5", "10", "950", "007", "-3", "x"]
SEMVERS = ["1.2.3", "v1.10.0", "1.2", "2.0.0-rc.1", "1", "v2", "x"]
LABELS = {
    "zone": ["a", "b", "c"],
    "tier": ["a", "b", ""],
    "num": INTS,
    "ver": SEMVERS,
    "gpu": ["", "1", "a"],
    "example.com/disk": ["ssd", "hdd"],
}
TAINTS = {
    "dedicated": ["a", "b", ""],
    "sla": ["0", "5", "950", "0100", "-1", "9223372036854775807", "high"],
    "ver": ["1.2.3", "v2.0.0", "2.0.0-rc.1", "1.2", "x"],
    "node.kubernetes.io/unschedulable": [""],
}
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
TOL_OPERATORS = ["", "Equal", "Exists", "Gt", "Lt", "SemverGt", "SemverLt", "SemverEq", "Bogus"]
TOL_NUMBERS = ["0", "5", "900", "950", "-1", "+5", "0100", "9223372036854775807"]
TOL_VERSIONS = ["1.2.3", "v2.0.0", "1.2", "v1", "1.0.0+build", "2.0.0-rc.1", "x"]
EXPR_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "SemverGt", "SemverLt",
                  "SemverEq"]
REQ_NUMBERS = ["0", "1", "5", "10", "950", "007"]
REQ_VERSIONS = ["1.2.3", "v1.10.0", "1.2", "2.0.0-rc.1", "1", "1.0.0+build"]
BROKEN_VALUES = ["bad value!", "+5", "-5", "1.5", ""]
NODE_NAMES = [f"n{i}" for i in range(8)]


@dataclass(frozen=True)
class _Outcome:
    matched: bool
    kind: str
    message: str = ""


class FakeCel:
    """`key:<k>` matches taints with key k; `true` matches all; anything else is an error."""

    def evaluate(self, expression: str, taint: Taint) -> _Outcome:
        if expression == "true":
            return _Outcome(True, "true")
        if expression.startswith("key:"):
            hit = taint.key == expression[4:]
            return _Outcome(hit, "true" if hit else "false")
        return _Outcome(False, "error", "no such function")


# --- strategies -------------------------------------------------------------------------------


def _chance(numerator: int, denominator: int):
    """True with probability numerator/denominator."""
    return st.sampled_from([False] * (denominator - numerator) + [True] * numerator)


@st.composite
def _sometimes_broken(draw, good, bad):
    """Mostly well-formed; now and then broken (a parse error: the term never matches)."""
    return draw(bad) if draw(_chance(1, 16)) else draw(good)


@st.composite
def taint(draw):
    key = draw(st.sampled_from(list(TAINTS)))
    return {
        "key": key,
        "value": draw(st.sampled_from(TAINTS[key])),
        # PreferNoSchedule weighted up: it only scores, so more nodes stay feasible
        "effect": draw(st.sampled_from(EFFECTS + ["PreferNoSchedule"] * 2)),
    }


@st.composite
def nodes(draw):
    count = draw(st.integers(1, len(NODE_NAMES)))
    out = []
    for name in NODE_NAMES[:count]:
        spec = {"taints": draw(st.lists(taint(), max_size=3))}
        if draw(_chance(1, 2)):
            spec["unschedulable"] = draw(_chance(1, 2))
        labels = {}
        for key, values in LABELS.items():
            if draw(_chance(2, 3)):
                labels[key] = draw(st.sampled_from(values))
        out.append({"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec})
    return out


@st.composite
def plain_toleration(draw):
    tol = {}
    if draw(_chance(4, 5)):
        tol["key"] = draw(st.sampled_from(list(TAINTS)))
    op = draw(st.sampled_from(TOL_OPERATORS))
    if op:
        tol["operator"] = op
    if op in ("Gt", "Lt"):
        values = TOL_NUMBERS
    elif op.startswith("Semver"):
        values = TOL_VERSIONS
    else:
        values = TAINTS.get(tol.get("key", ""), ["", "a"]) + ["zzz"]
    if op != "Exists" or draw(_chance(1, 5)):
        tol["value"] = draw(st.sampled_from(values))
    if draw(_chance(2, 3)):
        tol["effect"] = draw(st.sampled_from(EFFECTS))
    return tol


expression_toleration = st.builds(
    lambda e: {"expression": e},
    st.sampled_from(["true", "key:dedicated", "key:sla", "key:ver", "broken("]),
)


@st.composite
def toleration(draw):
    return draw(expression_toleration) if draw(_chance(1, 6)) else draw(plain_toleration())


@st.composite
def requirement(draw):
    op = draw(st.sampled_from(EXPR_OPERATORS))
    if op in ("Gt", "Lt"):
        key = draw(st.sampled_from(["num", "num", "num", "ver", "zone"]))
        good = st.lists(st.sampled_from(REQ_NUMBERS), min_size=1, max_size=1)
    elif op.startswith("Semver"):
        key = draw(st.sampled_from(["ver", "ver", "ver", "num", "zone"]))
        good = st.lists(st.sampled_from(REQ_VERSIONS), min_size=1, max_size=1)
    elif op in ("In", "NotIn"):
        key = draw(st.sampled_from(list(LABELS)))
        good = st.lists(st.sampled_from(LABELS[key] + ["zzz"]), min_size=1, max_size=3)
    else:
        key = draw(st.sampled_from(list(LABELS)))
        good = st.just([])
    bad = st.lists(st.sampled_from(BROKEN_VALUES + LABELS[key]), max_size=2)
    values = draw(_sometimes_broken(good, bad))
    key = draw(_sometimes_broken(st.just(key), st.just("bad key")))
    return {"key": key, "operator": op, "values": values}


@st.composite
def field_requirement(draw):
    key = draw(_sometimes_broken(st.just("metadata.name"), st.just("spec.x")))
    op = draw(_sometimes_broken(st.sampled_from(["In", "NotIn"]), st.just("Exists")))
    values = draw(_sometimes_broken(
        st.lists(st.sampled_from(NODE_NAMES[:4]), min_size=1, max_size=1),
        st.lists(st.sampled_from(NODE_NAMES + ["ghost", ""]), min_size=1, max_size=2)))
    return {"key": key, "operator": op, "values": values}


@st.composite
def selector_term(draw):
    term = {}
    if draw(_chance(5, 6)):
        term["matchExpressions"] = draw(st.lists(requirement(), max_size=2))
    if draw(_chance(1, 3)):
        term["matchFields"] = draw(st.lists(field_requirement(), min_size=1, max_size=2))
    return term


@st.composite
def node_affinity(draw):
    affinity = {}
    if draw(_chance(1, 2)):
        terms = draw(_sometimes_broken(st.lists(selector_term(), min_size=1, max_size=3),
                                       st.sampled_from([None, []])))
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if draw(_chance(2, 3)):
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = draw(st.lists(
            st.fixed_dictionaries({
                "weight": st.sampled_from([0, 1, 2, 5, 7, 50, 100]),
                "preference": selector_term(),
            }),
            max_size=3,
        ))
    return affinity


@st.composite
def pods(draw):
    spec = {"tolerations": draw(st.lists(toleration(), max_size=4))}
    if draw(_chance(1, 3)):
        spec["nodeSelector"] = {
            key: draw(st.sampled_from(LABELS[key]))
            for key in draw(st.lists(st.sampled_from(list(LABELS)), max_size=2, unique=True))
        }
    if draw(_chance(2, 3)):
        spec["affinity"] = {"nodeAffinity": draw(node_affinity())}
    annotations = {}
    if draw(_chance(1, 5)):
        annotations["scheduling-extender.io/tolerations"] = orjson.dumps(
            draw(st.lists(toleration(), max_size=2))).decode()
    if draw(_chance(1, 6)):
        annotations["scheduling-extender.io/node-affinity"] = orjson.dumps(
            draw(node_affinity())).decode()
    if draw(_chance(1, 40)):
        annotations["scheduling-extender.io/tolerations"] = "{broken"
    if draw(_chance(1, 40)):
        annotations["scheduling-extender.io/node-affinity"] = "[]"
    meta = {"name": "p", "namespace": "default", "annotations": annotations}
    return {"metadata": meta, "spec": spec}


gates = st.builds(
    FeatureGates,
    comparison_operators=_chance(3, 4),
    semver_operators=_chance(3, 4),
    cel=_chance(3, 4),
)


@st.composite
def requests(draw):
    """A cluster and the candidate names of one request: most nodes, sometimes an unknown one."""
    cluster = draw(nodes())
    names = [n["metadata"]["name"] for n in cluster]
    keep = draw(st.lists(_chance(4, 5), min_size=len(names), max_size=len(names)))
    subset = [name for name, k in zip(names, keep, strict=True) if k]
    subset = list(draw(st.permutations(subset)))
    if draw(_chance(1, 10)):
        subset.append("ghost")
    return cluster, subset


def _answer(call, args):
    try:
        return "ok", call(args)
    except ScoringError as exc:
        return "error", str(exc)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    request=requests(),
    pod_list=st.lists(pods(), min_size=1, max_size=3),
    feature_gates=gates,
    modes=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_fast_and_reference_paths_agree(request, pod_list, feature_gates, modes):
    """Several pods in a row against one fast engine (its per-snapshot memos are shared
    between pods, as in production) and one reference engine on its own snapshot."""
    cluster, subset = request
    config = Config(feature_gates=feature_gates)
    cel = FakeCel()
    fast = Extender(config, StaticSource(ClusterSnapshot.from_objects(cluster)), cel=cel,
                    fast=True)
    slow = Extender(config, StaticSource(ClusterSnapshot.from_objects(cluster)), cel=cel,
                    fast=False)
    by_name = {n["metadata"]["name"]: n for n in cluster}

    for pod, full_mode in zip(pod_list, modes, strict=False):
        if full_mode:
            items = [by_name[name] for name in subset if name in by_name]
            body = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
        else:
            body = {"Pod": pod, "Nodes": None, "NodeNames": subset}
        args = decode_args(orjson.dumps(body))

        fast_filter, slow_filter = orjson.loads(fast.filter(args)), orjson.loads(slow.filter(args))
        assert fast_filter == slow_filter
        assert list(fast_filter) == ["Nodes", "NodeNames", "FailedNodes",
                                     "FailedAndUnresolvableNodes", "Error"]

        assert _answer(fast.prioritize, args) == _answer(slow.prioritize, args)

        # prioritizing just the survivors (what kube-scheduler does) must agree as well
        survivors = fast_filter["NodeNames"]
        if survivors is None and fast_filter["Nodes"] is not None:
            survivors = [n["metadata"]["name"] for n in fast_filter["Nodes"]["items"]]
        if survivors:
            narrowed = decode_args(orjson.dumps({"Pod": pod, "NodeNames": survivors}))
            assert _answer(fast.prioritize, narrowed) == _answer(slow.prioritize, narrowed)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests(), pod=pods(), feature_gates=gates)
def test_each_plugin_batch_equals_per_node(request, pod, feature_gates):
    """Plugin by plugin, unmasked by other plugins or by score combination: `filter_nodes` vs
    `filter` per node, and `score_nodes` vs `score` (raw scores), on a NodeNames-style
    candidate subset of the snapshot."""
    cluster, subset = request
    snapshot = ClusterSnapshot.from_objects(cluster)
    by_name = snapshot.nodes.by_name
    candidates = NodeSet([by_name[n] for n in subset if n in by_name], snapshot.nodes)
    the_pod = pod_from_dict(pod)
    handle = Handle(feature_gates, cel=FakeCel())
    for plugin in (NodeUnschedulable(handle), TaintToleration(handle), NodeAffinity(handle)):
        ref_state, fast_state = CycleState(), CycleState()
        pre = getattr(plugin, "pre_filter", None)
        if pre is not None:
            ref_pre, fast_pre = pre(ref_state, the_pod, candidates), pre(fast_state, the_pod,
                                                                         candidates)
            assert ref_pre[0] == fast_pre[0]
            assert (ref_pre[1].code, ref_pre[1].reasons) == (fast_pre[1].code, fast_pre[1].reasons)
        fails = failing(plugin.filter_nodes(fast_state, the_pod, candidates), candidates)
        assert set(fails) <= candidates.names
        for node in candidates:
            ref = plugin.filter(ref_state, the_pod, node)
            got = fails.get(node.name, Status())
            assert (got.code, got.reasons) == (ref.code, ref.reasons), (plugin.name, node.name)

        if not hasattr(plugin, "score"):
            continue
        ref_status = plugin.pre_score(ref_state, the_pod, candidates)
        fast_status = plugin.pre_score(fast_state, the_pod, candidates)
        assert ref_status.code == fast_status.code
        if not ref_status.is_success:
            continue
        raw = []
        for node in candidates:
            value, status = plugin.score(ref_state, the_pod, node)
            assert status.is_success
            raw.append(value)
        assert list(plugin.score_nodes(fast_state, the_pod, candidates)) == raw, plugin.name
