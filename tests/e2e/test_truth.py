"""The truth checker is only as good as its rules: on random clusters it must admit
exactly the nodes the extender's reference engine (`fast=False`, no caches) admits. The
two share no code, so a disagreement is a bug in one of them. No kube-scheduler needed."""

from __future__ import annotations

import random

import orjson
import pytest

from extender.api.wire import decode_args
from extender.state import ClusterSnapshot, StaticSource
from perf.engine import default_config, new_extender
from testing.harness import HOST, PREFIX, ZONE, node, pod, spread
from testing.truth import ClusterView, Violation, key_of

SLA, KERNEL = "example.com/sla", "example.com/kernel"
CEL = "taint.key == 'example.com/sla' && int(taint.value) > 900"
ORACLES = {CEL: lambda key, value, effect: key == SLA and int(value) > 900}


def random_taints(rng: random.Random) -> list[dict]:
    choices = [
        [], [], [],
        [{"key": SLA, "value": str(rng.choice([800, 900, 950])), "effect": rng.choice(["NoSchedule", "NoExecute"])}],
        [{"key": KERNEL, "value": rng.choice(["5.10.0", "6.8.0"]), "effect": "NoSchedule"}],
        [{"key": "dedicated", "value": "gpu", "effect": rng.choice(["NoSchedule", "PreferNoSchedule"])}],
    ]
    return rng.choice(choices)


def random_tolerations(rng: random.Random) -> tuple[list[dict], dict]:
    spec = rng.choice([[], [{"key": SLA, "operator": rng.choice(["Gt", "Lt"]), "value": "850"}],
                       [{"key": SLA, "operator": "Exists"}], [{"key": "dedicated", "operator": "Equal",
                                                              "value": "gpu", "effect": "NoSchedule"}]])
    ann = rng.choice([{}, {f"{PREFIX}/tolerations": [{"key": KERNEL, "operator": "SemverGt", "value": "6.0.0"}]},
                      {f"{PREFIX}/tolerations": [{"expression": CEL}]},
                      {f"{PREFIX}/tolerations": [{"key": SLA, "operator": "Exists"}]}])
    return spec, ann


def random_case(rng: random.Random) -> tuple[list[dict], dict]:
    zones = rng.choice(["ab", "abc", "abcd"])
    nodes = []
    for i in range(rng.randint(3, 9)):
        labels = {"disk": rng.choice(["ssd", "hdd"])}
        n = node(f"n{i}", rng.choice(zones), taints=random_taints(rng), labels=labels,
                 unschedulable=rng.random() < 0.1)
        if rng.random() < 0.1:
            del n["metadata"]["labels"][ZONE]
        nodes.append(n)
    labels = {"app": "web"}
    bound = [pod(f"p{j}", labels if rng.random() < 0.8 else {"app": "other"},
                 node_name=rng.choice(nodes)["metadata"]["name"]) for j in range(rng.randint(0, 12))]
    constraints = []
    for key in rng.sample([ZONE, HOST], rng.randint(0, 2)):
        fields = {}
        if rng.random() < 0.5:
            fields["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            fields["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
        if rng.random() < 0.3:
            fields["minDomains"] = rng.randint(1, 5)
        constraints.append(spread(key, labels, max_skew=rng.randint(1, 2), **fields))
    tols, ann = random_tolerations(rng)
    selector = {"disk": "ssd"} if rng.random() < 0.3 else None
    pending = pod("pending", labels, spread=constraints, tolerations=tols, annotations=ann, node_selector=selector)
    pending["metadata"]["uid"] = "uid-pending"
    return [*nodes, *bound], pending


def reference_feasible(objects: list[dict], pending: dict) -> set[str]:
    engine = new_extender(default_config(), StaticSource(ClusterSnapshot.from_objects(objects)), fast=False)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    answer = orjson.loads(engine.filter(decode_args(orjson.dumps({"Pod": pending, "Nodes": None, "NodeNames": names}))))
    assert not answer.get("Error"), answer
    return set(answer.get("NodeNames") or [])


def truth_feasible(objects: list[dict], pending: dict) -> set[str]:
    view = ClusterView(PREFIX, ORACLES)
    for o in objects:
        if o["kind"] == "Node":
            view.put_node(o)
        else:
            view.put_pod(o, key_of(o))
    return {name for name in view.nodes if not view.violations(pending, name)}


@pytest.mark.parametrize("seed", range(300))
def test_truth_admits_the_nodes_the_reference_engine_admits(seed):
    objects, pending = random_case(random.Random(seed))
    assert truth_feasible(objects, pending) == reference_feasible(objects, pending)


def test_a_violation_names_its_rule():
    v = Violation("default/p", "n1", "TaintToleration", "untolerated a=b:NoSchedule", raced=True)
    assert str(v) == "default/p on n1: TaintToleration: untolerated a=b:NoSchedule (raced a node change)"
