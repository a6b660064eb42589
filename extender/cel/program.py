"""Compile (validate + estimate + build the runner) and evaluate one expression.

``compile_program`` is the admission-style check: length, syntax, nesting depth, names,
overloads, literal validators, static bool result, estimated cost.  ``run_program``
evaluates against one taint and classifies the result; every failure is a non-match
(semantics §0.7).  Neither function caches; ``extender.cel.cache`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.cel import ast, check, cost, deadline
from extender.cel.environment import CompileError, parse
from extender.cel.limits import MAX_COST, MAX_MESSAGE_CHARS
from extender.cel.runtime import Budget, CostLimitExceeded, Runner, compile_tree
from extender.cel.values import CelError, kind


@dataclass(frozen=True, slots=True)
class Program:
    expression: str
    runner: Runner
    estimated_cost: int


def truncate(message: str) -> str:
    message = " ".join(message.split())
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 3] + "..."


def compile_program(expression: str, max_cost: int = MAX_COST) -> Program:
    """Validate and build; raises CompileError with a precise (truncated) message.

    The work is bounded by the length and nesting limits (``MAX_NESTING_DEPTH``, checked
    while normalising, before anything recursive runs: at most ~0.5 s at the deepest
    nesting allowed); the request deadline is checked between the phases
    (``DeadlineExceeded``: never cached, never a verdict)."""
    try:
        tree = parse(expression)
        deadline.check()
        root = ast.build(tree)
        check.check(root)
        deadline.check()
        estimated = cost.estimate(root)
    except CompileError as exc:
        raise CompileError(truncate(str(exc))) from None
    except RecursionError:
        raise CompileError("expression is nested too deeply") from None
    if estimated > max_cost:
        raise CompileError(f"estimated cost {estimated} exceeds the limit of {max_cost}")
    deadline.check()
    return Program(expression, compile_tree(root), estimated)


def taint_activation(key: str, value: str, effect: str) -> tuple[str, str, str]:
    """What a program runs on: the taint's fields (``Runner.run``)."""
    return (key, value, effect)


def run_program(program: Program, key: str, value: str, effect: str, *,
                cost_limit: int = MAX_COST) -> tuple[str, str]:
    """Evaluate; returns (kind, message) with kind in true/false/runtime/cost/non-bool.

    A pure function of (program, taint): the only limiter is the deterministic cost
    budget.  ``deadline.DeadlineExceeded`` (the request ran out of time) propagates:
    it is not an outcome."""
    budget = Budget(cost_limit)
    try:
        result = program.runner.run(taint_activation(key, value, effect), budget)
    except CostLimitExceeded:
        return "cost", (f"operation cancelled: actual cost limit exceeded "
                        f"({budget.used} > {cost_limit})")
    except CelError as exc:
        return "runtime", truncate(str(exc) or "evaluation error")
    except RecursionError:
        return "runtime", "expression is nested too deeply to evaluate"
    except Exception as exc:  # a library defect: never let it escape
        return "runtime", truncate(f"{type(exc).__name__}: {exc}")
    if result is True or result is False:
        return ("true", "") if result else ("false", "")
    if kind(result) == "bool":
        return ("true", "") if result else ("false", "")
    return "non-bool", f"expression evaluated to {kind(result)}, not bool"
