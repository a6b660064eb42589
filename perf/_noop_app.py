"""A do-nothing extender: the HTTP floor on this machine.

Same stack as `extender serve` (gunicorn with `InlineWorker`, one worker, orjson;
`raw_app` is a bare WSGI callable with the `answer_verb` entry point the worker uses
for buffered verb requests, `app` the Flask variant) but it answers every filter with all candidates feasible and every prioritize with zeros.
Its latency is what no engine optimisation can remove; the report shows it next to
the real server so the gap is attributable. Run as
`gunicorn perf._noop_app:raw_app -k extender.server.worker.InlineWorker -w 1 -b 127.0.0.1:PORT`.
"""

from __future__ import annotations

import orjson
from flask import Flask, Response, request

app = Flask("noop-extender")
JSON = "application/json"


@app.post("/filter")
def filter_view() -> Response:
    args = orjson.loads(request.get_data(cache=False))
    names = args.get("NodeNames")
    nodes = args.get("Nodes")
    body = {"Nodes": nodes, "NodeNames": names, "FailedNodes": {},
            "FailedAndUnresolvableNodes": {}, "Error": ""}
    return Response(orjson.dumps(body), mimetype=JSON)


@app.post("/prioritize")
def prioritize_view() -> Response:
    args = orjson.loads(request.get_data(cache=False))
    names = args.get("NodeNames")
    if names is None:
        names = [n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []]
    return Response(orjson.dumps([{"Host": n, "Score": 0} for n in names]), mimetype=JSON)


@app.get("/readyz")
def readyz() -> Response:
    return Response(b"ok", mimetype="text/plain")


def _noop_answer(verb: str, body: bytes) -> bytes:
    args = orjson.loads(body) if body else {}
    names = args.get("NodeNames") or []
    if verb == "filter":
        return orjson.dumps({"Nodes": None, "NodeNames": names, "FailedNodes": {},
                             "FailedAndUnresolvableNodes": {}, "Error": ""})
    return orjson.dumps([{"Host": n, "Score": 0} for n in names])


def raw_app(environ: dict, start_response) -> list[bytes]:
    """The same answers as a bare WSGI callable (no Flask/werkzeug request objects):
    the difference to `app` is what the web framework costs per request."""
    path = environ.get("PATH_INFO", "")
    if path == "/readyz":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    if path not in ("/filter", "/prioritize"):
        start_response("404 Not Found", [("Content-Length", "0")])
        return [b""]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = _noop_answer(path[1:], environ["wsgi.input"].read(length) if length else b"")
    start_response("200 OK", [("Content-Type", JSON), ("Content-Length", str(len(body)))])
    return [body]


# `InlineWorker` answers buffered verb requests through this, as it does the extender's
raw_app.answer_verb = lambda verb, size, read: (200, _noop_answer(verb, read()))
