"""The one cel-python Environment, parsing, and the tree normalisation every program gets.

cel-python's lark grammar wraps every sub-expression in ~10 single-child levels
(``expr > conditionalor > ... > member > primary``).  We collapse those levels once at
compile time: the evaluator then visits a fraction of the nodes (faster) and the tree is
~10x shallower (no RecursionError at 50 nested parentheses).  The same pass rewrites
namespaced calls such as ``sets.contains(a, b)`` — which cel-python parses as a method call
on an undeclared identifier ``sets`` — into global calls named ``"sets.contains"``.

Recursion limit: ``celpy.Environment()`` calls ``sys.setrecursionlimit(2500)`` on every
construction.  We construct exactly one Environment, at import, then set the limit to
``RECURSION_LIMIT`` (or keep a higher one): cel-go accepts 250 nesting levels
(``MAX_NESTING_DEPTH``, checked iteratively at compile time) and evaluating that many
takes ~12 Python frames a level.  ``RecursionError`` is still caught by the runtime
wrapper as a last resort.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import celpy
import lark
import lark.exceptions
from celpy.celparser import CELParser

from extender.cel import depth, optsyntax
from extender.cel.limits import MAX_EXPRESSION_BYTES, MAX_NESTING_DEPTH

logging.getLogger("celpy").setLevel(logging.WARNING)

_saved_limit = sys.getrecursionlimit()
ENVIRONMENT = celpy.Environment()
#: Python frames needed to build, check and evaluate the deepest tree cel-go's limits
#: let through (~12 per level in the evaluator; a path can hold MAX_NESTING_DEPTH
#: operators *and* MAX_NESTING_DEPTH nested lists, calls or parentheses).  Python 3.11 keeps Python-to-Python calls off the C
#: stack, so a high limit is safe; it is only ever raised, never lowered.
RECURSION_LIMIT = 40 * MAX_NESTING_DEPTH + 2000
sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))

#: cel-python's grammar, edited where it differs from cel-go's ANTLR grammar (``CEL.g4``):
#: list, map and message literals take one trailing comma (``[1, 2,]``, also ``[,]``
#: and ``{,}``), call arguments do not; a float literal needs a digit after its point
#: (``5.`` is a syntax error, ``.5`` is not).  Each edit must apply: a changed
#: cel-python grammar fails loudly at import, not silently at parse.
_GRAMMAR_EDITS = (
    ('list_lit       : "[" [exprlist] "]"',
     'list_lit       : "[" [listelems] "]" | "[" "," "]"\n'
     'listelems      : expr ("," expr)* [","] -> exprlist'),
    ('map_lit        : "{" [mapinits] "}"', 'map_lit        : "{" [mapinits] "}" | "{" "," "}"'),
    ('mapinits       : expr ":" expr ("," expr ":" expr)*',
     'mapinits       : expr ":" expr ("," expr ":" expr)* [","]'),
    ('fieldinits     : IDENT ":" expr ("," IDENT ":" expr)*',
     'fieldinits     : IDENT ":" expr ("," IDENT ":" expr)* [","]'),
    ('FLOAT_LIT      : /-?/ DIGIT+ "." DIGIT* EXPONENT? | /-?/ DIGIT* "." DIGIT+ EXPONENT? '
     '| /-?/ DIGIT+ EXPONENT',
     'FLOAT_LIT      : /-?/ DIGIT* "." DIGIT+ EXPONENT? | /-?/ DIGIT+ EXPONENT'),
)


def _grammar() -> str:
    text = (Path(celpy.__file__).parent / "cel.lark").read_text()
    for old, new in _GRAMMAR_EDITS:
        if text.count(old) != 1:
            raise RuntimeError(f"cel-python's grammar changed: cannot edit {old!r}")
        text = text.replace(old, new)
    return text


#: One LALR parser for all threads: lark's LALR parser keeps no state between calls, so
#: an admission review compiling a 10 KiB expression never holds up a verb's compile.
_LARK = lark.Lark(
    _grammar(), parser="lalr", start="expr", g_regex_flags=re.M,
    lexer_callbacks={"IDENT": CELParser.ambiguous_literals}, propagate_positions=True,
    maybe_placeholders=False, priority="invert",
    tree_class=ENVIRONMENT.runner_class.tree_node_class,
)


class _SyntaxError(Exception):
    def __init__(self, message: str, line: int | None = None,
                 column: int | None = None) -> None:
        super().__init__(message)
        self.line, self.column = line, column


def _parse_text(text: str) -> lark.Tree:
    try:
        return _LARK.parse(text)
    except (lark.exceptions.UnexpectedToken, lark.exceptions.UnexpectedCharacters) as ex:
        raise _SyntaxError(ex.get_context(text), ex.line, ex.column) from None
    except lark.exceptions.LarkError as ex:
        raise _SyntaxError(str(ex.args[0] if ex.args else ex).splitlines()[0]) from None


#: Namespaces whose functions are called as ``ns.fn(...)`` in Kubernetes CEL.
NAMESPACES = frozenset({"sets", "strings", "lists", "ip", "format", "optional", "math",
                        "base64", "cel"})

#: Namespaces that are also plausible variable names: only their declared functions are
#: rewritten (cel-go resolves a qualified function name first, then a member call), so that
#: ``[ip('::1')].all(ip, ip.isLoopback())`` still calls ``isLoopback`` on the variable.
VARIABLE_NAMESPACES = {"ip": frozenset({"isCanonical"})}

#: Grammar levels that carry no meaning when they have a single child.
_WRAPPERS = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition",
                       "multiplication", "unary", "member"})


class CompileError(Exception):
    """A compile-time (admission-style) error; ``str()`` is the user-facing message."""


NESTED_MESSAGE = f"expression is nested too deeply (more than {MAX_NESTING_DEPTH} levels)"
TOO_LONG_MESSAGE = f"expression exceeds the maximum length of {MAX_EXPRESSION_BYTES} bytes"


def too_long(text: str) -> bool:
    """More than ``MAX_EXPRESSION_BYTES`` in UTF-8?  Encodes only when the character
    count cannot decide (a code point is 1 to 4 bytes): cheap on the memo's hot path."""
    n = len(text)
    if n * 4 <= MAX_EXPRESSION_BYTES:
        return False
    return n > MAX_EXPRESSION_BYTES or len(
        text.encode("utf-8", "surrogatepass")) > MAX_EXPRESSION_BYTES


def check_length(text: str) -> None:
    if too_long(text):
        raise CompileError(TOO_LONG_MESSAGE)


def parse(text: str) -> lark.Tree:
    """Parse (lark LALR, never recursive) and return the normalised tree."""
    check_length(text)
    if not text.strip():
        raise CompileError("expression is empty")
    code = _STRING_LITERALS.sub("''", text)
    if optsyntax.RESERVED in code:
        raise CompileError(f"identifiers starting with {optsyntax.RESERVED!r} are reserved")
    if _OPTIONAL_SYNTAX.search(code):
        spans = [m.span() for m in _STRING_LITERALS.finditer(text)]
        text = optsyntax.rewrite(text, spans)
    try:
        raw = _parse_text(text)
    except _SyntaxError as exc:
        raise CompileError(_syntax_message(exc)) from None
    try:
        depth.check(raw)
    except depth.TooDeep:
        raise CompileError(NESTED_MESSAGE) from None
    return normalise(raw)


#: Optional field selection / index / list element / map entry (``x.?f``, ``m[?k]``,
#: ``[?e]``, ``{?k: v}``): cel-go syntax that cel-python's lark grammar cannot parse, so
#: it is rewritten into function calls first (``extender.cel.optsyntax``).
_OPTIONAL_SYNTAX = re.compile(r"\.\s*\?|[\[{,]\s*\?")
_STRING_LITERALS = re.compile(
    r"""[rRbB]{0,2}('''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")"""
)


def _syntax_message(exc: _SyntaxError) -> str:
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    first = str(exc.args[0]) if exc.args else str(exc)
    first = first.splitlines()[0] if first else "syntax error"
    where = f" at line {line}, column {column}" if line is not None else ""
    return f"syntax error{where}: {first}"


def _strip(node: object) -> object:
    """Follow single-child wrapper levels (and parentheses) down to the meaningful node."""
    while isinstance(node, lark.Tree):
        kids = node.children
        if node.data in _WRAPPERS and len(kids) == 1 and isinstance(kids[0], lark.Tree):
            node = kids[0]
        elif node.data == "primary" and isinstance(kids[0], lark.Tree) and (
            kids[0].data in ("paren_expr", "literal")
        ):
            node = kids[0].children[0] if kids[0].data == "paren_expr" else kids[0]
        else:
            return node
    return node


def _namespace_call(node: lark.Tree) -> lark.Tree | None:
    """``ns.fn(args)`` on a bare namespace identifier -> ``primary(ident_arg("ns.fn", args))``."""
    target = _strip(node.children[0])
    if not (isinstance(target, lark.Tree) and target.data == "primary"):
        return None
    ident = target.children[0]
    if not (isinstance(ident, lark.Tree) and ident.data == "ident"):
        return None
    ns = str(ident.children[0])
    if ns not in NAMESPACES:
        return None
    name_tok = node.children[1]
    if ns in VARIABLE_NAMESPACES and str(name_tok) not in VARIABLE_NAMESPACES[ns]:
        return None  # a method call on a variable that happens to be called ``ip``
    token = lark.Token("IDENT", f"{ns}.{name_tok}", line=name_tok.line, column=name_tok.column)
    call = lark.Tree("ident_arg", [token, *node.children[2:]], meta=node.meta)
    return lark.Tree("primary", [call], meta=node.meta)


def _unwrap(node: object) -> object:
    """Follow single-child wrapper levels and literal primaries, but not parentheses
    (cel-go's parser treats a parenthesised expression as a new nesting level)."""
    while isinstance(node, lark.Tree):
        kids = node.children
        if node.data in _WRAPPERS and len(kids) == 1 and isinstance(kids[0], lark.Tree):
            node = kids[0]
        elif node.data == "primary" and isinstance(kids[0], lark.Tree) and (
            kids[0].data == "literal"
        ):
            node = kids[0]
        else:
            return node
    return node


_SIGNED = ("INT_LIT", "UINT_LIT", "FLOAT_LIT")


def _unary_run(node: lark.Tree) -> object:
    """cel-go's parser drops an even run of ``!`` or unary ``-`` (``!!x`` is ``x``,
    ``--1u`` is ``1u``) and keeps one operator for an odd run.  cel-python's grammar
    puts a ``-`` into numeric literals, which counts as one more ``-`` of the run (a
    lone ``-9223372036854775808`` never gets here: it stays a literal)."""
    op = node.children[0].data
    count, operand = 0, node
    while (isinstance(operand, lark.Tree) and operand.data == "unary"
           and len(operand.children) == 2 and operand.children[0].data == op):
        count += 1
        operand = _unwrap(operand.children[1])
    literal = None
    if (op == "unary_neg" and isinstance(operand, lark.Tree) and operand.data == "literal"
            and operand.children[0].type in _SIGNED):
        literal = operand.children[0]
        if literal.startswith("-"):
            count += 1
            literal = literal.update(value=literal[1:])
            operand = lark.Tree("literal", [literal], meta=operand.meta)
    if (isinstance(operand, lark.Tree) and operand.data == "unary"
            and len(operand.children) == 2):
        # cel-go's grammar has one operator per run (``(ops+='!')+ member``): ``-!x`` is
        # a syntax error, and after ``!`` a ``-`` can only be a numeric literal's sign.
        if op == "unary_neg":
            raise CompileError("syntax error: no viable alternative at input '-!'")
        raise CompileError("syntax error: invalid constant literal expression")
    if count % 2 == 0:
        return operand
    # No folding back into a signed literal: after a run of '-' cel-go's grammar has
    # consumed every '-' as an operator, so ``---9223372036854775808`` overflows.
    return lark.Tree("unary", [lark.Tree(op, []), operand], meta=node.meta)


def _balanced(node: lark.Tree) -> lark.Tree:
    """cel-go's parser builds a long ``&&`` / ``||`` chain as a balanced tree (98
    ``||`` terms nest 7 deep, not 98); the result and the error absorption are the
    same, the evaluation order stays left to right."""
    op = node.data
    terms: list = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, lark.Tree) and n.data == op and len(n.children) == 2:
            stack.extend((_unwrap(n.children[1]), _unwrap(n.children[0])))
        else:
            terms.append(n)
    if len(terms) <= 2:
        return node

    def build(lo: int, hi: int) -> object:
        if hi - lo == 1:
            return terms[lo]
        mid = (lo + hi + 1) // 2
        return lark.Tree(op, [build(lo, mid), build(mid, hi)], meta=node.meta)

    return build(0, len(terms))  # type: ignore[return-value]


def normalise(root: lark.Tree) -> lark.Tree:
    """Collapse wrappers, apply cel-go's parser rewrites (even ``!``/``-`` runs dropped,
    balanced ``&&``/``||`` chains), rewrite namespaced calls; iteratively (no recursion).

    Builds new Tree objects; the result is shared read-only by all threads afterwards.
    (``MAX_NESTING_DEPTH`` is enforced before, on the raw tree: ``extender.cel.depth``.)
    """
    holder: list = [None]
    stack: list[tuple[object, list, int]] = [(root, holder, 0)]
    while stack:
        node, slots, index = stack.pop()
        node = _unwrap(node)
        while isinstance(node, lark.Tree) and node.data in ("unary", "conditionalor",
                                                             "conditionaland", "primary"):
            if node.data == "primary" and node.children[0].data == "paren_expr":
                node = _unwrap(node.children[0].children[0])
            elif node.data == "unary" and len(node.children) == 2:
                rewritten = _unary_run(node)
                if rewritten is node or (isinstance(rewritten, lark.Tree)
                                         and rewritten.data == "unary"):
                    node = rewritten
                    break
                node = rewritten
            elif node.data in ("conditionalor", "conditionaland") and len(node.children) == 2:
                node = _balanced(node)
                break
            else:
                break
        if not isinstance(node, lark.Tree):
            slots[index] = node
            continue
        if node.data == "member_dot_arg":
            node = _namespace_call(node) or node
        children: list = [None] * len(node.children)
        slots[index] = lark.Tree(node.data, children, meta=node.meta)
        for i, child in enumerate(node.children):
            stack.append((child, children, i))
    return holder[0]
