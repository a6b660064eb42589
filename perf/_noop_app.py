"""A do-nothing extender: the HTTP floor on this machine.

Same stack as `extender serve` (gunicorn's master and `ExtenderWorker`, one worker, the
verbs' listener, orjson) but it answers every filter with all candidates feasible and
every prioritize with zeros, on the event loop. Its latency is what no engine
optimisation can remove; the report shows it next to the real server so the gap is
attributable. Run as
`gunicorn perf._noop_app:app -k extender.server.worker.ExtenderWorker -w 1 -b 127.0.0.1:PORT`.
"""

from __future__ import annotations

import orjson

from extender.config import Config
from extender.server.http1 import JSON, Request
from extender.server.listener import LOOP, Routes


def _noop_answer(verb: str, body: bytes) -> bytes:
    args = orjson.loads(body) if body else {}
    names = args.get("NodeNames") or []
    if verb == "filter":
        return orjson.dumps({"Nodes": None, "NodeNames": names, "FailedNodes": {},
                             "FailedAndUnresolvableNodes": {}, "Error": ""})
    return orjson.dumps([{"Host": n, "Score": 0} for n in names])


class NoopApp(Routes):
    """The verbs as `post` routes: a route the tables do not name has its body refused
    before it is read (`Routes.refuse_body`, 404), so they must be declared, not caught
    in `__call__`. Everything is answered on the loop."""

    config = Config(threads=4)

    def __init__(self) -> None:
        super().__init__({"/readyz": lambda: (200, "text/plain", b"ok")},
                         {f"/{verb}": _route(verb) for verb in ("filter", "prioritize")})

    def place(self, request: Request):
        return LOOP


def _route(verb: str):
    return lambda body: (200, JSON, _noop_answer(verb, body))


app = NoopApp()
