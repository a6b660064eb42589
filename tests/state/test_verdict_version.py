"""The `X-Extender-State-Version` of an answer names the state its verdict read, whatever
the feeds do meanwhile. The truth judges every placement at that version (testing/truth.py),
so an answer whose header ran ahead of (or behind) the snapshot it was computed on would
be judged against another cluster. Here a node relabel and a bookmark land in the store
at every point of a filter call (after each of its reads of the state), and each answer
must be the verdict of exactly the version its header names."""

from __future__ import annotations

import orjson
import pytest

from extender.api.wire import decode_args
from extender.state import ClusterSnapshot, ClusterSource, Store
from perf.engine import default_config, new_extender
from testing.harness import ZONE, node, pod, spread

LABELS = {"app": "web"}
RELABELLED, BOOKMARK = 20, 25  # the relabel's resourceVersion, then a bookmark's


def with_rv(obj: dict, rv: int) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}


class MovingSource(ClusterSource):
    """A store-backed source whose feed moves right after its `moves_after`-th read:
    n-c2 loses its zone label (rv 20) and a Node bookmark follows (rv 25)."""

    def __init__(self, moves_after: int) -> None:
        self.store = Store()
        self.reads = 0
        self.moves_after = moves_after
        for rv, obj in enumerate([node("n-a0", "a"), node("n-b0", "b"), node("n-c2", "c")], start=1):
            self.store.upsert("Node", with_rv(obj, rv), rv=str(rv))
        for rv, where in enumerate(["n-a0", "n-b0"], start=4):
            self.store.upsert("Pod", with_rv(pod(f"on-{where}", LABELS, node_name=where), rv), rv=str(rv))
        self.store.publish()

    def snapshot(self) -> ClusterSnapshot:
        snapshot = self.store.snapshot()
        self.reads += 1
        if self.reads == self.moves_after:
            gone = node("n-c2", "c")
            del gone["metadata"]["labels"][ZONE]
            self.store.upsert("Node", with_rv(gone, RELABELLED), rv=str(RELABELLED))
            self.store.advance("Node", str(BOOKMARK))
        return snapshot


def filter_once(source: MovingSource) -> tuple[dict[str, str], list[str]]:
    """(the answer's state version, its feasible names) for a pod spread over zones."""
    engine = new_extender(default_config(), source)
    pending = pod("x", LABELS, spread=[spread(ZONE, LABELS)])
    pending["metadata"]["uid"] = "uid-x"
    args = decode_args(orjson.dumps({"Pod": pending, "NodeNames": ["n-a0", "n-b0", "n-c2"]}))
    engine.take_state_version()
    answer = orjson.loads(engine.filter(args))
    version = dict(part.split("=") for part in engine.take_state_version().split(","))
    assert not answer["Error"], answer
    return version, answer["NodeNames"]


@pytest.mark.parametrize("moves_after", range(1, 8))
def test_an_answer_is_the_verdict_of_the_version_it_names(moves_after):
    """With n-c2 in zone c (a 1, b 1, c 0) only n-c2 keeps the skew; once it has no
    zone (a 1, b 1) n-a0 and n-b0 do, and n-c2 lacks the key. Whenever the relabel and
    the bookmark land, the header's Node version says which of the two was read."""
    source = MovingSource(moves_after)
    version, feasible = filter_once(source)
    if int(version["Node"]) >= RELABELLED:
        assert feasible == ["n-a0", "n-b0"], (version, feasible)
    else:
        assert int(version["Node"]) == 3 and feasible == ["n-c2"], (version, feasible)


def test_the_moves_land_both_before_and_after_the_verdicts_read():
    """The parametrization above covers both outcomes (it is not vacuous)."""
    outcomes = {filter_once(MovingSource(n))[1] == ["n-c2"] for n in range(1, 8)}
    assert outcomes == {True, False}
