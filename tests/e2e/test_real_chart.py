"""The Helm chart on a real control plane, as a platform team installs it: `helm template`
with a release name of its own (and the image only), applied with `kubectl apply` to the
real kube-apiserver (which validates every object), then kube-scheduler and `extender
serve` run as processes (there is no kubelet) with the configuration files of the
chart's ConfigMap and tokens of the ServiceAccount the chart created, so every call they
make is authorized by the chart's RBAC alone (the kustomize install's RBAC on the same
control plane binds another ServiceAccount). A pod of the release's profile is placed,
the lease is the release's, and neither process logs `forbidden`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testing.apiserver import ApiError
from testing.controlplane import binaries
from testing.harness import Process, extender_command, node, pod, wait_extender_ready, wait_for
from testing.live import free_port
from testing.realapi import RealApi, path_of
from testing.realcluster import (
    ACQUIRED,
    FORBIDDEN,
    kubectl,
    reset,
    service_account_token,
    start_real_scheduler,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "scheduling-extender"
RELEASE, NAMESPACE, PROFILE = "team-b", "platform", "team-b-scheduler"
FULLNAME = f"{RELEASE}-scheduling-extender"
CUSTOM = ("monitoring.coreos.com/v1", "cert-manager.io/v1")  # no CRDs here


def helm() -> str:
    """helm from .ci/install-tools (or PATH)."""
    tools = Path(os.environ.get("EXTENDER_TOOLS_DIR", "/opt/extender-tools")) / "bin" / "helm"
    found = str(tools) if os.access(tools, os.X_OK) else shutil.which("helm")
    if not found:
        pytest.fail("helm not found: run `sudo .ci/install-tools`", pytrace=False)
    return found


def render(kube_version: str) -> list[dict]:
    out = subprocess.run([helm(), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version",
                          kube_version, "--set", "image.repository=registry.local/scheduling-extender",
                          "--set", "image.tag=0.1.0", "--set", f"schedulerName={PROFILE}",
                          "--set", "explain.enabled=true", "--set", "drift.enabled=true",
                          "--set", "prometheusOperator.dashboard.enabled=true"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def apply(plane, workdir: Path, objects: list[dict]) -> str:
    """`kubectl apply` (server-side field validation: Strict) as the cluster's admin."""
    kubeconfig = plane.kubeconfig(workdir / "admin.kubeconfig")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    proc = subprocess.run([kubectl(), "--kubeconfig", str(kubeconfig), "apply", "--validate=strict", "-f", "-"],
                          input=yaml.safe_dump_all([namespace, *objects]), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_chart_applies_and_runs_with_its_own_identity(control_plane, pair, tmp_path):
    reset(control_plane)
    objects = render(control_plane.version())
    applied = [o for o in objects if o["apiVersion"] not in CUSTOM]
    out = apply(control_plane, tmp_path, applied)
    assert out.count("\n") == len(applied) + 1, out  # each object, and the namespace
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{FULLNAME}-config")
    extender_file = tmp_path / "extender.yaml"
    extender_file.write_text(config["data"]["extender.yaml"])
    # the extender reads kube-scheduler's file beside its own, as both share the ConfigMap's mount
    (tmp_path / "kube-scheduler-config.yaml").write_text(config["data"]["kube-scheduler-config.yaml"])
    chart_scheduler = yaml.safe_load(config["data"]["kube-scheduler-config.yaml"])
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert service_account == FULLNAME

    api = RealApi(control_plane).start()
    token = service_account_token(api.client, NAMESPACE, service_account)
    identity = control_plane.kubeconfig(tmp_path / "identity.kubeconfig", token, service_account)
    port, metrics_port = free_port(), free_port()
    extender = Process("extender", [*extender_command(), "serve", "--config", str(extender_file),
                                    "--kubeconfig", str(identity), "--listen", f"127.0.0.1:{port}",
                                    "--metrics-listen", f"127.0.0.1:{metrics_port}"], tmp_path / "extender.log",
                       {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBECONFIG")})
    scheduler = None
    try:
        wait_extender_ready(extender, metrics_port)

        def chart_config(generated: dict) -> None:
            """The chart's file; only where the process finds the API server and its sidecar."""
            shipped = dict(chart_scheduler)
            shipped["clientConnection"] = generated["clientConnection"]
            shipped["extenders"] = [{**shipped["extenders"][0], "urlPrefix": f"http://127.0.0.1:{port}/scheduler"}]
            generated.clear()
            generated.update(shipped)

        scheduler, _ = start_real_scheduler(binaries(pair)[1], identity, tmp_path, port,
                                            control_plane.pair.feature_gates, chart_config)
        assert wait_for(lambda: ACQUIRED in scheduler.tail(10**7).lower() or not scheduler.alive(), timeout=120), \
            scheduler.tail()
        lease = api.client.call("GET", path_of("leases", NAMESPACE, FULLNAME))
        assert lease["spec"]["holderIdentity"]

        api.load([node("chart-n1"), pod("chart-p1", scheduler=PROFILE)])
        placed = wait_for(lambda: (p := api.get("pods", "chart-p1")) and p["spec"].get("nodeName"), timeout=120)
        assert placed == "chart-n1", f"{scheduler.tail()}\n{extender.tail()}"
        forbidden = [f"{p.name}: {line}" for p in (scheduler, extender)
                     for line in p.tail(10**8).splitlines() if FORBIDDEN.search(line)]
        assert not forbidden, "\n".join(forbidden[:20])
    finally:
        for proc in (scheduler, extender):
            if proc is not None:
                proc.stop()
        try:
            api.client.call("DELETE", path_of("leases", NAMESPACE, FULLNAME))
        except ApiError as exc:
            if exc.code != 404:
                raise
        api.stop()
