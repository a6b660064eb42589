"""API validation rules for tolerations and node affinity, as the API server applies
them to `spec` with the KEPs implemented (KEP-5471 Gt/Lt, KEP-5721 Semver, KEP-5500 CEL)
and their feature gates: each function returns `FieldError`s at the path it is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from extender.caching import ByteLRU
from extender.cel.environment import CompileError
from extender.cel.program import compile_program
from extender.features import FeatureGates
from extender.matching.labels import is_dns1123_subdomain, validate_label_key, validate_label_value
from extender.matching.numeric import go_quote
from extender.matching.operators import (
    AT_OPERATOR,
    AT_OPERATOR_WHOLE,
    EXISTENCE_OPERATORS,
    SELECTOR_OPERATORS,
    SET_OPERATORS,
    TOLERATION_OPERATORS,
    enabled,
    supported_toleration_operators,
)
from extender.request import deadline, lane
from extender.validation.field import (
    FieldError,
    Raw,
    child,
    forbidden,
    invalid,
    not_supported,
    required,
    too_long,
)
from extender.validation.limits import (
    ASSUMED_DISTINCT_TAINTS,
    ASSUMED_UNITS_PER_SECOND,
    COST_WARNING_RATIO,
    MAX_COST,
    MAX_EXPRESSION_BYTES,
)

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
EMPTY_KEY = 'operator must be Exists when `key` is empty, which means "match all values and all keys"'
EXCLUSIVE = "expression cannot be used with key, value, operator, or effect fields"


# --- CEL ------------------------------------------------------------------------------

_compiled = ByteLRU.counted("checked-expressions", 256)  # expression -> (error or None, cost)

#: Expression bytes an admission review may compile (those compiled before are free):
#: ~0.1-0.6 s of compiling a 10 KiB expression, so at most ~2 s a review. The rest is
#: not checked at admission, with a warning: the scheduling path checks every pod.
REVIEW_COMPILE_BYTES = 32 << 10
#: Of which a review compiles this many on the webhook's pool threads; it needs more,
#: it moves to the webhook's expensive lane (`extender.request.lane`), so that an ordinary
#: review never waits behind compiles.
POOL_COMPILE_BYTES = 1 << 10
NOT_COMPILED = ("not checked at admission: the review's expressions not compiled yet exceed "
                f"its compile budget of {REVIEW_COMPILE_BYTES} bytes (the scheduler checks it)")
# [bytes left, bytes compiled in this lane, expressions left unchecked], per review
_REVIEW_BUDGET: ContextVar[list[int] | None] = ContextVar("extender_review_compile_budget", default=None)


@contextmanager
def compile_budget(limit: int = REVIEW_COMPILE_BYTES) -> Iterator[list[int]]:
    """Compile at most `limit` bytes of new expressions in the block (one admission
    review); yields [bytes left, bytes compiled, expressions left unchecked]."""
    budget = [limit, 0, 0]
    token = _REVIEW_BUDGET.set(budget)
    try:
        yield budget
    finally:
        _REVIEW_BUDGET.reset(token)


def unchecked_expressions() -> int:
    """Expressions the current review left unchecked (over its compile budget)."""
    budget = _REVIEW_BUDGET.get()
    return 0 if budget is None else budget[2]


def compile_expression(expression: str) -> tuple[str | None, int] | None:
    """(error or None, estimated cost); only expressions within the length limit get here.
    Within an admission review (`compile_budget`): None for an expression its budget
    cannot compile, and `lane.NeedsCostlierLane` from the webhook's pool lane for one past the
    pool's share; the review's deadline and its client's leaving end it between the
    compile's phases (`extender.request.deadline`)."""
    hit = _compiled.get(expression)
    if hit is not None:
        return hit
    budget = _REVIEW_BUDGET.get()
    if budget is not None:
        size = len(expression)
        if size > budget[0]:
            budget[2] += 1
            return None
        if lane.current() == lane.POOL and budget[1] + size > POOL_COMPILE_BYTES:
            raise lane.move(lane.EXPENSIVE)
        budget[0] -= size
        budget[1] += size
        deadline.check()
    try:
        result: tuple[str | None, int] = (None, compile_program(expression).estimated_cost)
    except CompileError as exc:
        result = (str(exc), 0)
    _compiled.put(expression, result)
    return result



@dataclass(frozen=True)
class SlowExpressionPolicy:
    """What admission does with a CEL expression that a /filter cannot be expected to
    answer within the request deadline: warn (default) or deny."""

    request_deadline: float = 4.0
    deny: bool = False


_slow_policy = SlowExpressionPolicy()
_ADMISSION: ContextVar[SlowExpressionPolicy | None] = ContextVar("extender_admission",
                                                                 default=None)


def configure_slow_expressions(request_deadline: float, deny: bool) -> None:
    """Set once at start-up (`extender serve` for the webhook, `extender validate`)."""
    global _slow_policy
    _slow_policy = SlowExpressionPolicy(request_deadline, deny)


@contextmanager
def admission(policy: SlowExpressionPolicy | None = None) -> Iterator[None]:
    """Validate as admission does (the webhook, `extender validate`, and `extender
    explain`'s warnings, which pass a warn-only policy): with the slow-expression rule.
    The scheduling path validates the same pods without it: a slow expression is still
    evaluated (under the request deadline), never refused there."""
    token = _ADMISSION.set(policy or _slow_policy)
    try:
        yield
    finally:
        _ADMISSION.reset(token)


def current_slow_policy() -> SlowExpressionPolicy | None:
    """The slow-expression policy in force here (None outside admission)."""
    return _ADMISSION.get()


def expected_seconds(cost: int) -> tuple[float, float]:
    """(seconds per distinct taint, seconds for a first /filter over the assumed number
    of distinct taints) for an expression of estimated `cost`, at the evaluator's
    slowest measured speed."""
    per_taint = cost / ASSUMED_UNITS_PER_SECOND
    return per_taint, per_taint * ASSUMED_DISTINCT_TAINTS


def slow_expression_message(cost: int, policy: SlowExpressionPolicy) -> str | None:
    """Why an expression may not be answered within the request deadline, or None."""
    deadline = policy.request_deadline
    per_taint, per_request = expected_seconds(cost)
    if deadline <= 0 or per_request <= deadline:
        return None
    return (f"estimated cost {cost} may need up to {per_taint:.2g} s per distinct taint, "
            f"{per_request:.2f} s for the first /filter on a cluster with "
            f"{ASSUMED_DISTINCT_TAINTS} distinct taints (5,000 nodes), more than the request "
            f"deadline of {deadline:g} s: the pod may stay Pending")


def close_to_limit(cost: int) -> str:
    return f"estimated cost {cost} is close to the limit of {MAX_COST}"


def cost_finding(cost: int, policy: SlowExpressionPolicy | None) -> str | None:
    """The one thing said about a valid expression's cost, the same from the webhook,
    `extender validate` and `extender explain`: the time warning of the slow-expression
    rule when it applies (admission), else "close to the limit" from 80% of it."""
    slow = slow_expression_message(cost, policy) if policy is not None else None
    if slow is not None:
        return slow
    if cost >= COST_WARNING_RATIO * MAX_COST:
        return close_to_limit(cost)
    return None


# the webhook thread of the gunicorn master may hold the lock when a worker is forked
os.register_at_fork(after_in_child=_compiled.reset_lock)


# --- tolerations ----------------------------------------------------------------------

def _toleration_struct(t: Mapping[str, Any]) -> str:
    """Go's `%#v` of core.Toleration: what upstream prints for 'Exists with a value'."""
    seconds = t.get("tolerationSeconds")
    ptr = "(*int64)(nil)" if seconds is None else f"(*int64)({seconds})"
    return (f'core.Toleration{{Key:{go_quote(t.get("key") or "")}, Operator:{go_quote(t.get("operator") or "")}, '
            f'Value:{go_quote(t.get("value") or "")}, Effect:{go_quote(t.get("effect") or "")}, '
            f"TolerationSeconds:{ptr}}}")


def validate_toleration(t: Mapping[str, Any], path: str, gates: FeatureGates,
                        warnings: list[str]) -> list[FieldError]:
    """ValidateTolerations for one toleration, plus KEP-5471/5721/5500 operators (each
    operator's rules from its record, `extender.matching.operators`)."""
    expression = t.get("expression") or ""
    if expression:
        return _validate_expression(t, expression, child(path, "expression"), gates, warnings)
    errs: list[FieldError] = []
    tol_key = t.get("key") or ""
    op = t.get("operator") or ""
    effect = t.get("effect") or ""
    rule = TOLERATION_OPERATORS.get(op) if isinstance(op, str) else None
    if tol_key:
        errs += [invalid(child(path, "key"), tol_key, m) for m in validate_label_key(tol_key)]
    if not tol_key and not (rule is not None and rule.keyless):
        errs.append(invalid(child(path, "operator"), op, EMPTY_KEY))
    if t.get("tolerationSeconds") is not None and effect != "NoExecute":
        errs.append(invalid(child(path, "effect"), effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    if rule is None or not enabled(rule.gate, gates):
        errs.append(not_supported(child(path, "operator"), op, supported_toleration_operators(gates)))
    else:
        value = t.get("value") or ""
        message = rule.check_value(value)
        if message is not None:
            if rule.value_error_at == AT_OPERATOR_WHOLE:
                errs.append(invalid(child(path, "operator"), Raw(_toleration_struct(t)), message))
            elif rule.value_error_at == AT_OPERATOR:  # upstream reports Equal's value there
                errs.append(invalid(child(path, "operator"), value, message))
            else:
                errs.append(invalid(child(path, "value"), value, message))
    if effect and effect not in EFFECTS:
        errs.append(not_supported(child(path, "effect"), effect, EFFECTS))
    return errs


def _validate_expression(t: Mapping[str, Any], expression: str, where: str, gates: FeatureGates,
                         warnings: list[str]) -> list[FieldError]:
    """A CEL toleration (KEP-5500): alone in its toleration, within the length and cost
    limits, compiled within the review's budget."""
    if not gates.cel:
        return [forbidden(where, "requires the TaintTolerationCEL feature gate")]
    if t.get("key") or t.get("operator") or t.get("value") or t.get("effect"):
        return [invalid(where, expression, EXCLUSIVE)]
    if len(expression.encode("utf-8", "surrogatepass")) > MAX_EXPRESSION_BYTES:
        return [too_long(where, MAX_EXPRESSION_BYTES)]
    compiled = compile_expression(expression)
    if compiled is None:
        warnings.append(f"{where}: {NOT_COMPILED}")
        return []
    message, cost = compiled
    if message is not None:
        return [invalid(where, expression, message)]
    policy = current_slow_policy()
    finding = cost_finding(cost, policy)
    if finding is not None and policy is not None and policy.deny and finding != close_to_limit(cost):
        return [invalid(where, expression, finding)]
    if finding is not None:
        warnings.append(f"{where}: {finding}")
    return []


# --- node affinity --------------------------------------------------------------------

def _requirement(rq: Mapping[str, Any], path: str, allow_invalid_values: bool, gates: FeatureGates) -> list[FieldError]:
    """ValidateNodeSelectorRequirement, with the extender's operators (their records)."""
    errs: list[FieldError] = []
    op = rq.get("operator") or ""
    values = rq.get("values") or []
    vpath = child(path, "values")
    rule = SELECTOR_OPERATORS.get(op) if isinstance(op, str) else None
    if rule is not None and not enabled(rule.gate, gates):
        rule = None
    if op in SET_OPERATORS:
        if not values:
            errs.append(required(vpath, "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in EXISTENCE_OPERATORS:
        if values:
            errs.append(forbidden(vpath, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif rule is not None:
        if len(values) != 1:
            errs.append(required(vpath, rule.api_count_error))
        for v in values:  # KEP-5721: field.Invalid on `values`, the whole list as the value
            message = rule.api_check_value(v or "")
            if message is not None:
                errs.append(invalid(vpath, [x or "" for x in values], message))
    else:
        errs.append(invalid(child(path, "operator"), op, "not a valid selector operator"))
    rq_key = rq.get("key") or ""
    errs += [invalid(child(path, "key"), rq_key, m) for m in validate_label_key(rq_key)]
    if not allow_invalid_values and (rule is None or rule.label_values):
        for j, v in enumerate(values):
            errs += [invalid(child(vpath, j), v or "", m) for m in validate_label_value(v or "")]
    return errs


def _field_requirement(rq: Mapping[str, Any], path: str) -> list[FieldError]:
    """ValidateNodeFieldSelectorRequirement: In/NotIn on metadata.name, one value."""
    errs: list[FieldError] = []
    op = rq.get("operator") or ""
    values = rq.get("values") or []
    if op in ("In", "NotIn"):
        if len(values) != 1:
            errs.append(required(child(path, "values"),
                                 "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
    else:
        errs.append(invalid(child(path, "operator"), op, "not a valid selector operator"))
    rq_key = rq.get("key") or ""
    if rq_key != "metadata.name":
        errs.append(invalid(child(path, "key"), rq_key, "not a valid field selector key"))
    else:
        for j, v in enumerate(values):
            errs += [invalid(child(path, "values", j), v or "", m) for m in is_dns1123_subdomain(v or "")]
    return errs


def _term(term: Mapping[str, Any] | None, path: str, allow_invalid_values: bool, gates: FeatureGates) -> list[FieldError]:
    term = term or {}
    errs: list[FieldError] = []
    for j, rq in enumerate(term.get("matchExpressions") or []):
        errs += _requirement(rq or {}, child(path, "matchExpressions", j), allow_invalid_values, gates)
    for j, rq in enumerate(term.get("matchFields") or []):
        errs += _field_requirement(rq or {}, child(path, "matchFields", j))
    return errs


def _node_selector(selector: Mapping[str, Any], path: str, gates: FeatureGates) -> list[FieldError]:
    """ValidateNodeSelector (required terms: values must be label values)."""
    terms_path = child(path, "nodeSelectorTerms")
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return [required(terms_path, "must have at least one node selector term")]
    errs: list[FieldError] = []
    for i, term in enumerate(terms):
        errs += _term(term, child(terms_path, i), False, gates)
    return errs


def validate_volume_node_affinity(vna: Mapping[str, Any], path: str, gates: FeatureGates) -> list[FieldError]:
    """validateVolumeNodeAffinity for a new PersistentVolume (`required` is mandatory)."""
    req = vna.get("required")
    if req is None:
        return [required(child(path, "required"), "must specify required node constraints")]
    return _node_selector(req, child(path, "required"), gates)


def validate_node_affinity(na: Mapping[str, Any], path: str, gates: FeatureGates) -> list[FieldError]:
    """validateNodeAffinity for a new pod: required values must be label values (except
    for semver operators, whose values are versions), preferred weights 1..100."""
    errs: list[FieldError] = []
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        errs += _node_selector(req, child(path, "requiredDuringSchedulingIgnoredDuringExecution"), gates)
    for i, pref in enumerate(na.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        pref = pref or {}
        where = child(path, "preferredDuringSchedulingIgnoredDuringExecution", i)
        weight = pref.get("weight") or 0
        if weight <= 0 or weight > 100:
            errs.append(invalid(child(where, "weight"), weight, "must be in the range 1-100"))
        errs += _term(pref.get("preference"), child(where, "preference"), True, gates)
    return errs
