"""Typed decoding, as Go's `encoding/json` decodes into Kubernetes' core/v1 structs.

A parse tree from `extender.validation.gojson.loads` is walked against a small schema
(`Struct`, `ListOf`, `Ptr`, `STRING`, `INT32`, `INT64`): field names match
case-sensitively, unknown fields are ignored (and reported, as the API server's
`fieldValidation=Warn` would), `null` leaves a value alone (sets pointers and slices to
nil), a repeated field is decoded again *into* the earlier value, integers are parsed
from their literal text with Go's ranges, and the *first* type mismatch is the error,
since Go keeps decoding after one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from extender.validation.gojson import GoJSONError, JObj, Num, loads


@dataclass(frozen=True)
class Scalar:
    go_type: str  # "string", "int32", "int64"


STRING = Scalar("string")
INT32 = Scalar("int32")
INT64 = Scalar("int64")
_INT_BITS = {"int32": 32, "int64": 64}


@dataclass(frozen=True)
class Struct:
    name: str  # Go type name, e.g. "Toleration"
    package: str  # package as Go prints it in types, e.g. "v1"
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def go_type(self) -> str:
        return f"{self.package}.{self.name}"


@dataclass(frozen=True)
class ListOf:
    elem: Any

    @property
    def go_type(self) -> str:
        return "[]" + self.elem.go_type


@dataclass(frozen=True)
class Ptr:
    elem: Any

    @property
    def go_type(self) -> str:
        return self.elem.go_type  # Go reports the pointed-to type


def _kind(value: Any) -> str:
    if isinstance(value, JObj):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Num):
        return "number"
    if isinstance(value, bool):
        return "bool"
    return "string"


class _Decoder:
    """Walks a parsed value against a schema, Go style; see the module docstring."""

    def __init__(self) -> None:
        self.error: GoJSONError | None = None
        self.unknown: list[tuple] = []  # paths (keys/indices) of ignored fields

    def fail(self, value_text: str, schema: Any, path: tuple, ctx: tuple[str, tuple[str, ...]] | None) -> None:
        if self.error is not None:
            return
        if ctx is not None and (ctx[0] or ctx[1]):
            message = (f"json: cannot unmarshal {value_text} into Go struct field "
                       f"{ctx[0]}.{'.'.join(ctx[1])} of type {schema.go_type}")
        else:
            message = f"json: cannot unmarshal {value_text} into Go value of type {schema.go_type}"
        self.error = GoJSONError(message, path, syntax=False)

    def decode(self, value: Any, schema: Any, current: Any, path: tuple, ctx) -> Any:
        """Return the new value for a slot holding `current` (None: zero value)."""
        if value is None:  # null: pointers and slices become nil, everything else stays
            return None if isinstance(schema, Ptr | ListOf) else current
        if isinstance(schema, Ptr):
            return self.decode(value, schema.elem, current, path, ctx)
        if isinstance(schema, Scalar):
            return self._scalar(value, schema, current, path, ctx)
        if isinstance(schema, ListOf):
            if type(value) is not list:
                self.fail(_kind(value), schema, path, ctx)
                return current
            old = current if isinstance(current, list) else []
            out = []
            for i, item in enumerate(value):
                out.append(self.decode(item, schema.elem, old[i] if i < len(old) else None, (*path, i), ctx))
            return out
        # Struct
        if not isinstance(value, JObj):
            self.fail(_kind(value), schema, path, ctx)
            return current
        out = dict(current) if isinstance(current, dict) else {}
        stack = ctx[1] if ctx is not None else ()
        for key, item in value:
            sub = schema.fields.get(key)
            if sub is None:
                self.unknown.append((*path, key))
                continue
            decoded = self.decode(item, sub, out.get(key), (*path, key), (schema.name, (*stack, key)))
            if decoded is not None or key in out or isinstance(sub, Ptr | ListOf):
                out[key] = decoded  # a null string or struct stays absent (the zero value)
        return out

    def _scalar(self, value: Any, schema: Scalar, current: Any, path: tuple, ctx) -> Any:
        if schema is STRING:
            if type(value) is str:
                return value
            self.fail(_kind(value), schema, path, ctx)
            return current
        if not isinstance(value, Num):
            self.fail(_kind(value), schema, path, ctx)
            return current
        number = _parse_int(value, _INT_BITS[schema.go_type])
        if number is None:
            self.fail(f"number {value}", schema, path, ctx)
            return current
        return number


_INT_LITERAL = re.compile(r"-?[0-9]+")


def _parse_int(literal: str, bits: int) -> int | None:
    """strconv.ParseInt(literal, 10, 64) then the field's overflow check; None if either fails."""
    if _INT_LITERAL.fullmatch(literal) is None or len(literal.lstrip("-").lstrip("0")) > 20:
        return None
    number = int(literal)
    limit = 1 << (bits - 1)
    return number if -limit <= number < limit else None


@dataclass(frozen=True, slots=True)
class Decoded:
    value: Any  # plain dicts/lists/str/int, canonical field names only
    unknown_fields: tuple[tuple, ...]  # paths of fields Go would ignore


def decode(text: str, schema: Any) -> Decoded:
    """Parse and decode `text` into `schema`; raises GoJSONError (syntax or first type error)."""
    decoder = _Decoder()
    value = decoder.decode(loads(text), schema, None, (), None)
    if decoder.error is not None:
        raise decoder.error
    return Decoded(value, tuple(decoder.unknown))


# --- the annotation schemas (core/v1 types plus KEP-5500's `expression`) -------------

TOLERATION = Struct("Toleration", "v1", {
    "key": STRING, "operator": STRING, "value": STRING, "effect": STRING,
    "tolerationSeconds": Ptr(INT64), "expression": STRING,
})
TOLERATIONS = ListOf(TOLERATION)
REQUIREMENT = Struct("NodeSelectorRequirement", "v1", {
    "key": STRING, "operator": STRING, "values": ListOf(STRING)})
TERM = Struct("NodeSelectorTerm", "v1", {
    "matchExpressions": ListOf(REQUIREMENT), "matchFields": ListOf(REQUIREMENT)})
SELECTOR = Struct("NodeSelector", "v1", {"nodeSelectorTerms": ListOf(TERM)})
PREFERRED = Struct("PreferredSchedulingTerm", "v1", {"weight": INT32, "preference": TERM})
NODE_AFFINITY = Struct("NodeAffinity", "v1", {
    "requiredDuringSchedulingIgnoredDuringExecution": Ptr(SELECTOR),
    "preferredDuringSchedulingIgnoredDuringExecution": ListOf(PREFERRED),
})
VOLUME_NODE_AFFINITY = Struct("VolumeNodeAffinity", "v1", {"required": Ptr(SELECTOR)})
