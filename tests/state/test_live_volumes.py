"""PersistentVolumes and claims followed live (list/watch from the API-server double):
every change a scheduling answer depends on shows in `/filter`'s answer, changes it does
not depend on are dropped before they touch the state, and the held volumes equal the
truth."""

from __future__ import annotations

import copy
import time

import orjson
import pytest
from live_truth import synced_live

from extender import metrics
from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.engine import Extender
from extender.plugins.volumenodeaffinity import ERR_REASON_NODE_CONFLICT, ERR_REASON_PV_NOT_EXIST
from extender.state.volumes import VOLUME_KINDS
from testing.apiserver import FakeApiServer
from tests.plugins.volume_objects import (
    ANNOTATION,
    KERNEL,
    annotation,
    kernel_node,
    pod,
    pv,
    pvc,
    requirement,
)

NODES = ["k54", "k61", "k70"]
VERSIONS = {"k54": "5.4.0", "k61": "6.1.0", "k70": "7.0.0"}


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        for name in NODES:
            server.create("nodes", kernel_node(name, VERSIONS[name]))
        server.create("persistentvolumes", pv("kernel-pv", claim=("default", "data"),
                                              ann=annotation([requirement(KERNEL, "SemverGt", "5.10.0")])))
        server.create("persistentvolumeclaims", pvc("data", volume="kernel-pv"))
        yield server


@pytest.fixture
def engine(api, tmp_path):
    with synced_live(api, tmp_path) as source:
        yield Extender(Config(inflight_wait=0, slim_answers=False), source, binder=None)  # the reasons are read


def answer(engine: Extender) -> tuple[list[str], dict[str, str]]:
    result = orjson.loads(engine.filter(ExtenderArgs(pod("app", "data"), None, NODES)))
    return result["NodeNames"], result["FailedAndUnresolvableNodes"]


def eventually(engine: Extender, feasible: list[str], timeout: float = 10.0) -> dict[str, str]:
    """The answer once the watch has delivered the change ("doesn't hang" bound)."""
    deadline = time.monotonic() + timeout
    while True:
        names, failed = answer(engine)
        if names == feasible or time.monotonic() > deadline:
            assert names == feasible, failed
            return failed
        time.sleep(0.02)


def with_annotation(obj: dict, text: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {})[ANNOTATION] = text
    return obj


def test_volume_and_claim_changes_reach_the_answer(api, engine):
    failed = eventually(engine, ["k61", "k70"])
    assert failed == {"k54": ERR_REASON_NODE_CONFLICT}

    # the storage admin tightens the volume's requirement
    tightened = with_annotation(api.get("persistentvolumes", "kernel-pv"),
                                annotation([requirement(KERNEL, "SemverGt", "6.5.0")]))
    api.update("persistentvolumes", tightened)
    eventually(engine, ["k70"])

    # the claim is rebound to another volume (a new claim of the same name)
    api.create("persistentvolumes", pv("plain-pv", claim=("default", "data")))
    api.delete("persistentvolumeclaims", "data", "default")
    eventually(engine, [])
    api.create("persistentvolumeclaims", pvc("data", volume="plain-pv"))
    eventually(engine, NODES)

    # its volume goes away: nothing can be verified, every node is rejected
    api.delete("persistentvolumes", "plain-pv")
    failed = eventually(engine, [])
    assert failed == dict.fromkeys(NODES, ERR_REASON_PV_NOT_EXIST)


def test_unbound_claim_follows_the_candidate_volumes(api, engine):
    api.create("persistentvolumeclaims", pvc("scratch"))  # WaitForFirstConsumer: no volume yet
    scratch = pod("app", "scratch")

    def feasible() -> list[str]:
        return orjson.loads(engine.filter(ExtenderArgs(scratch, None, NODES)))["NodeNames"]

    assert _wait(lambda: feasible() == NODES)  # no candidate with an annotation
    api.create("persistentvolumes", pv("pool-1", ann=annotation([requirement(KERNEL, "SemverGt", "6.5.0")])))
    assert _wait(lambda: feasible() == ["k70"])
    taken = api.get("persistentvolumes", "pool-1")
    taken["spec"]["claimRef"] = {"namespace": "default", "name": "someone-else"}
    taken["status"]["phase"] = "Bound"
    api.update("persistentvolumes", taken)
    assert _wait(lambda: feasible() == NODES)


def test_changes_no_answer_reads_are_dropped_and_the_state_equals_the_truth(api, engine):
    eventually(engine, ["k61", "k70"])
    dropped = metrics.WATCH_EVENTS_DROPPED_TOTAL.labels("PersistentVolume")._value.get()
    volume = api.get("persistentvolumes", "kernel-pv")
    volume["metadata"]["resourceVersion"] = "0"
    volume["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    api.update("persistentvolumes", volume)
    assert _wait(lambda: metrics.WATCH_EVENTS_DROPPED_TOTAL.labels("PersistentVolume")._value.get() > dropped)
    layer = engine.source.snapshot().volume_layer
    assert set(layer.volumes) == {o["metadata"]["name"] for o in api.objects("persistentvolumes")}
    assert {(c.namespace, c.name) for c in layer.claims["default"].values()} == {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in api.objects("persistentvolumeclaims")}
    assert engine.source.snapshot().counts()["persistentvolumes"] == 1
    assert set(VOLUME_KINDS) <= set(engine.source.reflectors)


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
