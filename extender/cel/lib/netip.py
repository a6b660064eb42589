"""Go ``net/netip`` parsing and predicates, as the Kubernetes ip/cidr libraries use them.

Python's ``ipaddress`` differs from Go in ways that change CEL results: it accepts
``1.2.3.04`` in some versions and ``::ffff:1.2.3.4`` prints differently, its ``is_global`` is
not Go's ``IsGlobalUnicast`` (which is true for 10/8), and its error messages are not the
ones Kubernetes returns.  So the parser is a port of ``ParseAddr``/``ParsePrefix`` (same
checks in the same order, same messages) and the predicates follow Go's definitions.
An address is ``Addr(bits, value, zone)`` with ``bits`` 32 or 128.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.cel.lib.goquote import go_quote

_HEX = "0123456789abcdefABCDEF"


class AddrError(ValueError):
    """A parse error worded like Go's (``ParseAddr("x"): unable to parse IP``)."""


@dataclass(frozen=True, slots=True)
class Addr:
    bits: int  # 32 (IPv4) or 128 (IPv6)
    value: int
    zone: str = ""

    @property
    def is4(self) -> bool:
        return self.bits == 32

    def is4in6(self) -> bool:
        return self.bits == 128 and self.value >> 32 == 0xFFFF

    def byte(self, i: int) -> int:
        return (self.value >> (self.bits - 8 * (i + 1))) & 0xFF

    def is_unspecified(self) -> bool:
        return self.value == 0

    def is_loopback(self) -> bool:
        return self.byte(0) == 127 if self.is4 else self.value == 1

    def is_multicast(self) -> bool:
        return self.byte(0) & 0xF0 == 0xE0 if self.is4 else self.byte(0) == 0xFF

    def is_link_local_unicast(self) -> bool:
        if self.is4:
            return self.byte(0) == 169 and self.byte(1) == 254
        return (self.value >> 112) & 0xFFC0 == 0xFE80

    def is_link_local_multicast(self) -> bool:
        if self.is4:
            return self.byte(0) == 224 and self.byte(1) == 0 and self.byte(2) == 0
        return (self.value >> 112) & 0xFF0F == 0xFF02

    def is_global_unicast(self) -> bool:
        """Go ``IsGlobalUnicast``: private ranges (10/8, fc00::/7) count as global."""
        a = Addr(32, self.value & 0xFFFFFFFF) if self.is4in6() else self
        if a.is4 and a.value in (0, 0xFFFFFFFF):
            return False
        return not (a.value == 0 or a.is_loopback() or a.is_multicast()
                    or a.is_link_local_unicast())

    def __str__(self) -> str:
        """Go ``Addr.String``: dotted quad, or RFC 5952 IPv6 (``::ffff:`` keeps IPv4 form)."""
        if self.is4:
            return ".".join(str(self.byte(i)) for i in range(4))
        zone = f"%{self.zone}" if self.zone else ""
        if self.is4in6():
            return "::ffff:" + str(Addr(32, self.value & 0xFFFFFFFF)) + zone
        groups = [(self.value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
        best, best_len, i = -1, 1, 0
        while i < 8:
            j = i
            while j < 8 and groups[j] == 0:
                j += 1
            if j - i > best_len:
                best, best_len = i, j - i
            i = max(j, i + 1)
        if best < 0:
            return ":".join(f"{g:x}" for g in groups) + zone
        head = ":".join(f"{g:x}" for g in groups[:best])
        tail = ":".join(f"{g:x}" for g in groups[best + best_len :])
        return f"{head}::{tail}{zone}"


def _err(text: str, msg: str, at: str = "") -> AddrError:
    suffix = f" (at {go_quote(at)})" if at else ""
    return AddrError(f"ParseAddr({go_quote(text)}): {msg}{suffix}")


def parse_addr(s: str) -> Addr:
    """``netip.ParseAddr``: the first ``.``, ``:`` or ``%`` decides the family."""
    for ch in s:
        if ch == ".":
            return Addr(32, _parse_v4_fields(s, s))
        if ch == ":":
            return _parse_v6(s)
        if ch == "%":
            raise _err(s, "missing IPv6 address")
    raise _err(s, "unable to parse IP")


def _parse_v4_fields(full: str, s: str) -> int:
    """Four decimal octets, no leading zeros, each <= 255 (errors name ``full``)."""
    fields: list[int] = []
    val, digits = 0, 0
    for i, ch in enumerate(s):
        if "0" <= ch <= "9":
            if digits == 1 and val == 0:
                raise _err(full, "IPv4 field has octet with leading zero")
            val = val * 10 + ord(ch) - 48
            digits += 1
            if val > 255:
                raise _err(full, "IPv4 field has value >255")
        elif ch == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise _err(full, "IPv4 field must have at least one digit", s[i:])
            if len(fields) == 3:
                raise _err(full, "IPv4 address too long")
            fields.append(val)
            val, digits = 0, 0
        else:
            raise _err(full, "unexpected character", s[i:])
    if len(fields) < 3:
        raise _err(full, "IPv4 address too short")
    fields.append(val)
    return int.from_bytes(bytes(fields), "big")


def _parse_v6(full: str) -> Addr:
    """A straight port of Go's ``parseIPv6`` state machine (same error order)."""
    s, zone = full, ""
    if "%" in s:
        s, zone = s.split("%", 1)
        if zone == "":
            raise _err(full, "zone must be a non-empty string")
    ip = [0] * 16
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if s == "":
            return Addr(128, 0, zone)
    i = 0
    while i < 16:
        off, acc = 0, 0
        while off < len(s) and s[off] in _HEX:
            acc = (acc << 4) + int(s[off], 16)
            if off > 3:
                raise _err(full, "each group must have 4 or less digits", s)
            if acc > 0xFFFF:
                raise _err(full, "IPv6 field has value >=2^16", s)
            off += 1
        if off == 0:
            raise _err(full, "each colon-separated field must have at least one digit", s)
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise _err(full, "embedded IPv4 address must replace the final 2 fields of "
                                 "the address", s)
            if i + 4 > 16:
                raise _err(full, "too many hex fields to fit an embedded IPv4 at the end of "
                                 "the address", s)
            ip[i : i + 4] = _parse_v4_fields(full, s).to_bytes(4, "big")
            s, i = "", i + 4
            break
        ip[i], ip[i + 1] = acc >> 8, acc & 0xFF
        i += 2
        s = s[off:]
        if s == "":
            break
        if s[0] != ":":
            raise _err(full, "unexpected character, want colon", s)
        if len(s) == 1:
            raise _err(full, "colon must be followed by more characters", s)
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise _err(full, "multiple :: in address", s)
            ellipsis, s = i, s[1:]
            if s == "":
                break
    if s:
        raise _err(full, "trailing garbage after address", s)
    if i < 16:
        if ellipsis < 0:
            raise _err(full, "address string too short")
        n = 16 - i
        ip = ip[:ellipsis] + [0] * n + ip[ellipsis:i]
    elif ellipsis >= 0:
        raise _err(full, "the :: must expand to at least one field of zeros")
    return Addr(128, int.from_bytes(bytes(ip), "big"), zone)


@dataclass(frozen=True, slots=True)
class Prefix:
    addr: Addr
    length: int

    def masked(self) -> Prefix:
        host = self.addr.bits - self.length
        return Prefix(Addr(self.addr.bits, (self.addr.value >> host) << host), self.length)

    def contains(self, ip: Addr) -> bool:
        """Go ``Prefix.Contains``: same family, no zone, equal leading ``length`` bits."""
        if ip.bits != self.addr.bits or ip.zone:
            return False
        host = self.addr.bits - self.length
        return ip.value >> host == self.addr.value >> host

    def __str__(self) -> str:
        return f"{self.addr}/{self.length}"


def parse_prefix(s: str) -> Prefix:
    """``netip.ParsePrefix``: address (no IPv6 zone) ``/`` decimal length in range."""

    def fail(msg: str) -> AddrError:
        return AddrError(f"netip.ParsePrefix({go_quote(s)}): {msg}")

    cut = s.rfind("/")
    if cut < 0:
        raise fail("no '/'")
    try:
        addr = parse_addr(s[:cut])
    except AddrError as exc:
        raise fail(str(exc)) from None
    if not addr.is4 and addr.zone:
        raise fail("IPv6 zones cannot be present in a prefix")
    text = s[cut + 1 :]
    bad = fail("bad bits after slash: " + go_quote(text))
    if not text or not all("0" <= c <= "9" for c in text):
        raise bad
    if len(text) > 1 and text[0] == "0":
        raise bad
    length = int(text)
    if length > 2**63 - 1:  # strconv.Atoi range error
        raise bad
    if length > addr.bits:
        raise fail("prefix length out of range")
    return Prefix(addr, length)
