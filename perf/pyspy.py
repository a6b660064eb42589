"""Summarise a py-spy collapsed-stack file (`py-spy record --format raw`).

    .venv/bin/python -m perf.pyspy FILE [--under FUNC] [--top 30]

Prints the share of samples that include each function (inclusive) and that end in
it (self), optionally only over the stacks that pass through `--under` (e.g.
`filter`), so a profile of the serving worker can be read per verb.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from perf import options

FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """`func (path/to/module.py:123)` -> `func (module.py)`: lines merged per function."""
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m['func']} ({m['file'].rsplit('/', 1)[-1]})"


def load(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stacks.append(([frame_name(f) for f in stack.split(";")], int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]], under: str | None = None
              ) -> tuple[int, Counter, Counter]:
    total = 0
    inclusive: Counter = Counter()
    self_: Counter = Counter()
    for frames, n in stacks:
        if under is not None:
            cut = next((i for i, f in enumerate(frames) if f.startswith(under + " ")), None)
            if cut is None:
                continue
            frames = frames[cut:]
        total += n
        for f in set(frames):
            inclusive[f] += n
        self_[frames[-1]] += n
    return total, inclusive, self_


def main(argv: list[str] | None = None) -> int:
    parser = options.parser("pyspy", __doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--under", default=None, help="only stacks through this function")
    parser.add_argument("--top", type=int, default=30)
    ns = parser.parse_args(argv)
    total, inclusive, self_ = summarise(load(ns.file), ns.under)
    if not total:
        print("no samples")
        return 1
    print(f"{total} samples{' under ' + ns.under if ns.under else ''}")
    print("inclusive:")
    for f, n in inclusive.most_common(ns.top):
        print(f"  {100 * n / total:5.1f}%  {f}")
    print("self:")
    for f, n in self_.most_common(ns.top):
        print(f"  {100 * n / total:5.1f}%  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
