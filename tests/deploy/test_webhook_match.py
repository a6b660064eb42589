"""The webhook's matchConditions (issue 25 item 4): only objects the validator can object
to reach the webhook, and every object it can object to does.

The CEL expression is evaluated with cel-python against AdmissionReview objects: every
example manifest, and workloads of every registered kind with and without the
annotation channel. Whenever the webhook's own `review()` would deny or warn, the
condition must be true (skipping the call would lose that answer); for an object
without the channel it must be false (the call would be wasted)."""

from __future__ import annotations

import copy

import celpy
import orjson
import pytest
import yaml
from deploy_tools import MANIFESTS, ROOT

from extender.cel.environment import ENVIRONMENT
from extender.features import FeatureGates
from extender.model.parse import DEFAULT_ANNOTATION_PREFIX
from extender.server.webhook import review
from extender.validation.limits import MAX_TOLERATIONS_PER_POD
from extender.validation.workloads import TEMPLATE_PATHS

CONFIG = MANIFESTS / "components" / "webhook" / "validatingwebhookconfiguration.yaml"
WEBHOOK = yaml.safe_load(CONFIG.read_text())["webhooks"][0]
GROUPS = {"Pod": "", "ReplicationController": "", "Deployment": "apps", "StatefulSet": "apps",
          "DaemonSet": "apps", "ReplicaSet": "apps", "Job": "batch", "CronJob": "batch"}
BAD = '[{"key": "k", "operator": "Gt", "value": "08", "effect": "NoSchedule"}]'
GOOD = '[{"key": "k", "operator": "Gt", "value": "8", "effect": "NoSchedule"}]'
WARNED = '[{"key": "k", "operator": "Exists", "effect": "NoExecute"}]'  # admitted, with a warning


def condition():
    (match,) = WEBHOOK["matchConditions"]
    env = ENVIRONMENT  # the extender's one Environment: a new one would lower the recursion limit
    program = env.program(env.compile(match["expression"]))
    return lambda obj: bool(program.evaluate({"object": celpy.json_to_cel(obj)}))


MATCHES = condition()


def answer(obj: dict) -> dict:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": GROUPS[obj["kind"]], "version": "v1", "kind": obj["kind"]},
                        "operation": "CREATE", "name": obj["metadata"].get("name", ""), "object": obj}}
    return review(orjson.dumps(body), DEFAULT_ANNOTATION_PREFIX, FeatureGates())["response"]


def pod_spec(tolerations: int = 0) -> dict:
    return {"containers": [{"name": "c", "image": "i"}],
            "tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(tolerations)]}


def workload(kind: str, annotations: dict | None = None, tolerations: int = 0) -> dict:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": pod_spec(tolerations)}
    if annotations is not None:
        template["metadata"]["annotations"] = annotations
    obj: dict = {"apiVersion": "v1", "kind": kind, "metadata": {"name": kind.lower(), "namespace": "default"}}
    path = TEMPLATE_PATHS[kind]
    if not path:
        obj["metadata"].update(template["metadata"])
        obj["spec"] = template["spec"]
        return obj
    node = obj
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = template
    return obj


def examples() -> list[dict]:
    docs = []
    for path in sorted([*(ROOT / "examples" / "pods").glob("*.yaml"), *(ROOT / "examples" / "invalid").glob("*.yaml"),
                        ROOT / "examples" / "kind" / "spot-pod.yaml"]):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") in GROUPS]
    return docs


def synthetic() -> list[dict]:
    objects = []
    tol = f"{DEFAULT_ANNOTATION_PREFIX}/tolerations"
    aff = f"{DEFAULT_ANNOTATION_PREFIX}/node-affinity"
    for kind in GROUPS:
        objects += [workload(kind), workload(kind, {"other.io/tolerations": BAD}),
                    workload(kind, {tol: BAD}), workload(kind, {tol: GOOD}), workload(kind, {tol: WARNED}),
                    workload(kind, {aff: "{"}),
                    workload(kind, tolerations=MAX_TOLERATIONS_PER_POD),
                    workload(kind, tolerations=MAX_TOLERATIONS_PER_POD + 1)]
    return objects


CASES = examples() + synthetic()


@pytest.mark.parametrize("obj", CASES, ids=lambda o: f"{o['kind']}/{o['metadata'].get('name')}")
def test_the_webhook_is_called_exactly_when_it_can_answer_something(obj):
    response = answer(copy.deepcopy(obj))
    has_something_to_say = not response["allowed"] or bool(response.get("warnings"))
    matched = MATCHES(obj)
    if has_something_to_say:
        assert matched, f"the condition skips an object the webhook would answer: {response}"
    template = obj
    for part in TEMPLATE_PATHS[obj["kind"]]:
        template = template[part]
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    channel = {k for k in annotations if k.startswith(f"{DEFAULT_ANNOTATION_PREFIX}/")}
    too_many = len((template.get("spec") or {}).get("tolerations") or []) > MAX_TOLERATIONS_PER_POD
    assert matched == bool(channel or too_many)


def test_the_cases_cover_denials_warnings_and_silence():
    outcomes = [answer(copy.deepcopy(o)) for o in CASES]
    assert any(not r["allowed"] for r in outcomes)
    assert any(r["allowed"] and r.get("warnings") for r in outcomes)
    assert sum(1 for o in CASES if not MATCHES(o)) >= len(GROUPS) * 3


def test_the_condition_names_the_extenders_annotations_and_limit():
    expression = WEBHOOK["matchConditions"][0]["expression"]
    for key in ("tolerations", "node-affinity"):
        assert f"'{DEFAULT_ANNOTATION_PREFIX}/{key}'" in expression
    assert f"> {MAX_TOLERATIONS_PER_POD}" in expression
    base = yaml.safe_load((MANIFESTS / "base" / "extender.yaml").read_text())
    assert base.get("annotationPrefix", DEFAULT_ANNOTATION_PREFIX) == DEFAULT_ANNOTATION_PREFIX


def test_the_rules_register_every_kind_the_validator_reads():
    registered = {r for rule in WEBHOOK["rules"] for r in rule["resources"]}
    plural = {"Pod": "pods", "ReplicationController": "replicationcontrollers", "Deployment": "deployments",
              "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "ReplicaSet": "replicasets",
              "Job": "jobs", "CronJob": "cronjobs"}
    assert set(plural.values()) <= registered
    assert set(GROUPS) == set(TEMPLATE_PATHS) - {"PodTemplate"}


def test_cert_manager_is_named_as_a_prerequisite():
    text = (MANIFESTS / "components" / "webhook" / "kustomization.yaml").read_text()
    assert "PREREQUISITE: cert-manager" in text
    doc = (ROOT / "docs" / "operate" / "webhook.md").read_text()
    assert "cert-manager" in doc[:doc.index("## ")], "said before anything else"
