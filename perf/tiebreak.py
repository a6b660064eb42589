"""How a real kube-scheduler breaks ties between nodes whose totals are equal, with the
extender's slim answers, with full answers and with its in-tree profile
(docs/reference/semantics.md 1.10).

    .venv/bin/python -m perf.tiebreak BINARY [--pods 40] [--modes slim,full,in-tree]

Four identical nodes; each pod is deleted once bound, so every scheduling cycle starts
from the same empty nodes and every total ties. With the extender every host scores the
same: a slim answer lists no host (`[]`), a full one every host with the same score.
Prints where the pods went, per mode. kube-scheduler v1.30 samples uniformly among tied
hosts in every mode; v1.36 breaks ties by a random number it draws only for hosts an
extender's answer lists, so a slim answer's ties (like the in-tree profile's) follow
the order of the feasible list.
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path

from perf import options
from testing.harness import E2ECluster, key_of, node, pod

MODES = ("slim", "full", "in-tree")


def placements(binary: str, mode: str, pods: int) -> dict[str, int]:
    """Node -> pods placed there, one pod at a time on four identical empty nodes."""
    flags = ("--slim-answers", "true" if mode == "slim" else "false")
    where: collections.Counter = collections.Counter()
    with E2ECluster(Path(tempfile.mkdtemp(prefix="tiebreak-")), binary, extender_flags=flags,
                    in_tree=mode == "in-tree") as cluster:
        cluster.start([node(f"n{i}") for i in range(4)])
        for i in range(pods):
            p = pod(f"p{i}", {"app": f"a{i}"}, cpu="1m")
            cluster.create(p)
            where.update(cluster.wait_settled([p], timeout=60).nodes_of([key_of(p)]).values())
            cluster.api.delete("pods", f"p{i}", "default")
    return dict(sorted(where.items()))


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("tiebreak", __doc__)
    parser.add_argument("binary", help="a kube-scheduler binary (v1.30 or v1.36)")
    options.add(parser, pods=40, helps={"pods": "pods scheduled in each mode"})
    parser.add_argument("--modes", default=",".join(MODES))
    ns = parser.parse_args(argv)
    for mode in (m for m in ns.modes.split(",") if m):
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
        print(mode, placements(ns.binary, mode, ns.pods), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
