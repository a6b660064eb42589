"""Admission and scheduling agree on what can be answered (issue #23).

The 20 x 20 x 20 nested `all()` pod passed the webhook and `extender validate` without
a word, then every `/filter` ran out of its 4 s deadline.  Now: it is evaluated in
milliseconds per taint (so on the example cluster it is scheduled within the deadline),
and admission warns, or with `--slow-cel-expressions=deny` denies, because a first
`/filter` over the 100 distinct taints assumed for a 5,000-node cluster may need more
than `--request-deadline` — the message says how long.
"""

from __future__ import annotations

import json
import time

import orjson
import pytest
from test_webhook import P, admission, pod, response

from extender.api.wire import ExtenderArgs
from extender.cli import main
from extender.config import build_config, bundled_cluster
from extender.explain import explain
from extender.state import load_objects
from extender.validation.limits import ASSUMED_DISTINCT_TAINTS, ASSUMED_UNITS_PER_SECOND
from extender.validation.rules import configure_slow_expressions, expected_seconds

L20 = "[" + ",".join(["0"] * 20) + "]"
NESTED_20 = f"{L20}.all(a, {L20}.all(b, {L20}.all(c, taint.key != '')))"  # 45,891 units
WHERE = f"metadata.annotations[{P}/tolerations][0].expression"


def cel_pod(expression: str) -> dict:
    return pod({f"{P}/tolerations": json.dumps([{"expression": expression}])})


@pytest.fixture(autouse=True)
def default_policy():
    configure_slow_expressions(4.0, deny=False)
    yield
    configure_slow_expressions(4.0, deny=False)


def test_the_nested_pod_is_warned_about_with_the_expected_time():
    r = response(admission(cel_pod(NESTED_20)))
    assert r["allowed"] is True
    (warning,) = r["warnings"]
    per_taint, per_request = expected_seconds(45_891)
    assert per_request > 4.0
    assert warning == (
        f"{WHERE}: estimated cost 45891 may need up to {per_taint:.2g} s per distinct "
        f"taint, {per_request:.2f} s for the first /filter on a cluster with "
        f"{ASSUMED_DISTINCT_TAINTS} distinct taints (5,000 nodes), more than the request "
        "deadline of 4 s: the pod may stay Pending")


def test_deny_mode_refuses_it_with_the_same_text():
    configure_slow_expressions(4.0, deny=True)
    r = response(admission(cel_pod(NESTED_20)))
    assert r["allowed"] is False and r["status"]["code"] == 422
    assert "more than the request deadline of 4 s" in r["status"]["message"]
    per_taint = expected_seconds(45_891)[0]
    assert f"may need up to {per_taint:.2g} s per distinct taint" in r["status"]["message"]


def test_the_threshold_follows_the_deadline_and_the_assumptions():
    limit = int(4.0 * ASSUMED_UNITS_PER_SECOND / ASSUMED_DISTINCT_TAINTS)  # 16,000 units
    assert expected_seconds(limit)[1] == pytest.approx(4.0)
    roomy = expected_seconds(45_891)[1] + 1
    configure_slow_expressions(roomy, deny=True)  # a roomier deadline admits it
    assert response(admission(cel_pod(NESTED_20)))["allowed"] is True
    configure_slow_expressions(0, deny=True)  # no deadline: nothing to predict
    assert "warnings" not in response(admission(cel_pod(NESTED_20)))


def test_cheap_expressions_get_no_warning():
    r = response(admission(cel_pod("taint.key.startsWith('env.example.com/')")))
    assert r == {"uid": r["uid"], "allowed": True}


def test_the_nested_pod_is_scheduled_within_the_deadline_on_the_example_cluster(
        example_extender, deadline_clock):
    """The other half: evaluation is fast enough that the pod gets its verdict, not a
    deadline Error, on the example cluster (every distinct taint evaluated). "Fast
    enough" counts this thread's CPU time (~0.05 s here), which a busy machine does not
    stretch as it stretches the clock; the request's own deadline clock stands still."""
    names = [o["metadata"]["name"] for o in load_objects(bundled_cluster())
             if o.get("kind") == "Node"]  # 10 nodes, 11 distinct taints
    started = time.thread_time()
    with deadline_clock.stopped():
        answer = orjson.loads(example_extender.filter(ExtenderArgs(cel_pod(NESTED_20), None,
                                                                         names)))
    assert not answer.get("Error")
    assert answer["NodeNames"]
    assert time.thread_time() - started < build_config(env={}).request_deadline


def test_validate_cli_warns_by_default_and_denies_on_request(tmp_path, capsys, monkeypatch):
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(cel_pod(NESTED_20)))
    assert main(["validate", str(path)]) == 0
    assert "more than the request deadline of 4 s" in capsys.readouterr().out
    assert main(["validate", "--slow-cel-expressions", "deny", str(path)]) == 1
    assert "more than the request deadline of 4 s" in capsys.readouterr().out
    monkeypatch.setenv("EXTENDER_SLOW_CEL_EXPRESSIONS", "deny")  # the env twin
    assert main(["validate", "--request-deadline", "600", str(path)]) == 0
    assert main(["validate", str(path)]) == 1


@pytest.mark.parametrize("expression", [NESTED_20, "lists.range(140000).all(i, i >= 0)"])
def test_one_warning_text_from_the_webhook_validate_and_explain(expression, tmp_path, capsys,
                                                                example_extender):
    """The same pod gets the same words from all three: the time warning when the
    slow-expression rule applies, whatever else the cost would suggest."""
    (webhook,) = response(admission(cel_pod(expression)))["warnings"]
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(cel_pod(expression)))
    assert main(["validate", "--output", "json", str(path)]) == 0
    validated = json.loads(capsys.readouterr().out)
    (validate,) = [w for o in validated["objects"] for w in o["warnings"]]
    (explained,) = explain(example_extender, [cel_pod(expression)], None)["results"][0][
        "annotationWarnings"]
    assert webhook == validate == explained
    assert "more than the request deadline of 4 s" in webhook
