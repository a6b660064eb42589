"""Answers written from per-candidate-set templates instead of dicts per node.

kube-scheduler sends the same NodeNames list pod after pod, so the candidate set is
shared between requests (`NodeSet.templates is not None`); its names are JSON-encoded
once and the per-request work is a few C-level joins (filter) or vectorised digit
writes (prioritize). Property tests compare both with `wire`'s plain dict + orjson
encoding.

Slim answers (`--slim-answers`, the default; docs/reference/semantics.md, "Slim
answers") carry what kube-scheduler reads and nothing else: a filter answer with a
feasible node has empty failure maps, a prioritize answer lists only the hosts whose
score is above the lowest, shifted down by it (an absent host scores 0, and adding the
same number to every host's total never changes which one wins).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import orjson

from extender.api.wire import encode, filter_result, host_priority_list
from extender.framework import Code, FilterOutcome
from extender.framework.verdicts import Failures, Verdict
from extender.state.candidates import Candidates
from extender.state.nodeset import NodeSet

_LOCK = threading.Lock()
MAX_REMEMBERED_ANSWER = 512 << 10  # bytes; larger answers are written, not remembered


def remembered(nodes: NodeSet, key: tuple, write: Callable[[], bytes]) -> bytes:
    """An answer remembered with its candidate set by the exact result it encodes
    (pods of one workload get the same verdict or scores while the node layer stands),
    so only the encoding is skipped, never a computation.

    An answer is kept the second time its result is seen (a small marker remembers the
    first): under churn most scores and spread verdicts are new with every bind, and
    keeping each of them pushed the verdicts that do repeat out of the LRU."""
    seen = ("seen", hash(key))
    with _LOCK:
        hit = nodes.templates.get(key)
        first = hit is None and nodes.templates.get(seen) is None
        if first:
            nodes.templates[seen] = b""
    if hit is None:
        hit = write()
        if not first and len(hit) <= MAX_REMEMBERED_ANSWER:
            with _LOCK:
                nodes.templates[key] = hit
    return hit


def filter_answer(cands: Candidates, outcome: FilterOutcome, failures: Failures | None = None,
                  slim: bool = False) -> bytes:
    """The ExtenderFilterResult of a filter outcome as JSON: `failures` (default: the
    outcome's) by status, none when `slim`; the objects of the request's own nodes in
    Nodes mode. A batch verdict with a feasible node over a candidate set that serves
    many requests is joined from the set's pre-encoded names, without a dict per node."""
    verdict = outcome.verdict
    if slim:
        if cands.raw_by_name is not None:
            return encode(filter_result(None, [cands.raw_by_name[name] for name in outcome.feasible_names], []))
        return slim_filter_json(verdict)
    if (failures is None and cands.raw_by_name is None and verdict is not None
            and cands.nodes.templates is not None and cands.nodes.distinct and (verdict.status_of < 0).any()):
        return filter_json(verdict, outcome.extra)
    if failures is None:
        failures = outcome.failures
    if cands.raw_by_name is not None:
        items = [cands.raw_by_name[name] for name in outcome.feasible_names]
        return encode(filter_result(None, items, failures))
    return encode(filter_result(outcome.feasible_names, None, failures))


def filter_json(verdict: Verdict, extra: Failures = ()) -> bytes:
    """`filter_result` of a batch verdict as JSON, joined from the candidate set's
    pre-encoded names: per status group, `"a":M,"b":M` is one C-level join."""
    if extra:
        return _filter_json(verdict, extra)
    status_of = verdict.status_of
    if len(verdict.table) < 128:  # a quarter of the key to hash and hold, same meaning
        status_of = status_of.astype(np.int8)
    key = ("filter", status_of.tobytes(), tuple((s.code, s.msg) for s in verdict.table))
    return remembered(verdict.nodes, key, lambda: _filter_json(verdict, extra))


def _filter_json(verdict: Verdict, extra: Failures) -> bytes:
    names = verdict.nodes.json_names()
    groups: dict[bool, list[bytes]] = {True: [], False: []}  # Unschedulable?
    for status, mask in verdict.groups():
        value = b":" + orjson.dumps(status.msg)
        groups[status.code is Code.UNSCHEDULABLE].append((value + b",").join(names[mask].tolist()) + value)
    for status, failing in extra:
        value = b":" + orjson.dumps(status.msg)
        groups[status.code is Code.UNSCHEDULABLE].append(b",".join(orjson.dumps(n) + value for n in failing))
    feasible = b",".join(names[verdict.feasible()].tolist())
    return b"".join((
        b'{"Nodes":null,"NodeNames":[', feasible, b'],"FailedNodes":{', b",".join(groups[True]),
        b'},"FailedAndUnresolvableNodes":{', b",".join(groups[False]), b'},"Error":""}',
    ))


_SLIM_HEAD = b'{"Nodes":null,"NodeNames":['
_SLIM_TAIL = b'],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def slim_filter_json(verdict: Verdict) -> bytes:
    """The feasible candidates' names and empty failure maps, joined from the candidate
    set's pre-encoded names; remembered by the feasible mask (packed: 1 bit a node)."""
    feasible = verdict.feasible()

    def write() -> bytes:
        return _SLIM_HEAD + b",".join(verdict.nodes.json_names()[feasible].tolist()) + _SLIM_TAIL

    if verdict.nodes.templates is None:
        return write()
    return remembered(verdict.nodes, ("slim filter", np.packbits(feasible).tobytes()), write)


_SCORE_SLOT = b"0" * 20  # placeholder digits, overwritten per response


def slim_priority_json(nodes: NodeSet, scores: np.ndarray) -> bytes:
    """The HostPriorityList of the hosts whose score is above the lowest, with the
    lowest subtracted (kube-scheduler adds an extender's score to every host's total
    and nothing for a host it does not list: the same order of totals, fewer bytes).
    Hosts are grouped by score, highest first, request order within a score: one
    C-level join per distinct score."""
    if not len(scores):
        return b"[]"
    shifted = scores - scores.min()
    listed = np.flatnonzero(shifted)
    if not len(listed):
        return b"[]"

    def write() -> bytes:
        values = shifted[listed]
        order = np.argsort(-values, kind="stable")
        hosts, values = listed[order], values[order]
        cuts = [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]
        names = nodes.json_names()
        parts = []
        for start, end in zip(cuts, cuts[1:]):  # noqa: B905 - cuts[1:] is one shorter
            tail = b',"Score":%d}' % int(values[start])
            parts.append(b'{"Host":' + (tail + b',{"Host":').join(names[hosts[start:end]].tolist()) + tail)
        return b"[" + b",".join(parts) + b"]"

    if nodes.templates is None:
        return write()
    return remembered(nodes, ("slim prioritize", shifted.tobytes()), write)


def host_priority_json(nodes: NodeSet, scores: np.ndarray) -> bytes:
    """The HostPriorityList of `nodes.order` with `scores`, as JSON.

    A candidate set that serves many requests keeps a template per score width: the
    JSON of every `{"Host":...,"Score":<width digits>}` entry and the offsets of the
    digits, which are then written for all hosts at once. Scores narrower than the
    width are padded with spaces before the digits (`"Score": 7`), which JSON allows."""
    if nodes.templates is None or (len(scores) and int(scores.min()) < 0):
        return encode(host_priority_list(nodes.order, scores.tolist()))
    return remembered(nodes, ("prioritize", scores.tobytes()), lambda: _fill(nodes, scores))


def _fill(nodes: NodeSet, scores: np.ndarray) -> bytes:
    width = len(str(int(scores.max()))) if len(scores) else 1
    with _LOCK:
        template = nodes.templates.get(("width", width))
    if template is None:
        template = _template(nodes, width)
        with _LOCK:
            nodes.templates[("width", width)] = template
    text, offsets = template
    out = text.copy()
    if width <= LOOKUP_WIDTH:  # every score plugins normally give: one gather, one write
        out[offsets[:, None] + np.arange(width)] = _digit_rows(width)[scores]
        return out.tobytes()
    for i in range(width):
        place = 10 ** (width - 1 - i)
        digits = (scores // place) % 10 + ord("0")
        if i < width - 1:
            digits = np.where(scores >= place, digits, ord(" "))
        out[offsets + i] = digits
    return out.tobytes()


LOOKUP_WIDTH = 4  # scores below 10**4 are written from a table of their digits
_DIGIT_ROWS: dict[int, np.ndarray] = {}


def _digit_rows(width: int) -> np.ndarray:
    """Row s: score s as `width` characters, right-aligned with spaces (what the
    digit loop in `_fill` writes), built once per width."""
    rows = _DIGIT_ROWS.get(width)
    if rows is None:
        text = b"".join(str(s).rjust(width).encode() for s in range(10 ** width))
        rows = _DIGIT_ROWS[width] = np.frombuffer(text, dtype=np.uint8).reshape(-1, width)
    return rows


def _template(nodes: NodeSet, width: int) -> tuple[np.ndarray, np.ndarray]:
    """`[{"Host":<name>,"Score":<width digits>},...]` in one C-level join of the
    pre-encoded names, and the offset of each entry's digits."""
    names = nodes.json_names().tolist()
    head, tail = b'{"Host":', b',"Score":' + _SCORE_SLOT[:width] + b"}"
    text = b"[" + head + (tail + b"," + head).join(names) + tail + b"]" if names else b"[]"
    sizes = np.fromiter(map(len, names), dtype=np.intp, count=len(names))
    starts = 1 + np.concatenate(([0], np.cumsum(sizes + len(head) + len(tail) + 1)[:-1])).astype(np.intp)
    offsets = starts + len(head) + sizes + len(b',"Score":')
    return np.frombuffer(text, dtype=np.uint8).copy(), offsets
