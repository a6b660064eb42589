"""The drift report judges each running pod by its own profile (`spec.schedulerName` in
`--scheduler-config`): the plugins that profile has the extender run, with that
profile's arguments (NodeAffinity's `addedAffinity`, PodTopologySpread's
`defaultConstraints`). A plugin the profile runs in-tree, and a profile that runs them
all in-tree, are kube-scheduler's: the extender reports nothing for them."""

from __future__ import annotations

import textwrap

import pytest
from objects import Cluster, node, pod, taint

from extender.config import Config

ZONE = "topology.kubernetes.io/zone"
ADDED = "scheduler-enforced addedAffinity"
ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
UNTOLERATED = "node(s) had untolerated taint(s)"
SKEW = "node(s) didn't match pod topology spread constraints"

# web: every plugin the extender's, pool=web enforced, hard zone spread by default;
# batch: TaintToleration and NodeAffinity the extender's (pool=batch enforced), spread
# in-tree; in-tree: none the extender's.
TWO = textwrap.dedent("""\
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    profiles:
    - schedulerName: web
      plugins:
        multiPoint:
          disabled: [{name: TaintToleration}, {name: NodeAffinity}, {name: NodeUnschedulable},
                     {name: PodTopologySpread}]
      pluginConfig:
      - name: NodeAffinity
        args:
          addedAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [web]}]}]
      - name: PodTopologySpread
        args:
          defaultingType: List
          defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone,
                                whenUnsatisfiable: DoNotSchedule}]
    - schedulerName: batch
      plugins:
        multiPoint:
          disabled: [{name: TaintToleration}, {name: NodeAffinity}]
      pluginConfig:
      - name: NodeAffinity
        args:
          addedAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [batch]}]}]
    - schedulerName: in-tree
    """)


@pytest.fixture
def config(tmp_path) -> Config:
    path = tmp_path / "kube-scheduler-config.yaml"
    path.write_text(TWO)
    return Config(drift_report=True, drift_topology_spread=True, scheduler_config=str(path))


def reasons(cluster: Cluster) -> dict[str, set[str]]:
    return {name: {reason for _, reason, _ in found} for (_, name), found in cluster.settle().items()}


def test_added_affinity_and_taints_are_those_of_the_pods_profile(config):
    hard = taint("dedicated", "gpu")
    cluster = Cluster(config, [
        node("web-1", pool="web"), node("batch-1", pool="batch"), node("batch-2", [hard], pool="batch"),
        *(pod(f"{profile}-on-{where}", where, scheduler=profile)
          for profile in ("web", "batch", "in-tree") for where in ("web-1", "batch-1", "batch-2")),
    ])
    assert reasons(cluster) == {
        "web-on-batch-1": {ENFORCED},  # web's addedAffinity (pool=web)
        "web-on-batch-2": {ENFORCED, UNTOLERATED},
        "batch-on-web-1": {ENFORCED},  # batch's (pool=batch)
        "batch-on-batch-2": {UNTOLERATED},
    }  # and nothing of the in-tree profile's pods: kube-scheduler's plugins placed them
    details = {name: d for (_, name), found in cluster.settle().items() for d in found.values()}
    assert details["batch-on-web-1"] == (f'{ADDED}: pool In [batch]: the node\'s value is "web"',)


def test_a_pod_of_a_profile_the_file_lacks_is_not_judged(config):
    cluster = Cluster(config, [node("n", [taint("dedicated", "gpu")], pool="web"),
                               pod("stray", "n", scheduler="other"), pod("mine", "n", scheduler="web")])
    assert reasons(cluster) == {"mine": {UNTOLERATED}}


def test_spread_is_reported_for_the_profiles_that_have_the_extender_run_it(config):
    """web runs PodTopologySpread in the extender, with hard zone defaults: its pods
    are checked by their own constraints and, without any, by the defaults (their
    ReplicaSet selects them); batch runs it in-tree: never reported."""
    own = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "own"}}}]
    replicaset = {"kind": "ReplicaSet", "apiVersion": "apps/v1",
                  "metadata": {"name": "rs", "namespace": "default", "uid": "uid-rs"},
                  "spec": {"selector": {"matchLabels": {"app": "dflt"}}}}
    objects = [node("a1", pool="x", **{ZONE: "a"}), node("b1", pool="x", **{ZONE: "b"}), replicaset]
    for profile in ("web", "batch"):
        objects += [pod(f"{profile}-own-{i}", "a1", scheduler=profile, labels={"app": "own"}, spread=own,
                        namespace=profile) for i in range(3)]
        objects += [pod(f"{profile}-dflt-{i}", "a1", scheduler=profile, labels={"app": "dflt"}, owner="rs",
                        namespace=profile) for i in range(3)]
    replicaset_in = [dict(replicaset, metadata={**replicaset["metadata"], "namespace": ns}) for ns in ("web", "batch")]
    cluster = Cluster(config, objects + replicaset_in)
    cluster.tracker.settle()
    assert cluster.tracker.run_spread(interval=0)
    drifted = {key: {v.reason for v in found} for key, (_, found) in cluster.tracker.spread.drifted.items()}
    # zone a holds 3 of each, zone b none: skew 3 - 1 (the pod itself taken out) > 1
    assert drifted == {("web", f"web-{kind}-{i}"): {SKEW} for kind in ("own", "dflt") for i in range(3)}
