"""The path of one POST /filter through the code: the server of a checkout built in
process on the bundled example cluster, the example pod `examples/pods/sla-gt.yaml` sent
against every node of the example cluster over a real connection, and every call into the
checkout's `extender/` recorded, on every thread, while it is answered.

    python testing/callpath.py --repo DIR [--list cold|warm]

prints, for the first request (cold: the caches it fills included) and for the same
request sent again (warm), how many distinct functions it calls (a lambda or comprehension
counts as the function it is in), in how many files, and how often the order of their
first calls moves from one file to another (and between which two files most often),
and how many calls it makes in all, how many of them into another file than the call
before (the walk back and forth between files, loops included); --list prints that path, one `file:function` a line. The app and its state are built
before the recording starts and the loop's periodic deadline sweep is put off, so the
path is the requests' own. Run it as a file, not a module, to measure another checkout
(an older one too): DIR goes first on the import path."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

Calls = list[tuple[str, str]]


@dataclass
class Record:
    """One request's calls: the path (each function at its first call), how many calls in
    all and how often one call is in another file than the call before it."""
    path: Calls = field(default_factory=list)
    calls: int = 0
    switches: int = 0
    last: str = ""

    def add(self, file: str, function: str) -> None:
        where = (file, function.split(".<locals>")[0])  # a lambda counts as its function
        if where not in self.path:
            self.path.append(where)
        self.calls += 1
        self.switches += file != self.last and self.calls > 1
        self.last = file


def trace(repo: Path) -> tuple[Record, Record]:
    """(file under extender/, function) of each function first called in the first
    /filter (cold: caches filled as it goes) and in the same request sent again (warm)."""
    sys.path.insert(0, str(repo))
    import orjson
    import yaml

    from extender.config import Config, bundled_cluster
    from extender.server import listener
    from extender.server.app import create_app
    from testing.client import Client

    cluster = yaml.safe_load((repo / "examples" / "cluster.yaml").read_text())
    nodes = [item["metadata"]["name"] for item in cluster["items"] if item["kind"] == "Node"]
    pod = yaml.safe_load((repo / "examples" / "pods" / "sla-gt.yaml").read_text())
    body = orjson.dumps({"Pod": pod, "NodeNames": nodes})

    root = str(repo / "extender") + "/"
    records: list[Record] = []  # per request; the last one is being recorded

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if records and event == "call" and frame.f_code.co_filename.startswith(root):
            records[-1].add(frame.f_code.co_filename.removeprefix(root), frame.f_code.co_qualname)

    sweep, listener.SWEEP_INTERVAL = listener.SWEEP_INTERVAL, 3600.0  # read at each turn of the loop
    app = create_app(Config(cluster=bundled_cluster(), reload_interval=0))
    threading.setprofile(profile)  # the listener's threads, started from here on
    sys.setprofile(profile)
    client = Client(app)
    try:
        for _ in range(2):
            records.append(Record())
            response = client.post("/filter", data=body)
            if response.status_code != 200 or b'"NodeNames":["' not in response.data:
                raise SystemExit(f"/filter answered {response.status_code}: {response.data[:300]!r}")
            settle(records[-1])
        records.append(Record())  # the listener's own threads go on calling (closing): not recorded
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        client.close()
        listener.SWEEP_INTERVAL = sweep
    return records[0], records[1]


def settle(record: Record) -> None:
    """Return once the loop has finished with the request: the answer reaches the client
    while the loop may still be recording what it does after sending it."""
    quiet = 0
    while quiet < 3:
        seen = record.calls
        time.sleep(0.05)
        quiet = quiet + 1 if record.calls == seen else 0


def moves(path: Calls) -> Counter[tuple[str, str]]:
    """How often the path goes from one file to another, per pair of files (either way)."""
    return Counter(tuple(sorted((a[0], b[0]))) for a, b in zip(path, path[1:], strict=False)
                   if a[0] != b[0])


def summary(record: Record, which: str) -> str:
    path, pairs = record.path, moves(record.path)
    (most, times), = pairs.most_common(1) or [(("-", "-"), 0)]
    return (f"POST /filter, {which}: {len(path)} functions over {len({f for f, _ in path})} files,"
            f" {sum(pairs.values())} moves from one file to another in the order of first calls"
            f" (the most between {most[0]} and {most[1]}: {times}); {record.calls:,} calls in all,"
            f" {record.switches:,} of them into another file than the call before.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout to measure (default: this one)")
    parser.add_argument("--list", choices=("cold", "warm"), help="list that path, one file:function a line")
    args = parser.parse_args(argv)
    records = dict(zip(("cold", "warm"), trace(args.repo.resolve()), strict=True))
    if args.list:
        print("\n".join(f"{file}:{function}" for file, function in records[args.list].path))
    for which, record in records.items():
        print(summary(record, which))


if __name__ == "__main__":
    main()
