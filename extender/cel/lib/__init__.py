"""The libraries' implementations by function name (``FUNCTIONS``).

The declarations (overload ids, signatures, bindings) are cel-go's, in
``extender.cel.overloads``; ``REGISTRY`` is re-exported from ``extender.cel.decls``.  An
implementation dispatches on its arguments' kinds, as cel-go's function-level bindings do.
"""

from __future__ import annotations

from extender.cel.decls import REGISTRY
from extender.cel.lib import (
    compare,
    comprehensions,
    format,
    ip,
    lists,
    optional,
    printf,
    quantity,
    regex,
    semver,
    sets,
    stdlib,
    strings,
    urls,
)

_MODULES = (stdlib, strings, regex, sets, lists, semver, quantity, compare, ip, urls, optional,
            format, printf, comprehensions)

FUNCTIONS: dict = {}
for _m in _MODULES:
    FUNCTIONS.update(_m.FUNCTIONS)

__all__ = ["FUNCTIONS", "REGISTRY"]
