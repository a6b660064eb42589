"""The kind walkthrough (docs/operate/kind.md), every step that can run without a cluster
(issue 25 item 1): its commands are read from the page itself, so the page and these
checks cannot drift apart.

- the kind configuration and the kind overlay name the same Kubernetes version;
- `make image` / `make image-archive` (dry run) build and write what `kind load` is given,
  under the image name the overlay runs; the release path (`make image-push`) too;
- the overlay renders and validates (with every overlay, in test_manifests.py);
- on the cluster the page's `kind create` / `kubectl label` / `kubectl taint` commands
  build, `extender explain` places the page's pod where the page says, and the
  scheduler's own replicas (default scheduler, hostname spread) have a node each."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deploy_tools import MANIFESTS, ROOT, kubectl, run

PAGE = ROOT / "docs" / "operate" / "kind.md"
FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def commands() -> list[list[str]]:
    return [shlex.split(line) for block in FENCE.findall(PAGE.read_text())
            for line in block.splitlines() if line.strip() and not line.startswith("#")]


def command(*prefix: str) -> list[str]:
    found = [c for c in commands() if c[:len(prefix)] == list(prefix)]
    assert len(found) == 1, f"kind.md: expected one `{' '.join(prefix)}` command, found {len(found)}"
    return found[0]


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def make_dry_run(*args: str) -> list[str]:
    out = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def kind_config() -> dict:
    cmd = command("kind", "create", "cluster")
    return yaml.safe_load((ROOT / flag(cmd, "--config")).read_text())


@pytest.fixture(scope="module")
def overlay() -> list[dict]:
    cmd = command("kubectl", "apply", "-k")
    out = run([kubectl(), "kustomize", str(ROOT / cmd[3])])
    return [d for d in yaml.safe_load_all(out) if d]


def deployment(objects: list[dict]) -> dict:
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    return dep


def images(objects: list[dict]) -> dict[str, str]:
    return {c["name"]: c["image"] for c in deployment(objects)["spec"]["template"]["spec"]["containers"]}


def test_kube_scheduler_is_the_kind_nodes_version(kind_config, overlay):
    versions = {n["image"].rsplit(":", 1)[1] for n in kind_config["nodes"]}
    assert len(versions) == 1, "one Kubernetes version in the cluster"
    assert images(overlay)["kube-scheduler"] == f"registry.k8s.io/kube-scheduler:{versions.pop()}"


def test_the_loaded_archive_carries_the_image_the_overlay_runs(kind_config, overlay):
    (push,) = [line for line in make_dry_run("image-archive") if " push " in line]
    archive, reference = re.search(r"docker-archive:([^: ]+):(\S+)", push).groups()
    load = command("kind", "load", "image-archive")
    assert load[3] == archive and flag(load, "--name") == kind_config["name"]
    assert images(overlay)["extender"] == reference
    assert not reference.endswith(":latest"), "IfNotPresent: the nodes never pull it"
    for c in deployment(overlay)["spec"]["template"]["spec"]["containers"]:
        assert c.get("imagePullPolicy", "IfNotPresent") == "IfNotPresent"
    build = make_dry_run("image")
    assert any(f"IMAGE={reference} .ci/build-image" in line for line in build), build
    assert ["sudo", "make", "image"] in commands() and ["sudo", "make", "image-archive"] in commands()


def test_the_release_path_pushes_the_same_image():
    out = make_dry_run("image-push", "IMAGE_REPO=registry.example.org/team/scheduling-extender")
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert any(line.endswith(f"buildah push localhost/scheduling-extender:{version} "
                             f"docker://registry.example.org/team/scheduling-extender:{version}") for line in out)
    refused = subprocess.run(["make", "image-push"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "IMAGE_REPO" in refused.stderr


def cluster_objects(kind_config: dict) -> list[dict]:
    """The nodes kind creates, then the page's label and taint commands applied."""
    name = kind_config["name"]
    workers = [n for n in kind_config["nodes"] if n["role"] == "worker"]
    names = [f"{name}-control-plane"] + [f"{name}-worker{i + 1 if i else ''}" for i in range(len(workers))]
    nodes = {n: {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux"}},
                 "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
             for n in names}
    control = nodes[f"{name}-control-plane"]
    control["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    control["spec"]["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    for cmd in commands():
        if cmd[:3] == ["kubectl", "label", "node"]:
            targets, (label,) = cmd[3:-1], cmd[-1:]
            key, value = label.split("=", 1)
            for target in targets:
                nodes[target]["metadata"]["labels"][key] = value
        elif cmd[:3] == ["kubectl", "taint", "node"]:
            target, taint = cmd[3], cmd[4]
            key, rest = taint.split("=", 1)
            value, effect = rest.split(":")
            nodes[target]["spec"].setdefault("taints", []).append({"key": key, "value": value, "effect": effect})
    return list(nodes.values())


def explain(objects: list[dict], pod: Path, tmp_path: Path) -> dict:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    out = subprocess.run([sys.executable, "-m", "extender", "explain", "--cluster", str(cluster), "--pod", str(pod)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (result,) = json.loads(out.stdout)["results"]
    return result


def test_the_pod_lands_where_the_page_says(kind_config, tmp_path):
    apply = command("kubectl", "apply", "-f")
    pod = ROOT / apply[3]
    promised = re.search(r"The pod lands on `([\w-]+)`", PAGE.read_text()).group(1)
    result = explain(cluster_objects(kind_config), pod, tmp_path)
    assert result["filter"]["NodeNames"] == [promised]
    failed = result["filter"]["FailedAndUnresolvableNodes"]
    assert failed[f"{kind_config['name']}-worker4"] == "node(s) had untolerated taint(s)"
    assert set(failed) | {promised} == {n["metadata"]["name"] for n in cluster_objects(kind_config)}
    validated = subprocess.run([sys.executable, "-m", "extender", "validate", str(pod)],
                               capture_output=True, text=True, timeout=120)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert yaml.safe_load(pod.read_text())["spec"]["schedulerName"] == "extended-scheduler"


def test_the_schedulers_own_replicas_have_a_node_each(kind_config, overlay, tmp_path):
    """Placed by the default scheduler: taints, and a hostname spread with maxSkew 1."""
    dep = deployment(overlay)
    template = dep["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "replica-1",
                                                          "namespace": dep["metadata"]["namespace"]},
           "spec": template["spec"]}
    path = tmp_path / "replica.yaml"
    path.write_text(yaml.safe_dump(pod))
    nodes = cluster_objects(kind_config)
    first = explain(nodes, path, tmp_path)["filter"]["NodeNames"]
    assert set(first) == {f"{kind_config['name']}-worker", f"{kind_config['name']}-worker2"}
    placed = {**pod, "metadata": {**pod["metadata"], "name": "replica-0"},
              "spec": {**pod["spec"], "nodeName": first[0]}, "status": {"phase": "Running"}}
    second = explain([*nodes, placed], path, tmp_path)["filter"]["NodeNames"]
    assert second == [n for n in first if n != first[0]], "the second replica goes to the other plain worker"
    assert dep["spec"]["replicas"] == 2


def test_the_kind_overlay_is_the_second_scheduler_with_two_images():
    text = (MANIFESTS / "overlays" / "kind" / "kustomization.yaml").read_text()
    doc = yaml.safe_load(text)
    assert doc["resources"] == ["../second-scheduler"]
    assert {i["name"] for i in doc["images"]} == {"registry.example.com/scheduling-extender",
                                                  "registry.k8s.io/kube-scheduler"}
