"""Does a running pod's node still satisfy what the pod asks for? The verdicts of the
extender's own plugins (the instances `/filter` runs: same arguments, gates and shared
CEL cache), each in its own words: a plugin whose registry record has a `drift` field
(`extender.plugins.registry.DriftRecord`) judges the pods of the profiles that have the
extender run it, through the `Judge` its record builds (`extender.framework.drift`).
What each in-tree plugin reports is said in its module: TaintToleration (untolerated
`NoSchedule` taints `required`, `NoExecute` `evicting`, `PreferNoSchedule` `preferred`),
NodeAffinity (the required node affinity and `addedAffinity`), VolumeNodeAffinity (the
node affinity of the volumes the pod's claims are bound to).

A pod whose annotation does not validate (any more) fails every node in `/filter`; it
is reported with the validation error as its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.framework.drift import EVICTING, PREFERRED, REQUIRED, SEVERITIES, Judge, Violation
from extender.model import Node
from extender.plugins import registry
from extender.state.volumes import VolumeLayer

__all__ = ["EVICTING", "PREFERRED", "REQUIRED", "SEVERITIES", "ByProfile", "Evaluator", "Violation",
           "gauge_labels", "gauge_reason"]

Labels = tuple[str, str, str]  # (plugin, reason, severity) of the gauge


def gauge_reason(violation: Violation) -> str:
    """The bounded `reason` label a violation is counted under (its plugin's record
    says which reasons are its own); the reason itself for a plugin without one."""
    record = registry.PLUGINS.get(violation.plugin)
    if record is None or record.drift is None:
        return violation.reason
    return record.drift.gauge_reason(violation.reason)


def gauge_labels() -> list[Labels]:
    """Every label set the gauge can have (exported at 0 from the start), in plugin order."""
    return [labels for record in registry.records() if record.drift is not None
            for labels in record.drift.gauge_labels(record.name)]


class Evaluator:
    """The verdicts of one profile's plugins for one pod shape on one node (see the
    module docstring): only the plugins the profile has the extender run (those it
    disables in-tree); kube-scheduler's own plugins judged the others at placement."""

    def __init__(self, plugins: list) -> None:
        by_name = {p.name: p for p in plugins}
        # in the registry's order, whatever the profile's
        self.judges: list[Judge] = [record.drift.judge(by_name[record.name]) for record in registry.records()
                                    if record.drift is not None and record.name in by_name]

    def evaluate(self, shape: Any, node: Node, namespace: str, claims: tuple, volumes: VolumeLayer,
                 name: str = "") -> tuple[Violation, ...]:
        """Every requirement `node` fails for a pod of `shape` (in plugin order)."""
        out: tuple[Violation, ...] = ()
        for judge in self.judges:
            found = judge(shape, node, namespace, claims, volumes, name)
            if found:
                out = out + found if out else found  # one plugin's tuple as it is: its memo's, shared
        return out


class ByProfile:
    """Each pod judged by its own profile (`spec.schedulerName`, kept in its shape):
    that profile's plugins, with its arguments (`addedAffinity`...). `fallback`: the
    plugins for a pod of a profile `profiles` lacks (the single-profile settings answer
    every pod); None: such a pod, as one of a profile that has the extender run none of
    the plugins that judge running pods, is not the extender's to judge and is never
    reported."""

    def __init__(self, fallback: list | None, profiles: Mapping[str, list] | None = None) -> None:
        self._fallback = self._of(fallback)
        self._profiles = {name: self._of(plugins) for name, plugins in (profiles or {}).items()}

    @staticmethod
    def _of(plugins: list | None) -> Evaluator | None:
        evaluator = Evaluator(plugins or [])
        return evaluator if evaluator.judges else None

    def of(self, scheduler_name: str) -> Evaluator | None:
        return self._profiles.get(scheduler_name, self._fallback)

    def evaluate(self, shape: Any, node: Node, namespace: str, claims: tuple, volumes: VolumeLayer,
                 name: str = "") -> tuple[Violation, ...]:
        """`Evaluator.evaluate` by the shape's profile; () when no plugin judges it."""
        found = self.of(shape.pod.scheduler_name)
        return () if found is None else found.evaluate(shape, node, namespace, claims, volumes, name)
