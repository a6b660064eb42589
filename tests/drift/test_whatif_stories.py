"""The what-if's stories on examples/whatif/cluster.yaml (docs/operate/what-if.md shows
their output), through `extender whatif` as a user runs it; the change flags as kubectl
writes them; the offline command's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubectl_extender.whatif import FlagError, render_whatif, split_changes

from extender.cli import main

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "whatif" / "cluster.yaml")
SLA = "node.example.com/sla"
KERNEL = "node.example.com/kernel-version"
SPOT_AB = "node.example.com/pool=spot,topology.kubernetes.io/zone in (zone-a,zone-b)"


def whatif(capsys, *args: str) -> dict:
    assert main(["whatif", "--cluster", CLUSTER, *args]) == 0
    return json.loads(capsys.readouterr().out)


def running(answer: dict) -> dict[str, tuple]:
    return {p["name"]: (p["change"], p["severity"], [v["plugin"] for v in p["after"]])
            for p in answer["running"]["pods"]}


def pending(answer: dict) -> dict[str, tuple]:
    return {p["name"]: (p["feasible"]["before"], p["feasible"]["after"], [r["reason"] for r in p["reasons"]])
            for p in answer["pending"]["pods"]}


def test_lowering_the_sla_of_two_zones_spot_nodes(capsys):
    answer = whatif(capsys, "--taint", "-l", SPOT_AB, f"{SLA}=800:NoSchedule")
    assert answer["changes"] == [{"change": f"taint {SLA}=800:NoSchedule", "selector": SPOT_AB, "selected": 4}]
    assert running(answer) == {f"risk-model-{i}": ("violates", "required", ["TaintToleration"]) for i in range(3)}
    assert answer["running"]["required"] == 3
    assert pending(answer) == {"risk-model-3": (6, 2, ["node(s) had untolerated taint(s)"])}
    # the etl pods tolerate Gt 400: untouched; spot-c nodes keep 950
    assert answer["running"]["totals"] == [{"plugin": "TaintToleration", "reason": "node(s) had untolerated taint(s)",
                                            "severity": "required", "before": 0, "after": 3}]


def test_raising_it_back_clears_what_a_lower_value_broke(capsys, tmp_path):
    """Two changes in order: lower everything to 500, then raise zone a back to 950."""
    request = tmp_path / "request.yaml"
    request.write_text(f"changes:\n- selector: node.example.com/pool=spot\n  taint: {SLA}=500:NoSchedule\n"
                       f"- selector: topology.kubernetes.io/zone=zone-a,node.example.com/pool=spot\n  taint: {SLA}=950:NoSchedule\n")
    answer = whatif(capsys, "--request", str(request))
    # zone a's spot nodes end where they were; spot-b1 (risk-model-2) at 500; etl tolerates Gt 400
    assert running(answer) == {"risk-model-2": ("violates", "required", ["TaintToleration"])}
    assert pending(answer)["risk-model-3"][:2] == (6, 2)


def test_rolling_the_kernel_back_on_the_on_demand_pool(capsys):
    answer = whatif(capsys, "--label", "-l", "node.example.com/pool=on-demand", f"{KERNEL}=5.15.0")
    assert running(answer) == {**{f"ebpf-agent-{i}": ("violates", "required", ["NodeAffinity"]) for i in range(3)},
                               "db-0": ("violates", "required", ["VolumeNodeAffinity"])}
    details = [p["after"][0]["details"] for p in answer["running"]["pods"] if p["name"] == "db-0"][0]
    assert 'SemverGt [6.0.0]: the node\'s value is "5.15.0"' in details[0]
    assert pending(answer) == {}
    # a kernel still above 6.5.0 breaks nothing
    assert running(whatif(capsys, "--label", "-l", "node.example.com/pool=on-demand", f"{KERNEL}=6.9.1")) == {}


def test_cordoning_a_zone(capsys):
    answer = whatif(capsys, "--cordon", "-l", "topology.kubernetes.io/zone=zone-a")
    # a cordon moves no running pod, but the lifecycle controller's unschedulable taint
    # makes /filter refuse them where they run: the drift report's `required`
    assert running(answer) == {name: ("violates", "required", ["TaintToleration"]) for name in
                               ("risk-model-0", "risk-model-1", "ebpf-agent-0", "web-0", "web-1")}
    assert pending(answer) == {"risk-model-3": (6, 4, ["node(s) were unschedulable"]),
                               "web-6": (6, 4, ["node(s) were unschedulable"])}


def test_removing_a_zones_on_demand_nodes_skews_the_web_spread(capsys):
    answer = whatif(capsys, "--remove-node", "od-a1,od-a2")
    assert sorted(p["name"] for p in answer["running"]["displaced"]) == ["ebpf-agent-0", "web-0", "web-1"]
    assert running(answer) == {f"web-{i}": ("violates", "required", ["PodTopologySpread"]) for i in range(2, 6)}
    [web] = answer["spread"]["workloads"]
    assert web["pods"] == 6 and web["constraints"][0]["before"] == {"skew": 0, "domains": 3}
    assert web["constraints"][0]["after"] == {"skew": 2, "domains": 3}
    assert pending(answer) == {"web-6": (6, 0, ["node(s) didn't match pod topology spread constraints",
                                                "node removed by the what-if"])}


def test_changing_a_volumes_semver_annotation(capsys):
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": KERNEL, "operator": "SemverGt", "values": ["6.9.0"]}]}]}}
    answer = whatif(capsys, "--annotate-volume", "fast-pv", f"scheduling-extender.io/node-affinity={json.dumps(affinity)}")
    assert running(answer) == {"db-0": ("violates", "required", ["VolumeNodeAffinity"])}
    answer = whatif(capsys, "--annotate-volume", "fast-pv", "scheduling-extender.io/node-affinity-")
    assert running(answer) == {}  # the requirement gone: nothing more to violate, nothing violated before


def test_where_a_workload_template_could_go(capsys, tmp_path):
    workload = tmp_path / "deploy.yaml"
    workload.write_text(f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: risk-model-v2, namespace: batch}}
spec:
  template:
    metadata: {{labels: {{app: risk-model-v2}}}}
    spec:
      nodeSelector: {{node.example.com/pool: spot}}
      tolerations: [{{key: {SLA}, operator: Gt, value: "900", effect: NoSchedule}}]
      containers: [{{name: app, image: x}}]
""")
    answer = whatif(capsys, "--taint", "-l", SPOT_AB, f"{SLA}=800:NoSchedule", "-f", str(workload))
    [asked] = answer["pods"]
    assert asked["pod"] == "batch/risk-model-v2-template"
    assert (asked["before"]["feasible"], asked["after"]["feasible"]) == (6, 2)
    assert {t["node"] for t in asked["after"]["top"]} == {"spot-c1", "spot-c2"}


def test_the_table_view(capsys):
    assert main(["whatif", "--cluster", CLUSTER, "-o", "table", "--taint", "-l", SPOT_AB,
                 f"{SLA}=800:NoSchedule"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"What if: taint {SLA}=800:NoSchedule on 4 node(s)"
    assert lines[3].split()[0] == "NAMESPACE"
    assert lines[4].split()[:6] == ["batch", "risk-model-0", "spot-a1", "required", "TaintToleration", "violate"]
    assert any(line.split()[:6] == ["batch", "risk-model-3", "6", "2", "4", "0"] for line in lines)


@pytest.mark.parametrize(("args", "says"), [
    (["--taint", "ghost", f"{SLA}=1:NoSchedule"], "changes[0].nodes: no such node(s) in the cluster state: ghost"),
    (["--taint", "od-a1", f"{SLA}=1"], "effect '': expected one of NoSchedule"),
    (["--label", "-l", "pool in (a", "x=y"], "unbalanced '('"),
    (["--annotate-volume", "nope", "a=b"], "no PersistentVolume 'nope'"),
    ([], "changes: expected a non-empty list"),
    (["--taint", "-l"], "--taint: expected a label selector after -l"),
    (["--label", "od-a1"], "--label: expected KEY=VALUE or KEY-"),
])
def test_bad_changes_are_said_precisely(capsys, args, says):
    assert main(["whatif", "--cluster", CLUSTER, *args]) == 2
    assert says in capsys.readouterr().err


def test_flags_as_kubectl_writes_them():
    changes, rest = split_changes(["--taint", "-l", "pool=spot", "k=v:NoSchedule", "-o", "json", "--label", "a,b",
                                   "k-", "--cordon", "c", "--uncordon", "--selector", "x", "--remove-node", "d",
                                   "--annotate-volume", "pv", "k=v", "--url", "http://x"])
    assert changes == [{"selector": "pool=spot", "taint": "k=v:NoSchedule"}, {"nodes": ["a", "b"], "label": "k-"},
                       {"nodes": ["c"], "cordon": True}, {"selector": "x", "cordon": False},
                       {"nodes": ["d"], "remove": True}, {"volume": "pv", "annotation": "k=v"}]
    assert rest == ["-o", "json", "--url", "http://x"]
    with pytest.raises(FlagError, match="--cordon: expected NODE"):
        split_changes(["--cordon", "--url", "x"])


def test_render_says_when_nothing_changes():
    text = render_whatif({"changes": [{"change": "cordon", "nodes": ["a"], "selected": 1}],
                          "running": {"evaluated": 2, "pods": []}, "pending": {"evaluated": 0, "pods": []},
                          "spread": {"enabled": False}, "pods": []})
    assert "No running pod would start or stop violating a requirement (2 evaluated)." in text
    assert "without --drift-topology-spread" in text


def test_past_the_time_budget_pending_pods_are_counted_not_evaluated():
    """`TimeLimit` on a clock that moves a second per reading: the first pending pod is
    evaluated, the other is counted in `incomplete` (the answer says so, never hangs)."""
    from extender import metrics
    from extender.config import Config
    from extender.state import load_objects
    from extender.whatif import TimeLimit, answer

    metrics.install()
    objects = load_objects(CLUSTER)
    ticks = iter(range(10**6))
    time_limit = TimeLimit(1.5, clock=lambda: float(next(ticks)))
    engine, tracker = _engine(Config(), objects)
    result = answer(engine, tracker, {"changes": [{"nodes": ["spot-a1"], "cordon": True}]}, objects, time_limit)
    assert (result["pending"]["evaluated"], result["pending"]["incomplete"]) == (1, 1)
    assert "1 pending pods not evaluated (time budget)" in render_whatif(result)


def _engine(config, objects):
    import dataclasses

    from extender.drift import attach_tracker
    from extender.engine import Extender
    from extender.state import StaticSource
    from extender.state.store import Store

    config = dataclasses.replace(config, drift_report=True, drift_topology_spread=True)
    store = Store()
    tracker = attach_tracker(store, config)
    store.load(objects)
    engine = Extender(config, StaticSource(store.snapshot()))
    tracker.bind(engine.framework.plugins, spread=True)
    return engine, tracker


def test_junk_requests_are_refused_with_a_what_if_error_never_a_crash():
    """Seeded junk in every field of a request: each is answered or refused with a
    WhatIfError (the endpoint's 400 / 413), nothing else escapes."""
    import random

    from extender.config import Config
    from extender.state import load_objects
    from extender.whatif import WhatIfError, offline

    objects = load_objects(CLUSTER)
    junk = [None, 5, -1, 1.5, True, "", "x", "-", "=", ":", "a=b:", "a:-", "=v:NoSchedule", "k=v:NoSchedule",
            "pool in (", "!", "a,b", [], ["od-a1"], ["ghost"], [5], {}, {"a": 1}, "é=ü:NoSchedule", "k" * 300]
    fields = ["nodes", "selector", "taint", "label", "cordon", "remove", "volume", "annotation", "extra"]
    rng = random.Random(51)
    answered = refused = 0
    for _ in range(150):
        change = {f: rng.choice(junk) for f in rng.sample(fields, rng.randint(1, 4))}
        body = rng.choice([{"changes": [change]}, {"changes": change}, {"changes": [change], "pods": rng.choice(junk)},
                           change, [change]])
        try:
            offline(Config(), objects, body)
            answered += 1
        except WhatIfError as exc:
            assert exc.status in (400, 413) and str(exc)
            refused += 1
    assert refused > 100 and answered + refused == 150
