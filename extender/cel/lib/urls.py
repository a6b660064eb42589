"""Kubernetes CEL ``urls`` library (``kubernetes.URL``).

``url(s)`` validates with Go's ``url.ParseRequestURI`` (absolute URI or absolute path)
and then re-parses with ``url.Parse``, because ParseRequestURI folds a ``#fragment`` into
the path or query; ``isURL`` is the ParseRequestURI check alone.  The accessors return
Go's ``URL`` fields: ``getHost`` keeps IPv6 brackets, ``getHostname`` drops them,
``getEscapedPath`` re-escapes, ``getQuery`` is ``URL.Query()`` (a map of lists, invalid
pairs dropped).  Byte strings that are not UTF-8 (``%FF`` decoded) become U+FFFD.
"""

from __future__ import annotations

from typing import Any

from extender.cel.lib import gourl
from extender.cel.values import EvalError, cel_function, kind, want


class URLValue:
    """Opaque CEL value of type ``kubernetes.URL``; equal when the parsed structs are equal
    field by field (so ``url('HTTP://x') == url('http://x')``, as in Go)."""

    cel_type = "URL"
    strict_equality = True
    __slots__ = ("text", "url")

    def __init__(self, text: str, url: gourl.URL) -> None:
        self.text, self.url = text, url

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, URLValue):  # Kubernetes' Equal: no such overload
            raise TypeError("URLValue.Equal: no such overload")
        return self.url == other.url

    def __repr__(self) -> str:
        return f"url({self.text!r})"


def _s(b: bytes) -> str:
    return str(b.decode("utf-8", "replace"))


def _url(v: Any) -> gourl.URL:
    if not isinstance(v, URLValue):
        raise TypeError(kind(v))
    return v.url


@cel_function("url")
def url(s: Any) -> Any:
    want(s, "string")
    try:
        gourl.parse_request_uri(str(s))
        parsed = gourl.parse(str(s))
    except gourl.URLError as exc:
        raise EvalError(f"URL parse error during conversion from string: {exc}") from None
    return URLValue(str(s), parsed)


@cel_function("isURL")
def is_url(s: Any) -> Any:
    want(s, "string")
    try:
        gourl.parse_request_uri(str(s))
    except gourl.URLError:
        return False
    return True


@cel_function("getScheme")
def get_scheme(u: Any) -> Any:
    return _s(_url(u).scheme)


@cel_function("getHost")
def get_host(u: Any) -> Any:
    return _s(_url(u).host)


@cel_function("getHostname")
def get_hostname(u: Any) -> Any:
    return _s(gourl.split_host_port(_url(u).host)[0])


@cel_function("getPort")
def get_port(u: Any) -> Any:
    return _s(gourl.split_host_port(_url(u).host)[1])


@cel_function("getEscapedPath")
def get_escaped_path(u: Any) -> Any:
    return _s(gourl.escaped_path(_url(u)))


@cel_function("getQuery")
def get_query(u: Any) -> Any:
    query = gourl.parse_query(_url(u).raw_query)
    return dict({_s(k): list([_s(v) for v in vs]) for k, vs in query.items()})


FUNCTIONS = {"url": url, "isURL": is_url, "getScheme": get_scheme, "getHost": get_host,
             "getHostname": get_hostname, "getPort": get_port,
             "getEscapedPath": get_escaped_path, "getQuery": get_query}
