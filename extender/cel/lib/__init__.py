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
    ip,
    lists,
    quantity,
    regex,
    semver,
    sets,
    stdlib,
    strings,
    urls,
)

_MODULES = (stdlib, strings, regex, sets, lists, semver, quantity, compare, ip, urls)

SIGNATURES: list[str] = [sig for m in _MODULES for sig in m.SIGNATURES]
FUNCTIONS: dict = {}
for _m in _MODULES:
    FUNCTIONS.update(_m.FUNCTIONS)

#: name -> why it is unsupported (all are part of the Kubernetes 1.35 base environment).
UNSUPPORTED: dict[str, str] = {
    "format": "cel-go's locale-dependent string formatting is not reproduced",
    "optional.of": "optional types are not supported",
    "optional.ofNonZeroValue": "optional types are not supported",
    "optional.none": "optional types are not supported",
    "hasValue": "optional types are not supported",
    "value": "optional types are not supported",
    "orValue": "optional types are not supported",
    "or": "optional types are not supported",
    "first": "optional types are not supported",
    "last": "optional types are not supported",
}
#: K8s ``format``: ``format.named()`` and ``<Format>.validate()`` return optionals, so the
#: library is unusable without optional types.
_FORMAT = "the format library returns optional values, and optional types are not supported"
for _f in ("named", "dns1123Label", "dns1123Subdomain", "dns1035Label", "qualifiedName",
           "dns1123LabelPrefix", "dns1123SubdomainPrefix", "dns1035LabelPrefix",
           "labelValue", "uri", "uuid", "byte", "date", "datetime"):
    UNSUPPORTED[f"format.{_f}"] = _FORMAT
UNSUPPORTED["validate"] = _FORMAT

REGISTRY = build_registry(SIGNATURES)
