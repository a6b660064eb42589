"""The path of one POST /filter (`testing/callpath.py`): it starts where the server reads
the request, goes through a plugin's filter and ends where the server writes the answer,
the loop's turns marking the verbs' listener at work and idle around it
(`extender.request.foreground`: first called before or after the write, as the turns
fall); its counts are those of the path it lists."""

from __future__ import annotations

from testing.callpath import Record, moves, summary, trace
from testing.floors import PACKAGE


def test_the_filter_path_runs_from_the_server_through_a_plugin_filter_and_back():
    for record in trace(PACKAGE.parent):
        files = [file for file, _ in record.path]
        served = [file for file in files if file != "request/foreground.py"]  # the turn's marks
        assert served[0].startswith("server/") and served[-1].startswith("server/")
        assert {("request/foreground.py", "Foreground.enter"),
                ("request/foreground.py", "Foreground.leave")} <= set(record.path)
        assert any(file.startswith("plugins/") and function.endswith((".filter", ".filter_nodes"))
                   for file, function in record.path)
        assert any(file.startswith("engine/") for file in files)
        assert len(set(record.path)) == len(record.path)  # each function once, at its first call
        assert record.calls >= len(record.path) and record.switches >= sum(moves(record.path).values())


def test_the_counts_are_the_paths():
    record = Record()
    for file, function in [("a.py", "f"), ("b.py", "g"), ("a.py", "f"), ("a.py", "h.<locals>.<lambda>"),
                           ("b.py", "g"), ("c.py", "k")]:
        record.add(file, function)
    assert record.path == [("a.py", "f"), ("b.py", "g"), ("a.py", "h"), ("c.py", "k")]
    assert (record.calls, record.switches) == (6, 4)
    assert moves(record.path) == {("a.py", "b.py"): 2, ("a.py", "c.py"): 1}
    assert summary(record, "warm").startswith("POST /filter, warm: 4 functions over 3 files, 3 moves")
