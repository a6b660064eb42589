"""A small expression tree (IR) built from cel-python's normalised lark tree.

cel-python has no checker, so the validator, the type inference and the cost estimator
work on this IR instead of lark's grammar-shaped tree.  Macros are recognised here exactly
as cel-go's parser expands them (``has``, ``all``, ``exists``, ``exists_one``, ``map``,
``filter``, the two-variable forms, ``sortBy`` and the optional ``optMap``/``optFlatMap``).  The IR is compile-time only; the
runtime evaluates the lark tree.
"""

from __future__ import annotations

from typing import Any

import lark

from extender.cel import literals
from extender.cel.environment import CompileError
from extender.cel.values import INT64_MAX, INT64_MIN, UINT64_MAX, Uint

#: macro name -> accepted argument counts (incl. variables)
MACROS: dict[str, tuple[int, ...]] = {
    "all": (2, 3), "exists": (2, 3), "exists_one": (2, 3), "existsOne": (3,),
    "map": (2, 3), "filter": (2,), "transformList": (3, 4), "transformMap": (3, 4),
    "transformMapEntry": (3, 4), "sortBy": (2,), "optMap": (2,), "optFlatMap": (2,),
}
#: macros whose 3-argument form is the two-variable one (``map`` 3-arg is var,filter,expr)
TWO_VAR = frozenset({"all", "exists", "exists_one", "existsOne", "transformList",
                     "transformMap", "transformMapEntry"})

_REL = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_",
        "relation_ge": "_>=_", "relation_eq": "_==_", "relation_ne": "_!=_",
        "relation_in": "@in"}
_ARITH = {"addition_add": "_+_", "addition_sub": "_-_", "multiplication_mul": "_*_",
          "multiplication_div": "_/_", "multiplication_mod": "_%_"}


class Node:
    """kind: const | ident | select | has | call | list | map | comp."""

    __slots__ = ("kind", "name", "args", "target", "value", "vars", "type", "where")

    def __init__(self, kind: str, name: str = "", args: list[Node] | None = None,
                 target: Node | None = None, value: Any = None,
                 vars: tuple[str, ...] = (), where: str = "") -> None:
        self.kind, self.name, self.args, self.target = kind, name, args or [], target
        self.value, self.vars, self.type, self.where = value, vars, None, where

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node({self.kind}, {self.name!r}, {self.args}, target={self.target})"


def _where(tree: lark.Tree) -> str:
    meta = getattr(tree, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return f" at line {meta.line}, column {meta.column}"
    return ""


def _int_text(text: str) -> int:
    body = text.lstrip("-")
    v = int(body[2:], 16) if body[:2].lower() == "0x" else int(body)
    return -v if text.startswith("-") else v


def _literal(token: lark.Token) -> Node:
    t, text = token.type, str(token)
    if t == "INT_LIT":
        v = _int_text(text)
        if not INT64_MIN <= v <= INT64_MAX:
            raise CompileError(f"integer literal {text} is out of range")
        return Node("const", value=v, name="int")
    if t == "UINT_LIT":
        body = text[:-1]
        if body.startswith("-"):  # cel-go: negation of a uint literal, no such overload
            raise CompileError("found no matching overload for '-_' applied to '(uint)'")
        v = _int_text(body)
        if v < 0 or v > UINT64_MAX:
            raise CompileError(f"unsigned integer literal {text} is out of range")
        return Node("const", value=Uint(v), name="uint")
    if t == "FLOAT_LIT":
        return Node("const", value=float(text), name="double")
    if t in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
        try:
            value = literals.decode(text)
        except literals.LiteralError as exc:
            where = (f" at line {token.line}, column {token.column}"
                     if token.line is not None else "")
            raise CompileError(f"syntax error{where}: invalid literal {text[:40]}: {exc}"
                               ) from None
        return Node("const", value=value, name="bytes" if t == "BYTES_LIT" else "string")
    if t == "BOOL_LIT":
        return Node("const", value=text == "true", name="bool")
    if t == "NULL_LIT":
        return Node("const", value=None, name="null_type")
    raise CompileError(f"unsupported literal {text!r}")  # pragma: no cover


def build(tree: Any) -> Node:
    """Normalised lark tree -> IR.  Recursion is bounded by MAX_NESTING_DEPTH."""
    if isinstance(tree, lark.Token):  # pragma: no cover - tokens are handled by parents
        raise CompileError(f"unexpected token {tree!s}")
    d, kids = tree.data, tree.children
    if d == "literal":
        return _literal(kids[0])
    if d == "primary":
        return _primary(kids[0])
    if d == "expr":
        return Node("call", "_?_:_", [build(k) for k in kids])
    if d == "conditionalor":
        return Node("call", "_||_", [build(kids[0]), build(kids[1])])
    if d == "conditionaland":
        return Node("call", "_&&_", [build(kids[0]), build(kids[1])])
    if d in ("relation", "addition", "multiplication"):
        op, right = kids
        table = _REL if d == "relation" else _ARITH
        return Node("call", table[op.data], [build(op.children[0]), build(right)])
    if d == "unary":
        op, operand = kids
        return Node("call", "!_" if op.data == "unary_not" else "-_", [build(operand)])
    if d == "member_dot":
        return Node("select", str(kids[1]), target=build(kids[0]), where=_where(tree))
    if d == "member_index":
        return Node("call", "_[_]", [build(kids[0]), build(kids[1])])
    if d == "member_dot_arg":
        args = [build(a) for a in kids[2].children] if len(kids) > 2 else []
        return _method(build(kids[0]), str(kids[1]), args, tree)
    if d == "member_object":
        raise CompileError("message construction is not supported in toleration expressions")
    raise CompileError(f"unsupported syntax {d!r}")  # pragma: no cover


def _primary(child: lark.Tree) -> Node:
    d = child.data
    if d == "ident":
        return Node("ident", str(child.children[0]), where=_where(child))
    if d == "dot_ident":
        return Node("ident", str(child.children[0]), value="root", where=_where(child))
    if d in ("ident_arg", "dot_ident_arg"):
        name = str(child.children[0])
        args = [build(a) for a in child.children[1].children] if len(child.children) > 1 else []
        if name == "has":
            if len(args) != 1 or args[0].kind != "select":
                raise CompileError("invalid argument to has() macro")
            return Node("has", args[0].name, target=args[0].target)
        return Node("call", name, args, where=_where(child))
    if d == "list_lit":
        items = [build(a) for a in child.children[0].children] if child.children else []
        return Node("list", args=items)
    if d == "map_lit":
        entries = [build(a) for a in child.children[0].children] if child.children else []
        return Node("map", args=entries)
    raise CompileError(f"unsupported syntax {d!r}")  # pragma: no cover


def _method(target: Node, name: str, args: list[Node], tree: lark.Tree) -> Node:
    if name in MACROS and len(args) in MACROS[name]:
        nvars = 2 if (len(args) == 3 and name in TWO_VAR) or len(args) == 4 else 1
        names = []
        for v in args[:nvars]:
            if v.kind != "ident" or v.value == "root":
                raise CompileError(f"{name}() variable must be a simple identifier")
            names.append(v.name)
        if nvars == 2 and names[0] == names[1]:
            raise CompileError(f"{name}() variables must be distinct, both are {names[0]}")
        return Node("comp", name, args[nvars:], target=target, vars=tuple(names))
    return Node("call", name, args, target=target, where=_where(tree))
