"""Kubernetes CEL ip/cidr libraries: cases ported from kubernetes ``library/ip_test.go``,
``cidr_test.go`` and ``cost_test.go`` (TestIPCost, TestIPIsCanonicalCost, TestCIDRCost),
plus Go ``netip`` parser cases (error texts as Go prints them)."""

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.lib.netip import AddrError, parse_addr, parse_prefix
from extender.cel.program import compile_program, taint_activation
from extender.cel.runtime import Activation


def ev(expr: str, value: str = ""):
    return celeval.ev(expr, "k", value)


# upstream TestIP / TestCIDR results, written as boolean CEL expressions
TRUE = [
    "ip('192.168.0.1') == ip('192.168.0.1')", "isIP('192.168.0.1')", "!isIP('192.168.0.1.0')",
    "ip.isCanonical('127.0.0.1')", "ip('192.168.0.1').family() == 4",
    "ip('0.0.0.0').isUnspecified()", "!ip('127.0.0.1').isUnspecified()",
    "ip('127.0.0.1').isLoopback()", "!ip('1.2.3.4').isLoopback()",
    "ip('224.0.0.1').isLinkLocalMulticast()", "!ip('224.0.1.1').isLinkLocalMulticast()",
    "ip('169.254.169.254').isLinkLocalUnicast()", "!ip('192.168.0.1').isLinkLocalUnicast()",
    "ip('192.168.0.1').isGlobalUnicast()", "!ip('255.255.255.255').isGlobalUnicast()",
    "ip('2001:db8::68') == ip('2001:db8::68')", "isIP('2001:db8::68')",
    "!isIP('2001:db8:::68')", "ip.isCanonical('2001:db8::68')",
    "!ip.isCanonical('2001:DB8::68')", "ip('2001:db8::68').family() == 6",
    "ip('::').isUnspecified()", "!ip('::1').isUnspecified()", "ip('::1').isLoopback()",
    "!ip('2001:db8::abcd').isLoopback()", "ip('ff02::1').isLinkLocalMulticast()",
    "!ip('fd00::1').isLinkLocalMulticast()", "ip('fe80::1').isLinkLocalUnicast()",
    "!ip('fd80::1').isLinkLocalUnicast()", "ip('2001:db8::abcd').isGlobalUnicast()",
    "!ip('ff00::1').isGlobalUnicast()", "string(ip('192.168.0.1')) == '192.168.0.1'",
    # ip.go doc examples
    "!ip.isCanonical('2001:db8::0:0:0:abcd')", "ip('::1').family() == 6",
    # Go semantics beyond the upstream table
    "ip('10.0.0.1').isGlobalUnicast()", "ip('fc00::1').isGlobalUnicast()",
    "!ip('0.0.0.0').isGlobalUnicast()", "!ip('::').isGlobalUnicast()",
    "ip('ff12::1').isLinkLocalMulticast()", "!ip('ff05::1').isLinkLocalMulticast()",
    "string(ip('2001:DB8:0:0:1:0:0:1')) == '2001:db8::1:0:0:1'",
    "ip('::1') != ip('127.0.0.1')", "!isIP('fe80::1%eth0')", "!isIP('::ffff:1.2.3.4')",
    "!isIP('01.2.3.4')", "!isIP('')", "!isIP(' 1.2.3.4')", "isIP('::1.2.3.4')",
    "[ip('::1')].all(ip, ip.isLoopback())",
    # cidr_test.go
    "cidr(dyn('192.168.0.0/24')) == cidr('192.168.0.0/24')",
    "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
    "!cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))",
    "cidr('192.168.0.0/24').containsIP('192.168.0.1')",
    "!cidr('192.168.0.0/24').containsIP('192.168.1.1')",
    "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))",
    "!cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/23'))",
    "cidr('192.168.0.0/24').containsCIDR('192.168.0.0/25')",
    "!cidr('192.168.0.0/24').containsCIDR('192.168.0.0/23')",
    "cidr('192.168.0.0/24').ip() == ip('192.168.0.0')",
    "cidr('192.168.0.0/24').masked() == cidr('192.168.0.0/24')",
    "cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
    "cidr('192.168.0.0/24').prefixLength() == 24",
    "cidr('2001:db8::/32') == cidr('2001:db8::/32')",
    "cidr('2001:db8::/32').containsIP(ip('2001:db8::1'))",
    "!cidr('2001:db8::/32').containsIP(ip('2001:dc8::1'))",
    "cidr('2001:db8::/32').containsIP('2001:db8::1')",
    "!cidr('2001:db8::/32').containsIP('2001:dc8::1')",
    "cidr('2001:db8::/32').containsCIDR(cidr('2001:db8::/33'))",
    "!cidr('2001:db8::/32').containsCIDR(cidr('2001:db8::/31'))",
    "cidr('2001:db8::/32').containsCIDR('2001:db8::/33')",
    "!cidr('2001:db8::/32').containsCIDR('2001:db8::/31')",
    "cidr('2001:db8::/32').ip() == ip('2001:db8::')",
    "cidr('2001:db8:1::/32').masked() == cidr('2001:db8::/32')",
    "cidr('2001:db8::/32').prefixLength() == 32",
    "string(cidr('192.168.0.0/24')) == '192.168.0.0/24'",
    # cidr.go doc examples (containsCIDR as fixed by kubernetes#130450)
    "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))",
    "!cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))",
    "cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')",
    "cidr('192.168.0.0/16').containsCIDR('192.168.0.1/32')",
    "cidr('192.168.0.1/24').ip() == ip('192.168.0.1')",
    "cidr('192.168.0.1/24').ip().family() == 4", "cidr('::1/128').ip().family() == 6",
    "cidr('192.168.0.1/24') != cidr('192.168.0.1/24').masked()",
    "cidr('::1/128').prefixLength() == 128", "isCIDR('192.168.0.0/16')",
    "isCIDR('::1/128')", "!isCIDR('192.168.0.0/33')", "!isCIDR('::1/129')",
    # families never contain each other; a zone-free address is required
    "!cidr('0.0.0.0/0').containsIP('::1')", "!cidr('::/0').containsCIDR('10.0.0.0/8')",
    "cidr('0.0.0.0/0').containsCIDR('10.0.0.0/8')", "!isCIDR('::ffff:1.2.3.4/120')",
    "!isCIDR('10.0.0.0/08')", "!isCIDR('10.0.0.0')", "!isCIDR('fe80::1%eth0/64')",
]


@pytest.mark.parametrize("expr", TRUE)
def test_true(expr):
    assert ev(expr) == ("true", "")


RUNTIME_ERRORS = [
    ("ip('192.168.0.1.0') == ip('1.2.3.4')", 'IP Address "192.168.0.1.0" parse error during '
     'conversion from string: ParseAddr("192.168.0.1.0"): IPv4 address too long'),
    ("ip.isCanonical('127.0.0.1.0')", 'IP Address "127.0.0.1.0" parse error during conversion'
     ' from string: ParseAddr("127.0.0.1.0"): IPv4 address too long'),
    ("ip('2001:db8:::68').isLoopback()", 'IP Address "2001:db8:::68" parse error during '
     'conversion from string: ParseAddr("2001:db8:::68"): each colon-separated field must '
     'have at least one digit (at ":68")'),
    ("ip('fe80::1%eth0').isLoopback()", 'IP address "fe80::1%eth0" with zone value is not '
     "allowed"),
    ("ip('::ffff:1.2.3.4').isLoopback()", 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not '
     "allowed"),
    ("cidr('192.168.0.0/').prefixLength() == 0", "network address parse error during "
     "conversion from string: network address parse error during conversion from string: "
     'netip.ParsePrefix("192.168.0.0/"): bad bits after slash: ""'),
    ("cidr('2001:db8::/').prefixLength() == 0", "network address parse error during "
     "conversion from string: network address parse error during conversion from string: "
     'netip.ParsePrefix("2001:db8::/"): bad bits after slash: ""'),
    ("cidr('::ffff:1.2.3.4/120').prefixLength() == 0", "network address parse error during "
     'conversion from string: IPv4-mapped IPv6 address "::ffff:1.2.3.4/120" is not allowed'),
    ("cidr('10.0.0.0/8').containsIP('10.0.0.01')", 'IP Address "10.0.0.01" parse error'),
]


@pytest.mark.parametrize("expr,message", RUNTIME_ERRORS)
def test_runtime_errors(expr, message):
    kind, msg = ev(expr)
    assert kind == "runtime" and message in msg


def test_taint_value_is_checked_at_runtime():
    expr = "isIP(taint.value) && cidr('10.0.0.0/8').containsIP(taint.value)"
    assert ev(expr, "10.1.2.3") == ("true", "")
    assert ev(expr, "192.168.0.1") == ("false", "")
    assert ev(expr, "not-an-ip") == ("false", "")
    assert ev("cidr('10.0.0.0/8').containsIP(taint.value)", "bad")[0] == "runtime"


COMPILE_ERRORS = [
    ("isIP(cidr('192.168.0.0/24'))", "found no matching overload for 'isIP' applied to "
     "'(net.CIDR)'"),
    ("cidr(192168) == cidr('1.2.3.0/24')", "found no matching overload for 'cidr' applied to "
     "'(int)'"),
    ("ip('1.2.3.4').prefixLength() == 32", "found no matching overload for 'prefixLength'"),
    ("ip(cidr('1.2.3.0/24')) == ip('1.2.3.0')", "found no matching overload for 'ip'"),
    ("ip('1.2.3.4') < ip('1.2.3.5')", "found no matching overload for '_<_'"),
    ("ip('1.2.3.4') == cidr('1.2.3.4/32')", "found no matching overload for '_==_'"),
]


@pytest.mark.parametrize("expr,fragment", COMPILE_ERRORS)
def test_compile_errors(expr, fragment):
    with pytest.raises(CompileError) as info:
        compile_program(expr)
    assert fragment in str(info.value)


# (input, Go Addr.String() or the ParseAddr error)
PARSE_ADDR = [
    ("1.2.3.4", "1.2.3.4"), ("::", "::"), ("2001:DB8::68", "2001:db8::68"),
    ("0:0:1:0:0:1:0:0", "::1:0:0:1:0:0"), ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"),
    ("::1.2.3.4", "::102:304"), ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"), ("1:0:0:2::3", "1:0:0:2::3"),
    ("1.2.3", 'ParseAddr("1.2.3"): IPv4 address too short'),
    ("1.2.3.256", 'ParseAddr("1.2.3.256"): IPv4 field has value >255'),
    ("1..2.3", 'ParseAddr("1..2.3"): IPv4 field must have at least one digit (at ".2.3")'),
    ("1.2.3.04", 'ParseAddr("1.2.3.04"): IPv4 field has octet with leading zero'),
    ("1.2.3.x", 'ParseAddr("1.2.3.x"): unexpected character (at "x")'),
    ("abc", 'ParseAddr("abc"): unable to parse IP'),
    ("%eth0", 'ParseAddr("%eth0"): missing IPv6 address'),
    ("fe80::1%", 'ParseAddr("fe80::1%"): zone must be a non-empty string'),
    ("12345::", 'ParseAddr("12345::"): each group must have 4 or less digits (at "12345::")'),
    ("1::2:3:4:5:6:7:8", 'ParseAddr("1::2:3:4:5:6:7:8"): the :: must expand to at least one '
     "field of zeros"),
    ("1:2:3", 'ParseAddr("1:2:3"): address string too short'),
    ("1::2::3", 'ParseAddr("1::2::3"): multiple :: in address (at ":3")'),
    ("1:2:3:4:5:6:7:8:9", 'ParseAddr("1:2:3:4:5:6:7:8:9"): trailing garbage after address '
     '(at "9")'),
    ("1:", 'ParseAddr("1:"): colon must be followed by more characters (at ":")'),
    ("1:2.3.4.5", 'ParseAddr("1:2.3.4.5"): embedded IPv4 address must replace the final 2 '
     'fields of the address (at "2.3.4.5")'),
    ("1x::", 'ParseAddr("1x::"): unexpected character, want colon (at "x::")'),
    ("1.2.3.4\n", 'ParseAddr("1.2.3.4\\n"): unexpected character (at "\\n")'),
]


@pytest.mark.parametrize("text,want", PARSE_ADDR)
def test_parse_addr(text, want):
    try:
        got = str(parse_addr(text))
    except AddrError as exc:
        got = str(exc)
    assert got == want


PARSE_PREFIX = [
    ("10.0.0.1/8", "10.0.0.1/8"), ("::/0", "::/0"),
    ("10.0.0.0/33", 'netip.ParsePrefix("10.0.0.0/33"): prefix length out of range'),
    ("10.0.0.0/+8", 'netip.ParsePrefix("10.0.0.0/+8"): bad bits after slash: "+8"'),
    ("10.0.0.0", "netip.ParsePrefix(\"10.0.0.0\"): no '/'"),
    ("fe80::1%e/64", 'netip.ParsePrefix("fe80::1%e/64"): IPv6 zones cannot be present in a '
     "prefix"),
    ("x/8", 'netip.ParsePrefix("x/8"): ParseAddr("x"): unable to parse IP'),
]


@pytest.mark.parametrize("text,want", PARSE_PREFIX)
def test_parse_prefix(text, want):
    try:
        got = str(parse_prefix(text))
    except AddrError as exc:
        got = str(exc)
    assert got == want


IPV4, IPV6 = "ip('192.168.0.1')", "ip('2001:db8:3333:4444:5555:6666:7777:8888')"
C4, C6 = "cidr('192.168.0.0/16')", "cidr('2001:db8::/32')"
# (expression, estimated max cost, runtime cost), from cost_test.go
COSTS = [
    (IPV4, 2, 2), (IPV6, 4, 4), (IPV4 + ".family()", 3, 3), (IPV6 + ".isGlobalUnicast()", 5, 5),
    (IPV4 + " == ip('192.168.0.1')", 5, 5), (IPV6 + " == ip('192.168.0.1')", 7, 7),
    ("ip.isCanonical('192.168.0.1')", 3, 3),
    ("ip.isCanonical('2001:db8:3333:4444:5555:6666:7777:8888')", 8, 8),
    ("ip.isCanonical('2001:db8::abcd')", 3, 3),
    (C4, 2, 2), (C6, 2, 2), (C4 + ".ip()", 3, 3), (C6 + ".masked()", 3, 3),
    (C4 + " == cidr('2001:db8::/32')", 5, 5),
    (C4 + ".containsCIDR(cidr('192.0.0.0/30'))", 11, 7),
    (C4 + ".containsCIDR('192.168.0.0/16')", 11, 7),
    (C4 + ".containsIP(ip('192.0.0.1'))", 7, 4),
    (C4 + ".containsIP(ip('192.169.0.1'))", 8, 5),
    (C4 + ".containsIP('192.169.0.1')", 8, 5),
    (C6 + ".containsCIDR(cidr('2001:db8::/126'))", 11, 7),
    (C6 + ".containsIP('2001:db8::1')", 8, 5),
]


@pytest.mark.parametrize("expr,estimate,runtime", COSTS)
def test_costs(expr, estimate, runtime):
    program = compile_program(f"[{expr}].size() == 1")  # a bool-valued wrapper
    activation = Activation(10**6)
    program.runner.run(taint_activation("k", "v", "e"), activation)
    # the wrapper adds a list literal (10), size() (1), == (1): 12 in both
    assert program.estimated_cost - 12 == estimate
    assert activation.used - 12 == runtime
