"""Issue #35's fifth finding: `/explain`, when enabled, answered anonymous clients about
any namespace's pods (that a pod exists, and where it fits).

Now it answers a user the API server vouches for (TokenReview) and allows (a
SubjectAccessReview of `get` on the pod, or `list` on pods in a posted pod's namespace),
through the `system:auth-delegator` role the manifests bind (`extender.server.auth`);
without an API server (file mode), loopback clients only. The API-server double answers
the reviews (`testing.auth_reviews`)."""

from __future__ import annotations

import http.client

import orjson
import pytest
from conftest import EXAMPLES, example_pod

from extender.config import Config
from extender.engine import Extender
from extender.server.app import health_routes
from extender.server.auth import Access, AuthError, Delegated, LoopbackOnly, ReviewBudgets, User
from extender.server.explain_routes import ExplainRoutes
from extender.server.listener import Listener, Request
from extender.state import load_objects
from testing.apiserver import FakeApiServer
from testing.service_proxy import add_service_proxy
from tests.state.live_truth import synced_live

NAMESPACE, SERVICE = "scheduling-extender", "extended-scheduler-metrics"


@pytest.fixture
def cluster(tmp_path):
    with FakeApiServer(bookmark_interval=0.2) as api:
        api.load(load_objects(EXAMPLES / "cluster.yaml"))
        api.create("pods", example_pod("sla-gt"))  # default/sla-gt, Pending; shop/web-7d9f-0 is in the file
        api.create("services", {"metadata": {"name": SERVICE, "namespace": NAMESPACE},
                                "spec": {"ports": [{"name": "metrics", "port": 8889}]}})
        reviews = api.reviews
        reviews.token("t-admin", "admin", groups=["ops"])
        reviews.token("t-dev", "dev")
        reviews.token("t-nobody", "nobody")
        reviews.grant("group:ops", "get", "pods")
        reviews.grant("group:ops", "list", "pods")
        reviews.grant("dev", "get", "pods", namespace="default")
        reviews.grant("dev", "list", "pods", namespace="default")
        with synced_live(api, tmp_path) as source:
            engine = Extender(Config(explain_endpoint=True), source)
            routes = ExplainRoutes(engine, True, rate=100.0, burst=100)
            listener = Listener("127.0.0.1:0", health_routes(engine), dispatch=routes).start()
            add_service_proxy(api, {(NAMESPACE, SERVICE): f"127.0.0.1:{listener.port}"})
            try:
                yield api, reviews, listener.port
            finally:
                listener.stop()


def call(port: int, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, orjson.loads(response.read()), dict(response.getheaders())
    finally:
        conn.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_anonymous_clients_are_not_answered(cluster):
    _, reviews, port = cluster
    for method, path, body in (("GET", "/explain/default/sla-gt", None),
                               ("GET", "/explain/shop/web-7d9f-0", None),
                               ("POST", "/explain", orjson.dumps(example_pod("sla-gt")))):
        code, answer, headers = call(port, method, path, body)
        assert code == 401 and "bearer token is required" in answer["error"], (path, answer)
        assert headers["WWW-Authenticate"].startswith("Bearer")
    assert reviews.count("tokenreviews") == 0  # refused before anything is asked
    code, answer, _ = call(port, "GET", "/explain/default/sla-gt", **bearer("t-forged"))
    assert code == 401 and "invalid bearer token" in answer["error"]


def test_users_see_the_pods_they_may_read(cluster):
    _, _, port = cluster
    assert call(port, "GET", "/explain/default/sla-gt", **bearer("t-admin"))[0] == 200
    assert call(port, "GET", "/explain/shop/web-7d9f-0", **bearer("t-admin"))[0] == 200
    assert call(port, "GET", "/explain/default/sla-gt", **bearer("t-dev"))[0] == 200
    code, answer, _ = call(port, "GET", "/explain/shop/web-7d9f-0", **bearer("t-dev"))
    assert code == 403 and answer["error"] == 'user "dev" may not get pods/web-7d9f-0 in namespace shop'
    assert call(port, "GET", "/explain/default/sla-gt", **bearer("t-nobody"))[0] == 403
    shop_pod = example_pod("sla-gt")
    shop_pod["metadata"]["namespace"] = "shop"
    assert call(port, "POST", "/explain", orjson.dumps(example_pod("sla-gt")), **bearer("t-dev"))[0] == 200
    code, answer, _ = call(port, "POST", "/explain", orjson.dumps(shop_pod), **bearer("t-dev"))
    assert code == 403 and "list pods in namespace shop" in answer["error"]


def test_through_the_api_servers_proxy_the_token_travels_in_its_own_header(cluster):
    """kube-apiserver removes `Authorization` once it has authenticated the caller (the
    double's proxy does the same): `X-Extender-Authorization` carries it on."""
    _, _, port = cluster
    api, _, _ = cluster
    proxy = f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}:metrics/proxy/explain/default/sla-gt"
    host = api.url.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=30)
    try:
        for headers, expected in ((bearer("t-admin"), 401),
                                  ({"X-Extender-Authorization": "Bearer t-admin"}, 200)):
            conn.request("GET", proxy, headers=headers)
            response = conn.getresponse()
            response.read()
            assert response.status == expected, headers
    finally:
        conn.close()


def test_answers_are_cached_briefly(cluster):
    _, reviews, port = cluster
    for _ in range(5):
        assert call(port, "GET", "/explain/default/sla-gt", **bearer("t-dev"))[0] == 200
    assert reviews.count("tokenreviews") == 1 and reviews.count("subjectaccessreviews") == 1


def test_a_cached_review_expires_after_cache_seconds(monkeypatch):
    """A token's user and a user's access are reviewed again once CACHE_SECONDS passed
    (a revoked token or a removed RoleBinding stops working that soon)."""
    from extender.server import auth

    now = [100.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: now[0])
    asked = []

    def reviewer(kind, spec):
        asked.append(kind)
        if kind == "tokenreviews":
            return {"authenticated": True, "user": {"username": "dev"}}
        return {"allowed": True}

    guard = Delegated(None, reviewer)
    access = Access("get", "pods", "default", "p")
    for step in (0.0, auth.CACHE_SECONDS - 0.1, 0.2):
        now[0] += step
        assert guard.check(lambda name: "Bearer t" if name == "Authorization" else "", "10.0.0.1", access).name == "dev"
    assert asked == ["tokenreviews", "subjectaccessreviews"] * 2


def test_unknown_tokens_cannot_flood_the_api_server():
    asked = []

    def reviewer(kind, spec):
        asked.append(kind)
        return {"authenticated": False, "error": "invalid bearer token"}

    guard = Delegated(None, reviewer)
    # 3 reviews per caller, then none (time stands still)
    guard.budgets = ReviewBudgets(1.0, 3, clock=lambda: 0.0)
    statuses = []
    for i in range(6):
        with pytest.raises(AuthError) as refused:
            guard.check(lambda name, i=i: f"Bearer forged-{i}" if name == "Authorization" else "", "10.0.0.1",
                        Access("get", "pods", "default", "p"))
        statuses.append(refused.value.status)
    assert statuses == [401, 401, 401, 429, 429, 429] and len(asked) == 3


def test_an_unreachable_api_server_is_a_503():
    def reviewer(kind, spec):
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(AuthError) as refused:
        Delegated(None, reviewer).check(lambda name: "Bearer t", "10.0.0.1", Access("get", "pods", "a", "b"))
    assert refused.value.status == 503 and refused.value.headers["Retry-After"]


def test_without_an_api_server_only_loopback_clients_are_answered(example_snapshot):
    from extender.state import StaticSource

    engine = Extender(Config(explain_endpoint=True), StaticSource(example_snapshot))
    routes = ExplainRoutes(engine, True, rate=100.0, burst=100)
    assert isinstance(routes.guard, LoopbackOnly)
    for client, expected in (("127.0.0.1", 200), ("::1", 200), ("::ffff:127.0.0.1", 200), ("10.1.2.3", 403),
                             ("192.168.0.7", 403)):
        request = Request("POST", "/explain", orjson.dumps(example_pod("sla-gt")))
        request.client = client
        status, _, body, _ = routes(request)
        assert status == expected, (client, body)
    assert LoopbackOnly().authenticate(lambda name: "", "127.0.0.1") == User("system:loopback")


def _header(token: str):
    return lambda name: f"Bearer {token}" if name == "Authorization" else ""


def test_review_budgets_are_per_caller():
    """Issue #48: one budget for everybody let unknown tokens make an honest user's
    /explain 429. Now a flood of unknown tokens spends its own address's budget only: a
    new token from another address, and a known user's token from the flooding address
    itself (its cached user expired), are still reviewed; so is the user's access."""
    from extender.server import auth

    now = [0.0]
    asked = []

    def reviewer(kind, spec):
        asked.append((kind, spec.get("token", spec.get("user"))))
        if kind == "tokenreviews":
            if spec["token"].startswith("good"):
                return {"authenticated": True, "user": {"username": spec["token"]}}
            return {"authenticated": False, "error": "invalid bearer token"}
        return {"allowed": True}

    guard = Delegated(None, reviewer)
    guard.budgets = ReviewBudgets(1.0, 3, clock=lambda: now[0])  # 3 a caller, time stands still
    access = Access("get", "pods", "default", "p")
    assert guard.check(_header("good-known"), "10.0.0.66", access).name == "good-known"
    statuses = []
    for i in range(8):
        with pytest.raises(AuthError) as refused:
            guard.check(_header(f"forged-{i}"), "10.0.0.66", access)
        statuses.append(refused.value.status)
    assert statuses == [401, 401, 429, 429, 429, 429, 429, 429]  # the address's 3: one went to good-known
    assert guard.check(_header("good-new"), "10.0.0.7", access).name == "good-new"  # another address
    now[0] += auth.CACHE_SECONDS + 1  # the cached user and decision expire; buckets refill 11 s worth (full)
    guard.budgets = ReviewBudgets(1.0, 3, clock=lambda: now[0])
    for i in range(3):
        with pytest.raises(AuthError):
            guard.check(_header(f"forged-again-{i}"), "10.0.0.66", access)
    with pytest.raises(AuthError) as refused:  # the address's budget is spent ...
        guard.check(_header("forged-more"), "10.0.0.66", access)
    assert refused.value.status == 429
    assert guard.check(_header("good-known"), "10.0.0.66", access).name == "good-known"  # ... not the user's
    assert ("tokenreviews", "forged-more") not in asked


def test_no_review_for_a_client_that_has_gone_or_past_its_deadline():
    """Before every review: its client still there, its deadline not passed (503, and
    nothing is asked)."""
    import time

    from extender.request import deadline

    asked = []

    def reviewer(kind, spec):
        asked.append(kind)
        return {"authenticated": True, "user": {"username": "dev"}} if kind == "tokenreviews" else {"allowed": True}

    class Gone:
        gone = True

    access = Access("get", "pods", "default", "p")
    with deadline.arrived(time.monotonic(), Gone()), pytest.raises(AuthError) as refused:
        Delegated(None, reviewer).check(_header("t"), "10.0.0.1", access)
    assert refused.value.status == 503 and "gone" in str(refused.value)
    with deadline.arrived(time.monotonic() - 10.0), deadline.request_deadline(4.0), \
            pytest.raises(AuthError) as refused:
        Delegated(None, reviewer).check(_header("t"), "10.0.0.1", access)
    assert refused.value.status == 503 and "deadline" in str(refused.value)
    assert asked == []
    with deadline.arrived(time.monotonic()), deadline.request_deadline(4.0):
        assert Delegated(None, reviewer).check(_header("t"), "10.0.0.1", access).name == "dev"
    assert asked == ["tokenreviews", "subjectaccessreviews"]
