"""The three KEP-5500 user stories, evaluated directly against node taints."""

import pytest

from extender.cel import CelCache
from extender.model.objects import Taint

STORY1 = "taint.key.startsWith('env.example.com/')"
STORY2 = ("taint.key == 'node.example.com/kernel-version' && "
          "semver(taint.value).isGreaterThan(semver('5.15.0'))")
STORY3 = "taint.key.matches('^zone-a[12]-rack-[0-9]+$')"

CASES = [
    (STORY1, Taint("env.example.com/dev", "", "NoSchedule"), True),
    (STORY1, Taint("env.example.com/staging", "", "NoSchedule"), True),
    (STORY1, Taint("env.example.com/testing", "x", "NoExecute"), True),
    (STORY1, Taint("env.example.org/dev", "", "NoSchedule"), False),
    (STORY1, Taint("example.com/env", "", "NoSchedule"), False),
    (STORY2, Taint("node.example.com/kernel-version", "5.4.0", "NoSchedule"), False),
    (STORY2, Taint("node.example.com/kernel-version", "5.15.0", "NoSchedule"), False),
    (STORY2, Taint("node.example.com/kernel-version", "5.15.1", "NoSchedule"), True),
    (STORY2, Taint("node.example.com/kernel-version", "6.1.0", "NoSchedule"), True),
    (STORY2, Taint("node.example.com/kernel-version", "5.16.0-rc1", "NoSchedule"), True),
    (STORY2, Taint("node.example.com/other", "6.1.0", "NoSchedule"), False),
    (STORY3, Taint("zone-a1-rack-03", "", "NoSchedule"), True),
    (STORY3, Taint("zone-a2-rack-15", "", "NoSchedule"), True),
    (STORY3, Taint("zone-b1-rack-07", "", "NoSchedule"), False),
    (STORY3, Taint("zone-a3-rack-01", "", "NoSchedule"), False),
    (STORY3, Taint("zone-a1-rack-", "", "NoSchedule"), False),
    (STORY3, Taint("zone-a1-rack-03\n", "", "NoSchedule"), False),
]


@pytest.mark.parametrize("expr,taint,matched", CASES)
def test_story(expr, taint, matched):
    outcome = CelCache().evaluate(expr, taint)
    assert outcome.matched is matched
    assert outcome.kind == ("true" if matched else "false")
    assert outcome.message == ""


@pytest.mark.parametrize("version", ["v5.16.0", "5.16", "", "latest", "5.16.0 "])
def test_story2_unparsable_kernel_version_does_not_match(version):
    outcome = CelCache().evaluate(STORY2, Taint("node.example.com/kernel-version", version, ""))
    assert (outcome.matched, outcome.kind) == (False, "runtime")
    assert outcome.message


def test_story2_short_circuit_skips_semver_for_other_keys():
    # && short-circuits on the key check, so an unparsable value on another key is no error
    outcome = CelCache().evaluate(STORY2, Taint("other", "not-a-version", ""))
    assert (outcome.matched, outcome.kind) == (False, "false")


def test_stories_compile():
    cache = CelCache()
    assert [cache.compile_error(e) for e in (STORY1, STORY2, STORY3)] == [None, None, None]
