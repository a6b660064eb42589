"""The API server's service proxy, added to the API-server double:
``/api/v1/namespaces/{ns}/services/[scheme:]{name}[:port]/proxy/{path}`` forwards the
request to the Service's backend and relays the answer, as kube-apiserver does
(`pkg/registry/core/service/proxy.go`, read, not copied): the Service must exist in the
double's truth and name the port (by name or number); the caller's Authorization is
not forwarded; an unreachable backend answers 503 `error trying to reach service`.

Backends are given by the test (the double has no Endpoints controller)::

    add_service_proxy(api, {("scheduling-extender", "extended-scheduler-metrics"): "127.0.0.1:8889"})
"""

from __future__ import annotations

import http.client
import json
import re
from urllib.parse import unquote, urlsplit

from testing.apiserver import FakeApiServer

_PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/]+)/proxy(/.*)?$")
_RELAYED = ("Content-Type", "Retry-After")


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()


def add_service_proxy(api: FakeApiServer, backends: dict[tuple[str, str], str]) -> None:
    """Serve the proxy subresource of the Services in `backends` ((ns, name) -> host:port)."""
    base = api._httpd.RequestHandlerClass

    class ProxyHandler(base):
        def do_GET(self) -> None:  # noqa: N802
            if not self._proxied("GET"):
                super().do_GET()

        def do_POST(self) -> None:  # noqa: N802
            if not self._proxied("POST"):
                super().do_POST()

        def _reply(self, code: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(code)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _proxied(self, method: str) -> bool:
            url = urlsplit(self.path)
            match = _PROXY.match(url.path)
            if match is None:
                return False
            api.requests.append(f"{method} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            namespace, target, rest = match.group(1), unquote(match.group(2)), match.group(3) or "/"
            parts = target.split(":")
            if len(parts) == 3:  # scheme:name:port
                parts = parts[1:]
            name, port = parts[0], parts[1] if len(parts) > 1 else ""
            service = api.get("services", name, namespace)
            json_type = {"Content-Type": "application/json"}
            if service is None:
                self._reply(404, _status(404, "NotFound", f'services "{name}" not found'), json_type)
                return True
            ports = service.get("spec", {}).get("ports") or []
            if port and not any(port in (p.get("name"), str(p.get("port"))) for p in ports):
                self._reply(503, _status(503, "ServiceUnavailable",
                                         f'no endpoints available for service "{target}"'), json_type)
                return True
            backend = backends.get((namespace, name))
            if backend is None:
                self._reply(503, _status(503, "ServiceUnavailable",
                                         f'no endpoints available for service "{name}"'), json_type)
                return True
            host, _, backend_port = backend.rpartition(":")
            conn = http.client.HTTPConnection(host, int(backend_port), timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", "host")}
                conn.request(method, rest + (f"?{url.query}" if url.query else ""), body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                relayed = {k: answer.getheader(k) for k in _RELAYED if answer.getheader(k)}
                self._reply(answer.status, data, relayed)
            except OSError as exc:
                self._reply(503, _status(503, "ServiceUnavailable", f"error trying to reach service: {exc}"),
                            json_type)
            finally:
                conn.close()
            return True

    api._httpd.RequestHandlerClass = ProxyHandler
