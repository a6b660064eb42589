"""The API-server double speaks the wire protocol the live source relies on."""

from __future__ import annotations

import http.client
import json
import threading
import time
from urllib.parse import urlsplit

import pytest

from testing.apiserver import ApiError, FakeApiServer, _events_after
from testing.harness import wait_for


@pytest.fixture
def api():
    with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


def request(api: FakeApiServer, method: str, path: str, body: dict | None = None,
            content_type: str = "application/json"):
    """One HTTP request; returns (status, decoded JSON body)."""
    u = urlsplit(api.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": content_type})
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read() or b"null")
    conn.close()
    return out


def watch_lines(api: FakeApiServer, path: str, until: int, timeout: float = 5.0) -> list[dict]:
    """Read `until` events from a watch stream (http.client de-chunks for us)."""
    u = urlsplit(api.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Transfer-Encoding") == "chunked"
    events = []
    while len(events) < until:
        line = resp.readline()
        if not line:
            break
        events.append(json.loads(line))
    conn.close()
    return events


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def pod(name: str, ns: str = "default", node_name: str = "") -> dict:
    spec = {"containers": [{"name": "c"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_list_shape_and_paging_over_one_snapshot(api):
    for i in range(5):
        api.create("nodes", node(f"n{i}"))
    status, page1 = request(api, "GET", "/api/v1/nodes?limit=2")
    assert status == 200
    assert page1["kind"] == "NodeList" and page1["apiVersion"] == "v1"
    assert [n["metadata"]["name"] for n in page1["items"]] == ["n0", "n1"]
    assert "kind" not in page1["items"][0]
    assert page1["metadata"]["remainingItemCount"] == 3
    rv = page1["metadata"]["resourceVersion"]
    api.create("nodes", node("n9"))  # after the first page: not part of this list
    names = [n["metadata"]["name"] for n in page1["items"]]
    token = page1["metadata"]["continue"]
    while token:
        status, page = request(api, "GET", f"/api/v1/nodes?limit=2&continue={token}")
        assert status == 200 and page["metadata"]["resourceVersion"] == rv
        names += [n["metadata"]["name"] for n in page["items"]]
        token = page["metadata"].get("continue")
    assert names == ["n0", "n1", "n2", "n3", "n4"]


def test_a_paged_selected_list_is_selected_once_over_one_snapshot(api):
    for i in range(6):
        api.create("pods", pod(f"p{i}", node_name="n1" if i % 2 else ""))
    path = "/api/v1/pods?fieldSelector=spec.nodeName%3D&limit=2"
    status, page = request(api, "GET", path)
    assert status == 200 and page["metadata"]["remainingItemCount"] == 1
    names = [p["metadata"]["name"] for p in page["items"]]
    api.create("pods", pod("p9"))  # unbound, after the first page: not part of this list
    while token := page["metadata"].get("continue"):
        status, page = request(api, "GET", f"{path}&continue={token}")
        assert status == 200
        names += [p["metadata"]["name"] for p in page["items"]]
    assert names == ["p0", "p2", "p4"]


def test_a_watch_from_a_resource_version_gets_exactly_the_newer_events_of_its_namespace(api):
    for i in range(5):
        api.create("pods", pod(f"a{i}", "ns1"))
        api.create("pods", pod(f"b{i}", "ns2"))
    _, listed = request(api, "GET", "/api/v1/pods")
    since = int(listed["metadata"]["resourceVersion"]) - 4  # the last two of each namespace
    events = _events_after(api._log["pods"], since, "ns1")
    assert [e.obj["metadata"]["name"] for e in events] == ["a3", "a4"]
    assert [e.obj["metadata"]["name"] for e in _events_after(api._log["pods"], since, "")] == \
        ["a3", "b3", "a4", "b4"]
    assert _events_after(api._log["pods"], since + 4, "") == []


def test_namespaced_and_apps_paths(api):
    api.create("pods", pod("a", "ns1"))
    api.create("pods", pod("b", "ns2"))
    api.create("replicasets", {"metadata": {"name": "rs", "namespace": "ns1"}, "spec": {}})
    _, all_pods = request(api, "GET", "/api/v1/pods")
    assert {p["metadata"]["name"] for p in all_pods["items"]} == {"a", "b"}
    _, ns1 = request(api, "GET", "/api/v1/namespaces/ns1/pods")
    assert [p["metadata"]["name"] for p in ns1["items"]] == ["a"]
    status, rs = request(api, "GET", "/apis/apps/v1/replicasets")
    assert status == 200 and rs["kind"] == "ReplicaSetList" and rs["apiVersion"] == "apps/v1"
    assert request(api, "GET", "/api/v1/replicasets")[0] == 404  # wrong group
    assert request(api, "GET", "/api/v1/namespaces/x/nodes")[0] == 404


def test_watch_streams_changes_from_a_resource_version(api):
    api.create("nodes", node("n1"))
    rv = api.resource_version
    api.update("nodes", node("n1", zone="a"))
    api.create("nodes", node("n2"))
    api.delete("nodes", "n1")
    events = watch_lines(api, f"/api/v1/nodes?watch=true&resourceVersion={rv}", until=3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "n1"),
        ("ADDED", "n2"),
        ("DELETED", "n1"),
    ]
    assert events[0]["object"]["kind"] == "Node"
    assert events[0]["object"]["metadata"]["labels"] == {"zone": "a"}
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > rv


def test_watch_without_rv_starts_with_added_for_everything(api):
    api.create("pods", pod("a"))
    events = watch_lines(api, "/api/v1/pods?watch=true", until=1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "a"


def test_bookmarks_report_progress(api):
    api.create("nodes", node("n1"))
    api.create("pods", pod("p"))  # moves the global RV past the node's
    rv = api.resource_version
    events = watch_lines(
        api, "/api/v1/nodes?watch=true&allowWatchBookmarks=true&resourceVersion=1001", until=1
    )
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["kind"] == "Node"
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) == rv


def test_watch_from_compacted_rv_gets_410_expired(api):
    api.create("nodes", node("n1"))
    old = api.resource_version
    api.create("nodes", node("n2"))
    api.compact()
    (event,) = watch_lines(api, f"/api/v1/nodes?watch=true&resourceVersion={old}", until=1)
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def test_watch_timeout_ends_the_stream(api):
    """The stream ends by itself (`watch_lines` returns at its end, or would wait for
    10 events that never come), after sending nothing."""
    events = watch_lines(api, "/api/v1/nodes?watch=true&timeoutSeconds=1", until=10, timeout=60.0)
    assert events == []


def test_binding(api):
    api.create("pods", pod("p", "ns"))
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    status, out = request(api, "POST", "/api/v1/namespaces/ns/pods/p/binding", body)
    assert status == 201 and out["status"] == "Success"
    assert api.get("pods", "p", "ns")["spec"]["nodeName"] == "n1"
    status, out = request(api, "POST", "/api/v1/namespaces/ns/pods/p/binding", body)
    assert status == 409 and out["reason"] == "Conflict" and "already assigned" in out["message"]
    status, out = request(api, "POST", "/api/v1/namespaces/ns/pods/missing/binding", body)
    assert status == 404 and out["reason"] == "NotFound"


def test_delete_and_python_errors(api):
    api.create("pods", pod("p"))
    status, gone = request(api, "DELETE", "/api/v1/namespaces/default/pods/p")
    assert status == 200 and gone["metadata"]["name"] == "p"
    assert api.get("pods", "p", "default") is None
    assert request(api, "DELETE", "/api/v1/namespaces/default/pods/p")[0] == 404
    with pytest.raises(ApiError) as e:
        api.update("pods", pod("nope"))
    assert e.value.code == 404
    api.create("pods", pod("q"))
    with pytest.raises(ApiError) as e:
        api.create("pods", pod("q"))
    assert e.value.code == 409
    assert api.terminate("default", "q")["metadata"]["deletionTimestamp"]


def test_injected_failures_and_delay(api):
    api.faults.fail_requests, api.faults.fail_match = 2, "/api/v1/nodes"
    assert request(api, "GET", "/api/v1/nodes")[0] == 500
    assert request(api, "GET", "/api/v1/pods")[0] == 200  # does not match
    assert request(api, "GET", "/api/v1/nodes")[0] == 500
    assert request(api, "GET", "/api/v1/nodes")[0] == 200
    api.faults.delay_seconds = 0.3
    start = time.monotonic()
    request(api, "GET", "/api/v1/nodes")
    assert time.monotonic() - start >= 0.3


def test_cut_event_leaves_half_a_line(api):
    api.create("nodes", node("n1"))
    rv = api.resource_version - 1
    api.faults.cut_events = 1
    u = urlsplit(api.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    conn.request("GET", f"/api/v1/nodes?watch=true&resourceVersion={rv}")
    resp = conn.getresponse()
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()


def test_injected_event_does_not_change_the_truth(api):
    rv = api.resource_version
    api.inject_event("pods", "DELETED", pod("ghost"))
    (event,) = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion={rv}", until=1)
    assert event["type"] == "DELETED" and event["object"]["metadata"]["name"] == "ghost"
    assert api.objects("pods") == []


def test_kubeconfig_works_with_the_kubernetes_client(api, tmp_path):
    from kubernetes import client, config

    api.create("nodes", node("n1", zone="z"))
    cfg = client.Configuration()
    config.load_kube_config(str(api.write_kubeconfig(tmp_path / "kc")), client_configuration=cfg)
    core = client.CoreV1Api(client.ApiClient(cfg))
    nodes = core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    assert nodes.items[0].metadata.labels == {"zone": "z"}


def test_kube_scheduler_kinds_are_served_empty(api):
    for path in ("/api/v1/namespaces", "/api/v1/persistentvolumes", "/api/v1/persistentvolumeclaims",
                 "/apis/storage.k8s.io/v1/storageclasses", "/apis/storage.k8s.io/v1/csinodes",
                 "/apis/storage.k8s.io/v1/csidrivers", "/apis/storage.k8s.io/v1/csistoragecapacities",
                 "/apis/policy/v1/poddisruptionbudgets"):
        status, body = request(api, "GET", path + "?limit=500&resourceVersion=0")
        assert status == 200 and body["items"] == [], path
    assert request(api, "GET", "/apis/events.k8s.io/v1")[0] == 404  # discovery: tolerated
    for path in ("/api/v1/namespaces/default/events", "/apis/events.k8s.io/v1/namespaces/default/events"):
        status, made = request(api, "POST", path, {"metadata": {"generateName": "p."}, "reason": "Scheduled"})
        assert status == 201 and made["metadata"]["name"].startswith("p.")
    assert [e["reason"] for e in api.objects("events")] == ["Scheduled"]
    assert len(api.objects("events.events.k8s.io")) == 1


def test_status_patch_merges_conditions_by_type(api):
    created = api.create("pods", pod("p"))
    created["status"] = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
    api.update("pods", created)
    patch = {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
             "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
             "nominatedNodeName": "n1"}
    path = "/api/v1/namespaces/default/pods/p/status"
    status, out = request(api, "PATCH", path, {"status": patch, "spec": {"nodeName": "ignored"}},
                          "application/strategic-merge-patch+json")
    assert status == 200
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodScheduled"]
    assert out["status"]["nominatedNodeName"] == "n1" and "nodeName" not in out["spec"]
    again = {"status": {"conditions": [{"type": "PodScheduled", "reason": "SchedulerError"}],
                        "nominatedNodeName": None}}
    out = request(api, "PATCH", path, again, "application/strategic-merge-patch+json")[1]
    assert out["status"]["conditions"][1] == {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}
    assert "nominatedNodeName" not in out["status"]
    apply = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
             "status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}}
    out = request(api, "PATCH", path + "?fieldManager=kube-scheduler&force=true", apply,
                  "application/apply-patch+yaml")[1]
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodScheduled", "DisruptionTarget"]
    assert request(api, "PATCH", path, [], "application/json-patch+json")[0] == 415


def test_field_selector_watch_turns_a_pod_leaving_the_selection_into_deleted(api):
    api.create("pods", pod("done"))
    api.create("pods", pod("running"))
    selector = "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed"
    _, listed = request(api, "GET", f"/api/v1/pods?{selector}")
    rv = listed["metadata"]["resourceVersion"]
    finished = api.get("pods", "done", "default")
    finished["status"] = {"phase": "Succeeded"}
    api.update("pods", finished)
    api.update("pods", {**api.get("pods", "running", "default"), "status": {"phase": "Running"}})
    events = watch_lines(api, f"/api/v1/pods?{selector}&watch=true&resourceVersion={rv}", until=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", "done"), ("MODIFIED", "running")]
    _, after = request(api, "GET", f"/api/v1/pods?{selector}")
    assert [p["metadata"]["name"] for p in after["items"]] == ["running"]
    assert request(api, "GET", "/api/v1/pods?fieldSelector=spec.hostIP%3Dx")[0] == 400


def test_delete_with_a_stale_uid_precondition_is_a_conflict(api):
    made = api.create("pods", pod("p"))
    stale = {"preconditions": {"uid": "not-" + made["metadata"]["uid"]}}
    assert request(api, "DELETE", "/api/v1/namespaces/default/pods/p", stale)[0] == 409
    fresh = {"preconditions": {"uid": made["metadata"]["uid"]}}
    assert request(api, "DELETE", "/api/v1/namespaces/default/pods/p", fresh)[0] == 200
    assert api.get("pods", "p", "default") is None


def test_leases_are_served_with_optimistic_concurrency(api):
    """Leader election: create the lease, then PUT with the resourceVersion read; a PUT
    carrying a stale one is a 409 Conflict, so two candidates never both win."""
    path = "/apis/coordination.k8s.io/v1/namespaces/scheduling-extender/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "extended-scheduler", "namespace": "scheduling-extender"},
             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    assert request(api, "GET", f"{path}/extended-scheduler")[0] == 404
    status, created = request(api, "POST", path, lease)
    assert status == 201
    read = created["metadata"]["resourceVersion"]
    first = {**created, "spec": {**created["spec"], "holderIdentity": "b"}}
    status, updated = request(api, "PUT", f"{path}/extended-scheduler", first)
    assert status == 200 and updated["spec"]["holderIdentity"] == "b"
    second = {**created, "spec": {**created["spec"], "holderIdentity": "c"}}
    assert second["metadata"]["resourceVersion"] == read
    status, body = request(api, "PUT", f"{path}/extended-scheduler", second)
    assert status == 409 and body["reason"] == "Conflict"
    assert api.get("leases", "extended-scheduler", "scheduling-extender")["spec"]["holderIdentity"] == "b"


BINDING = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
           "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}


def test_restore_goes_back_to_the_checkpoint_and_a_newer_resource_version_is_too_large(api):
    """An etcd restore: the truth and the resourceVersion go back; a watch or a list
    from a resourceVersion handed out before is answered 504 Too large resource version
    (after the watch cache's wait), as client-go's reflector then relists."""
    api.journal = []
    api.too_large_wait = 0.2
    api.create("pods", pod("p"))
    backup = api.checkpoint()
    api.bind("default", "p", "n1")
    api.create("pods", pod("q"))
    newer = api.resource_version
    assert api.restore(backup) == 2  # p unbound again, q gone
    assert api.resource_version == backup.rv < newer
    assert api.get("pods", "p", "default")["spec"].get("nodeName") is None
    assert api.get("pods", "q", "default") is None
    (event,) = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion={newer}", until=1)
    status = event["object"]
    assert event["type"] == "ERROR" and status["code"] == 504 and status["reason"] == "Timeout"
    assert status["details"]["causes"] == [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    code, body = request(api, "GET", f"/api/v1/pods?resourceVersion={newer}")
    assert code == 504 and "Too large resource version" in body["message"]
    assert request(api, "GET", "/api/v1/pods")[0] == 200  # a consistent list: the restored truth
    marker = next(c for c in api.journal if c.type == "RESTORED")
    restored = [c for c in api.journal if c.restore and c.resource == "pods"]
    assert marker.epoch == 1 and {(c.type, c.obj["metadata"]["name"]) for c in restored} == {
        ("MODIFIED", "p"), ("DELETED", "q")}
    api.create("pods", pod("r"))  # the next write continues from the restored resourceVersion
    assert api.resource_version == backup.rv + 1 and api.journal[-1].epoch == 1


def test_a_watch_ahead_of_a_restore_is_accepted_once_writes_reach_it(api):
    """The watch cache waits for a resourceVersion it has not reached: writes after a
    restore (kube-scheduler's own event posts) can reach a watch's within the wait, and
    the watch then goes on without a relist. The double records which watches it
    accepted since the restore; one answered Too large is not one of them."""
    api.too_large_wait = 60.0  # ends as soon as the write lands: a bound no load reaches
    backup = api.checkpoint()
    api.create("pods", pod("p"))
    ahead = api.resource_version
    api.restore(backup)
    assert not api.watching_since_restore("python", "pods")
    threading.Timer(0.3, lambda: api.create("events", {"metadata": {"name": "e", "namespace": "default"}})).start()
    threading.Timer(0.6, lambda: api.create("pods", pod("q"))).start()
    (event,) = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion={ahead}", until=1, timeout=60.0)
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "q"
    assert api.watching_since_restore("Python-urllib", "pods") is False  # another agent
    assert api.watching_since_restore("", "pods") and not api.watching_since_restore("", "nodes")
    api.restore(backup)  # a new epoch: nothing accepted in it yet
    assert not api.watching_since_restore("", "pods")
    api.too_large_wait = 0.2
    (event,) = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion={ahead + 5}", until=1)
    assert event["type"] == "ERROR" and event["object"]["code"] == 504
    assert not api.watching_since_restore("", "pods")


def test_a_slow_write_lands_late_or_is_lost(api):
    """A write delayed past its client's patience is not applied (the request's context
    is cancelled), unless `late_writes` (etcd had it already); one delayed past the
    server's own `request_timeout` is answered 504."""
    api.create("pods", pod("p"))
    api.faults.delay_for = lambda line: 0.6 if line.endswith("/binding") else 0.0
    u = urlsplit(api.url)

    def impatient_bind(name: str) -> None:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=0.2)
        conn.request("POST", f"/api/v1/namespaces/default/pods/{name}/binding", body=json.dumps(BINDING))
        with pytest.raises(TimeoutError):
            conn.getresponse()
        conn.close()

    impatient_bind("p")
    # the server has decided and done (the write's delay over, its client found gone): its
    # count, not a clock
    assert wait_for(lambda: api.faults.fired["aborted_writes"] == 1, timeout=30)
    assert api.get("pods", "p", "default")["spec"].get("nodeName") is None
    api.faults.late_writes = True
    impatient_bind("p")
    assert wait_for(lambda: api.faults.fired["late_writes"] == 1, timeout=30)
    assert api.get("pods", "p", "default")["spec"].get("nodeName") == "n1"
    api.create("pods", pod("q"))
    api.faults.late_writes, api.faults.request_timeout = False, 0.3
    code, body = request(api, "POST", "/api/v1/namespaces/default/pods/q/binding", {**BINDING, "metadata": {"name": "q"}})
    assert code == 504 and body["reason"] == "Timeout"
    time.sleep(0.5)
    assert api.get("pods", "q", "default")["spec"].get("nodeName") is None  # dropped



def test_the_requests_since_a_mark_are_found_after_the_record_is_full(api):
    """The record keeps the newest requests only; "since now" is a count, so the requests
    made after a mark are found even once the record is full (its length then stops
    moving, and a slice after the old length found nothing)."""
    from collections import deque

    api.agents = deque(maxlen=3)
    for _ in range(4):
        assert request(api, "GET", "/api/v1/nodes")[0] == 200
    mark = api.agents_total
    assert len(api.agents) == 3 and mark == 4
    assert request(api, "GET", "/api/v1/pods?limit=500")[0] == 200
    assert [line for _, line in api.agents_since(mark)] == ["GET /api/v1/pods?limit=500"]
    assert list(api.agents)[len(api.agents):] == []  # what the old position-based slice saw
    assert len(api.agents_since(0)) == 3  # only what is kept
