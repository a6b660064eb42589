"""The admission webhook as kube-apiserver calls it, on both version pairs: the rendered
ValidatingWebhookConfiguration (rules, matchConditions, namespaceSelector, failurePolicy,
timeoutSeconds) registered with a local URL and the test CA (`testing.webhook`), `extender
serve --webhook-listen` with a certificate from that CA, objects written with kubectl and
through the API.

- The examples an operator would apply (examples/invalid) are refused at `kubectl create`
  with the errors `extender validate` prints for them (examples/invalid/expected-output.txt):
  pods, the pod templates of Deployments, Jobs and CronJobs, PersistentVolumes.
- matchConditions are evaluated by the API server: a write without the annotation channel
  never reaches the webhook (its request counter does not move).
- UPDATE through real updates: an object admitted before (here: created before the
  webhook was registered) is never blocked by a later rule when its channel is unchanged,
  and a gate turned off since is ratcheted (the old object used it).
- The API server's `timeoutSeconds` and `failurePolicy`: a webhook that never answers or
  is down admits the write with the rendered `Ignore` (the scheduling path then runs the
  same validator: the pod stays Pending with the same message) and refuses it with `Fail`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testing.apiserver import ApiError
from testing.harness import SCHEDULER_NAME, node, pod
from testing.realcluster import kubectl
from testing.webhook import (
    PROBE_ANNOTATION,
    Silent,
    closed_port_url,
    dry_run_create,
    effective,
    probe_pod,
    register,
    rendered_configuration,
    serving_flags,
    url_of,
)

INVALID = Path(__file__).resolve().parents[2] / "examples" / "invalid"
TOLERATIONS = "scheduling-extender.io/tolerations"
DENIED = 'admission webhook "validate.scheduling-extender.io" denied the request'
REVIEWS = "controller_runtime_webhook_requests_total"


def expected_errors() -> dict[tuple[str, str], list[str]]:
    """(file, Kind/name) -> the field errors `extender validate` prints for it."""
    out: dict[tuple[str, str], list[str]] = {}
    for line in (INVALID / "expected-output.txt").read_text().splitlines():
        m = re.match(r"^examples/invalid/([^:]+):\d+:([A-Za-z]+/[^:]+): (.*)$", line)
        if m:
            out.setdefault((m[1], m[2]), []).append(m[3])
    return out


def webhook_cluster(start_real_cluster, control_plane, *flags: str, **register_changes):
    serving = serving_flags(control_plane.pki)
    cluster = start_real_cluster([node("n-a", "a")], extender_flags=[*serving, *flags])
    register(cluster.api, url_of(serving), control_plane.pki.ca_pem, **register_changes)
    effective(cluster.api, DENIED)
    return cluster


def reviews(cluster) -> float:
    return cluster.extender_metric(REVIEWS, 'webhook="/validate"')


def kubectl_create(cluster, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([kubectl(), "create", "-f", str(path), "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=120)


def test_operators_examples_are_refused_at_kubectl_create(start_real_cluster, control_plane):
    cluster = webhook_cluster(start_real_cluster, control_plane)
    expected = expected_errors()
    for file in sorted({f for f, _ in expected}):
        proc = kubectl_create(cluster, INVALID / file)
        assert proc.returncode != 0, (file, proc.stdout)
        for (f, obj), errors in expected.items():
            if f != file:
                continue
            kind, name = obj.split("/", 1)
            (line,) = [x for x in proc.stderr.splitlines() if f'{kind} "{name}" is invalid' in x]
            assert DENIED in line, line
            for error in errors:
                assert error in line, (file, error, line)
    for kind in ("pods", "deployments", "jobs", "cronjobs", "persistentvolumes"):
        assert cluster.api.objects(kind) == [], f"a refused {kind} was stored"


def test_match_conditions_keep_plain_writes_away_from_the_webhook(start_real_cluster, control_plane):
    cluster = webhook_cluster(start_real_cluster, control_plane)
    before = reviews(cluster)
    # DefaultTolerationSeconds (a mutating admission plugin, before validating webhooks)
    # adds the not-ready and unreachable NoExecute tolerations: 254 written are 256 stored
    plain = [pod("plain"), deployment("plain-web"), pod("many-tolerations", tolerations=tolerations(254))]
    for obj in plain:
        cluster.create(obj)
    assert len(cluster.api.get("pods", "many-tolerations")["spec"]["tolerations"]) == 256
    assert reviews(cluster) == before, "a write without the annotation channel reached the webhook"
    annotated = pod("annotated", annotations={TOLERATIONS: [
        {"key": "node.example.com/sla", "operator": "Gt", "value": "750", "effect": "NoSchedule"}]})
    cluster.create(annotated, deployment("annotated-web", annotations=annotated["metadata"]["annotations"]))
    assert reviews(cluster) == before + 2
    # more tolerations than a pod may have (the per-pod limit) once admission added its two:
    # sent by the condition, refused
    with pytest.raises(ApiError) as refused:
        cluster.create(pod("too-many", tolerations=tolerations(255)))
    assert DENIED in str(refused.value)
    assert "spec.tolerations: Too many: 257: must have at most 256 tolerations per pod" in str(refused.value)
    assert reviews(cluster) == before + 3
    # namespaceSelector: kube-system (and the extender's own namespace) never wait for it
    cluster.create(probe_pod("in-kube-system") | {"metadata": probe_pod()["metadata"] | {
        "name": "in-kube-system", "namespace": "kube-system"}})
    assert reviews(cluster) == before + 3


def tolerations(n: int) -> list[dict]:
    return [{"key": f"k{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(n)]


def deployment(name: str, annotations: dict | None = None) -> dict:
    template = pod(name, {"app": name}, annotations=annotations)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": template["metadata"] | {"name": None},
                                  "spec": template["spec"]}}}


def annotated_pod(name: str, annotation: str, scheduler: str = "default-scheduler") -> dict:
    """A pod carrying `annotation` as its tolerations (another scheduler's: it stays put)."""
    return pod(name, annotations={TOLERATIONS: annotation}, scheduler=scheduler)


def merge_patch(cluster, name: str, patch: dict) -> dict:
    return cluster.api.patch("pods", name, "default", patch, "application/merge-patch+json")


@pytest.mark.long
def test_updates_are_ratcheted_through_real_updates(start_real_cluster, control_plane):
    """With TaintTolerationCEL off in the extender: new CEL tolerations are refused, an old
    pod that uses one may change it; an old pod with a value a later rule refuses keeps
    being updated as long as its channel is unchanged."""
    serving = serving_flags(control_plane.pki)
    cluster = start_real_cluster([node("n-a", "a")],
                                 extender_flags=[*serving, "--feature-gates", "TaintTolerationCEL=false"])
    cel = '[{"expression": "taint.key == \'a\'"}]'
    cluster.create(annotated_pod("old-cel", cel), annotated_pod("old-invalid", PROBE_ANNOTATION))
    register(cluster.api, url_of(serving), control_plane.pki.ca_pem)
    effective(cluster.api, DENIED)
    with pytest.raises(ApiError) as refused:
        cluster.create(annotated_pod("new-cel", cel))
    assert DENIED in str(refused.value) and "requires the TaintTolerationCEL feature gate" in str(refused.value)
    changed = merge_patch(cluster, "old-cel", {"metadata": {"annotations": {
        TOLERATIONS: '[{"expression": "taint.key == \'b\'"}]'}}})
    assert "'b'" in changed["metadata"]["annotations"][TOLERATIONS]
    before = reviews(cluster)
    touched = merge_patch(cluster, "old-invalid", {"metadata": {"labels": {"touched": "yes"}}})
    assert touched["metadata"]["labels"] == {"touched": "yes"}
    assert reviews(cluster) == before + 1  # asked (it carries the annotation) and allowed
    with pytest.raises(ApiError) as refused:
        merge_patch(cluster, "old-invalid", {"metadata": {"annotations": {
            TOLERATIONS: PROBE_ANNOTATION.replace('"08"', '"007"')}}})
    assert DENIED in str(refused.value) and 'Invalid value: "007"' in str(refused.value)


def until(cluster, obj: dict, outcome, timeout: float = 120.0) -> str:
    """Dry-run creates of `obj` until `outcome(message)` holds ("" = admitted): a
    configuration change is in effect once the API server answers by it."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            dry_run_create(cluster.api, obj)
            message = ""
        except ApiError as exc:
            message = str(exc)
        if outcome(message):
            return message
        assert time.monotonic() < deadline, f"still answered {message or 'admitted'}"
        time.sleep(0.2)


@pytest.mark.long
def test_timeout_and_failure_policy_as_the_api_server_applies_them(start_real_cluster, control_plane, pair):
    timeout = rendered_configuration()["webhooks"][0]["timeoutSeconds"]
    assert rendered_configuration()["webhooks"][0]["failurePolicy"] == "Ignore"
    cluster = start_real_cluster([node("n-a", "a")])
    ca, probe = control_plane.pki.ca_pem, probe_pod()
    down, silent = closed_port_url(), Silent(control_plane.pki)
    try:
        # down, failurePolicy: Fail -> refused; as rendered (Ignore) -> admitted
        register(cluster.api, down, ca, failurePolicy="Fail")
        message = until(cluster, probe, lambda m: "connection refused" in m)
        assert 'failed calling webhook "validate.scheduling-extender.io"' in message, message
        register(cluster.api, down, ca)
        until(cluster, probe, lambda m: m == "")
        # ... and the scheduling path runs the same validator: Pending, with its message
        invalid = annotated_pod("admitted-while-down", PROBE_ANNOTATION, scheduler=SCHEDULER_NAME)
        cluster.create(invalid)
        outcome = cluster.wait_settled([invalid], timeout=60)
        assert 'Invalid value: "08"' in outcome.unschedulable[("default", "admitted-while-down")], outcome
        # never answers: the API server gives up after timeoutSeconds, then applies the policy
        register(cluster.api, silent.url, ca, failurePolicy="Fail")
        message = until(cluster, probe, lambda m: "failed calling webhook" in m)
        assert f"/validate?timeout={timeout}s" in message and "deadline exceeded" in message, message
        assert silent.requests and all(r.startswith(f"POST /validate?timeout={timeout}s ") for r in silent.requests)
        register(cluster.api, silent.url, ca)
        until(cluster, probe, lambda m: m == "")
        asked = len(silent.requests)
        cluster.create(annotated_pod("admitted-on-timeout", PROBE_ANNOTATION))
        assert len(silent.requests) == asked + 1  # it was asked, and admitted without an answer
    finally:
        silent.stop()
