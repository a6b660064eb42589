"""Static checks on the IR: names, overloads (arity, receiver style, argument types),
homogeneous literals, constant regex / duration / timestamp literals, and the result type.

This is the subset of cel-go's checker that decides what Kubernetes rejects at admission;
messages follow cel-go's wording (``undeclared reference to 'x' (in container '')``,
``found no matching overload for 'f' applied to 'string.(int)'``).
"""

from __future__ import annotations

from celpy import celtypes as T

from extender.cel.ast import Node
from extender.cel.decls import DYN, Type, format_type, substitute, unify
from extender.cel.environment import CompileError
from extender.cel.lib import REGISTRY, UNSUPPORTED, printf
from extender.cel.lib.regex import PATTERN_ARGS, pattern_error
from extender.cel.lib.stdlib import parse_go_duration

#: KEP-5500 declares ``taint`` as an object type with three string fields (as DRA declares
#: ``device``): ``taint.foo``, ``has(taint.foo)``, ``taint['key']`` are compile errors.
TAINT_TYPE: Type = "Taint"
TAINT_FIELDS = frozenset({"key", "value", "effect"})
VARIABLES: dict[str, Type] = {"taint": TAINT_TYPE}
TYPE_IDENTS = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map",
                         "null_type", "type"})
_MAP_KEYS = frozenset({"int", "uint", "bool", "string", DYN})


def check(root: Node) -> Type:
    """Annotate every node with ``.type``; raise CompileError on the first problem."""
    checker = _Checker()
    t = checker.final(checker.visit(root, {}))
    stack = [root]
    while stack:  # free type variables left unbound are dyn (cel-go)
        n = stack.pop()
        n.type = checker.final(n.type)
        stack.extend(n.args)
        if n.target is not None:
            stack.append(n.target)
    if t not in ("bool", DYN):
        raise CompileError(f"expression must evaluate to bool, got {format_type(t)}")
    return t


class _Checker:
    """cel-go's checker in miniature: the empty literals ``[]`` / ``{}`` get free type
    variables, which the first matching overload binds for the whole expression (so
    ``[].filter(x, size(x) > 0) == ['a']`` fails as upstream: ``x`` became bytes)."""

    def __init__(self) -> None:
        self.subst: dict = {}
        self.fresh = 0

    def visit(self, n: Node, scope: dict[str, Type]) -> Type:
        n.type = self.resolve(getattr(self, "_" + n.kind)(n, scope))
        return n.type

    def new_var(self) -> Type:
        self.fresh += 1
        return ("free", self.fresh)

    def resolve(self, t: Type) -> Type:
        while isinstance(t, tuple) and t[0] == "free" and t in self.subst:
            t = self.subst[t]
        if isinstance(t, tuple) and t[0] not in ("free", "param"):
            return (t[0], *(self.resolve(a) for a in t[1:]))
        return t

    def final(self, t: Type) -> Type:
        """The fully resolved type, unbound type variables as dyn (one pass over the
        type: resolving at every level of a nested type was cubic in the nesting)."""
        return _unbound_as_dyn(self.resolve(t))

    def unify(self, actual: Type, param: Type) -> bool:
        trial = dict(self.subst)
        if unify(actual, param, trial):
            self.subst = {k: v for k, v in trial.items() if isinstance(k, tuple)}
            return True
        return False

    def _const(self, n: Node, scope: dict) -> Type:
        return n.name

    def _ident(self, n: Node, scope: dict) -> Type:
        if n.value != "root" and n.name in scope:
            return scope[n.name]
        if n.name in VARIABLES:
            return VARIABLES[n.name]
        if n.name in TYPE_IDENTS:
            return "type"
        raise CompileError(f"undeclared reference to '{n.name}' (in container ''){n.where}")

    def _select(self, n: Node, scope: dict) -> Type:
        t = self.final(self.visit(n.target, scope))
        return self._field(t, n.name, n.where)

    def _has(self, n: Node, scope: dict) -> Type:
        self._field(self.final(self.visit(n.target, scope)), n.name, n.where)
        return "bool"

    @staticmethod
    def _field(t: Type, name: str, where: str) -> Type:
        if t == DYN:
            return DYN
        if t == TAINT_TYPE:
            if name in TAINT_FIELDS:
                return "string"
            raise CompileError(f"undefined field '{name}'{where}")
        if isinstance(t, tuple) and t[0] == "map" and t[1] in ("string", DYN):
            return t[2]
        raise CompileError(f"type '{format_type(t)}' does not support field selection"
                           f" ('.{name}'){where}")

    def _list(self, n: Node, scope: dict) -> Type:
        if not n.args:
            return ("list", self.new_var())
        return ("list", self._homogeneous([self.visit(a, scope) for a in n.args]))

    def _map(self, n: Node, scope: dict) -> Type:
        if not n.args:
            return ("map", self.new_var(), self.new_var())
        types = [self.visit(a, scope) for a in n.args]
        keys, values = types[0::2], types[1::2]
        key = self._homogeneous(keys)
        key = self.resolve(key)
        if key not in _MAP_KEYS and not (isinstance(key, tuple) and key[0] == "free"):
            raise CompileError(f"unsupported map key type: {format_type(key)}")
        return ("map", key, self._homogeneous(values))

    def _homogeneous(self, types: list[Type]) -> Type:
        """K8s HomogeneousAggregateLiterals: all elements of one type (dyn is wildcard)."""
        first = next((t for t in types if t != DYN), DYN)
        for t in types:
            if not self.unify(t, first):
                raise CompileError(
                    f"expected type '{format_type(first)}' but found '{format_type(t)}'"
                )
        return first

    def _call(self, n: Node, scope: dict) -> Type:
        if n.name in ("__opt_field__", "__opt_index__") and n.target is not None:
            return self._optional_access(n, scope)
        overloads = REGISTRY.get(n.name)
        if not overloads:
            if n.name in UNSUPPORTED:
                raise CompileError(f"function {n.name} is not supported by this extender"
                                   f" ({UNSUPPORTED[n.name]})")
            raise CompileError(f"undeclared reference to '{n.name}' (in container '')"
                               f"{n.where}")
        target = [self.visit(n.target, scope)] if n.target is not None else []
        args = target + [self.visit(a, scope) for a in n.args]
        results = []
        member = n.target is not None
        for ov in overloads:
            if ov.member != member or len(ov.params) != len(args):
                continue
            b: dict = dict(self.subst)
            if all(unify(a, p, b) for a, p in zip(args, ov.params, strict=True)):
                results.append(self.resolve(substitute(ov.result, b)))
                self.subst = {k: v for k, v in b.items() if isinstance(k, tuple)}
        if not results:
            raise CompileError(f"found no matching overload for '{_display(n.name)}' applied"
                               f" to '{_signature([self.resolve(a) for a in args], member)}'"
                               f"{n.where}")
        self._constant_args(n)
        return results[0] if all(r == results[0] for r in results) else DYN

    def _constant_args(self, n: Node) -> None:
        """Constant regex patterns, durations and timestamps must be valid (K8s 1.29
        literal validators)."""
        args = ([n.target] if n.target is not None else []) + n.args
        idx = PATTERN_ARGS.get(n.name)
        if idx is not None and n.target is None:
            idx = 1  # global matches(s, re)
        if idx is not None and idx < len(args) and args[idx].kind == "const" and (
            args[idx].name == "string"
        ):
            err = pattern_error(args[idx].value)
            if err:
                raise CompileError(err)
        if n.name == "format" and n.target is not None and n.target.kind == "const" and (
            n.target.name == "string" and len(n.args) == 1 and n.args[0].kind == "list"
        ):
            kinds = [_kind_of(self.final(a.type)) for a in n.args[0].args]
            err = printf.check_constant(n.target.value, kinds)
            if err:
                raise CompileError(f"{err}{n.where}")
        if n.name in ("duration", "timestamp") and args and args[0].kind == "const" and (
            args[0].name == "string"
        ):
            try:
                if n.name == "duration":
                    parse_go_duration(args[0].value)
                else:
                    T.TimestampType(args[0].value)
            except Exception:
                raise CompileError(f"invalid {n.name} literal {args[0].value!r}") from None

    def _optional_access(self, n: Node, scope: dict) -> Type:
        """``x.?f`` / ``x[?k]``: the field's / element's type, wrapped in an optional (an
        optional receiver is looked into)."""
        t = self.final(self.visit(n.target, scope))
        key = self.final(self.visit(n.args[0], scope))
        if isinstance(t, tuple) and t[0] == "optional_type":
            t = t[1]
        if n.name == "__opt_field__":
            inner = self._field(t, str(n.args[0].value), n.where)
        elif t == DYN:
            inner = DYN
        elif isinstance(t, tuple) and t[0] == "list" and key in ("int", "uint", DYN):
            inner = t[1]
        elif isinstance(t, tuple) and t[0] == "map" and unify(key, t[1], {}):
            inner = t[2]
        else:
            raise CompileError(f"found no matching overload for '_[?_]' applied to "
                               f"'({format_type(t)}, {format_type(key)})'{n.where}")
        return ("optional_type", inner)

    def _comp(self, n: Node, scope: dict) -> Type:
        rng = self.resolve(self.visit(n.target, scope))
        if isinstance(rng, tuple) and rng[0] == "free":
            rng = DYN
        if n.name in ("optMap", "optFlatMap"):
            return self._opt_map(n, rng, scope)
        if isinstance(rng, tuple) and rng[0] == "list":
            first, second = ("int", rng[1]) if len(n.vars) == 2 else (rng[1], None)
        elif isinstance(rng, tuple) and rng[0] == "map":
            first, second = rng[1], rng[2]
        elif rng == DYN:
            first, second = DYN, DYN
        else:
            raise CompileError(f"expression of type '{format_type(rng)}' cannot be the range"
                               " of a comprehension (must be list, map, or dynamic)")
        inner = dict(scope)
        inner[n.vars[0]] = first
        if len(n.vars) == 2:
            inner[n.vars[1]] = second
        types = [self.visit(a, inner) for a in n.args]
        name = n.name
        quantifier = name in ("all", "exists", "exists_one", "existsOne", "filter")
        # map/transform*: with two expressions the first one is a filter predicate
        predicates = types if quantifier else (types[:1] if len(types) == 2 else [])
        for t in predicates:
            if t not in ("bool", DYN):
                raise CompileError(f"{name}() predicate must be bool, got {format_type(t)}")
        if name in ("all", "exists", "exists_one", "existsOne"):
            return "bool"
        if name in ("map", "transformList"):
            return ("list", types[-1])
        if name == "filter":
            return ("list", first)
        if name == "sortBy":
            return rng if rng != DYN else ("list", DYN)
        if name == "transformMap":
            return ("map", first, types[-1])
        last = types[-1]  # transformMapEntry: the expression must build a map
        if not (last == DYN or (isinstance(last, tuple) and last[0] == "map")):
            raise CompileError(f"transformMapEntry() expression must be a map, got "
                               f"{format_type(last)}")
        return last

    def _opt_map(self, n: Node, rng: Type, scope: dict) -> Type:
        if isinstance(rng, tuple) and rng[0] == "optional_type":
            inner = rng[1]
        elif rng == DYN:
            inner = DYN
        else:
            raise CompileError(f"found no matching overload for '{n.name}' applied to "
                               f"'{format_type(rng)}'{n.where}")
        body = self.visit(n.args[0], {**scope, n.vars[0]: inner})
        if n.name == "optMap":
            return ("optional_type", body)
        if not (body == DYN or (isinstance(body, tuple) and body[0] == "optional_type")):
            raise CompileError(f"optFlatMap() expression must be an optional, got "
                               f"{format_type(body)}")
        return body


def _kind_of(t: Type) -> str:
    return t[0] if isinstance(t, tuple) else t


def _unbound_as_dyn(t: Type) -> Type:
    if isinstance(t, tuple):
        if t[0] == "free":
            return DYN
        return (t[0], *(_unbound_as_dyn(a) for a in t[1:]))
    return t


def _display(name: str) -> str:
    return {"@in": "@in", "_[_]": "_[_]"}.get(name, name)


def _signature(args: list[Type], member: bool) -> str:
    if member:
        return f"{format_type(args[0])}.({', '.join(format_type(a) for a in args[1:])})"
    return f"({', '.join(format_type(a) for a in args)})"
