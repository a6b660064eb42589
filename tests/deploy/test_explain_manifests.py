"""manifests/components/explain: the endpoint on, a read-only Role that matches the
path `kubectl extender` takes, the API server admitted only where the operator says;
every other overlay keeps the endpoint off."""

from __future__ import annotations

from kubectl_extender.cli import DEFAULT_SERVICE, ProxyTransport, parse_service
from test_manifests import OVERLAYS, by_kind, container, render, the


def extender_env(objects: list[dict]) -> dict[str, str]:
    pod = the(objects, "Deployment")["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in container(pod, "extender").get("env", [])}


def test_the_component_turns_the_endpoint_on():
    objects = render("with-explain")
    assert extender_env(objects)["EXTENDER_EXPLAIN_ENDPOINT"] == "true"
    service = the(objects, "Service", "extended-scheduler-metrics")
    namespace, name, port = parse_service(DEFAULT_SERVICE)
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == (namespace, name)
    assert port in [p["name"] for p in service["spec"]["ports"]]


def test_the_role_grants_the_plugins_path_only():
    """A namespaced Role: the proxy of the one Service, in the one form the plugin uses
    (issue #35: a ClusterRole of five forms and `pods get` let its users read every pod;
    the endpoint now checks each asker's right to the pod itself)."""
    objects = render("with-explain")
    assert not by_kind(objects, "ClusterRole", "scheduling-extender-explain")
    role = the(objects, "Role", "scheduling-extender-explain")
    namespace, name, _ = parse_service(DEFAULT_SERVICE)
    assert role["metadata"]["namespace"] == namespace
    (rule,) = role["rules"]
    assert rule["resources"] == ["services/proxy"]
    assert rule["verbs"] == ["get", "create"]  # GET /explain, POST /explain: nothing writes
    # the proxy path segment kubectl-extender requests is the one name allowed
    segment = ProxyTransport(None, DEFAULT_SERVICE, 1).prefix.split("/services/")[1].split("/")[0]
    assert rule["resourceNames"] == [segment] and segment.startswith(name)


def test_the_api_server_is_admitted_only_where_the_operator_says():
    objects = render("with-explain")
    policy = the(objects, "NetworkPolicy", "extended-scheduler-explain")
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8889, "protocol": "TCP"}]
    assert rule["from"] == [{"ipBlock": {"cidr": "192.0.2.0/24"}}]  # TEST-NET-1 until set
    base = the(objects, "NetworkPolicy", "extended-scheduler")
    assert all("ipBlock" not in peer for r in base["spec"]["ingress"] for peer in r["from"])


def test_every_other_overlay_keeps_it_off():
    for overlay in OVERLAYS:
        if overlay == "with-explain":
            continue
        objects = render(overlay)
        assert not by_kind(objects, "Role", "scheduling-extender-explain"), overlay
        for deployment in by_kind(objects, "Deployment"):
            for c in deployment["spec"]["template"]["spec"]["containers"]:
                assert "EXTENDER_EXPLAIN_ENDPOINT" not in {e["name"] for e in c.get("env", [])}, overlay
                assert not any("explain" in a for a in c.get("args", [])), overlay
