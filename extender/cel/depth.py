"""cel-go's two parser recursion limits, computed on cel-python's (raw) lark tree.

cel-go refuses an expression when either of two counters passes ``MAX_NESTING_DEPTH``
(250), and nothing else limits nesting:

* the ANTLR parse listener (``recursionListener``) counts, *per grammar rule*, how many
  invocations of that rule are open: every ``expr``, ``conditionalOr``, ``relation``,
  ``calc``, ``unary``, ``member``, ``primary``, ``exprList``, ``listInit``, ``optExpr``...
  on the path from the root.  The left-recursive rules (``relation``, ``calc``,
  ``member``) parse a chain of operators in one invocation, and the right operand of an
  operator is a new one: ``a + b + c`` is one ``calc`` deep, ``a + b * c`` two for ``c``,
  and ``1 < [...]`` one ``relation`` deeper for the list than ``[...] < 1``;
* the visitor that builds the AST counts the operator nodes around a node: ternaries,
  relations, arithmetic, field selections, method calls and indexes (not lists, maps,
  global calls or parentheses), so a left-assoc chain of 251 ``+`` is too deep.

cel-python's grammar mirrors CEL.g4 rule by rule, with two differences handled here: it
writes the left-recursive chains as nested binary nodes, and ``+``/``-`` and ``*``/``/``/
``%`` are two rules where CEL.g4 has one (``calc``).  The optional syntax arrives
rewritten (``extender.cel.optsyntax``) and is counted as cel-go's grammar counts it.
"""

from __future__ import annotations

import lark

from extender.cel.limits import MAX_NESTING_DEPTH

# rule indexes of the per-rule counters
(_START, _EXPR, _OR, _AND, _REL, _CALC, _UNARY, _MEMBER, _PRIMARY, _EXPRLIST, _LISTINIT,
 _OPTEXPR, _MAPINIT, _FIELDINIT, _LITERAL) = range(15)
_ZERO = (0,) * 15


class TooDeep(Exception):
    """Past one of cel-go's parser recursion limits."""


def _bump(counts: tuple, *rules: int) -> tuple:
    out = list(counts)
    for r in rules:
        out[r] += 1
        if out[r] > MAX_NESTING_DEPTH:
            raise TooDeep
    return tuple(out)


def _left_chain(node: lark.Tree, data: str) -> list:
    """A left-recursive binary chain ``((a op b) op c)`` of ``data`` nodes -> [a, b, c]."""
    operands = []
    while node.data == data and len(node.children) == 2:
        operands.append(node.children[1])
        node = node.children[0].children[0] if data not in ("conditionalor",
                                                          "conditionaland") else node.children[0]
    if node.data == data:  # the chain's first operand, under a single-child level
        node = node.children[0]
    operands.append(node)
    operands.reverse()
    return operands


def _opt_elem(node: object) -> object | None:
    """The operand of ``__opt_elem__(x)`` (the rewritten ``?x``) at an expr position."""
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data in (
            "expr", "conditionalor", "conditionaland", "relation", "addition",
            "multiplication", "unary", "member", "primary"):
        node = node.children[0]
    if (isinstance(node, lark.Tree) and node.data == "ident_arg"
            and str(node.children[0]) == "__opt_elem__" and len(node.children) == 2
            and len(node.children[1].children) == 1):
        return node.children[1].children[0]
    return None


def check(root: lark.Tree) -> None:
    """Raise ``TooDeep`` when cel-go's parser would refuse the tree for its depth."""
    # work items: (lark node, rule counters, visitor depth, how to read the node)
    stack: list[tuple[object, tuple, int, str]] = [(root, _bump(_ZERO, _START), 0, "expr")]
    while stack:
        node, counts, visits, how = stack.pop()
        if not isinstance(node, lark.Tree):
            continue
        handler = _HANDLERS[how]
        for item in handler(node, counts, visits):
            if item[2] > MAX_NESTING_DEPTH:
                raise TooDeep
            stack.append(item)


def _expr(node: lark.Tree, counts: tuple, visits: int) -> list:
    counts = _bump(counts, _EXPR)
    kids = node.children
    if len(kids) == 3:  # the ternary: the visitor counts it
        visits += 1
        return [(kids[0], counts, visits, "or"), (kids[1], counts, visits, "or"),
                (kids[2], counts, visits, "expr")]
    return [(kids[0], counts, visits, "or")]


def _or(node: lark.Tree, counts: tuple, visits: int) -> list:
    counts = _bump(counts, _OR)
    return [(t, counts, visits, "and") for t in _left_chain(node, "conditionalor")]


def _and(node: lark.Tree, counts: tuple, visits: int) -> list:
    counts = _bump(counts, _AND)
    return [(t, counts, visits, "relation") for t in _left_chain(node, "conditionaland")]


def _relation(node: lark.Tree, counts: tuple, visits: int) -> list:
    counts = _bump(counts, _REL)
    operands = _left_chain(node, "relation")
    ops = len(operands) - 1
    out = [(operands[0], counts, visits + ops, "calc")]
    right = _bump(counts, _REL) if ops else counts
    out += [(o, right, visits + ops - j + 1, "calc") for j, o in enumerate(operands[1:], 1)]
    return out


def _calc(node: lark.Tree, counts: tuple, visits: int) -> list:
    """One ``calc`` invocation: its left spine stays in it, each right operand opens
    another; the visitor counts every operator above a node."""
    counts = _bump(counts, _CALC)
    out = []
    spine = 0
    while node.data in ("addition", "multiplication"):
        kids = node.children
        if len(kids) == 2:
            spine += 1
            out.append((kids[1], counts, visits + spine, "calc_right"))
            node = kids[0].children[0]
        else:
            node = kids[0]
    out.append((node, counts, visits + spine, "unary"))
    return out


def _calc_right(node: lark.Tree, counts: tuple, visits: int) -> list:
    """The right operand of ``*``: cel-python's rule gives a ``unary`` there."""
    if node.data == "unary":
        return [(node, _bump(counts, _CALC), visits, "unary")]
    return _calc(node, counts, visits)


def _unary(node: lark.Tree, counts: tuple, visits: int) -> list:
    counts = _bump(counts, _UNARY)
    while len(node.children) == 2:  # a run of ! or - is one unary rule
        node = node.children[1]
    return [(node.children[0], counts, visits, "member")]


def _member(node: lark.Tree, counts: tuple, visits: int) -> list:
    """One ``member`` invocation: a postfix chain (selections, calls, indexes)."""
    counts = _bump(counts, _MEMBER)
    chain = []
    while node.data == "member":
        node = node.children[0]
        if node.data == "primary":
            break
        chain.append(node)
        node = node.children[0]
    ops = len(chain)
    out = [(node, counts, visits + ops, "primary")]
    for j, op in enumerate(chain):  # outermost first
        depth = visits + j + 1
        if op.data == "member_index":
            out.append((op.children[1], counts, depth, "expr"))
        elif op.data == "member_dot_arg" and len(op.children) > 2:
            name = str(op.children[1])
            if name == "__opt_index__":
                out += [(a, counts, depth, "expr") for a in op.children[2].children]
            elif name != "__opt_field__":
                listed = _bump(counts, _EXPRLIST)
                out += [(a, listed, depth, "expr") for a in op.children[2].children]
        elif op.data == "member_object" and len(op.children) > 1:
            fields = _bump(counts, _FIELDINIT)
            out += [(a, fields, depth, "expr") for a in op.children[1].children[1::2]]
    return out


def _primary(node: lark.Tree, counts: tuple, visits: int) -> list:
    counts = _bump(counts, _PRIMARY)
    child = node.children[0]
    d = child.data
    if d == "literal":
        _bump(counts, _LITERAL)
        return []
    if d == "paren_expr":
        return [(child.children[0], counts, visits, "expr")]
    if d in ("ident_arg", "dot_ident_arg") and len(child.children) > 1:
        listed = _bump(counts, _EXPRLIST)
        return [(a, listed, visits, "expr") for a in child.children[1].children]
    if d == "list_lit" and child.children:
        listed = _bump(counts, _LISTINIT, _OPTEXPR)
        return [(_opt_elem(e) or e, listed, visits, "expr")
                for e in child.children[0].children]
    if d == "map_lit" and child.children:
        entries = child.children[0].children
        keys = _bump(counts, _MAPINIT, _OPTEXPR)
        values = _bump(counts, _MAPINIT)
        return [(e, keys, visits, "expr") for e in entries[0::2]] + [
            (_opt_elem(e) or e, values, visits, "expr") for e in entries[1::2]]
    return []


_HANDLERS = {"expr": _expr, "or": _or, "and": _and, "relation": _relation, "calc": _calc,
             "calc_right": _calc_right, "unary": _unary, "member": _member,
             "primary": _primary}
