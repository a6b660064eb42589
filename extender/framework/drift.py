"""The drift report's contract with a plugin: how a *running* pod's node is judged.

kube-scheduler asks its plugins only about pods it places; what they require is
`...IgnoredDuringExecution`: nothing re-checks a pod once it runs. The drift report asks
the same plugins, through their registry record's `drift` (`DriftRecord` in
`extender.plugins.registry`), whether the node a pod runs on still satisfies them. A
plugin answers with `Violation`s in its own words (its Filter's reason, explain's detail
lines), one `Judge` built per plugin instance, so the report never words a verdict of
its own.

Severities: `required` (its Filter would reject the node now; nothing in Kubernetes acts
on it), `evicting` (the kubelet and the taint-eviction controller act on it themselves),
`preferred` (its Score would steer away, nothing more).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from extender.framework.cycle_state import CycleState
from extender.model import Node

REQUIRED, EVICTING, PREFERRED = "required", "evicting", "preferred"
SEVERITIES = (REQUIRED, EVICTING, PREFERRED)


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


class Judge(Protocol):
    """One plugin instance's verdicts on a running pod's node, in the order the report
    lists them (() when the node satisfies the plugin).

    * `shape`: the pod's constraints as the report keeps them (`extender.drift.shapes`):
      `shape.pod` is a nameless Pod parsed as `/filter` parses it (annotation errors
      included), `shape.required` its compiled required node affinity and
      `shape.sources` where each required selector came from; one shape is shared by
      every pod of a workload, so a judge may memoise by it;
    * `namespace`, `name`, `claims`: the pod's namespace, name (may be "") and
      persistent volume claims ((claim name, generic ephemeral?) pairs);
    * `volumes`: the state's volume layer.
    """

    def __call__(self, shape: Any, node: Node, namespace: str, claims: tuple, volumes: Any,
                 name: str = "") -> tuple[Violation, ...]: ...


def by_filter(plugin: Any) -> Judge:
    """The judge of a plugin whose Filter reads only the pod and the node (no PreFilter
    state): its own Filter verdict, in an explain run, is the pod's `required`
    violation, worded with the status's first reason and its details."""

    def judge(shape: Any, node: Node, namespace: str, claims: tuple, volumes: Any,
              name: str = "") -> tuple[Violation, ...]:
        status = plugin.filter(CycleState(explain=True), shape.pod, node)
        if status.is_success or status.is_skip:
            return ()
        return (Violation(plugin.name, REQUIRED, status.reasons[0], tuple(status.details)),)

    return judge
