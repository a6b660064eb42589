"""Shared fixtures: the bundled example cluster and engines built over it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from extender import metrics
from extender.config import Config
from extender.engine import Extender
from extender.request import deadline
from extender.state import ClusterSnapshot, StaticSource, load_objects
from extender.state.loader import parse_documents

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def pytest_configure() -> None:
    """The metrics exist in every test process, as `extender serve` installs them at
    start-up (before any test module is collected: some bind collectors at import)."""
    metrics.install()


def example_pod(name: str) -> dict:
    (pod,) = parse_documents((EXAMPLES / "pods" / f"{name}.yaml").read_bytes())
    return pod


@pytest.fixture(scope="session")
def example_objects() -> list[dict]:
    return load_objects(EXAMPLES / "cluster.yaml")


@pytest.fixture(scope="session")
def example_snapshot(example_objects) -> ClusterSnapshot:
    return ClusterSnapshot.from_objects(example_objects)


@pytest.fixture(scope="session")
def example_extender(example_snapshot) -> Extender:
    """Full answers (`--slim-answers false`): every failing node with its reason and every
    host's score, which is what the tests using it read. The slim answers of the default
    are checked against these in tests/scheduler/test_slim_answers.py."""
    return Extender(Config(slim_answers=False), StaticSource(example_snapshot))


def make_extender(objects: list[dict], config: Config | None = None, **kw) -> Extender:
    return Extender(config or Config(), StaticSource(ClusterSnapshot.from_objects(objects)), **kw)


class DeadlineClock:
    """The request deadline's clock (`extender.request.deadline.time`): the real one,
    except inside `stopped()`, where it stands still. Work a test expects to finish
    within a short deadline runs there, so a busy machine cannot run it out of time
    (a wait for a lane's slot still times out, in real time); work that should run out
    of time runs outside, where a busy machine only makes it later."""

    def __init__(self) -> None:
        self.at: float | None = None

    def monotonic(self) -> float:
        return time.monotonic() if self.at is None else self.at

    @contextmanager
    def stopped(self) -> Iterator[None]:
        self.at = self.monotonic()
        try:
            yield
        finally:
            self.at = None


@pytest.fixture
def deadline_clock(monkeypatch) -> DeadlineClock:
    clock = DeadlineClock()
    monkeypatch.setattr(deadline, "time", clock)
    return clock
