"""Decode `ExtenderArgs` and encode `ExtenderFilterResult` / `HostPriorityList`.

Decoding follows Go's `encoding/json` as kube-scheduler uses it: keys match the Go
field names exactly or case-insensitively (the last matching key wins), unknown keys
are ignored, only the first JSON value of the body is read. We always answer with the
capitalised Go field names, never omitting a field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import orjson

from extender.framework import Code, Status

_MESSAGE = attrgetter("msg")


class WireError(ValueError):
    """Malformed JSON (HTTP 400) or well-formed but invalid arguments (HTTP 200 + Error)."""

    def __init__(self, message: str, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None  # NodeList items, when not nodeCacheCapable
    node_names: list[str] | None


def _loads(body: bytes) -> Any:
    if not body.strip():
        raise WireError("request body is empty (EOF)", malformed=True)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as first:
        # Go's Decoder reads the first value and ignores trailing bytes; so do we.
        try:
            text = body.decode("utf-8")
            value, _ = json.JSONDecoder().raw_decode(text.lstrip())
            return value
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise WireError(f"malformed JSON: {first}", malformed=True) from None


def go_fields(obj: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Map JSON keys onto Go field names as encoding/json does: a key selects the field
    it names exactly or case-insensitively; each key is assigned in document order, so
    the last one wins."""
    lowered = {n.lower(): n for n in names}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        field = key if key in names else lowered.get(key.lower())
        if field is not None:
            out[field] = value
    return out


def decode_args(body: bytes) -> ExtenderArgs:
    data = _loads(body)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WireError(f"ExtenderArgs must be a JSON object, got {type(data).__name__}")
    fields = go_fields(data, ("Pod", "Nodes", "NodeNames"))
    pod = fields.get("Pod")
    if pod is None:
        raise WireError("ExtenderArgs.Pod is missing or null")
    if not isinstance(pod, dict):
        raise WireError(f"ExtenderArgs.Pod must be an object, got {type(pod).__name__}")
    nodes_raw = fields.get("Nodes")
    nodes = None
    if nodes_raw is not None:
        if not isinstance(nodes_raw, dict):
            raise WireError(f"ExtenderArgs.Nodes must be a NodeList object, got {type(nodes_raw).__name__}")
        items = go_fields(nodes_raw, ("items",)).get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise WireError("ExtenderArgs.Nodes.items must be a list of Node objects")
        nodes = items
    names_raw = fields.get("NodeNames")
    names = None
    if names_raw is not None:
        if not isinstance(names_raw, list) or not set(map(type, names_raw)) <= {str}:
            raise WireError("ExtenderArgs.NodeNames must be a list of strings")
        names = names_raw
    return ExtenderArgs(pod, nodes, names)


def filter_result(
    feasible_names: list[str] | None,
    feasible_nodes: list[dict[str, Any]] | None,
    statuses: dict[str, Status],
    error: str = "",
) -> dict[str, Any]:
    failed, unresolvable = split_failures(statuses)
    return {
        "Nodes": None if feasible_nodes is None else {"metadata": {}, "items": feasible_nodes},
        "NodeNames": feasible_names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }


def split_failures(statuses: dict[str, Status]) -> tuple[dict[str, str], dict[str, str]]:
    """FailedNodes (Unschedulable: preemption may help) and FailedAndUnresolvableNodes.

    Statuses are shared objects across nodes, so when all are unresolvable (the common
    case) the maps are built by C-level zips instead of a Python loop per node."""
    values = statuses.values()
    distinct = set(values)  # identity hashing: C-level
    if len(distinct) == 1:  # the common case: one shared status, built by fromkeys in C
        (only,) = distinct
        answer = dict.fromkeys(statuses, only.msg)
        return (answer, {}) if only.code is Code.UNSCHEDULABLE else ({}, answer)
    messages = map(_MESSAGE, values)
    if all(s.code is not Code.UNSCHEDULABLE for s in distinct):
        return {}, dict(zip(statuses, messages, strict=True))
    if all(s.code is Code.UNSCHEDULABLE for s in distinct):
        return dict(zip(statuses, messages, strict=True)), {}
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name, status in statuses.items():
        (failed if status.code is Code.UNSCHEDULABLE else unresolvable)[name] = status.msg
    return failed, unresolvable


def error_filter_result(message: str) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None,
            "FailedAndUnresolvableNodes": None, "Error": message}


def host_priority_list(hosts: list[str], scores: list[int]) -> list[dict[str, Any]]:
    return [{"Host": h, "Score": s} for h, s in zip(hosts, scores, strict=True)]


def encode(value: Any) -> bytes:
    return orjson.dumps(value)

