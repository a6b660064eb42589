"""The KubeSchedulerConfiguration checker itself: it must catch what kube-scheduler's
strict decoding and validation would refuse."""

from __future__ import annotations

import copy

import pytest
from schedconfig import check_scheduler_config

GOOD = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": True, "resourceName": "x", "resourceNamespace": "y",
                       "leaseDuration": "15s"},
    "clientConnection": {"qps": 50.5, "burst": 100},
    "enableProfiling": False,
    "percentageOfNodesToScore": 100,
    "profiles": [{"schedulerName": "a", "plugins": {"multiPoint": {"disabled": [{"name": "TaintToleration"}]}},
                  "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "List"}}]}],
    "extenders": [{"urlPrefix": "http://127.0.0.1:8888", "filterVerb": "filter",
                   "prioritizeVerb": "prioritize", "weight": 1, "bindVerb": "bind",
                   "httpTimeout": "1m30s", "managedResources": [{"name": "example.com/foo",
                                                                 "ignoredByScheduler": True}]}],
}


def test_a_full_config_passes():
    assert check_scheduler_config(GOOD) == []


def changed(path: str, value) -> dict:
    cfg = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = cfg
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return cfg


@pytest.mark.parametrize(("path", "value", "error"), [
    ("extenders.0.httpTimout", "5s", "extenders[0].httpTimout: unknown field"),
    ("extenders.0.httpTimeout", 5, "extenders[0].httpTimeout: expected a Go duration like 5s, got 5"),
    ("extenders.0.weight", "1", "extenders[0].weight: expected int64, got '1'"),
    ("extenders.0.weight", 0, "extenders[0].weight: must have a positive weight applied to it"),
    ("extenders.0.ignorable", "false", "extenders[0].ignorable: expected a boolean, got 'false'"),
    ("extenders.0.urlPrefix", "", "extenders[0].urlPrefix: Required value"),
    ("percentageOfNodesToScore", 101, "percentageOfNodesToScore: not in valid range [0-100], got 101"),
    ("percentageOfNodesToScore", 2**31, "percentageOfNodesToScore: expected int32, got 2147483648"),
    ("profiles.0.schedulerName", "", "profiles[0].schedulerName: Required value"),
    ("profiles.0.plugins.multipoint", {}, "profiles[0].plugins.multipoint: unknown field"),
    ("leaderElection.resourceLock", "endpoints",
     "leaderElection.resourceLock: must be one of ('leases', 'endpointsleases', 'configmapsleases'), got 'endpoints'"),
    ("kind", "KubeSchedulerConfig", "kind: expected KubeSchedulerConfiguration, got 'KubeSchedulerConfig'"),
    ("profiles.0.pluginConfig", [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 101}}],
     "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: not in valid range [0, 100], got 101"),
    ("profiles.0.pluginConfig", [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 0,
                                                                         "minCandidateNodesAbsolute": 0}}],
     "profiles[0].pluginConfig[0].args: minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be zero"),
    ("profiles.0.pluginConfig", [{"name": "DefaultPreemption", "args": {"minCandidateNodes": 5}}],
     "profiles[0].pluginConfig[0].args.minCandidateNodes: unknown field"),
    ("extenders.0.managedResources", [{"name": "foo"}],
     "extenders[0].managedResources[0].name: must be an extended resource name"),
])
def test_each_mistake_is_named(path, value, error):
    assert error in check_scheduler_config(changed(path, value))


def test_two_binders_and_duplicate_profiles():
    cfg = copy.deepcopy(GOOD)
    cfg["extenders"].append(dict(cfg["extenders"][0]))
    cfg["profiles"].append({"schedulerName": "a"})
    errors = check_scheduler_config(cfg)
    assert "extenders: only one extender can implement bind" in errors
    assert "profiles[1].schedulerName: Duplicate value: 'a'" in errors
