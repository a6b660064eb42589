"""The library registry: every declared overload, its runtime callable and cost.

``SIGNATURES`` feed the validator (``extender.cel.decls``); ``FUNCTIONS`` is the mapping
handed to cel-python (operators and built-ins are overridden by name); ``UNSUPPORTED``
lists Kubernetes CEL functions this extender deliberately does not implement, so that
using one fails compilation with a message naming it instead of silently misbehaving.
"""

from __future__ import annotations

from extender.cel.decls import build_registry
from extender.cel.lib import (
    compare,
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
            format, printf)

SIGNATURES: list[str] = [sig for m in _MODULES for sig in m.SIGNATURES]
FUNCTIONS: dict = {}
for _m in _MODULES:
    FUNCTIONS.update(_m.FUNCTIONS)

#: name -> why it is unsupported (all are part of the Kubernetes 1.35 base environment).
#: Optional *syntax* (``x.?f``, ``m[?k]``, ``[?e]``, ``{?k: v}``) is supported by a
#: rewrite before parsing (``extender.cel.optsyntax``).
UNSUPPORTED: dict[str, str] = {}

REGISTRY = build_registry(SIGNATURES)
