"""The `/drift` flood harness (`perf/drift_flood.py`) at a tiny size: it serves a cluster
whose every pod is drifted, times `/filter` in windows without and with the four admins,
and counts their answers; never timing (the figures are `python -m perf drift_flood`'s,
docs/operate/hardening.md)."""

from __future__ import annotations

import sys

import pytest

import perf.__main__ as perf_entry
from perf.drift_flood import ADMINS, RETIRED, UNLIMITED, _Answer, drifted_cluster, measure


def test_every_pod_of_the_cluster_is_running_on_a_node_it_does_not_tolerate():
    cluster = drifted_cluster(10, 100)
    nodes = [o for o in cluster["items"] if o["kind"] == "Node"]
    pods = [o for o in cluster["items"] if o["kind"] == "Pod"]
    assert len(nodes) == 10 and len(pods) == 100
    assert all(any(t["key"] == RETIRED for t in n["spec"]["taints"]) for n in nodes)
    assert all(p["status"]["phase"] == "Running" and p["spec"]["nodeName"] for p in pods)
    assert not any(t.get("key") == RETIRED for p in pods for t in p["spec"]["tolerations"])


@pytest.fixture
def switch_interval():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_harness_measures_filter_without_and_with_the_admins(switch_interval):
    modes = (("rate-limited", 0.01, 2, False), ("polite", 0.01, 2, True), ("unlimited", UNLIMITED, UNLIMITED, False))
    result = measure(nodes=20, pods=200, window=0.6, pairs=1, filter_rate=40, gap=0.2, modes=modes)
    assert result["drifted_pods"] == 200 and result["nodes"] == 20
    limited, polite, unlimited = result["results"]
    for row in (limited, polite, unlimited):
        assert [w["admins"] for w in row["windows"]] == [0, len(ADMINS)]
        for w in row["windows"]:
            assert w["requests"] > 0 and w["ok"] == w["requests"]  # every /filter answered 200
        assert row["filter_with_admins"]["requests"] == row["windows"][1]["requests"]
        assert row["drift_answers"].get("200", 0) > 0
        assert set(row["drift_answers"]) <= {"200", "429"}
        assert row["windows"][0]["drift_answers"] == {}  # no admin in the window without them
    # the rate limit at work: each admin answered its burst (nothing refills in the window)
    assert limited["drift_answers"]["200"] == len(ADMINS) * 2
    assert limited["drift_answers"].get("429", 0) > 0
    # waiting as Retry-After says (100 s at this rate): one 429 each in the window
    assert polite["drift_answers"] == {"200": len(ADMINS) * 2, "429": len(ADMINS)}
    assert "429" not in unlimited["drift_answers"]
    assert set(result["load_average_1m"]) == {"before", "after"}


def _fed(*chunks: bytes) -> tuple[_Answer, list[bool]]:
    answer = _Answer()
    return answer, [answer.feed(chunk) for chunk in chunks]


def test_an_answer_is_whole_once_its_head_and_content_length_have_arrived_in_any_chunks():
    text = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello"
    for cut in range(1, len(text)):  # the head's end split anywhere, "\r\n\r\n" included
        answer, whole = _fed(text[:cut], text[cut:])
        assert whole == [False, True] and answer.status == 200 and not answer.closes
    answer, whole = _fed(*(text[i:i + 1] for i in range(len(text))))
    assert whole == [False] * (len(text) - 1) + [True]


def test_a_closed_connection_and_connection_close_end_the_connection():
    answer, whole = _fed(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n", b"")
    assert whole == [False, True] and answer.status == 0 and answer.closes
    # the last header line too (the head ends without its CRLF)
    answer, whole = _fed(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    assert whole == [True] and answer.status == 503 and answer.closes


def test_it_is_listed():
    assert "drift_flood" in perf_entry.BENCHMARKS
