"""A seeded generator of typed CEL expressions over ``taint`` for the differential test.

Every expression is well-formed text; most are well-typed bool expressions, some are
deliberately not (cross-type operands, mixed literals, bad regexes, optional-free
overflow and division by zero), so that both engines' errors are compared too.

Constructs: strings (ext strings v2), ints/uints/doubles with overflow, division by zero
and NaN, cross-type comparisons (via ``dyn``), bytes, lists, maps, ``in``, the macros
(``all exists exists_one map filter``), ternaries, ``&&``/``||`` error absorption,
timestamps/durations and their accessors, ``type()``, ``dyn()``, ``has()``, optional
syntax (``.?``, ``[?``, ``{?``).

A map's iteration order is unspecified in CEL (cel-go iterates a Go map), so map keys
only feed order-independent macros (``all``, ``exists``, ``exists_one``), never a list
that is then indexed.
"""

from __future__ import annotations

from exprgen import (
    ACCESSORS,
    ARITHMETIC,
    BYTES,
    COMPARABLE,
    DOUBLES,
    DURATION_ACCESSORS,
    ORDERING,
    UINTS,
    ExprGen,
)

STRINGS = ["''", "'a'", "'abc'", "'k'", "'NoSchedule'", "'é'", "'1'", "'1.5'", "' 1'",
           "'-9223372036854775808'", "'日本'", "'a,b,,c'", "'ABC dé'", "'/'"]
INTS = ["0", "1", "-1", "2", "7", "-7", "42", "9223372036854775807",
        "-9223372036854775808", "0x10", "-0x1"]
DURATIONS = ["duration('1h')", "duration('-30m')", "duration('0s')", "duration('1.5s')",
             "duration('2562047h')", "duration('90m')"]
TIMESTAMPS = ["timestamp('2024-01-01T00:00:00Z')", "timestamp('9999-12-31T23:59:59Z')",
              "timestamp('0001-01-01T00:00:00Z')", "timestamp('1970-01-01T00:00:00Z')",
              "timestamp('2023-06-15T12:30:45.123Z')"]
ZONES = ["'UTC'", "'+05:30'", "'-08:00'", "'America/New_York'", "'Asia/Tokyo'"]
TYPE_NAMES = {"int": "int", "uint": "uint", "double": "double", "string": "string",
              "bytes": "bytes", "bool": "bool", "list_int": "list", "list_string": "list",
              "map": "map"}
PATTERNS = ["'^a'", "'b'", "'[0-9]+'", "'^$'", "'.*'", "'é'", "'^[a-z]+/'"]


class Gen(ExprGen):
    REUSE, LEAF, VARS = 0.3, 0.25, "xyzw"
    DURATIONS, TIMESTAMPS = DURATIONS, TIMESTAMPS
    LEAVES = {"bool": ["true", "false", "has(taint.key)", "taint.key == 'k'"],
              "string": ["taint.key", "taint.value", "taint.effect", *STRINGS],
              "int": INTS, "uint": UINTS, "double": DOUBLES, "bytes": BYTES,
              "duration": DURATIONS, "timestamp": TIMESTAMPS}

    def expression(self) -> str:
        return self.g_bool(4, {})

    def var(self, scope: dict) -> str:
        return self.pick([n for n in self.VARS if n not in scope] or ["v"])

    def built_leaf(self, t: str, s: dict) -> str:
        r = self.r
        if t == "list_int":
            return "[" + ", ".join(self.pick(INTS[:8]) for _ in range(r.randint(0, 3))) + "]"
        if t == "list_string":
            return "[" + ", ".join(self.pick(STRINGS[:8] + ["taint.key"])
                                   for _ in range(r.randint(0, 3))) + "]"
        if t == "map":
            keys = r.sample(["'a'", "'b'", "'k'", "taint.key"], r.randint(0, 2))
            return "{" + ", ".join(f"{k}: {self.pick(INTS[:6])}" for k in keys) + "}"
        raise AssertionError(t)

    # --- bool -----------------------------------------------------------------------
    def g_bool(self, d: int, s: dict) -> str:
        r = self.r
        k = r.randrange(16)
        g = self.g
        if k == 0:
            return self.infix("bool", ["&&", "||"], d, s)
        if k == 1:
            return f"!{g('bool', d, s)}" if r.random() < 0.8 else f"!!{g('bool', d, s)}"
        if k == 2:
            return self.ternary("bool", d, s)
        if k == 3:  # same-type comparison
            t = self.pick(COMPARABLE)
            op = self.pick(ORDERING)
            return f"{g(t, d, s)} {op} {g(t, d, s)}"
        if k == 4:  # cross-type numeric comparison / equality through dyn
            a, b = r.sample(["int", "uint", "double"], 2)
            op = self.pick(ORDERING)
            return f"dyn({g(a, d, s)}) {op} {g(b, d, s)}"
        if k == 5:  # membership
            t = self.pick(["list_int", "list_string", "map"])
            item = g("int" if t == "list_int" else "string", d, s)
            return f"{item} in {g(t, d, s)}"
        if k == 6:  # macros over lists and maps (a map's keys: order does not matter here)
            t = self.pick(["list_int", "list_string", "map"])
            v = self.var(s)
            inner = {**s, v: "int" if t == "list_int" else "string"}
            m = self.pick(["all", "exists", "exists_one"])
            return f"{g(t, d, s)}.{m}({v}, {g('bool', d, inner)})"
        if k == 7:  # string predicates
            m = self.pick(["startsWith", "endsWith", "contains", "matches"])
            arg = self.pick(PATTERNS) if m == "matches" else g("string", d, s)
            return f"{g('string', d, s)}.{m}({arg})"
        if k == 8:  # type()
            t = self.pick(list(TYPE_NAMES))
            other = self.pick(sorted(set(TYPE_NAMES.values())))
            return f"type({g(t, d, s)}) {self.pick(['==', '!='])} {other}"
        if k == 9:
            if r.random() < 0.5:  # optional syntax (rewritten before parsing here)
                return self.pick([
                    f"taint.?{self.pick(['key', 'value', 'effect'])}.orValue('x') == "
                    f"{g('string', d, s)}",
                    f"{g('map', d, s)}[?{g('string', d, s)}].hasValue()",
                    f"{g('list_int', d, s)}[?{g('int', d, s)}].orValue(0) > {g('int', d, s)}",
                    f"[?optional.of({g('int', d, s)}), ?optional.none()] == "
                    f"{g('list_int', d, s)}",
                    f"{{?{g('string', d, s)}: optional.of({g('int', d, s)})}}.size() == 1",
                    f"optional.of({g('map', d, s)}).?a.orValue(1) == {g('int', d, s)}",
                ])
            return self.pick(["has(taint.key)", "has(taint.value)", "has(taint.effect)",
                              "has({'a': 1}.a)", "has({'a': 1}.b)"])
        if k == 10:  # error absorption
            err = self.pick(["1 / 0 > 0", "int(taint.value) > 0", "[1][5] == 1",
                             "{'a': 1}['z'] == 1", "uint(-1) == 0u"])
            return (f"{err} {self.pick(['||', '&&'])} {g('bool', d, s)}"
                    if r.random() < 0.5 else
                    f"{g('bool', d, s)} {self.pick(['||', '&&'])} {err}")
        if k == 11:  # size comparisons
            return self.size_compare(["string", "bytes", "list_int", "list_string", "map"], d, s)
        if k == 12:  # filter/map results
            v = self.var(s)
            inner = {**s, v: "int"}
            m = self.pick(["filter", "map"])
            body = g("bool", d, inner) if m == "filter" else g("int", d, inner)
            return f"{g('list_int', d, s)}.{m}({v}, {body}) == {g('list_int', d, s)}"
        if k == 13:  # list / map equality, mixed literals sometimes
            if r.random() < 0.15:
                return f"[{g('int', d, s)}, {g('string', d, s)}].size() == 2"
            t = self.pick(["list_int", "list_string", "map"])
            return self.infix(t, ["==", "!="], d, s)
        if k == 14:  # bool conversions and string(bool)
            return self.pick([f"bool({g('string', d, s)})",
                              f"string({g('bool', d, s)}) == 'true'"])
        return self.infix("int", ["==", "<", ">"], d, s)

    # --- numbers --------------------------------------------------------------------
    def g_int(self, d: int, s: dict) -> str:
        k = self.r.randrange(9)
        g = self.g
        if k <= 2:
            return self.arith("int", ARITHMETIC, d, s)
        if k == 3:
            return self.negate("int", d, s)
        if k == 4:
            return self.convert("int", ["uint", "double", "string", "timestamp"], d, s)
        if k == 5:
            return self.convert("size", ["string", "bytes", "list_int"], d, s)
        if k == 6:
            return self.index_of(self.pick(["indexOf", "lastIndexOf"]), d, s)
        if k == 7:
            acc = self.pick(ACCESSORS)
            zone = self.pick(ZONES) if self.r.random() < 0.5 else ""
            return f"{g('timestamp', d, s)}.{acc}({zone})"
        acc = self.pick(DURATION_ACCESSORS)
        return f"{g('duration', d, s)}.{acc}()"

    def g_uint(self, d: int, s: dict) -> str:
        k = self.r.randrange(4)
        if k <= 1:
            return self.arith("uint", ARITHMETIC, d, s)
        if k == 2:
            return self.convert("uint", ["int", "double", "string"], d, s)
        return self.pick(["-1u", "--1u", "-0u"])  # no unary minus on uint, even runs dropped

    def g_double(self, d: int, s: dict) -> str:
        k = self.r.randrange(4)
        if k <= 1:
            return self.arith("double", ["+", "-", "*", "/"], d, s)
        if k == 2:
            return self.convert("double", ["int", "uint", "string"], d, s)
        return self.negate("double", d, s)

    # --- strings, bytes, lists, maps -----------------------------------------------------
    def g_string(self, d: int, s: dict) -> str:
        k = self.r.randrange(10)
        g = self.g
        if k == 0:
            return self.concat("string", d, s)
        if k == 1:
            return self.substring(d, s)
        if k == 2:
            return self.case_or_trim(d, s)
        if k == 3:
            return f"{g('string', d, s)}.replace({g('string', d, s)}, {g('string', d, s)})"
        if k == 4:
            return self.char_at(d, s)
        if k == 5:
            return self.convert("string", ["int", "uint", "double", "bool", "bytes", "duration",
                                           "timestamp"], d, s)
        if k == 6:
            return f"{g('list_string', d, s)}.join({self.pick(['', *STRINGS[:4]])})"
        if k == 7:
            return self.ternary("string", d, s)
        if k == 8:
            return self.index("list_string", "int", d, s)
        return self.map_lookup(d, s)

    def g_bytes(self, d: int, s: dict) -> str:
        if self.r.random() < 0.5:
            return f"bytes({self.g('string', d, s)})"
        return self.concat("bytes", d, s)

    def g_list_int(self, d: int, s: dict) -> str:
        k = self.r.randrange(4)
        if k == 0:
            return self.concat("list_int", d, s)
        if k == 1:
            return self.sizes_of_strings(d, s)
        if k == 2:
            return self.list_literal("int", d, s)
        return f"dyn({self.g('list_int', d, s)})"

    def g_list_string(self, d: int, s: dict) -> str:
        k = self.r.randrange(4)
        if k == 0:
            return self.split(d, s)
        if k == 1:
            return self.filter_strings(d, s)
        if k == 2:
            return self.list_literal("string", d, s)
        return f"{self.g('string', d, s)}.split(',')"

    def g_map(self, d: int, s: dict) -> str:
        return self.map_literal(2, d, s)
