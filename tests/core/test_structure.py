"""The structure drawing (`python -m testing.structure`): the package as the floors test
sees it (no arrow that does not run down, no circle), and an arrow up and a circle are
found and drawn in their colours when a package has them."""

from __future__ import annotations

from pathlib import Path

from testing.floors import FLOOR, PACKAGE
from testing.structure import AMBER, GREY, RED, UNPLACED, main, read, svg


def test_the_package_has_no_arrow_up_and_no_circle(capsys):
    structure = read(PACKAGE)
    assert set(structure.rooms) == set(FLOOR)  # every room placed, `__main__` included
    assert ("server", "engine") in structure.arrows
    assert structure.upward() == set()
    assert structure.circles() == []
    main(["--repo", str(PACKAGE.parent)])
    printed = capsys.readouterr().out
    assert f"{len(FLOOR)} rooms on {len(set(FLOOR.values()))} floors" in printed
    assert "0 not running down, 0 circles" in printed


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "extender"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_an_arrow_up_a_circle_and_an_unplaced_room_are_found_and_drawn(tmp_path):
    structure = read(package(tmp_path, {
        "__init__.py": "",
        "model/__init__.py": "from extender.state import store\n",  # up: floor 0 -> 2
        "model/node.py": "x = 1\n\ny = 2\n",
        "state/store.py": "from ..model import node\n",  # and back down: a circle
        "engine.py": "from extender import model\n",
        "newroom.py": "import extender.engine\n",
        "caching.py": "import extender.engine\n",  # up: floor 1 -> 9, on no circle
    }))
    assert structure.rooms == {"model": [2, 4], "state": [1, 1], "engine": [1, 1], "newroom": [1, 1],
                               "caching": [1, 1]}
    assert structure.arrows == {("model", "state"): 1, ("state", "model"): 1,
                                ("engine", "model"): 1, ("newroom", "engine"): 1, ("caching", "engine"): 1}
    assert structure.upward() == {("model", "state"), ("caching", "engine")}
    assert structure.circles() == [{"model", "state"}]
    assert [label for label, _ in structure.rows()] == ["floor 0", "floor 1", "floor 2", "floor 9", UNPLACED]
    assert "5 rooms on 4 floors (1 without a floor: newroom)" in structure.summary()
    picture = svg(structure, "toy")
    assert picture.startswith("<svg") and picture.rstrip().endswith("</svg>")
    assert picture.count(f'stroke="{RED}"') == 2  # both arrows of the circle
    assert picture.count(f'stroke="{AMBER}"') == 1 and picture.count(f'stroke="{GREY}"') == 2
    assert ">newroom</text>" in picture and "2 modules · 4 lines" in picture
