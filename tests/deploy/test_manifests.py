"""The manifests: every overlay renders with a real kustomize, every object validates
strictly against the Kubernetes 1.35 OpenAPI schemas, and the deployment keeps the
promises the README makes (sidecar on loopback, least privilege, hardened pods)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from deploy_tools import MANIFESTS, kubectl, run, validate
from schedconfig import check_scheduler_config

from extender.config import build_config

OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())
# Objects of these kinds are validated as files of their own (not by the API schemas).
NOT_API_OBJECTS = {"Kustomization", "Component", "KubeSchedulerConfiguration"}


def render(overlay: str) -> list[dict]:
    out = run([kubectl(), "kustomize", str(MANIFESTS / "overlays" / overlay)])
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]


def the(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = by_kind(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(pod_spec: dict, name: str) -> dict:
    (found,) = [c for c in pod_spec["containers"] if c["name"] == name]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_validates(overlay):
    objects = render(overlay)
    assert objects, f"{overlay} renders nothing"
    for obj in objects:
        validate(obj, f"overlays/{overlay}")


def test_the_expected_overlays_exist():
    assert set(OVERLAYS) >= {"second-scheduler", "replace-default", "with-prometheus-operator",
                             "with-webhook"}


def manifest_files() -> list[Path]:
    return sorted(p for p in MANIFESTS.rglob("*.yaml") if "components/webhook" not in p.as_posix())


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_every_manifest_file_validates(path):
    """Each file on its own: API objects strictly, scheduler configs by their types,
    extender configs by the extender's own loader, rule files by promtool (elsewhere)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, f"{path} is empty"
    for doc in docs:
        kind = doc.get("kind")
        if kind == "KubeSchedulerConfiguration":
            assert check_scheduler_config(doc) == []
        elif kind in NOT_API_OBJECTS or path.parent.name == "prometheus":
            continue
        elif path.name == "extender.yaml":
            build_config({}, env={}, config_file=str(path))
        elif path.name.startswith("extender-") and path.parent.parent.name == "overlays":
            continue  # a strategic-merge patch, validated in the rendered overlay
        else:
            validate(doc, str(path.relative_to(MANIFESTS)))


# --- the second-scheduler topology ---------------------------------------------------

@pytest.fixture(scope="module")
def second() -> list[dict]:
    return render("second-scheduler")


def config_files(objects: list[dict]) -> tuple[dict, dict]:
    cm = the(objects, "ConfigMap")
    assert cm["metadata"]["name"].startswith("extended-scheduler-config-"), "hash suffix rolls the pods"
    return (yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"]),
            yaml.safe_load(cm["data"]["extender.yaml"]))


def test_scheduler_config_is_the_second_scheduler_with_the_sidecar(second):
    sched, ext = config_files(second)
    assert check_scheduler_config(sched) == []
    (profile,) = sched["profiles"]
    assert profile["schedulerName"] == "extended-scheduler" == ext["schedulerProfile"]
    disabled = {p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]}
    assert disabled == {"TaintToleration", "NodeAffinity", "NodeUnschedulable", "PodTopologySpread"}
    assert sched["percentageOfNodesToScore"] == 100
    assert sched["leaderElection"]["resourceName"] == "extended-scheduler"
    assert sched["leaderElection"]["resourceNamespace"] == "scheduling-extender"
    (extender,) = sched["extenders"]
    host, port = ext["listen"].rsplit(":", 1)
    assert host == "127.0.0.1", "the verbs listen on loopback only"
    assert extender["urlPrefix"].startswith(f"http://127.0.0.1:{port}/")
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"],
            extender["preemptVerb"]) == ("filter", "prioritize", "bind", "preempt")
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is False
    assert "managedResources" not in extender, "scoping is by schedulerName"
    # score mode and extender weight go together (README "Scores")
    assert (ext["scoreMode"], extender["weight"]) == ("in-tree", 1)


def test_extender_config_in_the_configmap_loads(second, tmp_path):
    _, ext = config_files(second)
    path = tmp_path / "extender.yaml"
    path.write_text(yaml.safe_dump(ext))
    config = build_config({}, env={}, config_file=str(path))
    assert (config.listen, config.scheduler_profile, config.score_mode) == (
        "127.0.0.1:8888", "extended-scheduler", "in-tree")


def test_deployment_topology(second):
    dep = the(second, "Deployment", "extended-scheduler")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert "schedulerName" not in pod, "its own pods use the default scheduler: no bootstrap deadlock"
    assert [c["name"] for c in pod["containers"]] == ["kube-scheduler", "extender"]
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert "kubernetes.io/hostname" in keys
    sched = container(pod, "kube-scheduler")
    cm = the(second, "ConfigMap")
    assert any(v.get("configMap", {}).get("name") == cm["metadata"]["name"] for v in pod["volumes"])
    assert "--config=/etc/extended-scheduler/kube-scheduler-config.yaml" in sched["command"]
    ext = container(pod, "extender")
    assert "--in-cluster" in ext["args"] and "--metrics-listen=0.0.0.0:8889" in ext["args"]
    assert [p["containerPort"] for p in ext["ports"]] == [8889], "no port for the loopback verbs"
    pdb = the(second, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("overlay", ["second-scheduler", "replace-default"])
def test_pods_are_hardened(overlay):
    for obj in render(overlay):
        if obj["kind"] not in ("Deployment", "Pod"):
            continue
        pod = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj["spec"]
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert "limits" in c["resources"] and "requests" in c["resources"], c["name"]


def test_rbac_is_least_privilege(second):
    role = the(second, "ClusterRole", "scheduling-extender")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    watch = {("", k) for k in ("nodes", "pods", "services", "replicationcontrollers", "persistentvolumes",
                               "persistentvolumeclaims")} | {
        ("apps", k) for k in ("replicasets", "statefulsets")}
    expected = {(g, r, v) for g, r in watch for v in ("get", "list", "watch")}
    expected |= {("", "pods/binding", "create")}
    expected |= {(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch", "update")}
    assert granted == expected
    assert all("*" not in str(rule) for o in by_kind(second, "Role") + by_kind(second, "ClusterRole")
               for rule in o["rules"])
    bound = {b["roleRef"]["name"] for b in by_kind(second, "ClusterRoleBinding")}
    assert bound == {"system:kube-scheduler", "system:volume-scheduler", "scheduling-extender"}
    sa = the(second, "ServiceAccount")["metadata"]
    for binding in by_kind(second, "ClusterRoleBinding") + by_kind(second, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"],
                                        "namespace": sa["namespace"]}]
    reader = the(second, "RoleBinding", "extended-scheduler-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    lease = the(second, "Role", "extended-scheduler-leader-election")
    assert {"extended-scheduler"} == {n for r in lease["rules"] for n in r.get("resourceNames", [])}


def test_network_policy_admits_only_metrics(second):
    policy = the(second, "NetworkPolicy")
    ports = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert ports == [8889]
    dep = the(second, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items()


def test_metrics_service_selects_the_pods(second):
    svc = the(second, "Service", "extended-scheduler-metrics")
    labels = the(second, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert [p["port"] for p in svc["spec"]["ports"]] == [8889]


# --- the other overlays --------------------------------------------------------------

def test_replace_default_is_a_static_pod_on_loopback():
    objects = render("replace-default")
    pod = the(objects, "Pod", "scheduling-extender")
    assert pod["metadata"]["namespace"] == "kube-system" and pod["spec"]["hostNetwork"] is True
    directory = MANIFESTS / "overlays" / "replace-default"
    sched = yaml.safe_load((directory / "kube-scheduler-config.yaml").read_text())
    assert check_scheduler_config(sched) == []
    assert [p["schedulerName"] for p in sched["profiles"]] == ["default-scheduler"]
    config = build_config({}, env={}, config_file=str(directory / "extender.yaml"))
    assert config.listen.startswith("127.0.0.1:") and config.score_mode == "in-tree"
    assert sched["extenders"][0]["urlPrefix"].startswith(f"http://{config.listen}/")
    assert config.scheduler_profile == "default-scheduler"


def test_prometheus_operator_overlay_adds_monitor_and_rules():
    objects = render("with-prometheus-operator")
    monitor = the(objects, "ServiceMonitor")
    svc = the(objects, "Service", "extended-scheduler-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert svc["metadata"]["labels"]["app.kubernetes.io/name"] == "scheduling-extender", \
        "the rules select job=scheduling-extender"
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    rule = the(objects, "PrometheusRule")
    plain = yaml.safe_load((MANIFESTS / "prometheus" / "rules.yaml").read_text())
    assert rule["spec"] == plain, "regenerate with `python -m tests.deploy.regen`"


def test_webhook_overlay_turns_the_listener_on():
    objects = render("with-webhook")
    pod = the(objects, "Deployment")["spec"]["template"]["spec"]
    ext = container(pod, "extender")
    env = {e["name"]: e["value"] for e in ext["env"]}
    assert env["EXTENDER_WEBHOOK_LISTEN"] == "0.0.0.0:9443"
    assert sorted(p["containerPort"] for p in ext["ports"]) == [8889, 9443]
    policy = the(objects, "NetworkPolicy")
    assert sorted(p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]) == [8889, 9443]


def test_grafana_dashboard_is_shipped_with_the_operator_overlay():
    import json

    path = MANIFESTS / "components" / "prometheus-operator" / "grafana-dashboard.json"
    dashboard = json.loads(path.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert all(p["datasource"]["uid"] == "${datasource}" and p["targets"] for p in panels)
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("evaluations by status", "latency", "rejections", "cel program cache hit",
                  "cluster state"):
        assert topic in titles
    cm = the(render("with-prometheus-operator"), "ConfigMap", "scheduling-extender-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["scheduling-extender.json"]) == dashboard
