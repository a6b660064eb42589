"""The tracker, kept event by event, against the reference (`objects.reference`: every
running pod parsed whole and the reference plugins run on its node, from scratch) after
random sequences of node, pod, volume and claim events, settled at random points."""

from __future__ import annotations

import random

import pytest
from objects import (
    AFFINITY,
    KERNEL,
    SLA,
    TOLERATIONS,
    Cluster,
    comparable,
    expr,
    node,
    pod,
    pv,
    pvc,
    reference,
    required,
    selector,
    taint,
)

NODES = [f"n{i}" for i in range(5)]
TAINT_SETS = [
    [],
    [taint(SLA, "900")],
    [taint(SLA, "700")],
    [taint(SLA, "500"), taint("soft", "x", "PreferNoSchedule")],
    [taint("evict", "now", "NoExecute")],
    [taint(SLA, "850", "NoExecute"), taint("gpu", "a100")],
    [taint(SLA, "v", "NoSchedule")],  # not a number: Gt never tolerates it
]
KERNELS = ["5.4.0", "5.15.0", "6.1.0", "6.1.0-rc.1", "bogus", None]
TOLERATION_KINDS = [
    {},
    {"tolerations": [{"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}]},
    {"tolerations": [{"key": SLA, "operator": "Gt", "value": "800"}]},  # every effect: NoExecute too
    {"tolerations": [{"key": SLA, "operator": "Exists"}, {"key": "soft", "operator": "Exists"}]},
    {"tolerations": [{"operator": "Exists"}]},
    {"tolerations": [{"key": SLA, "operator": "Equal", "value": "900", "effect": "NoSchedule"}]},
    {"annotations": {TOLERATIONS: [{"expression": f"taint.key == '{SLA}' && int(taint.value) > 800"}]}},
    {"annotations": {TOLERATIONS: [{"key": SLA, "operator": "SemverGt", "value": "600.0.0"}]}},
    {"annotations": {TOLERATIONS: [{"key": "evict", "operator": "Exists"}]}},  # NoExecute: not counted
    {"tolerations": [{"key": "evict", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]},
    {"annotations": {TOLERATIONS: "[{not json"}},  # invalid: fails every node
]
AFFINITIES = [
    {},
    {"annotations": {AFFINITY: required(expr(KERNEL, "SemverGt", "5.10.0"))}},
    {"affinity": required(expr(KERNEL, "SemverLt", "6.0.0"))},
    {"node_selector": {"pool": "a"}},
    {"affinity": required(expr("gen", "Gt", "3"))},
    {"affinity": required(expr(KERNEL, "SemverGt", "not-a-version"))},  # never matches
]
VOLUME_SPECS = [
    (None, None),
    ({"required": selector(expr(KERNEL, "SemverGt", "5.10.0"))}, None),
    (None, selector(expr("pool", "In", "a", "b"))),
    ({"required": selector(expr("gen", "Lt", "5"))}, selector(expr("pool", "Exists"))),
]


def random_node(rng: random.Random, name: str) -> dict:
    labels = {"pool": rng.choice(["a", "b", "c"]), "gen": str(rng.randint(1, 6))}
    kernel = rng.choice(KERNELS)
    if kernel is not None:
        labels[KERNEL] = kernel
    return node(name, [dict(t) for t in rng.choice(TAINT_SETS)], **labels)


def random_pod(rng: random.Random, name: str) -> dict:
    kind, aff = rng.choice(TOLERATION_KINDS), rng.choice(AFFINITIES)
    annotations = {**kind.get("annotations", {}), **aff.get("annotations", {})}
    claims = tuple(rng.sample([f"data-{i}" for i in range(3)], rng.randint(0, 2)))
    return pod(name, rng.choice([*NODES, *NODES, "", "n-missing"]), tolerations=kind.get("tolerations"),
               annotations=annotations, affinity=aff.get("affinity"), node_selector=aff.get("node_selector"),
               claims=claims, namespace=rng.choice(["default", "team"]),
               phase=rng.choice(["Running"] * 6 + ["Succeeded"]), deleting=rng.random() < 0.05,
               uid=f"u{rng.randint(0, 3)}")


def random_volume(rng: random.Random, i: int) -> dict:
    annotation, spec = rng.choice(VOLUME_SPECS)
    return pv(f"pv-{i}", annotation=annotation, spec=spec)


def claims_for(namespace: str) -> list[dict]:
    return [pvc(f"data-{i}", f"pv-{i}", namespace=namespace) for i in range(3)]


def step(rng: random.Random, cluster: Cluster, names: list[str]) -> None:
    roll = rng.random()
    if roll < 0.35:
        cluster.put(random_node(rng, rng.choice(NODES)))
    elif roll < 0.65:
        cluster.put(random_pod(rng, rng.choice(names)))
    elif roll < 0.75:
        victims = [o for o in cluster.pods()]
        if victims:
            victim = rng.choice(victims)["metadata"]
            cluster.delete("Pod", victim["name"], victim["namespace"])
    elif roll < 0.9:
        cluster.put(random_volume(rng, rng.randrange(3)))
    elif roll < 0.95:
        cluster.delete("Node", rng.choice(NODES))
    else:  # a claim rebound to another volume
        i, j = rng.randrange(3), rng.randrange(3)
        cluster.put(pvc(f"data-{i}", f"pv-{j}", namespace=rng.choice(["default", "team"])))


@pytest.mark.parametrize("seed", range(40))
def test_incremental_report_equals_the_reference(seed):
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(12)]
    objects = [random_node(rng, n) for n in NODES] + [random_volume(rng, i) for i in range(3)]
    objects += claims_for("default") + claims_for("team")
    objects += [random_pod(rng, n) for n in names]
    cluster = Cluster(objects=objects)
    for _ in range(60):
        step(rng, cluster, names)
        if rng.random() < 0.25:
            cluster.tracker.settle()
            assert comparable(cluster.report()) == {k: set(v) for k, v in reference(cluster).items()}
    cluster.tracker.settle()
    mine, truth = cluster.report(), reference(cluster)
    assert comparable(mine) == {k: set(v) for k, v in truth.items()}
    # the details: explain's words for the taint /filter names (the first it finds), the
    # volume's explanation (the filter names the first failing volume; all are reported)
    reported = {(key, v.plugin, v.reason, v.severity, v.details)
                for key, d in cluster.tracker.entries() for v in d.violations}
    for key, found in truth.items():
        for (plugin, reason, kind), details in found.items():
            if kind != "hard" or plugin == "NodeAffinity" or not details:
                continue
            effect = "evicting" if details[0].endswith(":NoExecute is not tolerated") else "required"
            assert (key, plugin, reason, effect if plugin == "TaintToleration" else "required", details) in reported


def test_a_settle_after_every_event_equals_one_settle_at_the_end():
    rng = random.Random(7)
    names = [f"p{i}" for i in range(10)]
    objects = [random_node(rng, n) for n in NODES] + [random_volume(rng, i) for i in range(3)]
    objects += claims_for("default") + claims_for("team") + [random_pod(rng, n) for n in names]
    eager, lazy = Cluster(objects=objects), Cluster(objects=objects)
    eager.tracker.settle()
    lazy.tracker.settle()
    for i in range(200):
        state = rng.getstate()
        step(rng, eager, names)
        rng.setstate(state)
        step(rng, lazy, names)
        eager.tracker.settle()
        if i % 50 == 49:
            lazy.tracker.settle()
            assert eager.report() == lazy.report()
            assert eager.tracker.counts() == lazy.tracker.counts()
