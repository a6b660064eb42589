"""Decode `ExtenderArgs` and encode `ExtenderFilterResult` / `HostPriorityList`.

Decoding follows Go's `encoding/json` as kube-scheduler uses it: keys match the Go
field names exactly or case-insensitively (the last matching key wins), unknown keys
are ignored, only the first JSON value of the body is read. We always answer with the
capitalised Go field names, never omitting a field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from extender import metrics
from extender.api import expansion
from extender.caching import OnFirstUse
from extender.framework import Code, Status
from extender.framework.verdicts import Failures, group
from extender.gotext import no_lone_surrogates


class WireError(ValueError):
    """Malformed JSON (HTTP 400) or well-formed but invalid arguments (HTTP 200 + Error)."""

    def __init__(self, message: str, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None  # NodeList items, when not nodeCacheCapable
    node_names: list[str] | None  # shared between requests: never mutate
    names_key: bytes | None = None  # the NodeNames array's JSON text, when cut out whole
    pod_key: bytes | None = None  # the rest of the body then: same Pod, same bytes


# kube-scheduler's json.Marshal(ExtenderArgs) writes Pod, Nodes, NodeNames in that
# order, without whitespace. The NodeNames array is the bulk of the body and usually
# the same from one pod to the next (every node, or the same feasible subset), so it is
# cut out of the body and decoded once per distinct array text.
_NAMES_MARK = b',"NodeNames":['
# Larger arrays are decoded but not remembered (nor their candidate sets); the cache is
# bounded in bytes (extender.caching), whatever clients send.
MAX_CACHED_NAMES_BYTES = 4 << 20
#: The process's NodeNames cache, created on first use (after the memory limit is set
#: from the configuration).
known_names_cache = OnFirstUse("node-names", max_entries=64)


class EncodedNames(Sequence[str]):
    """A NodeNames list known by its JSON text and its length, decoded only when a name
    is asked for: what a filter answer registers for the prioritize call that follows
    (`api.answers.expect_prioritize`), which normally finds its candidate set by the
    text and never reads a name. Read-only, as every cached list."""

    __slots__ = ("text", "_count", "_names")

    def __init__(self, text: bytes, count: int) -> None:
        self.text, self._count, self._names = text, count, None

    def _decoded(self) -> list[str]:
        if self._names is None:
            self._names = orjson.loads(self.text)
        return self._names

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self._decoded()[index]

    def __iter__(self):
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, EncodedNames)):
            return self._decoded() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a list, as far as equality goes


def names_bytes(text: bytes, count: int) -> int:
    """Estimated memory of a decoded array of `count` names: the text (the key) plus a
    str object per name (~60 bytes each besides its characters)."""
    return 2 * len(text) + 64 * (count + 1)


def all_str(values: list) -> bool:
    """Every item a str: `str.join` checks it in C (a set of the items' types costs
    ten times as much for 5,000 names)."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _cut_node_names(body: bytes) -> tuple[bytes, bytes] | None:
    """(the body without its NodeNames member, that member's array text), when the body
    ends with `,"NodeNames":[...]}`. The mark is searched from the start (the Pod before
    it is a few KB, the names after it up to a MB): if the head then parses as an
    object, the member is a top-level one, and if the rest then decodes as one array of
    strings (`_known_names`), no other member follows it, so it is the last and wins as
    Go's decoder would have it; otherwise the body is decoded whole."""
    if not body.endswith(b"]}"):
        return None
    at = body.find(_NAMES_MARK)
    if at < 0:
        return None
    return body[:at] + b"}", body[at + len(_NAMES_MARK) - 1 : -1]


def _known_names(text: bytes) -> list[str] | None:
    """The decoded array (a list of strings), from the cache or freshly; None when it is
    not a list of strings (the caller then decodes the body the ordinary way)."""
    cache = known_names_cache()
    names = cache.get(text)
    if names is not None:
        return names
    expansion.account(text)
    try:
        names = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(names, list) or not all_str(names):
        return None
    cache.put(text, names, names_bytes(text, len(names)))
    return names


def _loads(body: bytes) -> Any:
    if not body.strip():
        raise WireError("request body is empty (EOF)", malformed=True)
    expansion.account(body)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as first:
        if "depth limit" in str(first):
            # nesting deeper than orjson's 1,024 is refused as such: the recursive fallback
            # below would run to Python's recursion limit, where any code the collector
            # triggers (a finalizer) fails as well
            raise WireError(f"malformed JSON: {first}", malformed=True) from None
        # Go's Decoder reads the first value and ignores trailing bytes; so do we.
        try:
            text = body.decode("utf-8")
            value, _ = json.JSONDecoder().raw_decode(text.lstrip())
            return no_lone_surrogates(value) if "\\u" in text else value
        except (ValueError, RecursionError) as second:
            message = str(first)
            if "integer string conversion" in str(second):  # Python's int-size limit
                message = f"an integer literal has more than {sys.get_int_max_str_digits()} digits"
            raise WireError(f"malformed JSON: {message}", malformed=True) from None


def decode_json(body: bytes) -> Any:
    """The first JSON value of a request body, as Go's decoder reads it (WireError,
    malformed, when there is none): the verbs with small arguments (bind, preempt)."""
    return _loads(body)


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
    cut = _cut_node_names(body)
    if cut is not None:
        head, names_text = cut
        expansion.account(head)
        try:
            data = orjson.loads(head)
        except orjson.JSONDecodeError:
            data = None
        # `{` + `}` parses too, but `{,"NodeNames":...}` is malformed: demand a member.
        big = len(names_text) > MAX_CACHED_NAMES_BYTES
        names = _known_names(names_text) if isinstance(data, dict) and data and not big else None
        if names is not None:
            return _args_from(data, names, names_text, head)
    return _args_from(_loads(body))


def _args_from(
    data: Any, names: list[str] | None = None, names_key: bytes | None = None, rest: bytes | None = None
) -> ExtenderArgs:
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
    if names_key is not None:
        return ExtenderArgs(pod, nodes, names, names_key, rest if nodes is None else None)
    names_raw = fields.get("NodeNames")
    if names_raw is not None:
        if not isinstance(names_raw, list) or not all_str(names_raw):
            raise WireError("ExtenderArgs.NodeNames must be a list of strings")
        names = names_raw
    return ExtenderArgs(pod, nodes, names)


def filter_result(
    feasible_names: list[str] | None,
    feasible_nodes: list[dict[str, Any]] | None,
    failures: Failures | Mapping[str, Status],
    error: str = "",
) -> dict[str, Any]:
    """`failures`: failing names grouped by status (or a name -> status map)."""
    failed, unresolvable = split_failures(failures)
    return {
        "Nodes": None if feasible_nodes is None else {"metadata": {}, "items": feasible_nodes},
        "NodeNames": feasible_names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }


def split_failures(failures: Failures | Mapping[str, Status]) -> tuple[dict[str, str], dict[str, str]]:
    """FailedNodes (Unschedulable: preemption may help) and FailedAndUnresolvableNodes,
    built per status group by C-level `dict.fromkeys`, never per node in Python."""
    if isinstance(failures, Mapping):
        failures = group(failures)
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for status, names in failures:
        (failed if status.code is Code.UNSCHEDULABLE else unresolvable).update(dict.fromkeys(names, status.msg))
    return failed, unresolvable


def error_filter_result(message: str) -> dict[str, Any]:
    """A filter answer carrying only `Error`; counted in extender_error_answers_total
    (every such answer is built here, once)."""
    metrics.count_error_answer("filter")
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None,
            "FailedAndUnresolvableNodes": None, "Error": message}


def host_priority_list(hosts: list[str], scores: list[int]) -> list[dict[str, Any]]:
    return [{"Host": h, "Score": s} for h, s in zip(hosts, scores, strict=True)]


def encode(value: Any) -> bytes:
    return orjson.dumps(value)

