"""Two profiles in one KubeSchedulerConfiguration, through the real kube-scheduler on the
real control plane (both version pairs), the extender reading the very same profiles
(`--scheduler-config`).

The two profiles disagree on everything the extender reads of them: NodeAffinity's
`addedAffinity` (required pools and preferred tiers), PodTopologySpread's
`defaultConstraints` (zone, maxSkew 1 / hostname, maxSkew 3, both DoNotSchedule: the
pods carry no constraints of their own, their Service selects them) and the weights of
TaintToleration and NodeAffinity (PreferNoSchedule taints against preferred tiers: the
weights decide). One burst of annotation-free pods of both profiles is placed twice on
one control plane:

1. by kube-scheduler's in-tree plugins of those profiles (the control);
2. by the extender: the four plugins disabled in each profile (their weights on the
   `disabled` entries), the extender's filter and prioritize.

Only the three plugins score in either run (every other Score plugin is off), so where a
pod lands is theirs alone; the nodes' tiers and taints are chosen so that every decision
has one best node (no random tie-break, also after the extender's score / 10). Pods of
one profile are alike, so the runs are compared per profile and node. Then the
configuration changes (other addedAffinity, defaults, weights) and both processes are
restarted with it as a rolled Deployment restarts them (neither re-reads its file: docs/
operate/upgrades.md); a second burst lands by the new profiles, again as in-tree.

The `scheduler_*` metrics of the extender carry each pod's own profile: its Filter
extension point is observed per profile once per filter call of that profile's pods,
and kube-scheduler's own `scheduler_schedule_attempts_total` counts the same pods under
the same profile names.
"""

from __future__ import annotations

import copy
import os
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from testing.controlplane import binaries
from testing.harness import (
    HOST,
    SCHEDULER_CONFIG,
    SCHEDULER_NAME,
    ZONE,
    Process,
    extender_command,
    key_of,
    launch_extender,
    node,
    pod,
    wait_extender_ready,
    wait_for,
)
from testing.live import request
from testing.wiretap import WireTap

WEB, BATCH = SCHEDULER_NAME, "extended-batch"
APP = {WEB: "web", BATCH: "batch"}
SOFT = {"key": "example.com/soft", "value": "1", "effect": "PreferNoSchedule"}
# name: (zone, pool, tier, PreferNoSchedule taint)
LAYOUT = {"a-web": ("a", "web", "gold", False), "a-batch": ("a", "batch", "gold", True),
          "b-web": ("b", "web", "gold", True), "b-shared": ("b", "shared", "silver", False),
          "c-web": ("c", "web", "silver", True), "c-batch": ("c", "batch", "bronze", False)}
NODES = [node(name, zone, labels={"pool": pool, "tier": tier}, taints=[SOFT] if soft else [])
         for name, (zone, pool, tier, soft) in LAYOUT.items()]
SERVICES = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": app, "namespace": "default"},
             "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}} for app in APP.values()]
TT, NA, PTS = "TaintToleration", "NodeAffinity", "PodTopologySpread"
# per version of the configuration, per profile: required pools, preferred tiers (weight),
# the default constraint (key, maxSkew), the three score weights
VERSIONS = {
    1: {WEB: (("web", "shared"), {"gold": 60, "silver": 30}, (ZONE, 1), {TT: 3, NA: 2, PTS: 2}),
        BATCH: (("batch", "shared"), {"silver": 80, "gold": 20}, (HOST, 3), {TT: 1, NA: 6, PTS: 1})},
    2: {WEB: (("web", "shared"), {"bronze": 90, "gold": 10}, (ZONE, 2), {TT: 1, NA: 4, PTS: 2}),
        BATCH: (("batch", "shared", "web"), {"silver": 80, "gold": 20}, (HOST, 4), {TT: 4, NA: 1, PTS: 1})},
}
PODS_PER_PROFILE = 6
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def profile(name: str, version: int, extended: bool) -> dict:
    """One profile of `version`, for the extender (the four plugins disabled, their
    weights on the `disabled` entries, no in-tree scoring) or in-tree (the three plugins
    the only scorers, with the same weights)."""
    pools, tiers, (key, skew), weights = VERSIONS[version][name]
    added = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": list(pools)}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": w, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": [t]}]}}
            for t, w in tiers.items()]}
    defaults = [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule"}]
    if extended:
        plugins = {"multiPoint": {"disabled": [*({"name": p, "weight": w} for p, w in weights.items()),
                                               {"name": "NodeUnschedulable"}]},
                   "score": {"disabled": [{"name": "*"}]}}
    else:
        plugins = {"score": {"disabled": [{"name": "*"}],
                             "enabled": [{"name": p, "weight": w} for p, w in weights.items()]}}
    return {"schedulerName": name, "plugins": plugins, "pluginConfig": [
        {"name": NA, "args": {"addedAffinity": added}},
        {"name": PTS, "args": {"defaultingType": "List", "defaultConstraints": defaults}}]}


def profiles(version: int, extended: bool) -> list[dict]:
    return [profile(name, version, extended) for name in (WEB, BATCH)]


class Configuration:
    """The ConfigMap: which version the pods of the next start read. kube-scheduler's
    file is written by the harness at its start (`edit`); the extender's is written here
    before its start, with the same profiles and the shipped extender entry."""

    def __init__(self, path: Path, extended: bool) -> None:
        self.path, self.extended, self.version = path, extended, 1

    def edit(self, config: dict) -> None:
        config["percentageOfNodesToScore"] = 100
        config["profiles"] = profiles(self.version, self.extended)

    def write(self, version: int) -> None:
        self.version = version
        shipped = yaml.safe_load(SCHEDULER_CONFIG.read_text())
        self.path.write_text(yaml.safe_dump({
            "apiVersion": shipped["apiVersion"], "kind": shipped["kind"], "percentageOfNodesToScore": 100,
            "profiles": profiles(version, True), "extenders": shipped["extenders"]}, sort_keys=False))


def roll(cluster, workdir: Path) -> None:
    """A new pod of the Deployment: both containers of the old one stop, the new pod's
    start with the ConfigMap's content as it is now, the new kube-scheduler takes the
    lease."""
    for proc in (cluster.scheduler, cluster.extender):
        if proc is not None:
            proc.stop()
    if cluster.tap is not None:
        cluster.tap.stop()
    workdir.mkdir()
    cluster.workdir = workdir
    if not cluster.in_tree:
        cluster.extender, cluster.extender_port, cluster.metrics_port = launch_extender(
            cluster.identity, workdir, cluster.extender_flags)
        cluster.tap = WireTap(cluster.extender_port).start()
    cluster.start_scheduler(cluster.identity)
    cluster._wait_scheduler(cluster.leads, "take the lease")
    if cluster.extender is not None:
        wait_extender_ready(cluster.extender, cluster.metrics_port)


def burst(phase: int) -> list[dict]:
    """Pods of both profiles, interleaved, created at once; annotation-free, no
    constraints of their own (their profile's defaults apply: their Service selects them)."""
    return [pod(f"{APP[name]}-{phase}-{i}", {"app": APP[name]}, scheduler=name)
            for i in range(PODS_PER_PROFILE) for name in (WEB, BATCH)]


def placed(cluster, pods: list[dict]) -> Counter:
    """(profile, node) -> pods there; (profile, "") for a pod left unschedulable."""
    outcome = cluster.wait_settled(pods, timeout=180)
    assert not outcome.pending, outcome.pending
    return Counter((p["spec"]["schedulerName"], outcome.bound.get(key_of(p), "")) for p in pods)


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}")]))
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def check_metrics(cluster, pods: list[dict]) -> None:
    """The extender's Filter observations per profile: at least one per pod of that
    profile (each was filtered before it was bound), at most one per filter call the
    scheduler made for them; none under another profile. kube-scheduler counts the same
    pods as scheduled under the same names (its counter starts with the process)."""
    profile_of = {key_of(p): p["spec"]["schedulerName"] for p in pods}
    calls = Counter(profile_of[c.pod] for c in list(cluster.tap.calls) if c.verb == "filter" and c.pod in profile_of)
    text = request(cluster.metrics_port, "GET", "/metrics")[1].decode()
    observed: Counter = Counter()
    for labels, value in samples(text, "scheduler_framework_extension_point_duration_seconds_count"):
        if labels["extension_point"] == "Filter":
            observed[labels["profile"]] += value
    assert set(observed) == {WEB, BATCH}, observed
    for name in (WEB, BATCH):
        assert PODS_PER_PROFILE <= observed[name] <= calls[name], (name, observed, calls)
    evaluated = {labels["profile"] for labels, value in samples(text, "scheduler_plugin_evaluation_total")
                 if labels["plugin"] == NA and labels["extension_point"] == "Filter" and value}
    assert evaluated == {WEB, BATCH}, evaluated
    scheduled = Counter()
    for labels, value in samples(cluster.scheduler_metrics(), "scheduler_schedule_attempts_total"):
        if labels.get("result") == "scheduled":
            scheduled[labels["profile"]] += value
    assert scheduled == Counter({WEB: PODS_PER_PROFILE, BATCH: PODS_PER_PROFILE}), scheduled


def run(start_real_cluster, tmp_path: Path, extended: bool) -> dict[int, Counter]:
    """Both bursts, the configuration changed and both processes rolled between them."""
    config = Configuration(tmp_path / ("extended" if extended else "in-tree") / "kube-scheduler-config.yaml",
                           extended)
    config.path.parent.mkdir()
    config.write(1)
    flags = ["--scheduler-config", str(config.path), "--inflight-wait", "10"]  # see test_real_scenarios.patient
    cluster = start_real_cluster([*NODES, *SERVICES], in_tree=not extended, extender_flags=flags,
                                 scheduler_config_edit=config.edit)
    out = {}
    for phase in (1, 2):
        if phase == 2:
            config.write(2)
            roll(cluster, tmp_path / f"{'extended' if extended else 'in-tree'}-rolled")
        if extended:  # the two processes run the same profiles
            theirs = yaml.safe_load((cluster.workdir / "kube-scheduler-config.yaml").read_text())["profiles"]
            assert theirs == yaml.safe_load(config.path.read_text())["profiles"]
        pods = burst(phase)
        cluster.create(*pods)
        out[phase] = placed(cluster, pods)
        if extended:
            check_metrics(cluster, pods)
    cluster.stop()
    return out


def test_two_profiles_land_where_their_in_tree_plugins_put_them(start_real_cluster, tmp_path):
    in_tree = run(start_real_cluster, tmp_path, extended=False)
    extended = run(start_real_cluster, tmp_path, extended=True)
    assert extended == in_tree
    for phase in (1, 2):
        assert not [where for where in in_tree[phase] if not where[1]], in_tree[phase]  # every pod placed
        for name in (WEB, BATCH):
            nodes = {n for (p, n) in in_tree[phase] if p == name}
            assert len(nodes) > 1, (phase, name, in_tree[phase])  # the defaults spread them
    # the changed configuration moved pods of both profiles elsewhere
    for name in (WEB, BATCH):
        assert ({n: c for (p, n), c in in_tree[1].items() if p == name}
                != {n: c for (p, n), c in in_tree[2].items() if p == name}), name


# --- a bad file stops both processes at start, the field named ---------------------------


def bad(kind: str) -> dict:
    shipped = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    config = copy.deepcopy(shipped)
    config["profiles"] = profiles(1, True)
    if kind == "malformed":
        config["profiles"][1]["plugins"]["multiPoint"]["disabled"][0]["wieght"] = 1
        return config
    config["profiles"][1]["schedulerName"] = WEB  # contradictory: one name, two profiles
    return config


@pytest.mark.parametrize(("kind", "field"), [
    ("malformed", 'strict decoding error: unknown field "profiles[1].plugins.multiPoint.disabled[0].wieght"'),
    # kube-scheduler then prints its field.Path as the value (`Duplicate value: {}` in
    # v1.36.2, `field.Path{...}` in v1.30.6); the extender prints the name
    ("contradictory", "profiles[1].schedulerName: Duplicate value: "),
], ids=["malformed", "contradictory"])
def test_a_bad_file_stops_both_processes_naming_the_field(pair, tmp_path, kind, field):
    """The same file given to both: each exits non-zero at start naming the same field
    (kube-scheduler's klog line escapes the quotes)."""
    path = tmp_path / "kube-scheduler-config.yaml"
    config = bad(kind)
    config["clientConnection"] = {"kubeconfig": str(tmp_path / "absent.kubeconfig")}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    scheduler = Process("kube-scheduler", [binaries(pair)[1], f"--config={path}", "--secure-port=0"],
                        tmp_path / "kube-scheduler.log")
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBECONFIG")}
    extender = Process("extender", [*extender_command(), "serve", "--scheduler-config", str(path), "--cluster",
                                    str(EXAMPLES / "cluster.yaml"), "--metrics-listen", "off"],
                       tmp_path / "extender.log", env)
    try:
        for proc in (scheduler, extender):
            assert wait_for(lambda p=proc: not p.alive(), timeout=60), f"{proc.name} still runs"
            assert proc.proc.returncode != 0 and field in proc.tail().replace('\\"', '"'), (proc.name, proc.tail())
        assert extender.proc.returncode == 2
    finally:
        scheduler.stop()
        extender.stop()
