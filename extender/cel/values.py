"""Runtime values shared by the evaluator and the libraries: kinds, CEL equality and
ordering, errors.

CEL values are native Python values — ``bool``, ``int``, ``Uint`` (an ``int`` subclass
for CEL ``uint``), ``float``, ``str``, ``bytes``, ``list``, ``dict``, ``None`` — plus
``Timestamp``/``Duration`` (``extender.cel.lib.timevals``) and the libraries' opaque types.  Python
conflates some of them (``True == 1``, ``1 == Uint(1)``), so every type test here is on
the exact CEL kind (``kind``).  cel-python's wrapper types (``celtypes.IntType`` ...) are
still recognised by ``kind`` (tests may pass them), but nothing produces them.

Errors are exceptions: a CEL error value is a raised ``CelError``; the evaluator absorbs
it where CEL does (``&&``, ``||``, ``all``, ``exists``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import wraps
from typing import Any

from celpy import celtypes as T

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1


class CelType:
    """A CEL type value: what ``type(x)`` returns and what the identifiers ``int``,
    ``string``, ``list``... evaluate to (cel-python resolves those names to its
    conversion functions, so ``type(x) == string`` was false)."""

    __slots__ = ("name",)
    cel_type = "type"

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("type", self.name))

    def __repr__(self) -> str:
        return self.name


#: identifiers that denote type values (cel-go's checker declares them as types)
TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map",
                        "null_type", "type"})


class EvalError(Exception):
    """Raised by library code; turned into a CEL error value (message kept verbatim)."""


class Uint(int):
    """A CEL ``uint`` (a plain ``int`` is a CEL ``int``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelError(Exception):
    """A CEL runtime error (cel-go's error value), raised; ``str()`` is the message."""


_KINDS: dict[type, str] = {bool: "bool", int: "int", Uint: "uint", float: "double",
                           str: "string", bytes: "bytes", list: "list", dict: "map",
                           type(None): "null_type"}


def kind(v: Any) -> str:
    """The CEL type name of a runtime value (``"int"``, ``"list"``, ``"Semver"`` ...)."""
    k = _KINDS.get(type(v))
    if k is not None:
        return k
    return _slow_kind(v)


def _slow_kind(v: Any) -> str:
    if isinstance(v, bool | T.BoolType):
        return "bool"
    if isinstance(v, Uint | T.UintType):
        return "uint"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, type):
        return "type"
    name = getattr(v, "cel_type", None)
    return name if name else type(v).__name__


NUMERIC = frozenset({"int", "uint", "double"})


def size_of(v: Any) -> int:
    """cel-go ``actualSize``: length of sized values, 1 otherwise."""
    if isinstance(v, str | bytes | list | dict):
        return len(v)
    return 1


def equal(a: Any, b: Any) -> Any:
    """cel-go ``types.Equal``: True, False, or the error (a ``CelError``, not raised) of a
    Kubernetes type compared with another type.  Numbers compare by value across
    int/uint/double (NaN equals nothing); other kinds must match; lists and maps compare
    element-wise, an element error counting as "not unequal" (cel-go tests ``== False``)."""
    ka, kb = kind(a), kind(b)
    if ka in NUMERIC and kb in NUMERIC:
        if ka == kb:
            return a == b if ka != "double" else float(a) == float(b)
        if (ka == "double" and math.isnan(a)) or (kb == "double" and math.isnan(b)):
            return False
        return _num_cmp(a, b) == 0
    if ka == "null_type" or kb == "null_type":
        return ka == kb
    if getattr(a, "strict_equality", False):
        try:
            return bool(a.cel_equals(b))
        except (TypeError, EvalError):
            return CelError(f"no such overload: {ka} == {kb}")
    if ka != kb:
        return False
    if ka == "list":
        if len(a) != len(b):
            return False
        return all(equal(x, y) is not False for x, y in zip(a, b, strict=True))
    if ka == "map":
        if len(a) != len(b):
            return False
        for k, v in a.items():
            found = map_find(b, k)
            if found is MISSING or equal(v, found) is False:
                return False
        return True
    if ka == "bool":
        return bool(a) == bool(b)
    if ka == "type":
        return a is b or a == b
    eq = getattr(a, "cel_equals", None)
    if eq is not None:
        return bool(eq(b))
    return bool(a == b)


def cel_equal(a: Any, b: Any) -> bool:
    """Equality where cel-go asks ``Equal(...) == True`` (an error is not equal)."""
    return equal(a, b) is True


MISSING = object()


def _same_key(stored: Any, key: Any) -> bool:
    return kind(stored) == kind(key) and stored == key


def map_find(m: dict, key: Any) -> Any:
    """cel-go map lookup: the entry with the same key; else an int key finds a uint one,
    a uint key an int one, a double key (integral) an int then a uint one."""
    k = kind(key)
    if k == "string":
        return m.get(key, MISSING)  # a str key equals only str keys
    for stored, value in m.items():
        if _same_key(stored, key):
            return value
    if k == "int" and key >= 0:
        return _find_kind(m, "uint", int(key))
    if k == "uint" and key <= INT64_MAX:
        return _find_kind(m, "int", int(key))
    if k == "double" and float(key).is_integer():
        i = int(key)
        found = _find_kind(m, "int", i) if INT64_MIN <= i <= INT64_MAX else MISSING
        if found is MISSING and 0 <= i <= UINT64_MAX:
            found = _find_kind(m, "uint", i)
        return found
    return MISSING


def _find_kind(m: dict, k: str, value: int) -> Any:
    for stored, v in m.items():
        if kind(stored) == k and int(stored) == value:
            return v
    return MISSING


def map_get(m: dict, key: Any) -> Any:
    return map_find(m, key)


class _ByIdentity:
    """Hashed and compared by identity, whatever the container it is mixed into."""

    __slots__ = ()
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other


class KeyList(_ByIdentity, list):
    """A list used as a map key.  cel-go keys its Go map by the ``ref.Val``, and a list
    value is a pointer there: hashed and compared by identity, so ``{[1]: 1, [1]: 2}``
    has two entries and ``[1] in {[1]: 1}`` is false.  Everywhere else (CEL equality,
    iteration, size) it is the list it copies."""

    __slots__ = ()


class KeyMap(_ByIdentity, dict):
    """A map used as a map key: by identity, as ``KeyList``."""

    __slots__ = ()


def _kinded(base: type, name: str) -> type:
    """A subclass of int/Uint/float for a key that Python would conflate with an equal
    key of another kind (``1``, ``1u``, ``1.0``, ``true``): its hash and equality include
    the CEL kind, so the dict keeps both, as cel-go's map does."""

    def __eq__(self, other: object) -> bool:
        return kind(other) == name and base.__eq__(self, other) is True

    def __ne__(self, other: object) -> bool:
        return not __eq__(self, other)

    def __hash__(self) -> int:
        return hash((name, base(self)))

    return type(f"Kinded{name.capitalize()}", (base,),
                {"__slots__": (), "__eq__": __eq__, "__ne__": __ne__, "__hash__": __hash__})


_KINDED = {"int": _kinded(int, "int"), "uint": _kinded(Uint, "uint"),
           "double": _kinded(float, "double")}
_KINDS.update({KeyList: "list", KeyMap: "map", **{t: k for k, t in _KINDED.items()}})


def qualifier_type(v: Any) -> str:
    """How cel-go names a value that cannot index a map (its Go type for aggregates)."""
    k = kind(v)
    return {"list": "*types.baseList", "map": "*types.baseMap"}.get(k, k)


def map_put(m: dict, key: Any, value: Any) -> None:
    """Insert or replace (cel-go builds a Go map: a repeated key keeps the last value).
    Lists and maps as keys are kept by identity (``KeyList``); keys of different kinds
    that Python conflates (``True``, ``1``, ``1u``, ``1.0``) are kept apart (``_kinded``:
    a bool cannot be subclassed, so the other key is the one re-made)."""
    k = kind(key)
    if k == "string":
        m[key] = value
        return
    if k in ("list", "map"):
        if type(key) not in (KeyList, KeyMap):
            key = KeyList(key) if k == "list" else KeyMap(key)
        m[key] = value
        return
    if k in _KINDED and type(key) is not _KINDED[k]:
        for stored in m:
            if stored == key and kind(stored) != k:
                key = _KINDED[k](key)
                break
    elif k == "bool":
        clash = [s for s in m if type(s) in (int, Uint, float) and s == key]
        if clash:
            items = [(_KINDED[kind(s)](s) if any(s is c for c in clash) else s, v)
                     for s, v in m.items()]
            m.clear()
            m.update(items)
    m[key] = value


def map_delete(m: dict, key: Any) -> None:
    for stored in list(m):
        if _same_key(stored, key):
            del m[stored]


def build_map(flat: list) -> dict:
    """A map from key, value, key, value...: a repeated key keeps the last value (cel-go
    builds a Go map)."""
    out: dict = {}
    for i in range(0, len(flat), 2):
        map_put(out, flat[i], flat[i + 1])
    return out


_F_MIN_INT, _F_MAX_INT, _F_MAX_UINT = float(INT64_MIN), float(INT64_MAX), float(UINT64_MAX)


def _cmp(x: Any, y: Any) -> int:
    return (x > y) - (x < y)


def _num_cmp(a: Any, b: Any) -> int:
    """cel-go's numeric Compare: int and uint exactly; a double against an int or uint
    converts the integer to a double (so 2^53 + 1 == 2^53 as a double); NaN cannot be
    ordered."""
    ka, kb = kind(a), kind(b)
    if ka == "double" or kb == "double":
        if (ka == "double" and math.isnan(a)) or (kb == "double" and math.isnan(b)):
            raise EvalError("NaN values cannot be ordered")
        if ka == kb:
            return _cmp(float(a), float(b))
        if ka == "double":
            return _double_vs(float(a), int(b), kb)
        return -_double_vs(float(b), int(a), ka)
    return _cmp(int(a), int(b))


def _double_vs(d: float, n: int, k: str) -> int:
    if k == "int":
        if d < _F_MIN_INT:
            return -1
        if d > _F_MAX_INT:
            return 1
    else:
        if d < 0:
            return -1
        if d > _F_MAX_UINT:
            return 1
    return _cmp(d, float(n))


def go_compare(a: Any, b: Any) -> int | None:
    """cel-go ``Compare`` as a library sees it: -1, 0, 1, or None (an error: NaN, kinds
    that do not order)."""
    try:
        return cel_compare(a, b)
    except EvalError:
        return None


ORDERED = frozenset({"int", "uint", "double", "string", "bytes", "bool", "timestamp",
                     "duration"})


def cel_compare(a: Any, b: Any) -> int:
    """Ordering for ``< <= > >=``: same kind, or any two numeric kinds (K8s
    CrossTypeNumericComparisons); opaque kinds are not ordered by operators."""
    ka, kb = kind(a), kind(b)
    if ka in NUMERIC and kb in NUMERIC:
        return _num_cmp(a, b)
    if ka != kb or ka not in ORDERED:
        raise EvalError(f"no such overload: {ka} < {kb}")
    if ka == "bool":
        a, b = bool(a), bool(b)
    elif ka == "string":
        a, b = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    return (a > b) - (a < b)


def check_int(v: int) -> int:
    if v < INT64_MIN or v > INT64_MAX:
        raise EvalError("integer overflow")
    return int(v)


def check_uint(v: int) -> Uint:
    if v < 0 or v > UINT64_MAX:
        raise EvalError("unsigned integer overflow")
    return Uint(v)


def to_cel(v: Any) -> Any:
    """A Python value (or a cel-python wrapper value) as a CEL value of this engine."""
    k = kind(v)
    if k == "bool":
        return bool(v)
    if k == "uint":
        return Uint(v)
    if k == "int":
        return int(v)
    if k == "double":
        return float(v)
    if k == "string":
        return str(v)
    if k == "bytes":
        return bytes(v)
    if k == "list":
        return [to_cel(x) for x in v]
    if k == "map":
        return {to_cel(k): to_cel(x) for k, x in v.items()}
    return v


def cel_function(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a library implementation: turn EvalError, TypeError & co. into a raised
    ``CelError`` with cel-go's wording (a ``CelError`` passes through unchanged)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def wrapper(*args: Any) -> Any:
            try:
                return fn(*args)
            except CelError:
                raise
            except EvalError as exc:
                raise CelError(f"{name}: {exc}") from None
            except (TypeError, AttributeError, KeyError, IndexError):
                sig = ", ".join(kind(a) for a in args)
                raise CelError(f"no such overload: {name}({sig})") from None
            except (ValueError, OverflowError, ArithmeticError) as exc:
                raise CelError(f"{name}: {exc}") from None

        wrapper.cel_name = name  # type: ignore[attr-defined]
        return wrapper

    return deco


def want(v: Any, *kinds: str) -> None:
    if kind(v) not in kinds:
        raise TypeError(f"expected {'/'.join(kinds)}, got {kind(v)}")


#: Go ``unicode.IsSpace`` = Unicode White_Space (what Go's strings.TrimSpace removes).
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
