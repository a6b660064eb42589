"""Every user story in examples/stories through the real kube-scheduler: the story's
cluster is loaded into the API double, its pods are created (for the shipped profile),
and each pod must land on one of the nodes expected.yaml lists, or stay Pending with the
listed reasons in its FailedScheduling message when it lists none. The binds are also
checked against the independent truth (testing/truth.py), which knows taints, affinity
and spreading (CEL through the oracles below) but not volumes: the volume story is held
to expected.yaml, and a volume story pod on a wrong node fails that assertion.

`tests/core/test_stories.py` runs the same stories offline through `extender explain`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from extender.state.loader import load_objects
from testing.harness import SCHEDULER_NAME, key_of
from testing.live import request

STORIES = sorted(p for p in (Path(__file__).resolve().parents[2] / "examples" / "stories").iterdir() if p.is_dir())


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


# The stories' CEL expressions, restated in Python for the truth checker.
ORACLES = {
    "taint.key.startsWith('env.example.com/')": lambda key, value, effect: key.startswith("env.example.com/"),
    "taint.key == 'node.example.com/kernel-version' && semver(taint.value).isGreaterThan(semver('5.15.0'))":
        lambda key, value, effect: key == "node.example.com/kernel-version" and _version(value) > (5, 15, 0),
    "taint.key.matches('^zone-a[12]-rack-[0-9]+$')":
        lambda key, value, effect: re.search(r"^zone-a[12]-rack-[0-9]+$", key) is not None,
}


# Which extender plugin gives each filter message (and with which status).
PLUGIN_OF = {
    "node(s) had untolerated taint(s)": ("TaintToleration", "UnschedulableAndUnresolvable"),
    "node(s) didn't match Pod's node affinity/selector": ("NodeAffinity", "UnschedulableAndUnresolvable"),
    "node(s) had volume node affinity conflict": ("VolumeNodeAffinity", "UnschedulableAndUnresolvable"),
    "node(s) didn't match pod topology spread constraints": ("PodTopologySpread", "Unschedulable"),
}


def rejections(cluster, plugin: str, status: str) -> float:
    """scheduler_plugin_evaluation_total for one plugin's Filter rejections, as served."""
    text = request(cluster.metrics_port, "GET", "/metrics")[1].decode()
    wanted = (f'plugin="{plugin}"', 'extension_point="Filter"', f'status="{status}"')
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("scheduler_plugin_evaluation_total{") and all(w in line for w in wanted))


def story_pods(story: Path) -> list[dict]:
    pods = load_objects(story / "pods.yaml")
    for p in pods:
        p["spec"]["schedulerName"] = SCHEDULER_NAME  # the shipped profile (the stories name it too)
    return pods


@pytest.mark.parametrize("story", STORIES, ids=[p.name for p in STORIES])
def test_story_through_kube_scheduler(story, start_cluster):
    expected = yaml.safe_load((story / "expected.yaml").read_text())
    cluster = start_cluster(load_objects(story / "cluster.yaml"))
    pods = story_pods(story)
    assert [p["metadata"]["name"] for p in pods] == [p["name"] for p in expected["pods"]]
    cluster.create(*pods)
    outcome = cluster.wait_settled(pods, timeout=90)
    for pod, want in zip(pods, expected["pods"], strict=True):
        key = key_of(pod)
        if want["feasible"]:
            assert outcome.bound.get(key) in want["feasible"], (key, outcome.bound.get(key), outcome.unschedulable.get(key))
        else:
            assert key in outcome.unschedulable, (key, outcome.bound.get(key))
            message = outcome.unschedulable[key]
            for reason, nodes in want["rejected"].items():
                assert f"{len(nodes)} {reason}" in message, message
    # the rejections were the extender's (a pod with several feasible nodes could land on
    # an expected one by chance): each filter call counts every node a plugin rejected
    for (plugin, status), want in _expected_rejections(expected).items():
        assert rejections(cluster, plugin, status) >= want, (plugin, status, want)
    report = cluster.replay(ORACLES)
    assert report.violations == [], report.violations
    assert cluster.pending_but_feasible(outcome.unschedulable, ORACLES) == {}


def _expected_rejections(expected: dict) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for want in expected["pods"]:
        for reason, nodes in (want.get("rejected") or {}).items():
            out[PLUGIN_OF[reason]] = out.get(PLUGIN_OF[reason], 0) + len(nodes)
    return out
