"""The what-if against the truth: for generated clusters and changes, the what-if's
answer (offline, on the objects) equals what the drift report and the filter verb say
once the same changes are really made to the objects.

* running pods: the drift report after the change (taints, affinity, volumes, and the
  spread report) equals the report before it with the what-if's `after` in place of
  `before` for every pod it lists, and without the pods it says are displaced;
* pending pods: the filter verb's feasible nodes before and after equal the what-if's
  counts for every pod it lists, and are the same set for every pod it does not list;
* the request's own pods: explain's feasible count after the change.

The changes are applied to the raw objects here, independently of
`extender.whatif.changes`: a taint replaces the one with its key and effect, `KEY-`
removes every taint of that key, and so on, as `kubectl taint --overwrite` and `kubectl
label --overwrite` do.
"""

from __future__ import annotations

import copy
import json
import random

import orjson
import pytest
from objects import (
    AFFINITY,
    KERNEL,
    SLA,
    TOLERATIONS,
    Cluster,
    expr,
    node,
    pod,
    pv,
    pvc,
    required,
    selector,
    taint,
)

from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.engine import Extender
from extender.state import ClusterSnapshot, StaticSource
from extender.whatif import is_pending, offline

ZONE = "topology.kubernetes.io/zone"
UNSCHEDULABLE = taint("node.kubernetes.io/unschedulable")
CONFIG = Config(drift_report=True, drift_topology_spread=True, inflight_wait=0)
TAINTS = [[], [taint(SLA, "900")], [taint(SLA, "700")], [taint(SLA, "500"), taint("soft", "x", "PreferNoSchedule")],
          [taint("evict", "now", "NoExecute")], [taint(SLA, "850", "NoExecute")]]
KERNELS = ["5.4.0", "5.15.0", "6.1.0", "6.8.0", "bogus"]
TOLERATIONS_KINDS = [
    {},
    {"tolerations": [{"key": SLA, "operator": "Gt", "value": "750", "effect": "NoSchedule"}]},
    {"tolerations": [{"key": SLA, "operator": "Gt", "value": "600"}]},
    {"tolerations": [{"key": SLA, "operator": "Exists"}, {"key": "soft", "operator": "Exists"}]},
    {"tolerations": [{"operator": "Exists"}]},
    {"annotations": {TOLERATIONS: [{"expression": f"taint.key == '{SLA}' && int(taint.value) > 800"}]}},
    {"annotations": {TOLERATIONS: [{"key": SLA, "operator": "SemverGt", "value": "600.0.0"}]}},
]
AFFINITIES = [
    {},
    {"annotations": {AFFINITY: required(expr(KERNEL, "SemverGt", "5.10.0"))}},
    {"affinity": required(expr(KERNEL, "SemverLt", "6.5.0"))},
    {"node_selector": {"pool": "a"}},
    {"affinity": required(expr("gen", "Gt", "3"))},
]
SPREAD = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "web"}}}]
VOLUME_ANNOTATIONS = [None, {"required": selector(expr(KERNEL, "SemverGt", "5.10.0"))},
                      {"required": selector(expr(KERNEL, "SemverLt", "6.0.0"))},
                      {"required": selector(expr("gen", "Lt", "4"))}]


def random_node(rng: random.Random, name: str) -> dict:
    labels = {"pool": rng.choice("abc"), "gen": str(rng.randint(1, 6)), ZONE: rng.choice(["z1", "z2", "z3"]),
              KERNEL: rng.choice(KERNELS)}
    obj = node(name, copy.deepcopy(rng.choice(TAINTS)), **labels)
    if rng.random() < 0.1:
        obj["spec"]["unschedulable"] = True
        obj["spec"]["taints"].append(dict(UNSCHEDULABLE))
    return obj


def random_pod(rng: random.Random, name: str, nodes: list[str]) -> dict:
    kind, aff = rng.choice(TOLERATIONS_KINDS), rng.choice(AFFINITIES)
    web = rng.random() < 0.35
    claims = ("data-0",) if rng.random() < 0.15 else ()
    return pod(name, rng.choice([*nodes, *nodes, ""]), tolerations=kind.get("tolerations"),
               annotations={**kind.get("annotations", {}), **aff.get("annotations", {})},
               affinity=aff.get("affinity"), node_selector=aff.get("node_selector"), claims=claims,
               labels={"app": "web"} if web else {"app": name}, spread=SPREAD if web else None)


def random_cluster(rng: random.Random) -> list[dict]:
    nodes = [f"n{i}" for i in range(rng.randint(3, 8))]
    objects = [random_node(rng, n) for n in nodes]
    objects += [pv(f"pv-{i}", annotation=rng.choice(VOLUME_ANNOTATIONS), claim=("default", f"data-{i}"))
                for i in range(2)]
    objects += [pvc(f"data-{i}", f"pv-{i}") for i in range(2)]
    objects += [random_pod(rng, f"p{i}", nodes) for i in range(rng.randint(4, 16))]
    return objects


def random_change(rng: random.Random, objects: list[dict]) -> dict:
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    roll = rng.random()
    if roll < 0.1:
        value = rng.choice(VOLUME_ANNOTATIONS)
        return {"volume": f"pv-{rng.randrange(2)}",
                "annotation": f"{AFFINITY}-" if value is None else f"{AFFINITY}={json.dumps(value)}"}
    if rng.random() < 0.3:
        where: dict = {"selector": rng.choice(["pool=a", "pool!=b", f"{ZONE} in (z1,z2)", "gen", "!gen",
                                               f"{ZONE}=z3,pool notin (c)"])}
    else:
        where = {"nodes": rng.sample(names, rng.randint(1, min(3, len(names))))}
    if roll < 0.35:
        return {**where, "taint": rng.choice([f"{SLA}={rng.choice([400, 650, 800, 950])}:NoSchedule",
                                              f"{SLA}=800:NoExecute", f"{SLA}-", f"{SLA}:NoSchedule-",
                                              "soft=y:PreferNoSchedule", "evict-"])}
    if roll < 0.7:
        return {**where, "label": rng.choice([f"{KERNEL}={rng.choice(KERNELS[:4])}", f"{KERNEL}-",
                                              f"gen={rng.randint(1, 6)}", "pool=a", "pool-",
                                              f"{ZONE}={rng.choice(['z1', 'z2', 'z4'])}"])}
    if roll < 0.9:
        return {**where, "cordon": rng.random() < 0.6}
    return {**where, "remove": True}


# --- the changes made for real, on the objects -----------------------------------------


def _matches(labels: dict, text: str) -> bool:
    out = True
    for part in [p.strip() for p in text.replace("(z1,z2)", "(z1|z2)").split(",")]:
        if " in " in part:
            key, values = part.split(" in ")
            out &= labels.get(key) in values.strip("()").split("|")
        elif " notin " in part:
            key, values = part.split(" notin ")
            out &= labels.get(key) not in values.strip("()").split("|")
        elif "!=" in part:
            key, value = part.split("!=")
            out &= labels.get(key) != value
        elif "=" in part:
            key, value = part.split("=")
            out &= labels.get(key) == value
        elif part.startswith("!"):
            out &= part[1:] not in labels
        else:
            out &= part in labels
    return out


def apply(objects: list[dict], changes: list[dict]) -> list[dict]:
    objects = copy.deepcopy(objects)
    nodes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Node"}
    selected = [
        c.get("nodes") or [n for n, o in nodes.items() if _matches(o["metadata"]["labels"], c["selector"])]
        if "volume" not in c else [] for c in changes]
    removed: set[str] = set()
    for change, names in zip(changes, selected, strict=True):
        if "volume" in change:
            pv_obj = next(o for o in objects if o["kind"] == "PersistentVolume"
                          and o["metadata"]["name"] == change["volume"])
            key, eq, value = change["annotation"].partition("=")
            if eq:
                pv_obj["metadata"]["annotations"][key] = value
            else:
                pv_obj["metadata"]["annotations"].pop(key[:-1], None)
            continue
        for name in names:
            if name in removed:
                continue
            obj = nodes[name]
            spec, labels = obj["spec"], obj["metadata"]["labels"]
            if "remove" in change:
                removed.add(name)
            elif "cordon" in change:  # and the node lifecycle controller's taint
                spec["unschedulable"] = change["cordon"]
                taints = [t for t in spec.get("taints") or [] if t != UNSCHEDULABLE]
                spec["taints"] = [*taints, UNSCHEDULABLE] if change["cordon"] else taints
            elif "label" in change:
                key, eq, value = change["label"].partition("=")
                if eq:
                    labels[key] = value
                else:
                    labels.pop(key[:-1], None)
            else:
                text = change["taint"]
                taints = spec.setdefault("taints", [])
                if text.endswith("-"):
                    key, _, effect = text[:-1].partition(":")
                    taints[:] = [t for t in taints if not (t["key"] == key and (not effect or t["effect"] == effect))]
                else:
                    head, _, effect = text.partition(":")
                    key, _, value = head.partition("=")
                    at = next((i for i, t in enumerate(taints) if t["key"] == key and t["effect"] == effect), None)
                    if at is None:
                        taints.append(taint(key, value, effect))
                    else:
                        taints[at] = taint(key, value, effect)
                        taints[:] = [t for i, t in enumerate(taints)
                                     if i <= at or not (t["key"] == key and t["effect"] == effect)]
    return [o for o in objects if not (o["kind"] == "Node" and o["metadata"]["name"] in removed)]


# --- the truth: the drift report and the filter verb ----------------------------------------


def drift(objects: list[dict]) -> dict[tuple[str, str], set]:
    """pod -> its violations (plugin, reason, severity, details), the spread report's included."""
    cluster = Cluster(CONFIG, objects)
    cluster.tracker.settle()
    cluster.tracker.run_spread(interval=0)
    out: dict[tuple[str, str], set] = {}
    for key, drifted in cluster.tracker.entries():
        out.setdefault(key, set()).update((v.plugin, v.reason, v.severity, v.details) for v in drifted.violations)
    for key, (_, violations) in cluster.tracker.spread.drifted.items():
        out.setdefault(key, set()).update((v.plugin, v.reason, v.severity, v.details) for v in violations)
    return out


def feasible(objects: list[dict]) -> dict[tuple[str, str], list[str]]:
    """Pending pod -> the filter verb's feasible nodes over every node."""
    snapshot = ClusterSnapshot.from_objects(objects)
    engine = Extender(CONFIG, StaticSource(snapshot))
    names = [n.name for n in snapshot.nodes.nodes]
    out = {}
    for raw in objects:
        if raw["kind"] == "Pod" and is_pending(raw):
            answer = orjson.loads(engine.filter(ExtenderArgs(raw, None, names)))
            out[(raw["metadata"]["namespace"], raw["metadata"]["name"])] = answer["NodeNames"] or []
    return out


def _violations(entries: list[dict]) -> set:
    return {(v["plugin"], v["reason"], v["severity"], tuple(v["details"])) for v in entries}


def check(objects: list[dict], changes: list[dict]) -> dict:
    answer = offline(CONFIG, copy.deepcopy(objects), {"changes": changes})
    changed = apply(objects, changes)
    before, after = drift(objects), drift(changed)
    expected = {k: set(v) for k, v in before.items()}
    for entry in answer["running"]["displaced"]:
        expected.pop((entry["namespace"], entry["name"]), None)
    for entry in answer["running"]["pods"]:
        key = (entry["namespace"], entry["name"])
        assert _violations(entry["before"]) <= before.get(key, set()), entry
        expected[key] = (expected.get(key, set()) - _violations(entry["before"])) | _violations(entry["after"])
        if not expected[key]:
            del expected[key]
    assert expected == after, (changes, answer["running"])
    fits_before, fits_after = feasible(objects), feasible(changed)
    listed = {(p["namespace"], p["name"]): p for p in answer["pending"]["pods"]}
    assert answer["pending"]["evaluated"] == len(fits_before)
    for key, nodes in fits_before.items():
        if key in listed:
            assert set(nodes) != set(fits_after[key])
            assert listed[key]["feasible"] == {"before": len(nodes), "after": len(fits_after[key])}
            assert listed[key]["lost"] == len(set(nodes) - set(fits_after[key]))
            assert sum(r["nodes"] for r in listed[key]["reasons"]) == listed[key]["lost"]
        else:
            assert sorted(nodes) == sorted(fits_after[key]), (key, changes)
    return answer


@pytest.mark.parametrize("seed", range(300))
def test_what_if_equals_the_change_made(seed):
    rng = random.Random(seed)
    objects = random_cluster(rng)
    changes = [random_change(rng, objects) for _ in range(rng.randint(1, 4))]
    check(objects, changes)


def test_the_generated_cases_exercise_every_kind_of_answer():
    """The 300 cases above are not vacuous: pods that start and stop violating, pending
    pods that lose and gain nodes, displaced pods and changed spread all occur."""
    seen: set[str] = set()
    for seed in range(300):
        rng = random.Random(seed)
        objects = random_cluster(rng)
        changes = [random_change(rng, objects) for _ in range(rng.randint(1, 4))]
        answer = offline(CONFIG, copy.deepcopy(objects), {"changes": changes})
        seen.update(p["change"] for p in answer["running"]["pods"])
        seen.update(v["plugin"] for p in answer["running"]["pods"] for v in (*p["before"], *p["after"]))
        seen.update("lost" for p in answer["pending"]["pods"] if p["lost"])
        seen.update("gained" for p in answer["pending"]["pods"] if p["gained"])
        seen.update("displaced" for _ in answer["running"]["displaced"])
        seen.update("skew" for _ in answer["spread"]["workloads"])
    assert {"violates", "stops violating", "TaintToleration", "NodeAffinity", "VolumeNodeAffinity",
            "PodTopologySpread", "lost", "gained", "displaced", "skew"} <= seen, seen
