"""Answers written from per-candidate-set templates instead of dicts per node.

The node layer keeps its names JSON-encoded, and padded to one width as rows of
`"name"   ,` and `{"Host":"name"   ,"Score":    },` (`padded_rows`), while names and
places stand. kube-scheduler sends each pod's filter a list in a new order, so a
candidate set (`NodeSet.templates is not None`: one resolved from NodeNames, which
later requests with the same text share) is answered by selecting rows through its
positions and writing the score digits in one column: numpy copies, no object per
host. Property tests compare every form with `wire`'s plain dict + orjson encoding.

Slim answers (`--slim-answers`, the default; docs/reference/semantics.md, "Slim
answers") carry what kube-scheduler reads and nothing else: a filter answer with a
feasible node has empty failure maps, a prioritize answer lists only the hosts whose
score differs from a base (the most common score in `--score-mode in-tree`, the lowest
in `scaled`), shifted by it (an absent host scores 0, and adding the same number to
every host's total never changes which one wins).

A filter answer also tells what the next prioritize call's NodeNames will be
(`expect_prioritize`): its feasible names, registered with the node layer under the
text kube-scheduler will send.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import orjson

from extender.api.candidates import Candidates, charged
from extender.api.templatecache import (
    json_names,
    new_templates,
    template_budget,
    template_size,
    universe_json_names,
)
from extender.api.wire import (
    EncodedNames,
    encode,
    filter_result,
    host_priority_list,
    known_names_cache,
    names_bytes,
)
from extender.framework import Code, FilterOutcome
from extender.framework.verdicts import Failures, Verdict
from extender.state.nodeset import NodeSet, Reads, object_array
from extender.state.snapshot import ClusterSnapshot

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
            nodes.templates.put(seen, b"", template_size(b""))
    if hit is None:
        hit = write()
        if not first and len(hit) <= MAX_REMEMBERED_ANSWER:
            with _LOCK:
                nodes.templates.put(key, hit, template_size(hit))
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
    names = json_names(verdict.nodes)
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
PADDING_WASTE = 0.25  # padded rows only while padding adds at most this share of the bytes
PADDED_MIN = 256  # and for this many candidates or more (smaller answers are cheap joins)


def padded_rows(nodes: NodeSet, head: bytes, tail: bytes) -> tuple[np.ndarray, int] | None:
    """(rows, end): one `head<JSON name><spaces>tail` row per node of the candidates'
    universe (the node layer), in position order, all as wide as the longest (JSON
    allows the spaces; a vector of fixed-size byte strings, numpy's void type, which it
    selects with one copy loop), and the offset in a row where `tail` starts. Built once
    per node layer and kept while names and places stand, so a candidate list never
    seen before (kube-scheduler sends a new order for every pod) is answered by a row
    selection through its positions (`rows[nodes.uidx[...]]`) and a few column writes,
    numpy copies instead of an object per host. None for a set that serves a single
    request (no templates), for small sets, and when the names differ so much in length
    that the padding would bloat the answer or a name holds a space (the spaces must be
    padding alone: `feasible_names_text`)."""
    if nodes.templates is None or len(nodes) < PADDED_MIN:
        return None
    hit = nodes.universe.memo(("padded rows", head, tail),
                              lambda: _padded(universe_json_names(nodes.universe), head, tail), Reads.TAINTS)
    return None if hit[0] is None else hit


def _padded(encoded: np.ndarray, head: bytes, tail: bytes) -> tuple:
    names = encoded.tolist()
    if not names:
        return (None,)
    widest = max(map(len, names))
    if widest * len(names) > (1 + PADDING_WASTE) * sum(map(len, names)) or b" " in b"".join(names):
        return (None,)
    text = b"".join(head + name.ljust(widest) + tail for name in names)
    rows = np.frombuffer(text, dtype=np.dtype((np.void, len(text) // len(names))))  # read-only
    return rows, len(head) + widest


def slim_filter_json(verdict: Verdict) -> bytes:
    """The feasible candidates' names and empty failure maps: the feasible rows of the
    node layer's padded names (`"name"  ,`), or a join of the set's pre-encoded names."""
    feasible = verdict.feasible()
    padded = padded_rows(verdict.nodes, b"", b",")
    if padded is not None:  # one copy of the rows, one into the answer (without the last comma)
        rows = padded[0][verdict.nodes.uidx[feasible]]
        return b"".join((_SLIM_HEAD, memoryview(rows.view(np.uint8))[:-1], _SLIM_TAIL))
    return _SLIM_HEAD + b",".join(json_names(verdict.nodes)[feasible].tolist()) + _SLIM_TAIL


def feasible_names_text(answer: bytes, padded: bool = False) -> bytes | None:
    """The feasible names of a slim filter answer as a compact JSON array (`["a","b"]`,
    what Go's encoder writes for them), or None when the answer is not a slim one (a
    failure map) or has spaces. `padded`: the answer's names hold no space, so every
    space in it is padding between rows, which is dropped."""
    if not (answer.startswith(_SLIM_HEAD) and answer.endswith(_SLIM_TAIL)):
        return None  # (neither the head nor the tail holds a space)
    body = memoryview(answer)[len(_SLIM_HEAD):len(answer) - len(_SLIM_TAIL)]
    if padded:
        chars = np.frombuffer(body, dtype=np.uint8)
        body = memoryview(chars[chars != ord(" ")])
    elif b" " in answer:
        return None
    return b"".join((b"[", body, b"]"))


def expect_prioritize(snapshot: ClusterSnapshot, cands: Candidates, feasible: np.ndarray,
                      answer: bytes = b"") -> None:
    """Register the candidates of the prioritize call kube-scheduler makes next for
    this pod: with this extender the last filter, its NodeNames are this answer's
    feasible names in this order, which Go's encoder writes as `["a","b"]`, our own
    encoding of plain names. Registered under that text (the names cache and the
    layer's candidate sets), that call neither decodes nor looks up a name. Worth it
    for a list this layer had not seen (kube-scheduler's lists come in a new order for
    every pod); a text that differs (escapes, another extender in between) is resolved
    as any other. `answer`: the filter's, whose names are reused when it lists them
    without padding."""
    nodes = cands.nodes
    count = int(np.count_nonzero(feasible))
    if nodes.templates is None or cands.served != 1 or count < 2:
        return
    text = (feasible_names_text(answer, padded=padded_rows(nodes, b"", b",") is not None)
            or b"[" + b",".join(json_names(nodes)[feasible].tolist()) + b"]")
    cache = known_names_cache()
    if cache.get(text) is None:  # decoded only if the call finds no registered set
        cache.put(text, EncodedNames(text, count), names_bytes(text, count))

    def build() -> Candidates:
        subset = NodeSet(None, nodes.universe, None, nodes.uidx[feasible])  # names read when asked
        subset.templates = new_templates(template_budget(len(subset)))
        return Candidates(subset)

    snapshot.nodes.candidates(text, build, charged(text))


_SCORE_SLOT = b"0" * 20  # placeholder digits, overwritten per response


FEW_SCORES = 16  # distinct scores up to which hosts are joined per score


def slim_priority_json(nodes: NodeSet, scores: np.ndarray, signed: bool = False) -> bytes:
    """The HostPriorityList of the hosts whose score differs from a base, with the base
    subtracted (kube-scheduler adds an extender's score to every host's total and
    nothing for a host it does not list: the same order of totals, fewer bytes). The
    base is the lowest score, or with `signed` (`--score-mode in-tree`, where scores are
    not held to 0..10) the most common one, the lowest of equals: hosts below it get a
    negative score. Where most hosts score the top (no intolerable PreferNoSchedule
    taint, say) only the few below it are listed.

    Over a candidate set that serves many requests, the listed rows of its padded
    `{"Host":<name>  ,"Score":<digits>},` rows with the digits written in one column
    (scores right-aligned with spaces), in request order. Otherwise, with few distinct
    scores, hosts grouped by score, highest first: one C-level join of pre-encoded
    names per score; with more, `{"Host":`, each listed host's pre-encoded name and its
    score's `,"Score":<digits>},` gathered and joined once, in request order."""
    if not len(scores):
        return b"[]"
    above = scores - scores.min()  # >= 0
    top = int(above.max())
    if not top:
        return b"[]"
    counts = np.bincount(above) if top < 1 << 16 else None
    base = 0
    if signed:
        if counts is not None:
            base = int(np.argmax(counts))
        else:
            values, seen = np.unique(above, return_counts=True)
            base = int(values[np.argmax(seen)])
    shifted = above - base
    listed = np.flatnonzero(shifted)
    low, high = -base, top - base
    width = max(len(str(low)), len(str(high)))
    if width <= LOOKUP_WIDTH:
        padded = padded_rows(nodes, b'{"Host":', b',"Score":' + b" " * width + b"},")
        if padded is not None:
            rows, end = padded
            out = rows[nodes.uidx[listed]]
            digits = np.ndarray(shape=(len(listed),), dtype=np.dtype((np.void, width)), buffer=out,
                                offset=end + len(b',"Score":'), strides=(out.itemsize,))  # the digits of each row
            digits[...] = _score_cells(width)[shifted[listed] + _NEGATIVES[width]]
            return b"".join((b"[", memoryview(out.view(np.uint8))[:-1], b"]"))
    values = (np.flatnonzero(counts) if counts is not None else np.unique(above))[::-1] - base
    if len(values) - 1 <= FEW_SCORES:  # values hold 0 (the base), never listed
        names = json_names(nodes)
        parts = []
        for value in values[values != 0].tolist():
            tail = b',"Score":%d}' % value
            parts.append(b'{"Host":' + (tail + b',{"Host":').join(names[shifted == value].tolist()) + tail)
        return b"[" + b",".join(parts) + b"]"
    pieces = np.empty(3 * len(listed), dtype=object)
    pieces[0::3] = b'{"Host":'
    pieces[1::3] = json_names(nodes)[listed]
    pieces[2::3] = _score_tails(shifted[listed], low, high)
    return b"[" + b"".join(pieces.tolist())[:-1] + b"]"


_TAILS: tuple[int, np.ndarray] = (0, np.empty(0, dtype=object))  # (the score of row 0, the rows)


def _score_tails(values: np.ndarray, low: int, high: int) -> np.ndarray:
    """`,"Score":<digits>},` for each of `values` (in low..high), from a table for small
    ones (replaced whole, never edited: the verbs' threads read it without a lock)."""
    global _TAILS
    if high - low >= 1 << 16:
        return object_array([b',"Score":%d},' % v for v in values.tolist()])
    start, rows = _TAILS
    if low < start or high >= start + len(rows):
        start, stop = min(low, start, -1024), max(high + 1, start + len(rows), 1024)
        rows = object_array([b',"Score":%d},' % v for v in range(start, stop)])
        _TAILS = (start, rows)
    return rows[values - start]


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
            nodes.templates.put(("width", width), template, template_size(template))
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


_NEGATIVES = {w: 10 ** (w - 1) - 1 for w in range(1, LOOKUP_WIDTH + 1)}  # the negative scores `width` holds
_SCORE_CELLS: dict[int, np.ndarray] = {}


def _score_cells(width: int) -> np.ndarray:
    """Cell `s + _NEGATIVES[width]`: score s (negative ones too) as `width` characters,
    right-aligned with spaces, as fixed-size byte strings; built once per width."""
    cells = _SCORE_CELLS.get(width)
    if cells is None:
        text = b"".join(str(s).rjust(width).encode() for s in range(-_NEGATIVES[width], 10 ** width))
        cells = _SCORE_CELLS[width] = np.frombuffer(text, dtype=np.dtype((np.void, width)))
    return cells


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
    names = json_names(nodes).tolist()
    head, tail = b'{"Host":', b',"Score":' + _SCORE_SLOT[:width] + b"}"
    text = b"[" + head + (tail + b"," + head).join(names) + tail + b"]" if names else b"[]"
    sizes = np.fromiter(map(len, names), dtype=np.intp, count=len(names))
    starts = 1 + np.concatenate(([0], np.cumsum(sizes + len(head) + len(tail) + 1)[:-1])).astype(np.intp)
    offsets = starts + len(head) + sizes + len(b',"Score":')
    return np.frombuffer(text, dtype=np.uint8).copy(), offsets
