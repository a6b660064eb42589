"""Fixtures of the end-to-end suite (see tests/e2e/README.md).

Every test here needs the real kube-scheduler (and those on the real control plane,
kube-apiserver and etcd): without them each one fails, naming the missing binary and how
to get it; none is skipped or passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from testing.harness import E2ECluster, require_binary
from testing.realcp_fixtures import (  # noqa: F401  (the real control plane: tests/e2e/README.md)
    control_plane,
    control_planes,
    pair,
    start_real_cluster,
)


@pytest.fixture(scope="session")
def kube_scheduler() -> str:
    """The kube-scheduler binary's path (fails the test when it is not configured)."""
    return require_binary()


@pytest.fixture
def start_cluster(kube_scheduler, tmp_path, request) -> Iterator[Callable[..., E2ECluster]]:
    """`start_cluster(objects, **E2ECluster kwargs)`: the double loaded with `objects`,
    `extender serve` and kube-scheduler running; all stopped after the test. When the
    test fails, both processes' log tails are added to its report."""
    started: list[E2ECluster] = []
    request.node.e2e_clusters = started  # their log tails go into a failed test's report

    def start(objects=(), **kwargs) -> E2ECluster:
        workdir = tmp_path / f"cluster{len(started)}"
        workdir.mkdir()
        cluster = E2ECluster(workdir, kube_scheduler, **kwargs)
        started.append(cluster)
        return cluster.start(objects)

    yield start
    for cluster in started:
        cluster.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the tails of its clusters' logs (kube-scheduler's
    and the extender's: e.g. its warnings about pods answered but never bound), made
    while the processes still run, so xdist workers send them back with the report."""
    rep = yield
    if rep.when == "call" and rep.failed:
        for cluster in getattr(item, "e2e_clusters", ()):
            rep.sections.append(("e2e logs", cluster.logs()))
    return rep
