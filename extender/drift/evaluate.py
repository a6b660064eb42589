"""Does a running pod's node still satisfy what the pod asks for? The verdicts of the
extender's own plugins (the instances `/filter` runs: same arguments, gates and shared
CEL cache), worded as `extender explain` words them.

Per (pod shape, node):

* **TaintToleration**: the first untolerated `NoSchedule` taint (severity `required`:
  `/filter` would reject the node now, and nothing in Kubernetes acts on it); the first
  untolerated `NoExecute` taint (`evicting`: the kubelet and the taint-eviction
  controller act on it themselves, from `spec.tolerations` with the API's operators,
  which is also the only toleration such a taint counts for here); untolerated
  `PreferNoSchedule` taints (`preferred`: scoring would steer away, nothing more). One
  verdict per distinct taint tuple and shape, memoised.
* **NodeAffinity**: the pod's required node affinity (nodeSelector, spec and annotation
  terms, Semver/Gt/Lt) and the scheduler-enforced `addedAffinity` (`required`).
* **VolumeNodeAffinity**: the node affinity of every PersistentVolume the pod's claims
  are bound to, spec and annotation (`required`). Unbound or missing claims and
  volumes are not a question of where the pod runs: not reported.

A pod whose annotation does not validate (any more) fails every node in `/filter`; it
is reported with the validation error as its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.caching import ByteLRU
from extender.explain import key_details
from extender.matching.nodeselector import RequiredAffinity
from extender.matching.numeric import go_quote
from extender.matching.tolerations import TolerationMatcher
from extender.model import Node, Pod, Taint
from extender.model.objects import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE
from extender.plugins import nodeaffinity, tainttoleration, volumenodeaffinity
from extender.plugins.tainttoleration import untolerated_details
from extender.state.volumes import VolumeLayer

REQUIRED, EVICTING, PREFERRED = "required", "evicting", "preferred"
SEVERITIES = (REQUIRED, EVICTING, PREFERRED)
TAINTS = tainttoleration.NAME
AFFINITY = nodeaffinity.NAME
VOLUMES = volumenodeaffinity.NAME
TAINT_MEMO = 65536  # (shape, taint tuple) verdicts kept


@dataclass(frozen=True, slots=True)
class Violation:
    """One requirement a pod's node no longer meets."""

    plugin: str
    severity: str  # required | evicting | preferred
    reason: str  # the plugin's reason, as `/filter` answers it and `explain` shows it
    # explain's detail lines, as `kubectl extender why` prints them (`key_details`: lines
    # saying a toleration is about another taint are left out)
    details: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "severity": self.severity, "reason": self.reason,
                "details": list(self.details)}


# Reasons the gauge is labelled with: the plugins' own constants. A reason outside them
# (a validation error's text, an invalid volume's message) is counted under the
# plugin's `INVALID` label, so the label set stays bounded.
KNOWN_REASONS = {
    TAINTS: (tainttoleration.ERR_REASON_UNTOLERATED,),
    AFFINITY: (nodeaffinity.ERR_REASON_POD, nodeaffinity.ERR_REASON_ENFORCED),
    VOLUMES: (volumenodeaffinity.ERR_REASON_NODE_CONFLICT,),
}
INVALID = {
    TAINTS: "invalid tolerations annotation",
    AFFINITY: "invalid node-affinity annotation",
    VOLUMES: "invalid PersistentVolume node affinity",
}


def gauge_reason(violation: Violation) -> str:
    """The bounded `reason` label a violation is counted under."""
    known = KNOWN_REASONS.get(violation.plugin, ())
    if violation.reason in known:
        return violation.reason
    return INVALID.get(violation.plugin, violation.reason)


def _label(labels: Mapping[str, str], key: str) -> str:
    value = labels.get(key)
    return "the node has no such label" if value is None else f"the node's value is {go_quote(value)}"


def affinity_details(required: RequiredAffinity, sources: tuple[str, ...], node: Node) -> tuple[str, ...]:
    """Which part of a pod's required affinity the node fails, each named by where the
    pod says it (nodeSelector, spec affinity, the annotation)."""
    labels = node.labels
    out = [f"nodeSelector {key}={value}: {_label(labels, key)}"
           for key, value in required.node_selector if labels.get(key) != value]
    for where, selector in zip(sources, required.selectors, strict=False):
        if not selector.matches(node):
            out.append(f"{where}: {selector.why_not(labels)}")
    return tuple(out)


class Evaluator:
    """The verdicts of one profile's plugins for one pod shape on one node (see the
    module docstring): only the plugins the profile has the extender run (those it
    disables in-tree); kube-scheduler's own plugins judged the others at placement."""

    def __init__(self, plugins: list) -> None:
        by_name = {p.name: p for p in plugins}
        self.taints = by_name.get(TAINTS)
        self.affinity = by_name.get(AFFINITY)
        self.volumes = by_name.get(VOLUMES)
        if self.taints is not None:
            self.gates, self.cel = self.taints.handle.gates, self.taints.handle.cel
        self._taints = ByteLRU.counted("drift-taints", TAINT_MEMO)  # (shape, taints) -> violations

    def evaluate(self, shape: Any, node: Node, namespace: str, claims: tuple, volumes: VolumeLayer,
                 name: str = "") -> tuple[Violation, ...]:
        """Every requirement `node` fails for a pod of `shape` (in plugin order)."""
        pod = shape.pod
        taints: tuple[Violation, ...] = ()
        if self.taints is None:
            pass
        elif pod.tolerations_error:
            taints = (Violation(TAINTS, REQUIRED, pod.tolerations_error),)
        elif node.taints:
            taints = self.taint_violations(shape, node.taints)
        rest: tuple[Violation, ...] = ()
        if self.affinity is None:
            pass
        elif pod.affinity_error:
            rest = (Violation(AFFINITY, REQUIRED, pod.affinity_error),)
        else:
            rest = self.affinity_violations(shape, node)
        if claims and self.volumes is not None:
            rest += self.volume_violations(Pod(namespace, name, volume_claims=claims), node, volumes)
        return taints + rest if rest else taints  # the memo's own tuple when only taints fail: shared

    def taint_violations(self, shape: Any, taints: tuple[Taint, ...]) -> tuple[Violation, ...]:
        """Once per distinct taint tuple and shape (memoised)."""
        key = (shape, taints)
        return self._taints.get_or_build(key, lambda: self._taint_verdicts(shape.pod, taints))

    def _taint_verdicts(self, pod: Pod, taints: tuple[Taint, ...]) -> tuple[Violation, ...]:
        matcher = TolerationMatcher(pod.tolerations, self.gates, self.cel)
        reason = tainttoleration.ERR_REASON_UNTOLERATED
        out = []
        for effect, severity in ((NO_SCHEDULE, REQUIRED), (NO_EXECUTE, EVICTING)):
            taint = matcher.first_untolerated(taints, lambda t, e=effect: t.effect == e)
            if taint is not None:
                out.append(Violation(TAINTS, severity, reason, tuple(key_details(untolerated_details(matcher, taint)))))
        # TaintToleration's Score: PreferNoSchedule taints no toleration tolerates
        # (tolerations with another effect never tolerate them, so the whole matcher
        # answers as the plugin's PreferNoSchedule-only one does)
        preferred = [t for t in taints if t.effect == PREFER_NO_SCHEDULE and not matcher.tolerated(t)]
        if preferred:
            details = tuple(line for t in preferred for line in key_details(untolerated_details(matcher, t)))
            out.append(Violation(TAINTS, PREFERRED, reason, details))
        return tuple(out)

    def affinity_violations(self, shape: Any, node: Node) -> tuple[Violation, ...]:
        added = self.affinity.added.required
        if added is not None and not added.matches(node):
            return (Violation(AFFINITY, REQUIRED, nodeaffinity.ERR_REASON_ENFORCED,
                              (f"scheduler-enforced addedAffinity: {added.why_not(node.labels)}",)),)
        if shape.required.matches(node):
            return ()
        details = affinity_details(shape.required, shape.sources, node)
        details += tuple(f"invalid requirement never matches: {e}" for e in shape.required.errors)
        return (Violation(AFFINITY, REQUIRED, nodeaffinity.ERR_REASON_POD, details),)

    def volume_violations(self, pod: Pod, node: Node, volumes: VolumeLayer) -> tuple[Violation, ...]:
        checks, status = self.volumes.checks(pod, volumes)
        if not status.is_success:
            return ()  # a claim or volume the state does not hold: nothing to say about the node
        out = []
        for check in checks:
            if check.bound and check.fails(node.labels):
                out.append(Violation(VOLUMES, REQUIRED, check.status.reasons[0], (check.explain(node.labels),)))
        return tuple(out)


class ByProfile:
    """Each pod judged by its own profile (`spec.schedulerName`, kept in its shape):
    that profile's plugins, with its arguments (`addedAffinity`...). `fallback`: the
    plugins for a pod of a profile `profiles` lacks (the single-profile settings answer
    every pod); None: such a pod, as one of a profile that has the extender run none of
    these plugins, is not the extender's to judge and is never reported."""

    def __init__(self, fallback: list | None, profiles: Mapping[str, list] | None = None) -> None:
        self._fallback = self._of(fallback)
        self._profiles = {name: self._of(plugins) for name, plugins in (profiles or {}).items()}

    @staticmethod
    def _of(plugins: list | None) -> Evaluator | None:
        if not plugins or not {p.name for p in plugins} & {TAINTS, AFFINITY, VOLUMES}:
            return None
        return Evaluator(plugins)

    def of(self, scheduler_name: str) -> Evaluator | None:
        return self._profiles.get(scheduler_name, self._fallback)

    def evaluate(self, shape: Any, node: Node, namespace: str, claims: tuple, volumes: VolumeLayer,
                 name: str = "") -> tuple[Violation, ...]:
        """`Evaluator.evaluate` by the shape's profile; () when no plugin judges it."""
        found = self.of(shape.pod.scheduler_name)
        return () if found is None else found.evaluate(shape, node, namespace, claims, volumes, name)
