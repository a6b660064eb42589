"""Pod templates: each extender feature alone, and a mixed stream of all of them.

Each `Workload` makes pod dicts exactly as kube-scheduler would send them in
`ExtenderArgs.Pod`. Pods belong to anchor workloads the generator always creates
(`perf/bench`, `shop/frontend`, `payments/ledger`) so that default and explicit
topology spreading have real pods to count.

`CEL_ORACLES` restates every CEL expression used here as plain Python, so the
simulation checker can verify CEL tolerations without trusting the CEL engine.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perf.generate import CNI_KEY, HOSTNAME_KEY, KERNEL_KEY, SLA_KEY, SLA_VALUES, ZONE_KEY
from testing.check import oracle_semver

ANNOTATION_PREFIX = "scheduling-extender.io"

CEL_ENV = "taint.key.startsWith('env.example.com/')"
CEL_KERNEL = ("taint.key == 'node.example.com/kernel-version' && "
              "semver(taint.value).isGreaterThan(semver('5.15.0'))")
CEL_RACK = "taint.key.matches('^zone-a[12]-rack-[0-9]+$')"


def _kernel_oracle(key: str, value: str, effect: str) -> bool:
    if key != KERNEL_KEY:
        return False
    version = oracle_semver(value)
    return version is not None and version > (5, 15, 0)


def _rack_oracle(key: str, value: str, effect: str) -> bool:
    return re.search(r"^zone-a[12]-rack-[0-9]+$", key) is not None


CEL_ORACLES: dict[str, Callable[[str, str, str], bool]] = {
    CEL_ENV: lambda key, value, effect: key.startswith("env.example.com/"),
    CEL_KERNEL: _kernel_oracle,
    CEL_RACK: _rack_oracle,
}

BENCH_LABELS = {"app": "bench", "tier": "perf"}


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    make_spec: Callable[[int], dict[str, Any]]  # index -> partial pod (metadata/spec extras)
    namespace: str = "perf"

    def pod(self, index: int) -> dict[str, Any]:
        """A complete pending pod, unique per (workload, index)."""
        extra = self.make_spec(index)
        meta = {
            "name": f"{self.name}-{index:06d}",
            "namespace": extra.get("namespace", self.namespace),
            "uid": f"00000000-perf-{zlib.crc32(f'{self.name}/{index}'.encode()):012d}",
            "labels": dict(extra.get("labels", BENCH_LABELS)),
        }
        if extra.get("annotations"):
            meta["annotations"] = extra["annotations"]
        spec: dict[str, Any] = {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "app", "image": "registry.example.com/bench:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                *extra.get("tolerations", []),
            ],
        }
        for key in ("affinity", "topologySpreadConstraints", "nodeSelector"):
            if key in extra:
                spec[key] = extra[key]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                "status": {"phase": "Pending"}}


def _tol(key: str, operator: str, value: str = "", effect: str = "NoSchedule") -> dict[str, str]:
    out = {"key": key, "operator": operator, "effect": effect}
    if value:
        out["value"] = value
    return out


def _expr(expression: str) -> dict[str, str]:
    return {"expression": expression}


def _affinity(required: list[dict] | None = None, preferred: list[dict] | None = None) -> dict:
    node_affinity: dict[str, Any] = {}
    if required is not None:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": required}
    if preferred is not None:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return node_affinity


def _req(key: str, operator: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


SLA_THRESHOLDS = ["750", "850", "940"]


def _plain(i: int) -> dict:
    return {}


def _gt(i: int) -> dict:
    return {"tolerations": [_tol(SLA_KEY, "Gt", SLA_THRESHOLDS[i % 3])]}


def _lt(i: int) -> dict:
    return {"tolerations": [_tol(SLA_KEY, "Lt", "995")]}


def _semver_tol(i: int) -> dict:
    return {"tolerations": [_tol(KERNEL_KEY, "SemverGt", ["5.4.0", "5.10.0"][i % 2])]}


def _cel_env(i: int) -> dict:
    return {"tolerations": [_expr(CEL_ENV)]}


def _cel_kernel(i: int) -> dict:
    return {"tolerations": [_expr(CEL_KERNEL)]}


def _cel_rack(i: int) -> dict:
    return {"tolerations": [_expr(CEL_RACK), _tol("env.example.com/dev", "Exists")]}


def _affinity_required(i: int) -> dict:
    terms = [{"matchExpressions": [_req(CNI_KEY, "SemverGt", "1.3.99"),
                                   _req(KERNEL_KEY, "SemverLt", "7.0.0")]}]
    if i % 2:
        terms.append({"matchExpressions": [_req(KERNEL_KEY, "SemverEq", "6.8.0")]})
    return {"affinity": {"nodeAffinity": _affinity(required=terms)}}


def _affinity_preferred(i: int) -> dict:
    preferred = [
        {"weight": 50, "preference": {"matchExpressions": [_req(KERNEL_KEY, "SemverGt", "5.99.99")]}},
        {"weight": 20, "preference": {"matchExpressions": [_req(CNI_KEY, "SemverEq", "1.5.0")]}},
        {"weight": 10, "preference": {"matchExpressions": [_req(KERNEL_KEY, "SemverLt", "5.10.0")]}},
    ]
    return {"affinity": {"nodeAffinity": _affinity(preferred=preferred)}}


def _spread_zone(i: int) -> dict:
    """KEP-3094 story: zone spread honouring taints, spot tolerated through Gt."""
    selector = {"matchLabels": {"app": "frontend"}}
    return {
        "namespace": "shop",
        "labels": {"app": "frontend", "perf": "spread"},
        "tolerations": [_tol(SLA_KEY, "Gt", "750")],
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "DoNotSchedule",
             "nodeTaintsPolicy": "Honor", "minDomains": 3, "labelSelector": selector},
            {"maxSkew": 1, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "ScheduleAnyway",
             "nodeTaintsPolicy": "Honor", "labelSelector": selector},
        ],
    }


def _spread_hostname(i: int) -> dict:
    """Hard per-host spread of a StatefulSet-like app with minDomains."""
    selector = {"matchLabels": {"app": "ledger"}}
    return {
        "namespace": "payments",
        "labels": {"app": "ledger", "perf": "spread"},
        "topologySpreadConstraints": [
            {"maxSkew": 2, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "DoNotSchedule",
             "nodeTaintsPolicy": "Honor", "minDomains": 5, "labelSelector": selector},
            {"maxSkew": 2, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": selector},
        ],
    }


def _annotations(i: int) -> dict:
    tolerations = [_tol(SLA_KEY, "Gt", "800"), _tol(KERNEL_KEY, "SemverGt", "5.10.0")]
    affinity = _affinity(
        required=[{"matchExpressions": [_req(KERNEL_KEY, "SemverGt", "5.99.0")]}],
        preferred=[{"weight": 30, "preference": {
            "matchExpressions": [_req(CNI_KEY, "SemverGt", "1.4.0")]}}],
    )
    return {
        "annotations": {
            f"{ANNOTATION_PREFIX}/tolerations": json.dumps(tolerations),
            f"{ANNOTATION_PREFIX}/node-affinity": json.dumps(affinity),
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
    }


def _annotations_cel(i: int) -> dict:
    tolerations = [_tol(SLA_KEY, "Lt", "950"), _expr(CEL_ENV)]
    return {"annotations": {f"{ANNOTATION_PREFIX}/tolerations": json.dumps(tolerations)}}


WORKLOADS: list[Workload] = [
    Workload("plain", "no constraints (default tolerations only)", _plain),
    Workload("gt", "numeric Gt SLA toleration (KEP-5471)", _gt),
    Workload("lt", "numeric Lt SLA toleration (KEP-5471)", _lt),
    Workload("semver-tol", "SemverGt kernel toleration (KEP-5721)", _semver_tol),
    Workload("cel-env", "CEL story 1: env.example.com/* prefix (KEP-5500)", _cel_env),
    Workload("cel-kernel", "CEL story 2: kernel semver > 5.15.0 (KEP-5500)", _cel_kernel),
    Workload("cel-rack", "CEL story 3: rack regex (KEP-5500)", _cel_rack),
    Workload("aff-required", "required semver node affinity (SemverGt/Lt/Eq)", _affinity_required),
    Workload("aff-preferred", "preferred semver node affinity (SemverGt/Lt/Eq)",
             _affinity_preferred),
    Workload("spread-zone", "zone DoNotSchedule (Honor, minDomains 3) + hostname soft",
             _spread_zone, "shop"),
    Workload("spread-host", "hostname DoNotSchedule (Honor, minDomains 5) + zone soft",
             _spread_hostname, "payments"),
    Workload("annotations", "tolerations + node-affinity via scheduling-extender.io annotations",
             _annotations),
    Workload("annotations-cel", "annotation tolerations with a CEL expression", _annotations_cel),
]


# Mixed stream: weights follow what a fleet runs most (plain and tolerations) while still
# exercising every feature every few pods.
MIX_WEIGHTS = {
    "plain": 4, "gt": 2, "lt": 1, "semver-tol": 1, "cel-env": 1, "cel-kernel": 1, "cel-rack": 1,
    "aff-required": 1, "aff-preferred": 1, "spread-zone": 2, "spread-host": 1, "annotations": 1,
    "annotations-cel": 1,
}


def mixed_pods(count: int, start: int = 0) -> list[dict[str, Any]]:
    """A deterministic interleaving of every workload, by MIX_WEIGHTS."""
    # Round-robin over the weights rather than blocks, so consecutive pods differ as in a
    # real scheduling queue.
    cycle: list[Workload] = []
    for round_ in range(max(MIX_WEIGHTS.get(w.name, 1) for w in WORKLOADS)):
        cycle.extend(w for w in WORKLOADS if MIX_WEIGHTS.get(w.name, 1) > round_)
    return [cycle[i % len(cycle)].pod(start + i) for i in range(count)]


def distinct_shapes(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same pods, each with a label no other pod has: no two share a scheduling
    shape, so the server computes every answer (none is reused per shape)."""
    out = []
    for pod in pods:
        meta = {**pod["metadata"], "labels": {**pod["metadata"]["labels"],
                                             "perf.example.com/pod": pod["metadata"]["name"]}}
        out.append({**pod, "metadata": meta})
    return out


def no_two_alike(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same pods as many small teams would write them: every value a pod's
    constraints carry is its own. Its app label (and every spread selector and
    matchLabels naming it), its Gt/Lt and Semver thresholds (spec and annotation
    tolerations and node affinity: same meaning, another number), and its CEL
    expressions (`... && taint.value != '<pod name>'`: a program of its own, true where
    the original is) differ from every other pod's, so nothing computed for one pod's
    constraints (selector counts, verdicts per toleration set, compiled programs)
    serves the next."""
    out = []
    for i, pod in enumerate(pods):
        pod = json.loads(json.dumps(pod))
        name = pod["metadata"]["name"]
        team = f"team-{i}"
        labels = pod["metadata"].setdefault("labels", {})
        old_app = labels.get("app")
        labels["app"] = team
        spec = pod["spec"]
        for c in spec.get("topologySpreadConstraints") or []:
            match = (c.get("labelSelector") or {}).get("matchLabels") or {}
            if old_app is not None and match.get("app") == old_app:
                match["app"] = team
        spec["tolerations"] = [_own(t, i, name) for t in spec.get("tolerations") or []]
        _own_terms(spec.get("affinity"), i)
        annotations = pod["metadata"].get("annotations") or {}
        for key in list(annotations):
            value = json.loads(annotations[key])
            if key.endswith("/tolerations"):
                value = [_own(t, i, name) for t in value]
            else:
                _own_terms({"nodeAffinity": value}, i)
            annotations[key] = json.dumps(value)
        out.append(pod)
    return out


def _own(toleration: dict[str, Any], i: int, name: str) -> dict[str, Any]:
    """The toleration with a value of its own and the same verdicts on generated taints."""
    t = dict(toleration)
    if t.get("expression"):
        t["expression"] = f"({t['expression']}) && taint.value != '{name}'"
    elif t.get("operator") in ("Gt", "Lt") and t.get("value", "").isdigit():
        t["value"] = str(_same_verdicts(int(t["value"]), t["operator"], i))
    elif t.get("operator", "").startswith("Semver") and t.get("value"):
        t["value"] = _patched(t["value"], i)
    return t


def _same_verdicts(value: int, operator: str, i: int) -> int:
    """Another threshold with the same verdict on every generated SLA taint value: Gt
    moves up short of the next value above, Lt down short of the next value below."""
    values = sorted(int(v) for v in SLA_VALUES)
    if operator == "Gt":
        room = min((v for v in values if v > value), default=value + 10) - value - 1
        return value + (1 + i % room if room > 0 else 0)
    room = value - max((v for v in values if v < value), default=value - 10) - 1
    return value - (1 + i % room if room > 0 else 0)


def _own_terms(affinity: dict[str, Any] | None, i: int) -> None:
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = list(required.get("nodeSelectorTerms") or [])
    terms += [p.get("preference") or {} for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    for term in terms:
        for req in term.get("matchExpressions") or []:
            if req.get("operator", "").startswith("Semver"):
                req["values"] = [_patched(v, i) for v in req.get("values") or []]


def _patched(version: str, i: int) -> str:
    """`version` with a build-metadata suffix of its own: the same order for every
    comparison (semver ignores build metadata), another string."""
    return f"{version}+team{i}"


def workload_of(pod: dict[str, Any]) -> str:
    """The workload a generated pod came from (its name minus the index)."""
    return pod["metadata"]["name"].rsplit("-", 1)[0]


# scheduler_perf-like workloads (kubernetes/test/integration/scheduler_perf) and
# kube-scheduler's own pods/s thresholds for them at 5,000 nodes, in the order issue 13
# lists them. Reported next to the extender's simulated pods/s, never asserted.
def _sp_spread(when: str, honor: bool = False) -> Callable[[int], dict]:
    app = f"sp-{when.lower()}{'-honor' if honor else ''}"

    def make(i: int) -> dict:
        constraint: dict[str, Any] = {"maxSkew": 5, "topologyKey": ZONE_KEY, "whenUnsatisfiable": when,
                                      "labelSelector": {"matchLabels": {"app": app}}}
        if honor:
            constraint.update(nodeTaintsPolicy="Honor", nodeAffinityPolicy="Honor")
        return {"labels": {"app": app}, "topologySpreadConstraints": [constraint]}

    return make


def _sp_affinity(i: int) -> dict:
    return {"labels": {"app": "sp-affinity"}, "affinity": {"nodeAffinity": _affinity(required=[
        {"matchExpressions": [_req(ZONE_KEY, "In", "zone-a", "zone-b", "zone-c")]}])}}


SCHEDULER_PERF: list[tuple[Workload, float]] = [
    (Workload("sp-hard-spread", "zone DoNotSchedule, maxSkew 5", _sp_spread("DoNotSchedule")), 460.0),
    (Workload("sp-soft-spread", "zone ScheduleAnyway, maxSkew 5", _sp_spread("ScheduleAnyway")), 340.0),
    (Workload("sp-inclusion", "zone DoNotSchedule, taints and affinity Honor (tainted nodes)",
              _sp_spread("DoNotSchedule", honor=True)), 270.0),
    (Workload("sp-node-affinity", "required node affinity on zones", _sp_affinity), 220.0),
    (Workload("sp-default-spread", "no constraints: system default spreading (the pod's Service)",
              _plain), 160.0),
]
