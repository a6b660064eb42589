"""pytest fixtures for the end-to-end tests on a real control plane (tests/e2e/conftest.py
imports them; tests/e2e/README.md shows how to use them).

- `pair`: the version pair, parametrized over `PAIRS` (v1.30.3 + v1.30.6, v1.36.2 +
  v1.36.2). Each pair's tests share one xdist group, so one worker runs them on one
  control plane. A test for one pair: `@only_pairs("v1.36")`.
- `control_plane`: that pair's etcd + kube-apiserver with the overlay's RBAC installed,
  started once per worker and stopped at the session's end.
- `start_real_cluster(objects, **kwargs)`: a `RealCluster` on it (`extender serve` and
  kube-scheduler with the ServiceAccount's token); stopped after the test, and the test
  fails when either process logged `forbidden`.

A missing binary (kube-apiserver, kube-scheduler, etcd) fails the test with the name of
the variable, where it was looked for and how to get it: these tests never skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from testing.controlplane import PAIRS, ControlPlane, MissingBinary, Pair, binaries
from testing.realcluster import RealCluster, install

PAIR_PARAMS = [pytest.param(name, id=name, marks=pytest.mark.xdist_group(f"realcp-{name}")) for name in PAIRS]


def only_pairs(*names: str) -> pytest.MarkDecorator:
    """`@only_pairs("v1.36")`: the test runs on those pairs alone (in their xdist groups)."""
    return pytest.mark.parametrize("pair", [p for p in PAIR_PARAMS if p.values[0] in names], indirect=True)


class ControlPlanes:
    """One running control plane per pair, started on first use."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp = tmp_path_factory
        self.running: dict[str, ControlPlane] = {}

    def get(self, pair: Pair) -> ControlPlane:
        plane = self.running.get(pair.name)
        if plane is not None and plane.alive():
            return plane
        if plane is not None:
            plane.stop()
        apiserver, _, etcd = binaries(pair)
        plane = ControlPlane(self.tmp.mktemp(f"controlplane-{pair.name}"), pair, apiserver, etcd).start()
        install(plane)
        self.running[pair.name] = plane
        return plane

    def stop(self) -> None:
        for plane in self.running.values():
            plane.stop()


@pytest.fixture(scope="session")
def control_planes(tmp_path_factory) -> Iterator[ControlPlanes]:
    planes = ControlPlanes(tmp_path_factory)
    yield planes
    planes.stop()


@pytest.fixture(params=PAIR_PARAMS)
def pair(request) -> Pair:
    """The version pair under test (a MissingBinary fails the test here, naming it)."""
    chosen = PAIRS[request.param]
    try:
        binaries(chosen)
        missing = ""
    except MissingBinary as exc:
        missing = str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)
    return chosen


@pytest.fixture
def control_plane(pair, control_planes) -> ControlPlane:
    return control_planes.get(pair)


@pytest.fixture
def start_real_cluster(pair, control_plane, tmp_path, request) -> Iterator[Callable[..., RealCluster]]:
    """`start_real_cluster(objects, **RealCluster kwargs)`; see the module docstring."""
    started: list[RealCluster] = []
    reports = request.node.__dict__.setdefault("e2e_clusters", [])  # log tails of a failed test
    scheduler = binaries(pair)[1]

    def start(objects=(), **kwargs) -> RealCluster:
        workdir = tmp_path / f"real{len(started)}"
        workdir.mkdir()
        cluster = RealCluster(workdir, control_plane, scheduler, **kwargs)
        started.append(cluster)
        reports.append(cluster)
        return cluster.start(objects)

    yield start
    forbidden = []
    for cluster in started:
        cluster.stop()
        forbidden += cluster.forbidden()
    if forbidden:
        pytest.fail("RBAC: forbidden in the logs of the processes running as "
                    "scheduling-extender/extended-scheduler:\n" + "\n".join(forbidden[:20]), pytrace=False)
