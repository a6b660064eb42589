"""What the /explain and /drift Flask app is handed by the listener (issue #38: a WSGI
environ built by hand, no werkzeug test utilities): what werkzeug reads back from it is
what the request said, and nothing the request did not say."""

from __future__ import annotations

import flask
import orjson
import pytest

from extender.server.explain_routes import call_wsgi, wsgi_environ
from extender.server.http1 import Request


def echo_app() -> flask.Flask:
    app = flask.Flask("echo")

    @app.route("/explain/<path:rest>", methods=["GET", "POST"])
    def echo(rest: str) -> flask.Response:
        req = flask.request
        return flask.Response(orjson.dumps({
            "method": req.method, "path": req.path, "rest": rest, "args": req.args.to_dict(flat=False),
            "headers": sorted(req.headers.keys()), "authorization": req.headers.get("Authorization"),
            "x-authorization": req.headers.get("X-Extender-Authorization"), "remote": req.remote_addr,
            "body": req.get_data().decode(),
        }), 201, {"X-Seen": "yes"}, mimetype="application/json")

    return app


def ask(method: str, target: str, body: bytes = b"", headers: dict[bytes, bytes] | None = None,
        client: str = "10.1.2.3") -> tuple[str, list[tuple[str, str]], dict]:
    request = Request(method, target, body)
    request.headers = headers or {}
    request.client = client
    path, _, query = target.partition("?")
    status, answer_headers, data = call_wsgi(echo_app(), wsgi_environ(request, path, query))
    return status, answer_headers, orjson.loads(data) if data else {}


def test_path_query_credentials_and_client_reach_the_app():
    status, headers, seen = ask("GET", "/explain/ns/p%6Fd?nodes=all&candidates=a,b&nodes=summary", headers={
        b"authorization": b"Bearer t", b"x-extender-authorization": b"Bearer u", b"cookie": b"c=1"})
    assert status.startswith("201 ")
    assert ("X-Seen", "yes") in headers
    assert seen["path"] == "/explain/ns/pod" and seen["rest"] == "ns/pod"  # percent-decoded
    assert seen["args"] == {"nodes": ["all", "summary"], "candidates": ["a,b"]}
    assert (seen["authorization"], seen["x-authorization"]) == ("Bearer t", "Bearer u")
    assert "Cookie" not in seen["headers"]  # only the credentials are passed on
    assert seen["remote"] == "10.1.2.3"


def test_head_is_asked_as_get_and_a_get_body_is_dropped():
    _, _, seen = ask("HEAD", "/explain/ns/pod")
    assert seen["method"] == "GET"
    _, _, seen = ask("GET", "/explain/ns/pod", body=b'{"a":1}')
    assert seen["body"] == ""


def test_a_post_body_arrives_whole():
    body = orjson.dumps({"kind": "Pod", "metadata": {"name": "x" * 5000}})
    _, _, seen = ask("POST", "/explain/posted", body=body)
    assert seen["method"] == "POST" and seen["body"].encode() == body


@pytest.mark.parametrize(("target", "rest"), [
    ("/explain/ns/%C3%A9", "ns/é"),  # UTF-8 escapes decode to text
    ("/explain/ns/pod#fragment", "ns/pod"),  # a fragment is not part of the path
])
def test_escapes_and_fragments(target, rest):
    assert ask("GET", target)[2]["rest"] == rest


def test_an_app_that_never_starts_a_response_is_an_error():
    def silent(environ, start_response):
        return [b"body"]

    request = Request("GET", "/explain/a/b")
    with pytest.raises(ValueError):
        call_wsgi(silent, wsgi_environ(request, "/explain/a/b", ""))
