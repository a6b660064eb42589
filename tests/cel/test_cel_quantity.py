"""Kubernetes CEL quantity library (resource.Quantity parsing, exact decimal comparison)."""

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.cel.lib import quantity as quantity_lib
from extender.cel.lib.quantity import ERR_FORMAT, ERR_SUFFIX, QuantityError, parse_quantity
from extender.cel.program import compile_program, run_program


def ev(expr: str, value: str = ""):
    return run_program(compile_program(expr), "k", value, "NoSchedule")


PARSE = [
    ("0", "0"), ("1", "1"), ("200M", "200000000"), ("0.2G", "200000000"), ("1k", "1000"),
    ("1Ki", "1024"), ("1Mi", "1048576"), ("1.5Gi", "1610612736"), ("1m", "0.001"),
    ("1u", "0.000001"), ("1n", "0.000000001"), ("1e3", "1000"), ("1E3", "1000"),
    ("1e-3", "0.001"), ("1e+3", "1000"), ("1E", "1000000000000000000"), ("-5", "-5"),
    ("+5", "5"), (".5", "0.5"), ("1.", "1"), ("1.G", "1000000000"), (".", "0"), ("+", "0"),
    ("-", "0"), ("000123", "123"), ("0.1n", "0.000000001"), ("-0.1n", "-0.000000001"),
    ("1.5m", "0.0015"), ("9Ei", "9223372036854775807"), ("100Ei", "9223372036854775807"),
    ("1e30", "1000000000000000000000000000000"), ("12.34e2", "1234"), ("0.5Ki", "512"),
]


@pytest.mark.parametrize("text,value", PARSE)
def test_parse(text, value):
    assert parse_quantity(text) == Decimal(value)
    assert ev("isQuantity(taint.value)", text) == ("true", "")


SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P",
            "E", "e3", "e-2", "E+4", "K", "x"]


@given(digits=st.text("0123456789", min_size=1, max_size=22), suffix=st.sampled_from(SUFFIXES))
def test_whole_number_fast_path_matches_the_scanner(digits, suffix):
    """'512Mi'-style strings skip the scanner; the value (and any error) is the same."""
    text = digits + suffix
    try:
        expected = quantity_lib._parse_general(text)
    except QuantityError as exc:
        with pytest.raises(QuantityError, match=re.escape(str(exc))):
            parse_quantity(text)
        return
    assert quantity_lib.parse_amount(text) == expected


BAD = [("", ERR_FORMAT), (" 1", ERR_FORMAT), ("1 ", ERR_FORMAT), ("200K", ERR_SUFFIX),
       ("1µ", ERR_FORMAT), ("abc", ERR_FORMAT), ("1e", ERR_SUFFIX), ("1e1.5", ERR_FORMAT),
       ("1Mii", ERR_SUFFIX), ("1KiB", ERR_FORMAT), ("1-", ERR_SUFFIX), ("0x10", ERR_FORMAT),
       ("1,5", ERR_FORMAT), ("1i", ERR_SUFFIX)]


@pytest.mark.parametrize("text,message", BAD)
def test_invalid(text, message):
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message
    assert ev("isQuantity(taint.value)", text) == ("false", "")
    kind, msg = ev("sign(quantity(taint.value)) == 0", text)
    assert kind == "runtime" and message in msg


TRUE = [
    "quantity('200M').compareTo(quantity('0.2G')) == 0", "quantity('200M') == quantity('0.2G')",
    "quantity('1Gi').isGreaterThan(quantity('1G'))", "quantity('1G').isLessThan(quantity('1Gi'))",
    "quantity('1Ki').compareTo(quantity('1k')) == 1", "quantity('999m').isLessThan(quantity('1'))",
    "quantity('1k').isInteger()", "!quantity('1m').isInteger()", "!quantity('1e19').isInteger()",
    "!quantity('9223372036854775807').isInteger()", "quantity('1k').asInteger() == 1000",
    "quantity('1.5').asApproximateFloat() == 1.5", "sign(quantity('-1')) == -1",
    "sign(quantity('0')) == 0", "sign(quantity('5m')) == 1",
    "quantity('1').add(quantity('500m')) == quantity('1.5')",
    "quantity('1k').add(1) == quantity('1001')", "quantity('1k').sub(1) == quantity('999')",
    "quantity('1').sub(quantity('2')) == quantity('-1')",
    "quantity('50M').isInteger() && quantity('50M').asInteger() == 50000000",
    "quantity('1e30').isGreaterThan(quantity('9Ei'))",
]


@pytest.mark.parametrize("expr", TRUE)
def test_functions(expr):
    assert ev(expr) == ("true", "")


def test_as_integer_errors():
    kind, message = ev("quantity('1m').asInteger() == 0")
    assert kind == "runtime" and "cannot convert value to integer" in message
    assert ev("quantity('1e19').asInteger() > 0")[0] == "runtime"


def test_taint_value_threshold():
    expr = "isQuantity(taint.value) && quantity(taint.value).isGreaterThan(quantity('64Gi'))"
    assert ev(expr, "128Gi") == ("true", "")
    assert ev(expr, "64Gi") == ("false", "")
    assert ev(expr, "lots") == ("false", "")
