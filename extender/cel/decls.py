"""Function declarations: the overload table of ``extender.cel.overloads`` parsed into
``Overload`` records, by function name in cel-go's declaration order.

Signature syntax::

    "starts_with_string B: string.startsWith(string) -> bool"    # member (receiver) style
    "string_bool_to_semver B: semver(string, bool) -> Semver"     # global style
    "list_sets_contains_list B: sets.contains(list(T), list(T)) -> bool"   # namespaced

Types as in ``extender.cel.types``; single capital letters are type parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.cel import overloads
from extender.cel.environment import NAMESPACES
from extender.cel.types import SIMPLE, Type, type_params

DYN = "dyn"


@dataclass(frozen=True, slots=True)
class Overload:
    id: str
    name: str
    member: bool
    params: tuple  # receiver first for member overloads
    result: Type
    binding: str  # "U", "B", "F" or "-" (see extender.cel.overloads)
    type_params: tuple[str, ...]
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


def parse_declaration(entry: str) -> Overload:
    head, text = entry.split(":", 1)
    oid, binding = head.split()
    sig, result = (p.strip() for p in text.split("->"))
    depth, open_paren = 0, -1
    for i in range(len(sig) - 1, -1, -1):  # the parenthesis matching the final ")"
        depth += sig[i] == ")"
        depth -= sig[i] == "("
        if depth == 0:
            open_paren = i
            break
    callee, args = sig[:open_paren].strip(), sig[open_paren + 1 : sig.rindex(")")]
    params = [parse_type(a) for a in _split_args(args)]
    member, name = False, callee
    depth, cut = 0, -1
    for i, ch in enumerate(callee):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "." and depth == 0:
            cut = i
    operator = callee[:1] in "_@!-"
    if cut >= 0 and not operator and callee[:cut] not in NAMESPACES:
        member, name = True, callee[cut + 1 :]
        params.insert(0, parse_type(callee[:cut]))
    result_type = parse_type(result)
    names: list[str] = []
    for t in (*params, result_type):
        type_params(t, names)
    return Overload(oid, name, member, tuple(params), result_type, binding, tuple(names),
                    text.strip())


def build_registry(entries: list[str]) -> dict[str, list[Overload]]:
    reg: dict[str, list[Overload]] = {}
    for entry in entries:
        ov = parse_declaration(entry)
        reg.setdefault(ov.name, []).append(ov)
    return reg


REGISTRY = build_registry(overloads.DECLARATIONS)
#: overload id -> its own binding letters ("-": the function's)
BINDINGS = {ov.id: ov.binding for ovs in REGISTRY.values() for ov in ovs}
