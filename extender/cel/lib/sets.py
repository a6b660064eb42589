"""cel-go ``ext.Sets``: ``sets.contains``, ``sets.equivalent``, ``sets.intersects``.

Membership uses CEL runtime equality, so ``sets.contains([1], [1.0])`` is true (cel-go
behaviour with heterogeneous equality).
"""

from __future__ import annotations

from typing import Any

from extender.cel.values import cel_equal, cel_function, want


def _has(container: list, item: Any) -> bool:
    return any(cel_equal(item, x) for x in container)


@cel_function("sets.contains")
def contains(a: Any, b: Any) -> Any:
    want(a, "list")
    want(b, "list")
    return bool(all(_has(a, x) for x in b))


@cel_function("sets.equivalent")
def equivalent(a: Any, b: Any) -> Any:
    want(a, "list")
    want(b, "list")
    return bool(all(_has(a, x) for x in b) and all(_has(b, x) for x in a))


@cel_function("sets.intersects")
def intersects(a: Any, b: Any) -> Any:
    want(a, "list")
    want(b, "list")
    return bool(any(_has(b, x) for x in a))


FUNCTIONS = {"sets.contains": contains, "sets.equivalent": equivalent,
             "sets.intersects": intersects}
