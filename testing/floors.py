"""The package's floors (docs/design/layout.md, "Floors"), in one place for the floors
test and the structure drawing (`python -m testing.structure`): which room each module of
`extender` is in, and which rooms each module imports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "extender"

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


def room_of(path: Path, package: Path = PACKAGE) -> str:
    return path.relative_to(package).parts[0].removesuffix(".py")


def imports(path: Path, package: Path = PACKAGE) -> Iterator[tuple[str, bool]]:
    """(room imported, inside a function or TYPE_CHECKING) for each project import."""
    tree = ast.parse(path.read_text())
    dotted = ".".join(path.relative_to(package.parent).with_suffix("").parts[:-1])

    def walk(node: ast.AST, hidden: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            inner = hidden or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = dotted.split(".")[: len(dotted.split(".")) - child.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for alias in child.names:
                    yield (f"{base}.{alias.name}" if base == "extender" else base), inner
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, inner
            yield from walk(child, inner)

    for name, hidden in walk(tree, False):
        room = name.split(".")[1] if name.startswith("extender.") else ""
        if room and ((package / f"{room}.py").exists() or (package / room).is_dir()):
            yield room, hidden  # (not `extender.__version__`: the package's face)
