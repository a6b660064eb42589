"""The manifests: every overlay renders with a real kustomize, every object validates
strictly against the Kubernetes 1.35 OpenAPI schemas, and the deployment keeps the
promises docs/operate/ makes (sidecar on loopback, least privilege, hardened pods, HA
through the sidecar's health, kube-scheduler monitored, GKE's quota, kubeadm upgrades)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_tools import MANIFESTS, kubectl, run, validate
from schedconfig import check_scheduler_config

from extender.config import build_config
from testing.overlays import WEBHOOK_CIDR, overlay_dir, set_webhook_cidr

OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())
# Objects of these kinds are validated as files of their own (not by the API schemas).
NOT_API_OBJECTS = {"Kustomization", "Component", "KubeSchedulerConfiguration", "ClusterConfiguration",
                   "DeschedulerPolicy"}  # the descheduler's, checked by test_descheduler.py
REPLACE_DEFAULT = MANIFESTS / "overlays" / "replace-default"
EXTENDER_DIR = "/etc/kubernetes/scheduling-extender"


def render(overlay: str) -> list[dict]:
    out = run([kubectl(), "kustomize", str(overlay_dir(overlay))])
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
        elif kind == "ClusterConfiguration":
            check_kubeadm_scheduler(doc)
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
    assert profile["schedulerName"] == "extended-scheduler"
    assert ext["schedulerConfig"] == "kube-scheduler-config.yaml", "the same file, beside extender.yaml"
    assert "schedulerProfile" not in ext and "pluginConfig" not in ext, "deprecated single-profile settings"
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
    sched, ext = config_files(second)
    path = tmp_path / "extender.yaml"
    path.write_text(yaml.safe_dump(ext))
    (tmp_path / "kube-scheduler-config.yaml").write_text(yaml.safe_dump(sched))
    config = build_config({}, env={}, config_file=str(path))
    assert (config.listen, config.score_mode) == ("127.0.0.1:8888", "in-tree")
    (profile,) = config.profiles().profiles.values()
    assert profile.name == "extended-scheduler" and len(profile.delegated) == 4


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
    assert pod["priorityClassName"] == "system-cluster-critical"
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
        if overlay == "replace-default":  # root, to read scheduler.conf (0600), with no capability
            assert psc["runAsUser"] == 0 and "runAsNonRoot" not in psc
            assert [c["securityContext"]["privileged"] for c in pod["containers"]] == [False]
        else:
            assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert "limits" in c["resources"] and "requests" in c["resources"], c["name"]


def test_probes_tie_kube_scheduler_to_its_sidecar(second):
    """Issue 25 item 5: a leader whose extender is down must give the lease up. The
    kubelet restarts kube-scheduler when the extender's /healthz fails (liveness), and
    waits for the extender before probing at all (startup); kube-scheduler's own
    readiness stays its own health (/healthz: /readyz is served only from v1.31)."""
    pod = the(second, "Deployment")["spec"]["template"]["spec"]
    sched, ext = container(pod, "kube-scheduler"), container(pod, "extender")
    metrics_port = {p["name"]: p["containerPort"] for p in ext["ports"]}["metrics"]
    for probe in ("startupProbe", "livenessProbe"):
        get = sched[probe]["httpGet"]
        # by number: the kubelet looks a name up in kube-scheduler's own ports only
        assert get["path"] == "/healthz" and get["port"] == metrics_port, probe
        assert get.get("scheme", "HTTP") == "HTTP" and "host" not in get
    live = sched["livenessProbe"]
    detection = live["periodSeconds"] * live.get("failureThreshold", 3)
    assert detection <= 15, f"a dead sidecar stalls the profile {detection} s before the restart"
    assert sched["startupProbe"]["periodSeconds"] * sched["startupProbe"]["failureThreshold"] >= \
        ext["startupProbe"]["periodSeconds"] * ext["startupProbe"]["failureThreshold"], \
        "kube-scheduler may not be restarted while its extender is still allowed to start"
    assert sched["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}
    assert ext["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ext["readinessProbe"]["httpGet"]["path"] == "/readyz", "ready once the state is loaded"


def test_resources_leave_room_for_the_advertised_scale(second):
    """Issue 25 item 10 (docs/operate/sizing.md): kube-scheduler caches every pod and node."""
    pod = the(second, "Deployment")["spec"]["template"]["spec"]

    def mib(quantity: str) -> float:
        units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
        return float(quantity[:-2]) * units[quantity[-2:]]

    sched = container(pod, "kube-scheduler")["resources"]
    assert mib(sched["limits"]["memory"]) >= 2048 and mib(sched["requests"]["memory"]) >= 512
    ext = container(pod, "extender")["resources"]
    assert mib(ext["limits"]["memory"]) >= 1024


def test_the_scheduler_image_is_an_overlay_variable():
    """Issue 25 item 3: the base names no version; every overlay that runs kube-scheduler
    sets it to a real one (the API server's: never newer)."""
    base = (MANIFESTS / "base" / "deployment.yaml").read_text()
    assert "registry.k8s.io/kube-scheduler:SET-TO-YOUR-CLUSTER-VERSION" in base
    import re

    for overlay in OVERLAYS:
        for obj in render(overlay):
            if obj["kind"] != "Deployment":
                continue
            for c in obj["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "kube-scheduler":
                    assert re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.\d+\.\d+", c["image"]), overlay


def test_a_resource_quota_admits_the_critical_class_on_gke(second):
    """Issue 25 item 2: GKE admits system-*-critical pods outside kube-system only where a
    ResourceQuota covers exactly the scope it limits."""
    quota = the(second, "ResourceQuota")
    dep = the(second, "Deployment")
    assert quota["metadata"]["namespace"] == dep["metadata"]["namespace"]
    (scope,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert scope == {"scopeName": "PriorityClass", "operator": "In",
                     "values": ["system-node-critical", "system-cluster-critical"]}
    assert dep["spec"]["template"]["spec"]["priorityClassName"] in scope["values"]
    assert int(quota["spec"]["hard"]["pods"]) >= dep["spec"]["replicas"] + 1


def test_kube_scheduler_is_scraped_with_delegated_auth(second):
    """Issue 25 item 6: its secure port authenticates scrapes through the API server."""
    svc = the(second, "Service", "extended-scheduler-kube-scheduler")
    labels = the(second, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(10259, "https-sched")]
    assert svc["metadata"]["labels"]["app.kubernetes.io/name"] == "extended-scheduler", "its own job label"
    delegator = the(second, "ClusterRoleBinding", "extended-scheduler-auth-delegator")
    assert delegator["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                    "name": "system:auth-delegator"}
    sched = container(the(second, "Deployment")["spec"]["template"]["spec"], "kube-scheduler")
    assert "--bind-address=0.0.0.0" in sched["command"], "reachable by the scraper"


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
    assert bound == {"system:kube-scheduler", "system:volume-scheduler", "system:auth-delegator",
                     "scheduling-extender"}
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
    assert ports == [8889, 10259], "the extender's and kube-scheduler's metrics"
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
    ext = container(pod["spec"], "extender")
    # issue 25 item 8: on the host network 0.0.0.0 is every address of the node
    assert "--metrics-listen=127.0.0.1:8889" in ext["args"]
    assert not [a for a in ext["args"] if "0.0.0.0" in a]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ext[probe]["httpGet"]["host"] == "127.0.0.1" and ext[probe]["httpGet"]["port"] == 8889
    assert {v["hostPath"]["path"] for v in pod["spec"]["volumes"] if "hostPath" in v} == \
        {EXTENDER_DIR, "/etc/kubernetes/scheduler.conf"}
    # kube-scheduler's own kubeconfig, the very file kubeadm renews (a copy would expire),
    # mounted as kube-scheduler's static pod mounts it: the file alone, read-only
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "kubeconfig"]
    assert volume["hostPath"] == {"path": "/etc/kubernetes/scheduler.conf", "type": "File"}
    assert {"name": "kubeconfig", "mountPath": "/etc/kubernetes/scheduler.conf", "readOnly": True} in ext["volumeMounts"]
    assert "--kubeconfig=/etc/kubernetes/scheduler.conf" in ext["args"]
    assert not [m for m in ext["volumeMounts"] if m["mountPath"] in ("/etc/kubernetes", "/etc/kubernetes/pki")]
    directory = REPLACE_DEFAULT
    sched = yaml.safe_load((directory / "kube-scheduler-config.yaml").read_text())
    assert check_scheduler_config(sched) == []
    assert [p["schedulerName"] for p in sched["profiles"]] == ["default-scheduler"]
    config = build_config({}, env={}, config_file=str(directory / "extender.yaml"))
    assert config.listen.startswith("127.0.0.1:") and config.score_mode == "in-tree"
    assert sched["extenders"][0]["urlPrefix"].startswith(f"http://{config.listen}/")
    assert list(config.profiles().profiles) == ["default-scheduler"]


def check_kubeadm_scheduler(doc: dict) -> None:
    """kubeadm's ClusterConfiguration `scheduler:` part (v1beta3 map or v1beta4 list of
    extraArgs), with exactly the fields kubeadm knows (a typo would be dropped silently)."""
    assert doc["apiVersion"] in ("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4")
    assert set(doc) == {"apiVersion", "kind", "scheduler"}
    scheduler = doc["scheduler"]
    assert set(scheduler) == {"extraArgs", "extraVolumes"}
    args = scheduler["extraArgs"]
    if doc["apiVersion"].endswith("v1beta4"):
        assert all(set(a) == {"name", "value"} for a in args)
        args = {a["name"]: a["value"] for a in args}
    assert args == {"config": f"{EXTENDER_DIR}/kube-scheduler-config.yaml"}
    (volume,) = scheduler["extraVolumes"]
    assert set(volume) == {"name", "hostPath", "mountPath", "readOnly", "pathType"}
    assert volume["hostPath"] == volume["mountPath"] == EXTENDER_DIR
    assert volume["readOnly"] is True and volume["pathType"] == "Directory"


def test_replace_default_survives_kubeadm_upgrade():
    """Issue 25 item 8: `kubeadm upgrade` regenerates kube-scheduler.yaml from the
    ClusterConfiguration; the --config flag and its mount must come from there."""
    docs = {p.name: yaml.safe_load(p.read_text()) for p in REPLACE_DEFAULT.glob("kubeadm-scheduler*.yaml")}
    assert set(docs) == {"kubeadm-scheduler.yaml", "kubeadm-scheduler-v1beta3.yaml"}
    for doc in docs.values():
        check_kubeadm_scheduler(doc)
    assert (REPLACE_DEFAULT / "kube-scheduler-config.yaml").is_file()


def test_prometheus_operator_overlay_adds_monitor_and_rules():
    objects = render("with-prometheus-operator")
    monitor = the(objects, "ServiceMonitor", "scheduling-extender")
    svc = the(objects, "Service", "extended-scheduler-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert svc["metadata"]["labels"]["app.kubernetes.io/name"] == "scheduling-extender", \
        "the rules select job=scheduling-extender"
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    sched_monitor = the(objects, "ServiceMonitor", "extended-scheduler")
    sched_svc = the(objects, "Service", "extended-scheduler-kube-scheduler")
    assert sched_monitor["spec"]["selector"]["matchLabels"].items() <= sched_svc["metadata"]["labels"].items()
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= sched_svc["metadata"]["labels"].items(), \
        "one job per component"
    (endpoint,) = sched_monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("https-sched", "https")
    # delegated authentication with a token of its own (bearerTokenFile is deprecated)
    assert "bearerTokenFile" not in endpoint
    credentials = endpoint["authorization"]["credentials"]
    secret = the(objects, "Secret", credentials["name"])
    assert secret["type"] == "kubernetes.io/service-account-token" and credentials["key"] == "token"
    reader = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    binding = the(objects, "ClusterRoleBinding", "scheduling-extender-metrics-reader")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": reader, "namespace": "scheduling-extender"}]
    role = the(objects, "ClusterRole", binding["roleRef"]["name"])
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
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
    assert sorted(p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]) == [8889, 9443, 10259]
    # 9443 from the API server's addresses only (issue #35: the rule had no `from`): the
    # CIDR the user set (testing.overlays sets it in a copy of manifests/)
    (webhook,) = [r for r in policy["spec"]["ingress"] if r["ports"] == [{"port": 9443, "protocol": "TCP"}]]
    assert webhook["from"] == [{"ipBlock": {"cidr": WEBHOOK_CIDR}}]
    assert not by_kind(objects, "ConfigMap", "webhook-api-server-cidr"), "read by kustomize, never applied"


def test_the_webhook_overlay_does_not_build_until_its_cidr_is_set(tmp_path):
    """No placeholder CIDR ships: one that matches nothing makes the NetworkPolicy drop the
    API server's calls, and every write the webhook matches wait timeoutSeconds. The
    shipped overlay refuses to build, naming what is missing; set, its CIDR is the one
    rule that admits 9443."""
    proc = subprocess.run([kubectl(), "kustomize", str(MANIFESTS / "overlays" / "with-webhook")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and not proc.stdout
    assert "fieldPath `data.cidr` is missing for replacement source" in proc.stderr, proc.stderr
    assert "webhook-api-server-cidr" in proc.stderr
    # a user's overlay that takes the component without the ConfigMap fails too
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy)
    own = copy / "overlays" / "own"
    own.mkdir()
    (own / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["../second-scheduler"], "components": ["../../components/webhook"]}))
    proc = subprocess.run([kubectl(), "kustomize", str(own)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "webhook-api-server-cidr" in proc.stderr, proc.stderr
    # set: exactly that CIDR, in the rule for 9443, and no placeholder anywhere
    set_webhook_cidr(copy, "10.20.0.0/16")
    objects = [d for d in yaml.safe_load_all(run([kubectl(), "kustomize", str(copy / "overlays" / "with-webhook")])) if d]
    policy = the(objects, "NetworkPolicy", "extended-scheduler")
    rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in policy["spec"]["ingress"]}
    assert rules[(9443,)] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    assert "192.0.2" not in yaml.safe_dump_all(objects) and "THE-API-SERVER-CIDR" not in yaml.safe_dump_all(objects)


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


def test_a_changed_scheduler_configuration_rolls_both_containers(tmp_path):
    """Neither process re-reads its configuration: kube-scheduler never does, and the
    extender applies `--scheduler-config` (as its own file) at start, so the two always
    run the same profiles. A change reaches both through a new pod: the ConfigMap's name
    carries a hash of both files, the Deployment names it, and both containers mount it."""
    import shutil

    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy)
    before = run([kubectl(), "kustomize", str(copy / "overlays" / "second-scheduler")])
    config = copy / "base" / "kube-scheduler-config.yaml"
    config.write_text(config.read_text().replace("minCandidateNodesAbsolute: 100", "minCandidateNodesAbsolute: 50"))
    after = run([kubectl(), "kustomize", str(copy / "overlays" / "second-scheduler")])
    names = []
    for text in (before, after):
        objects = [doc for doc in yaml.safe_load_all(text) if doc]
        name = the(objects, "ConfigMap")["metadata"]["name"]
        spec = the(objects, "Deployment")["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v.get("configMap")]
        assert volume["configMap"]["name"] == name
        mounts = {c["name"]: {m["name"] for m in c.get("volumeMounts", [])} for c in spec["containers"]}
        assert all(volume["name"] in mounts[c] for c in ("kube-scheduler", "extender")), mounts
        names.append(name)
    assert names[0] != names[1]
