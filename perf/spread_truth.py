"""Is an unschedulable pod of a burst really unschedulable? Checked against the truth.

With hard zone + hostname spread (maxSkew 1) a burst can reach a state where the zone
constraint admits only the nodes of the least-loaded zone(s) and the hostname
constraint only the least-loaded nodes, and the two sets are disjoint: no node fits,
and none ever will (upstream PodTopologySpread semantics). `TruthCheck` tells that case
from a wrong (e.g. stale cached) "no node" answer of the extender:

* `record(key)`, called by the simulator when it gives a pod up (under its cache lock,
  so nothing is assumed meanwhile), reads where the burst's pods (announced with
  `burst`) are bound in the API-server double at that moment and counts them per zone
  and per node;
* from those counts alone it computes the nodes that pass both constraints
  (`fitting_nodes`, written from the PodTopologySpread filter: a node passes a
  constraint when its domain's matching count + 1 - the minimum over the domains
  <= maxSkew);
* `verify()`, after the bursts, rebuilds the truth of each distinct moment (the same
  pods, bound where they were then) and asks the extender's reference engine
  (`fast=False`, in process, no caches) to filter the pod over every node: its answer
  must equal the counted one.

A pod is "wrongly unschedulable" when, at the moment it was given up and with no
binding in flight (in flight, the extender's view may legitimately lack pods the
truth has), the truth admits a node. Bursts of `--inflight-wait 0` may report pods
given up while binds were in flight; those are counted apart and also checked against
the burst's final truth.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.api.wire import decode_args
from extender.state import ClusterSnapshot, StaticSource
from perf.engine import default_config, new_extender

ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
Key = tuple[str, str]


def app_of(key: Key) -> str:
    """The burst a pod belongs to: pods are named `<app>-<index>`."""
    return key[1].rsplit("-", 1)[0]


def fitting_nodes(placed: dict[str, int], domain: dict[str, dict[str, str]], max_skew: int = 1) -> set[str]:
    """The nodes passing every hard spread constraint for one more pod of the burst.
    `placed`: the burst's pods bound per node; `domain[topology_key][node]`: the node's
    value for the key (every node has every key here, so every node is eligible)."""
    ok = set(domain[HOST])
    for of in domain.values():
        counts = Counter(dict.fromkeys(of.values(), 0))
        for node, n in placed.items():
            counts[of[node]] += n
        low = min(counts.values())
        ok &= {node for node, d in of.items() if counts[d] + 1 - low <= max_skew}
    return ok


@dataclass
class Moment:
    """The truth when one or more pods were given up: the burst's pods per node."""

    app: str
    placed: dict[str, int]
    bound: dict[Key, str]  # where each of the burst's pods was bound (to rebuild the truth)
    pod: Key  # the first pod given up in this state
    fits: set[str]
    in_flight: int
    pods: int = 0


@dataclass
class TruthCheck:
    """The moments pods were given up at, one per distinct truth (most pods of a
    deadlocked burst share one), and their verdicts (see the module docstring)."""

    api: Any  # tests.doubles.apiserver.FakeApiServer (perf must not import tests at load)
    domain: dict[str, dict[str, str]]
    binding: Callable[[], int] | None = None  # bindings in flight (the simulator's count)
    keys: dict[str, list[Key]] = field(default_factory=dict)  # app -> its pods
    moments: dict[tuple, Moment] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def burst(self, app: str, keys: list[Key]) -> None:
        """Announce a burst's pods (before submitting them): `record` reads only theirs."""
        self.keys[app] = keys

    def record(self, key: Key) -> None:
        app = app_of(key)
        bound = self.api.pod_nodes(self.keys[app])
        placed = Counter(bound.values())
        in_flight = self.binding() if self.binding else 0
        state = (app, tuple(sorted(placed.items())), in_flight > 0)
        with self.lock:
            moment = self.moments.get(state)
            if moment is None:
                moment = self.moments[state] = Moment(app, dict(placed), bound, key,
                                                      fitting_nodes(placed, self.domain), in_flight)
            moment.pods += 1

    def verify(self, app: str, nodes: list[dict], pods: list[dict], totals: dict) -> None:
        """Add to `totals` the counted and reference verdicts of every moment recorded
        for burst `app`, once the burst has settled. `nodes`/`pods`: the double's
        objects then (the other bursts' pods do not move meanwhile: every earlier burst
        had settled, no later one exists yet)."""
        by_key = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in pods}
        end = Counter(p["spec"]["nodeName"] for k, p in by_key.items()
                      if app_of(k) == app and p["spec"].get("nodeName"))
        final_fits = bool(fitting_nodes(end, self.domain))
        for m in (m for m in self.moments.values() if m.app == app):
            totals["distinct_states"] += 1
            if not m.fits and "deadlock_example" not in totals:
                totals["deadlock_example"] = {"pod": "/".join(m.pod), "placed": m.placed}
            totals["unschedulable_checked"] += m.pods
            totals["truth_admits_no_node"] += m.pods * (not m.fits)
            if m.in_flight:
                totals["given_up_with_binds_in_flight"] += m.pods
                totals["of_which_truth_admitted_a_node"] += m.pods * bool(m.fits)
            else:
                totals["wrongly_unschedulable"] += m.pods * bool(m.fits)
            totals["final_truth_admits_a_node"] += m.pods * final_fits
            reference = self.reference(nodes, by_key, m)
            if reference != m.fits:
                totals["reference_disagrees"] += m.pods
            if (m.fits or reference != m.fits) and len(totals["examples"]) < 5:
                totals["examples"].append({"pod": "/".join(m.pod), "placed": m.placed, "counted": sorted(m.fits),
                                           "reference": sorted(reference), "in_flight": m.in_flight})

    def reference(self, nodes: list[dict], by_key: dict[Key, dict], m: Moment) -> set[str]:
        """The reference engine's feasible nodes for `m.pod` on the truth of moment `m`:
        the burst's pods bound where they were then, every other pod as it is now."""
        def unbound(p: dict) -> dict:
            return {**p, "spec": {f: v for f, v in p["spec"].items() if f != "nodeName"}}

        objs = [*nodes]
        for k, p in by_key.items():
            if app_of(k) == m.app:
                p = unbound(p)
                if k in m.bound:
                    p["spec"]["nodeName"] = m.bound[k]
            objs.append(p)
        engine = new_extender(default_config(), StaticSource(ClusterSnapshot.from_objects(objs)), fast=False)
        body = {"Pod": unbound(by_key[m.pod]), "Nodes": None, "NodeNames": list(self.domain[HOST])}
        answer = engine.filter(decode_args(orjson.dumps(body)))
        if answer.get("Error"):
            raise AssertionError(f"reference filter failed: {answer['Error']}")
        return set(answer.get("NodeNames") or [])


def new_totals() -> dict:
    return {"distinct_states": 0, "unschedulable_checked": 0, "truth_admits_no_node": 0, "wrongly_unschedulable": 0,
            "given_up_with_binds_in_flight": 0, "of_which_truth_admitted_a_node": 0,
            "final_truth_admits_a_node": 0, "reference_disagrees": 0, "examples": []}
