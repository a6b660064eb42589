"""What the two seeded CEL expression generators share: ``celgen`` (plain CEL, against
cel-cpp in ``test_cel_differential.py``) and ``kubegen`` (Kubernetes' CEL environment,
against cel-go in ``test_cel_oracle.py``).

``ExprGen`` holds the recursion (a variable in scope, a leaf, or a shape of the wanted
type), the leaves that are a pick from a list, and the shapes both generators write the
same way.  Each generator keeps its own vocabulary (the lists), its own shapes and how
often it picks each one: a shape here draws from the random source exactly as the code it
replaced did, so a seed gives the same expressions as before (a reported seed repeats).

Values are typed by name (``int``, ``list_string``, ...); ``g_<type>`` builds one of a
type, ``leaf`` a literal or an attribute of it.
"""

from __future__ import annotations

import random

UINTS = ["0u", "1u", "2u", "7u", "18446744073709551615u", "0x10u"]
DOUBLES = ["0.0", "1.5", "-2.5", "1e308", "-0.0", "2.0", "1e-300", "3.0"]
BYTES = ["b''", "b'abc'", "b'\\xff'", "b'a'"]
ACCESSORS = ["getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek",
             "getDayOfYear", "getHours", "getMinutes", "getSeconds", "getMilliseconds"]
DURATION_ACCESSORS = ["getHours", "getMinutes", "getSeconds", "getMilliseconds"]
COMPARABLE = ["int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp"]
ORDERING = ["==", "!=", "<", "<=", ">", ">="]
ARITHMETIC = ["+", "-", "*", "/", "%"]


class ExprGen:
    """The recursion and the shared shapes; a subclass sets the class attributes."""

    REUSE: float  # how often a variable in scope of the wanted type is taken
    LEAF: float  # how often a leaf stops the recursion before the depth runs out
    VARS: str  # loop variable names
    LEAVES: dict[str, list[str]]  # the leaves that are one pick from a list
    DURATIONS: list[str]
    TIMESTAMPS: list[str]

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def pick(self, options: list) -> str:
        return self.r.choice(options)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def var(self, scope: dict) -> str:
        free = [n for n in self.VARS if n not in scope]
        return self.pick(free) if free else "v" + str(len(scope))

    def g(self, t: str, d: int, s: dict) -> str:
        """One value of type ``t`` at depth ``d`` with the loop variables ``s`` in scope."""
        names = [n for n, vt in s.items() if vt == t]
        if names and self.chance(self.REUSE):
            return self.pick(names)
        if d <= 0 or self.chance(self.LEAF):
            return self.leaf(t, s)
        return getattr(self, "g_" + t)(d - 1, s)

    def leaf(self, t: str, s: dict) -> str:
        if t in self.LEAVES:
            return self.pick(self.LEAVES[t])
        return self.built_leaf(t, s)

    def built_leaf(self, t: str, s: dict) -> str:
        """A leaf written from parts (a list or map literal, a call on a literal)."""
        raise AssertionError(t)

    # --- shapes of any type ---------------------------------------------------------------
    def infix(self, t: str, ops: list[str], d: int, s: dict) -> str:
        return f"{self.g(t, d, s)} {self.pick(ops)} {self.g(t, d, s)}"

    def arith(self, t: str, ops: list[str], d: int, s: dict, right: str = "") -> str:
        return f"({self.g(t, d, s)} {self.pick(ops)} {self.g(right or t, d, s)})"

    def concat(self, t: str, d: int, s: dict) -> str:
        return f"{self.g(t, d, s)} + {self.g(t, d, s)}"

    def negate(self, t: str, d: int, s: dict) -> str:
        return f"-{self.g(t, d, s)}"

    def ternary(self, t: str, d: int, s: dict) -> str:
        return f"({self.g('bool', d, s)} ? {self.g(t, d, s)} : {self.g(t, d, s)})"

    def convert(self, fn: str, types: list[str], d: int, s: dict) -> str:
        """``fn`` (a conversion, ``size``) applied to a value of one of ``types``."""
        return f"{fn}({self.g(self.pick(types), d, s)})"

    def index(self, container: str, key: str, d: int, s: dict) -> str:
        return f"{self.g(container, d, s)}[{self.g(key, d, s)}]"

    def size_compare(self, types: list[str], d: int, s: dict) -> str:
        t = self.pick(types)
        return f"size({self.g(t, d, s)}) {self.pick(['==', '>', '<'])} {self.g('int', d, s)}"

    def list_literal(self, element: str, d: int, s: dict) -> str:
        return "[" + ", ".join(self.g(element, d, s) for _ in range(self.r.randint(0, 3))) + "]"

    def map_literal(self, most: int, d: int, s: dict) -> str:
        """A string-to-int map literal of up to ``most`` entries."""
        n = self.r.randint(0, most)
        return ("{" + ", ".join(f"{self.g('string', d, s)}: {self.g('int', d, s)}"
                                for _ in range(n)) + "}")

    # --- strings ------------------------------------------------------------------------
    def substring(self, d: int, s: dict) -> str:
        args = ", ".join(self.g("int", d, s) for _ in range(self.r.randint(1, 2)))
        return f"{self.g('string', d, s)}.substring({args})"

    def case_or_trim(self, d: int, s: dict) -> str:
        return f"{self.g('string', d, s)}.{self.pick(['lowerAscii', 'upperAscii', 'trim'])}()"

    def char_at(self, d: int, s: dict) -> str:
        return f"{self.g('string', d, s)}.charAt({self.g('int', d, s)})"

    def map_lookup(self, d: int, s: dict) -> str:
        return f"{{'a': {self.g('string', d, s)}}}[{self.g('string', d, s)}]"

    def index_of(self, method: str, d: int, s: dict) -> str:
        extra = f", {self.g('int', d, s)}" if self.chance(0.4) else ""
        return f"{self.g('string', d, s)}.{method}({self.g('string', d, s)}{extra})"

    # --- lists ----------------------------------------------------------------------------
    def split(self, d: int, s: dict) -> str:
        extra = f", {self.g('int', d, s)}" if self.chance(0.3) else ""
        return f"{self.g('string', d, s)}.split({self.g('string', d, s)}{extra})"

    def filter_strings(self, d: int, s: dict) -> str:
        v = self.var(s)
        return (f"{self.g('list_string', d, s)}.filter({v}, "
                f"{self.g('bool', d, {**s, v: 'string'})})")

    def sizes_of_strings(self, d: int, s: dict) -> str:
        v = self.var(s)
        return f"{self.g('list_string', d, s)}.map({v}, size({v}))"

    # --- time -------------------------------------------------------------------------------
    def g_duration(self, d: int, s: dict) -> str:
        k = self.r.randrange(4)
        if k == 0:
            return self.arith("duration", ["+", "-"], d, s)
        if k == 1:
            return f"({self.g('timestamp', d, s)} - {self.g('timestamp', d, s)})"
        if k == 2:
            return f"duration({self.g('string', d, s)})"
        return self.pick(self.DURATIONS)

    def g_timestamp(self, d: int, s: dict) -> str:
        k = self.r.randrange(3)
        if k == 0:
            return self.arith("timestamp", ["+", "-"], d, s, right="duration")
        if k == 1:
            return self.convert("timestamp", ["string", "int"], d, s)
        return self.pick(self.TIMESTAMPS)
