"""Evaluation on cel-python with a cost budget, the request deadline and cel-go semantics.

``TolerationRunner`` is a ``celpy.InterpretedRunner`` (thread-safe: a fresh evaluator and
activation per call, the shared tree is only read; spec cel.md §2.8) whose evaluator
subclass

* charges cel-go-like units at semantic points — identifiers and selections 1, calls 1 or
  their size-scaled cost (``extender.cel.cost``), list/map literals 10/30, comprehension
  iterations ``ITERATION_COST`` — and aborts past the limit (``CostLimitExceeded``);
* checks the request's wall-clock deadline (``extender.cel.deadline``) every 32 tree
  visits and after every library call (``DeadlineExceeded``).  The deadline is never a
  verdict: the cost budget alone decides "cost" outcomes, so a verdict depends on
  (expression, taint) only, never on load.  Both are ``BaseException`` subclasses so
  that cel-python's ``except Exception`` paths cannot swallow them;
* evaluates ``&&``/``||``/``?:`` with cel-go's short-circuit and error-absorption rules;
* implements the comprehension macros itself (cel-python lacks the two-variable forms,
  3-argument ``map``, ``transform*``, ``sortBy``, and has a non-standard ``min`` macro).
"""

from __future__ import annotations

from typing import Any

import celpy
import lark
from celpy import celtypes as T
from celpy.evaluation import Activation, CELEvalError, Evaluator

from extender.cel import deadline
from extender.cel.ast import MACROS, TWO_VAR
from extender.cel.cost import call_cost
from extender.cel.environment import ENVIRONMENT
from extender.cel.lib import FUNCTIONS
from extender.cel.lib.lists import sort_values
from extender.cel.lib.optional import NONE, OptElem, Optional
from extender.cel.limits import ITERATION_COST, LIST_CREATE_COST, MAP_CREATE_COST
from extender.cel.values import _MISSING, TYPE_NAMES, CelType, EvalError, kind, map_get

_OPS = {"relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_",
        "relation_ge": "_>=_", "relation_eq": "_==_", "relation_ne": "_!=_",
        "relation_in": "@in", "addition_add": "_+_", "addition_sub": "_-_",
        "multiplication_mul": "_*_", "multiplication_div": "_/_",
        "multiplication_mod": "_%_", "unary_not": "!_", "unary_neg": "-_"}


class CostLimitExceeded(BaseException):  # noqa: N818 - mirrors cel-go's wording
    """The runtime cost budget was exhausted."""


class Budget:
    """The deterministic cost budget of one evaluation, plus the request's deadline
    (None outside a request), read once from the context."""

    __slots__ = ("used", "limit", "deadline", "ticks")

    def __init__(self, limit: int) -> None:
        self.used, self.limit, self.ticks = 0, limit, 0
        self.deadline = deadline.current()

    def charge(self, units: int) -> None:
        self.used += units
        if self.used > self.limit:
            raise CostLimitExceeded(self.used)


def _err(message: str) -> CELEvalError:
    return CELEvalError(message, EvalError, ())


def _is_bool(v: Any) -> bool:
    return isinstance(v, T.BoolType)


class BudgetEvaluator(Evaluator):
    """cel-python's Evaluator with budget, deadline and cel-go operator/macro semantics."""

    def __init__(self, ast: lark.Tree, activation: Activation, budget: Budget) -> None:
        super().__init__(ast=ast, activation=activation)
        self.budget = budget

    def sub_evaluator(self, ast: lark.Tree) -> BudgetEvaluator:
        return BudgetEvaluator(ast, self.activation, self.budget)

    def _visit_tree(self, tree: lark.Tree) -> Any:
        b = self.budget
        b.ticks += 1
        if not b.ticks & 31 and b.deadline is not None:
            deadline.check(b.deadline)
        return super()._visit_tree(tree)

    # --- calls ----------------------------------------------------------------------
    def call(self, name: str, args: list[Any]) -> Any:
        for a in args:
            if isinstance(a, CELEvalError):
                return a
        self.budget.charge(call_cost(name, args))
        try:
            fn = self.activation.resolve_function(name)
        except KeyError:
            return _err(f"undeclared reference to '{name}'")
        try:
            result = fn(*args)
        except Exception as exc:  # celpy built-ins (timestamps, type) may raise
            return _err(f"{name}: {exc}")
        if self.budget.deadline is not None:  # a long library call cannot be interrupted
            deadline.check(self.budget.deadline)
        return result

    def _operator(self, tree: lark.Tree) -> Any:
        op, right = tree.children
        return self.call(_OPS[op.data], [self.visit(op.children[0]), self.visit(right)])

    relation = addition = multiplication = _operator

    def unary(self, tree: lark.Tree) -> Any:
        op, operand = tree.children
        return self.call(_OPS[op.data], [self.visit(operand)])

    def member_index(self, tree: lark.Tree) -> Any:
        return self.call("_[_]", [self.visit(tree.children[0]), self.visit(tree.children[1])])

    def member_dot(self, tree: lark.Tree) -> Any:
        target = self.visit(tree.children[0])
        self.budget.charge(1)
        if isinstance(target, CELEvalError):
            return target
        field = str(tree.children[1])
        if kind(target) != "map":
            return _err(f"type '{kind(target)}' does not support field selection")
        value = map_get(target, T.StringType(field))
        return _err(f"no such key: '{field}'") if value is _MISSING else value

    def member_dot_arg(self, tree: lark.Tree) -> Any:
        target_tree, name_tok = tree.children[0], str(tree.children[1])
        arg_trees = list(tree.children[2].children) if len(tree.children) > 2 else []
        if name_tok in MACROS and len(arg_trees) in MACROS[name_tok]:
            return self._macro(name_tok, target_tree, arg_trees)
        target = self.visit(target_tree)
        if name_tok in ("or", "orValue") and len(arg_trees) == 1 and isinstance(
            target, Optional
        ) and target.has_value:
            # cel-go short-circuits both: the argument is not evaluated
            self.budget.charge(call_cost(name_tok, [target, None]))
            return target if name_tok == "or" else target.value
        return self.call(name_tok, [target, *(self.visit(a) for a in arg_trees)])

    def primary(self, tree: lark.Tree) -> Any:
        child = tree.children[0]
        d = child.data
        if d in ("ident_arg", "dot_ident_arg"):
            name = str(child.children[0])
            arg_trees = list(child.children[1].children) if len(child.children) > 1 else []
            if name == "has":
                self.budget.charge(1)
                return self.macro_has_eval(child.children[1])
            return self.call(name, [self.visit(a) for a in arg_trees])
        if d in ("ident", "dot_ident"):
            self.budget.charge(1)
            value = super().primary(tree)
            name = str(child.children[0])
            if name in TYPE_NAMES and (callable(value) or isinstance(value, type)):
                return CelType(name)  # the type, not celpy's conversion function
            return value
        if d == "list_lit":
            self.budget.charge(LIST_CREATE_COST)
            items = super().primary(tree)
            if isinstance(items, list) and any(isinstance(v, OptElem) for v in items):
                return T.ListType([v.opt.value if isinstance(v, OptElem) else v
                                   for v in items
                                   if not isinstance(v, OptElem) or v.opt.has_value])
            return items
        if d == "map_lit":
            self.budget.charge(MAP_CREATE_COST)
        return super().primary(tree)

    def mapinits(self, tree: lark.Tree) -> Any:
        """A map literal with an erroneous key or value is an error (as list literals
        are; cel-python kept the error as a value)."""
        values = self.visit_children(tree)
        for v in values:
            if isinstance(v, CELEvalError):
                return v
        out = T.MapType()
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if isinstance(value, OptElem):  # {?k: v}: the entry only if v has a value
                if not value.opt.has_value:
                    continue
                value = value.opt.value
            if map_get(out, key) is not _MISSING:
                return _err(f"Failed with repeated key: {key!r}")
            out[key] = value
        return out

    # --- logic (cel-go: short-circuit, errors absorbed when the other side decides) ----
    def conditionalor(self, tree: lark.Tree) -> Any:
        return self._logic(tree, decisive=True)

    def conditionaland(self, tree: lark.Tree) -> Any:
        return self._logic(tree, decisive=False)

    def _logic(self, tree: lark.Tree, decisive: bool) -> Any:
        op = "_||_" if decisive else "_&&_"
        left = self.visit(tree.children[0])
        if _is_bool(left) and bool(left) == decisive:
            return left
        right = self.visit(tree.children[1])
        if _is_bool(right) and bool(right) == decisive:
            return right
        for v in (left, right):
            if isinstance(v, CELEvalError):
                return v
        if _is_bool(left) and _is_bool(right):
            return T.BoolType(not decisive)
        return _err(f"no such overload: {op}({kind(left)}, {kind(right)})")

    def expr(self, tree: lark.Tree) -> Any:
        cond = self.visit(tree.children[0])
        if isinstance(cond, CELEvalError):
            return cond
        if not _is_bool(cond):
            return _err(f"no such overload: _?_:_({kind(cond)}, ...)")
        return self.visit(tree.children[1] if cond else tree.children[2])

    # --- comprehensions ------------------------------------------------------------------
    def _macro(self, name: str, target_tree: lark.Tree, arg_trees: list) -> Any:
        rng = self.visit(target_tree)
        if isinstance(rng, CELEvalError):
            return rng
        two = (len(arg_trees) == 3 and name in TWO_VAR) or len(arg_trees) == 4
        nvars = 2 if two else 1
        names = [str(next(t.find_data("ident")).children[0]) for t in arg_trees[:nvars]]
        exprs = arg_trees[nvars:]
        rk = kind(rng)
        if name in ("optMap", "optFlatMap"):
            return _opt_map(self, name, names, exprs, rng)
        if rk == "list":
            pairs = [(T.IntType(i), v) for i, v in enumerate(rng)] if two else [
                (v, None) for v in rng]
        elif rk == "map":
            pairs = list(rng.items()) if two else [(k, None) for k in rng]
        else:
            return _err(f"{name}() cannot iterate over {rk}")
        return _MACRO_IMPLS[name](self, names, exprs, pairs, rng)

    def _body(self, names: list[str], pair: tuple, tree: lark.Tree) -> Any:
        self.budget.charge(ITERATION_COST)
        bindings = {names[0]: pair[0]}
        if len(names) == 2:
            bindings[names[1]] = pair[1]
        nested = BudgetEvaluator(tree, self.activation.nested_activation(vars=bindings),
                                 self.budget)
        return nested.visit(tree)


def _quantifier(decisive: bool):  # all: decisive False; exists: decisive True
    def impl(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
        error = None
        for pair in pairs:
            r = ev._body(names, pair, exprs[0])
            if _is_bool(r):
                if bool(r) == decisive:
                    return r
            elif error is None:
                error = r if isinstance(r, CELEvalError) else _err(
                    f"predicate returned {kind(r)}, not bool")
        return error if error is not None else T.BoolType(not decisive)

    return impl


def _test(ev: BudgetEvaluator, names, pair, expr, role: str) -> Any:
    """A macro's boolean body on one element: the bool, or the error (a non-bool
    result is one)."""
    r = ev._body(names, pair, expr)
    if isinstance(r, CELEvalError) or _is_bool(r):
        return r
    return _err(f"{role} returned {kind(r)}, not bool")


def _exists_one(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
    count = 0
    for pair in pairs:
        r = _test(ev, names, pair, exprs[0], "predicate")
        if isinstance(r, CELEvalError):
            return r
        count += bool(r)
    return T.BoolType(count == 1)


def _selected(ev: BudgetEvaluator, names, exprs, pairs):
    """Yield (pair, value of the last expression) for elements passing the optional filter."""
    for pair in pairs:
        if len(exprs) == 2:
            keep = _test(ev, names, pair, exprs[0], "filter")
            if isinstance(keep, CELEvalError):
                yield pair, keep
                return
            if not keep:
                continue
        yield pair, ev._body(names, pair, exprs[-1])


def _map(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
    out = []
    for _pair, value in _selected(ev, names, exprs, pairs):
        if isinstance(value, CELEvalError):
            return value
        out.append(value)
    return T.ListType(out)


def _filter(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
    out = []
    for pair in pairs:
        keep = _test(ev, names, pair, exprs[0], "filter")
        if isinstance(keep, CELEvalError):
            return keep
        if keep:
            out.append(pair[0])
    return T.ListType(out)


def _transform_map(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
    out = T.MapType()
    for pair, value in _selected(ev, names, exprs, pairs):
        if isinstance(value, CELEvalError):
            return value
        out[pair[0]] = value
    return out


def _transform_map_entry(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
    out = T.MapType()
    for _pair, entry in _selected(ev, names, exprs, pairs):
        if isinstance(entry, CELEvalError):
            return entry
        if kind(entry) != "map":
            return _err(f"transformMapEntry() expression returned {kind(entry)}, not map")
        for k, v in entry.items():
            if k in out:
                return _err(f"insert failed: key {k!s} already exists")
            out[k] = v
    return out


def _sort_by(ev: BudgetEvaluator, names, exprs, pairs, rng) -> Any:
    keys = []
    for pair in pairs:
        key = ev._body(names, pair, exprs[0])
        if isinstance(key, CELEvalError):
            return key
        keys.append(key)
    ev.budget.charge(call_cost("sort", [rng]))
    try:
        return T.ListType(sort_values([p[0] for p in pairs], keys))
    except EvalError as exc:
        return _err(f"sortBy: {exc}")


def _opt_map(ev: BudgetEvaluator, name: str, names, exprs, rng) -> Any:
    """cel-go ``opt.optMap(x, e)`` = ``opt.hasValue() ? optional.of(e[x := opt.value()])
    : optional.none()``; ``optFlatMap`` does not wrap (``e`` must be an optional)."""
    if not isinstance(rng, Optional):
        return _err(f"no such overload: {name}({kind(rng)})")
    if not rng.has_value:
        return NONE
    result = ev._body(names, (rng.value, None), exprs[0])
    if isinstance(result, CELEvalError):
        return result
    if name == "optMap":
        return Optional(result)
    if not isinstance(result, Optional):
        return _err(f"optFlatMap() expression returned {kind(result)}, not optional_type")
    return result


_MACRO_IMPLS = {
    "all": _quantifier(False), "exists": _quantifier(True), "exists_one": _exists_one,
    "existsOne": _exists_one, "map": _map, "filter": _filter, "transformList": _map,
    "transformMap": _transform_map, "transformMapEntry": _transform_map_entry,
    "sortBy": _sort_by,
}


class TolerationRunner(celpy.InterpretedRunner):
    """A cel-python InterpretedRunner bound to our libraries and evaluator."""

    def __init__(self, ast: lark.Tree) -> None:
        super().__init__(ENVIRONMENT, ast, FUNCTIONS)

    def run(self, context: dict, budget: Budget) -> Any:
        evaluator = BudgetEvaluator(self.ast, self.new_activation(), budget)
        evaluator.set_activation(context)
        return evaluator.visit(self.ast)

    def evaluate(self, context: dict) -> Any:  # celpy API: raise on error
        value = self.run(context, Budget(2**63))
        if isinstance(value, CELEvalError):
            raise value
        return value
