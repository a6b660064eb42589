"""The webhook component renders with the base Deployment and agrees with the code:
env names are the config's, ports and Secret names line up, every checked kind is routed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extender.config import env_name
from extender.validation.workloads import CHECKED_KINDS

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests" / "components" / "webhook"
PLURALS = {"Pod": "pods", "Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets",
           "ReplicaSet": "replicasets", "ReplicationController": "replicationcontrollers", "Job": "jobs",
           "CronJob": "cronjobs", "PersistentVolume": "persistentvolumes"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    from testing.overlays import overlay_dir
    from tests.deploy.deploy_tools import kubectl, run

    out = run([kubectl(), "kustomize", str(overlay_dir("with-webhook"))])
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(out) if d}


def test_webhook_configuration(rendered):
    (hook,) = rendered["ValidatingWebhookConfiguration/scheduling-extender"]["webhooks"]
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert hook["failurePolicy"] in ("Ignore", "Fail") and 1 <= hook["timeoutSeconds"] <= 10
    assert hook["clientConfig"]["service"]["path"] == "/validate"
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "scheduling-extender"]} in \
        hook["namespaceSelector"]["matchExpressions"]
    routed = {r for rule in hook["rules"] for r in rule["resources"]}
    assert routed == {PLURALS[k] for k in CHECKED_KINDS if k != "PodTemplate"}
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in hook["rules"])
    scopes = {r: rule["scope"] for rule in hook["rules"] for r in rule["resources"]}
    assert scopes.pop("persistentvolumes") == "Cluster" and set(scopes.values()) == {"Namespaced"}


def test_deployment_service_and_certificate_line_up(rendered):
    deployment = rendered["Deployment/extended-scheduler"]["spec"]["template"]["spec"]
    container = next(c for c in deployment["containers"] if c["name"] == "extender")
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {env_name("webhook_listen"), env_name("tls_cert_file"), env_name("tls_private_key_file")} <= set(env)
    port = int(env[env_name("webhook_listen")].rpartition(":")[2])
    assert {"name": "webhook", "containerPort": port} in container["ports"]
    assert container["args"][:2] == ["serve", "--config=/etc/extended-scheduler/extender.yaml"]  # the base is kept
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-tls")
    assert env[env_name("tls_cert_file")] == f"{mount['mountPath']}/tls.crt"
    secret = next(v for v in deployment["volumes"] if v["name"] == "webhook-tls")["secret"]["secretName"]

    service = rendered["Service/scheduling-extender-webhook"]["spec"]
    assert service["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook"}]
    certificate = rendered["Certificate/scheduling-extender-webhook"]["spec"]
    assert certificate["secretName"] == secret
    assert "scheduling-extender-webhook.scheduling-extender.svc" in certificate["dnsNames"]
    hook = rendered["ValidatingWebhookConfiguration/scheduling-extender"]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "scheduling-extender/scheduling-extender-webhook"
