"""The Helm chart, generated from the kustomize overlays by tests/deploy/regen.py: it is
in sync with them, a real `helm` lints and renders it, its defaults render exactly the
overlays (`second-scheduler`, `with-prometheus-operator`, `with-webhook`) minus the
Namespace, its values take effect, kube-scheduler follows the cluster version as the
compatibility table in docs/operate/upgrades.md says, and everything it renders
validates strictly (issue 25 items 3 and 7)."""

from __future__ import annotations

import filecmp
import re
import subprocess

import pytest
import regen
import yaml
from deploy_tools import ROOT, run, tool, validate

CHART = ROOT / "charts" / "scheduling-extender"
NAMESPACE = "scheduling-extender"
CLUSTER = "v1.35.0"  # the overlays' kube-scheduler tag
UPGRADES = ROOT / "docs" / "operate" / "upgrades.md"


def helm_template(*values: str, namespace: str = NAMESPACE, kube_version: str = CLUSTER) -> list[dict]:
    args = [tool("helm"), "template", "scheduling-extender", str(CHART), "--namespace", namespace,
            "--kube-version", kube_version]
    for value in values:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(run(args)) if doc]


def key(obj: dict) -> tuple[str, str, str]:
    return regen.identity(obj)


def unordered(obj):
    """Named list items (containers, env, ports, volumes) compared as sets: a strategic
    merge patch prepends what it adds, the chart appends it; Kubernetes reads both alike."""
    if isinstance(obj, dict):
        return {k: unordered(v) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [unordered(v) for v in obj]
        if items and all(isinstance(i, dict) and "name" in i for i in items):
            return sorted(items, key=lambda i: str(i["name"]))
        return items
    return obj


def as_map(objects: list[dict]) -> dict:
    return {key(o): unordered(o) for o in objects}


def the(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(objects: list[dict]) -> dict:
    return the(objects, "Deployment")["spec"]["template"]["spec"]


def images(objects: list[dict]) -> dict[str, str]:
    return {c["name"]: c["image"] for c in pod_spec(objects)["containers"]}


def test_the_chart_is_generated_from_the_overlays(tmp_path):
    tool("kubectl")  # regen renders the overlays
    regen.chart(tmp_path / "chart")
    diff = filecmp.dircmp(CHART, tmp_path / "chart")
    stale = []

    def collect(d, prefix=""):
        stale.extend(prefix + n for n in d.left_only + d.right_only + d.diff_files)
        for name, sub in d.subdirs.items():
            collect(sub, f"{prefix}{name}/")

    collect(diff)
    assert not stale, f"run `python -m tests.deploy.regen`; stale: {stale}"


def test_helm_lints_the_chart():
    out = run([tool("helm"), "lint", str(CHART), "--kube-version", CLUSTER])
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize(("values", "overlay"), [
    ((), "second-scheduler"),
    (("prometheusOperator.enabled=true",), "with-prometheus-operator"),
    (("webhook.enabled=true",), "with-webhook"),
])
def test_defaults_render_the_overlay_without_its_namespace(values, overlay):
    rendered = helm_template(*values)
    expected = [o for o in regen.render(overlay) if o["kind"] != "Namespace"]
    assert as_map(rendered) == as_map(expected)
    for obj in rendered:
        validate(obj, f"helm template {' '.join(values)}")


def test_no_namespace_object_everything_in_the_release_namespace():
    """`helm install -n NS --create-namespace` owns the namespace; the chart must not
    bring one, and every namespaced reference follows NS (kube-system's RoleBinding aside)."""
    objects = helm_template("prometheusOperator.enabled=true", "webhook.enabled=true", namespace="platform")
    assert not [o for o in objects if o["kind"] == "Namespace"]
    text = yaml.safe_dump_all(objects)
    assert not re.search(rf"(namespace|resourceNamespace): {NAMESPACE}\b", text), "a fixed namespace is left"
    for obj in objects:
        ns = obj["metadata"].get("namespace")
        if ns is not None:
            assert ns == ("kube-system" if obj["kind"] == "RoleBinding" and ns == "kube-system" else "platform")
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "platform"
    (data,) = [o["data"] for o in objects if "kube-scheduler-config.yaml" in o.get("data", {})]
    config = yaml.safe_load(data["kube-scheduler-config.yaml"])
    assert config["leaderElection"]["resourceNamespace"] == "platform"
    hook = the(objects, "ValidatingWebhookConfiguration")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "platform/scheduling-extender-webhook"
    (webhook,) = hook["webhooks"]
    assert webhook["clientConfig"]["service"]["namespace"] == "platform"
    (excluded,) = webhook["namespaceSelector"]["matchExpressions"]
    assert excluded["values"] == ["kube-system", "platform"]
    cert = the(objects, "Certificate")
    assert cert["spec"]["dnsNames"][0] == "scheduling-extender-webhook.platform.svc"
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["platform"]


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_pdb_only_with_a_standby(replicas):
    """Issue 25 item 7: minAvailable 1 of 1 replica blocks every node drain."""
    objects = helm_template(f"replicas={replicas}")
    assert the(objects, "Deployment")["spec"]["replicas"] == replicas
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    if replicas == 1:
        assert pdbs == []
    else:
        assert [p["spec"]["minAvailable"] for p in pdbs] == [1]
    for obj in objects:
        validate(obj, f"replicas={replicas}")


def test_values_take_effect():
    objects = helm_template(
        "image.repository=registry.local/ext", "image.tag=9.9.9",
        "kubeScheduler.image.repository=registry.local/ks", "kubeScheduler.image.tag=v1.36.1",
        "imagePullSecrets[0].name=regcred", "nodeSelector.pool=system",
        "tolerations[0].key=dedicated", "tolerations[0].operator=Equal", "tolerations[0].value=system",
        "tolerations[0].effect=NoSchedule",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].key=pool",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].operator=Exists",
        "resources.kubeScheduler.limits.memory=3Gi", "resources.extender.requests.cpu=2",
        "priorityClassName=platform-critical")
    assert images(objects) == {"extender": "registry.local/ext:9.9.9", "kube-scheduler": "registry.local/ks:v1.36.1"}
    pod = pod_spec(objects)
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
    resources = {c["name"]: c["resources"] for c in pod["containers"]}
    assert resources["kube-scheduler"]["limits"]["memory"] == "3Gi"
    assert resources["extender"]["requests"]["cpu"] == 2
    assert pod["priorityClassName"] == "platform-critical"
    assert not [o for o in objects if o["kind"] == "ResourceQuota"], "a quota only for the critical classes"
    for obj in objects:
        validate(obj, "helm template with values")


def test_defaults_carry_no_empty_scheduling_fields():
    pod = pod_spec(helm_template())
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity"} & pod.keys()
    assert pod["priorityClassName"] == "system-cluster-critical"


@pytest.mark.parametrize("priority_class", ["system-cluster-critical", "system-node-critical", ""])
def test_a_critical_class_brings_the_quota_gke_needs(priority_class):
    """Issue 25 item 2: GKE admits critical pods outside kube-system only in a namespace
    with a ResourceQuota covering exactly its scope."""
    objects = helm_template(f"priorityClassName={priority_class}")
    quotas = [o for o in objects if o["kind"] == "ResourceQuota"]
    if not priority_class:
        assert quotas == [] and "priorityClassName" not in pod_spec(objects)
        return
    (quota,) = quotas
    (scope,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert scope == {"scopeName": "PriorityClass", "operator": "In",
                     "values": ["system-node-critical", "system-cluster-critical"]}
    assert int(quota["spec"]["hard"]["pods"]) >= 2 * the(objects, "Deployment")["spec"]["replicas"]


def test_webhook_values():
    objects = helm_template("webhook.enabled=true", "webhook.failurePolicy=Fail",
                            "webhook.certManager=false", "webhook.caBundle=Q0EK")
    hook = the(objects, "ValidatingWebhookConfiguration")
    (webhook,) = hook["webhooks"]
    assert webhook["failurePolicy"] == "Fail" and webhook["clientConfig"]["caBundle"] == "Q0EK"
    assert "annotations" not in hook["metadata"], "no cainjector without cert-manager"
    assert not [o for o in objects if o["kind"] in ("Issuer", "Certificate")]
    assert webhook["matchConditions"], "only objects carrying the annotation channel"
    env = {e["name"] for c in pod_spec(objects)["containers"] for e in c.get("env", [])}
    assert "EXTENDER_WEBHOOK_LISTEN" in env
    for obj in objects:
        validate(obj, "helm template webhook")
    missing = subprocess.run([tool("helm"), "template", "x", str(CHART), "--kube-version", CLUSTER,
                              "--set", "webhook.enabled=true", "--set", "webhook.certManager=false"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "webhook.caBundle" in missing.stderr


def test_the_webhook_port_is_open_to_the_api_servers_addresses_only():
    objects = helm_template("webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28,2001:db8::/64}")
    policy = the(objects, "NetworkPolicy")
    (rule,) = [r for r in policy["spec"]["ingress"] if r["ports"] == [{"port": 9443, "protocol": "TCP"}]]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "2001:db8::/64"}}]
    empty = subprocess.run([tool("helm"), "template", "x", str(CHART), "--kube-version", CLUSTER,
                            "--set", "webhook.enabled=true", "--set", "webhook.apiServerCIDRs=null"],
                           capture_output=True, text=True, timeout=120)
    assert empty.returncode != 0 and "webhook.apiServerCIDRs is empty" in empty.stderr


def compatibility_table() -> list[tuple[str, str]]:
    """(cluster version, kube-scheduler image or '' when refused) from upgrades.md."""
    text = UPGRADES.read_text()
    section = text[text.index("## Compatibility"):]
    rows = re.findall(r"^\| `(v[^`]+)` \| (`registry\.k8s\.io/kube-scheduler:[^`]+`|refused[^|]*) \|", section, re.M)
    return [(cluster, image.strip("`") if image.startswith("`") else "") for cluster, image in rows]


def test_the_compatibility_table_is_complete():
    rows = compatibility_table()
    minors = {int(c.split(".")[1]) for c, _ in rows}
    assert minors >= set(range(26, 36)), "every minor from the first refused one to the newest"
    assert any("-gke." in c for c, _ in rows) and any("-eks-" in c for c, _ in rows)


@pytest.mark.parametrize(("cluster", "image"), compatibility_table())
def test_kube_scheduler_follows_the_cluster_version(cluster, image):
    """Issue 25 item 3: never newer than the API server (version-skew policy)."""
    args = [tool("helm"), "template", "x", str(CHART), "--kube-version", cluster]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if not image:
        assert proc.returncode != 0 and "kubeVersion" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    objects = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert images(objects)["kube-scheduler"] == image
    assert image.rsplit(":", 1)[1] == re.match(r"v\d+\.\d+\.\d+", cluster).group(0)


def test_a_pinned_tag_wins_over_the_cluster_version():
    objects = helm_template("kubeScheduler.image.tag=v1.34.3", kube_version="v1.35.1")
    assert images(objects)["kube-scheduler"] == "registry.k8s.io/kube-scheduler:v1.34.3"
