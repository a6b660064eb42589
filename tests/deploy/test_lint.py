"""kube-linter's default checks that concern this chart, on what it renders.

kube-linter itself is not installable here (neither PyPI, npm nor Debian package it; its
Go module is not served), so the checks are encoded below after its documentation
(docs.kubelinter.io, "Default checks"), with its `ignore-check.kube-linter.io/CHECK`
annotation honoured as kube-linter honours it: an object that carries it is exempt, and
here the annotation must also say why (a non-empty reason)."""

from __future__ import annotations

import pytest
from test_chart import ALL_ON, IMAGE, helm_template

IGNORE = "ignore-check.kube-linter.io/"


def pod_specs(obj: dict):
    if obj["kind"] == "Pod":
        return obj["spec"]
    template = obj.get("spec", {}).get("template", {})
    return template.get("spec")


def port_ok(probe: dict, container: dict) -> bool:
    """liveness-port / readiness-port / startup-port: the probed port is one the
    container itself declares (by name or number)."""
    port = (probe.get("httpGet") or probe.get("tcpSocket") or probe.get("grpc") or {}).get("port")
    if port is None:
        return True
    declared = container.get("ports", [])
    return any(port in (p.get("name"), p["containerPort"]) for p in declared)


def problems(objects: list[dict]) -> list[str]:
    found = []
    names = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects}
    pods = []
    for obj in objects:
        annotations = obj["metadata"].get("annotations", {})
        ignored = {k[len(IGNORE):] for k, v in annotations.items() if k.startswith(IGNORE)}
        for k, v in annotations.items():
            if k.startswith(IGNORE):
                assert v.strip(), f"{obj['kind']}/{obj['metadata']['name']}: {k} without a reason"
        spec = pod_specs(obj)
        if spec is None:
            continue
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        labels = obj["metadata"]["labels"] if obj["kind"] == "Pod" else obj["spec"]["template"]["metadata"]["labels"]
        pods.append((obj["metadata"].get("namespace", ""), labels))

        def check(name: str, ok: bool, what: str, where: str = where, ignored: set = ignored) -> None:
            if not ok and name not in ignored:
                found.append(f"{where}: {name}: {what}")

        if obj["kind"] == "Deployment":
            check("mismatching-selector", obj["spec"]["selector"]["matchLabels"].items() <= labels.items(), "selector")
            check("no-anti-affinity", obj["spec"]["replicas"] < 2 or "podAntiAffinity" in spec.get("affinity", {}),
                  "replicas without anti-affinity")
        sa = spec.get("serviceAccountName")
        check("non-existent-service-account", sa is None or ("ServiceAccount", obj["metadata"]["namespace"], sa) in names, sa)
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            check(f"host-{flag[4:].lower()}", not spec.get(flag), flag)
        psc = spec.get("securityContext", {})
        for c in spec["containers"]:
            sc = c.get("securityContext", {})
            res = c.get("resources", {})
            tag = c["image"].rpartition(":")[2]
            check("latest-tag", ":" in c["image"] and tag != "latest", c["image"])
            check("no-read-only-root-fs", sc.get("readOnlyRootFilesystem") is True, c["name"])
            check("privilege-escalation-container", sc.get("allowPrivilegeEscalation") is False, c["name"])
            check("privileged-container", not sc.get("privileged"), c["name"])
            check("run-as-non-root", sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True
                  or sc.get("runAsUser", psc.get("runAsUser", 0)) > 0, c["name"])
            check("drop-net-raw-capability", "ALL" in sc.get("capabilities", {}).get("drop", [])
                  or "NET_RAW" in sc.get("capabilities", {}).get("drop", []), c["name"])
            check("unset-cpu-requirements", bool(res.get("requests", {}).get("cpu")) and bool(res.get("limits", {}).get("cpu")),
                  c["name"])
            check("unset-memory-requirements", bool(res.get("requests", {}).get("memory"))
                  and bool(res.get("limits", {}).get("memory")), c["name"])
            check("env-var-secret", not any("secret" in e["name"].lower() and "value" in e for e in c.get("env", [])),
                  c["name"])
            check("no-liveness-probe", "livenessProbe" in c, c["name"])
            check("no-readiness-probe", "readinessProbe" in c, c["name"])
            for probe in ("liveness", "readiness", "startup"):
                if f"{probe}Probe" in c:
                    check(f"{probe}-port", port_ok(c[f"{probe}Probe"], c), f"{c['name']}'s {probe} probe")
    for service in [o for o in objects if o["kind"] == "Service"]:
        selector = service["spec"].get("selector", {})
        matched = any(ns == service["metadata"]["namespace"] and selector.items() <= labels.items() for ns, labels in pods)
        if not matched:
            found.append(f"Service/{service['metadata']['name']}: dangling-service")
    for pdb in [o for o in objects if o["kind"] == "PodDisruptionBudget"]:
        replicas = max(o["spec"]["replicas"] for o in objects if o["kind"] == "Deployment")
        if pdb["spec"].get("minAvailable", 0) >= replicas:
            found.append(f"PodDisruptionBudget/{pdb['metadata']['name']}: pdb-min-available")
    return found


@pytest.mark.parametrize("values", [IMAGE, (*IMAGE, *ALL_ON), (*IMAGE, "replicas=1")],
                         ids=["defaults", "everything", "one-replica"])
def test_the_chart_passes_kube_linters_default_checks(values):
    assert problems(helm_template(*values, release="team-a", tests=True)) == []


def test_the_checks_can_fail():
    """The deliberate liveness-port exception is an exception: without its annotation it is
    reported, as kube-linter reports it."""
    objects = helm_template(*IMAGE, release="team-a")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    del deployment["metadata"]["annotations"][f"{IGNORE}liveness-port"]
    assert problems(objects) == ["Deployment/team-a-scheduling-extender: liveness-port: kube-scheduler's liveness probe"]
