"""Differential test: our CEL engine against cel-go v0.26 with Kubernetes' CEL environment.

The reference is ``celoracle`` (a small Go program on cel-go v0.26.0 and k8s.io/apiserver
v0.35.1, built from the vendored sources by ``.ci/cel-oracle``; the Makefile passes its
path as ``CEL_ORACLE_BINARY``).  Expressions come from ``kubegen`` with a new seed each
run (printed; ``CEL_ORACLE_SEED`` repeats one): 300 in ``make test``, 3,000 in
``make test-long``, each on several taints.  Required: no difference in whether the
expression compiles (cel-go's program errors included), whether admission refuses it,
the (min, max) cost estimate, and per taint the value (true / false / error) and the
run-time cost units.  A difference is reported with the smallest closed sub-expression
that still differs (the oracle's ``-subexprs``).

The one tolerated variation is cel-go's: it iterates a map in Go's random order, so a
comprehension over a map may cost differently (and build a list in another order) from
one run to the next.  When an evaluation differs and iterated a map, it is repeated under
other iteration orders (``folds.MAP_ORDER``); it passes if one of them gives exactly the
oracle's value and cost.  Nothing else is tolerated.
"""

from __future__ import annotations

import json
import os
import random
import resource
import secrets
import subprocess
from dataclasses import dataclass, field

import pytest
from cornergen import CornerGen
from kubegen import KubeGen, heavy

from extender.cel import folds
from extender.cel.environment import CompileError
from extender.cel.program import admission_error, build, evaluate

SHORT, LONG = 300, 3000
CORNERS, LONG_CORNERS = 300, 4000
TAINTS = [
    {"key": "node.example.com/kernel-version", "value": "5.15.0", "effect": "NoSchedule"},
    {"key": "", "value": "", "effect": ""},
    {"key": "k", "value": "42", "effect": "NoExecute"},
    {"key": "zone-a1-rack-7", "value": "1Gi", "effect": "PreferNoSchedule"},
]
MAP_ORDERS = 48
#: the oracle's address space (RLIMIT_AS): cel-go folds constants at compile time, and a
#: generated expression can make it allocate without bound; past this it dies, and the
#: test says so instead of the machine swapping (the Go runtime reserves between 512 MiB and 1 GiB of it at start)
ORACLE_MEMORY = 3 << 30


def oracle_binary() -> str:
    path = os.environ.get("CEL_ORACLE_BINARY")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("the cel-go oracle is required: run the suite with `make test` (it builds "
                    "it with .ci/cel-oracle, see that script) or set "
                    f"CEL_ORACLE_BINARY to a built celoracle (got {path!r})")
    return path


def run_oracle(binary: str, expressions: list[str], taints: list[dict], tmp_path,
               flag: str | None = None, memory: int = ORACLE_MEMORY) -> list[dict]:
    taints_file = tmp_path / "taints.json"
    taints_file.write_text(json.dumps(taints))
    args = [binary, flag] if flag else [binary, str(taints_file)]
    stdin = "".join(json.dumps(e) + "\n" for e in expressions)

    def limit() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    done = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=3600, preexec_fn=limit)
    if done.returncode != 0 and ("out of memory" in done.stderr or "reserve" in done.stderr):
        pytest.fail(f"the cel-go oracle ran out of its memory limit: {memory >> 20} MiB of address space "
                    f"(RLIMIT_AS, ORACLE_MEMORY in {__name__}) on one of {len(expressions)} expressions; "
                    f"its error:\n{done.stderr[:500]}", pytrace=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == len(expressions), done.stderr[-2000:]
    return out


@dataclass
class Mine:
    compile: str = ""
    admit: str = ""
    estimate: tuple[int, int] = (0, 0)
    results: list[tuple[str, int]] = field(default_factory=list)
    runner: object = None


def ours(expression: str, taints: list[dict]) -> Mine:
    try:
        built = build(expression)
    except CompileError as exc:
        return Mine(compile=str(exc), admit=str(exc))
    mine = Mine(admit=admission_error(built) or "", estimate=built.estimate,
                runner=built.runner)
    mine.results = [_evaluate(built.runner, t) for t in taints]
    return mine


def _evaluate(runner, taint: dict) -> tuple[str, int]:
    kind, _message, used = evaluate(runner, taint["key"], taint["value"], taint["effect"])
    return (kind if kind in ("true", "false") else "error"), used


def differences(reference: dict, mine: Mine, taints: list[dict]) -> list[str]:
    out = []
    if bool(reference["compile"]) != bool(mine.compile):
        return [f"compiles: cel-go {reference['compile'][:120]!r}, ours {mine.compile[:120]!r}"]
    if bool(reference["admit"]) != bool(mine.admit):
        out.append(f"admission: cel-go {reference['admit'][:120]!r}, ours {mine.admit[:120]!r}")
    if reference["compile"]:
        return out
    if (reference["est_min"], reference["est_max"]) != mine.estimate:
        out.append(f"estimate: cel-go ({reference['est_min']}, {reference['est_max']}), "
                   f"ours {mine.estimate}")
    for taint, r, m in zip(taints, reference["r"], mine.results, strict=True):
        if (r["v"], r["cost"]) != m and not _some_map_order_agrees(mine, taint, r):
            out.append(f"taint {taint}: cel-go {r['v']}/{r['cost']} {r.get('msg', '')[:80]!r}, "
                       f"ours {m[0]}/{m[1]}")
    return out


def _some_map_order_agrees(mine: Mine, taint: dict, reference: dict) -> bool:
    """cel-go iterates maps in random order: does another order give cel-go's answer?
    Only when the evaluation iterated a map at all."""
    iterated = []

    def record(keys: list) -> list:
        iterated.append(len(keys))
        return keys

    folds.MAP_ORDER = record
    try:
        _evaluate(mine.runner, taint)
        if not any(n > 1 for n in iterated):
            return False
        for seed in range(MAP_ORDERS):
            shuffler = random.Random(seed)
            folds.MAP_ORDER = lambda keys, s=shuffler: s.sample(keys, len(keys))
            if _evaluate(mine.runner, taint) == (reference["v"], reference["cost"]):
                return True
        return False
    finally:
        folds.MAP_ORDER = None


def smallest_difference(binary: str, expression: str, taints: list[dict], tmp_path) -> str:
    """The smallest closed sub-expression that still differs (fewest nodes)."""
    (listing,) = run_oracle(binary, [expression], taints, tmp_path, flag="-subexprs")
    subs = sorted(listing.get("subs") or [], key=lambda s: s["nodes"])
    candidates = [s["text"] for s in subs if s["text"] != expression][:200]
    if not candidates:
        return expression
    references = run_oracle(binary, candidates, taints, tmp_path)
    for text, reference in zip(candidates, references, strict=True):
        if differences(reference, ours(text, taints), taints):
            return text
    return expression


def corpus(seed: int, count: int) -> list[str]:
    gen, rng = KubeGen(seed), random.Random(seed)
    return [heavy(rng) if rng.random() < 0.02 else gen.expression() for _ in range(count)]


@pytest.mark.parametrize("count", [SHORT, pytest.param(LONG, marks=pytest.mark.long)])
def test_cel_go_differential(count, tmp_path, record_property):
    binary = oracle_binary()
    seed = int(os.environ.get("CEL_ORACLE_SEED") or secrets.randbits(32))
    record_property("cel_oracle_seed", seed)
    print(f"cel-go differential: seed {seed}, {count} expressions x {len(TAINTS)} taints")
    kinds = _differential(binary, corpus(seed, count), seed, tmp_path)
    # the corpus must exercise every outcome
    assert all(n > 0 for n in kinds.values()), kinds


#: Documented differences (docs/reference/cel.md, "Known differences"), each excluded by
#: name when cel-go's answer is the documented one; anything else must agree.
KNOWN_DIFFERENCES = {
    # cel-go panics building a map with a bytes key (Go cannot hash its []byte)
    "bytes map key": lambda reference: "hash of unhashable type types.Bytes"
    in reference["compile"] + "".join(r.get("msg", "") for r in reference.get("r") or []),
}


@pytest.mark.parametrize("count", [CORNERS, pytest.param(LONG_CORNERS, marks=pytest.mark.long)])
def test_cel_go_corner_differential(count, tmp_path, record_property):
    """The corners (``cornergen``): literal forms, quantity scales and suffixes, special
    doubles in every format verb, conversions from every type, map keys of every kind,
    nesting at the parser limits."""
    binary = oracle_binary()
    seed = int(os.environ.get("CEL_ORACLE_SEED") or secrets.randbits(32))
    record_property("cel_oracle_seed", seed)
    print(f"cel-go corner differential: seed {seed}, {count} expressions x {len(TAINTS)} taints")
    gen = CornerGen(seed)
    expressions = [gen.expression() for _ in range(count)]
    kinds = _differential(binary, expressions, seed, tmp_path, KNOWN_DIFFERENCES)
    assert kinds["true"] > 0 and kinds["compile"] > 0 and kinds["error"] > 0, kinds


def _differential(binary: str, expressions: list[str], seed: int, tmp_path,
                  known: dict | None = None) -> dict:
    """Compare every expression with cel-go; fail with the smallest differing
    sub-expressions of the first five that differ."""
    references = run_oracle(binary, expressions, TAINTS, tmp_path)
    failures, kinds = [], {"compile": 0, "refused": 0, "true": 0, "false": 0, "error": 0}
    excluded = dict.fromkeys(known or {}, 0)
    for expression, reference in zip(expressions, references, strict=True):
        rule = next((name for name, applies in (known or {}).items() if applies(reference)),
                    None)
        if rule is not None:
            excluded[rule] += 1
            continue
        mine = ours(expression, TAINTS)
        _count(kinds, reference)
        found = differences(reference, mine, TAINTS)
        if found:
            failures.append((expression, found))
    if excluded:
        print(f"excluded as known differences: {excluded}")
    report = []
    for expression, found in failures[:5]:
        smallest = smallest_difference(binary, expression, TAINTS, tmp_path)
        detail = differences(run_oracle(binary, [smallest], TAINTS, tmp_path)[0],
                             ours(smallest, TAINTS), TAINTS) or found
        report.append(f"{expression}\n  smallest differing: {smallest}\n    "
                      + "\n    ".join(detail))
    assert not failures, (f"seed {seed} (CEL_ORACLE_SEED={seed} repeats it): "
                          f"{len(failures)} of {len(expressions)} expressions differ from "
                          "cel-go:\n" + "\n".join(report))
    return kinds


def _count(kinds: dict, reference: dict) -> None:
    if reference["compile"]:
        kinds["compile"] += 1
        return
    if reference["admit"]:
        kinds["refused"] += 1
    for r in reference["r"]:
        kinds[r["v"]] += 1


def test_specialised_loops_charge_what_the_generic_fold_charges():
    """The macros' specialised loops (folds.py) against the generic fold over the same
    expansion, on the same corpus kind, without the oracle."""
    gen = KubeGen(secrets.randbits(32))
    expressions = [gen.expression() for _ in range(300)]
    for expression in expressions:
        try:
            special = ours(expression, TAINTS)
        except CompileError:
            continue
        folds.SPECIALISE = False
        try:
            generic = ours(expression, TAINTS)
        finally:
            folds.SPECIALISE = True
        assert special.results == generic.results, expression


def test_an_oracle_out_of_memory_fails_naming_its_limit(tmp_path):
    """Under a limit too small for it the oracle dies; the test says which limit."""
    with pytest.raises(pytest.fail.Exception, match=r"memory limit: 64 MiB of address space \(RLIMIT_AS"):
        run_oracle(oracle_binary(), ["1 == 1"], TAINTS, tmp_path, memory=64 << 20)


def test_a_missing_oracle_fails_clearly(monkeypatch):
    monkeypatch.delenv("CEL_ORACLE_BINARY", raising=False)
    with pytest.raises(pytest.fail.Exception, match="the cel-go oracle is required"):
        oracle_binary()
