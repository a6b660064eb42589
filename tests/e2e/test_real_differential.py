"""kube-scheduler v1.36.2's own Gt/Lt against the extender's, on a v1.36.2 API server with
`TaintTolerationComparisonOperators=true` on both (testing/differential.py).

The same generated nodes and pods are scheduled twice on one control plane:

1. by kube-scheduler's in-tree plugins (TaintToleration with the gate on) beside a
   recording extender that is called with the nodes those filters passed: the in-tree
   feasible set;
2. by the shipped extender profile (the four plugins off, the extender's filter and
   prioritize), a recording proxy in front of the extender.

Both runs keep only taint-based scores (TaintToleration's in-tree, the extender's
prioritize), so where a pod lands depends on its tolerations alone. For every pod the
API server admitted: the feasible sets are equal; an unschedulable pod gets the same
FailedScheduling text; the node the in-tree run chose is one of the extender's best
scored nodes (the same node when there is one best). Before that, admission: every
generated pod is refused by the API server exactly when the extender's validator refuses
the same tolerations in the annotation channel.

`make test` runs 150 pods, `make test-long` 2,000.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from extender.features import FeatureGates
from extender.validation.workloads import check_object
from testing.apiserver import ApiError
from testing.differential import Recorder, generate, scores_only
from testing.harness import PREFIX, SCHEDULER_NAME, filter_part, key_of
from testing.realcp_fixtures import only_pairs

V136 = only_pairs("v1.36")
NODES = 40


def extender_refuses(pod: dict) -> list[str]:
    """The extender's validator on the pod's tolerations moved into the annotation."""
    spec = {k: v for k, v in pod["spec"].items() if k != "tolerations"}
    annotated = {**pod, "kind": "Pod", "spec": spec, "metadata": {**pod["metadata"], "annotations": {
        f"{PREFIX}/tolerations": json.dumps(pod["spec"].get("tolerations") or [])}}}
    return [str(e) for e in check_object(annotated, PREFIX, FeatureGates()).errors]


def create_all(cluster, pods: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """(admitted pods, refused pod name -> the API server's message)."""
    admitted, refused = [], {}
    for pod in pods:
        try:
            cluster.create(pod)
            admitted.append(pod)
        except ApiError as exc:
            assert exc.code == 422, exc
            refused[pod["metadata"]["name"]] = str(exc)
    return admitted, refused


def outcome_of(cluster, recorder: Recorder, pods: list[dict], feasible, timeout: float):
    outcome = cluster.wait_settled(pods, timeout=timeout)
    assert not outcome.pending, outcome.pending[:5]
    out = {}
    for pod in pods:
        key = key_of(pod)
        seen = recorder.seen.get(key[1])
        out[key[1]] = (feasible(seen), outcome.bound.get(key, ""), filter_part(outcome.unschedulable.get(key, "")),
                       seen.best() if seen else set())
    return out


def differential(start_real_cluster, seed: int, pods: int) -> Counter:
    nodes, generated = generate(seed, NODES, pods, SCHEDULER_NAME)
    stats: Counter = Counter()

    # 1. in-tree: TaintToleration (gate on) and a recording extender after it
    in_tree_recorder = Recorder()

    def in_tree_edit(config: dict) -> None:
        in_tree_recorder.add_to(config)
        scores_only(("TaintToleration", 3))(config)

    cluster = start_real_cluster(nodes, in_tree=True, scheduler_config_edit=in_tree_edit)
    admitted, refused = create_all(cluster, generated)
    in_tree = outcome_of(cluster, in_tree_recorder, admitted, lambda s: set(s.given) if s else set(),
                         timeout=60 + pods / 5)
    cluster.stop()
    in_tree_recorder.stop()

    # admission: the API server and the extender's validator refuse the same pods
    for pod in generated:
        name = pod["metadata"]["name"]
        errors = extender_refuses(pod)
        assert bool(errors) == (name in refused), (name, pod["spec"].get("tolerations"), refused.get(name), errors)
        stats["refused by both"] += name in refused
    assert stats["refused by both"] > 0 and admitted

    # 2. the shipped extender profile, a recording proxy in front of the extender
    proxies: list[Recorder] = []

    def extender_edit(config: dict) -> None:
        (extender,) = config["extenders"]
        proxies.append(Recorder(upstream=extender["urlPrefix"]))
        proxies[-1].add_to(config)
        scores_only()(config)

    cluster = start_real_cluster(nodes, scheduler_config_edit=extender_edit)
    assert create_all(cluster, admitted)[1] == {}
    stored = cluster.api.get("pods", admitted[0]["metadata"]["name"])["spec"].get("tolerations") or []
    assert [t for t in stored if t["key"] in {t.get("key") for t in admitted[0]["spec"].get("tolerations") or []}]
    extended = outcome_of(cluster, proxies[-1], admitted, lambda s: set(s.passed) if s else set(),
                          timeout=60 + pods / 5)
    proxies[-1].stop()

    disagreements = []
    for name, (feasible, node, message, _) in in_tree.items():
        feasible_x, node_x, message_x, best_x = extended[name]
        if feasible != feasible_x or message != message_x:
            disagreements.append((name, "feasible", sorted(feasible ^ feasible_x), message, message_x))
        elif len(feasible) > 1 and (node not in best_x or node_x not in best_x):
            disagreements.append((name, "score", node, node_x, sorted(best_x)))
        stats["pods"] += 1
        stats["unschedulable"] += not feasible
        stats["one feasible node"] += len(feasible) == 1
        stats["scored"] += len(feasible) > 1
        stats["one best node"] += len(feasible) > 1 and len(best_x) == 1
        stats["ties"] += len(feasible) > 1 and len(best_x) > 1
    assert disagreements == [], disagreements[:10]
    print(dict(stats))
    return stats


@V136
def test_upstream_gt_lt_agree_on_150_pods(start_real_cluster, record_property):
    stats = differential(start_real_cluster, seed=1, pods=150)
    record_property("differential", dict(stats))
    assert stats["pods"] >= 130 and stats["unschedulable"] and stats["scored"] and stats["one best node"]


@pytest.mark.long
@V136
def test_upstream_gt_lt_agree_on_2000_pods(start_real_cluster, record_property):
    stats = differential(start_real_cluster, seed=2026, pods=2100)
    record_property("differential", dict(stats))
    assert stats["pods"] >= 2000 and stats["unschedulable"] and stats["scored"] and stats["one best node"]
