"""kube-scheduler v1.30 re-serializes the pod it sends in `ExtenderArgs.Pod` from its own
Go types: a toleration's `expression` (KEP-5500, v1.35 API) arrives as `{}`. The extender
reads the pod from its cluster state instead (same UID), so what the API server stores is
what counts."""

from __future__ import annotations

from testing.harness import node, pod

CEL = "taint.key.startsWith('env.example.com/')"
ORACLES = {CEL: lambda key, value, effect: key.startswith("env.example.com/")}


def test_a_spec_field_the_scheduler_does_not_know_still_counts(start_cluster):
    cluster = start_cluster([
        node("env", taints=[{"key": "env.example.com/dev", "value": "true", "effect": "NoSchedule"}]),
        # an empty toleration `{}` (what v1.30 sends) tolerates this empty-value taint
        node("maint", taints=[{"key": "maintenance", "effect": "NoSchedule"}]),
    ])
    p = pod("cel-in-spec", tolerations=[{"expression": CEL}])
    cluster.create(p)
    outcome = cluster.wait_settled([p])
    sent = cluster.tap.last_pod[("default", "cel-in-spec")]
    assert sent["spec"]["tolerations"] == [{}]  # the real scheduler dropped the field
    assert outcome.bound == {("default", "cel-in-spec"): "env"}
    assert cluster.replay(ORACLES).violations == []
