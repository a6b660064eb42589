"""Static checks on the IR: cel-go's checker (checker/checker.go) and the AST validators
Kubernetes enables (homogeneous literals, constant regexes, durations, timestamps and
format strings).

The checker types every node, resolves every call against the declarations
(``extender.cel.decls``) with cel-go's unification (``extender.cel.types``) and records on
each call the ids of the overloads that match, in declaration order: the cost estimator
and the planner choose their rules by them.  Messages follow cel-go's wording
(``undeclared reference to 'x' (in container '')``, ``found no matching overload for 'f'
applied to 'string.(int)'``); only their presence is compatibility-relevant.
"""

from __future__ import annotations

from extender.cel.ast import Node
from extender.cel.decls import REGISTRY, Overload
from extender.cel.environment import CompileError
from extender.cel.lib import FUNCTIONS, printf
from extender.cel.lib.regex import pattern_error
from extender.cel.types import (
    DYN,
    Mapping,
    Type,
    assignable,
    assignable_list,
    equivalent,
    format_type,
    is_dyn_or_error,
    kind,
    most_general,
    name_of,
    rename_params,
    substitute,
)

#: KEP-5500 declares ``taint`` as an object type with three string fields (as DRA declares
#: ``device``).
TAINT_TYPE: Type = "Taint"
TAINT_FIELDS = frozenset({"key", "value", "effect"})
VARIABLES: dict[str, Type] = {"taint": TAINT_TYPE}
#: identifiers that denote types (the value is the runtime type name, see values.CelType)
TYPE_IDENTS: dict[str, str] = {
    "bool": "bool", "bytes": "bytes", "double": "double", "int": "int", "uint": "uint",
    "string": "string", "list": "list", "map": "map", "null_type": "null_type",
    "type": "type", "optional_type": "optional_type",
    "google.protobuf.Duration": "duration", "google.protobuf.Timestamp": "timestamp",
    "net.IP": "IP", "net.CIDR": "CIDR",
}
#: declared type names the program cannot resolve (cel-go: "reference to undefined type")
UNRESOLVABLE_TYPES = frozenset({"Taint"})


def check(root: Node) -> Type:
    """Type every node (free type variables end as dyn) and run the validators; raise
    CompileError on the first problem.  Returns the expression's type."""
    checker = _Checker()
    checker.visit(root)
    stack = [root]
    nodes = []
    while stack:
        n = stack.pop()
        n.type = substitute(checker.m, n.type, True)
        nodes.append(n)
        stack.extend(n.children())
    _validate(root)
    return root.type


class _Checker:
    def __init__(self) -> None:
        self.m = Mapping()
        self.fresh = 0
        self.scopes: list[dict[str, Type]] = []

    def new_var(self) -> Type:
        self.fresh += 1
        return ("param", f"_var{self.fresh}")

    def sub(self, t: Type) -> Type:
        return substitute(self.m, t, False)

    def visit(self, n: Node) -> Type:
        n.type = getattr(self, "_" + n.kind)(n)
        return n.type

    def is_assignable(self, t1: Type, t2: Type) -> bool:
        trial = assignable(self.m, t1, t2)
        if trial is None:
            return False
        self.m = trial
        return True

    # --- leaves ------------------------------------------------------------------------
    def _const(self, n: Node) -> Type:
        return n.name

    def _ident(self, n: Node) -> Type:
        if n.value != "root":
            for scope in reversed(self.scopes):
                if n.name in scope:
                    return scope[n.name]
        found = _global_ident(n.name)
        if found is None:
            raise CompileError(f"undeclared reference to '{n.name}' (in container '')"
                               f"{n.where}")
        return found

    # --- selection ---------------------------------------------------------------------
    def _select(self, n: Node) -> Type:
        qualified = _qualified_name(n)
        if qualified is not None and _global_ident(qualified) is not None:
            n.kind, n.name, n.target, n.value = "ident", qualified, None, None
            return self._ident(n)
        return self._select_field(n, n.target, n.name, optional=False)

    def _has(self, n: Node) -> Type:
        self._select_field(n, n.target, n.name, optional=False)
        return "bool"

    def _select_field(self, n: Node, operand: Node, field: str, optional: bool) -> Type:
        t = self.sub(self.visit(operand))
        is_opt = isinstance(t, tuple) and t[0] == "optional_type"
        target = t[1] if is_opt else t
        k = kind(target)
        if k == "map":
            result = target[2]
        elif k == "struct":
            if target != TAINT_TYPE or field not in TAINT_FIELDS:
                raise CompileError(f"undefined field '{field}'{n.where}")
            result = "string"
        elif k == "param":
            self.is_assignable(DYN, target)
            result = DYN
        else:
            if not is_dyn_or_error(target):
                raise CompileError(f"type '{format_type(target)}' does not support field "
                                   f"selection{n.where}")
            result = DYN
        return ("optional_type", result) if is_opt or optional else result

    # --- literals ----------------------------------------------------------------------
    def _list(self, n: Node) -> Type:
        elem: Type | None = None
        for i, a in enumerate(n.args):
            t = self.visit(a)
            if i in n.value:
                t = self._unwrap_optional(t, a)
            elem = self._join(elem, t)
        return ("list", elem if elem is not None else self.new_var())

    def _map(self, n: Node) -> Type:
        key: Type | None = None
        val: Type | None = None
        for i in range(0, len(n.args), 2):
            key = self._join(key, self.visit(n.args[i]))
            t = self.visit(n.args[i + 1])
            if i // 2 in n.value:
                t = self._unwrap_optional(t, n.args[i + 1])
            val = self._join(val, t)
        if key is None or val is None:
            return ("map", self.new_var(), self.new_var())
        return ("map", key, val)

    def _unwrap_optional(self, t: Type, at: Node) -> Type:
        t = self.sub(t)
        if isinstance(t, tuple) and t[0] == "optional_type":
            return t[1]
        if t != DYN:
            raise CompileError(f"expected type 'optional_type({format_type(t)})' but found "
                               f"'{format_type(t)}'{at.where}")
        return t

    def _join(self, previous: Type | None, current: Type) -> Type:
        """cel-go ``joinTypes`` with dyn aggregate element types (the homogeneous rule is
        a validator, applied afterwards)."""
        if previous is None:
            return current
        if self.is_assignable(previous, current):
            return most_general(previous, current)
        return DYN

    # --- calls -------------------------------------------------------------------------
    def _call(self, n: Node) -> Type:
        if n.name == "_?._":
            return self._opt_select(n)
        for a in n.args:
            self.visit(a)
        overloads = REGISTRY.get(n.name) if not n.name.startswith("__opt_") else None
        if n.target is not None:
            self.visit(n.target)
        if not overloads:
            raise CompileError(f"undeclared reference to '{n.name}' (in container '')"
                               f"{n.where}")
        return self._resolve(n, overloads)

    def _opt_select(self, n: Node) -> Type:
        operand, field = n.args
        if field.kind != "const" or field.name != "string":
            raise CompileError(f"unsupported optional field selection{n.where}")
        field.type = "string"
        n.overloads = ("select_optional_field",)
        return self._select_field(n, operand, field.value, optional=True)

    def _resolve(self, n: Node, overloads: list[Overload]) -> Type:
        member = n.target is not None
        args = [a.type for a in n.children()]
        result: Type | None = None
        ids: list[str] = []
        for ov in overloads:
            if ov.member != member or len(ov.params) != len(args):
                continue
            if n.name in ("_&&_", "_||_"):
                for a in args:
                    if not self.is_assignable(a, "bool"):
                        raise CompileError(f"expected type 'bool' but found "
                                           f"'{format_type(self.sub(a))}'{n.where}")
                n.overloads = (ov.id,)
                return "bool"
            fresh = {p: self.new_var() for p in ov.type_params}
            params = [rename_params(p, fresh) for p in ov.params]
            trial = assignable_list(self.m, args, params)
            if trial is None:
                continue
            self.m = trial
            ids.append(ov.id)
            ov_result = self.sub(rename_params(ov.result, fresh))
            if result is None:
                result = ov_result
            elif result != DYN and ov_result != result:
                result = DYN
        if result is None:
            shown = [format_type(substitute(self.m, a, True)) for a in args]
            sig = (f"{shown[0]}.({', '.join(shown[1:])})" if member
                   else f"({', '.join(shown)})")
            raise CompileError(f"found no matching overload for '{n.name}' applied to "
                               f"'{sig}'{n.where}")
        n.overloads = tuple(ids)
        return result

    # --- comprehensions ----------------------------------------------------------------
    def _comp(self, n: Node) -> Type:
        rng, init, cond, step, result = n.args
        iter_var, iter_var2, accu_var = n.vars
        self.visit(rng)
        accu_type = self.visit(init)
        range_type = self.sub(rng.type)
        self.scopes.append({accu_var: accu_type})
        k = kind(range_type)
        if k == "list":
            first, second = range_type[1], None
            if iter_var2:
                first, second = "int", range_type[1]
        elif k == "map":
            first, second = range_type[1], range_type[2]
        elif k in ("dyn", "error", "param"):
            self.is_assignable(DYN, range_type)
            first, second = DYN, DYN
        else:
            raise CompileError(f"expression of type '{format_type(range_type)}' cannot be "
                               f"the range of a comprehension (must be list, map, or "
                               f"dynamic)")
        loop = {iter_var: first}
        if iter_var2:
            loop[iter_var2] = second if second is not None else DYN
        self.scopes.append(loop)
        t = self.visit(cond)
        if not self.is_assignable("bool", t):
            raise CompileError(f"expected type 'bool' but found '{format_type(self.sub(t))}'")
        t = self.visit(step)
        if not self.is_assignable(accu_type, t):
            raise CompileError(f"expected type '{format_type(self.sub(accu_type))}' but found "
                               f"'{format_type(self.sub(t))}'")
        self.scopes.pop()
        self.visit(result)
        self.scopes.pop()
        return self.sub(result.type)


def _global_ident(name: str) -> Type | None:
    if name in VARIABLES:
        return VARIABLES[name]
    if name in TYPE_IDENTS or name in UNRESOLVABLE_TYPES:
        return "type"
    return None


def _qualified_name(n: Node) -> str | None:
    """``a.b.c`` as a dotted name when it is made of identifiers and selects only."""
    parts = []
    while n.kind == "select":
        parts.append(n.name)
        n = n.target
    if n.kind != "ident" or n.value == "root":
        return None
    return ".".join([n.name, *reversed(parts)])


# --- validators (run on the final types) ------------------------------------------------

def _validate(root: Node) -> None:
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        n, in_format = stack.pop()
        if n.kind == "ident" and n.name in UNRESOLVABLE_TYPES:
            raise CompileError(f"reference to undefined type: {n.name}")
        if n.kind in ("list", "map") and not in_format:
            _homogeneous(n)
        if n.kind == "call":
            _literal_arguments(n)
            in_format = in_format or n.name == "format"
        stack.extend((c, in_format) for c in n.children())


def _homogeneous(n: Node) -> None:
    """cel-go's ValidateHomogeneousAggregateLiterals: all elements (keys, values) of a
    literal of one type (outside ``format`` calls)."""
    def element(a: Node, optional: bool) -> Type:
        t = a.type
        return t[1] if optional and isinstance(t, tuple) and t[0] == "optional_type" else t

    if n.kind == "list":
        types = [element(a, i in n.value) for i, a in enumerate(n.args)]
        groups = [types]
    else:
        keys = [a.type for a in n.args[0::2]]
        vals = [element(a, i in n.value) for i, a in enumerate(n.args[1::2])]
        groups = [keys, vals]
    for types in groups:
        for t in types[1:]:
            if not equivalent(types[0], t):
                raise CompileError(f"expected type '{format_type(types[0])}' but found "
                                   f"'{format_type(t)}'")


def _literal_arguments(n: Node) -> None:
    """Literal arguments checked at compile time: ``duration``/``timestamp`` literals must
    convert, ``matches``' first argument (the pattern of ``s.matches(p)``) must compile,
    and a constant format string must fit its list literal of arguments."""
    args = n.args
    first = args[0] if args else None
    if first is not None and first.kind == "const":
        if n.name in ("duration", "timestamp"):
            try:
                FUNCTIONS[n.name](first.value)
            except Exception:  # noqa: BLE001 - any failure is an invalid literal
                raise CompileError(f"invalid {n.name} argument{n.where}") from None
        if n.name == "matches" and first.name == "string":
            err = pattern_error(first.value)
            if err:
                raise CompileError(f"invalid matches argument: {err}")
    if (n.name == "format" and n.target is not None and n.target.kind == "const"
            and n.target.name == "string" and len(args) == 1 and args[0].kind == "list"):
        kinds = [name_of(a.type) for a in args[0].args]
        err = printf.check_constant(n.target.value, kinds)
        if err:
            raise CompileError(f"{err}{n.where}")
