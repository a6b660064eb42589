"""Static types and cel-go's type unification (checker/types.go), in our own terms.

A type is a string for the simple kinds (``int uint double bool string bytes null_type dyn
error duration timestamp type`` and the declared object / opaque names ``Taint Quantity
Semver URL Format IP CIDR``) or a tuple: ``("list", T)``, ``("map", K, V)``,
``("optional_type", T)`` and ``("param", name)`` for a type parameter (an overload's ``A``,
or a checker's free variable ``_var3``).

``Mapping`` holds the substitutions of type parameters found so far; ``assignable`` is
cel-go's ``internalIsAssignable`` (with its occurs check and "most general" choice), so
overload resolution, the element type of ``[]`` and the homogeneous-literal rule decide
exactly as cel-go's checker does.
"""

from __future__ import annotations

Type = str | tuple

DYN = "dyn"
ERROR = "error"
#: Kubernetes declares these as object (struct) types; IP and CIDR are opaque.
STRUCTS = frozenset({"Taint", "Quantity", "Semver", "URL", "Format"})
OPAQUES = frozenset({"IP", "CIDR"})
PRIMITIVES = frozenset({"bool", "bytes", "double", "int", "string", "uint"})
SIMPLE = PRIMITIVES | STRUCTS | OPAQUES | {"null_type", DYN, ERROR, "duration", "timestamp",
                                           "type"}
#: cel-go type names for messages (``format_type``)
_NAMES = {"duration": "google.protobuf.Duration", "timestamp": "google.protobuf.Timestamp",
          "Quantity": "kubernetes.Quantity", "Semver": "kubernetes.Semver",
          "URL": "kubernetes.URL", "Format": "kubernetes.NamedFormat", "IP": "net.IP",
          "CIDR": "net.CIDR"}


def kind(t: Type) -> str:
    """cel-go's ``Kind`` of a type: the simple name, ``struct``, ``opaque``, ``list``,
    ``map``, ``param`` or ``null``."""
    if isinstance(t, tuple):
        head = t[0]
        return "opaque" if head == "optional_type" else head
    if t in STRUCTS:
        return "struct"
    if t in OPAQUES:
        return "opaque"
    if t == "null_type":
        return "null"
    return t


def name_of(t: Type) -> str:
    """cel-go's ``TypeName``."""
    return t[0] if isinstance(t, tuple) else t


def params(t: Type) -> tuple:
    return t[1:] if isinstance(t, tuple) and t[0] != "param" else ()


def is_param(t: Type) -> bool:
    return isinstance(t, tuple) and t[0] == "param"


def is_dyn_or_error(t: Type) -> bool:
    return t == DYN or t == ERROR


def format_type(t: Type) -> str:
    if isinstance(t, str):
        return _NAMES.get(t, t)
    if t[0] == "param":
        return t[1]
    return f"{t[0]}({', '.join(format_type(a) for a in t[1:])})"


class Mapping:
    """Type-parameter substitutions (cel-go ``mapping``), copied on trial."""

    __slots__ = ("subs",)

    def __init__(self, subs: dict | None = None) -> None:
        self.subs: dict[str, Type] = subs if subs is not None else {}

    def copy(self) -> Mapping:
        return Mapping(dict(self.subs))

    def find(self, t: Type) -> Type | None:
        return self.subs.get(t[1]) if is_param(t) else None


def exact(a: Type, b: Type) -> bool:
    return a == b


def _less_specific(t1: Type, t2: Type) -> bool:
    """cel-go ``isEqualOrLessSpecific``: t1 is as general as or more general than t2."""
    k1, k2 = kind(t1), kind(t2)
    if t1 == DYN or k1 == "param":
        return True
    if t2 == DYN or k2 == "param":
        return False
    if k1 != k2:
        return False
    if k1 == "opaque":
        if name_of(t1) != name_of(t2) or len(params(t1)) != len(params(t2)):
            return False
        return all(_less_specific(a, b) for a, b in zip(params(t1), params(t2), strict=True))
    if k1 in ("list", "map"):
        return all(_less_specific(a, b) for a, b in zip(params(t1), params(t2), strict=True))
    if k1 == "type":
        return True
    return t1 == t2


def most_general(t1: Type, t2: Type) -> Type:
    return t1 if _less_specific(t1, t2) else t2


def _nullable(t: Type) -> bool:
    return kind(t) in ("opaque", "struct", "any", "duration", "timestamp")


def _assignable(m: Mapping, t1: Type, t2: Type) -> bool:
    """cel-go ``internalIsAssignable``: may a value of type t1 be used as t2?"""
    k1, k2 = kind(t1), kind(t2)
    if k2 == "param":
        valid, has_sub = _valid_substitution(m, t1, t2)
        if valid:
            return True
        if has_sub:
            return False
    if k1 == "param":
        return _valid_substitution(m, t2, t1)[0]
    if is_dyn_or_error(t1) or is_dyn_or_error(t2):
        return True
    if k1 == "null":
        return _nullable(t2) or t2 == "null_type"
    if k2 == "null":
        return _nullable(t1)
    if k1 in PRIMITIVES or k1 in ("duration", "timestamp", "struct"):
        return t1 == t2
    if k1 == "type":
        return k2 == "type"
    if k1 in ("opaque", "list", "map"):
        return (k1 == k2 and name_of(t1) == name_of(t2)
                and _assignable_list(m, params(t1), params(t2)))
    return False


def _valid_substitution(m: Mapping, t1: Type, t2: Type) -> tuple[bool, bool]:
    """cel-go ``isValidTypeSubstitution``: is t2 (or its substitution) a valid substitution
    for t1, and does t2 already have one?"""
    if t1 == t2:
        return True, True
    sub = m.find(t2)
    if sub is not None:
        if t1 == sub:
            return True, True
        if _assignable(m, t1, sub):
            new = most_general(t1, sub)
            if _not_referenced_in(m, t2, new):
                m.subs[t2[1]] = new
            return True, True
        return False, True
    if _not_referenced_in(m, t2, t1):
        m.subs[t2[1]] = t1
        return True, False
    return False, False


def _assignable_list(m: Mapping, l1: tuple | list, l2: tuple | list) -> bool:
    if len(l1) != len(l2):
        return False
    return all(_assignable(m, a, b) for a, b in zip(l1, l2, strict=True))


def _not_referenced_in(m: Mapping, t: Type, within: Type) -> bool:
    """The occurs check."""
    if t == within:
        return False
    kw = kind(within)
    if kw == "param":
        sub = m.find(within)
        return True if sub is None else _not_referenced_in(m, t, sub)
    if kw in ("opaque", "list", "map", "type"):
        return all(_not_referenced_in(m, t, p) for p in params(within))
    return True


def assignable(m: Mapping, t1: Type, t2: Type) -> Mapping | None:
    """The updated mapping if t1 is assignable to t2, else None (m is left alone)."""
    trial = m.copy()
    return trial if _assignable(trial, t1, t2) else None


def assignable_list(m: Mapping, l1: list, l2: list) -> Mapping | None:
    trial = m.copy()
    return trial if _assignable_list(trial, l1, l2) else None


def substitute(m: Mapping, t: Type, params_to_dyn: bool) -> Type:
    """Replace bound type parameters (unbound ones by dyn when ``params_to_dyn``)."""
    while True:
        sub = m.find(t)
        if sub is None:
            break
        t = sub
    if is_param(t):
        return DYN if params_to_dyn else t
    if isinstance(t, tuple):
        return (t[0], *(substitute(m, p, params_to_dyn) for p in t[1:]))
    return t


def rename_params(t: Type, names: dict[str, Type]) -> Type:
    """An overload's type with its parameters replaced by fresh variables."""
    if is_param(t):
        return names.get(t[1], t)
    if isinstance(t, tuple):
        return (t[0], *(rename_params(p, names) for p in t[1:]))
    return t


def type_params(t: Type, out: list[str]) -> list[str]:
    if is_param(t):
        if t[1] not in out:
            out.append(t[1])
    elif isinstance(t, tuple):
        for p in t[1:]:
            type_params(p, out)
    return out


def equivalent(a: Type, b: Type) -> bool:
    """cel-go ``IsEquivalentType`` (type parameter names ignored)."""
    if a == b:
        return True
    ka, kb = kind(a), kind(b)
    if ka != kb or len(params(a)) != len(params(b)):
        return False
    if ka != "param" and name_of(a) != name_of(b):
        return False
    return all(equivalent(x, y) for x, y in zip(params(a), params(b), strict=True))


def is_scalar(t: Type) -> bool:
    """Types of a constant size for the cost estimate (cel-go ``isScalar``)."""
    if t in ("bool", "double", "duration", "int", "timestamp", "uint"):
        return True
    if isinstance(t, tuple) and t[0] == "optional_type":
        return is_scalar(t[1])
    return False
