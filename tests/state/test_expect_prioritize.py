"""A filter answer over a list the layer had not seen registers the candidates of the
prioritize call that follows (its NodeNames are the answer's feasible names, in order):
that call is then served from the registration, with the same answer as a call that
decodes and resolves every name."""

from __future__ import annotations

import random

import numpy as np
import orjson
from conftest import EXAMPLES, example_pod

from extender.api.wire import decode_args, known_names_cache
from extender.config import Config
from extender.service import Extender
from extender.state.candidates import expect_prioritize, resolve
from extender.state.source import FileSource


def engine() -> Extender:
    return Extender(Config(), FileSource(str(EXAMPLES / "cluster.yaml")))


def test_the_next_prioritize_is_served_from_the_filter_answer():
    ext, fresh = engine(), engine()
    names = [n.name for n in ext.source.snapshot().nodes.nodes]
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(names)  # kube-scheduler's lists come in a new order for every pod
        pod = example_pod("sla-gt")
        answer = orjson.loads(ext.filter(decode_args(orjson.dumps({"Pod": pod, "NodeNames": names}))))
        feasible = answer["NodeNames"]
        assert len(feasible) >= 2
        text = orjson.dumps(feasible)  # as Go writes it
        assert known_names_cache().get(text) == feasible
        registered = ext.source.snapshot().nodes._candidates.get(text)
        assert registered is not None and registered.nodes.order == feasible
        body = orjson.dumps({"Pod": pod, "NodeNames": feasible})
        assert ext.prioritize(decode_args(body)) == fresh.prioritize(decode_args(body + b" "))  # not cut: decoded


def test_a_list_seen_before_registers_nothing():
    ext = engine()
    snapshot = ext.source.snapshot()
    names = [n.name for n in snapshot.nodes.nodes]
    key = orjson.dumps(names)
    first, again = resolve(snapshot, names, names_key=key), resolve(snapshot, names, names_key=key)
    assert first is again and again.served == 2  # one shared set, answered twice
    feasible = np.zeros(len(names), dtype=bool)
    feasible[[0, 2]] = True
    expect_prioritize(snapshot, again, feasible)  # a list served before: nothing to expect
    text = orjson.dumps([names[0], names[2]])
    assert snapshot.nodes._candidates.get(text) is None
    first.served = 1
    expect_prioritize(snapshot, first, feasible)  # a list first seen now: registered
    assert snapshot.nodes._candidates.get(text).nodes.uidx.tolist() == [0, 2]
