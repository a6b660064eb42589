"""The Helm chart (charts/scheduling-extender), a chart of its own beside the kustomize
manifests: a real `helm` lints and renders it; for the same choices it renders the same
objects as the overlays, up to names and labels (the decision: both are kept, this test
keeps them together; docs/operate/deploy.md); what it renders validates strictly against
Kubernetes 1.30 and 1.35, for any release name, and two releases share no object; its
values take effect (every `extender serve` flag included, walked from `--help`); the
schema refuses wrong values; kube-scheduler follows the cluster version as the
compatibility table in docs/operate/upgrades.md says (Argo CD's `v1.34` included)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import regen
import yaml
from deploy_tools import ROOT, kubectl, run, tool, validate

from extender.cli import build_parser
from extender.config import SETTINGS, build_config, flag_name
from testing.overlays import overlay_dir

CHART = ROOT / "charts" / "scheduling-extender"
NAMESPACE = "scheduling-extender"
CLUSTER = "v1.35.0"  # the overlays' kube-scheduler tag
UPGRADES = ROOT / "docs" / "operate" / "upgrades.md"
IMAGE = ("image.repository=registry.example.com/scheduling-extender", "image.tag=0.1.0")
ALL_ON = ("explain.enabled=true", "explain.apiServerCIDRs={10.0.0.0/28}", "drift.enabled=true",
          "webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28}",
          "prometheusOperator.serviceMonitor.enabled=true", "prometheusOperator.prometheusRule.enabled=true",
          "prometheusOperator.dashboard.enabled=true")


def helm_template(*values: str, release: str = "scheduling-extender", namespace: str = NAMESPACE,
                  kube_version: str = CLUSTER, tests: bool = False, values_file: Path | None = None) -> list[dict]:
    args = [tool("helm"), "template", release, str(CHART), "--namespace", namespace,
            "--kube-version", kube_version]
    if not tests:
        args.append("--skip-tests")
    if values_file is not None:
        args += ["-f", str(values_file)]
    for value in values:  # `json:KEY=JSON` for --set-json
        args += ["--set-json", value[5:]] if value.startswith("json:") else ["--set", value]
    return [doc for doc in yaml.safe_load_all(run(args)) if doc]


def helm_refuses(*values: str) -> str:
    args = [tool("helm"), "template", "x", str(CHART), "--kube-version", CLUSTER]
    for value in values:
        args += ["--set", value]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, f"rendered with {values}"
    return proc.stderr


def kustomize(overlay: str) -> list[dict]:
    out = run([kubectl(), "kustomize", str(overlay_dir(overlay))])
    return [doc for doc in yaml.safe_load_all(out) if doc]


def the(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(objects: list[dict]) -> dict:
    return the(objects, "Deployment")["spec"]["template"]["spec"]


def container(objects: list[dict], name: str) -> dict:
    (found,) = [c for c in pod_spec(objects)["containers"] if c["name"] == name]
    return found


def images(objects: list[dict]) -> dict[str, str]:
    return {c["name"]: c["image"] for c in pod_spec(objects)["containers"]}


def extender_config(objects: list[dict]) -> dict:
    return yaml.safe_load(the(objects, "ConfigMap", "scheduling-extender-config")["data"]["extender.yaml"])


def identities(objects: list[dict]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects}


# --- the same objects as the kustomize overlays, up to names and labels ------------------

F = "team-a-scheduling-extender"  # the full name of release team-a
# kustomize name -> the chart's (release team-a); the many-to-one entries are objects of
# different kinds that kustomize names differently and the chart after the release
RENAMED = {
    "extended-scheduler": F, "scheduling-extender": F,
    "extended-scheduler-as-kube-scheduler": f"{F}-as-kube-scheduler",
    "extended-scheduler-as-volume-scheduler": f"{F}-as-volume-scheduler",
    "extended-scheduler-auth-delegator": f"{F}-auth-delegator",
    "extended-scheduler-authentication-reader": f"{F}-authentication-reader",
    "extended-scheduler-leader-election": f"{F}-leader-election",
    "extended-scheduler-critical-pods": f"{F}-critical-pods",
    "extended-scheduler-metrics": f"{F}-metrics",
    "extended-scheduler-kube-scheduler": f"{F}-kube-scheduler",
    "extended-scheduler-config": f"{F}-config",
    "scheduling-extender-explain": f"{F}-explain", "extended-scheduler-explain": f"{F}-explain",
    "scheduling-extender-webhook": f"{F}-webhook", "scheduling-extender-webhook-tls": f"{F}-webhook-tls",
    "scheduling-extender-selfsigned": f"{F}-selfsigned",
    "extended-scheduler-metrics-reader": f"{F}-metrics-reader",
    "scheduling-extender-metrics-reader": f"{F}-metrics-reader",
    "scheduling-extender-dashboard": f"{F}-dashboard",
}
# objects kustomize names otherwise than by RENAMED's rule (kind, kustomize name) -> chart's
RENAMED_OBJECTS = {("ServiceMonitor", "extended-scheduler"): f"{F}-kube-scheduler"}
NOT_NAMES = ("namespace", "resourceNamespace", "matchNames", "values", "schedulerName", "schedulerProfile", "jobLabel")


def rename(value, key: str = ""):
    """A kustomize object's names as the chart names them (namespaces and job names stay)."""
    if isinstance(value, dict):
        return {k: rename(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [rename(v, key) for v in value]
    if not isinstance(value, str) or key in NOT_NAMES:
        return value
    value = re.sub(r"^(extended-scheduler-config)-[a-z0-9]{10}$", r"\1", value)  # the content hash
    if value in RENAMED:
        return RENAMED[value]
    if m := re.fullmatch(r"([-a-z0-9]+)(:metrics|\.scheduling-extender\.svc.*)", value):
        return RENAMED.get(m.group(1), m.group(1)) + m.group(2)
    if m := re.fullmatch(r"scheduling-extender/([-a-z0-9]+)", value):
        return f"scheduling-extender/{RENAMED.get(m.group(1), m.group(1))}"
    return value


def unlabelled(value, key: str = ""):
    """Without labels, label selectors and the chart's checksum annotation."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("labels", "matchLabels", "selector", "podSelector") or k.startswith("checksum/"):
                continue
            if k == "from":  # a source selected by labels only (the chart's `helm test` pod)
                out[k] = [unlabelled(s) for s in v if set(s) != {"podSelector"}]
            else:
                out[k] = unlabelled(v, k)
        return {k: v for k, v in out.items() if v != {}}
    if isinstance(value, list):
        items = [unlabelled(v, key) for v in value]
        if items and all(isinstance(i, dict) and "name" in i for i in items):
            return sorted(items, key=lambda i: str(i["name"]))  # strategic merge reorders
        return items
    return value


def comparable(objects: list[dict], chart: bool) -> dict:
    out = {}
    for obj in objects:
        if obj["kind"] == "Namespace":
            continue  # the release's namespace is Helm's (--create-namespace)
        if obj["kind"] == "ConfigMap":  # the configuration files, parsed
            obj = {**obj, "data": {k: yaml.safe_load(v) if k.endswith(".yaml") else v
                                   for k, v in obj["data"].items()}}
        if not chart:
            kind, name = obj["kind"], obj["metadata"]["name"]
            obj = rename(obj)
            obj["metadata"]["name"] = RENAMED_OBJECTS.get((kind, name), obj["metadata"]["name"])
        out[(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = unlabelled(obj)
    return out


# The overlays' choices as values (with-webhook's CIDR: the one testing.overlays sets; with-explain's: its placeholder).
SAME_CHOICES = [
    ((), "second-scheduler"),
    (("prometheusOperator.serviceMonitor.enabled=true", "prometheusOperator.prometheusRule.enabled=true",
      "prometheusOperator.dashboard.enabled=true", "prometheusOperator.serviceMonitor.labels.release=kube-prometheus-stack",
      "prometheusOperator.prometheusRule.labels.release=kube-prometheus-stack"), "with-prometheus-operator"),
    (("webhook.enabled=true", "webhook.apiServerCIDRs={192.0.2.0/24}"), "with-webhook"),
    (("explain.enabled=true", "explain.apiServerCIDRs={192.0.2.0/24}"), "with-explain"),
]


@pytest.mark.parametrize(("values", "overlay"), SAME_CHOICES, ids=[o for _, o in SAME_CHOICES])
def test_the_chart_and_the_overlay_render_the_same_objects(values, overlay):
    chart = comparable(helm_template(*IMAGE, *values, release="team-a"), chart=True)
    overlay_objects = comparable(kustomize(overlay), chart=False)
    assert chart.keys() == overlay_objects.keys()
    for key, obj in chart.items():
        assert obj == overlay_objects[key], f"{key} differs: {first_difference(obj, overlay_objects[key])}"


def first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if a.get(k, "<missing>") != b.get(k, "<missing>"):
                return first_difference(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path}: chart {a!r} != overlay {b!r}"


def test_the_prometheus_operator_objects_carry_the_labels_given():
    objects = helm_template(*ALL_ON, "prometheusOperator.serviceMonitor.labels.prometheus=platform",
                            "prometheusOperator.prometheusRule.labels.role=alert-rules",
                            "prometheusOperator.dashboard.labels.dashboards=team")
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        assert monitor["metadata"]["labels"]["prometheus"] == "platform"
    assert the(objects, "PrometheusRule")["metadata"]["labels"]["role"] == "alert-rules"
    dashboard = the(objects, "ConfigMap", "scheduling-extender-dashboard")["metadata"]["labels"]
    assert dashboard["dashboards"] == "team" and dashboard["grafana_dashboard"] == "1"
    defaults = helm_template(*ALL_ON)
    assert not any("release" in o["metadata"]["labels"] for o in defaults), "no fixed release label"


def test_generated_files_are_current():
    stale = [str(p.relative_to(ROOT)) for p, text in regen.expected().items() if p.read_text() != text]
    assert not stale, f"run `python -m tests.deploy.regen`; stale: {stale}"


def test_the_readme_documents_every_value():
    rows = {key for key, _, _ in regen.values_rows((CHART / "values.yaml").read_text())}
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(value, prefix=""):
        if isinstance(value, dict) and value and prefix not in rows:
            for k, v in value.items():
                yield from leaves(v, f"{prefix}.{k}" if prefix else k)
        else:
            yield prefix

    undocumented = [k for k in leaves(values) if k not in rows]
    assert not undocumented, f"values without a `# --` comment: {undocumented}"
    readme = (CHART / "README.md").read_text()
    assert all(f"| `{key}` |" in readme for key in rows)


# --- helm lint, strict validation, release names ------------------------------------------

def test_helm_lints_the_chart_strictly():
    for values in ((), ALL_ON):
        args = [tool("helm"), "lint", "--strict", str(CHART), "--kube-version", CLUSTER]
        for value in values:
            args += ["--set", value]
        assert "0 chart(s) failed" in run(args)


@pytest.mark.parametrize("k8s", ["1.30", "1.35"])
@pytest.mark.parametrize("release", ["scheduling-extender", "platform-sched"])
@pytest.mark.parametrize("values", [(), ALL_ON], ids=["defaults", "everything"])
def test_renders_validate_strictly(k8s, release, values):
    objects = helm_template(*IMAGE, *values, release=release, namespace="platform",
                            kube_version=f"v{k8s}.2", tests=True)
    assert any(o["kind"] == "Deployment" for o in objects)
    for obj in objects:
        validate(obj, f"helm template {release} {' '.join(values)}", version=k8s)


def test_two_releases_share_no_object():
    a = helm_template(*ALL_ON, release="team-a", namespace="platform", tests=True)
    b = helm_template(*ALL_ON, "schedulerName=team-b-scheduler", release="team-b", namespace="platform", tests=True)
    assert not identities(a) & identities(b)
    for objects, release in ((a, "team-a"), (b, "team-b")):
        config = yaml.safe_load(the(objects, "ConfigMap", f"{release}-scheduling-extender-config")["data"]
                                ["kube-scheduler-config.yaml"])
        assert config["leaderElection"]["resourceName"] == f"{release}-scheduling-extender"
        for obj in objects:
            assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == release
            assert obj["metadata"]["labels"]["helm.sh/chart"].startswith("scheduling-extender-")
        for key in ("selector",):
            assert the(objects, "Deployment")["spec"][key]["matchLabels"]["app.kubernetes.io/instance"] == release
    # the two kube-scheduler ServiceMonitors select their own release's Service only
    monitors = [m for m in a if m["kind"] == "ServiceMonitor"]
    assert all(m["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "team-a" for m in monitors)


def test_name_overrides():
    objects = helm_template("fullnameOverride=sched", release="whatever")
    assert {o["metadata"]["name"] for o in objects if o["kind"] in ("Deployment", "ServiceAccount", "ClusterRole")} == {"sched"}
    objects = helm_template("nameOverride=ext", release="blue")
    deployment = the(objects, "Deployment")
    assert deployment["metadata"]["name"] == "blue-ext"
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "ext"
    # the metrics Services keep the Prometheus job names the rules read
    jobs = {o["metadata"]["labels"]["app.kubernetes.io/name"] for o in objects if o["kind"] == "Service"}
    assert jobs == {"scheduling-extender", "extended-scheduler"}


def test_no_namespace_object_everything_in_the_release_namespace():
    objects = helm_template(*ALL_ON, namespace="platform", tests=True)
    assert not [o for o in objects if o["kind"] == "Namespace"]
    text = yaml.safe_dump_all(objects)
    assert not re.search(rf"(namespace|resourceNamespace): {NAMESPACE}\b", text), "a fixed namespace is left"
    for obj in objects:
        ns = obj["metadata"].get("namespace")
        if ns is not None:
            assert ns == ("kube-system" if obj["kind"] == "RoleBinding" and ns == "kube-system" else "platform")
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "platform"
    hook = the(objects, "ValidatingWebhookConfiguration")
    service = hook["webhooks"][0]["clientConfig"]["service"]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"platform/{service['name']}"
    assert service["namespace"] == "platform" and the(objects, "Service", service["name"])
    (excluded,) = hook["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert excluded["values"] == ["kube-system", "platform"]
    assert the(objects, "Certificate")["spec"]["dnsNames"][0] == f"{service['name']}.platform.svc"


def test_every_reference_names_an_object_of_the_release():
    """ServiceAccount, ConfigMap, roles, Secrets and Services named in the objects exist."""
    objects = helm_template(*ALL_ON, tests=True)
    names = identities(objects)
    pod = pod_spec(objects)
    assert ("ServiceAccount", NAMESPACE, pod["serviceAccountName"]) in names
    (config,) = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
    assert ("ConfigMap", NAMESPACE, config) in names
    (tls,) = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert the(objects, "Certificate")["spec"]["secretName"] == tls
    for binding in [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        ref = binding["roleRef"]
        if not ref["name"].startswith(("system:", "extension-apiserver-")):
            ns = binding["metadata"]["namespace"] if ref["kind"] == "Role" else ""
            assert (ref["kind"], ns, ref["name"]) in names
        for subject in binding["subjects"]:
            assert ("ServiceAccount", subject["namespace"], subject["name"]) in names
    (proxy,) = the(objects, "Role", "scheduling-extender-explain")["rules"][0]["resourceNames"]
    assert ("Service", NAMESPACE, proxy.removesuffix(":metrics")) in names
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        selected = [s for s in objects if s["kind"] == "Service" and
                    monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(selected) == 1, monitor["metadata"]["name"]
        ports = {p["name"] for p in selected[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    labels = the(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for service in [o for o in objects if o["kind"] == "Service"]:
        assert service["spec"]["selector"].items() <= labels.items()


def test_helm_test_pod():
    objects = helm_template(tests=True)
    (test,) = [o for o in objects if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert test["kind"] == "Pod" and test["spec"]["restartPolicy"] == "Never"
    script = test["spec"]["containers"][0]["command"][-1]
    assert f"http://scheduling-extender-metrics.{NAMESPACE}.svc:8889/readyz" in script
    # the NetworkPolicy admits it to 8889
    policy = the(objects, "NetworkPolicy")
    sources = [s for rule in policy["spec"]["ingress"] for s in rule["from"]]
    assert {"podSelector": {"matchLabels": {k: test["metadata"]["labels"][k] for k in
                                            ("app.kubernetes.io/instance", "app.kubernetes.io/component")}}} in sources


# --- values -----------------------------------------------------------------------------

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
        "kubeScheduler.resources.limits.memory=3Gi", "extender.resources.requests.cpu=2",
        "priorityClassName=platform-critical", "podAnnotations.team=platform", "podLabels.tier=sched",
        "extender.env[0].name=EXTENDER_LOG_LEVEL", "extender.env[0].value=debug",
        "kubeScheduler.env[0].name=GOGC", "kubeScheduler.env[0].value=off",
        "extender.extraArgs[0]=--slim-answers=false", "kubeScheduler.extraArgs[0]=--kube-api-qps=100",
        "kubeScheduler.verbosity=4", "topologySpreadConstraints[0].maxSkew=2",
        "topologySpreadConstraints[0].topologyKey=zone", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "podSecurityContext.runAsUser=20002", "extender.securityContext.readOnlyRootFilesystem=false",
        "kubeScheduler.livenessProbe.failureThreshold=5", "extender.readinessProbe.periodSeconds=7",
        "serviceAccount.annotations.owner=platform", "schedulerName=team-scheduler")
    assert images(objects) == {"extender": "registry.local/ext:9.9.9", "kube-scheduler": "registry.local/ks:v1.36.1"}
    pod = pod_spec(objects)
    template = the(objects, "Deployment")["spec"]["template"]["metadata"]
    assert template["annotations"]["team"] == "platform" and template["labels"]["tier"] == "sched"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
    assert pod["topologySpreadConstraints"] == [{"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]
    assert pod["securityContext"]["runAsUser"] == 20002
    ext, sched = container(objects, "extender"), container(objects, "kube-scheduler")
    assert sched["resources"]["limits"]["memory"] == "3Gi" and ext["resources"]["requests"]["cpu"] == 2
    assert {"name": "EXTENDER_LOG_LEVEL", "value": "debug"} in ext["env"]
    assert sched["env"] == [{"name": "GOGC", "value": "off"}]
    assert ext["args"][-1] == "--slim-answers=false" and sched["command"][-2:] == ["--v=4", "--kube-api-qps=100"]
    assert ext["securityContext"]["readOnlyRootFilesystem"] is False
    assert sched["livenessProbe"]["failureThreshold"] == 5 and ext["readinessProbe"]["periodSeconds"] == 7
    assert pod["priorityClassName"] == "platform-critical"
    assert not [o for o in objects if o["kind"] == "ResourceQuota"], "a quota only for the critical classes"
    assert the(objects, "ServiceAccount")["metadata"]["annotations"] == {"owner": "platform"}
    config = yaml.safe_load(the(objects, "ConfigMap")["data"]["kube-scheduler-config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "team-scheduler"
    assert extender_config(objects)["schedulerConfig"] == "kube-scheduler-config.yaml"  # the file beside it
    for obj in objects:
        validate(obj, "helm template with values")


def test_defaults_carry_no_empty_scheduling_fields():
    pod = pod_spec(helm_template())
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity"} & pod.keys()
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert images(helm_template())["extender"] == "registry.example.com/scheduling-extender:0.1.0"
    assert "topologySpreadConstraints" not in pod_spec(helm_template("json:topologySpreadConstraints=[]"))


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_pdb_only_with_a_standby(replicas):
    objects = helm_template(f"replicas={replicas}")
    assert the(objects, "Deployment")["spec"]["replicas"] == replicas
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert [p["spec"]["minAvailable"] for p in pdbs] == ([] if replicas == 1 else [1])


@pytest.mark.parametrize("priority_class", ["system-cluster-critical", "system-node-critical", ""])
def test_a_critical_class_brings_the_quota_gke_needs(priority_class):
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


def test_feature_toggles():
    off = helm_template()
    assert "driftEndpoint" not in extender_config(off)
    assert not [o for o in off if o["kind"] in ("Role", "ValidatingWebhookConfiguration", "ServiceMonitor",
                                                 "PrometheusRule") and o["metadata"]["name"].endswith(("explain", "extender"))
                and o["kind"] != "Role"]
    on = helm_template(*ALL_ON, "drift.events=true", "drift.topologySpread=true")
    config = extender_config(on)
    assert config["driftEndpoint"] is config["driftEvents"] is True
    assert {"name": "EXTENDER_EXPLAIN_ENDPOINT", "value": "true"} in container(on, "extender")["env"]
    assert config["driftTopologySpread"] is True
    assert the(on, "Role", "scheduling-extender-explain")
    assert the(on, "NetworkPolicy", "scheduling-extender-explain")["spec"]["ingress"][0]["from"] == \
        [{"ipBlock": {"cidr": "10.0.0.0/28"}}]
    assert {o["kind"] for o in on} >= {"ValidatingWebhookConfiguration", "ServiceMonitor", "PrometheusRule"}
    # explain without the API server's addresses: no policy rule, only --port-forward
    assert not [o for o in helm_template("explain.enabled=true") if o["metadata"]["name"].endswith("-explain")
                and o["kind"] == "NetworkPolicy"]


def test_webhook_values():
    objects = helm_template("webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28,2001:db8::/64}",
                            "webhook.failurePolicy=Fail", "webhook.timeoutSeconds=3",
                            "webhook.certManager=false", "webhook.caBundle=Q0EK")
    hook = the(objects, "ValidatingWebhookConfiguration")
    (webhook,) = hook["webhooks"]
    assert webhook["failurePolicy"] == "Fail" and webhook["clientConfig"]["caBundle"] == "Q0EK"
    assert webhook["timeoutSeconds"] == 3
    assert "annotations" not in hook["metadata"], "no cainjector without cert-manager"
    assert not [o for o in objects if o["kind"] in ("Issuer", "Certificate")]
    policy = the(objects, "NetworkPolicy")
    (rule,) = [r for r in policy["spec"]["ingress"] if r["ports"] == [{"port": 9443, "protocol": "TCP"}]]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, {"ipBlock": {"cidr": "2001:db8::/64"}}]
    assert "webhook.caBundle" in helm_refuses("webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28}",
                                              "webhook.certManager=false")


def test_an_unset_webhook_address_refuses_to_render():
    """The trap of a placeholder CIDR: the NetworkPolicy drops the API server's calls and
    every write the webhook matches waits for its timeout. The chart has no placeholder."""
    assert "webhook.apiServerCIDRs is empty" in helm_refuses("webhook.enabled=true")
    objects = helm_template("webhook.enabled=true", "networkPolicy.enabled=false")
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]
    (webhook,) = the(objects, "ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["timeoutSeconds"] <= 2 and webhook["failurePolicy"] == "Ignore"


def test_the_webhook_match_condition_follows_the_annotation_prefix():
    objects = helm_template("webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28}",
                            "extender.config.annotationPrefix=example.com")
    (condition,) = the(objects, "ValidatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
    assert "'example.com/tolerations'" in condition["expression"]
    assert "scheduling-extender.io" not in condition["expression"]


@pytest.mark.parametrize(("values", "message"), [
    (("replicas=0",), "/replicas"),
    (("webhook.failurePolicy=Maybe",), "/webhook/failurePolicy"),
    (("webhook.timeoutSeconds=60",), "/webhook/timeoutSeconds"),
    (("unknownKey=1",), "unknownKey"),
    (("schedulerName=default-scheduler",), "schedulerName"),
    (("image.pullPolicy=Sometimes",), "/image/pullPolicy"),
])
def test_the_schema_refuses_wrong_values(values, message):
    assert message in helm_refuses(*values)


# --- every `extender serve` flag from values ----------------------------------------------

# The flags of the pod's layout: the chart sets them (args or env) and refuses them in
# extender.config; `extender.extraArgs` can still pass any flag as it is.
CHART_OWNED = {"config", "listen", "in_cluster", "kubeconfig", "cluster", "metrics_listen", "webhook_listen",
               "tls_cert_file", "tls_private_key_file"}
SAMPLES = {int: 3, float: 7.5, bool: True}


def serve_flags() -> dict[str, str]:
    """--flag -> its settings attribute, from `extender serve --help`."""
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    text = serve.format_help()
    flags = set(re.findall(r"(?m)^\s+(--[a-z][-a-z0-9]*)", text))
    by_flag = {flag_name(attr): attr for attr in SETTINGS}
    return {flag: by_flag.get(flag, flag.removeprefix("--").replace("-", "_")) for flag in flags - {"--help"}}


def sample(attr: str):
    """A value of the setting other than its default, as YAML gives it."""
    from extender.config import Config

    special = {"worker_class": "pool", "score_mode": "scaled", "log_level": "debug", "annotation_prefix": "example.com",
               "feature_gates": {"TaintTolerationCEL": False}, "weights": {"TaintToleration": 5},
               "plugin_args": [{"name": "PodTopologySpread", "args": {"defaultingType": "List"}}],
               "slow_cel_expressions": "deny", "client_ca_file": "/etc/ca.pem",
               "client_cert_allowed_names": ["kube-apiserver"], "scheduler_profile": "p2",
               "scheduler_config": "kube-scheduler-config.yaml",
               "max_staleness": 30.0, "verbs_tls": True, "slim_answers": False,
               "max_body_bytes": 1 << 20, "max_inflight_bytes": 64 << 20, "memory_limit_bytes": 64 << 20}
    if attr in special:
        return special[attr]
    default = getattr(Config(), attr)
    return SAMPLES[type(default)] if type(default) in SAMPLES else pytest.fail(f"no sample for {attr}")


# the single-profile settings, deprecated: refused beside --scheduler-config (the chart's
# default), so they are set in a render of their own that turns it off
LEGACY = {"scheduler_profile", "weights", "plugin_args"}


@pytest.mark.parametrize("group", ["current", "legacy"])
def test_every_serve_flag_is_settable_from_values(tmp_path, group):
    """Each flag of `extender serve --help` either is a key of `extender.config` (set here
    to a value other than its default: the pod's args, env and rendered file, read as
    `extender serve` reads them, give that value) or belongs to the pod's layout."""
    from extender.cli import _settings
    from extender.config import Config

    flags = serve_flags()
    assert len(flags) >= 40, sorted(flags)
    owned = {flag for flag, attr in flags.items() if attr in CHART_OWNED}
    assert owned == {flag_name(a) for a in CHART_OWNED - {"config"}} | {"--config"}
    settable = {attr: sample(attr) for attr in flags.values()
                if attr not in CHART_OWNED and (attr in LEGACY) == (group == "legacy")}
    assert set(settable) <= set(SETTINGS), f"not settings of the file: {set(settable) - set(SETTINGS)}"
    extra = {"schedulerConfig": ""} if group == "legacy" else {}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"webhook": {"enabled": True, "apiServerCIDRs": ["10.0.0.0/28"]},
                                      "extender": {"config": {**extra,
                                                              **{SETTINGS[a][0]: v for a, v in settable.items()}}}}))
    objects = helm_template(values_file=values)
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (tmp_path / "kube-scheduler-config.yaml").write_text(config_map["data"]["kube-scheduler-config.yaml"])
    path = tmp_path / "extender.yaml"
    path.write_text(config_map["data"]["extender.yaml"])
    ext = container(objects, "extender")
    args = [a.replace("/etc/extended-scheduler/extender.yaml", str(path)) for a in ext["args"]]
    ns = build_parser().parse_args(args)
    env = {e["name"]: e["value"] for e in ext["env"]}
    config = build_config(_settings(ns), env=env, config_file=ns.config)
    assert config.in_cluster and config.metrics_listen == "0.0.0.0:8889" and config.webhook_listen
    # the same settings in a file of their own, read directly
    direct = tmp_path / "direct.yaml"
    direct.write_text(yaml.safe_dump({SETTINGS[a][0]: v for a, v in settable.items()}))
    expected = build_config({"tls_cert_file": "c", "tls_private_key_file": "k"}, env={}, config_file=str(direct))
    for attr in settable:
        assert getattr(config, attr) == getattr(expected, attr) != getattr(Config(), attr), flag_name(attr)


@pytest.mark.parametrize("key", ["listen", "inCluster", "metricsListen", "webhookListen", "cluster"])
def test_the_pods_layout_is_refused_in_the_config(key):
    assert f"extender.config.{key} is set by the chart" in helm_refuses(f"extender.config.{key}=x")


# --- kube-scheduler's version -------------------------------------------------------------

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
    assert any(re.fullmatch(r"v\d+\.\d+", c) for c, _ in rows), "Argo CD's major.minor form"


@pytest.mark.parametrize(("cluster", "image"), compatibility_table())
def test_kube_scheduler_follows_the_cluster_version(cluster, image):
    """Never newer than the API server (version-skew policy)."""
    args = [tool("helm"), "template", "x", str(CHART), "--kube-version", cluster]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if not image:
        assert proc.returncode != 0 and "kubeVersion" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    objects = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert images(objects)["kube-scheduler"] == image
    full = re.match(r"v\d+\.\d+\.\d+", cluster)
    assert image.rsplit(":", 1)[1] == (full.group(0) if full else f"{cluster}.0")


def test_a_pinned_tag_wins_over_the_cluster_version():
    objects = helm_template("kubeScheduler.image.tag=v1.34.3", kube_version="v1.35.1")
    assert images(objects)["kube-scheduler"] == "registry.k8s.io/kube-scheduler:v1.34.3"


def test_a_changed_scheduler_configuration_rolls_both_containers():
    """As the kustomize install (tests/deploy/test_manifests.py): the pod template carries
    a checksum of the ConfigMap holding both files, so a change to kube-scheduler's
    configuration starts new pods, whose two containers read it at start."""
    sums = []
    for values in ((), ("kubeScheduler.extenderHTTPTimeout=6s",)):
        objects = helm_template(*values)
        config = next(o for o in objects
                      if o["kind"] == "ConfigMap" and "kube-scheduler-config.yaml" in o.get("data", {}))
        spec = the(objects, "Deployment")["spec"]["template"]
        (volume,) = [v for v in spec["spec"]["volumes"] if v.get("configMap")]
        assert volume["configMap"]["name"] == config["metadata"]["name"]
        for name in ("kube-scheduler", "extender"):
            assert volume["name"] in {m["name"] for m in container(objects, name).get("volumeMounts", [])}
        sums.append(spec["metadata"]["annotations"]["checksum/config"])
    assert sums[0] != sums[1]
