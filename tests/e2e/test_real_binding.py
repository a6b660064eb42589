"""The bind verb's lean poster (`extender.engine.bindpost`) against a real kube-apiserver:
TLS with the kubeconfig's CA, the shipped ServiceAccount's token and RBAC, the real
server's answers (201, 409 already bound, 409 another UID, 404), and a rotated token
used on the next call."""

from __future__ import annotations

from extender.engine.binding import BindError, BindUnknown, LeanBinder, binder_for
from testing.apiserver import ApiError
from testing.harness import pod
from testing.realapi import FORCE
from testing.realcluster import SERVICE_ACCOUNT, service_account_token
from testing.realcp_fixtures import only_pairs

NAMESPACE = "bindpost"


@only_pairs("v1.36")
def test_bindings_through_tls_with_a_service_account_token(control_plane, tmp_path):
    import pytest

    from extender.state.live import LiveSource

    admin = control_plane.admin()
    try:
        admin.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NAMESPACE}})
    except ApiError as exc:
        assert exc.code == 409  # made by an earlier test on this control plane
    uids = {}
    for name in ("p1", "p2"):
        made = admin.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod(name, namespace=NAMESPACE))
        uids[name] = made["metadata"]["uid"]
    token = service_account_token(admin)
    source = LiveSource.connect(str(control_plane.kubeconfig(tmp_path / "kubeconfig", token, SERVICE_ACCOUNT)),
                                False)
    binder = binder_for(source)
    assert isinstance(binder, LeanBinder) and binder.poster.tls

    def node_of(name: str) -> str:
        return admin.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")["spec"].get("nodeName") or ""

    try:
        binder(NAMESPACE, "p1", uids["p1"], "node-a")
        assert node_of("p1") == "node-a"
        with pytest.raises(BindUnknown, match="409 Conflict"):  # bound already
            binder(NAMESPACE, "p1", uids["p1"], "node-b")
        with pytest.raises(BindUnknown, match="409 Conflict"):  # another pod of that name
            binder(NAMESPACE, "p2", "00000000-0000-0000-0000-000000000000", "node-a")
        assert binder.lookup(NAMESPACE, "p2", "00000000-0000-0000-0000-000000000000") is None
        with pytest.raises(BindError, match="404 Not Found") as missing:
            binder(NAMESPACE, "gone", "", "node-a")
        assert missing.value.reached
        assert node_of("p2") == ""

        config = binder.poster.configuration  # the key and hook as load_incluster_config sets them
        config.refresh_api_key_hook = lambda c: c.api_key.update(BearerToken="Bearer not-a-token")
        with pytest.raises(BindError, match="401 Unauthorized"):
            binder(NAMESPACE, "p2", uids["p2"], "node-a")
        config.refresh_api_key_hook = lambda c: c.api_key.update(BearerToken=f"Bearer {token}")
        binder(NAMESPACE, "p2", uids["p2"], "node-a")  # the rotated token, on the next call
        assert node_of("p2") == "node-a"
        assert binder.lookup(NAMESPACE, "p2", uids["p2"]) == "node-a"
    finally:
        binder.close()
        for name in ("p1", "p2"):
            admin.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                       {"kind": "DeleteOptions", "apiVersion": "v1", **FORCE})
