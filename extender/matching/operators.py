"""Every operator a toleration or a node-selector requirement may name, one record each.

A record says all there is to know about one operator: its name, the feature gate that
enables it, how it compares, what `explain` says about it, how API validation checks its
value, and whether the kubelet sees it. Matching (`tolerations.py`, `nodeselector.py`),
validation (`extender.validation.rules`) and the webhook's ratcheting
(`extender.validation.workloads`) read these tables and name no operator themselves, so
a new operator is one record and one `register_toleration` / `register_selector` call
(at import, before the first request: answers are memoised per pod shape).

The hot path is the matcher's `tolerates`: one dict lookup (`enabled_operators`, resolved
once per set of gates) to the operator's `compare`, a plain function of two strings (no
per-call allocation). Semantics: docs/reference/semantics.md
§3 and §6; docs/design/operators.md says how to add an operator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from operator import eq

from extender.features import GATE_NAMES, FeatureGates
from extender.matching.labels import validate_label_value
from extender.matching.numeric import (
    GoNumError,
    compare_numeric,
    go_parse_int64,
    parse_canonical_int64,
    why_not_numeric,
)
from extender.matching.semver import SemverError, compare_semver, parse_tolerant, why_not_semver

#: Where API validation reports a toleration value its operator refuses (upstream's
#: choices): under `.value`, under `.operator` with the value (Equal), or under
#: `.operator` with the whole toleration as Go's `%#v` prints it (Exists).
AT_VALUE, AT_OPERATOR, AT_OPERATOR_WHOLE = "value", "operator", "operator, whole toleration"

#: labels.Requirement's own operators: they test membership or presence, and the node
#: selectors answer them from the inverted label index; every other selector operator
#: compares the node's label with one value and is a `SelectorOperator` record.
SET_OPERATORS = ("In", "NotIn")
EXISTENCE_OPERATORS = ("Exists", "DoesNotExist")

_GATE_TITLE = {attr: name for name, attr in GATE_NAMES.items()}


def gate_title(gate: str) -> str:
    """A FeatureGates attribute's upstream name (`semver_operators` ->
    `TaintTolerationNodeAffinitySemverComparisonOperators`)."""
    return _GATE_TITLE[gate]


def enabled(gate: str | None, gates: FeatureGates) -> bool:
    return gate is None or getattr(gates, gate)


def verdict(ok: bool) -> str:
    return "tolerates" if ok else "does not tolerate"


def _any_value(_value: str) -> str | None:
    return None


# --- tolerations ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TolerationOperator:
    """One toleration operator. `compare` runs once the key and effect matched (upstream
    `ToleratesTaint`'s order) and only while `gate` is on; gated off, the operator never
    tolerates, `explain` says the gate is off and validation refuses it as unsupported."""

    name: str
    #: (toleration value, taint value) -> tolerated
    compare: Callable[[str, str], bool]
    #: (ok, toleration value, taint value) -> explain's text after the toleration's name
    describe: Callable[[bool, str, str], str]
    #: FeatureGates attribute that enables it; None: always on
    gate: str | None = None
    #: a Kubernetes API operator: the kubelet and the taint-eviction controller check
    #: NoExecute taints against it (with its gate on); otherwise a NoExecute taint
    #: "tolerated" by it would evict the pod the scheduler placed, so it never counts there
    kubelet: bool = False
    #: explain: why the two values cannot be compared at all, None when they can
    why_not: Callable[[str, str], str | None] | None = None
    #: API validation of the toleration's value: the error's text, None when valid
    check_value: Callable[[str], str | None] = _any_value
    #: where validation reports a refused value (AT_VALUE, AT_OPERATOR, AT_OPERATOR_WHOLE)
    value_error_at: str = AT_VALUE
    #: valid with an empty key (the key is then a wildcard; upstream: Exists only)
    keyless: bool = False
    #: other spellings of the same operator (Equal: "")
    aliases: tuple[str, ...] = ()


TOLERATION_OPERATORS: dict[str, TolerationOperator] = {}


@dataclass(frozen=True, slots=True)
class EnabledOperators:
    """The toleration operators one set of gates leaves on, as the matcher dispatches
    them: one dict lookup to the comparison, the gate already decided."""

    #: name (and alias) -> `compare`, for the operators whose gate is on
    compare: dict[str, Callable[[str, str], bool]]
    #: the names of those the kubelet sees (the only ones that count for NoExecute)
    kubelet: frozenset[str]


_ENABLED: dict[FeatureGates, EnabledOperators] = {}


def enabled_operators(gates: FeatureGates) -> EnabledOperators:
    """The operators `gates` leave on (one answer per distinct set of gates)."""
    hit = _ENABLED.get(gates)
    if hit is None:
        on = {name: rule for name, rule in TOLERATION_OPERATORS.items() if enabled(rule.gate, gates)}
        hit = EnabledOperators({name: rule.compare for name, rule in on.items()},
                               frozenset(name for name, rule in on.items() if rule.kubelet))
        _ENABLED[gates] = hit
    return hit


def register_toleration(rule: TolerationOperator) -> None:
    """Add (or replace) a toleration operator under its name and aliases."""
    for name in (rule.name, *rule.aliases):
        TOLERATION_OPERATORS[name] = rule
    _ENABLED.clear()


def unregister_toleration(name: str) -> None:
    rule = TOLERATION_OPERATORS.get(name)
    if rule is not None:
        for alias in (rule.name, *rule.aliases):
            TOLERATION_OPERATORS.pop(alias, None)
    _ENABLED.clear()


def supported_toleration_operators(gates: FeatureGates) -> list[str]:
    """The operators validation accepts with `gates`, in registration order (upstream's
    NotSupported list: "Equal", "Exists", then each KEP's)."""
    return [name for name, rule in TOLERATION_OPERATORS.items()
            if name == rule.name and enabled(rule.gate, gates)]


def toleration_gates_used(operators: Iterable[str]) -> set[str]:
    """The feature gates the named toleration operators need (unknown names: none)."""
    return {rule.gate for op in operators
            if (rule := TOLERATION_OPERATORS.get(op)) is not None and rule.gate is not None}


def _always(_toleration_value: str, _taint_value: str) -> bool:
    return True


def _describe_equal(ok: bool, toleration_value: str, taint_value: str) -> str:
    return f"{verdict(ok)} (value {toleration_value!r} vs taint value {taint_value!r})"


def _describe_exists(ok: bool, _toleration_value: str, _taint_value: str) -> str:
    return verdict(ok)


def _describe_numeric(relation: str) -> Callable[[bool, str, str], str]:
    def describe(ok: bool, toleration_value: str, taint_value: str) -> str:
        return f"{verdict(ok)}: taint value {taint_value} is {'' if ok else 'not '}{relation} {toleration_value}"
    return describe


def _describe_semver(ok: bool, toleration_value: str, taint_value: str) -> str:
    return f"{verdict(ok)} (taint version {taint_value!r} vs {toleration_value!r})"


def _semver_compare(op: str) -> Callable[[str, str], bool]:
    def compare(toleration_value: str, taint_value: str) -> bool:
        return compare_semver(op, taint_value, toleration_value)  # taint OP toleration
    return compare


def _semver_why_not(toleration_value: str, taint_value: str) -> str | None:
    return why_not_semver(taint_value, toleration_value)


def _check_label_value(value: str) -> str | None:
    return ";".join(validate_label_value(value)) or None


def _check_empty(value: str) -> str | None:
    return "value must be empty when `operator` is 'Exists'" if value else None


NOT_CANONICAL = "must be a canonical decimal integer within int64"


def _check_canonical(value: str) -> str | None:
    return NOT_CANONICAL if parse_canonical_int64(value) is None else None


def _check_semver(value: str) -> str | None:
    try:
        parse_tolerant(value)
    except SemverError as exc:
        return str(exc)
    return None


register_toleration(TolerationOperator(
    "Equal", eq, _describe_equal, kubelet=True, check_value=_check_label_value,
    value_error_at=AT_OPERATOR, aliases=("",)))
register_toleration(TolerationOperator(
    "Exists", _always, _describe_exists, kubelet=True, check_value=_check_empty,
    value_error_at=AT_OPERATOR_WHOLE, keyless=True))
for _op, _relation in (("Lt", "less than"), ("Gt", "greater than")):  # KEP-5471
    register_toleration(TolerationOperator(
        _op, partial(compare_numeric, _op), _describe_numeric(_relation), gate="comparison_operators",
        kubelet=True, why_not=why_not_numeric, check_value=_check_canonical))
for _op in ("SemverGt", "SemverLt", "SemverEq"):  # KEP-5721
    register_toleration(TolerationOperator(
        _op, _semver_compare(_op), _describe_semver, gate="semver_operators",
        why_not=_semver_why_not, check_value=_check_semver))


# --- node selectors -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelectorOperator:
    """One node-selector operator that compares the node's label with exactly one value
    (Gt, Lt, the Semver family); a node without the label never matches. `read` is
    `labels.NewRequirement`'s parse of that value (raise ValueError with the parse
    error's text), `compare` the match against the node's label value."""

    name: str
    #: the requirement's value as `compare` takes it; raises ValueError (its text)
    read: Callable[[str], object]
    #: (the node's label value, what `read` returned) -> matches
    compare: Callable[[str, object], bool]
    #: labels.NewRequirement's error when there is not exactly one value
    count_error: str
    #: API validation's error when there is not exactly one value
    api_count_error: str
    #: API validation of each value: the error's text, None when valid
    api_check_value: Callable[[str], str | None] = _any_value
    #: FeatureGates attribute that enables it; None: always on
    gate: str | None = None
    #: values must also be label values (the Semver family's are versions instead)
    label_values: bool = True


SELECTOR_OPERATORS: dict[str, SelectorOperator] = {}


def register_selector(rule: SelectorOperator) -> None:
    SELECTOR_OPERATORS[rule.name] = rule


def selector_gates_used(operators: Iterable[str]) -> set[str]:
    """The feature gates the named selector operators need (unknown names: none)."""
    return {rule.gate for op in operators
            if (rule := SELECTOR_OPERATORS.get(op)) is not None and rule.gate is not None}


def _read_int(value: str) -> int:
    try:
        return go_parse_int64(value)
    except GoNumError:
        raise ValueError("for 'Gt', 'Lt' operators, the value must be an integer") from None


def _label_compare(greater: bool) -> Callable[[str, object], bool]:
    def compare(label: str, number: object) -> bool:
        try:
            value = go_parse_int64(label)
        except GoNumError:
            return False
        return value > number if greater else value < number  # type: ignore[operator]
    return compare


def _read_semver(op: str) -> Callable[[str], object]:
    def read(value: str) -> object:
        try:
            parse_tolerant(value)
        except SemverError as exc:
            raise ValueError(f"for '{op}' operator, the value must be a semantic version: {exc}") from None
        return value
    return read


for _op, _greater in (("Gt", True), ("Lt", False)):
    register_selector(SelectorOperator(
        _op, _read_int, _label_compare(_greater),
        count_error="for 'Gt', 'Lt' operators, exactly one value is required",
        api_count_error="must be specified single value when `operator` is 'Lt' or 'Gt'"))
for _op in ("SemverGt", "SemverLt", "SemverEq"):  # KEP-5721
    register_selector(SelectorOperator(
        _op, _read_semver(_op), partial(compare_semver, _op),
        count_error=f"for '{_op}' operator, exactly one value is required",
        api_count_error="must be specified single value when `operator` is 'SemverLt' or 'SemverGt' or 'SemverEq'",
        api_check_value=_check_semver, gate="semver_operators", label_values=False))


def gates_to_ratchet(gates: FeatureGates, tolerations: Iterable[str],
                     selectors: Iterable[str]) -> dict[str, bool]:
    """The gates that are off but that the named operators need, each set True: what an
    UPDATE keeps allowed because the old object already uses it."""
    needed = toleration_gates_used(tolerations) | selector_gates_used(selectors)
    return {gate: True for gate in sorted(needed) if not getattr(gates, gate)}

