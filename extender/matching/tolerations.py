"""Toleration matching: upstream `(*Toleration).ToleratesTaint` plus the extender's
operators (`SemverGt/Lt/Eq`, KEP-5721) and CEL `expression` (KEP-5500). What each
operator does is its record in `extender.matching.operators`; this module names none.

`TolerationMatcher` is built once per pod and request and shared by every plugin
that matches tolerations (TaintToleration, NodeUnschedulable, PodTopologySpread's
`nodeTaintsPolicy`). It memoizes per distinct taint and per distinct taint tuple, so
a 5,000-node request evaluates each distinct taint once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from extender.features import FeatureGates
from extender.matching.operators import (
    TOLERATION_OPERATORS,
    EnabledOperators,
    enabled,
    enabled_operators,
    gate_title,
)
from extender.model import Taint, Toleration
from extender.model.objects import NO_EXECUTE

TaintFilter = Callable[[Taint], bool]


# Toleration lines that only say a toleration is about another taint: true, and noise
# next to the line that says why the matching toleration did not tolerate.
UNRELATED_LINE = re.compile(r"^\S+\[\d+\] .*: (key does not match|effect \S+ does not match \S+)$")


def key_details(details: Sequence[str]) -> list[str]:
    """The detail lines worth a first look (explain's summary, events, the drift report):
    the lines `TolerationMatcher.explain` writes that only say a toleration is about
    another taint are dropped, unless nothing else is left to say. The kubectl plugin's
    tables (`kubectl_extender.render`) filter the report's details the same way; the
    server does not import the plugin (`extender serve` runs without it), so the filter
    is written in both and tests/core/test_explain_summary.py keeps the two equal."""
    kept = [d for d in details if not UNRELATED_LINE.match(d)]
    return kept or list(details)


def invalid_expression_toleration(tol: Toleration) -> bool:
    """`expression` excludes key/operator/value/effect (semantics §0.7)."""
    return bool(tol.expression) and bool(tol.key or tol.operator or tol.value or tol.effect)


def kubelet_blind_spot(tol: Toleration, gates: FeatureGates) -> str | None:
    """Why the kubelet (and the taint-eviction controller) would not see `tol` at all,
    or None when it would.

    Both check NoExecute taints against `spec.tolerations` with the API's operators only
    (`pkg/kubelet/lifecycle/predicate.go`, `generalFilter`; Gt/Lt while the
    TaintTolerationComparisonOperators gate is on). A NoExecute taint "tolerated" by
    anything else would make the pod bind, be rejected by the kubelet, be recreated and
    land there again, so for NoExecute taints only what the kubelet sees counts."""
    if tol.source != "spec":
        return f"it comes from the {tol.source} annotation"
    if tol.expression:
        return "it is a CEL expression"
    rule = TOLERATION_OPERATORS.get(tol.operator)
    if rule is None:
        return None  # tolerates nothing anyway
    if not rule.kubelet:
        return f"operator {tol.operator} is not a Kubernetes API operator"
    if not enabled(rule.gate, gates):
        return f"operator {tol.operator} needs the {gate_title(rule.gate)} gate"
    return None


def tolerates(tol: Toleration, taint: Taint, gates: FeatureGates, cel) -> bool:
    """One toleration against one taint, in upstream's order of checks; a NoExecute
    taint only by a toleration the kubelet sees (`kubelet_blind_spot`); the operator's
    comparison from its record (`extender.matching.operators`)."""
    return _tolerates(tol, taint, gates, cel, enabled_operators(gates))


def _tolerates(tol: Toleration, taint: Taint, gates: FeatureGates, cel, ops: EnabledOperators) -> bool:
    """`tolerates` with the gates' operators resolved (the matcher resolves them once).
    For a NoExecute taint an operator outside `ops.kubelet` is either one the kubelet
    does not see or an unknown one, which tolerates nothing anyway."""
    if taint.effect == NO_EXECUTE and (tol.source != "spec" or tol.expression or tol.operator not in ops.kubelet):
        return False
    if tol.expression:
        if not gates.cel or invalid_expression_toleration(tol) or cel is None:
            return False
        return cel.evaluate(tol.expression, taint).matched
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    compare = ops.compare.get(tol.operator)
    return compare is not None and compare(tol.value, taint.value)


def explain_toleration(tol: Toleration, taint: Taint, gates: FeatureGates, cel) -> str:
    """Why `tol` does or does not tolerate `taint`, for `explain` and debug logs."""
    name = tol.describe()
    if taint.effect == NO_EXECUTE:
        blind = kubelet_blind_spot(tol, gates)
        if blind is not None:
            return (f"{name}: does not count for NoExecute taint {taint}: the kubelet checks "
                    f"NoExecute taints against spec.tolerations only and {blind}")
    if tol.expression:
        return f"{name}: {_explain_expression(tol, taint, gates, cel)}"
    if tol.effect and tol.effect != taint.effect:
        return f"{name}: effect {tol.effect} does not match {taint.effect}"
    if tol.key and tol.key != taint.key:
        return f"{name}: key does not match"
    rule = TOLERATION_OPERATORS.get(tol.operator)
    if rule is None:
        return f"{name}: unsupported operator {tol.operator!r}"
    if not enabled(rule.gate, gates):
        return f"{name}: feature gate {gate_title(rule.gate)} is disabled"
    problem = rule.why_not(tol.value, taint.value) if rule.why_not is not None else None
    if problem:
        return f"{name}: {problem}"
    return f"{name}: {rule.describe(rule.compare(tol.value, taint.value), tol.value, taint.value)}"


def _explain_expression(tol: Toleration, taint: Taint, gates: FeatureGates, cel) -> str:
    if invalid_expression_toleration(tol):
        return "invalid toleration: expression must not be combined with key, operator, value or effect"
    if not gates.cel:
        return "feature gate TaintTolerationCEL is disabled"
    if cel is None:
        return "CEL is not available"
    outcome = cel.evaluate(tol.expression, taint)
    if outcome.matched:
        return "expression returned true"
    if outcome.kind == "false":
        return "expression returned false"
    return f"expression failed ({outcome.kind}): {outcome.message}"


class TolerationMatcher:
    """Memoizing matcher for one pod's effective tolerations (one request, one thread)."""

    __slots__ = ("tolerations", "gates", "cel", "_by_taint", "_operators")

    def __init__(self, tolerations: Sequence[Toleration], gates: FeatureGates, cel) -> None:
        self.tolerations = tuple(tolerations)
        self.gates = gates
        self.cel = cel
        self._by_taint: dict[Taint, bool] = {}
        self._operators = enabled_operators(gates)

    def tolerated(self, taint: Taint) -> bool:
        """Upstream `TolerationsTolerateTaint`: any toleration tolerates the taint."""
        hit = self._by_taint.get(taint)
        if hit is None:
            gates, cel, ops = self.gates, self.cel, self._operators
            hit = any(_tolerates(t, taint, gates, cel, ops) for t in self.tolerations)
            self._by_taint[taint] = hit
        return hit

    def first_untolerated(self, taints: Iterable[Taint], keep: TaintFilter | None) -> Taint | None:
        """Upstream `FindMatchingUntoleratedTaint`: first kept taint nobody tolerates."""
        for taint in taints:
            if (keep is None or keep(taint)) and not self.tolerated(taint):
                return taint
        return None

    def explain(self, taint: Taint) -> list[str]:
        """One line per toleration, each named as in the pod: `toleration[i]` for
        spec.tolerations, `<annotation>[i]` for the annotation channel's."""
        if not self.tolerations:
            return ["the pod has no tolerations"]
        seen: dict[str, int] = {}
        lines = []
        for tol in self.tolerations:
            index = seen[tol.source] = seen.get(tol.source, -1) + 1
            label = "toleration" if tol.source == "spec" else tol.source
            lines.append(f"{label}[{index}] {explain_toleration(tol, taint, self.gates, self.cel)}")
        return lines


def do_not_schedule(taint: Taint) -> bool:
    """`helper.DoNotScheduleTaintsFilterFunc`: NoSchedule and NoExecute taints."""
    return taint.effect == "NoSchedule" or taint.effect == "NoExecute"


MATCHER_KEY = "TolerationMatcher"


def matcher_for(state, pod, gates: FeatureGates, cel) -> TolerationMatcher:
    """The one matcher per CycleState, created on first use by whichever plugin runs first."""
    matcher = state.get(MATCHER_KEY)
    if matcher is None:
        matcher = TolerationMatcher(pod.tolerations, gates, cel)
        state.write(MATCHER_KEY, matcher)
    return matcher
