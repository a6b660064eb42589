"""The expression tree (IR) built from cel-python's normalised lark tree, in cel-go's shape.

cel-python has no checker, so the checker, the cost estimator and the planner work on this
IR.  It has cel-go's node kinds, and cel-go's parser expansions: every macro (``all``,
``exists``, ``exists_one``/``existsOne``, ``map``, ``filter``, the two-variable forms,
``transformList``/``transformMap``/``transformMapEntry``, ``sortBy``, ``optMap``,
``optFlatMap``) becomes the comprehension cel-go's macro builds, with the same accumulator,
loop condition, loop step and result, so that types, cost estimates and run-time costs are
computed over the same tree cel-go computes them over.  ``has(x.f)`` is a test-only
select; optional syntax (rewritten by ``extender.cel.optsyntax`` before parsing) becomes
``_?._`` / ``_[?_]`` calls and optional list elements / map entries.
"""

from __future__ import annotations

import copy
from typing import Any

import lark

from extender.cel import literals
from extender.cel.environment import CompileError
from extender.cel.values import INT64_MAX, INT64_MIN, UINT64_MAX, Uint

#: cel-go's accumulator name (``parser.HiddenAccumulatorName``) and the older one, which
#: an iteration variable may not take either
ACCU = "@result"
LEGACY_ACCU = "__result__"
UNUSED = "#unused"
SORT_BY_INPUT = "@__sortBy_input__"

#: receiver macros: name -> accepted argument counts
MACROS: dict[str, tuple[int, ...]] = {
    "all": (2, 3), "exists": (2, 3), "exists_one": (2, 3), "existsOne": (3,),
    "map": (2, 3), "filter": (2,), "transformList": (3, 4), "transformMap": (3, 4),
    "transformMapEntry": (3, 4), "sortBy": (2,), "optMap": (2,), "optFlatMap": (2,),
}

_REL = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_",
        "relation_ge": "_>=_", "relation_eq": "_==_", "relation_ne": "_!=_",
        "relation_in": "@in"}
_ARITH = {"addition_add": "_+_", "addition_sub": "_-_", "multiplication_mul": "_*_",
          "multiplication_div": "_/_", "multiplication_mod": "_%_"}


class Node:
    """kind: const | ident | select | has | call | list | map | comp.

    * const: ``value`` (native), ``name`` its type name;
    * ident: ``name`` (``value == "root"`` for a leading-dot identifier);
    * select / has: ``target`` . ``name`` (``has`` = cel-go's test-only select);
    * call: ``name``, ``target`` (receiver) or None, ``args``;
    * list: ``args`` elements, ``value`` the indices of optional elements (``[?e]``);
    * map: ``args`` = key, value, key, value..., ``value`` the optional entries (``{?k: v}``);
    * comp: ``args`` = [range, accumulator init, loop condition, loop step, result],
      ``vars`` = (iteration variable, second iteration variable or "", accumulator),
      ``name`` the macro that built it.

    The checker sets ``type`` and, on calls, ``overloads`` (the matching overload ids).
    """

    __slots__ = ("kind", "name", "args", "target", "value", "vars", "type", "where",
                 "overloads")

    def __init__(self, kind: str, name: str = "", args: list[Node] | None = None,
                 target: Node | None = None, value: Any = None,
                 vars: tuple[str, ...] = (), where: str = "") -> None:
        self.kind, self.name, self.args, self.target = kind, name, args or [], target
        self.value, self.vars, self.type, self.where = value, vars, None, where
        self.overloads: tuple[str, ...] = ()

    def children(self) -> list[Node]:
        return ([self.target] if self.target is not None else []) + self.args

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


def const(value: Any, name: str) -> Node:
    return Node("const", value=value, name=name)


def _literal(token: lark.Token) -> Node:
    t, text = token.type, str(token)
    if t == "INT_LIT":
        v = _int_text(text)
        if not INT64_MIN <= v <= INT64_MAX:
            raise CompileError(f"integer literal {text} is out of range")
        return const(v, "int")
    if t == "UINT_LIT":
        body = text[:-1]
        if body.startswith("-"):  # cel-go: negation of a uint literal, no such overload
            raise CompileError("found no matching overload for '-_' applied to '(uint)'")
        v = _int_text(body)
        if v < 0 or v > UINT64_MAX:
            raise CompileError(f"unsigned integer literal {text} is out of range")
        return const(Uint(v), "uint")
    if t == "FLOAT_LIT":
        return const(float(text), "double")
    if t in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
        try:
            value = literals.decode(text)
        except literals.LiteralError as exc:
            where = (f" at line {token.line}, column {token.column}"
                     if token.line is not None else "")
            raise CompileError(f"syntax error{where}: invalid literal {text[:40]}: {exc}"
                               ) from None
        return const(value, "bytes" if t == "BYTES_LIT" else "string")
    if t == "BOOL_LIT":
        return const(text == "true", "bool")
    if t == "NULL_LIT":
        return const(None, "null_type")
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
        return Node("call", "_[_]", [build(kids[0]), build(kids[1])], where=_where(tree))
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
        if name == "has" and d == "ident_arg" and len(args) == 1:
            if args[0].kind != "select":
                raise CompileError("invalid argument to has() macro")
            return Node("has", args[0].name, target=args[0].target, where=args[0].where)
        return Node("call", name, args, where=_where(child))
    if d == "list_lit":
        items = [build(a) for a in child.children[0].children] if child.children else []
        return _optional_entries(Node("list", args=items), items)
    if d == "map_lit":
        entries = [build(a) for a in child.children[0].children] if child.children else []
        return _optional_entries(Node("map", args=entries), entries[1::2], step=2)
    raise CompileError(f"unsupported syntax {d!r}")  # pragma: no cover


def _optional_entries(node: Node, wrapped: list[Node], step: int = 1) -> Node:
    """``[?e]`` / ``{k: ?v}`` (rewritten as ``__opt_elem__(e)``): unwrap, record the index."""
    marked = set()
    for i, item in enumerate(wrapped):
        if item.kind == "call" and item.name == "__opt_elem__" and item.target is None:
            if len(item.args) != 1:
                raise CompileError("an optional element takes one expression")
            node.args[i * step + (step - 1)] = item.args[0]
            marked.add(i)
    node.value = frozenset(marked)
    return node


def _method(target: Node, name: str, args: list[Node], tree: lark.Tree) -> Node:
    if name in MACROS and len(args) in MACROS[name]:
        return expand(name, target, args)
    if name == "__opt_field__":
        return Node("call", "_?._", [target, args[0]], where=_where(tree))
    if name == "__opt_index__":
        return Node("call", "_[?_]", [target, args[0]], where=_where(tree))
    return Node("call", name, args, target=target, where=_where(tree))


# --- macro expansions (cel-go parser/macro.go, ext/comprehensions.go, ext/lists.go,
# cel/library.go) ---------------------------------------------------------------------

def _ident(name: str) -> Node:
    return Node("ident", name)


def _call(name: str, *args: Node, target: Node | None = None) -> Node:
    return Node("call", name, list(args), target=target)


def _comp(macro: str, rng: Node, iter_var: str, iter_var2: str, accu: str, init: Node,
          cond: Node, step: Node, result: Node) -> Node:
    return Node("comp", macro, [rng, init, cond, step, result], vars=(iter_var, iter_var2, accu))


def _var(node: Node, message: str) -> str:
    if node.kind != "ident" or node.value == "root":
        raise CompileError(message)
    return node.name


def _one_var(node: Node, message: str) -> str:
    v = _var(node, message)
    if v in (ACCU, LEGACY_ACCU):
        raise CompileError("iteration variable overwrites accumulator variable")
    return v


def _two_vars(first: Node, second: Node) -> tuple[str, str]:
    a = _var(first, "argument must be a simple name")
    b = _var(second, "argument must be a simple name")
    if a == b:
        raise CompileError(f"duplicate variable name: {a}")
    if a in (ACCU, LEGACY_ACCU) or b in (ACCU, LEGACY_ACCU):
        raise CompileError("iteration variable overwrites accumulator variable")
    return a, b


def _quantifier(kind: str, rng: Node, v: str, v2: str, pred: Node, macro: str) -> Node:
    accu = _ident(ACCU)
    if kind == "all":
        init, cond = const(True, "bool"), _call("@not_strictly_false", accu)
        step, result = _call("_&&_", _ident(ACCU), pred), _ident(ACCU)
    elif kind == "exists":
        init = const(False, "bool")
        cond = _call("@not_strictly_false", _call("!_", accu))
        step, result = _call("_||_", _ident(ACCU), pred), _ident(ACCU)
    else:
        init, cond = const(0, "int"), const(True, "bool")
        step = _call("_?_:_", pred, _call("_+_", _ident(ACCU), const(1, "int")), _ident(ACCU))
        result = _call("_==_", _ident(ACCU), const(1, "int"))
    return _comp(macro, rng, v, v2, ACCU, init, cond, step, result)


def _list_step(element: Node, pred: Node | None) -> Node:
    step = _call("_+_", _ident(ACCU), Node("list", args=[element], value=frozenset()))
    return _call("_?_:_", pred, step, _ident(ACCU)) if pred is not None else step


def expand(name: str, target: Node, args: list[Node]) -> Node:
    """The comprehension cel-go's macro ``name`` builds for ``target.name(args)``."""
    n = len(args)
    if name in ("all", "exists", "exists_one") and n == 2:
        v = _one_var(args[0], "argument must be a simple name")
        kind = "exists_one" if name == "exists_one" else name
        return _quantifier(kind, target, v, "", args[1], name)
    if name in ("all", "exists", "exists_one", "existsOne"):
        v, v2 = _two_vars(args[0], args[1])
        kind = "exists_one" if name in ("exists_one", "existsOne") else name
        return _quantifier(kind, target, v, v2, args[2], name)
    if name == "map":
        v = _one_var(args[0], "argument is not an identifier")
        pred = args[1] if n == 3 else None
        return _comp(name, target, v, "", ACCU, _empty_list(), const(True, "bool"),
                     _list_step(args[-1], pred), _ident(ACCU))
    if name == "filter":
        v = _one_var(args[0], "argument is not an identifier")
        return _comp(name, target, v, "", ACCU, _empty_list(), const(True, "bool"),
                     _list_step(_ident(v), args[1]), _ident(ACCU))
    if name in ("transformList", "transformMap", "transformMapEntry"):
        v, v2 = _two_vars(args[0], args[1])
        pred = args[2] if n == 4 else None
        if name == "transformList":
            return _comp(name, target, v, v2, ACCU, _empty_list(), const(True, "bool"),
                         _list_step(args[-1], pred), _ident(ACCU))
        insert = (_call("cel.@mapInsert", _ident(ACCU), _ident(v), args[-1])
                  if name == "transformMap" else _call("cel.@mapInsert", _ident(ACCU), args[-1]))
        step = _call("_?_:_", pred, insert, _ident(ACCU)) if pred is not None else insert
        return _comp(name, target, v, v2, ACCU, Node("map", value=frozenset()),
                     const(True, "bool"), step, _ident(ACCU))
    if name == "sortBy":
        return _sort_by(target, args)
    return _opt_map(name, target, args)


def _empty_list() -> Node:
    return Node("list", value=frozenset())


def _sort_by(target: Node, args: list[Node]) -> Node:
    if target.kind not in ("list", "select", "has", "ident", "comp", "call"):
        raise CompileError("sortBy can only be applied to a list, identifier, comprehension, "
                           "call or select expression")
    keys = expand("map", _ident(SORT_BY_INPUT), args)
    result = _call("@sortByAssociatedKeys", keys, target=_ident(SORT_BY_INPUT))
    return _comp("sortBy", _empty_list(), UNUSED, "", SORT_BY_INPUT, target,
                 const(False, "bool"), _ident(SORT_BY_INPUT), result)


def _opt_map(name: str, target: Node, args: list[Node]) -> Node:
    v = _var(args[0], f"{name}() variable name must be a simple identifier")
    value = _call("value", target=copy.deepcopy(target))
    bind = _comp(name, _empty_list(), UNUSED, "", v, value, const(False, "bool"), _ident(v),
                 args[1])
    present = _call("hasValue", target=target)
    chosen = _call("optional.of", bind) if name == "optMap" else bind
    return _call("_?_:_", present, chosen, _call("optional.none"))


def is_bind(n: Node) -> bool:
    """A comprehension that only binds a variable (cel-go ``isBind``): empty range list,
    constant-false condition, a non-standard accumulator."""
    rng, _init, cond = n.args[0], n.args[1], n.args[2]
    return (rng.kind == "list" and not rng.args and cond.kind == "const"
            and cond.value is False and n.vars[2] != LEGACY_ACCU)
