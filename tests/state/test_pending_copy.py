"""The pod being scheduled is read from the cluster state's copy when the state holds
the same pod (same UID, not bound): kube-scheduler re-serializes `ExtenderArgs.Pod` from
its own Go types and drops what its version does not know. (End to end, with the real
kube-scheduler v1.30: tests/e2e/test_pending_fields.py.)"""

from __future__ import annotations

import copy

import orjson
from conftest import make_extender

from extender.api.wire import decode_args
from extender.config import Config
from extender.model.parse import existing_pod_from_dict
from extender.state.snapshot import ClusterSnapshot

ENV_TAINT = {"key": "env.example.com/dev", "value": "true", "effect": "NoSchedule"}
EMPTY_VALUE_TAINT = {"key": "maintenance", "effect": "NoSchedule"}
CEL = "taint.key.startsWith('env.example.com/')"


def node(name: str, taints: list[dict]) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {}}, "spec": {"taints": taints}}


def stored_pod(uid: str = "uid-1") -> dict:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": uid, "labels": {"app": "a"}},
            "spec": {"tolerations": [{"expression": CEL}], "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"}}


def as_v130_sends_it(pod: dict) -> dict:
    """What a v1.30 scheduler puts in ExtenderArgs.Pod: the toleration without the
    field its Go struct lacks (an empty toleration, which tolerates empty-value taints)."""
    sent = copy.deepcopy(pod)
    sent["spec"]["tolerations"] = [{}]
    return sent


def feasible(engine, pod: dict) -> list[str]:
    body = {"Pod": pod, "NodeNames": ["env", "maint"]}
    return orjson.loads(engine.filter(decode_args(orjson.dumps(body))))["NodeNames"]


def test_the_state_copy_restores_a_field_the_scheduler_dropped():
    engine = make_extender([node("env", [ENV_TAINT]), node("maint", [EMPTY_VALUE_TAINT]), stored_pod()],
                           Config(slim_answers=False))  # full: a one-host prioritize lists its host
    # the request alone would tolerate `maintenance` (empty toleration) and not `env`
    assert feasible(engine, as_v130_sends_it(stored_pod())) == ["env"]
    prio = orjson.loads(engine.prioritize(decode_args(orjson.dumps({"Pod": as_v130_sends_it(stored_pod()),
                                                         "NodeNames": ["env"]}))))
    assert [h["Host"] for h in prio] == ["env"]


def test_a_new_version_of_the_state_copy_is_read_anew():
    """The parsed copy is remembered per version of the stored pod, never past it."""
    objects = [node("env", [ENV_TAINT]), node("maint", [EMPTY_VALUE_TAINT])]
    engine = make_extender([*objects, stored_pod()])
    sent = as_v130_sends_it(stored_pod())
    assert feasible(engine, sent) == ["env"]
    assert feasible(engine, sent) == ["env"]  # the remembered parse
    updated = stored_pod()
    updated["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    engine.source.set(ClusterSnapshot.from_objects([*objects, updated]))
    assert feasible(engine, sent) == ["maint"]


def test_another_uid_or_a_bound_copy_is_not_used():
    other = make_extender([node("env", [ENV_TAINT]), node("maint", [EMPTY_VALUE_TAINT]), stored_pod("uid-old")])
    assert feasible(other, as_v130_sends_it(stored_pod())) == ["maint"]  # a recreated pod: not the same
    bound = stored_pod()
    bound["spec"]["nodeName"] = "env"
    engine = make_extender([node("env", [ENV_TAINT]), node("maint", [EMPTY_VALUE_TAINT]), bound])
    assert feasible(engine, as_v130_sends_it(stored_pod())) == ["maint"]


def test_only_pending_pods_keep_their_scheduling_fields():
    pending = existing_pod_from_dict(stored_pod())
    assert pending.raw == {"metadata": {"name": "p", "namespace": "default", "uid": "uid-1", "labels": {"app": "a"}},
                           "spec": {"tolerations": [{"expression": CEL}]}, "status": {"phase": "Pending"}}
    bound = stored_pod()
    bound["spec"]["nodeName"] = "env"
    assert existing_pod_from_dict(bound).raw is None


def test_the_kept_fields_are_all_pod_from_dict_reads():
    """Parsing the kept fields gives the same pod as parsing the whole object: nothing
    `pod_from_dict` reads (now or after a change there) is dropped."""
    from dataclasses import fields

    from conftest import EXAMPLES, example_pod

    from extender.model.parse import pending_fields
    from extender.validation.pod import pod_from_dict

    pods = [example_pod(p.stem) for p in sorted((EXAMPLES / "pods").glob("*.yaml"))]
    with_volumes = stored_pod()
    with_volumes["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                                       {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]
    with_volumes["spec"]["priority"] = 7
    with_volumes["spec"]["preemptionPolicy"] = "Never"
    with_volumes["status"]["nominatedNodeName"] = "env"
    for raw in [*pods, with_volumes]:
        whole, kept = pod_from_dict(raw), pod_from_dict(pending_fields(raw))
        for f in fields(whole):
            if f.name != "raw":
                assert getattr(kept, f.name) == getattr(whole, f.name), (raw["metadata"]["name"], f.name)
