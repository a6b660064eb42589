"""cel-go's two-variable comprehensions extension: ``cel.@mapInsert``, the step of
``transformMap`` / ``transformMapEntry`` (the macros are expanded in ``extender.cel.ast``).
"""

from __future__ import annotations

from typing import Any

from extender.cel.values import MISSING, CelError, cel_function, kind, map_find, map_put, want


def insert(target: dict, key: Any, value: Any) -> dict:
    """A copy of ``target`` with the entry (cel-go ``InsertMapKeyValue``); an existing
    key is an error."""
    if map_find(target, key) is not MISSING:
        raise CelError(f"insert failed: key {_show(key)} already exists")
    out = dict(target)
    map_put(out, key, value)
    return out


def _show(key: Any) -> str:
    k = kind(key)
    if k == "bool":
        return "true" if key else "false"
    return str(key) if k in ("int", "uint", "double", "string") else k


@cel_function("cel.@mapInsert")
def map_insert(target: Any, key: Any, value: Any = MISSING) -> Any:
    want(target, "map")
    if value is not MISSING:
        return insert(target, key, value)
    want(key, "map")
    for k, v in key.items():
        target = insert(target, k, v)
    return target


FUNCTIONS = {"cel.@mapInsert": map_insert}
