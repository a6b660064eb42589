"""Every toleration kind through the real kube-scheduler (its TaintToleration and
NodeAffinity plugins are disabled by the shipped configuration; the extender does their
job), checked against the truth: each pod lands on the one node it tolerates, and the
pods no node admits stay pending."""

from __future__ import annotations

from testing.harness import PREFIX, node, pod

SLA, KERNEL, CNI = "example.com/sla", "example.com/kernel", "example.com/cni"
CEL_ENV = "taint.key.startsWith('env.example.com/')"
CEL_MAINTENANCE = "taint.key == 'maintenance'"
ORACLES = {CEL_ENV: lambda key, value, effect: key.startswith("env.example.com/"),
           CEL_MAINTENANCE: lambda key, value, effect: key == "maintenance"}
POOL = {"key": "pool", "value": "semver", "effect": "NoSchedule"}


def tainted(name: str, key: str, value: str = "", effect: str = "NoSchedule", **kw) -> dict:
    taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
    return node(name, taints=[taint, *kw.pop("extra_taints", [])], **kw)


def tol(key: str, operator: str, value: str = "", effect: str = "NoSchedule") -> dict:
    return {"key": key, "operator": operator, "effect": effect, **({"value": value} if value else {})}


NODES = [
    tainted("team-blue", "team", "blue"),
    tainted("sla-800", SLA, "800"),
    tainted("sla-950", SLA, "950"),
    tainted("kernel-5.10", KERNEL, "5.10.0"),
    tainted("kernel-6.8", KERNEL, "6.8.0"),
    tainted("env-dev", "env.example.com/dev", "true"),
    tainted("maintenance", "maintenance", "soon", effect="NoExecute"),
    tainted("sla-ne-900", "example.com/sla-ne", "900", effect="NoExecute"),
    node("cni-1.4", taints=[POOL], labels={CNI: "1.4.2"}),
    node("cni-1.6", taints=[POOL], labels={CNI: "1.6.0"}),
]

# pod name -> (spec tolerations, annotations, the node it must land on, "" = none admits it)
CASES = {
    "equal": ([tol("team", "Equal", "blue")], {}, "team-blue"),
    "exists": ([tol("team", "Exists")], {}, "team-blue"),
    "gt-900": ([tol(SLA, "Gt", "900")], {}, "sla-950"),
    "lt-900": ([tol(SLA, "Lt", "900")], {}, "sla-800"),
    "gt-990": ([tol(SLA, "Gt", "990")], {}, ""),
    "semver-gt-ann": ([], {f"{PREFIX}/tolerations": [tol(KERNEL, "SemverGt", "6.0.0")]}, "kernel-6.8"),
    "semver-lt-ann": ([], {f"{PREFIX}/tolerations": [tol(KERNEL, "SemverLt", "v6")]}, "kernel-5.10"),
    "cel-ann": ([], {f"{PREFIX}/tolerations": [{"expression": CEL_ENV}]}, "env-dev"),
    "semver-affinity-ann": ([tol("pool", "Exists")], {f"{PREFIX}/node-affinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": CNI, "operator": "SemverGt", "values": ["1.5.0"]}]}]}}}, "cni-1.6"),
    # NoExecute: only spec tolerations the kubelet understands count
    "noexecute-spec": ([tol("maintenance", "Exists", effect="NoExecute")], {}, "maintenance"),
    "noexecute-gt-spec": ([tol("example.com/sla-ne", "Gt", "500", effect="NoExecute")], {}, "sla-ne-900"),
    "noexecute-ann": ([], {f"{PREFIX}/tolerations": [tol("maintenance", "Exists", effect="NoExecute")]}, ""),
    "noexecute-cel-spec": ([{"expression": CEL_MAINTENANCE}], {}, ""),
    "untolerated": ([], {}, ""),
}


def test_every_toleration_kind_lands_exactly_where_it_is_tolerated(start_cluster):
    every_kind_lands_where_tolerated(start_cluster, CASES)


def every_kind_lands_where_tolerated(start_cluster, cases: dict):
    """The scenario, for `cases` (tests/e2e/test_real_tolerations.py gives each version
    pair's API server the cases it admits); returns the cluster."""
    cluster = start_cluster(NODES)
    pods = [pod(name, {"case": name}, tolerations=tols, annotations=ann) for name, (tols, ann, _) in cases.items()]
    cluster.create(*pods)
    outcome = cluster.wait_settled(pods, timeout=90)
    placed = {k[1]: n for k, n in outcome.bound.items()}
    assert placed == {name: want for name, (_, _, want) in cases.items() if want}
    assert {k[1] for k in outcome.unschedulable} == {name for name, (_, _, want) in cases.items() if not want}
    report = cluster.replay(ORACLES)
    assert report.violations == [] and report.binds == len(placed)
    assert cluster.pending_but_feasible(outcome.unschedulable, ORACLES) == {}
    # the reason the scheduler reports names the extender's verdict
    message = outcome.unschedulable[("default", "noexecute-ann")]
    assert "0/10 nodes are available: 10 node(s) had untolerated taint(s)" in message, message
    return cluster
