"""The package's floors (docs/design/layout.md, "Floors"): every import runs down, to a
room on a lower floor or within its own room, and none hides in a function (within a room
either); each room imports only the third-party modules declared for it here, each brought
by a dependency pyproject.toml declares."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "extender"

# Bottom up; a room is a top-level module or package of `extender`.
FLOORS = [
    {"model", "features", "errors", "logs", "gotext", "ratelimit", "metrics"},
    {"caching", "request"},
    {"state"},
    {"framework", "matching"},
    {"cel", "api"},
    {"validation"},
    {"plugins"},
    {"schedconfig"},
    {"config"},
    {"engine"},
    {"explain"},
    {"events"},
    {"drift"},
    {"whatif"},
    {"server"},
    {"cli"},
    {"__main__"},
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
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


def room_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imports(path: Path):
    """(module imported, inside a function or TYPE_CHECKING) for each project import."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])

    def walk(node, hidden):
        for child in ast.iter_child_nodes(node):
            inner = hidden or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in child.names:
                    yield (f"{base}.{alias.name}" if base == "extender" else base), inner
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, inner
            yield from walk(child, inner)

    for name, hidden in walk(tree, False):
        room = name.split(".")[1] if name.startswith("extender.") else ""
        if room and ((PACKAGE / f"{room}.py").exists() or (PACKAGE / room).is_dir()):
            yield room, hidden  # (not `extender.__version__`: the package's face)


def test_every_room_has_a_floor():
    rooms = {room_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert rooms - set(FLOOR) == set(), "a new room: give it a floor here and in docs/design/layout.md"


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
