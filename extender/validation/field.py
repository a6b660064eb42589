"""Field errors in apimachinery's `field.Error` format, so messages read like the API server's.

`str(FieldError)` is `<path>: <type>[: <value>][: <detail>]`, e.g.
`metadata.annotations[scheduling-extender.io/tolerations][0].value: Invalid value: "08":
must be a canonical decimal integer within int64`. Values are printed as Go's `%q` (strings)
or `%v` (numbers); Required, Forbidden and Too long never print the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from extender.matching.numeric import go_quote

INVALID = "Invalid value"
REQUIRED = "Required value"
FORBIDDEN = "Forbidden"
NOT_SUPPORTED = "Unsupported value"
TOO_LONG = "Too long"
TOO_MANY = "Too many"
_NO_VALUE = (REQUIRED, FORBIDDEN, TOO_LONG)
OMIT = object()  # field.OmitValueType: print the type and detail only


def child(path: str, *segments: str | int) -> str:
    """`Path.Child` / `Path.Index` / `Path.Key`: names get a dot, ints and keys brackets."""
    out = path
    for seg in segments:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif seg.startswith("["):
            out += seg
        else:
            out += f".{seg}" if out else seg
    return out


def key(path: str, name: str) -> str:
    """`Path.Key(name)`: `metadata.annotations[scheduling-extender.io/tolerations]`."""
    return f"{path}[{name}]"


class Raw(str):
    """A bad value printed as is, not quoted (Go's `%#v` of a struct)."""


def render_value(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list | tuple):  # Go %#v of []string
        return "[]string{" + ", ".join(go_quote(v) for v in value) + "}"
    return str(value)


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    type: str
    value: Any = OMIT
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.type}"
        if self.type not in _NO_VALUE and self.value is not OMIT:
            text += f": {render_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, INVALID, value, detail)


def required(path: str, detail: str) -> FieldError:
    return FieldError(path, REQUIRED, OMIT, detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, FORBIDDEN, OMIT, detail)


def not_supported(path: str, value: Any, supported: Sequence[str]) -> FieldError:
    return FieldError(path, NOT_SUPPORTED, value, "supported values: " + ", ".join(go_quote(s) for s in supported))


def too_long(path: str, limit: int) -> FieldError:
    return FieldError(path, TOO_LONG, OMIT, f"may not be more than {limit} bytes")


def too_many(path: str, actual: int, limit: int, what: str = "items") -> FieldError:
    return FieldError(path, TOO_MANY, actual, f"must have at most {limit} {what}")


def aggregate(errors: Iterable[FieldError | str]) -> str:
    """`utilerrors.NewAggregate(...).Error()`: one message as is, several as `[a, b]`."""
    texts = [str(e) for e in errors]
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"
