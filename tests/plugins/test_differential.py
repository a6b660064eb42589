"""Differential property test: the batch fast paths and the per-node reference paths must give
identical `filter` and `prioritize` answers on generated clusters and pods.

Clusters: nodes with labels from a small vocabulary (plain, integer, semver-ish values), taints
with numeric / semver / plain values and every effect, cordoned nodes. Pods: tolerations with
every operator (Equal, Exists, Gt, Lt, SemverGt/Lt/Eq, an unknown one, CEL expressions through a
fake engine, annotation tolerations), nodeSelector, required and preferred node affinity with
every operator (incl. Gt/Lt/Semver and broken requirements) and matchFields on metadata.name.
Both request modes are exercised: NodeNames (a subset of the snapshot, plus unknown names) and
full Nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api.wire import decode_args
from extender.config import Config
from extender.features import FeatureGates
from extender.model import Taint
from extender.service import Extender
from extender.state import ClusterSnapshot, StaticSource

LABEL_KEYS = ["zone", "tier", "ver", "num", "gpu", "example.com/disk"]
LABEL_VALUES = ["a", "b", "", "0", "1", "5", "10", "007", "950", "-3", "1.2.3", "v1.10.0", "1.2",
                "2.0.0-rc.1", "x"]
TAINT_KEYS = ["dedicated", "sla", "ver", "node.kubernetes.io/unschedulable"]
TAINT_VALUES = ["", "a", "0", "5", "950", "0100", "-1", "9223372036854775807", "1.2.3", "v2.0.0",
                "2.0.0-rc.1", "high"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
TOL_OPERATORS = ["", "Equal", "Exists", "Gt", "Lt", "SemverGt", "SemverLt", "SemverEq", "Bogus"]
TOL_VALUES = TAINT_VALUES + ["900", "+5", "1.2", "v1"]
EXPR_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "SemverGt", "SemverLt",
                  "SemverEq"]
EXPR_VALUES = LABEL_VALUES + ["bad value!", "+5"]
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

taints = st.lists(
    st.fixed_dictionaries({
        "key": st.sampled_from(TAINT_KEYS),
        "value": st.sampled_from(TAINT_VALUES),
        # PreferNoSchedule weighted up: it only scores, so more nodes stay feasible
        "effect": st.sampled_from(EFFECTS + ["PreferNoSchedule"] * 2),
    }),
    max_size=3,
)


@st.composite
def nodes(draw):
    count = draw(st.integers(1, len(NODE_NAMES)))
    out = []
    for name in NODE_NAMES[:count]:
        spec = {"taints": draw(taints)}
        if draw(st.booleans()):
            spec["unschedulable"] = draw(st.booleans())
        labels = draw(st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES),
                                      max_size=4))
        out.append({"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec})
    return out


plain_toleration = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(TAINT_KEYS + [""]),
        "operator": st.sampled_from(TOL_OPERATORS),
        "value": st.sampled_from(TOL_VALUES),
        "effect": st.sampled_from(EFFECTS + [""]),
    },
)
expression_toleration = st.builds(
    lambda e: {"expression": e},
    st.sampled_from(["true", "key:dedicated", "key:sla", "key:ver", "broken("]),
)
tolerations = st.lists(st.one_of(plain_toleration, plain_toleration, expression_toleration),
                       max_size=4)


INT_VALUES = ["0", "1", "5", "10", "950", "007"]
SEMVER_VALUES = ["1.2.3", "v1.10.0", "1.2", "2.0.0-rc.1", "1", "v2"]


def _chance(numerator: int, denominator: int):
    """True with probability numerator/denominator (integers() would be biased towards 0)."""
    return st.sampled_from([False] * (denominator - numerator) + [True] * numerator)


@st.composite
def _sometimes_broken(draw, good, bad):
    """Mostly well-formed values; now and then a broken one (parse error: term never matches)."""
    return draw(bad) if draw(_chance(1, 10)) else draw(good)


@st.composite
def requirement(draw):
    op = draw(st.sampled_from(EXPR_OPERATORS))
    if op in ("Exists", "DoesNotExist"):
        values = draw(_sometimes_broken(st.just([]), st.just(["a"])))
    elif op in ("In", "NotIn"):
        values = draw(_sometimes_broken(
            st.lists(st.sampled_from(LABEL_VALUES), min_size=1, max_size=3),
            st.lists(st.sampled_from(EXPR_VALUES), max_size=2)))
    elif op in ("Gt", "Lt"):
        values = draw(_sometimes_broken(
            st.lists(st.sampled_from(INT_VALUES), min_size=1, max_size=1),
            st.lists(st.sampled_from(EXPR_VALUES), min_size=1, max_size=2)))
    else:
        values = draw(_sometimes_broken(
            st.lists(st.sampled_from(SEMVER_VALUES), min_size=1, max_size=1),
            st.lists(st.sampled_from(EXPR_VALUES), min_size=1, max_size=2)))
    key = draw(_sometimes_broken(st.sampled_from(LABEL_KEYS), st.just("bad key")))
    return {"key": key, "operator": op, "values": values}


@st.composite
def field_requirement(draw):
    key = draw(_sometimes_broken(st.just("metadata.name"), st.just("spec.x")))
    op = draw(_sometimes_broken(st.sampled_from(["In", "NotIn"]), st.just("Exists")))
    values = draw(_sometimes_broken(
        st.lists(st.sampled_from(NODE_NAMES), min_size=1, max_size=1),
        st.lists(st.sampled_from(NODE_NAMES + ["ghost", ""]), min_size=1, max_size=2)))
    return {"key": key, "operator": op, "values": values}


@st.composite
def selector_term(draw):
    term = {}
    if draw(_chance(5, 6)):
        term["matchExpressions"] = draw(st.lists(requirement(), max_size=2))
    if draw(_chance(1, 5)):
        term["matchFields"] = draw(st.lists(field_requirement(), max_size=2))
    return term


@st.composite
def node_affinity(draw):
    affinity = {}
    if draw(st.booleans()):
        terms = draw(_sometimes_broken(st.lists(selector_term(), min_size=1, max_size=3),
                                       st.one_of(st.none(), st.just([]))))
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if draw(st.booleans()):
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = draw(st.lists(
            st.fixed_dictionaries({"weight": st.integers(0, 100), "preference": selector_term()}),
            max_size=3,
        ))
    return affinity


@st.composite
def pods(draw):
    spec = {"tolerations": draw(tolerations)}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(
            st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2))
    if draw(st.booleans()):
        spec["affinity"] = {"nodeAffinity": draw(node_affinity())}
    annotations = {}
    if draw(_chance(1, 4)):
        annotations["scheduling-extender.io/tolerations"] = orjson.dumps(
            draw(st.lists(plain_toleration, max_size=2))).decode()
    if draw(_chance(1, 6)):
        annotations["scheduling-extender.io/node-affinity"] = orjson.dumps(
            draw(node_affinity())).decode()
    if draw(_chance(1, 30)):
        annotations["scheduling-extender.io/tolerations"] = "{broken"
    meta = {"name": "p", "namespace": "default", "annotations": annotations}
    return {"metadata": meta, "spec": spec}


gates = st.builds(
    FeatureGates,
    comparison_operators=st.booleans(),
    semver_operators=st.booleans(),
    cel=st.booleans(),
)


@st.composite
def requests(draw):
    """A cluster and the candidate names of one request: most nodes, sometimes an unknown one."""
    cluster = draw(nodes())
    names = [n["metadata"]["name"] for n in cluster]
    keep = draw(st.lists(_chance(4, 5), min_size=len(names), max_size=len(names)))
    subset = [name for name, k in zip(names, keep, strict=True) if k]
    subset = draw(st.permutations(subset))
    if draw(_chance(1, 10)):
        subset = [*subset, "ghost"]
    return cluster, subset


def _answer(call, args):
    try:
        return "ok", call(args)
    except ValueError as exc:
        return "error", str(exc)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests(), pod=pods(), feature_gates=gates, full_mode=st.booleans())
def test_fast_and_reference_paths_agree(request, pod, feature_gates, full_mode):
    cluster, subset = request
    snapshot = ClusterSnapshot.from_objects(cluster)
    config = Config(feature_gates=feature_gates)
    cel = FakeCel()
    fast = Extender(config, StaticSource(snapshot), cel=cel, fast=True)
    slow = Extender(config, StaticSource(snapshot), cel=cel, fast=False)

    if full_mode:
        by_name = {n["metadata"]["name"]: n for n in cluster}
        items = [by_name[name] for name in subset if name in by_name]
        body = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    else:
        body = {"Pod": pod, "Nodes": None, "NodeNames": subset}
    args = decode_args(orjson.dumps(body))

    fast_filter, slow_filter = fast.filter(args), slow.filter(args)
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
