"""The package's floors (docs/design/layout.md, "Floors"; the table is testing/floors.py's):
every import runs down, to a room on a lower floor or within its own room, and none hides
in a function (within a room either); each room imports only the third-party modules
declared for it here, each brought by a dependency pyproject.toml declares."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

from testing.floors import FLOOR, PACKAGE, imports, room_of

# `extender --help` stays quick only without the subcommands' imports (gunicorn, the
# engine, CEL) at the top of cli.py.
LAZY_ALLOWED = {"cli"}

# The third-party modules each room may import (anywhere in it, functions included); a
# room not named imports none. A new one is a decision: the web framework stays in the
# server, the API client where the cluster is read, written or told.
THIRD_PARTY = {
    "api": {"numpy", "orjson"},
    "caching": {"cachetools"},
    "cel": {"celpy", "lark", "re2"},
    "cli": {"orjson"},
    "config": {"yaml"},
    "drift": {"orjson"},
    "engine": {"kubernetes", "numpy", "orjson", "urllib3"},
    "events": {"cachetools", "kubernetes", "orjson"},
    "framework": {"numpy"},
    "logs": {"orjson"},
    "matching": {"numpy"},
    "metrics": {"prometheus_client"},
    "plugins": {"numpy"},
    "schedconfig": {"yaml"},
    "server": {"flask", "gunicorn", "kubernetes", "orjson", "prometheus_client", "werkzeug"},
    "state": {"kubernetes", "numpy", "orjson", "urllib3", "yaml"},
    "validation": {"orjson", "yaml"},
    "whatif": {"orjson"},
}
# The dependency in pyproject.toml that brings each module (werkzeug, urllib3 and lark
# come with flask, kubernetes and cel-python, at the versions those require).
DISTRIBUTION = {
    "cachetools": "cachetools", "celpy": "cel-python", "flask": "flask", "gunicorn": "gunicorn",
    "kubernetes": "kubernetes", "lark": "cel-python", "numpy": "numpy", "orjson": "orjson",
    "prometheus_client": "prometheus-client", "re2": "google-re2", "urllib3": "kubernetes",
    "werkzeug": "flask", "yaml": "pyyaml",
}


def test_every_room_has_a_floor():
    rooms = {room_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert rooms - set(FLOOR) == set(), "a new room: give it a floor in testing/floors.py and docs/design/layout.md"


def test_imports_run_down():
    climbs = [f"{p.relative_to(PACKAGE.parent)} -> extender.{target}"
              for p in sorted(PACKAGE.rglob("*.py")) if room_of(p) in FLOOR
              for target, _ in imports(p)
              if target != room_of(p) and FLOOR[target] >= FLOOR[room_of(p)]]
    assert climbs == []


def test_no_import_hides_in_a_function():
    hidden = [f"{p.relative_to(PACKAGE.parent)} -> extender.{target}"
              for p in sorted(PACKAGE.rglob("*.py")) if room_of(p) not in LAZY_ALLOWED
              for target, inside in imports(p)
              if inside]
    assert hidden == []


def third_party(path: Path) -> set[str]:
    """The top-level names of the modules `path` imports that are neither the standard
    library's nor the package's own."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add((node.module or "").split(".")[0])
    return names - set(sys.stdlib_module_names) - {"extender", "__future__"}


def test_third_party_imports_are_declared_per_room():
    used: dict[str, set[str]] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        used.setdefault(room_of(p), set()).update(third_party(p))
    undeclared = sorted(f"{room} imports {name}" for room, names in used.items()
                        for name in names - THIRD_PARTY.get(room, set()))
    assert undeclared == [], "declare it in THIRD_PARTY (and docs/design/layout.md) or import it elsewhere"
    unused = sorted(f"{room}: {name}" for room, names in THIRD_PARTY.items()
                    for name in names - used.get(room, set()))
    assert unused == [], "no longer imported there: take it out of THIRD_PARTY"


def test_every_third_party_module_comes_with_a_declared_dependency():
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    modules = set().union(*THIRD_PARTY.values())
    assert modules - set(DISTRIBUTION) == set()
    assert {DISTRIBUTION[m] for m in modules} - declared == set()
