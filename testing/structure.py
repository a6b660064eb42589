"""The package's structure drawn from its own imports: each room of a checkout's `extender/`
(a top-level module or package, testing/floors.py) a box on its floor's row, bottom up,
labelled with its modules and lines, and an arrow for each room another imports. An arrow
that does not run down (up, or across its own floor) is amber, one on a circle red; rooms
that testing/floors.py gives no floor (an older checkout's) sit on a row of their own.

    python -m testing.structure --repo DIR --svg OUT.svg

prints a one-paragraph summary and, with --svg, writes the picture (plain SVG, no
dependency). It reads the files with `ast` and imports none of them, so it draws any
checkout, an old one too."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from testing.floors import FLOOR, FLOORS, imports, room_of

UNPLACED = "unplaced"
BOX_W, BOX_H, GAP, ROW_H, LEFT, TOP = 150, 44, 26, 84, 110, 96
GREY, AMBER, RED = "#7b8494", "#d97706", "#dc2626"


@dataclass
class Structure:
    rooms: dict[str, list[int]] = field(default_factory=dict)  # room -> [modules, lines]
    arrows: dict[tuple[str, str], int] = field(default_factory=dict)  # (from, to) -> imports
    hidden: int = 0  # project imports inside a function or under TYPE_CHECKING

    def rows(self) -> list[tuple[str, list[str]]]:
        """(label, rooms) bottom up: the floors with a room here, then the unplaced."""
        rows = [(f"floor {i}", sorted(rooms & self.rooms.keys())) for i, rooms in enumerate(FLOORS)]
        rows.append((UNPLACED, sorted(self.rooms.keys() - FLOOR.keys())))
        return [(label, rooms) for label, rooms in rows if rooms]

    def upward(self) -> set[tuple[str, str]]:
        """The arrows that do not run down (between two rooms that both have a floor)."""
        return {(a, b) for a, b in self.arrows if a in FLOOR and b in FLOOR and FLOOR[b] >= FLOOR[a]}

    def circles(self) -> list[set[str]]:
        """The rooms that import each other, directly or through others, in groups."""
        reach = {room: self._reach(room) for room in self.rooms}
        groups: list[set[str]] = []
        for room in sorted(self.rooms):
            group = {room} | {other for other in reach[room] if room in reach[other]}
            if len(group) > 1 and group not in groups:
                groups.append(group)
        return groups

    def _reach(self, start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            room = todo.pop()
            for a, b in self.arrows:
                if a == room and b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    def summary(self) -> str:
        circles = self.circles()
        modules = sum(m for m, _ in self.rooms.values())
        lines = sum(n for _, n in self.rooms.values())
        floors = sum(label != UNPLACED for label, _ in self.rows())
        unplaced = sorted(self.rooms.keys() - FLOOR.keys())
        return (f"{len(self.rooms)} rooms on {floors} floors"
                + (f" ({len(unplaced)} without a floor: {', '.join(unplaced)})" if unplaced else "")
                + f", {modules} modules, {lines:,} lines; {len(self.arrows)} arrows between rooms,"
                f" {len(self.upward())} not running down, {len(circles)} circles"
                + "".join(f" ({' / '.join(sorted(c))})" for c in circles)
                + f"; {self.hidden} project imports inside a function or under TYPE_CHECKING.")


def read(package: Path) -> Structure:
    """The rooms of `package` (its `__init__.py`, the package's face, aside) and their imports."""
    structure = Structure()
    for path in sorted(package.rglob("*.py")):
        room = room_of(path, package)
        if room == "__init__":
            continue
        counts = structure.rooms.setdefault(room, [0, 0])
        counts[0] += 1
        counts[1] += len(path.read_text().splitlines())
        for target, hidden in imports(path, package):
            structure.hidden += hidden
            if target != room and target != "__init__":
                structure.arrows[room, target] = structure.arrows.get((room, target), 0) + 1
    return structure


def svg(structure: Structure, title: str) -> str:
    rows = structure.rows()
    widest = max(len(rooms) for _, rooms in rows)
    width = LEFT + widest * (BOX_W + GAP) + GAP
    height = TOP + len(rows) * ROW_H + 20
    box: dict[str, tuple[float, float]] = {}  # room -> top-left corner
    for i, (_, rooms) in enumerate(rows):
        y = TOP + (len(rows) - 1 - i) * ROW_H + (ROW_H - BOX_H) / 2
        shift = 0 if len(rooms) == widest else ((i % 3) - 1) * BOX_W * 0.7  # lines pass beside
        x0 = LEFT + GAP + (widest - len(rooms)) * (BOX_W + GAP) / 2 + shift
        for j, room in enumerate(rooms):
            box[room] = (x0 + j * (BOX_W + GAP), y)
    upward, reach = structure.upward(), {room: structure._reach(room) for room in box}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
           f'font-family="sans-serif" viewBox="0 0 {width:.0f} {height}">',
           '<defs>' + "".join(
               f'<marker id="m{n}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
               f'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="{c}"/></marker>'
               for n, c in enumerate((GREY, AMBER, RED))) + '</defs>',
           f'<rect width="100%" height="100%" fill="white"/>'
           f'<text x="16" y="28" font-size="18" font-weight="bold">{escape(title)}</text>',
           f'<text x="16" y="52" font-size="12">{escape(structure.summary())}</text>',
           f'<text x="16" y="72" font-size="12">Rooms bottom up by floor; an arrow is an import. '
           f'<tspan fill="{AMBER}">Amber: runs up or across a floor.</tspan> '
           f'<tspan fill="{RED}">Red: on a circle.</tspan></text>']
    for i, (label, _) in enumerate(rows):
        y = TOP + (len(rows) - 1 - i) * ROW_H
        out.append(f'<rect x="0" y="{y}" width="{width:.0f}" height="{ROW_H}" '
                   f'fill="{"#f3f4f6" if i % 2 else "#ffffff"}"/>'
                   f'<text x="16" y="{y + ROW_H / 2 + 4}" font-size="12" fill="#555">{label}</text>')
    ends = _ends(structure, box)
    for (a, b), ((x1, y1), (x2, y2)) in sorted(ends.items()):
        colour = 2 if a in reach[b] else int((a, b) in upward)  # back from b to a: a circle
        stroke = (GREY, AMBER, RED)[colour]
        bend = f"Q{(x1 + x2) / 2},{min(y1, y2) - 30} " if y1 == y2 else "L"
        out.append(f'<path d="M{x1:.0f},{y1:.0f} {bend}{x2:.0f},{y2:.0f}" fill="none" '
                   f'stroke="{stroke}" stroke-opacity="{0.5 if colour == 0 else 0.95}" '
                   f'stroke-width="{1 if colour == 0 else 2}" marker-end="url(#m{colour})"/>')
    for room, (x, y) in box.items():
        modules, lines = structure.rooms[room]
        out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6" '
                   f'fill="#e8eefc" stroke="#3b4a6b"/>'
                   f'<text x="{x + BOX_W / 2:.0f}" y="{y + 18:.0f}" font-size="13" '
                   f'font-weight="bold" text-anchor="middle">{escape(room)}</text>'
                   f'<text x="{x + BOX_W / 2:.0f}" y="{y + 35:.0f}" font-size="11" '
                   f'text-anchor="middle">{modules} module{"s" * (modules != 1)} · {lines:,} lines</text>')
    return "\n".join(out + ["</svg>", ""])


def _ends(structure: Structure, box: dict[str, tuple[float, float]]) -> dict:
    """Each arrow's two ends, spread along the edges of its boxes in the order of the
    boxes at the other end, so that arrows into one box do not share a point."""
    def side(a: str, b: str) -> str:  # the edge of a's box an arrow to or from b leaves by
        return "bottom" if box[b][1] > box[a][1] else "top"
    points: dict[tuple[str, str], list] = {arrow: [None, None] for arrow in structure.arrows}
    for room in box:
        for edge in ("top", "bottom"):
            ones = sorted(((b if a == room else a), (a, b)) for a, b in structure.arrows
                          if room in (a, b) and side(room, b if a == room else a) == edge)
            ones.sort(key=lambda one: box[one[0]][0])
            x, y = box[room]
            for k, (_, arrow) in enumerate(ones):
                point = (x + BOX_W * (k + 1) / (len(ones) + 1), y + (BOX_H if edge == "bottom" else 0))
                points[arrow][arrow[0] != room] = point
    return points


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m testing.structure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose extender/ to draw (default: this one)")
    parser.add_argument("--svg", type=Path, help="write the picture here")
    parser.add_argument("--title", default="", help="the picture's title (default: the summary's)")
    args = parser.parse_args(argv)
    structure = read(args.repo.resolve() / "extender")
    print(structure.summary())
    if args.svg:
        args.svg.write_text(svg(structure, args.title or "extender/: rooms, floors and imports"))


if __name__ == "__main__":
    main()
