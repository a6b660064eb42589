"""Kubernetes CEL semver library v1 (spec cel.md §1.3; table from semantics.md §4.4)."""

import celeval
import pytest

from extender.cel.environment import CompileError
from extender.cel.program import compile_program


def ev(expr: str, value: str = ""):
    return celeval.ev(expr, "k", value)


ERR = None
# input, strict semver(s), semver(s, true) (normalize = ParseTolerant without trimming)
PARSE_TABLE = [
    ("1.2.3", "1.2.3", "1.2.3"),
    ("v1.2.3", ERR, "1.2.3"),
    ("V1.2.3", ERR, ERR),
    (" v1.2.3 ", ERR, ERR),  # blang ParseTolerant trims; K8s normalize does not
    ("vv1.2.3", ERR, ERR),
    ("1.2", ERR, "1.2.0"),
    ("1", ERR, "1.0.0"),
    ("v1.35", ERR, "1.35.0"),
    ("01", ERR, "1.0.0"),
    ("", ERR, ERR),
    ("  ", ERR, ERR),
    ("1.2.3.4", ERR, ERR),
    ("01.02.03", ERR, "1.2.3"),
    ("1.02.3", ERR, "1.2.3"),
    ("1.2.03", ERR, "1.2.3"),
    ("00.0.0", ERR, "0.0.0"),
    ("1.2.03-rc.1", ERR, "1.2.3-rc.1"),
    ("1.2.3-alpha", "1.2.3-alpha", "1.2.3-alpha"),
    ("1.2.3-alpha.1", "1.2.3-alpha.1", "1.2.3-alpha.1"),
    ("1.2.3-0.3.7", "1.2.3-0.3.7", "1.2.3-0.3.7"),
    ("1.2.3-01", ERR, ERR),
    ("1.2.3-rc.01", ERR, ERR),
    ("1.2.3+build.1", "1.2.3+build.1", "1.2.3+build.1"),
    ("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"),
    ("1.2.3-beta+exp.sha.5114f85", "1.2.3-beta+exp.sha.5114f85", "1.2.3-beta+exp.sha.5114f85"),
    ("1.2-beta", ERR, ERR),
    ("1.2+meta", ERR, ERR),
    ("1.2.3-", ERR, ERR),
    ("1.2.3+", ERR, ERR),
    ("1.2.3-alpha..1", ERR, ERR),
    ("1.2.3-al_pha", ERR, ERR),
    ("1.2.3+a+b", ERR, ERR),
    ("1.2.x", ERR, ERR),
    ("1.2.3 ", ERR, ERR),
    ("1.2. 3", ERR, ERR),
    ("-1.2.3", ERR, ERR),
    ("1..3", ERR, ERR),
    ("18446744073709551615.0.0", "18446744073709551615.0.0", "18446744073709551615.0.0"),
    ("18446744073709551616.0.0", ERR, ERR),
    ("0.0.0", "0.0.0", "0.0.0"),
]


@pytest.mark.parametrize("text,strict,normalized", PARSE_TABLE)
def test_parse_strict_and_normalize(text, strict, normalized):
    for expr, want in (("semver(taint.value) == semver('{w}')", strict),
                       ("semver(taint.value, true) == semver('{w}')", normalized)):
        flag = ", true" if "true" in expr else ""
        is_semver = ev(f"isSemver(taint.value{flag})", text)
        if want is ERR:
            assert ev(expr.format(w="0.0.0"), text)[0] == "runtime"
            assert is_semver == ("false", "")
        else:
            assert ev(expr.format(w=want), text) == ("true", "")
            assert is_semver == ("true", "")
    assert ev("isSemver(taint.value, false) == isSemver(taint.value)", text) == ("true", "")


def test_error_message_is_blangs():
    kind, message = ev("semver(taint.value).major() == 1", "1.02.3")
    assert kind == "runtime"
    assert 'Minor number must not contain leading zeroes "02"' in message


ORDER = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
         "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]


@pytest.mark.parametrize("lower,higher", list(zip(ORDER, ORDER[1:], strict=False)) + [
    ("1.0.0-1", "1.0.0-a"), ("1.0.0-Alpha", "1.0.0-alpha"), ("1.9.0", "1.10.0"),
    ("5.4.0", "5.15.0"), ("0.9.9", "1.0.0")])
def test_precedence(lower, higher):
    assert ev(f"semver('{lower}').isLessThan(semver('{higher}'))") == ("true", "")
    assert ev(f"semver('{higher}').isGreaterThan(semver('{lower}'))") == ("true", "")
    assert ev(f"semver('{lower}').compareTo(semver('{higher}')) == -1") == ("true", "")
    assert ev(f"semver('{higher}').compareTo(semver('{lower}')) == 1") == ("true", "")
    assert ev(f"semver('{lower}') != semver('{higher}')") == ("true", "")


def test_build_metadata_is_ignored_also_by_equality():
    assert ev("semver('1.0.0+build') == semver('1.0.0')") == ("true", "")
    assert ev("semver('1.0.0+a').compareTo(semver('1.0.0+b')) == 0") == ("true", "")
    assert ev("!semver('1.0.0+a').isGreaterThan(semver('1.0.0'))") == ("true", "")


def test_accessors():
    assert ev("semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && "
              "semver('1.2.3').patch() == 3") == ("true", "")
    # uint64 is cast to int64 (wraps), as in the Go implementation
    assert ev("semver('18446744073709551615.0.0').major() == -1") == ("true", "")


def test_mixed_types_and_bad_arguments_are_rejected():
    with pytest.raises(CompileError, match="found no matching overload for 'isGreaterThan'"):
        compile_program("semver('1.0.0').isGreaterThan(quantity('1'))")
    with pytest.raises(CompileError, match="found no matching overload for 'semver'"):
        compile_program("semver(1) == semver('1.0.0')")
    assert ev("dyn(semver('1.0.0')).isGreaterThan(dyn(quantity('1')))")[0] == "runtime"
    # semver.compare(...) from the KEP draft does not exist
    with pytest.raises(CompileError, match="undeclared reference"):
        compile_program("semver.compare(taint.value, '>=1.28.0')")
