"""cel-go ``ext.Lists`` version 3 and the Kubernetes ``lists`` library (v0).

ext.Lists: ``slice flatten distinct reverse sort lists.range`` (and the ``sortBy`` macro,
implemented in the evaluator).  K8s: ``isSorted sum min max indexOf lastIndexOf``.
``indexOf``/``lastIndexOf`` are shared with ext strings: one implementation per
function name, dispatching on the receiver's kind.
"""

from __future__ import annotations

from typing import Any

from extender.cel.lib import strings, timevals
from extender.cel.lib.gosort import go_sort_slice
from extender.cel.values import (
    ORDERED,
    EvalError,
    cel_equal,
    cel_function,
    check_int,
    check_uint,
    go_compare,
    kind,
    want,
)


def _int(v: Any) -> int:
    want(v, "int")
    return int(v)


@cel_function("slice")
def slice_(items: Any, start: Any, end: Any) -> Any:
    want(items, "list")
    a, b = _int(start), _int(end)
    if a < 0 or b < 0:
        raise EvalError(f"cannot slice({a}, {b}), negative indexes not supported")
    if a > b:
        raise EvalError(
            f"cannot slice({a}, {b}), start index must be less than or equal to end index"
        )
    if b > len(items):
        raise EvalError(f"cannot slice({a}, {b}), list is length {len(items)}")
    return list(items[a:b])


def _flatten(items: list, depth: int) -> list:
    out: list = []
    for x in items:
        if kind(x) == "list" and depth > 0:
            out.extend(_flatten(x, depth - 1))
        else:
            out.append(x)
    return out


@cel_function("flatten")
def flatten(items: Any, depth: Any = None) -> Any:
    want(items, "list")
    d = 1 if depth is None else _int(depth)
    if d < 0:
        raise EvalError("level must be non-negative")
    return list(_flatten(items, d))


@cel_function("distinct")
def distinct(items: Any) -> Any:
    want(items, "list")
    out: list = []
    for x in items:
        if not any(cel_equal(x, y) for y in out):
            out.append(x)
    return list(out)


@cel_function("lists.range")
def range_(n: Any) -> Any:
    return list(range(max(0, _int(n))))


@cel_function("reverse")
def reverse(items: Any) -> Any:
    want(items, "list")
    return list(list(reversed(items)))


def sort_values(items: list, keys: list | None = None) -> list:
    """cel-go ``sortListByAssociatedKeys``: ``items`` in the order Go's ``sort.Slice``
    gives ``keys`` (``items`` themselves without ``keys``), comparing with cel-go's
    ``Compare`` (a NaN orders with nothing: "less" is false both ways, not an error)."""
    basis = items if keys is None else keys
    if not basis:
        return items
    first = kind(basis[0])
    if first not in ORDERED:
        raise EvalError("list elements must be comparable")
    mixed = False

    def less(i: int, j: int) -> bool:
        nonlocal mixed
        a, b = basis[i], basis[j]
        if kind(a) != first or kind(b) != first:
            mixed = True
            return False
        return go_compare(a, b) == -1

    order = go_sort_slice(len(basis), less)
    if mixed:
        raise EvalError("list elements must have the same type")
    return [items[i] for i in order]


@cel_function("sort")
def sort(items: Any) -> Any:
    want(items, "list")
    return list(sort_values(list(items)))


@cel_function("@sortByAssociatedKeys")
def sort_by_keys(items: Any, keys: Any) -> Any:
    """``sortBy``'s sort (cel-go ``sortListByAssociatedKeys``): ``items`` in the order of
    ``keys``; the two lists must be of one size."""
    want(items, "list")
    want(keys, "list")
    if len(items) != len(keys):
        raise EvalError("@sortByAssociatedKeys() expected a list of the same size as the "
                        f"associated keys list, but got {len(items)} and {len(keys)} elements "
                        "respectively")
    return list(sort_values(list(items), list(keys)))


@cel_function("isSorted")
def is_sorted(items: Any) -> Any:
    """Kubernetes ``isSorted``: false at the first element greater than its successor; a
    comparison that fails (NaN, kinds that do not order) does not count."""
    want(items, "list")
    for x in items:
        if kind(x) not in ORDERED:
            raise EvalError(f"no such overload: isSorted({kind(x)})")
    return all(go_compare(a, b) != 1 for a, b in zip(items, items[1:], strict=False))


@cel_function("sum")
def sum_(items: Any) -> Any:
    want(items, "list")
    if not items:
        return 0
    k = kind(items[0])
    if any(kind(x) != k for x in items):
        raise EvalError("sum of list elements of different types")
    if k == "int":  # added in order, as Kubernetes' sum does: a partial sum out of range is
        total = 0    # an overflow even when later elements would bring it back
        for x in items:
            total = check_int(total + int(x))
        return total
    if k == "uint":  # unsigned partial sums only grow: the total says it
        return check_uint(sum(int(x) for x in items))
    if k == "double":
        total = 0.0
        for x in items:
            total += float(x)
        return float(total)
    if k == "duration":
        total = timevals.Duration(0)
        for x in items:
            total = timevals.add_durations(total, x)
        return total
    raise TypeError(k)


def _extreme(items: Any, name: str, sign: int) -> Any:
    """Kubernetes ``min``/``max``: the kept element is replaced when it compares as 1
    (min) / -1 (max) against the next; a failed comparison keeps it."""
    want(items, "list")
    if not items:
        raise EvalError(f"{name} called on empty list")
    for x in items:
        if kind(x) not in ORDERED:
            raise EvalError(f"no such overload: {name}({kind(x)})")
    best = items[0]
    for x in items[1:]:
        if go_compare(best, x) == -sign:
            best = x
    return best


@cel_function("min")
def min_(items: Any) -> Any:
    return _extreme(items, "min", -1)


@cel_function("max")
def max_(items: Any) -> Any:
    return _extreme(items, "max", 1)


@cel_function("indexOf")
def index_of(target: Any, item: Any, offset: Any = None) -> Any:
    if kind(target) == "string":
        return strings.index_of_string(target, item, offset)
    want(target, "list")
    if offset is not None:
        raise TypeError("list.indexOf takes one argument")
    return int(next((i for i, x in enumerate(target) if cel_equal(x, item)), -1))


@cel_function("lastIndexOf")
def last_index_of(target: Any, item: Any, offset: Any = None) -> Any:
    if kind(target) == "string":
        return strings.last_index_of_string(target, item, offset)
    want(target, "list")
    if offset is not None:
        raise TypeError("list.lastIndexOf takes one argument")
    for i in range(len(target) - 1, -1, -1):
        if cel_equal(target[i], item):
            return int(i)
    return -1


FUNCTIONS = {
    "slice": slice_, "flatten": flatten, "distinct": distinct, "lists.range": range_,
    "reverse": reverse, "sort": sort, "@sortByAssociatedKeys": sort_by_keys, "isSorted": is_sorted, "sum": sum_, "min": min_,
    "max": max_, "indexOf": index_of, "lastIndexOf": last_index_of,
}
