"""Issue 36: what the shipped pods' probes, ports, Services and NetworkPolicies name is
there, by the kubelet's rules, and served by the process the pod runs.

For every overlay, the replace-default static pods (the extender's, and kubeadm's own
kube-scheduler with the ClusterConfiguration part we ship merged in) and the chart
(default values and the values that change the pod):

- every probe's port resolves as the kubelet resolves it: a name among the probed
  container's own ports (`testing.kubelet`);
- every probe succeeds against the pod started from those very manifests (podsim: the
  real `extender serve` and kube-scheduler with the containers' args, env and files),
  on the pod's IP unless the probe names the host-network loopback; a probe that dials
  another container of the pod by number is allowed, and that container must serve it;
- every containerPort is served by its own container, every Service's targetPort and
  NetworkPolicy port by some container of the pods they select, every ServiceMonitor
  endpoint names a port of a Service it selects, the webhook's Service port exists, and
  each kube-scheduler's extender urlPrefix answers from the pod;
- every kube-scheduler configuration shipped (base, replace-default, README, the
  rendered ConfigMaps) carries the same extender and preemption settings.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from deploy_tools import MANIFESTS, ROOT, kubectl, run, tool
from podsim import API_KUBECONFIG, PodRun, without_images

from testing import kubelet
from testing.harness import require_binary
from testing.overlays import overlay_dir

pytestmark = pytest.mark.xdist_group("deploy/test_probes")  # one worker: the runs are shared

REPLACE_DEFAULT = MANIFESTS / "overlays" / "replace-default"
CHART = ROOT / "charts" / "scheduling-extender"
# The chart's values that change the pod (the others are checked against the overlays
# in test_chart.py): the webhook adds a listener, a port, a Secret and a NetworkPolicy rule.
CHART_VALUES = [(), ("webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28}"),
                ("prometheusOperator.serviceMonitor.enabled=true",), ("replicas=1",),
                ("webhook.enabled=true", "webhook.apiServerCIDRs={10.0.0.0/28}", "webhook.certManager=false",
                 "webhook.caBundle=Q0EK"),
                ("explain.enabled=true", "drift.enabled=true")]
NODE_KUBECONFIG = "/etc/kubernetes/scheduler.conf"


@dataclass
class Source:
    label: str
    objects: list[dict]
    host_paths: dict[str, dict[str, str]] = field(default_factory=dict)

    def pods(self) -> list[tuple[str, dict, dict]]:
        """(kind/name, pod metadata, pod spec) of every workload."""
        found = []
        for obj in self.objects:
            if obj["kind"] == "Deployment":
                template = obj["spec"]["template"]
                found.append((f"Deployment/{obj['metadata']['name']}", template["metadata"], template["spec"]))
            elif obj["kind"] == "Pod":
                found.append((f"Pod/{obj['metadata']['name']}", obj["metadata"], obj["spec"]))
        assert found, f"{self.label}: no pod"
        return found

    def config_maps(self) -> dict[str, dict]:
        return {o["metadata"]["name"]: o["data"] for o in self.objects if o["kind"] == "ConfigMap"}

    def of(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]


def docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def kubeadm_scheduler_pod() -> dict:
    """kube-scheduler's static pod as kubeadm v1.30 writes it (cmd/kubeadm/app/phases/
    controlplane/manifests.go: its flags, its liveness and startup probes of /healthz on
    127.0.0.1:10259 over HTTPS, the scheduler.conf mount; /livez and /readyz only from
    kubeadm v1.32, for kube-scheduler v1.31+), the version of the kube-scheduler binary
    the tests run, with the `scheduler:` part of our v1beta3 ClusterConfiguration merged
    in as kubeadm merges extraArgs and extraVolumes."""
    cluster = yaml.safe_load((REPLACE_DEFAULT / "kubeadm-scheduler-v1beta3.yaml").read_text())["scheduler"]

    def probe(path: str, **timing) -> dict:
        return {"httpGet": {"host": "127.0.0.1", "path": path, "port": 10259, "scheme": "HTTPS"}, **timing}

    flags = {"authentication-kubeconfig": NODE_KUBECONFIG, "authorization-kubeconfig": NODE_KUBECONFIG,
             "bind-address": "127.0.0.1", "kubeconfig": NODE_KUBECONFIG, "leader-elect": "true",
             **cluster["extraArgs"]}
    volumes = [{"name": "kubeconfig", "hostPath": {"path": NODE_KUBECONFIG, "type": "FileOrCreate"}}]
    mounts = [{"name": "kubeconfig", "mountPath": NODE_KUBECONFIG, "readOnly": True}]
    for extra in cluster["extraVolumes"]:
        volumes.append({"name": extra["name"], "hostPath": {"path": extra["hostPath"], "type": extra["pathType"]}})
        mounts.append({"name": extra["name"], "mountPath": extra["mountPath"], "readOnly": extra["readOnly"]})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "kube-scheduler", "namespace": "kube-system",
                         "labels": {"component": "kube-scheduler", "tier": "control-plane"}},
            "spec": {"hostNetwork": True, "priorityClassName": "system-node-critical",
                     "containers": [{
                         "name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.30.6",
                         "command": ["kube-scheduler", *(f"--{k}={v}" for k, v in sorted(flags.items()))],
                         "livenessProbe": probe("/healthz", periodSeconds=10, failureThreshold=8),
                         "startupProbe": probe("/healthz", periodSeconds=10, failureThreshold=24),
                         "volumeMounts": mounts}],
                     "volumes": volumes}}


@functools.cache
def source(label: str) -> Source:
    kind, _, name = label.partition(" ")
    if kind == "overlay" and name == "replace-default":
        files = {p: (REPLACE_DEFAULT / p).read_text() for p in ("kube-scheduler-config.yaml", "extender.yaml")}
        host_dir = "/etc/kubernetes/scheduling-extender"
        return Source(label, [*docs(run([kubectl(), "kustomize", str(REPLACE_DEFAULT)])), kubeadm_scheduler_pod()],
                      {host_dir: files, NODE_KUBECONFIG: {"": API_KUBECONFIG}})
    if kind == "overlay":
        return Source(label, docs(run([kubectl(), "kustomize", str(overlay_dir(name))])))
    values = [] if name == "defaults" else name.split(",")
    args = [tool("helm"), "template", "scheduling-extender", str(CHART), "--namespace", "scheduling-extender",
            "--kube-version", "v1.35.0", "--skip-tests"]  # the `helm test` pod is no scheduler pod
    for value in values:
        args += ["--set", value]
    return Source(label, docs(run(args)))


LABELS = ([f"overlay {p.name}" for p in sorted((MANIFESTS / "overlays").iterdir()) if p.is_dir()]
          + [f"chart {','.join(v) or 'defaults'}" for v in CHART_VALUES])


# --- 1. named probe ports, by the kubelet's rule (no process needed) ----------------------

def probe_problems(src: Source) -> list[str]:
    problems = []
    for where, _, pod in src.pods():
        for container in pod["containers"]:
            for name in kubelet.PROBES:
                if name not in container:
                    continue
                try:
                    kubelet.target(name, container[name], container)
                except kubelet.ProbeError as exc:
                    problems.append(f"{src.label}: {where}: container {container['name']}: {name}: {exc} "
                                    "(the kubelet drops the result: the probe never succeeds)")
    return problems


@pytest.mark.parametrize("label", LABELS)
def test_every_probe_port_resolves_in_its_own_container(label):
    assert probe_problems(source(label)) == []


def test_a_named_port_of_another_container_is_caught():
    """The check itself: the manifests before issue 36 (kube-scheduler probing the
    extender's port by its name) are refused."""
    src = source("overlay second-scheduler")
    before = json.loads(json.dumps(src.objects).replace('"port": 8889', '"port": "metrics"'))
    problems = probe_problems(Source("before issue 36", before))
    assert problems and all("couldn't find port: 'metrics'" in p and "container kube-scheduler" in p
                            for p in problems), problems


# --- 2. what is named is served ---------------------------------------------------------

@dataclass
class Served:
    """What a run of a source's pods showed."""

    problems: list[str]
    listeners: dict[int, list[tuple[str, str]]]  # pod port -> (pod/container, bound address)
    cross: list[str]  # probes answered by another container of the pod (by number)


def selects(selector: dict, labels: dict) -> bool:
    match = selector.get("matchLabels", selector)
    return bool(match) and match.items() <= labels.items()


RUNS: dict[str, Served] = {}


def run_pods(src: Source, binary: str, workdir: Path) -> Served:
    """Start the source's pods (those on the host network share one namespace, the
    others one each) and run every probe; the same pods are run once per module."""
    key = json.dumps([[without_images(pod) for _, _, pod in src.pods()], src.config_maps(), src.host_paths],
                     sort_keys=True)
    if key in RUNS:
        return RUNS[key]
    problems: list[str] = []
    listeners: dict[int, list[tuple[str, str]]] = {}
    cross: list[str] = []
    groups: list[list[tuple[str, dict, dict]]] = []
    host = [p for p in src.pods() if p[2].get("hostNetwork")]
    groups = ([host] if host else []) + [[p] for p in src.pods() if not p[2].get("hostNetwork")]
    for i, group in enumerate(groups):
        (workdir / f"ns{i}").mkdir()
        with PodRun(workdir / f"ns{i}", binary) as sim:
            for where, _, pod in group:
                sim.start(where.split("/")[1], pod, src.config_maps(), src.host_paths)
            for where, _, pod in group:
                for container in pod["containers"]:
                    for name in (n for n in kubelet.PROBES if n in container):
                        try:
                            target = kubelet.target(name, container[name], container)
                        except kubelet.ProbeError as exc:
                            problems.append(f"{where}: container {container['name']}: {name}: {exc}")
                            continue
                        why = sim.probe(target, bool(pod.get("hostNetwork")))
                        if why:
                            problems.append(f"{where}: container {container['name']}: {target.probe} "
                                            f"{target.scheme} {target.path} on port {target.port}: {why}")
                            continue
                        owners = {s.container.split("/")[1] for s in sim.serving(target.port)}
                        if container["name"] not in owners:
                            cross.append(f"{where}: {container['name']}.{target.probe} -> {sorted(owners)}")
                problems += scheduler_url_problems(sim, where, pod)
            for port, local in sim.ports.items():
                found = sim.listeners().get(local, [])
                listeners[port] = [(s.container, s.address) for s in found]
            if problems:
                problems.append(sim.logs())
    RUNS[key] = Served(problems, listeners, cross)
    return RUNS[key]


def scheduler_url_problems(sim: PodRun, where: str, pod: dict) -> list[str]:
    """kube-scheduler's extender urlPrefix answers a filter call from the pod's processes."""
    problems = []
    for container in pod["containers"]:
        if "kube-scheduler" not in container["image"]:
            continue
        config_arg = next(a for a in sim.processes[f"{where.split('/')[1]}/{container['name']}"].cmd
                          if a.startswith("--config="))
        config = yaml.safe_load(Path(config_arg.split("=", 1)[1]).read_text())
        for extender in config.get("extenders", []):
            url = f"{extender['urlPrefix'].rstrip('/')}/{extender['filterVerb']}"
            body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}},
                               "NodeNames": ["n-a"]}).encode()
            try:
                with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30) as answer:
                    status = answer.status
            except OSError as exc:
                status = str(exc)
            if status != 200:
                problems.append(f"{where}: kube-scheduler's extender {url}: {status}")
    return problems


def served_in_pod(served: Served, port: int, pod_containers: set[str], owner: str | None = None) -> str | None:
    """None when `port` of the pod is served on the pod's IP (by `owner` if given)."""
    found = [(c, a) for c, a in served.listeners.get(port, []) if c.split("/")[1] in pod_containers]
    if not found:
        return f"port {port}: nothing of the pod listens there"
    if owner is not None and owner not in {c.split("/")[1] for c, _ in found}:
        return f"port {port}: served by {sorted(c for c, _ in found)}, not by {owner}"
    if not any(a in ("0.0.0.0", "::") for _, a in found):
        return f"port {port}: listened on {found[0][1]} only, not on the pod's IP"
    return None


def port_problems(src: Source, served: Served) -> list[str]:
    problems = []
    pods = [(w, m, p) for w, m, p in src.pods() if not p.get("hostNetwork")]
    for where, _, pod in pods:
        names = {c["name"] for c in pod["containers"]}
        for container in pod["containers"]:
            for declared in container.get("ports", []):
                if why := served_in_pod(served, declared["containerPort"], names, container["name"]):
                    problems.append(f"{where}: containerPort {declared.get('name')}: {why}")
    by_name = {p.get("name"): p["containerPort"] for _, _, pod in pods for c in pod["containers"]
               for p in c.get("ports", [])}

    def resolve(port: int | str, what: str) -> str | None:
        number = port if isinstance(port, int) else by_name.get(port)
        if number is None:
            return f"{what}: no container of the pod has a port named {port!r}"
        names = {c["name"] for _, _, pod in pods for c in pod["containers"]}
        return served_in_pod(served, number, names)

    labels = [m.get("labels", {}) for _, m, _ in pods]
    services = src.of("Service")
    for svc in services:
        if not any(selects(svc["spec"]["selector"], lb) for lb in labels):
            problems.append(f"Service {svc['metadata']['name']}: selects no pod")
            continue
        for port in svc["spec"]["ports"]:
            if why := resolve(port.get("targetPort", port["port"]), f"Service {svc['metadata']['name']}"):
                problems.append(why)
    for policy in src.of("NetworkPolicy"):
        if not any(selects(policy["spec"]["podSelector"], lb) for lb in labels):
            problems.append(f"NetworkPolicy {policy['metadata']['name']}: selects no pod")
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                if why := resolve(port["port"], f"NetworkPolicy {policy['metadata']['name']}"):
                    problems.append(why)
    for monitor in src.of("ServiceMonitor"):
        ports = {p.get("name") for s in services
                 if selects(monitor["spec"]["selector"], s["metadata"].get("labels", {})) for p in s["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint["port"] not in ports:
                problems.append(f"ServiceMonitor {monitor['metadata']['name']}: no selected Service port "
                                f"{endpoint['port']!r} ({sorted(ports)})")
    for hook in src.of("ValidatingWebhookConfiguration"):
        for entry in hook["webhooks"]:
            ref = entry["clientConfig"]["service"]
            if not any(s["metadata"]["name"] == ref["name"] and ref.get("port", 443) in
                       [p["port"] for p in s["spec"]["ports"]] for s in services):
                problems.append(f"webhook {entry['name']}: no Service {ref['name']} port {ref.get('port', 443)}")
    return problems


@pytest.mark.parametrize("label", LABELS)
def test_what_the_pods_name_is_served(label, tmp_path, record_property):
    binary = require_binary()
    src = source(label)
    served = run_pods(src, binary, tmp_path)
    assert served.problems == [], "\n".join(served.problems)
    assert port_problems(src, served) == []
    record_property("probes_answered_by_another_container", served.cross)
    for where, _, pod in src.pods():
        # kube-scheduler's probes of its sidecar's health are the one deliberate crossing
        if any(c["name"] == "extender" for c in pod["containers"]) and len(pod["containers"]) > 1:
            assert {c for c in served.cross if c.startswith(where)} == {
                f"{where}: kube-scheduler.startupProbe -> ['extender']",
                f"{where}: kube-scheduler.livenessProbe -> ['extender']"}


# --- 3. one set of extender and preemption settings ----------------------------------------

def readme_config() -> dict:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Wire it into kube-scheduler.*?```yaml\n(.*?)```", text, re.S).group(1)
    return yaml.safe_load(block)


def shipped_configs() -> dict[str, dict]:
    configs = {"manifests/base": yaml.safe_load((MANIFESTS / "base" / "kube-scheduler-config.yaml").read_text()),
               "replace-default": yaml.safe_load((REPLACE_DEFAULT / "kube-scheduler-config.yaml").read_text()),
               "README": readme_config()}
    for label in LABELS:
        for name, data in source(label).config_maps().items():
            if "kube-scheduler-config.yaml" in data:
                configs[f"{label}: ConfigMap {name}"] = yaml.safe_load(data["kube-scheduler-config.yaml"])
    return configs


def settings(config: dict) -> dict:
    """What must be the same everywhere: the extender entry and, per profile, the
    (effective) percentageOfNodesToScore, the plugins disabled and DefaultPreemption's
    arguments."""
    return {"extenders": config["extenders"],
            "profiles": [{"percentageOfNodesToScore": profile.get("percentageOfNodesToScore",
                                                                  config.get("percentageOfNodesToScore")),
                          "disabled": sorted(p["name"] for p in profile["plugins"]["multiPoint"]["disabled"]),
                          "DefaultPreemption": next((c["args"] for c in profile.get("pluginConfig", [])
                                                     if c["name"] == "DefaultPreemption"), None)}
                         for profile in config["profiles"]]}


def test_every_scheduler_configuration_has_the_same_extender_and_preemption_settings():
    configs = shipped_configs()
    base = settings(configs.pop("manifests/base"))
    assert base["profiles"][0]["DefaultPreemption"] == {"minCandidateNodesPercentage": 100,
                                                        "minCandidateNodesAbsolute": 100}
    assert len(configs) >= len(LABELS), "every overlay and chart variant ships a configuration"
    differ = {where: settings(config) for where, config in configs.items() if settings(config) != base}
    assert differ == {}, f"differ from manifests/base: {differ}"
