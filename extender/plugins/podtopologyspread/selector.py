"""Label selectors as `metav1.LabelSelectorAsSelector` builds them, including the quirks
the spreading code depends on (spec §1.3):

* `labelSelector: null` -> NOTHING: matches no pod, not even the incoming one;
* `labelSelector: {}`   -> EVERYTHING, whose `empty` is true: `countPodsMatchSelector`
  counts zero existing pods for it, yet it still matches the incoming pod (self-match)
  and nominated pods added through AddPod.

Requirements are stored sorted and de-duplicated, so a selector is a hashable value
(the pod index memoizes per selector) and ANDing an equality that is already present
(matchLabelKeys merged by both kube-apiserver and the scheduler) is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.matching.labels import validate_label_key, validate_label_value


class SelectorError(ValueError):
    """A selector that `LabelSelectorAsSelector` refuses."""


@dataclass(frozen=True, slots=True, order=True)
class Requirement:
    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.op
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        return value is None

    def __str__(self) -> str:
        if self.op == "Exists":
            return self.key
        if self.op == "DoesNotExist":
            return f"!{self.key}"
        if self.op == "In" and len(self.values) == 1:
            return f"{self.key}={self.values[0]}"
        word = "in" if self.op == "In" else "notin"
        return f"{self.key} {word} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """Upstream `Selector.Empty()`: true only for EVERYTHING."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def add(self, reqs: Iterable[Requirement]) -> LabelSelector:
        """AND more requirements in; NOTHING stays NOTHING (its Requirements() is not
        selectable upstream, so the merge returns the original)."""
        if self.nothing:
            return self
        return LabelSelector(tuple(sorted(set(self.requirements) | set(reqs))))

    def __str__(self) -> str:
        if self.nothing:
            return "<none>"
        return ",".join(str(r) for r in self.requirements) or "<everything>"


NOTHING = LabelSelector((), True)
EVERYTHING = LabelSelector(())


def _requirement(key: Any, op: str, values: Any, where: str) -> Requirement:
    if not isinstance(key, str):
        raise SelectorError(f"{where}: key must be a string")
    if values is None:
        values = []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where}: values must be a list of strings")
    problems = list(validate_label_key(key))
    if op in ("In", "NotIn"):
        if not values:
            problems.append("for 'in', 'notin' operators, values set can't be empty")
    elif op in ("Exists", "DoesNotExist"):
        if values:
            problems.append("values set must be empty for exists and does not exist")
    else:
        raise SelectorError(f"{where}: {op!r} is not a valid label selector operator")
    for value in values:
        problems.extend(validate_label_value(value))
    if problems:
        raise SelectorError(f"{where}: key {key!r}: " + "; ".join(problems))
    return Requirement(key, op, tuple(sorted(set(values))))


def equality(key: str, value: str) -> Requirement:
    return Requirement(key, "In", (value,))


def from_map(labels: Mapping[str, str]) -> LabelSelector:
    """`labels.Set(m).AsSelector()`: equalities; an empty map selects everything."""
    return LabelSelector(tuple(sorted({equality(k, v) for k, v in labels.items()})))


def parse_label_selector(raw: Any, where: str = "labelSelector") -> LabelSelector:
    """`metav1.LabelSelectorAsSelector`; raises SelectorError on invalid input."""
    if raw is None:
        return NOTHING
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{where}: expected an object")
    match_labels = raw.get("matchLabels") or {}
    exprs = raw.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(exprs, list):
        raise SelectorError(f"{where}: matchLabels must be a map and matchExpressions a list")
    reqs = []
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f"{where}.matchLabels[{key!r}]: value must be a string")
        reqs.append(_requirement(key, "In", [value], f"{where}.matchLabels"))
    for i, expr in enumerate(exprs):
        here = f"{where}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            raise SelectorError(f"{here}: expected an object")
        reqs.append(_requirement(expr.get("key"), expr.get("operator"), expr.get("values"), here))
    return LabelSelector(tuple(sorted(set(reqs))))
