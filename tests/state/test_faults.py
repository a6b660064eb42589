"""The live state under the faults of issue #32, against the API-server double: each
snapshot names the resourceVersions it matches, a restore's 504 "Too large resource
version" relists, a bind or a pod the watch does not show in time makes every kind
suspect until probed, and a state that cannot recover fails liveness.
(tests/e2e/test_faults.py runs the same faults through the real kube-scheduler.)"""

from __future__ import annotations

import orjson
import pytest
from conftest import EXAMPLES
from live_truth import synced_live, wait_converged

from extender import metrics
from extender.config import Config
from extender.engine.extender import STATE_VERSION_HEADER
from extender.server.app import create_app
from extender.state import load_objects
from extender.state.store import KINDS, Store
from testing.apiserver import FakeApiServer
from testing.client import Client
from testing.harness import wait_for

OPENAPI_CLIENT = "OpenAPI-Generator"  # the User-Agent of the extender's kubernetes client


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.load(load_objects(EXAMPLES / "cluster.yaml"))
        yield server



def counter(metric, *labels) -> float:
    return metric.labels(*labels)._value.get()


def test_each_snapshot_names_the_resource_versions_its_objects_match(api, tmp_path):
    with synced_live(api, tmp_path) as live:
        node = api.objects("nodes")[0]
        node["metadata"].setdefault("labels", {})["rack"] = "r9"
        rv = int(api.update("nodes", node)["metadata"]["resourceVersion"])
        assert wait_for(lambda: int(live.snapshot().resource_versions.get("Node") or 0) >= rv, timeout=20)
        snap = live.snapshot()
        assert set(snap.resource_versions) == set(KINDS)
        assert snap.nodes.by_name[node["metadata"]["name"]].labels["rack"] == "r9"
        assert snap.state_version == ",".join(f"{k}={v}" for k, v in snap.resource_versions.items())
        # the verbs' answers carry it
        client = Client(create_app(Config(reload_interval=0), source=live))
        body = {"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}},
                "NodeNames": [node["metadata"]["name"]]}
        answer = client.post("/filter", data=orjson.dumps(body))
        assert answer.status_code == 200
        assert answer.headers[STATE_VERSION_HEADER.lower()] == live.snapshot().state_version
        assert STATE_VERSION_HEADER.lower() not in client.get("/readyz").headers
        client.close()


def test_a_kind_being_relisted_has_no_version():
    store = Store()
    store.upsert("Node", {"metadata": {"name": "n1"}}, rv="7")
    store.publish()
    seen = []

    def pages():
        yield {"metadata": {"name": "n1", "labels": {"a": "b"}}}
        seen.append(store.snapshot().resource_versions.get("Node"))  # mid-replacement
        yield {"metadata": {"name": "n2"}}

    store.replace("Node", pages())
    store.advance("Node", "12")
    assert seen == [""]
    assert store.snapshot().resource_versions["Node"] == "12"


def test_a_restore_answered_too_large_relists_every_kind(api, tmp_path):
    """After an etcd restore the API is behind our resourceVersion and answers 504 Too
    large resource version: each kind relists (client-go does the same) instead of
    retrying the same watch for ever, and the state is the restored truth."""
    api.too_large_wait = 0.2
    with synced_live(api, tmp_path) as live:
        backup = api.checkpoint()
        pod = {"metadata": {"name": "late", "namespace": "shop"}, "spec": {"containers": [{"name": "c"}]}}
        api.create("pods", pod)
        for i in range(5):
            api.create("nodes", {"metadata": {"name": f"after-backup-{i}"}})
        wait_converged(live, api)
        too_large = counter(metrics.WATCH_ERRORS_TOTAL, "Pod", "too large")
        api.restore(backup)
        wait_converged(live, api)  # the pod and nodes written after the backup are gone again
        assert live.snapshot().pod_layer.get("shop", "late") is None
        assert counter(metrics.WATCH_ERRORS_TOTAL, "Pod", "too large") > too_large
        assert wait_for(lambda: live.readiness()[0], timeout=20)


def test_a_bind_the_watch_does_not_show_makes_every_kind_suspect_until_probed(api, tmp_path):
    """The API bound a pod for us; the watch streams are frozen and never show it. Past
    `bind_watch_timeout` every kind is unconfirmed (verdicts that read one are refused),
    each is probed at once, the silent streams are resumed, and the state is confirmed
    current again, with the bind seen."""
    with synced_live(api, tmp_path, bind_watch_timeout=0.3) as live:
        api.create("pods", {"metadata": {"name": "w1", "namespace": "shop", "labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "c"}]}})
        assert wait_for(lambda: live.snapshot().pod_layer.get("shop", "w1") is not None, timeout=20)
        node = api.objects("nodes")[0]["metadata"]["name"]
        api.freeze_watches(agent=OPENAPI_CLIENT)
        pod = live.snapshot().pod_layer.get("shop", "w1")
        live.store.assume(pod, node)
        api.bind("shop", "w1", node)
        live.store.bound("shop", "w1")
        assert live.unconfirmed(["Node"]) is None  # within the timeout: nothing doubted
        assert wait_for(lambda: live.unconfirmed(["Node"]) is not None, timeout=20), "never suspected"
        reason, message = live.unconfirmed(["Pod"]) or ("", "")
        assert reason == "unconfirmed" and "shop/w1" in message
        assert wait_for(lambda: live.unconfirmed(KINDS) is None, timeout=20), "never confirmed again"
        assert live.store.assumed() == {}  # the resumed stream showed the bind
        assert counter(metrics.WATCH_ERRORS_TOTAL, "Pod", "silent") >= 1


def test_a_pod_the_scheduler_has_and_the_watch_does_not_makes_it_suspect(api, tmp_path):
    """kube-scheduler's informer already holds the pod at its resourceVersion: a Pod
    watch that cannot reach it within the timeout is stuck."""
    with synced_live(api, tmp_path, bind_watch_timeout=0.2) as live:
        api.freeze_watches(agent=OPENAPI_CLIENT)
        created = api.create("pods", {"metadata": {"name": "new", "namespace": "shop"},
                                      "spec": {"containers": [{"name": "c"}]}})
        rv = created["metadata"]["resourceVersion"]
        assert live.behind("Pod", rv)
        assert not live.await_version("Pod", rv, "pod shop/new")
        assert live.unconfirmed(["Node"]) is not None
        assert wait_for(lambda: live.unconfirmed(KINDS) is None, timeout=20)
        assert not live.behind("Pod", rv) and live.snapshot().pod_layer.get("shop", "new") is not None


def test_liveness_fails_once_the_state_cannot_recover(api, tmp_path):
    """Unready (here: the Pod list always fails) longer than `max_unready`: /healthz
    fails too, so the kubelet restarts the process; before that only /readyz does."""
    api.faults.fail_requests, api.faults.fail_match = 10**9, "GET /api/v1/pods?"
    from live_truth import start_live

    live = start_live(api, tmp_path, max_unready=60.0)
    try:
        client = Client(create_app(Config(reload_interval=0), source=live))
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200  # unready for less than 60 s
        live._ready_at -= 61  # as if 61 s had passed
        answer = client.get("/healthz")
        assert answer.status_code == 503 and b"--max-unready 60" in answer.data
        client.close()
    finally:
        live.stop()


TOO_LARGE = {"code": 504, "reason": "Timeout", "status": "Failure",
             "message": "Timeout: Too large resource version: 180, current: 120",
             "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]}}


@pytest.mark.parametrize("status, meaning", [
    (TOO_LARGE, True),
    ({"code": 504, "message": "Timeout: Too large resource version: 9, current: 8"}, True),  # before 1.17
    ({"code": 504, "reason": "Timeout", "message": "context deadline exceeded"}, False),
    ({"code": 410, "reason": "Expired"}, False),
])
def test_too_large_is_read_as_client_go_reads_it(status, meaning):
    from extender.state.kubeapi import too_large

    assert too_large(status) is meaning


def test_a_probe_answered_too_large_relists():
    """A probe (or a watch) ERROR event 504 Too large: the kind relists, not retried."""
    from extender.state.reflector import Reflector
    from extender.state.watchdog import Watchdog

    class Answer:
        def stream(self, amt=None, decode_content=False):
            yield orjson.dumps({"type": "ERROR", "object": TOO_LARGE}) + b"\n"

        def close(self) -> None:
            pass

    reflector = Reflector("Node", lambda **kw: Answer(), Store())
    reflector.resource_version = "180"
    assert Watchdog(reflector).probe() == "relist" and reflector._relist
