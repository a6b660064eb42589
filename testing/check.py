"""An independent checker for the scheduling simulation's placements.

It deliberately shares no code with `extender/` (it reads the raw Kubernetes dicts and
restates upstream's rules in a few lines each), so a bug in the engine's matching
cannot hide itself. Hard constraints checked, per placed pod:

* the node exists;
* `spec.unschedulable` nodes: the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`;
* every NoSchedule/NoExecute taint is tolerated (spec tolerations plus the
  `<prefix>/tolerations` annotation; Equal/Exists/Gt/Lt/SemverGt/Lt/Eq; CEL expressions
  through Python oracles supplied by the workloads);
* `nodeSelector` and required node affinity (spec AND annotation), including Semver
  and Gt/Lt operators and `matchFields metadata.name`;
* `whenUnsatisfiable: DoNotSchedule` topology spread, replayed in bind order with
  upstream's rules: eligible nodes carry every constraint's topology key and pass
  the constraint's node inclusion policies (nodeAffinityPolicy default Honor,
  nodeTaintsPolicy default Ignore); matching pods are counted in the pod's namespace,
  excluding terminating and Succeeded/Failed pods (the scheduler's informer drops
  those); `minDomains` forces the global minimum to 0 when there are fewer domains;
  skew = count(domain of node) + selfMatch - globalMin must be <= maxSkew.
  (`matchLabelKeys` is not modelled; the workloads do not use it.)

Semver parsing is a tolerant X.Y.Z reading, sufficient for the generator's values.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Oracle = Callable[[str, str, str], bool]
UNSCHEDULABLE_TAINT = ("node.kubernetes.io/unschedulable", "", "NoSchedule")


def oracle_semver(text: str) -> tuple[int, int, int] | None:
    """Tolerant X.Y.Z parse for the oracles, independent of the engine's blang port:
    `v` prefix, pre-release and build metadata are dropped (generated values are X.Y.Z)."""
    parts = text.strip().lstrip("v").split("-")[0].split("+")[0].split(".")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        return None
    if not 1 <= len(nums) <= 3:
        return None
    nums += [0] * (3 - len(nums))
    return nums[0], nums[1], nums[2]


@dataclass(frozen=True)
class Violation:
    pod: str
    node: str
    rule: str
    detail: str
    raced: bool = False  # the node state changed within the race window before the bind (testing.truth)

    def __str__(self) -> str:
        return f"{self.pod} on {self.node}: {self.rule}: {self.detail}{' (raced a node change)' if self.raced else ''}"

    def as_dict(self) -> dict[str, str]:
        return {"pod": self.pod, "node": self.node, "rule": self.rule, "detail": self.detail}


def _int(text: str) -> int | None:
    if not text or not (text.isdigit() or (text[0] == "-" and text[1:].isdigit())):
        return None
    if len(text) > 1 and text.lstrip("-").startswith("0"):
        return None  # non-canonical integers never compare
    return int(text)


def _compare(op: str, have: str, want: str) -> bool:
    """`have` is the node's label / taint's value; `want` the requirement's value."""
    if op in ("Gt", "Lt"):
        a, b = _int(have), _int(want)
        if a is None or b is None:
            return False
        return a > b if op == "Gt" else a < b
    a3, b3 = oracle_semver(have), oracle_semver(want)
    if a3 is None or b3 is None:
        return False
    return {"SemverGt": a3 > b3, "SemverLt": a3 < b3, "SemverEq": a3 == b3}.get(op, False)


def tolerates(tol: Mapping[str, Any], taint: tuple[str, str, str], oracles: Mapping[str, Oracle]
              ) -> bool:
    key, value, effect = taint
    expression = tol.get("expression")
    if expression:
        oracle = oracles.get(expression)
        if oracle is None:
            raise KeyError(f"no oracle for CEL expression {expression!r}")
        return oracle(key, value, effect)
    if tol.get("effect") and tol["effect"] != effect:
        return False
    if tol.get("key") and tol["key"] != key:
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (tol.get("value") or "") == value
    return _compare(op, value, tol.get("value") or "")


def effective_tolerations(pod: Mapping[str, Any], prefix: str) -> list[Mapping[str, Any]]:
    tols = list((pod.get("spec") or {}).get("tolerations") or [])
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(f"{prefix}/tolerations")
    if text:
        tols.extend(json.loads(text))
    return tols


def _label_req(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req["key"], req["operator"], req.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if len(values) != 1 or not present:
        return False
    return _compare(op, labels[key], values[0])


def _term(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    name_labels = {"metadata.name": node["metadata"]["name"]}
    return all(_label_req(r, labels) for r in exprs) and all(_label_req(r, name_labels) for r in fields)


def required_selectors(pod: Mapping[str, Any], prefix: str) -> list[list[Mapping[str, Any]]]:
    """Required node selectors (lists of OR-ed terms) that must all match."""
    out = []
    aff = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
    req = aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        out.append(req.get("nodeSelectorTerms") or [])
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(f"{prefix}/node-affinity")
    if text:
        ann = json.loads(text).get("requiredDuringSchedulingIgnoredDuringExecution")
        if ann is not None:
            out.append(ann.get("nodeSelectorTerms") or [])
    return out


def affinity_ok(pod: Mapping[str, Any], node: Mapping[str, Any], prefix: str) -> bool:
    labels = node["metadata"].get("labels") or {}
    for key, value in ((pod.get("spec") or {}).get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    return all(any(_term(t, node) for t in terms) for terms in required_selectors(pod, prefix))


def _taints(node: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
            for t in (node.get("spec") or {}).get("taints") or []]


def untolerated(pod: Mapping[str, Any], node: Mapping[str, Any], prefix: str,
                oracles: Mapping[str, Oracle]) -> list[tuple[str, str, str]]:
    tols = effective_tolerations(pod, prefix)
    return [t for t in _taints(node) if t[2] in ("NoSchedule", "NoExecute")
            and not any(tolerates(tol, t, oracles) for tol in tols)]


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_label_req(r, labels) for r in selector.get("matchExpressions") or [])


def _counts_pod(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return meta.get("deletionTimestamp") is None and phase not in ("Succeeded", "Failed")


class SpreadCounter:
    """Matching-pod counts per node for each (namespace, selector), kept current as
    placements are replayed (one pass over existing pods per distinct selector)."""

    def __init__(self, pods: Iterable[Mapping[str, Any]]) -> None:
        self._by_ns: dict[str, list[Mapping[str, Any]]] = {}
        for p in pods:
            self._by_ns.setdefault((p.get("metadata") or {}).get("namespace") or "default",
                                   []).append(p)
        self._cache: dict[tuple[str, str], tuple[Mapping[str, Any], Counter]] = {}

    def counts(self, namespace: str, selector: Mapping[str, Any]) -> Counter:
        key = (namespace, json.dumps(selector, sort_keys=True))
        hit = self._cache.get(key)
        if hit is None:
            counter: Counter = Counter()
            for p in self._by_ns.get(namespace, ()):
                if _counts_pod(p) and selector_matches(selector, p["metadata"].get("labels") or {}):
                    counter[p["spec"].get("nodeName", "")] += 1
            hit = self._cache[key] = (selector, counter)
        return hit[1]

    def add(self, pod: Mapping[str, Any]) -> None:
        namespace = pod["metadata"].get("namespace") or "default"
        self._by_ns.setdefault(namespace, []).append(pod)
        if not _counts_pod(pod):
            return
        labels = pod["metadata"].get("labels") or {}
        for (ns, _), (selector, counter) in self._cache.items():
            if ns == namespace and selector_matches(selector, labels):
                counter[pod["spec"]["nodeName"]] += 1


class Checker:
    def __init__(self, nodes: list[Mapping[str, Any]], existing_pods: list[Mapping[str, Any]],
                 oracles: Mapping[str, Oracle], prefix: str = "scheduling-extender.io") -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.oracles = oracles
        self.prefix = prefix
        self.spread = SpreadCounter(existing_pods)
        self._eligible: dict[str, dict[int, list[str]]] = {}

    def eligible_nodes(self, pod: Mapping[str, Any], constraints: list[Mapping[str, Any]]
                        ) -> dict[int, list[str]]:
        """Per constraint index: nodes that count as domains (upstream inclusion rules)."""
        spec = pod.get("spec") or {}
        key = json.dumps([spec.get("tolerations"), spec.get("affinity"), spec.get("nodeSelector"),
                          (pod["metadata"].get("annotations") or {}), constraints], sort_keys=True)
        hit = self._eligible.get(key)
        if hit is not None:
            return hit
        keys = [c["topologyKey"] for c in constraints]
        out: dict[int, list[str]] = {i: [] for i in range(len(constraints))}
        for name, node in self.nodes.items():
            labels = node["metadata"].get("labels") or {}
            if not all(k in labels for k in keys):
                continue
            aff = taints = None
            for i, c in enumerate(constraints):
                if c.get("nodeAffinityPolicy", "Honor") == "Honor":
                    if aff is None:
                        aff = affinity_ok(pod, node, self.prefix)
                    if not aff:
                        continue
                if c.get("nodeTaintsPolicy", "Ignore") == "Honor":
                    if taints is None:
                        taints = not untolerated(pod, node, self.prefix, self.oracles)
                    if not taints:
                        continue
                out[i].append(name)
        self._eligible[key] = out
        return out

    def _spread_violations(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
        constraints = [c for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []
                       if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
        if not constraints:
            return []
        problems = []
        labels = node["metadata"].get("labels") or {}
        eligible = self.eligible_nodes(pod, constraints)
        namespace = pod["metadata"].get("namespace") or "default"
        pod_labels = pod["metadata"].get("labels") or {}
        for i, c in enumerate(constraints):
            key = c["topologyKey"]
            if key not in labels:
                problems.append(f"node lacks topology key {key}")
                continue
            per_node = self.spread.counts(namespace, c.get("labelSelector"))
            domains: Counter = Counter()
            for name in eligible[i]:
                domains[self.nodes[name]["metadata"]["labels"][key]] += per_node.get(name, 0)
            min_match = min(domains.values()) if domains else 0
            if len(domains) < int(c.get("minDomains") or 1):
                min_match = 0
            self_match = 1 if selector_matches(c.get("labelSelector"), pod_labels) else 0
            skew = domains.get(labels[key], 0) + self_match - min_match
            if skew > int(c["maxSkew"]):
                problems.append(f"{key}: skew {skew} > maxSkew {c['maxSkew']} "
                                f"(domain {labels[key]} has {domains.get(labels[key], 0)}, "
                                f"min {min_match}, {len(domains)} domains)")
        return problems

    def check_one(self, pod: Mapping[str, Any], node_name: str, spread: bool = True) -> list[Violation]:
        """The rules `pod` breaks on `node_name` given the placements replayed so far
        (`spread=False`: all but topology spread, which depends on their order)."""
        key = f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
        node = self.nodes.get(node_name)
        if node is None:
            return [Violation(key, node_name, "node", "node does not exist")]
        out = []
        tols = effective_tolerations(pod, self.prefix)
        if (node.get("spec") or {}).get("unschedulable") and not any(
                tolerates(t, UNSCHEDULABLE_TAINT, self.oracles) for t in tols):
            out.append(Violation(key, node_name, "NodeUnschedulable", "node is cordoned"))
        bad = untolerated(pod, node, self.prefix, self.oracles)
        if bad:
            out.append(Violation(key, node_name, "TaintToleration",
                                 "untolerated: " + ", ".join(f"{k}={v}:{e}" for k, v, e in bad)))
        if not affinity_ok(pod, node, self.prefix):
            out.append(Violation(key, node_name, "NodeAffinity", "nodeSelector/affinity mismatch"))
        for problem in self._spread_violations(pod, node) if spread else ():
            out.append(Violation(key, node_name, "PodTopologySpread", problem))
        return out

    def replay(self, placements: Iterable[tuple[Mapping[str, Any], str]]) -> list[Violation]:
        """Check each placement against the state just before it, then commit it."""
        violations: list[Violation] = []
        for pod, node_name in placements:
            violations.extend(self.check_one(pod, node_name))
            bound = {**pod, "spec": {**pod["spec"], "nodeName": node_name},
                     "status": {"phase": "Running"}}
            self.spread.add(bound)
        return violations
