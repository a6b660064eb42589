"""The bind and preempt verbs and the in-flight accounting, in process (tests/e2e drive
the same code through a real server and the real kube-scheduler).

Wire formats follow kube-scheduler's extender/v1 types: ExtenderBindingArgs
{PodName, PodNamespace, PodUID, Node} -> ExtenderBindingResult {Error};
ExtenderPreemptionArgs {Pod, NodeNameToVictims | NodeNameToMetaVictims} ->
ExtenderPreemptionResult {NodeNameToMetaVictims: {node: {Pods: [{UID}], NumPDBViolations}}}.
"""

from __future__ import annotations

import threading
import time

import orjson
import pytest

from extender import metrics
from extender.api.wire import ExtenderArgs
from extender.config import Config
from extender.engine import Extender
from extender.engine.binding import ERR_NO_API, BindError, BindingArgs, binding_body
from extender.metrics import read
from extender.server.app import create_app
from extender.state import ClusterSource
from extender.state.store import Store
from testing.client import Client

ZONE = "topology.kubernetes.io/zone"
WEB = {"app": "web"}
SPREAD = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": WEB}}]


class StoreSource(ClusterSource):
    """A store-backed source without feeds: what FileSource/LiveSource are to the engine."""

    def __init__(self, objects: list[dict]) -> None:
        self.store = Store()
        self.store.load(objects)
        self.store.publish()

    def snapshot(self):
        return self.store.snapshot()

    def ready(self) -> bool:
        return True


def node(name: str, zone: str, taints=()) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {ZONE: zone}},
            "spec": {"taints": list(taints)}}


def pod(name: str, namespace: str = "default", labels=WEB, node_name: str = "", uid: str = "",
        spread=SPREAD) -> dict:
    meta = {"name": name, "namespace": namespace, "labels": dict(labels), "uid": uid or f"uid-{name}"}
    spec = {"containers": [{"name": "c", "image": "x"}], "topologySpreadConstraints": list(spread)}
    if node_name:
        spec["nodeName"] = node_name
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


class Recorder:
    """A binder that records calls, sees the engine's state during the call, or fails."""

    def __init__(self, engine_box: list, fail: str = "") -> None:
        self.engine_box = engine_box
        self.fail = fail
        self.calls: list[tuple] = []
        self.timeouts: list[float] = []
        self.seen_during_call: list[str] = []

    def __call__(self, namespace, name, uid, node_name, timeout):
        self.calls.append((namespace, name, uid, node_name))
        self.timeouts.append(timeout)
        seen = self.engine_box[0].source.snapshot().pod_layer.get(namespace, name)
        self.seen_during_call.append(seen.node_name if seen is not None else "")
        if self.fail:
            raise BindError(self.fail)


def engine_with(objects, fail: str = "", wait: float = 5.0) -> tuple[Extender, Recorder]:
    box: list = []
    recorder = Recorder(box, fail)
    engine = Extender(Config(inflight_wait=wait), StoreSource(objects), binder=recorder)
    box.append(engine)
    return engine, recorder


def names(engine: Extender, the_pod: dict, candidates: list[str]) -> list[str]:
    return orjson.loads(engine.filter(ExtenderArgs(the_pod, None, candidates)))["NodeNames"]


NODES = [node("a1", "a"), node("b1", "b")]


# --- bind -----------------------------------------------------------------------------


def test_bind_assumes_the_pod_before_the_api_call_and_counts_it_for_the_next_pod():
    engine, recorder = engine_with(NODES + [pod("w0", node_name="b1")])
    assert names(engine, pod("w1"), ["a1", "b1"]) == ["a1"]  # zone a has 0, b has 1
    assert orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1"))) == {"Error": ""}
    assert recorder.calls == [("default", "w1", "uid-w1", "a1")]
    assert recorder.seen_during_call == ["a1"]  # assumed before the API call
    # a: 1, b: 1 -> either zone; without the assumption zone b would be rejected
    assert names(engine, pod("w2"), ["a1", "b1"]) == ["a1", "b1"]


def test_bind_api_failure_forgets_the_assumption_and_answers_error():
    engine, recorder = engine_with(NODES + [pod("w0", node_name="b1")], fail="409 Conflict: already bound")
    names(engine, pod("w1"), ["a1", "b1"])
    result = orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1")))
    assert result == {"Error": "409 Conflict: already bound"}
    assert recorder.seen_during_call == ["a1"]
    assert engine.source.snapshot().pod_layer.get("default", "w1") is None  # never watched: gone
    assert engine.inflight.counts() == {"pending": 0, "assumed": 0}
    assert names(engine, pod("w2"), ["a1", "b1"]) == ["a1"]  # w1 no longer counted


def test_bind_without_api_access_answers_error():
    engine = Extender(Config(), StoreSource(NODES), binder=None)
    names(engine, pod("w1"), ["a1", "b1"])
    assert orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1"))) == {"Error": ERR_NO_API}
    assert engine.inflight.counts()["pending"] == 0


def test_binding_body_is_a_v1_binding_with_the_uid():
    assert binding_body("ns", "p", "u-1", "n1") == {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}


# --- in-flight accounting ----------------------------------------------------------------


def filter_in_thread(engine, the_pod, candidates):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=names(engine, the_pod, candidates)))
    thread.start()
    return thread, out


def test_the_next_pod_waits_for_the_pending_bind_and_counts_it():
    engine, _ = engine_with(NODES + [pod("w0", node_name="b1")], wait=30.0)
    assert names(engine, pod("w1"), ["a1", "b1"]) == ["a1"]  # w1 pending from here
    thread, out = filter_in_thread(engine, pod("w2"), ["a1", "b1"])
    thread.join(timeout=0.3)
    assert thread.is_alive(), "w2 was answered while w1's bind was still due"
    orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1")))
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert out["result"] == ["a1", "b1"]


def test_waiters_are_released_only_once_the_bound_pod_is_in_the_state():
    """The store assumption comes first: a pod released earlier could read a snapshot
    without the bound pod (found by the former kube-scheduler simulator: 1 placement in 20,000 over maxSkew)."""
    engine, _ = engine_with(NODES, wait=30.0)
    names(engine, pod("w1"), ["a1", "b1"])
    store = engine.source.store
    seen = []
    original = store.assume

    def assume(*args, **kwargs):
        seen.append(engine.inflight.counts()["pending"])  # still holding the waiters?
        return original(*args, **kwargs)

    store.assume = assume
    orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1")))
    assert seen == [1]
    assert engine.inflight.counts() == {"pending": 0, "assumed": 1}


def test_a_bind_later_than_the_wait_is_an_error_then_counted():
    """kube-scheduler counts w1 however long its PreBind takes: w2's filter never
    answers as if w1 did not exist. Past the wait it is an Error (the scheduler retries
    w2), w1 stays pending, and once w1's bind arrives w2 is answered with it counted."""
    engine, _ = engine_with(NODES + [pod("w0", node_name="b1")], wait=0.2)
    assert names(engine, pod("w1"), ["a1", "b1"]) == ["a1"]
    code, result = post(engine, "filter", {"Pod": pod("w2"), "NodeNames": ["a1", "b1"]})
    assert code == 200 and result["NodeNames"] is None
    assert "not bound yet" in result["Error"] and "default/w1" in result["Error"]
    assert engine.inflight.counts()["pending"] == 1  # w1: not given up on
    orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1")))
    assert names(engine, pod("w2"), ["a1", "b1"]) == ["a1", "b1"]  # a 1, b 1: counted


def test_a_pending_pod_is_given_up_well_past_the_schedulers_timeouts():
    from extender.engine.inflight import GIVE_UP

    engine, _ = engine_with(NODES, wait=0.2)
    skipped = [0.0]
    engine.inflight.clock = lambda: time.monotonic() + skipped[0]
    names(engine, pod("w1"), ["a1", "b1"])
    skipped[0] = GIVE_UP
    thread, out = filter_in_thread(engine, pod("w2"), ["a1", "b1"])
    thread.join(timeout=5)
    assert out["result"] == ["a1", "b1"]  # w1 no longer counted, nor waited for
    orjson.loads(engine.bind(BindingArgs("w2", "default", "uid-w2", "a1")))
    names(engine, pod("w1"), ["a1", "b1"])  # filtered again: given up for good
    assert engine.inflight.counts()["pending"] == 0


def test_other_namespaces_and_the_pod_itself_never_wait():
    engine, _ = engine_with(NODES, wait=30.0)
    names(engine, pod("w1"), ["a1", "b1"])
    for the_pod in (pod("w1"), pod("x1", namespace="other")):  # retry of w1; another namespace
        thread, out = filter_in_thread(engine, the_pod, ["a1", "b1"])
        thread.join(timeout=5)
        assert not thread.is_alive()
        assert out["result"] == ["a1", "b1"]


def test_a_pod_no_node_fits_is_not_pending():
    engine, _ = engine_with([node("a1", "a", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])])
    assert names(engine, pod("w1"), ["a1"]) == []
    assert engine.inflight.counts()["pending"] == 0


# --- preempt -----------------------------------------------------------------------------

TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}


def preempt_engine():
    objects = [node("t1", "a", taints=[TAINT]), node("u1", "b"), node("u2", "b"),
               pod("v1", labels={"app": "filler"}, node_name="t1", uid="uid-v1", spread=()),
               pod("v2", labels={"app": "filler"}, node_name="u1", uid="uid-v2", spread=()),
               pod("v3", labels={"app": "filler"}, node_name="u2", uid="uid-v3", spread=())]
    return Extender(Config(), StoreSource(objects), binder=None)


def post(engine, verb: str, body) -> tuple[int, object]:
    client = Client(create_app(Config(), engine.source, engine))
    response = client.post(f"/scheduler/{verb}", data=orjson.dumps(body), content_type="application/json")
    return response.status_code, orjson.loads(response.data)


def test_preempt_meta_victims_drops_the_tainted_node_and_keeps_the_others_victims():
    engine = preempt_engine()
    args = {"Pod": pod("p", spread=()), "NodeNameToMetaVictims": {
        "t1": {"Pods": [{"UID": "uid-v1"}], "NumPDBViolations": 0},
        "u1": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 1},
        "ghost": {"Pods": [{"UID": "uid-x"}], "NumPDBViolations": 0}}}
    code, result = post(engine, "preempt", args)
    assert code == 200
    assert result == {"NodeNameToMetaVictims": {"u1": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 1}}}


def test_preempt_full_victims_are_answered_as_meta_victims():
    engine = preempt_engine()
    victims = lambda name: {"Pods": [pod(name, labels={"app": "filler"}, uid=f"uid-{name}")],  # noqa: E731
                            "NumPDBViolations": 0}
    args = {"Pod": pod("p", spread=()), "NodeNameToVictims": {"t1": victims("v1"), "u2": victims("v3")}}
    code, result = post(engine, "preempt", args)
    assert code == 200
    assert result == {"NodeNameToMetaVictims": {"u2": {"Pods": [{"UID": "uid-v3"}], "NumPDBViolations": 0}}}


def test_preempt_recomputes_spread_without_each_nodes_own_victims():
    """Web pods: zone a 2 (both on a1, both victims), zone b 1 (on b2), zone c 0.
    a1 without its victims: a 0+1 vs min 0 -> kept (with them it would be 2+1-0).
    b1's victim is a filler: b stays 1, +1 vs min 0 = 2 > maxSkew -> dropped."""
    objects = [node("a1", "a"), node("b1", "b"), node("b2", "b"), node("c1", "c"),
               pod("w-a1", node_name="a1", uid="uid-wa1", spread=()),
               pod("w-a2", node_name="a1", uid="uid-wa2", spread=()),
               pod("f-b1", labels={"app": "filler"}, node_name="b1", uid="uid-fb1", spread=()),
               pod("w-b2", node_name="b2", uid="uid-wb2", spread=())]
    engine = Extender(Config(), StoreSource(objects), binder=None)
    assert names(engine, pod("p"), ["a1", "b1"]) == []  # with every pod still there
    args = {"Pod": pod("p"), "NodeNameToMetaVictims": {
        "a1": {"Pods": [{"UID": "uid-wa1"}, {"UID": "uid-wa2"}], "NumPDBViolations": 0},
        "b1": {"Pods": [{"UID": "uid-fb1"}], "NumPDBViolations": 0}}}
    code, result = post(engine, "preempt", args)
    assert code == 200
    assert result == {"NodeNameToMetaVictims": {
        "a1": {"Pods": [{"UID": "uid-wa1"}, {"UID": "uid-wa2"}], "NumPDBViolations": 0}}}


@pytest.mark.parametrize("verb, body, message", [
    ("preempt", {"NodeNameToMetaVictims": {}}, "Pod"),
    ("preempt", {"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}, "UID"),
    ("preempt", [1], "object"),
    ("bind", {"PodName": "p"}, "Node"),
    ("bind", {"PodName": 3, "Node": "n"}, "PodName"),
])
def test_bad_arguments_are_a_400_naming_the_field(verb, body, message):
    code, result = post(preempt_engine(), verb, body)
    assert code == 400
    assert message in result["error"]


def test_inflight_accounting_is_off_without_api_access():
    """File mode: nothing ever shows a pending pod bound, so the next pod of the
    namespace must not wait `--inflight-wait` for it."""
    engine = Extender(Config(inflight_wait=1.0), StoreSource(NODES), binder=None)
    assert not engine.inflight.enabled
    names(engine, pod("w1"), ["a1", "b1"])
    assert engine.inflight.counts()["pending"] == 0
    engine, _ = engine_with(NODES)
    assert engine.inflight.enabled and engine.inflight.wait == 5.0  # engine_with binds


# --- bind within kube-scheduler's httpTimeout ------------------------------------------


@pytest.mark.parametrize("deadline_s, waits", [(3.0, 1.0), (1.5, 0.5)])
def test_bind_waits_for_the_api_a_second_at_most_and_only_the_time_left(deadline_s, waits, deadline_clock):
    """The request waited 1 s for a thread; the API never answers by itself: the answer
    goes out after a second, or earlier when the request's deadline comes first
    (kube-scheduler's httpTimeout is further), and the call goes on. The deadline's
    clock stands still meanwhile: what is left is exact, however busy the machine."""
    from extender.request import deadline

    engine, recorder = engine_with(NODES)
    engine.config = Config(inflight_wait=5.0, request_deadline=deadline_s)
    released, waited = threading.Event(), []
    engine.bindings.post = lambda *args: released.wait()  # the API never answers by itself
    engine.bindings._pool.submit = _recording_timeout(engine.bindings._pool.submit, waited)
    with deadline_clock.stopped(), deadline.arrived(deadline_clock.monotonic() - 1.0):
        assert orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1"))) == {"Error": ""}
    assert not released.is_set()  # answered while the call was still out
    assert waited[0] == pytest.approx(waits)
    released.set()
    engine.bindings.close()


def _recording_timeout(submit, waited: list):
    """`submit` whose futures record the timeout their `result` is asked with."""
    def wrapped(*args):
        future = submit(*args)
        result = future.result

        def recorded(timeout=None):
            waited.append(timeout)
            return result(timeout)
        future.result = recorded
        return future
    return wrapped


def test_bind_past_its_deadline_answers_error_without_calling_the_api():
    from extender.request import deadline

    engine, recorder = engine_with(NODES + [pod("w1")])
    names(engine, pod("w1"), ["a1", "b1"])
    with deadline.arrived(time.monotonic() - 10.0):
        result = orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1")))
    assert "past its deadline" in result["Error"]
    assert recorder.calls == []
    assert engine.inflight.counts() == {"pending": 0, "assumed": 0}


@pytest.mark.parametrize("binder_kind", ["generic", "lean"])
def test_a_binding_slower_than_the_deadline_is_answered_in_time_and_lands(tmp_path, binder_kind):
    """The API answers the binding after 5 s, past the request's deadline: kube-scheduler
    gets its answer in time (success: the outcome is unknown, which is not a failure),
    the pod stays assumed, and the binding lands, as kube-scheduler's own binder would."""
    from extender.engine.binding import ApiBinder, LeanBinder
    from extender.state.live import LiveSource
    from testing.apiserver import FakeApiServer

    with FakeApiServer() as api:
        api.create("pods", pod("w1"))
        source = LiveSource.connect(str(api.write_kubeconfig(tmp_path / "kubeconfig")), False)
        engine = Extender(Config(request_deadline=0.5), StoreSource(NODES + [pod("w1")]),
                          binder={"generic": ApiBinder, "lean": LeanBinder}[binder_kind](source.api_client))
        api.faults.delay_seconds, api.faults.delay_match = 5.0, "/binding"
        assert orjson.loads(engine.bind(BindingArgs("w1", "default", "", "a1"))) == {"Error": ""}
        assert not api.get("pods", "w1", "default")["spec"].get("nodeName")  # answered before the API did
        assert engine.inflight.counts()["assumed"] == 1
        assert engine.source.snapshot().pod_layer.get("default", "w1").node_name == "a1"
        deadline = time.monotonic() + 30
        while (api.get("pods", "w1", "default")["spec"].get("nodeName") != "a1"
               or engine.source.store.assumptions.get(("default", "w1")).bound_at is None):
            assert time.monotonic() < deadline, "the binding never landed"
            time.sleep(0.02)
        engine.bindings.close()
        engine.binder.close()


@pytest.mark.parametrize("binder_kind", ["generic", "lean"])
def test_a_binding_the_api_timed_out_and_dropped_is_posted_again(tmp_path, binder_kind):
    """The API answers the first binding 504 at its own request timeout and drops it:
    the outcome is unknown, a GET finds the pod unbound, the binding is posted again
    and lands, and the pod counted on its node throughout."""
    from extender.engine.binding import ApiBinder, LeanBinder
    from extender.state.live import LiveSource
    from testing.apiserver import FakeApiServer

    with FakeApiServer() as api:
        api.create("pods", pod("w1"))
        source = LiveSource.connect(str(api.write_kubeconfig(tmp_path / "kubeconfig")), False)
        engine = Extender(Config(request_deadline=3.0), StoreSource(NODES + [pod("w1")]),
                          binder={"generic": ApiBinder, "lean": LeanBinder}[binder_kind](source.api_client))
        slow = [1.0]  # the first binding write only
        api.faults.delay_for = lambda line: slow.pop() if slow and line.endswith("/binding") else 0.0
        api.faults.request_timeout = 0.5
        assert orjson.loads(engine.bind(BindingArgs("w1", "default", "", "a1"))) == {"Error": ""}
        deadline = time.monotonic() + 30
        while engine.source.store.assumptions.get(("default", "w1")).bound_at is None:
            assert time.monotonic() < deadline, "never settled"
            time.sleep(0.02)
        assert api.get("pods", "w1", "default")["spec"]["nodeName"] == "a1"
        assert api.faults.fired["timed_out_writes"] == 1
        posts = [r for r in api.requests if r.endswith("/pods/w1/binding")]
        gets = [r for r in api.requests if r.startswith("GET") and r.endswith("/pods/w1")]
        assert len(posts) == 2 and len(gets) == 1
        engine.bindings.close()
        engine.binder.close()


def test_the_lookup_reads_again_when_a_pooled_connection_was_closed_before_any_answer():
    """A server that closed a kept-alive connection after its 504 races the pool's
    liveness check: the GET fails before any answer, and is sent once more (a read is
    idempotent); a second such failure leaves the outcome unknown."""
    from urllib3.exceptions import ProtocolError

    from extender.engine.binding import ApiBinder, BindUnknown

    class Api:
        def __init__(self, drops: int) -> None:
            self.drops, self.calls = drops, 0

        def read_namespaced_pod(self, name, namespace, **_):
            self.calls += 1
            if self.calls <= self.drops:
                raise ProtocolError("Connection aborted.", ConnectionResetError())
            return Answer(orjson.dumps({"metadata": {"uid": "u1"}, "spec": {"nodeName": "a1"}}))

    class Answer:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def release_conn(self) -> None:
            pass

    binder = ApiBinder.__new__(ApiBinder)
    binder.api = Api(drops=1)
    assert binder.lookup("default", "w1", "u1") == "a1" and binder.api.calls == 2
    binder.api = Api(drops=2)
    with pytest.raises(BindUnknown, match="Connection aborted"):
        binder.lookup("default", "w1", "u1")
    assert binder.api.calls == 2


class Unsure:
    """A binder whose first call ends without a verdict (timed out, 504); `lookup`
    answers what the API holds then (`where`)."""

    def __init__(self, where: list) -> None:
        self.where = where
        self.calls = 0

    def __call__(self, namespace, name, uid, node_name, timeout):
        from extender.engine.binding import BindUnknown

        self.calls += 1
        if self.calls == 1:
            raise BindUnknown("binding: 504 Timeout")

    def lookup(self, namespace, name, uid, timeout):
        return self.where.pop(0)


def test_an_unreachable_api_after_an_unknown_outcome_does_not_settle_it():
    """The first call's outcome is unknown; the next one cannot reach the API (refused:
    that call was not applied, the first may still land): the binding is posted again
    rather than forgotten, and bound at the third call."""
    from extender.engine.binding import BindError, BindUnknown

    class Flaky(Unsure):
        def __call__(self, namespace, name, uid, node_name, timeout):
            self.calls += 1
            if self.calls == 1:
                raise BindUnknown("binding: connection reset")
            if self.calls == 2:
                raise BindError("binding: connection refused", reached=False)

    engine = Extender(Config(inflight_wait=5.0), StoreSource(NODES + [pod("w1")]), binder=Flaky(["", ""]))
    engine.bindings.sleep = lambda seconds: False  # no back-off in the test
    assert orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1"))) == {"Error": ""}
    assert engine.binder.calls == 3
    assert engine.source.store.assumptions.get(("default", "w1")).bound_at is not None


@pytest.mark.parametrize("where, calls, bound", [
    (["a1"], 1, True),  # it had landed: settled by the GET, not posted again
    ([""], 2, True),  # not landed: posted again, bound then
    ([None], 1, False),  # the pod is gone: forgotten
    (["b1"], 1, False),  # bound elsewhere: forgotten (the watch has the truth)
])
def test_an_unknown_binding_outcome_is_settled_by_a_get(where, calls, bound):
    engine = Extender(Config(inflight_wait=5.0), StoreSource(NODES + [pod("w1")]), binder=Unsure(list(where)))
    result = orjson.loads(engine.bind(BindingArgs("w1", "default", "uid-w1", "a1")))
    assert (result == {"Error": ""}) is bound, result
    assert engine.binder.calls == calls
    assumed = engine.source.store.assumptions.get(("default", "w1"))
    assert (assumed is not None and assumed.bound_at is not None) is bound


# --- waits only for pods that can change the answer ---------------------------------------


def waits(engine, the_pod, candidates=("a1", "b1")) -> bool:
    """Whether `the_pod`'s filter is held while the pods answered before are pending: the
    wait the engine reports (`extender_inflight_wait_seconds`, observed for every filter
    that waited), not whether it took longer than some time (a busy machine is slow). A
    held one waited GRACE at least (nothing binds here): a lower bound, which a busy
    machine can only exceed."""
    from extender.engine.inflight import GRACE

    def waited() -> tuple[float, float]:
        return tuple(read(metrics.INFLIGHT_WAIT_SECONDS, f"extender_inflight_wait_seconds_{s}")
                     for s in ("count", "sum"))

    (count, seconds) = waited()
    thread, _ = filter_in_thread(engine, the_pod, list(candidates))
    thread.join(timeout=30)
    assert not thread.is_alive()
    (count_after, seconds_after) = waited()
    if count_after == count:
        return False
    assert seconds_after - seconds >= min(GRACE, engine.inflight.wait), "held, but not for the pending pod"
    return True


def test_pods_that_cannot_change_the_answer_never_wait():
    """The issue's cases: a bare pod (system defaults are ScheduleAnyway), a pod whose
    selector does not select the pending one, a soft constraint only."""
    engine, _ = engine_with(NODES, wait=2.0)
    names(engine, pod("w1"), ["a1", "b1"])  # pending web pod
    other = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"app": "db"}}}]
    soft = [{**SPREAD[0], "whenUnsatisfiable": "ScheduleAnyway"}]
    assert not waits(engine, pod("bare", labels={"app": "web"}, spread=()))
    assert not waits(engine, pod("db", labels={"app": "db"}, spread=other))
    assert not waits(engine, pod("soft", spread=soft))
    assert engine.inflight.counts()["pending"] >= 1  # w1 was not given up on meanwhile
    assert waits(engine, pod("w2"))  # its selector selects w1


def test_match_label_keys_and_list_defaults_decide_who_waits():
    keyed = [{**SPREAD[0], "labelSelector": {"matchLabels": {"app": "web"}},
              "matchLabelKeys": ["pod-template-hash"]}]
    engine, _ = engine_with(NODES, wait=2.0)
    names(engine, pod("w1", labels={"app": "web", "pod-template-hash": "v1"}, spread=keyed), ["a1", "b1"])
    assert not waits(engine, pod("w2", labels={"app": "web", "pod-template-hash": "v2"}, spread=keyed))
    assert waits(engine, pod("w3", labels={"app": "web", "pod-template-hash": "v1"}, spread=keyed))
    # cluster defaults (List, DoNotSchedule) through the pod's Service
    service = {"kind": "Service", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"selector": {"app": "web"}}}
    args = {"PodTopologySpread": {"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}}
    box: list = []
    engine = Extender(Config(inflight_wait=2.0, plugin_args=args), StoreSource(NODES + [service]),
                      binder=Recorder(box))
    box.append(engine)
    names(engine, pod("w1", spread=()), ["a1", "b1"])
    assert waits(engine, pod("w2", spread=()))
    assert not waits(engine, pod("lone", labels={"app": "lone"}, spread=()))  # no Service selects it


def test_a_pod_filtered_again_ends_its_earlier_cycle():
    """kube-scheduler never runs two cycles of one pod: a new filter for w1 means its
    earlier cycle ended without a bind (Reserve or Permit failed); nobody waits for that
    one any longer, and w1 is pending again only if this answer has a feasible node."""
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    engine, _ = engine_with([node("a1", "a"), node("b1", "b")], wait=30.0)
    names(engine, pod("w1"), ["a1", "b1"])
    engine.source.store.upsert("Node", node("a1", "a", taints=[taint]))
    engine.source.store.upsert("Node", node("b1", "b", taints=[taint]))
    assert names(engine, pod("w1"), ["a1", "b1"]) == []  # fits nowhere now
    assert engine.inflight.counts()["pending"] == 0
    assert not waits(engine, pod("w2"))


def test_a_pending_pod_deleted_from_the_state_releases_its_waiters():
    engine, _ = engine_with(NODES + [pod("w1")], wait=30.0)
    names(engine, pod("w1"), ["a1", "b1"])
    thread, out = filter_in_thread(engine, pod("w2"), ["a1", "b1"])
    thread.join(timeout=0.3)
    assert thread.is_alive()
    engine.source.store.delete("Pod", "default", "w1")  # the watch's DELETED
    thread.join(timeout=5)
    assert not thread.is_alive() and out["result"] == ["a1", "b1"]


# --- preemption for spread: no dry-run error storm ----------------------------------------


def failed_maps(engine, the_pod, candidates) -> tuple[dict, dict]:
    code, result = post(engine, "filter", {"Pod": the_pod, "NodeNames": candidates})
    assert code == 200 and result["Error"] == ""
    return result["FailedNodes"] or {}, result["FailedAndUnresolvableNodes"] or {}


def spread_engine(victim_priority: int, slim: bool = True, pending=()):
    """Zone a: 2 web pods on a1 (priority `victim_priority`), zone b: none on b1 but a
    filler; a web pod fits nowhere once b1 is out of the candidates. `pending`: pods the
    state holds as not yet bound."""
    objects = [node("a1", "a"), node("b1", "b"),
               pod("w-a1", node_name="a1", spread=()), pod("w-a2", node_name="a1", spread=())]
    for o in objects[2:]:
        o["spec"]["priority"] = victim_priority
    return Extender(Config(slim_answers=slim), StoreSource([*objects, *pending]), binder=None)


def preemptor(priority: int, policy: str = "") -> dict:
    p = pod("hi")
    p["spec"]["priority"] = priority
    if policy:
        p["spec"]["preemptionPolicy"] = policy
    return p


def test_skew_only_nodes_hosting_lower_priority_pods_are_unresolvable_when_nothing_fits():
    """kube-scheduler's dry run (in-tree filters only) would find no victim on a1 and
    fail the whole preemption with "expected at least one victim pod on node"."""
    engine = spread_engine(victim_priority=0)
    failed, unresolvable = failed_maps(engine, preemptor(1000), ["a1"])
    assert failed == {}
    assert unresolvable == {"a1": "node(s) didn't match pod topology spread constraints"}


@pytest.mark.parametrize("priority, policy", [(0, ""), (1000, "Never")])
def test_skew_stays_unschedulable_where_the_dry_run_has_nothing_to_fail_on(priority, policy):
    """No lower-priority pod there (equal priority is no victim), or a pod that never
    preempts: upstream's code, Unschedulable."""
    engine = spread_engine(victim_priority=0)
    failed, unresolvable = failed_maps(engine, preemptor(priority, policy), ["a1"])
    assert failed == {"a1": "node(s) didn't match pod topology spread constraints"} and unresolvable == {}


def test_a_pod_that_never_preempts_is_read_so_from_the_state_copy():
    """The pending pod is read from the cluster state's copy (same UID), not from the
    request: that copy must keep `preemptionPolicy`, or a pod that never preempts is
    answered as a preemptor (a1 Unresolvable) instead of Unschedulable."""
    the_pod = preemptor(1000, "Never")
    engine = spread_engine(victim_priority=0, pending=[the_pod])
    assert engine.source.snapshot().pod_layer.get("default", "hi").raw is not None  # the copy is used
    failed, unresolvable = failed_maps(engine, the_pod, ["a1"])
    assert failed == {"a1": "node(s) didn't match pod topology spread constraints"} and unresolvable == {}


@pytest.mark.parametrize("slim", [True, False])
def test_answers_with_a_feasible_node_keep_unschedulable_skew_nodes(slim):
    engine = spread_engine(victim_priority=0, slim=slim)
    code, result = post(engine, "filter", {"Pod": preemptor(1000), "NodeNames": ["a1", "b1"]})
    assert result["NodeNames"] == ["b1"]
    # slim: a node fits, so kube-scheduler reads no failure map (no FitError, no preemption)
    assert result["FailedNodes"] == ({} if slim else {"a1": "node(s) didn't match pod topology spread constraints"})
    assert result["FailedAndUnresolvableNodes"] == {}
