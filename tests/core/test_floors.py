"""The package's floors (docs/design/layout.md, "Floors"): every import runs down, to a
room on a lower floor or within its own room, and none hides in a function (within a room
either)."""

from __future__ import annotations

import ast
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
# `extender --help` would take 0.75 s instead of 0.29 s (median on an idle 2-core machine)
# with the subcommands' imports (gunicorn, the engine, CEL) at the top of cli.py.
LAZY_ALLOWED = {"cli"}


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
