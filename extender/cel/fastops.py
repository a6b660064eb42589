"""Operators on statically typed operands, compiled without the generic call machinery.

Each one computes what the stock library function computes and charges what
``extender.cel.tracker.call_cost`` charges for its overload, at the same point (after both
operands, before an error is raised), with both operands evaluated even when the first
fails (a binary call in cel-go).  They apply only while the library function is the
shipped one (tests emulating another engine patch ``FUNCTIONS``).

An operand that is a *leaf* (``Leaf``: a constant, a comprehension variable or a taint
field) is read in place rather than through its own closure: it cannot fail, and its
units (none, 1, or 1 + 1) are charged together with the operator's, or one at a time
when the sum goes over the limit, so the limit stops at the same unit with the same
units used.  In a comprehension's body the operands are mostly leaves, and a Python call
saved per operand is most of the loop's time.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.cel.activation import CostLimitExceeded, charge_each
from extender.cel.plan import Attr, Const, Plan
from extender.cel.values import INT64_MAX, INT64_MIN, CelError

Fn = Callable[[Any], Any]
TAINT_FIELDS = ("key", "value", "effect")
#: tests only: False compiles every operand and call through the generic closures (the
#: reference the fast paths must charge and answer exactly as, at every cost limit)
FAST = True


@dataclass(frozen=True, slots=True)
class Leaf:
    """An operand read without evaluating a closure: ``const`` (its value, 0 units),
    ``var`` (a comprehension variable's slot: 1 unit, the attribute) or ``taint`` (a
    field's index in the taint: 1 unit for the qualifier, 1 for the attribute)."""

    kind: str
    arg: Any
    units: tuple[int, ...]


def leaf(p: Plan) -> Leaf | None:
    """The plan as a leaf, or None."""
    if not FAST:
        return None
    if isinstance(p, Const):
        return Leaf("const", p.value, ())
    if not isinstance(p, Attr) or p.test_only or p.cond is not None or p.relative is not None:
        return None
    if p.slot is not None and not p.quals and p.lazy is None:
        return Leaf("var", p.slot, (1,))
    if p.var == "taint" and p.slot is None and len(p.quals) == 1:
        q = p.quals[0]
        if q.attr is None and not q.optional and not q.test_only and q.const in TAINT_FIELDS:
            return Leaf("taint", TAINT_FIELDS.index(q.const), (1, 1))
    return None


def _overflow(r: int) -> int:
    if r < INT64_MIN or r > INT64_MAX:
        raise CelError("integer overflow")
    return r


def _add(x: int, y: int) -> int:
    r = x + y
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise CelError("integer overflow")


def _subtract(x: int, y: int) -> int:
    r = x - y
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise CelError("integer overflow")


def _multiply(x: int, y: int) -> int:
    r = x * y
    if INT64_MIN <= r <= INT64_MAX:
        return r
    raise CelError("integer overflow")


def _div(x: int, y: int) -> int:
    if y == 0:
        raise CelError("division by zero")
    q = abs(x) // abs(y)
    return _overflow(q if (x >= 0) == (y >= 0) else -q)


def _mod(x: int, y: int) -> int:
    """Go's remainder: the sign of the dividend (Python's ``%`` where both are positive)."""
    if x >= 0 and y > 0:
        return x % y
    if y == 0:
        raise CelError("modulus by zero")
    if x == INT64_MIN and y == -1:
        raise CelError("integer overflow")
    q = abs(x) // abs(y)
    return x - (q if (x >= 0) == (y >= 0) else -q) * y


#: int (x) int overloads, all costing 1
INT_OPS: dict[str, Callable[[int, int], Any]] = {
    "add_int64": _add,
    "subtract_int64": _subtract,
    "multiply_int64": _multiply,
    "divide_int64": _div,
    "modulo_int64": _mod,
    "less_int64": operator.lt,
    "less_equals_int64": operator.le,
    "greater_int64": operator.gt,
    "greater_equals_int64": operator.ge,
}


def _raise_after(b: Any, units: tuple[int, ...], error: CelError) -> None:
    """An operand failed: charge what is left of the call (the other operand, the
    operator), then raise its error."""
    charge_each(b, units)
    raise error


def binary(lhs: Fn, rhs: Fn, op: Callable[[Any, Any], Any], left: Leaf | None = None,
           right: Leaf | None = None) -> Fn:
    """A binary call costing 1 unit whatever its operands (``INT_OPS``; ``==`` / ``!=``
    on two ints, uints, bools or doubles); a variable or constant operand is read in
    place."""
    left = left if left is not None and left.kind in ("var", "const") else None
    right = right if right is not None and right.kind in ("var", "const") else None
    if left is not None and right is not None:
        return _leaves(left, right, op)
    if right is not None:
        return _then_leaf(lhs, right, op)
    if left is not None and left.kind == "var":
        return _var_then(left.arg, rhs, op)
    return _operands(lhs, rhs, op)


def _leaves(left: Leaf, right: Leaf, op: Callable[[Any, Any], Any]) -> Fn:
    units = left.units + right.units + (1,)
    total = sum(units)
    if left.kind == "var" and right.kind == "var":
        i, j = left.arg, right.arg

        def var_var(b: Any) -> Any:
            used = b.used + total
            if used > b.limit:
                charge_each(b, units)
            b.used = used
            v = b.vars
            return op(v[i], v[j])

        return var_var
    if left.kind == "var":
        i, y = left.arg, right.arg

        def var_const(b: Any) -> Any:
            used = b.used + total
            if used > b.limit:
                charge_each(b, units)
            b.used = used
            return op(b.vars[i], y)

        return var_const
    if right.kind == "var":
        x, j = left.arg, right.arg

        def const_var(b: Any) -> Any:
            used = b.used + total
            if used > b.limit:
                charge_each(b, units)
            b.used = used
            return op(x, b.vars[j])

        return const_var
    x, y = left.arg, right.arg

    def consts(b: Any) -> Any:
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return op(x, y)

    return consts


def _then_leaf(lhs: Fn, right: Leaf, op: Callable[[Any, Any], Any]) -> Fn:
    """A computed left operand, then a variable or a constant."""
    units = right.units + (1,)
    total = sum(units)
    if right.kind == "const":
        y = right.arg

        def then_const(b: Any) -> Any:
            try:
                x = lhs(b)
            except CelError as exc:
                _raise_after(b, units, exc)
            b.used += 1
            if b.used > b.limit:
                raise CostLimitExceeded(b.used)
            return op(x, y)

        return then_const
    j = right.arg

    def then_var(b: Any) -> Any:
        try:
            x = lhs(b)
        except CelError as exc:
            _raise_after(b, units, exc)
        used = b.used + total
        if used > b.limit:
            charge_each(b, units)
        b.used = used
        return op(x, b.vars[j])

    return then_var


def _var_then(i: int, rhs: Fn, op: Callable[[Any, Any], Any]) -> Fn:
    """A variable, then a computed right operand."""

    def var_then(b: Any) -> Any:
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        x = b.vars[i]
        try:
            y = rhs(b)
        except CelError as exc:
            _raise_after(b, (1,), exc)
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return op(x, y)

    return var_then


def _operands(lhs: Fn, rhs: Fn, op: Callable[[Any, Any], Any]) -> Fn:
    def fast_binary(b: Any) -> Any:
        error = None
        try:
            x = lhs(b)
        except CelError as exc:
            error = exc
        try:
            y = rhs(b)
        except CelError as exc:
            error = error or exc
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        if error is not None:
            raise error
        return op(x, y)

    return fast_binary


def text_equals(lhs: Fn, rhs: Fn, negate: bool, left: Leaf | None = None,
                right: Leaf | None = None) -> Fn:
    """``==`` / ``!=`` on two strings: ceil(0.1 x the shorter length) units (an error
    counts as size 1); a taint field compared with a constant is read in place."""
    if left is not None and right is not None:
        if left.kind == "taint" and right.kind == "const":
            return _field_equals(left.arg, right.arg, negate)
        if left.kind == "const" and right.kind == "taint":
            return _field_equals(right.arg, left.arg, negate)
    if left is None and right is not None and right.kind == "taint":
        return _then_field_equals(lhs, right.arg, negate)

    def typed_equality(b: Any) -> Any:
        error = None
        try:
            x = lhs(b)
        except CelError as exc:
            error, x = exc, None
        try:
            y = rhs(b)
        except CelError as exc:
            error, y = error or exc, None
        sx = len(x) if x is not None else 1
        sy = len(y) if y is not None else 1
        b.used += math.ceil((sx if sx < sy else sy) * 0.1)
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        if error is not None:
            raise error
        return (x == y) is not negate

    return typed_equality


def _field_equals(index: int, text: str, negate: bool) -> Fn:
    """A taint field against a constant string: the field (1 + 1), then the comparison
    (the constant being the same on either side)."""
    sc = len(text)
    longer = math.ceil(sc * 0.1)  # the charge when the field is at least as long

    def field_equals(b: Any) -> Any:
        x = b.taint[index]
        sx = len(x)
        units = longer if sx >= sc else math.ceil(sx * 0.1)
        used = b.used + 2 + units
        if used > b.limit:
            charge_each(b, (1, 1, units))
        b.used = used
        return (x == text) is not negate

    return field_equals


def _then_field_equals(lhs: Fn, index: int, negate: bool) -> Fn:
    """A computed string against a taint field: the left operand, the field (1 + 1),
    then the comparison."""

    def then_field_equals(b: Any) -> Any:
        error = None
        try:
            x = lhs(b)
        except CelError as exc:
            error, x = exc, None
        y = b.taint[index]
        sx = len(x) if x is not None else 1
        sy = len(y)
        units = math.ceil((sx if sx < sy else sy) * 0.1)
        used = b.used + 2 + units
        if used > b.limit:
            charge_each(b, (1, 1, units))
        b.used = used
        if error is not None:
            raise error
        return (x == y) is not negate

    return then_field_equals


def _size_or_one(v: Any) -> int:
    return len(v) if isinstance(v, str) else 1


def prefix_test(lhs: Fn, rhs: Fn, ends: bool, receiver: Leaf | None = None,
                affix: Leaf | None = None) -> Fn:
    """``startsWith`` / ``endsWith`` on strings: cel-go charges ceil(0.1 x the receiver's
    size) at run time (an error counts as size 1); a taint field tested against a
    constant is read in place."""
    test = str.endswith if ends else str.startswith
    if receiver is not None and receiver.kind == "taint" and affix is not None \
            and affix.kind == "const":
        return _field_prefix(receiver.arg, affix.arg, test)

    def prefix(b: Any) -> Any:
        error = None
        try:
            x = lhs(b)
        except CelError as exc:
            error, x = exc, None
        try:
            y = rhs(b)
        except CelError as exc:
            error = error or exc
        b.used += math.ceil(_size_or_one(x) * 0.1)
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        if error is not None:
            raise error
        return test(x, y)

    return prefix


def _field_prefix(index: int, affix: str, test: Callable[[str, str], bool]) -> Fn:
    def field_prefix(b: Any) -> Any:
        x = b.taint[index]
        units = math.ceil(len(x) * 0.1)
        used = b.used + 2 + units
        if used > b.limit:
            charge_each(b, (1, 1, units))
        b.used = used
        return test(x, affix)

    return field_prefix


def conversion(arg: Fn, impl: Callable[[Any], Any], name: str, accepts: type,
               convert: Callable[[Any], Any] | None) -> Fn:
    """A conversion costing 1 unit whose argument's static type makes it trivial
    (``int(int)``, ``string(int)``, ``string(string)``): ``convert`` (None: the value
    itself) when the value is of type ``accepts``, else the library's function."""

    def typed_conversion(b: Any) -> Any:
        try:
            v = arg(b)
        except CelError:
            b.used += 1
            if b.used > b.limit:
                raise CostLimitExceeded(b.used) from None
            raise
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        if type(v) is accepts:
            return v if convert is None else convert(v)
        try:
            return impl(v)
        except CelError:
            raise
        except Exception as exc:  # noqa: BLE001 - a library defect must not escape
            raise CelError(f"{name}: {exc}") from None

    return typed_conversion


#: overload id -> (the argument's Python type, its conversion; None: itself)
CONVERSIONS: dict[str, tuple[type, Callable[[Any], Any] | None]] = {
    "int64_to_int64": (int, None),
    "int64_to_string": (int, str),
    "string_to_string": (str, None),
}


def size_of(arg: Fn, operand: Leaf | None = None) -> Fn:
    """``size()`` of a string (code points), bytes, list or map: 1 unit; of a taint
    field, read in place (1 + 1, then 1)."""
    if operand is not None and operand.kind == "taint":
        index = operand.arg

        def field_size(b: Any) -> Any:
            used = b.used + 3
            if used > b.limit:
                charge_each(b, (1, 1, 1))
            b.used = used
            return len(b.taint[index])

        return field_size

    def size(b: Any) -> Any:
        try:
            v = arg(b)
        except CelError:
            b.used += 1
            if b.used > b.limit:
                raise CostLimitExceeded(b.used) from None
            raise
        b.used += 1
        if b.used > b.limit:
            raise CostLimitExceeded(b.used)
        return len(v)

    return size
