"""`extender.server.queues.FairLane`: bounded per lane and per client address, clients
served in turn, the heaviest client's newest request evicted for a lighter client's, a
waiting request taken out when its client leaves."""

from __future__ import annotations

import threading

from extender.server.queues import FairLane


def blocked_lane(limit: int = 6, per_client: int = 3):
    """A lane of one thread, held on its first item until `go` is set; `ran`: items run."""
    go, ran, started = threading.Event(), [], threading.Event()

    def run(item):
        if item == "first":
            started.set()
            go.wait(30)
        ran.append(item)

    lane = FairLane("test", 1, limit, per_client, run)
    assert lane.offer("x", "first") == (True, None)
    assert started.wait(30)
    return lane, go, ran


def finish(lane, go, ran, count: int):
    go.set()
    deadline = threading.Event()
    for _ in range(600):
        if len(ran) >= count and lane.idle():
            break
        deadline.wait(0.05)
    lane.shutdown()


def test_clients_are_served_in_turn():
    lane, go, ran = blocked_lane(limit=10, per_client=5)
    for item in ("a1", "a2", "a3", "b1", "c1", "b2"):
        assert lane.offer(item[0], item) == (True, None)
    finish(lane, go, ran, 7)
    assert ran == ["first", "a1", "b1", "c1", "a2", "b2", "a3"]


def test_bounds_per_client_and_per_lane_and_the_heaviest_makes_room():
    lane, go, ran = blocked_lane(limit=4, per_client=3)
    assert [lane.offer("a", f"a{i}")[0] for i in range(4)] == [True, True, True, False]  # a's share: 3
    assert lane.offer("b", "b1") == (True, None)  # the lane is full now (4)
    assert lane.offer("c", "c1") == (True, "a2")  # a has 3, c none: a's newest goes
    assert lane.offer("c", "c2") == (False, None)  # a 2, b 1, c 1: nobody has two more than c
    assert lane.remove("b", "b1") and not lane.remove("b", "b1")  # its client left
    assert lane.offer("d", "d1") == (True, None)
    finish(lane, go, ran, 5)
    assert ran == ["first", "a0", "c1", "d1", "a1"]
