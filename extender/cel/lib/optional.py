"""cel-go optional types (``cel.OptionalTypes()``, K8s 1.28+): functions and syntax.

``optional.of(x)``, ``optional.ofNonZeroValue(x)``, ``optional.none()``,
``<opt>.hasValue()``, ``<opt>.value()`` (error ``optional.none() dereference`` on none),
``<opt>.orValue(v)``, ``<opt>.or(opt)`` — both short-circuit: the argument is not evaluated
when the receiver has a value (the evaluator special-cases them, like cel-go's decorator) —
``list.first()`` / ``list.last()`` and ``optional.unwrap(list)`` / ``list.unwrapOpt()``
(optional library version 2, the latest, which Kubernetes enables).  The ``optMap`` /
``optFlatMap`` macros are implemented by the evaluator (``extender.cel.runtime``).

The syntax forms ``x.?f``, ``m[?k]``, ``[?e]`` and ``{?k: v}`` are rewritten before
parsing (``extender.cel.optsyntax``) into ``__opt_field__``, ``__opt_index__`` and
``__opt_elem__`` calls, implemented here; the evaluator drops none elements / entries
from the literal that holds them.

Equality (cel-go ``Optional.Equal``): two nones are equal, none differs from any value,
otherwise the wrapped values are compared with CEL equality.
"""

from __future__ import annotations

from typing import Any

from extender.cel.lib import timevals
from extender.cel.values import MISSING, CelError, cel_equal, cel_function, kind, map_get, want


class Optional:
    """Opaque CEL value of type ``optional_type(T)``; ``value`` is ``_NONE`` when empty."""

    cel_type = "optional_type"
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    @property
    def has_value(self) -> bool:
        return self.value is not _NONE

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, Optional):
            return False
        if not self.has_value or not other.has_value:
            return self.has_value == other.has_value
        return cel_equal(self.value, other.value)

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has_value else "optional.none()"


_NONE = object()
NONE = Optional(_NONE)


def of(value: Any) -> Optional:
    return Optional(value)


def _is_zero(v: Any) -> bool:
    """cel-go ``traits.Zeroer``: bool, bytes, double, duration, int, null, string,
    timestamp (Go's zero time, 0001-01-01T00:00:00Z), uint, list and map.  Opaque values
    (Quantity, IP, ...) and optionals are never zero."""
    k = kind(v)
    if k in ("bool", "int", "uint", "double"):
        return not v
    if k in ("string", "bytes", "list", "map"):
        return len(v) == 0
    if k == "null_type":
        return True
    if k in ("duration", "timestamp"):
        return timevals.is_zero(v)
    return False


def _opt(v: Any) -> Optional:
    if not isinstance(v, Optional):
        raise TypeError(kind(v))
    return v


@cel_function("optional.of")
def optional_of(value: Any) -> Any:
    return Optional(value)


@cel_function("optional.ofNonZeroValue")
def optional_of_non_zero_value(value: Any) -> Any:
    return NONE if _is_zero(value) else Optional(value)


@cel_function("optional.none")
def optional_none() -> Any:
    return NONE


@cel_function("hasValue")
def has_value(opt: Any) -> Any:
    return bool(_opt(opt).has_value)


def value(opt: Any) -> Any:
    """``<opt>.value()``; the error text is cel-go's, without a function-name prefix."""
    if not isinstance(opt, Optional):
        raise CelError(f"no such overload: value({kind(opt)})")
    if not opt.has_value:
        raise CelError("optional.none() dereference")
    return opt.value


@cel_function("or")
def or_(opt: Any, other: Any) -> Any:
    o = _opt(opt)
    return o if o.has_value else _opt(other)


@cel_function("orValue")
def or_value(opt: Any, default: Any) -> Any:
    o = _opt(opt)
    return o.value if o.has_value else default


@cel_function("first")
def first(items: Any) -> Any:
    want(items, "list")
    return Optional(items[0]) if items else NONE


@cel_function("last")
def last(items: Any) -> Any:
    want(items, "list")
    return Optional(items[-1]) if items else NONE


def _unwrap(items: Any) -> Any:
    want(items, "list")
    return list([_opt(x).value for x in items if _opt(x).has_value])


optional_unwrap = cel_function("optional.unwrap")(_unwrap)
unwrap_opt = cel_function("unwrapOpt")(_unwrap)


class OptElem:
    """``?e`` inside a list or map literal: the literal keeps ``e``'s value, or drops the
    element / entry when ``e`` is none (the evaluator unwraps it; never escapes)."""

    __slots__ = ("opt",)

    def __init__(self, opt: Optional) -> None:
        self.opt = opt


@cel_function("__opt_elem__")
def opt_elem(opt: Any) -> Any:
    return OptElem(_opt(opt))


def _lookup(target: Any, key: Any) -> Any:
    if isinstance(target, Optional):
        return _lookup(target.value, key) if target.has_value else NONE
    k = kind(target)
    if k == "map":
        found = map_get(target, key)
        return NONE if found is MISSING else Optional(found)
    if k == "list" and kind(key) in ("int", "uint"):
        i = int(key)
        return Optional(target[i]) if 0 <= i < len(target) else NONE
    if k == "list" and kind(key) == "double" and float(key).is_integer():
        return _lookup(target, int(int(key)))
    raise TypeError(f"{k}[?{kind(key)}]")


@cel_function("__opt_field__")
def opt_field(target: Any, name: Any) -> Any:
    """``x.?f``: optional.of(x.f) if x has field f, else optional.none() (an optional
    receiver is looked into)."""
    return _lookup(target, name)


@cel_function("__opt_index__")
def opt_index(target: Any, key: Any) -> Any:
    """``x[?k]``: optional.of(x[k]) if present / in range, else optional.none()."""
    return _lookup(target, key)


FUNCTIONS = {
    "optional.of": optional_of, "optional.ofNonZeroValue": optional_of_non_zero_value,
    "optional.none": optional_none, "hasValue": has_value, "value": value,
    "or": or_, "orValue": or_value, "first": first, "last": last,
    "optional.unwrap": optional_unwrap, "unwrapOpt": unwrap_opt,
    "__opt_field__": opt_field, "__opt_index__": opt_index, "__opt_elem__": opt_elem,
}
