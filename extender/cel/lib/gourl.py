"""Go ``net/url`` (Go 1.25) ``Parse`` / ``ParseRequestURI``, on UTF-8 bytes like Go.

The ``URL`` fields mirror Go's struct (CEL equality of URLs compares them all); plus ``EscapedPath``, ``Hostname``, ``Port`` and
``ParseQuery``.  ``urllib.parse`` is far more lenient (no control-character, escape, port
or userinfo checks), so it would accept URLs Kubernetes rejects.  Errors are
``URLError`` with Go's text, e.g. ``parse "x": invalid URI for request``.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.cel.lib.goquote import go_quote
from extender.cel.lib.netip import AddrError, parse_addr

PATH, HOST, ZONE, USER, QUERY, FRAGMENT = range(6)
_HEXDIGITS = b"0123456789abcdefABCDEF"
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


class URLError(ValueError):
    pass


@dataclass(slots=True)
class URL:
    scheme: bytes = b""
    opaque: bytes = b""
    host: bytes = b""
    path: bytes = b""
    raw_path: bytes = b""
    raw_query: bytes = b""
    force_query: bool = False
    omit_host: bool = False
    user: tuple[bytes, ...] | None = None  # (username,) or (username, password)
    fragment: bytes = b""
    raw_fragment: bytes = b""


def should_escape(c: int, mode: int) -> bool:
    if c in _ALNUM:
        return False
    if mode in (HOST, ZONE) and c in b"!$&'()*+,;=:[]<>\"":
        return False
    if c in b"-_.~":
        return False
    if c in b"$&+,/:;=?@":
        if mode == PATH:
            return c == ord("?")
        if mode == USER:
            return c in b"@/?:"
        if mode == QUERY:
            return True
        if mode == FRAGMENT:
            return False
    return not (mode == FRAGMENT and c in b"!()*")


def unescape(s: bytes, mode: int) -> bytes:
    """Go ``unescape``: validate every ``%XX`` (and host bytes), then decode."""
    i = 0
    while i < len(s):
        c = s[i]
        if c == ord("%"):
            if i + 2 >= len(s) or s[i + 1] not in _HEXDIGITS or s[i + 2] not in _HEXDIGITS:
                raise URLError("invalid URL escape " + go_quote(s[i : i + 3]))
            v = int(s[i + 1 : i + 3], 16)
            if mode == HOST and v < 0x80 and s[i : i + 3] != b"%25":
                raise URLError("invalid URL escape " + go_quote(s[i : i + 3]))
            if mode == ZONE and s[i : i + 3] != b"%25" and v != 0x20 and should_escape(v, HOST):
                raise URLError("invalid URL escape " + go_quote(s[i : i + 3]))
            i += 3
            continue
        if mode in (HOST, ZONE) and c < 0x80 and should_escape(c, mode):
            raise URLError("invalid character " + go_quote(bytes([c])) + " in host name")
        i += 1
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == ord("%"):
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
            continue
        out.append(0x20 if c == ord("+") and mode == QUERY else c)
        i += 1
    return bytes(out)


def escape(s: bytes, mode: int) -> bytes:
    out = bytearray()
    for c in s:
        if not should_escape(c, mode):
            out.append(c)
        elif c == 0x20 and mode == QUERY:
            out.append(ord("+"))
        else:
            out += b"%%%02X" % c
    return bytes(out)


def _scheme(raw: bytes) -> tuple[bytes, bytes]:
    for i, c in enumerate(raw):
        if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A:
            continue
        if 0x30 <= c <= 0x39 or c in b"+-.":
            if i == 0:
                return b"", raw
            continue
        if c == ord(":"):
            if i == 0:
                raise URLError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return b"", raw
    return b"", raw


def _valid_port(port: bytes) -> bool:
    return port == b"" or (port[:1] == b":" and all(0x30 <= c <= 0x39 for c in port[1:]))


def _host(host: bytes) -> bytes:
    if host.startswith(b"["):
        end = host.rfind(b"]")
        if end < 0:
            raise URLError("missing ']' in host")
        port = host[end + 1 :]
        if not _valid_port(port):
            raise URLError(f"invalid port {go_quote(port)} after host")
        inner = host[1:end]
        zone_at = inner.find(b"%25")
        name = unescape(inner[:zone_at] if zone_at >= 0 else inner, HOST)
        zone = unescape(inner[zone_at:], ZONE) if zone_at >= 0 else b""
        # Go 1.25: only an IPv6 address may be bracketed (IPv4-mapped ones included).
        try:
            addr = parse_addr(name.decode("utf-8", "surrogateescape"))
        except AddrError as exc:
            raise URLError(f"invalid host: {exc}") from None
        if addr.is4:
            raise URLError("invalid IP-literal")
        return b"[" + name + zone + b"]" + unescape(port, HOST)
    colon = host.rfind(b":")
    if colon >= 0 and not _valid_port(host[colon:]):
        raise URLError(f"invalid port {go_quote(host[colon:])} after host")
    return unescape(host, HOST)


def _valid_userinfo(s: bytes) -> bool:
    return all(c in _ALNUM or c in b"-._:~!$&'()*+,;=%@" for c in s)


def _parse(raw: bytes, via_request: bool) -> URL:
    if any(c < 0x20 or c == 0x7F for c in raw):
        raise URLError("net/url: invalid control character in URL")
    if raw == b"" and via_request:
        raise URLError("empty url")
    url = URL()
    if raw == b"*":
        url.path = b"*"
        return url
    scheme, rest = _scheme(raw)
    url.scheme = scheme.lower()
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        url.force_query, rest = True, rest[:-1]
    elif b"?" in rest:
        rest, url.raw_query = rest.split(b"?", 1)
    if not rest.startswith(b"/"):
        if url.scheme:
            url.opaque = rest
            return url
        if via_request:
            raise URLError("invalid URI for request")
        if b":" in rest.split(b"/", 1)[0]:
            raise URLError("first path segment in URL cannot contain colon")
    if (url.scheme or (not via_request and not rest.startswith(b"///"))) and (
        rest.startswith(b"//")
    ):
        authority, rest = rest[2:], b""
        if b"/" in authority:
            cut = authority.index(b"/")
            authority, rest = authority[:cut], authority[cut:]
        at = authority.rfind(b"@")
        url.host = _host(authority[at + 1 :])
        if at >= 0:
            userinfo = authority[:at]
            if not _valid_userinfo(userinfo):
                raise URLError("net/url: invalid userinfo")
            url.user = tuple(unescape(p, USER) for p in userinfo.split(b":", 1))
    elif url.scheme and rest.startswith(b"/"):
        url.omit_host = True
    url.path = unescape(rest, PATH)
    url.raw_path = b"" if escape(url.path, PATH) == rest else rest
    return url


def _wrap(raw: bytes, exc: URLError) -> URLError:
    return URLError(f"parse {go_quote(raw)}: {exc}")


def parse_request_uri(text: str) -> URL:
    raw = text.encode("utf-8", "surrogatepass")
    try:
        return _parse(raw, True)
    except URLError as exc:
        raise _wrap(raw, exc) from None


def parse(text: str) -> URL:
    raw = text.encode("utf-8", "surrogatepass")
    head, sep, frag = raw.partition(b"#")
    try:
        url = _parse(head, False)
    except URLError as exc:
        raise _wrap(head, exc) from None
    try:
        url.fragment = unescape(frag, FRAGMENT)
    except URLError as exc:
        raise _wrap(raw, exc) from None
    url.raw_fragment = b"" if escape(url.fragment, FRAGMENT) == frag else frag
    return url


def _valid_encoded(s: bytes) -> bool:
    return all(c in b"!$&'()*+,;=:@[]%" or not should_escape(c, PATH) for c in s)


def escaped_path(u: URL) -> bytes:
    if u.raw_path and _valid_encoded(u.raw_path):
        try:
            if unescape(u.raw_path, PATH) == u.path:
                return u.raw_path
        except URLError:
            pass
    if u.path == b"*":
        return b"*"
    return escape(u.path, PATH)


def split_host_port(host_port: bytes) -> tuple[bytes, bytes]:
    host, port = host_port, b""
    colon = host.rfind(b":")
    if colon >= 0 and _valid_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith(b"[") and host.endswith(b"]"):
        host = host[1:-1]
    return host, port


def parse_query(query: bytes) -> dict[bytes, list[bytes]]:
    """``url.ParseQuery`` ignoring errors (what ``URL.Query()`` does)."""
    out: dict[bytes, list[bytes]] = {}
    for part in query.split(b"&") if query else []:
        if b";" in part or part == b"":
            continue
        key, _, value = part.partition(b"=")
        try:
            key, value = unescape(key, QUERY), unescape(value, QUERY)
        except URLError:
            continue
        out.setdefault(key, []).append(value)
    return out
