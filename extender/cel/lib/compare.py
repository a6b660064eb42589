"""``compareTo`` / ``isGreaterThan`` / ``isLessThan``: one name, two K8s types.

One implementation per function name (``extender.cel.lib.FUNCTIONS``), so Semver and
Quantity share these callables; they dispatch on the receiver and reject mixed operands
like cel-go's overloads do.
"""

from __future__ import annotations

from typing import Any

from extender.cel.lib.quantity import Quantity, quantity_compare
from extender.cel.lib.semver import Semver, semver_compare
from extender.cel.values import cel_function, kind


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Semver) and isinstance(b, Semver):
        return semver_compare(a, b)
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return quantity_compare(a, b)
    raise TypeError(f"{kind(a)}, {kind(b)}")


@cel_function("compareTo")
def compare_to(a: Any, b: Any) -> Any:
    return int(_compare(a, b))


@cel_function("isGreaterThan")
def is_greater_than(a: Any, b: Any) -> Any:
    return bool(_compare(a, b) == 1)


@cel_function("isLessThan")
def is_less_than(a: Any, b: Any) -> Any:
    return bool(_compare(a, b) == -1)


FUNCTIONS = {"compareTo": compare_to, "isGreaterThan": is_greater_than,
             "isLessThan": is_less_than}
