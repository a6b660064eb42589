"""High availability on the real control plane, both version pairs (`make test-long`):
tests/e2e/test_ha.py's scenarios with two replicas of the scheduler pod against one
kube-apiserver. The lease is the shipped one (`scheduling-extender/extended-scheduler`),
taken, renewed and released through the real coordination API under the shipped Role;
each replica runs as the ServiceAccount's token."""

from __future__ import annotations

import pytest

from testing.controlplane import binaries
from testing.harness import node
from testing.realcluster import RealCluster
from tests.e2e import test_ha as ha

pytestmark = pytest.mark.long


class RealReplica(RealCluster, ha.Replica):
    """test_ha's Replica (join, crash_extender, filtered, stop_own) on the real control plane."""


@pytest.fixture
def real_replicas(pair, control_plane, tmp_path, request):
    scheduler = binaries(pair)[1]
    reports = request.node.__dict__.setdefault("e2e_clusters", [])
    started: list[RealReplica] = []
    for name in "ab":
        (tmp_path / name).mkdir()
    first = RealReplica(tmp_path / "a", control_plane, scheduler)
    started.append(first)
    reports.append(first)
    try:
        first.start([node(f"n-{z}", z) for z in "abc"])
        second = RealReplica(tmp_path / "b", control_plane, scheduler)
        reports.append(second)
        started.append(second.join(first.api, first.identity))
        yield started
    finally:
        for replica in reversed(started[1:]):
            replica.stop_own()
        first.stop()
    forbidden = [line for r in started for line in r.forbidden()]
    assert not forbidden, forbidden[:20]


def test_the_standby_takes_over_when_the_leaders_extender_dies(real_replicas, record_property):
    ha.test_the_standby_takes_over_when_the_leaders_extender_dies(real_replicas, record_property)


def test_without_the_probe_the_leader_keeps_the_lease(real_replicas):
    ha.test_without_the_probe_the_leader_keeps_the_lease_and_the_profile_stalls(real_replicas)
