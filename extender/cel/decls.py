"""Static types and function declarations (the part of cel-go's checker we need).

Libraries declare overloads as compact signature strings, e.g.::

    "string.startsWith(string) -> bool"          # member (receiver) style
    "semver(string, bool) -> Semver"             # global style
    "sets.contains(list(A), list(A)) -> bool"    # namespaced global (see NAMESPACES)

Types: ``int uint double bool string bytes null_type dyn duration timestamp type`` and
opaque ``Semver Quantity IP CIDR URL Format``; ``list(T)``, ``map(K, V)``, ``optional_type(T)``;
single capital letters are type parameters.  The validator resolves calls against these
declarations by name, arity, receiver style and argument types, like cel-go does at
compile time; the runtime dispatches by Python type (cel-python has no overloads).
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.cel.environment import NAMESPACES

Type = str | tuple  # "int" | ("list", T) | ("map", K, V) | ("optional_type", T) | ("param", "A")

DYN = "dyn"
SIMPLE = frozenset({"int", "uint", "double", "bool", "string", "bytes", "null_type", "dyn",
                    "duration", "timestamp", "type", "Semver", "Quantity", "IP", "CIDR",
                    "URL", "Format", "Taint"})


@dataclass(frozen=True, slots=True)
class Overload:
    name: str
    member: bool
    params: tuple  # receiver first for member overloads
    result: Type
    text: str


def parse_type(text: str) -> Type:
    t, rest = _parse_type(text.replace(" ", ""))
    if rest:
        raise ValueError(f"trailing text in type {text!r}")
    return t


def _parse_type(s: str) -> tuple[Type, str]:
    i = 0
    while i < len(s) and (s[i].isalnum() or s[i] == "_"):
        i += 1
    name, rest = s[:i], s[i:]
    if rest.startswith("("):
        args: list[Type] = []
        rest = rest[1:]
        while True:
            t, rest = _parse_type(rest)
            args.append(t)
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if not rest.startswith(")"):
                raise ValueError(f"bad type syntax near {rest!r}")
            return (name, *args), rest[1:]
    if len(name) == 1 and name.isupper():
        return ("param", name), rest
    if name not in SIMPLE:
        raise ValueError(f"unknown type {name!r}")
    return name, rest


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        out.append(cur)
    return [a.strip() for a in out]


def parse_signature(text: str) -> Overload:
    head, result = (p.strip() for p in text.split("->"))
    depth, open_paren = 0, -1
    for i in range(len(head) - 1, -1, -1):  # the parenthesis matching the final ")"
        depth += head[i] == ")"
        depth -= head[i] == "("
        if depth == 0:
            open_paren = i
            break
    callee, args = head[:open_paren], head[open_paren + 1 : head.rindex(")")]
    params = [parse_type(a) for a in _split_args(args)]
    member = False
    name = callee
    depth, cut = 0, -1
    for i, ch in enumerate(callee):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "." and depth == 0:
            cut = i
    if cut >= 0:
        prefix = callee[:cut]
        if prefix in NAMESPACES:
            name = callee
        else:
            member = True
            name = callee[cut + 1 :]
            params.insert(0, parse_type(prefix))
    return Overload(name, member, tuple(params), parse_type(result), text)


def build_registry(signatures: list[str]) -> dict[str, list[Overload]]:
    reg: dict[str, list[Overload]] = {}
    for sig in signatures:
        ov = parse_signature(sig)
        reg.setdefault(ov.name, []).append(ov)
    return reg


def format_type(t: Type) -> str:
    if isinstance(t, str):
        return t
    if t[0] == "param":
        return t[1]
    if t[0] == "free":
        return f"_var{t[1]}"
    return f"{t[0]}({', '.join(format_type(a) for a in t[1:])})"


def _resolve(t: Type, b: dict) -> Type:
    while isinstance(t, tuple) and t[0] == "param" and t[1] in b:
        t = b[t[1]]
    return t


def _free(t: Type, b: dict) -> Type:
    while isinstance(t, tuple) and t[0] == "free" and t in b:
        t = b[t]
    return t


def unify(actual: Type, param: Type, b: dict) -> bool:
    """Can a value of static type ``actual`` be passed as ``param``?  Binds type params
    (``("param", "A")`` of the overload) and the expression's free type variables
    (``("free", n)``, e.g. the element type of ``[]``) in ``b``, as cel-go's checker
    does: a free variable takes the type of the first overload it is matched with."""
    param = _free(_resolve(param, b), b)
    actual = _free(_resolve(actual, b), b)
    if isinstance(param, tuple) and param[0] == "param":
        b[param[1]] = actual
        return True
    if actual == param:
        return True
    if isinstance(actual, tuple) and actual[0] == "free":
        b[actual] = param
        return True
    if isinstance(param, tuple) and param[0] == "free":
        b[param] = actual
        return True
    if actual == DYN or param == DYN:
        return True
    if isinstance(actual, tuple) and actual[0] == "param":  # pragma: no cover - defensive
        return True
    if isinstance(actual, str) or isinstance(param, str):
        return actual == param
    if actual[0] != param[0] or len(actual) != len(param):
        return False
    return all(unify(a, p, b) for a, p in zip(actual[1:], param[1:], strict=True))


def substitute(t: Type, b: dict) -> Type:
    t = _free(_resolve(t, b), b)
    if isinstance(t, tuple):
        if t[0] == "param":
            return DYN
        if t[0] == "free":
            return t
        return (t[0], *(substitute(a, b) for a in t[1:]))
    return t


def element_type(t: Type) -> Type:
    if isinstance(t, tuple) and t[0] in ("list", "map"):
        return t[1]
    return DYN


def is_dyn(t: Type) -> bool:
    return t == DYN
