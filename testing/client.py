"""An app of `extender.server.app` served in this process, and a client for it.

`Client(app)` starts the verbs' listener (`extender.server.app.serve`: the same lanes,
limits and error answers as `extender serve`) on a free loopback port, in a thread, and
talks HTTP/1.1 to it over one kept-alive connection; the listener stops when the client
is closed or collected."""

from __future__ import annotations

import http.client
import weakref
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.server.app import App, serve


@dataclass
class Response:
    status_code: int
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def json(self) -> Any:
        return orjson.loads(self.data)

    def get_json(self) -> Any:
        return self.json


class Client:
    def __init__(self, app: App) -> None:
        self.app = app
        self.listener = serve(app, app.config, address="127.0.0.1:0").start()
        self.port = self.listener.port
        self.conn: http.client.HTTPConnection | None = None
        self._finalizer = weakref.finalize(self, self.listener.stop)

    def request(self, method: str, path: str, data: bytes | None = None, json: Any = None,
                content_type: str = "application/json") -> Response:
        if json is not None:
            data = orjson.dumps(json)
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers={"Content-Type": content_type})
                response = self.conn.getresponse()
                body = response.read()
                if response.will_close:
                    self._drop()
                return Response(response.status, body, {k.lower(): v for k, v in response.getheaders()})
            except (ConnectionError, http.client.RemoteDisconnected):
                self._drop()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, data: bytes | None = None, json: Any = None,
             content_type: str = "application/json") -> Response:
        return self.request("POST", path, data if data is not None else b"", json, content_type)

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        self._drop()
        self._finalizer()

