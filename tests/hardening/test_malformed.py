"""Every malformed input gets a 4xx (or an `Error` result where the protocol has one),
never a 500 (issue #28): `/preempt` with a preemptor whose spread fails PreFilter or
`Pods` of the wrong JSON type, numbers out of their Go type's range; and a retried
request answers exactly as the first did, however small the caches are."""

from __future__ import annotations

import json

import orjson
import pytest
from conftest import EXAMPLES, example_pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.api.answers import remembered
from extender.api.templatecache import new_templates
from extender.config import Config
from extender.server.app import create_app
from extender.state import NodeSet
from testing.client import Client
from testing.scores import host_scores, slim_base

ZONE = "topology.kubernetes.io/zone"
NAMES = ["od-a1", "od-a2", "od-b1", "spot-a1", "spot-b1", "spot-c1"]  # examples/cluster.yaml


@pytest.fixture(scope="module")
def client():
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), reload_interval=0)
    return Client(create_app(config))


def post(client, verb: str, body) -> tuple[int, dict | list]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()  # ints beyond 64 bits too
    response = client.post(f"/{verb}", data=data)
    return response.status_code, orjson.loads(response.data)


def pod(spec: dict) -> dict:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "p"}, "spec": spec}


BAD_SELECTOR = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}}]
VICTIMS = {"od-a1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 0}}


def preferred(*weights: int) -> dict:
    terms = [{"weight": w, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "Exists"}]}} for w in weights]
    return {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}}


@pytest.mark.parametrize(("verb", "body", "message"), [
    # a spread constraint whose selector does not parse fails PreFilter (was a RuntimeError)
    ("preempt", {"Pod": pod({"topologySpreadConstraints": BAD_SELECTOR}), "NodeNameToMetaVictims": VICTIMS},
     "not a valid label selector operator"),
    # Pods of the wrong JSON type (was a TypeError)
    ("preempt", {"Pod": pod({}), "NodeNameToMetaVictims": {"od-a1": {"Pods": 5}}}, "Pods must be a list"),
    ("preempt", {"Pod": pod({}), "NodeNameToMetaVictims": {"od-a1": {"Pods": {"UID": "u"}}}}, "Pods must be a list"),
    ("preempt", {"Pod": pod({}), "NodeNameToVictims": {"od-a1": {"Pods": 7}}}, "Pods must be a list"),
    ("preempt", {"Pod": pod({}), "NodeNameToVictims": {"od-a1": {"Pods": "abc"}}}, "Pods must be a list"),
    ("preempt", {"Pod": pod({}), "NodeNameToMetaVictims": {"od-a1": {"Pods": [], "NumPDBViolations": 2**64}}},
     "must be an int64"),
    # weights are int32 in Go: 2**63 overflowed a numpy int64 vector (OverflowError)
    ("prioritize", {"Pod": pod(preferred(2**63)), "NodeNames": NAMES}, "out of range for int32"),
    ("prioritize", {"Pod": pod(preferred(2**62, 2**62)), "NodeNames": NAMES}, "out of range for int32"),
    ("prioritize", {"Pod": pod(preferred(2**31)), "NodeNames": NAMES}, "out of range for int32"),
    ("prioritize", {"Pod": pod({"priority": 2**40}), "NodeNames": NAMES}, "out of range for int32"),
])
def test_malformed_arguments_are_a_400(client, verb, body, message):
    code, answer = post(client, verb, body)
    assert code == 400, answer
    assert message in answer["error"]


def test_out_of_range_numbers_in_filter_are_an_error_result(client):
    code, answer = post(client, "filter", {"Pod": pod(preferred(2**63)), "NodeNames": NAMES})
    assert code == 200
    assert "out of range for int32" in answer["Error"]


def test_the_largest_int32_weight_is_scored(client):
    body = {"Pod": pod(preferred(2**31 - 1, 2**31 - 1)), "NodeNames": NAMES}
    full_client = Client(create_app(Config(cluster=str(EXAMPLES / "cluster.yaml"), reload_interval=0,
                                           slim_answers=False)))
    (code, answer), (full_code, full) = post(client, "prioritize", body), post(full_client, "prioritize", body)
    assert code == full_code == 200 and [h["Host"] for h in full] == NAMES
    base = slim_base(full)  # the slim answer: the same scores, shifted by the most common one
    assert host_scores(NAMES, answer) == {h["Host"]: h["Score"] - base for h in full}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
SPREAD = st.fixed_dictionaries({}, optional={
    "maxSkew": JSON | st.integers(-2, 3), "topologyKey": st.sampled_from([ZONE, "", "x"]) | JSON,
    "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway", "x"]) | JSON,
    "labelSelector": JSON | st.just({"matchExpressions": [{"key": "a", "operator": "Bad"}]}),
    "minDomains": JSON, "matchLabelKeys": JSON, "nodeTaintsPolicy": JSON, "nodeAffinityPolicy": JSON})
VICTIM = st.fixed_dictionaries({}, optional={"Pods": JSON | st.lists(JSON, max_size=3), "NumPDBViolations": JSON})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spread=st.lists(SPREAD, max_size=2) | JSON, victims=st.dictionaries(st.sampled_from([*NAMES, "x"]), VICTIM | JSON),
       field=st.sampled_from(["NodeNameToMetaVictims", "NodeNameToVictims"]))
def test_hostile_preempt_arguments_never_500(client, spread, victims, field):
    body = {"Pod": {**example_pod("spread-spot"), "spec": {"topologySpreadConstraints": spread}}, field: victims}
    code, answer = post(client, "preempt", body)
    assert code in (200, 400), answer
    assert answer.get("error") if code == 400 else "NodeNameToMetaVictims" in answer


# --- remembered answers never depend on the cache's size ---------------------------------

def test_a_value_larger_than_the_templates_cache_is_not_stored():
    nodes = NodeSet([])
    nodes.templates = new_templates(256)
    calls = []

    def write() -> bytes:
        calls.append(1)
        return b"x" * 10_000  # a failure-message map of ~10 KB

    answers = [remembered(nodes, ("filter", b"k"), write) for _ in range(3)]
    assert answers == [b"x" * 10_000] * 3
    assert len(calls) == 3  # computed each time, never kept


@pytest.mark.parametrize("budget", [0, 64, 4096])
def test_a_retried_filter_answers_as_the_first_whatever_the_cache_size(monkeypatch, budget):
    """kube-scheduler retries a filter with the same body; the remembered answer was
    offered to a cache smaller than it and cachetools raised (500 on every retry)."""
    monkeypatch.setattr("extender.api.candidates.template_budget", lambda nodes, full=False: budget)
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), reload_interval=0)
    client = Client(create_app(config))
    for name in ("sla-gt", "spread-spot", "plain"):
        body = orjson.dumps({"Pod": example_pod(name), "Nodes": None, "NodeNames": NAMES})  # compact, as Go
        answers = [post(client, "filter", body) for _ in range(3)]
        assert answers[0][0] == 200 and not answers[0][1]["Error"]
        assert answers == [answers[0]] * 3
        scores = [post(client, "prioritize", body) for _ in range(3)]
        assert scores[0][0] == 200 and scores == [scores[0]] * 3
