"""``<string>.format(list)`` of cel-go's strings extension, as Kubernetes 1.35 has it.

Kubernetes enables ``ext.Strings(version 2)``, whose ``format`` is cel-go's first
implementation (``ext/formatting.go``, before strings v4) with the locale ``en_US``:

* ``%s`` — any value as ``string()`` gives it; lists ``[a, b]`` and maps ``{k:v, ...}``
  (entries sorted by their formatted key) with elements in CEL literal syntax: strings
  and bytes Go-quoted, doubles ``%.6f``, timestamps/durations as ``timestamp("...")``;
* ``%d`` ints/uints; ``%b`` ints/uints/bools; ``%o``; ``%x``/``%X`` ints/uints, and
  strings/bytes as hex of their bytes (Go ``fmt``, no locale);
* ``%f`` (``%.Nf``, default 6) and ``%e`` doubles, or the strings ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``, through golang.org/x/text's printer for en_US: ``%f``
  groups thousands (``1,234.500000``), ``%e`` writes ``1.234500×10⁰³`` (a superscript
  exponent of at least two digits) with 6 fraction digits whatever the precision:
  cel-go puts the precision in the *width* (``%%%de``, default 6), so a shorter text
  is padded on the left with spaces (``'%e'`` of +Inf is ``'     ∞'``); NaN is ``NaN``,
  the infinities ``∞`` and ``-∞``; negative zero formats as zero (``0.000000``);
* ``%%`` is ``%``; errors carry cel-go's texts (``error during formatting: ...``).

A constant format string applied to a list literal is checked at compile time, like
cel-go's ``stringFormatValidator``: clause/argument type mismatches and "too many
arguments supplied to string.format".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from extender.cel.lib.goquote import go_quote
from extender.cel.lib.stdlib import to_string
from extender.cel.values import EvalError, cel_function, kind

DEFAULT_PRECISION = 6
_SUPER = "⁰¹²³⁴⁵⁶⁷⁸⁹"

#: static kinds each clause accepts (the compile-time check; dyn always passes)
CLAUSE_KINDS: dict[str, tuple[str, ...]] = {
    "s": ("list", "map", "int", "uint", "double", "bool", "string", "timestamp", "bytes",
          "duration", "type", "null_type"),
    "d": ("int", "uint"), "f": ("double", "string"), "e": ("double", "string"),
    "b": ("int", "uint", "bool"), "x": ("int", "uint", "string", "bytes"),
    "X": ("int", "uint", "string", "bytes"), "o": ("int", "uint"),
}
_ERRORS = {
    "s": "string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
         "lists, types, durations, and timestamps, was given {}",
    "d": "decimal clause can only be used on integers, was given {}",
    "f": "fixed-point clause can only be used on doubles, was given {}",
    "e": "scientific clause can only be used on doubles, was given {}",
    "b": "only integers and bools can be formatted as binary, was given {}",
    "x": "only integers, byte buffers, and strings can be formatted as hex, was given {}",
    "o": "octal clause can only be used on integers, was given {}",
}


class FormatError(EvalError):
    pass


def clause_error(verb: str, type_name: str) -> str:
    return _ERRORS["x" if verb == "X" else verb].format(type_name)


def parse(text: str) -> list[str | tuple[str, int | None]]:
    """Literal text pieces and (verb, precision) clauses; FormatError as cel-go words it
    (``unexpected end of string`` for a trailing ``%`` is decided when formatting)."""
    out: list[str | tuple[str, int | None]] = []
    i, literal = 0, []
    while i < len(text):
        ch = text[i]
        if ch != "%":
            literal.append(ch)
            i += 1
            continue
        if text[i + 1 : i + 2] == "%":
            literal.append("%")
            i += 2
            continue
        if literal:
            out.append("".join(literal))
            literal = []
        i += 1
        if i >= len(text):
            out.append(("", None))  # a lone trailing %
            break
        precision = None
        if text[i] == ".":
            j = i + 1
            while j < len(text) and "0" <= text[j] <= "9":
                j += 1
            if j >= len(text):
                raise FormatError("could not parse formatting clause: error while parsing "
                                  "precision: could not find end of precision specifier")
            precision = int(text[i + 1 : j]) if j > i + 1 else None
            if precision is None:
                raise FormatError("could not parse formatting clause: error while parsing "
                                  "precision: error while converting precision to integer: "
                                  'strconv.Atoi: parsing "": invalid syntax')
            i = j
        verb = text[i]
        if verb not in CLAUSE_KINDS:
            raise FormatError("could not parse formatting clause: unrecognized formatting "
                              f'clause "{verb}"')
        out.append((verb, precision))
        i += 1
    if literal:
        out.append("".join(literal))
    return out


@cel_function("format")
def format_(text: Any, args: Any) -> Any:
    if kind(text) != "string" or kind(args) != "list":
        raise TypeError(f"{kind(text)}.format({kind(args)})")
    out: list[str] = []
    index = 0
    for piece in parse(str(text)):
        if isinstance(piece, str):
            out.append(piece)
            continue
        if index >= len(args):
            raise FormatError(f"index {index} out of range")
        verb, precision = piece
        if not verb:
            raise FormatError("unexpected end of string")
        try:
            out.append(_CLAUSES[verb](args[index], precision, verb))
        except FormatError as exc:
            raise FormatError(f"error during formatting: {exc}") from None
        index += 1
    return "".join(out)


def _type_name(v: Any) -> str:
    k = kind(v)
    return {"Quantity": "kubernetes.Quantity", "Semver": "kubernetes.Semver",
            "URL": "kubernetes.URL", "IP": "net.IP", "CIDR": "net.CIDR",
            "Format": "kubernetes.NamedFormat", "null_type": "null_type"}.get(k, k)


def _as_string(v: Any) -> str:
    """``string(v)`` for the kinds %s takes (cel-go ``ConvertToType(StringType)``)."""
    k = kind(v)
    if k == "null_type":
        return "null"
    if k == "type":
        return str(v)
    return str(to_string(v))


def format_string(v: Any, precision: int | None = None, verb: str = "s") -> str:
    k = kind(v)
    if k == "list":
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if k == "map":
        pairs = sorted((_literal_key(key), _literal(value)) for key, value in v.items())
        return "{" + ", ".join(f"{key}:{value}" for key, value in pairs) + "}"
    if k in CLAUSE_KINDS["s"]:
        return _as_string(v)
    raise FormatError(clause_error("s", _type_name(v)))


def _literal(v: Any) -> str:
    """A list/map member in CEL literal syntax (cel-go ``clauseForType`` + quoteForCEL)."""
    k = kind(v)
    if k in ("int", "uint"):
        return str(int(v))
    if k == "string":
        return go_quote(str(v))
    if k == "bytes":
        return "b" + go_quote(_as_string(v))
    if k in ("bool", "null_type", "type"):
        return _as_string(v)
    if k == "double":
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return go_quote("NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf"))
        return f"{f:.{DEFAULT_PRECISION}f}"
    if k in ("timestamp", "duration"):
        return f"{k}({go_quote(_as_string(v))})"
    if k in ("list", "map"):
        return format_string(v)
    raise FormatError(f"no formatting function for {_type_name(v)}")


def _literal_key(v: Any) -> str:
    k = kind(v)
    if k == "string":
        return go_quote(str(v))
    if k == "bool":
        return _as_string(v)
    if k in ("int", "uint"):
        return str(int(v))
    raise FormatError(f"no formatting function for map key of type {_type_name(v)}")


def _decimal(v: Any, precision: int | None, verb: str) -> str:
    if kind(v) not in ("int", "uint"):
        raise FormatError(clause_error("d", _type_name(v)))
    return str(int(v))


def _float_arg(v: Any, verb: str) -> float:
    k = kind(v)
    if k == "string" and str(v) in ("NaN", "Infinity", "-Infinity"):
        return float(str(v).replace("Infinity", "inf"))
    if k != "double":
        raise FormatError(clause_error(verb, _type_name(v)))
    return float(v)


def _special(f: float) -> str | None:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "∞" if f > 0 else "-∞"
    return None


def _fixed(v: Any, precision: int | None, verb: str) -> str:
    """x/text en_US ``%.Nf``: grouped thousands, ``.`` decimal separator."""
    f = _float_arg(v, "f")
    special = _special(f)
    if special is not None:
        return special
    if f == 0:
        f = 0.0  # x/text signs only a value below zero: -0.0 is "0.000000"
    text = f"{f:.{DEFAULT_PRECISION if precision is None else precision}f}"
    sign = "-" if text.startswith("-") else ""
    whole, _, fraction = text.lstrip("-").partition(".")
    whole = f"{int(whole):,}"
    return sign + whole + ("." + fraction if fraction else "")


def _scientific(v: Any, precision: int | None, verb: str) -> str:
    """x/text en_US ``%{width}e``: always 6 fraction digits, and cel-go passes the
    precision (default 6) as the *width*, so the text (a special value too) is padded
    with spaces on the left to that many characters."""
    f = _float_arg(v, "e")
    width = DEFAULT_PRECISION if precision is None else precision
    text = _special(f)
    if text is None:
        mantissa, _, exponent = f"{f if f != 0 else 0.0:.{DEFAULT_PRECISION}e}".partition("e")
        exp = int(exponent)
        digits = "".join(_SUPER[int(c)] for c in f"{abs(exp):02d}")
        text = f"{mantissa}×10{'⁻' if exp < 0 else ''}{digits}"
    return text.rjust(width)


def _binary(v: Any, precision: int | None, verb: str) -> str:
    k = kind(v)
    if k == "bool":
        return "1" if v else "0"
    if k not in ("int", "uint"):
        raise FormatError(clause_error("b", _type_name(v)))
    return format(int(v), "b")


def _hex(v: Any, precision: int | None, verb: str) -> str:
    k = kind(v)
    if k in ("string", "bytes"):
        data = str(v).encode("utf-8", "surrogatepass") if k == "string" else bytes(v)
        text = data.hex()
    elif k in ("int", "uint"):
        text = format(int(v), "x")
    else:
        raise FormatError(clause_error("x", _type_name(v)))
    return text.upper() if verb == "X" else text


def _octal(v: Any, precision: int | None, verb: str) -> str:
    if kind(v) not in ("int", "uint"):
        raise FormatError(clause_error("o", _type_name(v)))
    return format(int(v), "o")


_CLAUSES: dict[str, Callable[[Any, int | None, str], str]] = {
    "s": format_string, "d": _decimal, "f": _fixed, "e": _scientific, "b": _binary,
    "x": _hex, "X": _hex, "o": _octal,
}


def check_constant(text: str, arg_kinds: list[str]) -> str | None:
    """cel-go's ``stringFormatValidator`` for a constant format string on a list literal
    of statically typed elements: the compile error, or None."""
    try:
        clauses = [p for p in parse(text) if not isinstance(p, str)]
    except FormatError as exc:
        return str(exc)
    for index, (verb, _precision) in enumerate(clauses):
        if not verb:
            return "unexpected end of string"
        if index >= len(arg_kinds):
            return f"index {index} out of range"
        k = arg_kinds[index]
        if k != "dyn" and k not in CLAUSE_KINDS[verb]:
            return clause_error(verb, k)
    if len(arg_kinds) > len(clauses):
        return (f"too many arguments supplied to string.format (expected {len(clauses)}, "
                f"got {len(arg_kinds)})")
    return None


FUNCTIONS = {"format": format_}
