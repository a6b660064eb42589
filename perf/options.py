"""The options the benchmarks share, declared once.

`parser(NAME, __doc__, nodes=5000, out=None, ...)` is `python -m perf NAME`'s parser
with the shared options a benchmark takes (each keyword is one, its value the default);
the benchmark adds only its own options after them. The flags and their types are the
same in every benchmark, so `--nodes`, `--pods`, `--requests`, `--seed`, `--out`,
`--seconds` and `--server-arg` mean one thing wherever they are accepted.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# keyword -> what `add_argument` takes besides the default (the help is the common one)
SHARED: dict[str, dict[str, Any]] = {
    "nodes": {"type": int, "help": "nodes in the generated cluster"},
    "pods": {"type": int, "help": "pods in the generated cluster"},
    "requests": {"type": int, "help": "timed pods per run"},
    "seed": {"type": int, "help": "seed of the generated cluster and workload"},
    "out": {"type": Path, "help": "where the result is written"},
    "seconds": {"type": float, "help": "seconds each scenario runs"},
    "server_arg": {"action": "append",
                   "help": "extra `extender serve` argument, e.g. --server-arg=--threads=8"},
}


def parser(name: str, doc: str | None, *, whole_doc: bool = False,
           helps: dict[str, str] | None = None, **shared: Any) -> argparse.ArgumentParser:
    """The parser of `python -m perf NAME`: the module docstring's first paragraph as the
    description (`whole_doc`: all of it, as written), then the shared options named."""
    doc = doc or ""
    made = argparse.ArgumentParser(
        prog=f"python -m perf {name}",
        description=doc if whole_doc else doc.split("\n\n")[0],
        formatter_class=(argparse.RawDescriptionHelpFormatter if whole_doc
                         else argparse.HelpFormatter))
    add(made, helps=helps, **shared)
    return made


def add(parser: argparse.ArgumentParser, *, helps: dict[str, str] | None = None,
        **shared: Any) -> None:
    """Add the shared options named, each with the default given (`helps`: a benchmark's
    own words for what one of them means there)."""
    helps = helps or {}
    for name, default in shared.items():
        spec = {**SHARED[name], "default": default}
        spec["help"] = helps.get(name, spec["help"])
        parser.add_argument("--" + name.replace("_", "-"), **spec)


def kube_scheduler(parser: argparse.ArgumentParser) -> str:
    """The real kube-scheduler binary, or the usage error saying how to get one."""
    from testing.harness import BINARY_ENV, scheduler_binary

    binary = scheduler_binary()
    if binary is None:
        parser.error(f"{BINARY_ENV} is not set (`make perf-scheduler` sets it through "
                     ".ci/kube-scheduler)")
    return binary
