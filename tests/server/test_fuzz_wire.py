"""Hostile and malformed arguments never crash the server: every answer is a 200 with
`Error` set (or a clear 4xx), never a 500, and the server keeps serving."""

from __future__ import annotations

import json

import orjson
import pytest
from conftest import EXAMPLES, example_pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.config import Config
from extender.server.app import create_app
from testing.client import Client

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)

POD_PATHS = [
    ("spec", "tolerations"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    ("spec", "topologySpreadConstraints"),
    ("spec", "priority"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "namespace"),
    ("metadata", "ownerReferences"),
    ("status",),
]
FIELD_KEYS = ["key", "operator", "value", "effect", "expression", "maxSkew", "topologyKey",
              "whenUnsatisfiable", "labelSelector", "minDomains", "nodeTaintsPolicy",
              "nodeAffinityPolicy", "matchLabelKeys", "requiredDuringSchedulingIgnoredDuringExecution",
              "preferredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", "matchExpressions",
              "values", "weight", "preference", "scheduling-extender.io/tolerations",
              "scheduling-extender.io/node-affinity"]


@pytest.fixture(scope="module")
def client():
    config = Config(cluster=str(EXAMPLES / "cluster.yaml"), reload_interval=0)
    return Client(create_app(config))


def _put(obj: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = obj[key] = {}
        obj = nxt
    obj[path[-1]] = value


structured = st.dictionaries(st.sampled_from(FIELD_KEYS), JSON, max_size=5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(POD_PATHS), value=JSON | structured | st.lists(structured, max_size=3),
       verb=st.sampled_from(["filter", "prioritize"]))
def test_hostile_pod_fields_never_500(client, path, value, verb):
    pod = example_pod("spread-spot")
    _put(pod, path, value)
    body = {"Pod": pod, "NodeNames": ["od-a1", "spot-a1", "x"]}
    response = client.post(f"/{verb}", data=json.dumps(body).encode())  # ints beyond int64 too
    assert response.status_code in (200, 400), response.data
    body = orjson.loads(response.data)
    if response.status_code == 400:
        assert body["error"]
    elif verb == "filter":
        assert body["Error"] or body["NodeNames"] is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON)
def test_arbitrary_json_bodies_never_500(client, body):
    response = client.post("/filter", data=json.dumps(body).encode())
    assert response.status_code in (200, 400)
    assert client.get("/healthz").status_code == 200


ANNOTATION_VALUES = st.lists(structured, max_size=3) | structured | JSON


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["tolerations", "node-affinity"]), value=ANNOTATION_VALUES,
       verb=st.sampled_from(["filter", "prioritize"]))
def test_hostile_annotations_never_500(client, which, value, verb):
    pod = example_pod("plain")
    pod["metadata"]["annotations"] = {f"scheduling-extender.io/{which}": json.dumps(value)}
    body = {"Pod": pod, "NodeNames": ["od-a1", "od-b1"]}
    response = client.post(f"/{verb}", data=json.dumps(body).encode())
    assert response.status_code in (200, 400), response.data
