"""Operators on statically typed operands, compiled without the generic call machinery.

Each one computes what the stock library function computes and charges what
``extender.cel.cost.call_cost`` charges for its overload, at the same point (after both
operands, before an error is raised), with both operands evaluated even when the first
fails (a binary call in cel-go).  They apply only while the library function is the
shipped one (tests emulating another engine patch ``FUNCTIONS``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from extender.cel.budget import CostLimitExceeded
from extender.cel.values import INT64_MAX, INT64_MIN, CelError

Fn = Callable[[Any], Any]


def _overflow(r: int) -> int:
    if r < INT64_MIN or r > INT64_MAX:
        raise CelError("integer overflow")
    return r


def _div(x: int, y: int) -> int:
    if y == 0:
        raise CelError("division by zero")
    q = abs(x) // abs(y)
    return _overflow(q if (x >= 0) == (y >= 0) else -q)


def _mod(x: int, y: int) -> int:
    if y == 0:
        raise CelError("modulus by zero")
    if x == INT64_MIN and y == -1:
        raise CelError("integer overflow")
    q = abs(x) // abs(y)
    return x - (q if (x >= 0) == (y >= 0) else -q) * y


#: int (x) int overloads, all costing 1
INT_OPS: dict[str, Callable[[int, int], Any]] = {
    "add_int64": lambda x, y: _overflow(x + y),
    "subtract_int64": lambda x, y: _overflow(x - y),
    "multiply_int64": lambda x, y: _overflow(x * y),
    "divide_int64": _div,
    "modulo_int64": _mod,
    "less_int64": lambda x, y: x < y,
    "less_equals_int64": lambda x, y: x <= y,
    "greater_int64": lambda x, y: x > y,
    "greater_equals_int64": lambda x, y: x >= y,
}


def binary(lhs: Fn, rhs: Fn, op: Callable[[Any, Any], Any]) -> Fn:
    """A binary call costing 1 unit whatever its operands (``INT_OPS``; ``==`` / ``!=``
    on two ints, uints, bools or doubles)."""

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


def text_equals(lhs: Fn, rhs: Fn, negate: bool) -> Fn:
    """``==`` / ``!=`` on two strings: ceil(0.1 x the shorter length) units (an error
    counts as size 1)."""

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


def _size_or_one(v: Any) -> int:
    return len(v) if isinstance(v, str) else 1


def prefix_test(lhs: Fn, rhs: Fn, ends: bool) -> Fn:
    """``startsWith`` / ``endsWith`` on strings: cel-go charges ceil(0.1 x the receiver's
    size) at run time (an error counts as size 1)."""
    test = str.endswith if ends else str.startswith

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


def size_of(arg: Fn) -> Fn:
    """``size()`` of a string (code points), bytes, list or map: 1 unit."""

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
