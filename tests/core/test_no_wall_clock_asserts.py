"""No pass/fail verdict rests on the wall clock (docs/design/layout.md, "Running the
tests"): a lint over every test module, and a test that the lint catches what it must.

What it flags, in an `assert` (or a `pytest.fail`/`raise` guarded by an `if`):

* a comparison with an *elapsed wall-clock time* as its upper side: `time.monotonic() -
  started < 6.0`, `took < bound`, `max(took) <= limit`, where the elapsed time is a
  difference of `time.monotonic()`, `time.perf_counter()`, `time.time()` (or their `_ns`
  forms), or a name, list or function result that carries one (a helper that returns
  `(status, time.monotonic() - started)` taints what is unpacked from its second item);
* a bound *scaled from a baseline* is caught the same way: it is computed from elapsed
  times, and the comparison it appears in has one on its side;
* `@pytest.mark.timeout(...)`: a pytest timeout as a verdict.

What it allows, on purpose:

* waiting for a condition with a deadline (`assert time.monotonic() < deadline`, a
  socket's or a request's timeout): a hang guard, generous, never a verdict on speed;
* lower bounds (`took >= 0.3`: a delay that happened): a slow machine can only make
  them hold;
* CPU time (`time.thread_time()`, `time.process_time()`, psutil's `cpu_times()`):
  load on other cores does not stretch it;
* `tests/perf/` is not exempt: timing belongs in the top-level `perf/`, outside `tests/`.

`ALLOWED` lists the exceptions, each with its reason; it is empty, and a new entry needs
one.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
WALL_CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}
#: (path relative to tests/, function name) -> why a wall-clock verdict is right there
ALLOWED: dict[tuple[str, str], str] = {}


def _is_wall_clock_call(node: ast.AST) -> bool:
    """`time.monotonic()`, `time.perf_counter()`, `monotonic()` ... (not `thread_time`)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in WALL_CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in WALL_CLOCKS - {"time"}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class _Taint:
    """What carries an elapsed wall-clock time in one module: names per function, and
    the module's functions whose result (or one item of it) is one."""

    def __init__(self) -> None:
        self.functions: dict[str, set[int] | None] = {}  # name -> tuple items (None: the whole result)

    def elapsed(self, node: ast.AST, names: set[str]) -> bool:
        """Whether `node` carries an elapsed wall-clock time."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and (
                _is_wall_clock_call(node.left) or _is_wall_clock_call(node.right)):
            return True
        if isinstance(node, ast.Call):
            func = _dotted(node.func)
            if func == "len":
                return False  # a count of measurements is a count
            if func in self.functions and self.functions[func] is None:
                return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
            items = self.functions.get(_dotted(node.value.func) or "", set())
            if items is not None and isinstance(node.slice, ast.Constant):
                return node.slice.value in items
        dotted = _dotted(node)
        if dotted is not None and dotted in names:
            return True
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        return any(self.elapsed(child, names) for child in ast.iter_child_nodes(node))

    def bind(self, target: ast.AST, value: ast.AST, names: set[str]) -> bool:
        """Taint what `target = value` assigns; True when something new was tainted."""
        before = len(names)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):
                self.bind(t, v, names)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call):
            items = self.functions.get(_dotted(value.func) or "", set())
            for i, t in enumerate(target.elts):
                if (items is None or i in items) and _dotted(t):
                    names.add(_dotted(t))
        elif self.elapsed(value, names):
            root = target.value if isinstance(target, ast.Subscript) else target
            if _dotted(root):
                names.add(_dotted(root))
        return len(names) > before

    def returns(self, function: ast.AST, names: set[str]) -> set[int] | None | bool:
        """The items of `function`'s result that carry an elapsed time (None: all of it;
        False: none)."""
        items: set[int] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None:
                if isinstance(node.value, ast.Tuple):
                    items |= {i for i, v in enumerate(node.value.elts) if self.elapsed(v, names)}
                elif self.elapsed(node.value, names):
                    return None
        return items or False


def _tainted_names(function: ast.AST, taint: _Taint) -> set[str]:
    """Names in `function` that carry an elapsed time (to a fixed point: `took`, then
    `bound = max(2.0, 10 * max(took))`)."""
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    changed |= taint.bind(target, node.value, names)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                changed |= taint.bind(node.target, node.value, names)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("append", "add", "extend") and node.args
                  and _dotted(node.func.value) and taint.elapsed(node.args[0], names)
                  and _dotted(node.func.value) not in names):
                names.add(_dotted(node.func.value))
                changed = True
    return names


_UPPER = (ast.Lt, ast.LtE)
_LOWER = (ast.Gt, ast.GtE)


def _upper_bound_on_elapsed(compare: ast.Compare, taint: _Taint, names: set[str], fails: bool = False) -> bool:
    """Whether `compare` holds an elapsed time below something (`took < bound`,
    `bound > took`): the verdict a slow machine can break. Lower bounds pass. `fails`:
    the comparison says when the test fails (`if took > 2: pytest.fail(...)`)."""
    upper, lower = (_LOWER, _UPPER) if fails else (_UPPER, _LOWER)
    operands = [compare.left, *compare.comparators]
    for (left, right), op in zip(zip(operands, operands[1:], strict=False), compare.ops, strict=False):
        if isinstance(op, upper) and taint.elapsed(left, names):
            return True
        if isinstance(op, lower) and taint.elapsed(right, names):
            return True
    return False


def violations(source: str, filename: str = "<test>") -> list[tuple[int, str, str]]:
    """(line, function, text) of each wall-clock verdict in a test module's source."""
    tree = ast.parse(source, filename)
    taint = _Taint()
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    changed = True
    while changed:  # helpers that return an elapsed time, and helpers of helpers
        changed = False
        for function in functions:
            items = taint.returns(function, _tainted_names(function, taint))
            if items is not False and taint.functions.get(function.name, False) != items:
                taint.functions[function.name] = items
                changed = True
    found = []
    for function in functions:
        names = _tainted_names(function, taint)
        for decorator in function.decorator_list:
            if "mark.timeout" in ast.unparse(decorator):
                found.append((decorator.lineno, function.name, ast.unparse(decorator)))
        for node in ast.walk(function):
            if isinstance(node, ast.Assert):
                fails = False
            elif isinstance(node, ast.If) and node.body and (
                    isinstance(node.body[0], ast.Raise) or "fail(" in ast.unparse(node.body[0])):
                fails = True
            else:
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                if _upper_bound_on_elapsed(compare, taint, names, fails):
                    found.append((node.lineno, function.name, ast.unparse(compare)))
    return sorted(set(found))


def test_no_test_asserts_a_wall_clock_bound():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        for line, function, text in violations(path.read_text(), str(path)):
            if (rel, function) not in ALLOWED:
                found.append(f"tests/{rel}:{line} in {function}: {text}")
    assert found == [], ("a verdict on the wall clock (wait for a condition, or count CPU seconds; "
                         "docs/design/layout.md):\n" + "\n".join(found))


def test_every_allowance_still_has_a_use():
    for rel, function in ALLOWED:
        assert any(f == function for _, f, _ in violations((TESTS / rel).read_text())), (rel, function)


SAMPLES_FLAGGED = {
    "direct": """
def test_x():
    started = time.monotonic()
    work()
    assert time.monotonic() - started < 6.0
""",
    "through a name": """
def test_x():
    started = time.perf_counter()
    work()
    took = time.perf_counter() - started
    assert status == 200 and took < BOUND, took
""",
    "scaled from a baseline": """
def served(port):
    started = time.monotonic()
    status = request(port)
    return status, time.monotonic() - started

def test_x(port):
    took = []
    for _ in range(3):
        took.append(served(port)[1])
    bound = max(2.0, 10 * max(took))
    attack()
    status, seconds = served(port)
    assert status == 200
    assert seconds < bound
""",
    "the bound on the left": """
def test_x():
    t0 = time.time()
    work()
    elapsed = time.time() - t0
    assert 5 > elapsed
""",
    "an if that fails": """
def test_x():
    t0 = time.monotonic()
    work()
    if time.monotonic() - t0 > 2:
        pytest.fail("too slow")
""",
    "a pytest timeout": """
@pytest.mark.timeout(5)
def test_x():
    work()
""",
}

SAMPLES_ALLOWED = {
    "a hang guard": """
def test_x():
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, "never done"
""",
    "a lower bound": """
def test_x():
    start = time.monotonic()
    slow_request()
    assert time.monotonic() - start >= 0.3
""",
    "CPU seconds": """
def test_x():
    started = time.thread_time()
    work()
    assert time.thread_time() - started < HANG
""",
    "a count of measurements": """
def test_x():
    cut = []
    for sock in socks:
        cut.append(time.monotonic() - opened)
    assert len(cut) == 64
""",
}


def test_the_lint_catches_each_kind_of_wall_clock_verdict():
    for name, source in SAMPLES_FLAGGED.items():
        assert violations(source), f"not flagged: {name}"


def test_the_lint_leaves_hang_guards_lower_bounds_and_cpu_time_alone():
    for name, source in SAMPLES_ALLOWED.items():
        assert violations(source) == [], f"flagged: {name}"
