"""The four verbs as bytes in, (status, bytes) out: what `extender.server.app` answers
for `POST /filter`, `/prioritize`, `/bind`, `/preempt`.

Error mapping: malformed JSON -> 400, well-formed but invalid args -> 200 with `Error`
set for filter (what kube-scheduler expects) and 400 for prioritize, including a score
plugin failing on the pod (e.g. a preferred term that does not parse fails PreScore:
the input is at fault), a cluster state that cannot give a verdict (not synced yet,
stale: `extender.engine.gate`) -> 200 with `Error` for filter and bind, 503 for prioritize and
preempt, anything unexpected -> 500. Clients never see a stack trace; every error is
logged. (A body over the limit is refused with 413 before it is read, by the listener.)
"""

from __future__ import annotations

import logging
import time

from extender import metrics
from extender.api.wire import WireError, decode_args, decode_json, encode, error_filter_result
from extender.engine.binding import decode_binding_args
from extender.engine.extender import Extender, ScoringError
from extender.engine.gate import StateNotReady
from extender.engine.preemption import decode_preemption_args
from extender.model.parse import ModelError
from extender.server.inflight_bytes import SMALL_REQUEST
from extender.state import gcfreeze

log = logging.getLogger("extender.http")
# request body -> the verb's arguments (WireError: malformed or invalid)
DECODE = {
    "filter": decode_args,
    "prioritize": decode_args,
    "bind": lambda body: decode_binding_args(decode_json(body)),
    "preempt": lambda body: decode_preemption_args(decode_json(body)),
}
VERB_NAMES = tuple(DECODE)


def answer(engine: Extender, verb: str, body: bytes) -> tuple[int, bytes]:
    """Status code and JSON body for one verb call; records the HTTP metrics. A large
    body (a Nodes-mode request) is answered with the cyclic collector paused
    (`extender.state.gcfreeze`): its millions of objects otherwise set off full passes with
    the GIL held, which every other thread (probes included) waited for."""
    if len(body) > SMALL_REQUEST:
        with gcfreeze.collector_paused():
            return _answer(engine, verb, body)
    return _answer(engine, verb, body)


def _answer(engine: Extender, verb: str, body: bytes) -> tuple[int, bytes]:
    started = time.perf_counter()
    try:
        result = 200, getattr(engine, verb)(DECODE[verb](body))
    except WireError as exc:
        log.warning("bad request", extra={"verb": verb, "error": str(exc)})
        if verb == "filter" and not exc.malformed:
            result = 200, encode(error_filter_result(str(exc)))
        else:
            result = 400, encode({"error": str(exc)})
    except ModelError as exc:
        log.warning("invalid arguments", extra={"verb": verb, "error": str(exc)})
        result = 400, encode({"error": str(exc)})
    except StateNotReady as exc:  # prioritize, preempt: no Error field (extender.engine.gate)
        result = 503, encode({"error": str(exc)})
    except ScoringError as exc:  # a plugin refused the pod: the request is at fault
        log.warning("scoring failed", extra={"verb": verb, "error": str(exc)})
        result = 400, encode({"error": str(exc)})
    except Exception:
        log.exception("internal error", extra={"verb": verb})
        result = 500, encode({"error": "internal error (see the extender's log)"})
    observe(verb, result[0], started)
    metrics.child(metrics.HTTP_BODY_BYTES_TOTAL, verb, "request").inc(len(body))
    metrics.child(metrics.HTTP_BODY_BYTES_TOTAL, verb, "answer").inc(len(result[1]))
    return result


def observe(verb: str, code: int, started: float) -> None:
    metrics.child(metrics.HTTP_REQUESTS_TOTAL, verb, str(code)).inc()
    metrics.child(metrics.HTTP_REQUEST_DURATION, verb).observe(time.perf_counter() - started)


def verb_of(path: str) -> str | None:
    """A verb's name for `/filter` or `/<prefix>/filter` (prefix not starting
    with a slash); None otherwise."""
    head, _, last = path.rpartition("/")
    if last not in VERB_NAMES:
        return None
    if head == "" or (head.startswith("/") and len(head) > 1 and head[1] != "/"):
        return last
    return None
