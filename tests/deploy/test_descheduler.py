"""manifests/descheduler/policy.yaml: the descheduler policy docs/operate/drift.md
recommends, checked against the descheduler's own types and rules.

The schema below is the shape of `descheduler/v1alpha2` `DeschedulerPolicy` as its Go
types declare it (pkg/api/v1alpha2: DeschedulerPolicy, DeschedulerProfile, Plugins,
PluginSet, PluginConfig) and of the arguments of the three plugins the policy configures
(DefaultEvictorArgs, RemovePodsViolatingNodeTaintsArgs,
RemovePodsViolatingNodeAffinityArgs, with metav1.LabelSelector and api.Namespaces), json
field names as their tags give them, nothing else allowed; plus what the descheduler's
argument validation refuses (include and exclude namespaces together, included and
excluded taints together, an empty or unknown nodeAffinityType, a selector requirement
with values its operator forbids). The file is rendered as the descheduler deploys it
(a ConfigMap, `kubectl create configmap --dry-run`) and shown in drift.md as it is."""

from __future__ import annotations

import re

import jsonschema
import pytest
import yaml
from deploy_tools import MANIFESTS, ROOT, run, tool

from extender.plugins.podtopologyspread.selector import parse_label_selector

POLICY = MANIFESTS / "descheduler" / "policy.yaml"
DOC = ROOT / "docs" / "operate" / "drift.md"
LABEL = "scheduling-extender.io/extended-constraints"


def strict(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "additionalProperties": False, "required": list(required)}


STRINGS = {"type": "array", "items": {"type": "string"}}
LABEL_SELECTOR = strict({  # metav1.LabelSelector
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array", "items": strict({
        "key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
        "values": STRINGS}, ("key", "operator"))},
})
NAMESPACES = strict({"include": STRINGS, "exclude": STRINGS})  # api.Namespaces
ARGS = {
    "DefaultEvictor": strict({
        "nodeSelector": {"type": "string"}, "evictLocalStoragePods": {"type": "boolean"},
        "evictDaemonSetPods": {"type": "boolean"}, "evictSystemCriticalPods": {"type": "boolean"},
        "ignorePvcPods": {"type": "boolean"}, "evictFailedBarePods": {"type": "boolean"},
        "labelSelector": LABEL_SELECTOR, "namespaceLabelSelector": LABEL_SELECTOR,
        "priorityThreshold": strict({"value": {"type": "integer"}, "name": {"type": "string"}}),
        "nodeFit": {"type": "boolean"}, "minReplicas": {"type": "integer", "minimum": 0},
        "minPodAge": {"type": "string"}, "ignorePodsWithoutPDB": {"type": "boolean"}}),
    "RemovePodsViolatingNodeTaints": strict({
        "namespaces": NAMESPACES, "labelSelector": LABEL_SELECTOR, "includePreferNoSchedule": {"type": "boolean"},
        "excludedTaints": STRINGS, "includedTaints": STRINGS}),
    "RemovePodsViolatingNodeAffinity": strict({
        "namespaces": NAMESPACES, "labelSelector": LABEL_SELECTOR,
        "nodeAffinityType": {"type": "array", "minItems": 1, "items": {"enum": [
            "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"]}}},
        ("nodeAffinityType",)),
}
PLUGIN_SET = strict({"enabled": STRINGS, "disabled": STRINGS})
POLICY_SCHEMA = strict({
    "apiVersion": {"const": "descheduler/v1alpha2"}, "kind": {"const": "DeschedulerPolicy"},
    "profiles": {"type": "array", "minItems": 1, "items": strict({
        "name": {"type": "string", "minLength": 1},
        "pluginConfig": {"type": "array", "items": strict({"name": {"enum": sorted(ARGS)}, "args": {"type": "object"}},
                                                          ("name", "args"))},
        "plugins": strict({k: PLUGIN_SET for k in ("presort", "sort", "deschedule", "balance", "filter",
                                                   "preevictionfilter")}),
    }, ("name",))},
    "nodeSelector": {"type": "string"},
    "maxNoOfPodsToEvictPerNode": {"type": "integer", "minimum": 0},
    "maxNoOfPodsToEvictPerNamespace": {"type": "integer", "minimum": 0},
    "maxNoOfPodsToEvictTotal": {"type": "integer", "minimum": 0},
    "evictionFailureEventNotification": {"type": "boolean"},
    "gracePeriodSeconds": {"type": "integer", "minimum": 0},
}, ("apiVersion", "kind"))
DESCHEDULE_PLUGINS = {"RemovePodsViolatingNodeTaints", "RemovePodsViolatingNodeAffinity"}


def check(policy: dict) -> list[str]:
    """What the descheduler would refuse in this policy (empty: nothing)."""
    try:
        jsonschema.validate(policy, POLICY_SCHEMA)
    except jsonschema.ValidationError as exc:
        return [f"{'/'.join(map(str, exc.absolute_path))}: {exc.message}"]
    problems = []
    for profile in policy["profiles"]:
        configured = {}
        for entry in profile.get("pluginConfig", ()):
            name, args = entry["name"], entry["args"]
            try:
                jsonschema.validate(args, ARGS[name])
            except jsonschema.ValidationError as exc:
                problems.append(f"{name}.args: {exc.message}")
                continue
            configured[name] = args
            namespaces = args.get("namespaces") or {}
            if namespaces.get("include") and namespaces.get("exclude"):
                problems.append(f"{name}: only one of include/exclude namespaces can be set")
            if args.get("includedTaints") and args.get("excludedTaints"):
                problems.append(f"{name}: includedTaints and excludedTaints cannot be set together")
            for selector in (args.get("labelSelector"), args.get("namespaceLabelSelector")):
                for req in (selector or {}).get("matchExpressions", ()):
                    has_values = bool(req.get("values"))
                    if has_values != (req["operator"] in ("In", "NotIn")):
                        problems.append(f"{name}: {req['operator']} {'forbids' if has_values else 'needs'} values")
        enabled = set(profile.get("plugins", {}).get("deschedule", {}).get("enabled", ()))
        if not enabled <= DESCHEDULE_PLUGINS:
            problems.append(f"unknown deschedule plugins {sorted(enabled - DESCHEDULE_PLUGINS)}")
        if "RemovePodsViolatingNodeAffinity" in enabled and "RemovePodsViolatingNodeAffinity" not in configured:
            problems.append("RemovePodsViolatingNodeAffinity needs its nodeAffinityType")
    return problems


@pytest.fixture(scope="module")
def policy() -> dict:
    return yaml.safe_load(POLICY.read_text())


def test_the_shipped_policy_is_a_valid_v1alpha2_policy(policy):
    assert check(policy) == []


@pytest.mark.parametrize(("change", "says"), [
    (lambda p: p.update(apiVersion="descheduler/v1alpha1"), "descheduler/v1alpha2"),
    (lambda p: p["profiles"][0]["pluginConfig"][1]["args"].update(labelSelectors={}), "labelSelectors"),
    (lambda p: p["profiles"][0]["pluginConfig"][1]["args"].update(namespaces={"include": ["a"], "exclude": ["b"]}),
     "only one of include/exclude"),
    (lambda p: p["profiles"][0]["pluginConfig"][2]["args"].update(nodeAffinityType=[]), "should be non-empty"),
    (lambda p: p["profiles"][0]["pluginConfig"][2]["args"]["labelSelector"]["matchExpressions"][0].update(
        values=["x"]), "DoesNotExist forbids values"),
    (lambda p: p["profiles"][0]["plugins"]["deschedule"]["enabled"].append("RemoveDuplicatez"), "unknown deschedule"),
])
def test_the_check_refuses_what_the_descheduler_refuses(policy, change, says):
    """The checker is not a rubber stamp: each mistake is refused, with what it is."""
    broken = yaml.safe_load(POLICY.read_text())
    change(broken)
    problems = check(broken)
    assert problems and any(says in p for p in problems), problems


def test_both_plugins_leave_the_labelled_pods_alone(policy):
    (profile,) = policy["profiles"]
    assert set(profile["plugins"]["deschedule"]["enabled"]) == DESCHEDULE_PLUGINS
    for entry in profile["pluginConfig"]:
        if entry["name"] not in DESCHEDULE_PLUGINS:
            continue
        selector = parse_label_selector(entry["args"]["labelSelector"])
        assert selector.matches({"app": "web"}), f"{entry['name']} must still act on ordinary pods"
        assert not selector.matches({"app": "web", LABEL: "true"}), f"{entry['name']} must skip labelled pods"
        assert not selector.matches({LABEL: ""})
    taints = next(e["args"] for e in profile["pluginConfig"] if e["name"] == "RemovePodsViolatingNodeTaints")
    assert not taints.get("includePreferNoSchedule"), "PreferNoSchedule is a preference: never a reason to evict"


def test_rendered_as_the_descheduler_deploys_it_and_shown_in_the_docs(policy, tmp_path):
    out = run([tool("kubectl"), "create", "configmap", "descheduler-policy-configmap", "-n", "kube-system",
               f"--from-file=policy.yaml={POLICY}", "--dry-run=client", "-o", "yaml"])
    config_map = yaml.safe_load(out)
    assert config_map["kind"] == "ConfigMap"
    assert yaml.safe_load(config_map["data"]["policy.yaml"]) == policy
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    shown = [yaml.safe_load(b) for b in blocks if "DeschedulerPolicy" in b]
    assert shown == [policy], "docs/operate/drift.md shows manifests/descheduler/policy.yaml as it is"
