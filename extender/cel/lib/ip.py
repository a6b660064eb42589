"""Kubernetes CEL ``ip`` and ``cidr`` libraries (K8s 1.30+, ``net.IP`` / ``net.CIDR``).

Parsing is ``netip.ParseAddr`` / ``ParsePrefix`` (``extender.cel.lib.netip``) plus the
Kubernetes restrictions: no zones, no IPv4-mapped IPv6.  Host bits are accepted in CIDRs
(``cidr('192.168.0.1/24').ip()`` is ``192.168.0.1``); ``masked()`` clears them.  Error
texts are Kubernetes' own, including the doubled "network address parse error" prefix of
``cidr()``.  ``containsCIDR`` masks the other prefix's address to this prefix's length, as
fixed upstream in kubernetes#130450 (1.33+); before that fix only equal addresses matched.
``ip`` is both the global parser and the member ``<CIDR>.ip()``: one callable dispatching on
its argument (one implementation per function name).
"""

from __future__ import annotations

from typing import Any

from extender.cel.lib.goquote import go_quote
from extender.cel.lib.netip import Addr, AddrError, Prefix, parse_addr, parse_prefix
from extender.cel.values import EvalError, cel_function, kind, want

_CIDR_ERR = "network address parse error during conversion from string: "


class IP:
    """Opaque CEL value of type ``net.IP``; equal when the addresses are equal."""

    cel_type = "IP"
    strict_equality = True
    __slots__ = ("addr",)

    def __init__(self, addr: Addr) -> None:
        self.addr = addr

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, IP):  # Kubernetes' Equal: no such overload
            raise TypeError("IP.Equal: no such overload")
        return self.addr == other.addr

    def cel_string(self) -> str:
        return str(self.addr)

    def cel_size(self) -> int:
        """Kubernetes ``IP.Size()`` (what cost tracking counts): the address bytes."""
        return self.addr.bits // 8

    def __repr__(self) -> str:
        return f"ip({str(self.addr)!r})"


class CIDR:
    """Opaque CEL value of type ``net.CIDR``; equal when address *and* length are equal
    (so ``cidr('10.0.0.1/8') != cidr('10.0.0.0/8')``, as in Go)."""

    cel_type = "CIDR"
    strict_equality = True
    __slots__ = ("prefix",)

    def __init__(self, prefix: Prefix) -> None:
        self.prefix = prefix

    def cel_equals(self, other: Any) -> bool:
        if not isinstance(other, CIDR):  # Kubernetes' Equal: no such overload
            raise TypeError("CIDR.Equal: no such overload")
        return self.prefix == other.prefix

    def cel_size(self) -> int:
        """Kubernetes ``CIDR.Size()`` (what cost tracking counts): the prefix's bytes."""
        return -(-self.prefix.length // 8)

    def cel_string(self) -> str:
        return str(self.prefix)

    def __repr__(self) -> str:
        return f"cidr({str(self.prefix)!r})"


def parse_ip(s: str) -> Addr:
    """K8s ``parseIPAddr``; raises EvalError with Kubernetes' message."""
    try:
        addr = parse_addr(s)
    except AddrError as exc:
        raise EvalError(f"IP Address {go_quote(s)} parse error during conversion from "
                        f"string: {exc}") from None
    if addr.zone:
        raise EvalError(f"IP address {go_quote(s)} with zone value is not allowed")
    if addr.is4in6():
        raise EvalError(f"IPv4-mapped IPv6 address {go_quote(s)} is not allowed")
    return addr


def parse_cidr(s: str) -> Prefix:
    """K8s ``stringToCIDR`` (message prefixed twice, as upstream does)."""
    try:
        prefix = parse_prefix(s)
    except AddrError as exc:
        raise EvalError(_CIDR_ERR + _CIDR_ERR + str(exc)) from None
    if prefix.addr.is4in6():
        raise EvalError(_CIDR_ERR + f"IPv4-mapped IPv6 address {go_quote(s)} is not allowed")
    return prefix


def _ip(v: Any) -> Addr:
    if not isinstance(v, IP):
        raise TypeError(kind(v))
    return v.addr


def _cidr(v: Any) -> Prefix:
    if not isinstance(v, CIDR):
        raise TypeError(kind(v))
    return v.prefix


@cel_function("ip")
def ip(v: Any) -> Any:
    if isinstance(v, CIDR):
        return IP(v.prefix.addr)
    want(v, "string")
    return IP(parse_ip(str(v)))


@cel_function("isIP")
def is_ip(s: Any) -> Any:
    want(s, "string")
    try:
        parse_ip(str(s))
    except EvalError:
        return False
    return True


@cel_function("ip.isCanonical")
def is_canonical(s: Any) -> Any:
    """Invalid input is an error, not ``false`` (as upstream)."""
    want(s, "string")
    return bool(str(parse_ip(str(s))) == str(s))


@cel_function("family")
def family(v: Any) -> Any:
    return int(4 if _ip(v).is4 else 6)


def _predicate(name: str, method: str):
    @cel_function(name)
    def impl(v: Any) -> Any:
        return bool(getattr(_ip(v), method)())

    return impl


@cel_function("cidr")
def cidr(s: Any) -> Any:
    want(s, "string")
    return CIDR(parse_cidr(str(s)))


@cel_function("isCIDR")
def is_cidr(s: Any) -> Any:
    want(s, "string")
    try:
        parse_cidr(str(s))
    except EvalError:
        return False
    return True


@cel_function("containsIP")
def contains_ip(c: Any, other: Any) -> Any:
    prefix = _cidr(c)
    addr = parse_ip(str(other)) if kind(other) == "string" else _ip(other)
    return bool(prefix.contains(addr))


@cel_function("containsCIDR")
def contains_cidr(c: Any, other: Any) -> Any:
    prefix = _cidr(c)
    inner = parse_cidr(str(other)) if kind(other) == "string" else _cidr(other)
    if inner.addr.bits != prefix.addr.bits or inner.length < prefix.length:
        return False
    return bool(Prefix(inner.addr, prefix.length).masked() == prefix.masked())


@cel_function("masked")
def masked(c: Any) -> Any:
    return CIDR(_cidr(c).masked())


@cel_function("prefixLength")
def prefix_length(c: Any) -> Any:
    return int(_cidr(c).length)


_PREDICATES = {"isUnspecified": "is_unspecified", "isLoopback": "is_loopback",
               "isLinkLocalMulticast": "is_link_local_multicast",
               "isLinkLocalUnicast": "is_link_local_unicast",
               "isGlobalUnicast": "is_global_unicast"}

FUNCTIONS = {"ip": ip, "isIP": is_ip, "ip.isCanonical": is_canonical, "family": family,
             "cidr": cidr, "isCIDR": is_cidr, "containsIP": contains_ip,
             "containsCIDR": contains_cidr, "masked": masked, "prefixLength": prefix_length,
             **{name: _predicate(name, method) for name, method in _PREDICATES.items()}}
