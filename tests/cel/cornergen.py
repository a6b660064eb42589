"""A seeded generator of CEL expressions for the corners ``kubegen`` never reaches, for the
differential test against cel-go (``test_cel_oracle.py``).

Where ``kubegen`` composes well-typed expressions from ordinary values, this one writes
short expressions over edge values, one family at a time:

* literal forms: signs, hex, uint, exponents, a point without digits after it, trailing
  commas in list/map literals, escapes in strings and bytes;
* quantities: random signs, leading zeros, fractions, every suffix (binary, decimal,
  exponents), through ``isQuantity``/``isInteger``/``asInteger``/``asApproximateFloat``/
  ``sign``/``add``/``sub``;
* ``format`` with every verb over special doubles (±Inf, NaN, -0.0, the smallest
  subnormal, halves), int extremes and values of every type;
* conversions (``int uint double string bytes bool duration timestamp type dyn``) of a
  value of every type;
* map literals with keys of every kind (lists and maps too) and lookups in them;
* nesting at and around cel-go's parser limits, in several shapes.

A result that is a string or a number is compared with the value *our* engine computes
for it (``rendered``): cel-go then says ``true`` only if it computes the same value, so
a value difference shows as a true/false difference.
"""

from __future__ import annotations

import json
import math
import random

from extender.cel.activation import Activation
from extender.cel.limits import MAX_COST
from extender.cel.program import build, taint_activation
from extender.cel.values import kind

SPECIAL_DOUBLES = ["double('inf')", "double('-inf')", "double('nan')", "-0.0", "0.0",
                   "5e-324", "1e300", "-1e-300", "0.5", "2.5", "-0.4", "1234.5", "1e21",
                   "0.05", "-2.5", "1.7976931348623157e308", "123456789.125"]
INTS = ["0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808", "255", "-7",
        "0x7fffffffffffffff", "0xFF", "1000000"]
UINTS = ["0u", "1u", "18446744073709551615u", "0xFFu", "255u"]
STRINGS = ["''", "'a'", "'NaN'", "'Infinity'", "'-Infinity'", "'1.5'", "'1e3'", "'-0'",
           "'0x10'", "' 1'", "'1_000'", "'true'", "'T'", "'é'", "'\\u00ff'", "'1h'",
           "'-1.5h'", "'1970-01-01T00:00:00Z'", "'2024-02-29T23:59:59.999999999Z'",
           "'9223372036854775808'", "'18446744073709551615'", "'inf'", "'+Inf'"]
BYTES = ["b''", "b'a'", "b'\\xff'", "b'\\303\\251'", "b'NaN'"]
OTHERS = ["true", "false", "null", "duration('1h1m')", "duration('-1ns')",
          "timestamp('2024-01-02T03:04:05.5Z')", "[]", "[1, 'a']", "{}", "{'a': 1}",
          "int", "type(1)"]
VALUES = SPECIAL_DOUBLES + INTS + UINTS + STRINGS + BYTES + OTHERS
CONVERSIONS = ["int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp",
               "type", "dyn"]
VERBS = ["%s", "%d", "%f", "%e", "%b", "%x", "%X", "%o", "%.0f", "%.1f", "%.3f", "%.0e",
         "%.2e", "%.12e", "%.20e", "%%"]
Q_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P",
              "E", "e3", "e-3", "E+2", "e18", "e-10", "e19", "e-9", "e0", "K", "i", "e"]
#: (the smallest nesting cel-go refuses, a shape): nested n times
NESTING = [
    (250, lambda n: "[" * n + "]" * n + " != []"),
    (251, lambda n: " + ".join(["1"] * n) + " > 0"),
    (249, lambda n: "(" * n + "taint.key != ''" + ")" * n),
    (250, lambda n: "string(" * n + "'x'" + ")" * n + " == 'x'"),
    (250, lambda n: "[] != " + "[" * n + "]" * n),
    (125, lambda n: "1 + (" * n + "1" + ")" * n + " > 0"),
    (250, lambda n: "{1: " * n + "1" + "}" * n + " != {}"),
    (250, lambda n: "'a'" + ".lowerAscii()" * n + " == 'a'"),
    (250, lambda n: "-(" * n + "1" + ")" * n + " != 0"),
    (249, lambda n: "1 * " + "-(" * n + "1" + ")" * n + " != 0"),
]


def literal(v: object) -> str:
    """A CEL literal for one of our runtime values (strings, numbers, bools)."""
    k = kind(v)
    if k == "string":
        return json.dumps(v, ensure_ascii=False)
    if k == "bool":
        return "true" if v else "false"
    if k == "uint":
        return f"{int(v)}u"
    if k == "int":
        return str(int(v))
    if k == "double":
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return f"double('{f}')"
        return repr(f)
    raise ValueError(k)


def ours(expression: str) -> object:
    """Our engine's value of a closed expression (raises on any error)."""
    return build(expression).runner.run(taint_activation("k", "v", "NoSchedule"),
                                        Activation(MAX_COST))


def rendered(expression: str) -> str:
    """``expression == <our value>`` when our value is a string, number or bool; the
    expression as a size/type probe otherwise (errors are compared as errors)."""
    try:
        value = ours(expression)
    except Exception:  # noqa: BLE001 - an error (ours) is compared with cel-go's
        return f"type({expression}) != null_type"
    if kind(value) in ("string", "bool", "int", "uint") or (
            kind(value) == "double" and not math.isnan(float(value))):
        return f"{expression} == {literal(value)}"
    if kind(value) == "double":
        return f"{expression} != {expression}"  # NaN
    return f"type({expression}) != null_type"


class CornerGen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.families = [self.literal_form, self.quantity, self.format, self.conversion,
                         self.map_keys, self.nesting]
        self.weights = [4, 6, 5, 4, 4, 1]

    def expression(self) -> str:
        family = self.r.choices(self.families, self.weights)[0]
        return family()

    # --- families ----------------------------------------------------------------------
    def literal_form(self) -> str:
        r = self.r
        digits = "".join(r.choice("0123456789") for _ in range(r.randint(1, 20)))
        forms = [
            digits, "-" + digits, digits + "u", "0x" + digits[:16], "-0x" + digits[:15],
            digits + ".", "." + digits, digits + "." + digits[:3], digits[:3] + "e" + digits[:2],
            digits[:3] + ".e3", digits[:2] + "e-" + digits[:3], "-" + digits[:3] + ".",
            r.choice(STRINGS), r.choice(BYTES), "r'\\n'", "'''a\nb'''", "'\\q'", "'\\x4'",
            "'\\u00e9'", "b'\\u00e9'", "'\\377'", "b'\\377'",
        ]
        items = ", ".join(r.choice(INTS) for _ in range(r.randint(0, 3)))
        comma = r.choice(["", ",", ",,", " , "])
        entries = ", ".join(f"{i}: 1" for i in range(r.randint(0, 2)))
        containers = [f"size([{items}{comma}])", f"size({{{entries}{comma}}})",
                      f"[{items}{comma}].exists(x, x > 0{comma})"]
        return rendered(r.choice(forms + containers))

    def quantity_text(self) -> str:
        r = self.r
        sign = r.choice(["", "", "+", "-"])
        whole = "0" * r.randint(0, 2) + "".join(r.choice("0123456789")
                                                  for _ in range(r.randint(0, 20)))
        frac = "" if r.random() < 0.5 else "." + "".join(
            r.choice("0123456789") for _ in range(r.randint(0, 12)))
        return sign + whole + frac + r.choice(Q_SUFFIXES)

    def quantity(self) -> str:
        r = self.r
        q = f"quantity('{self.quantity_text()}')"
        other = r.choice([f"quantity('{self.quantity_text()}')", r.choice(INTS[:6]), "1", "-1"])
        body = r.choice([
            f"isQuantity('{self.quantity_text()}')", f"{q}.isInteger()", f"{q}.asInteger()",
            f"{q}.asApproximateFloat()", f"sign({q})", f"{q}.add({other}).asApproximateFloat()",
            f"{q}.sub({other}).isInteger()", f"{q}.add({other}).asInteger()",
            f"{q}.sub({other}).asApproximateFloat()", f"{q}.compareTo(quantity('{self.quantity_text()}'))",
            f"{q} == quantity('{self.quantity_text()}')",
        ])
        return rendered(body)

    def format(self) -> str:
        r = self.r
        verb = r.choice(VERBS)
        arg = r.choice(SPECIAL_DOUBLES + SPECIAL_DOUBLES + VALUES)
        if r.random() < 0.3:
            arg = f"dyn({arg})"
        text = r.choice([f"'{verb}'", f"'x{verb}y{verb}'"])
        args = [arg] * text.count("%") if verb != "%%" else []
        return rendered(f"{text}.format([{', '.join(args)}])")

    def conversion(self) -> str:
        r = self.r
        value = r.choice(VALUES)
        if r.random() < 0.5:
            value = f"dyn({value})"
        return rendered(f"{r.choice(CONVERSIONS)}({value})")

    def map_keys(self) -> str:
        r = self.r
        keys = ["1", "1u", "1.0", "true", "'1'", "null", "[1]", "{1: 1}", "-0.0", "0",
                "0u", "false", "duration('1s')", "2", "2.5", "b'1'"]
        chosen = [r.choice(keys) for _ in range(r.randint(1, 4))]
        entries = ", ".join(f"dyn({k}): {i}" for i, k in enumerate(chosen))
        m = f"{{{entries}}}"
        probe = r.choice(keys)
        return rendered(r.choice([f"{m}.size()", f"{m}[{probe}]", f"{probe} in {m}",
                                  f"{m}.exists(k, k == {probe})", f"{m}[?{probe}].orValue(-1)",
                                  f"{m} == {m}"]))

    def nesting(self) -> str:
        limit, shape = self.r.choice(NESTING)
        return shape(limit + self.r.randint(-2, 1))

