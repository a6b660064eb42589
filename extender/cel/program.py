"""Compile (check + estimate + plan) and evaluate one expression.

``build`` is cel-go's ``Compile`` + ``EstimateCost`` + ``Program``: length, syntax, nesting
depth, names, overloads, literal validators, the (min, max) cost estimate and the plan,
whose constant folding can fail the program as cel-go's does.  ``compile_program`` adds
what admission (KEP-5500) requires on top: a bool (or dyn) result and an estimate within
the limit.  ``run_program`` evaluates against one taint and classifies the result; every
failure is a non-match (semantics §0.7).  Nothing here caches; ``extender.cel.cache`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.cel import ast, check, estimator
from extender.cel.activation import Activation, CostLimitExceeded
from extender.cel.environment import CompileError, parse
from extender.cel.limits import MAX_COST, MAX_MESSAGE_CHARS
from extender.cel.runtime import Runner, compile_tree
from extender.cel.types import format_type
from extender.cel.values import CelError, kind
from extender.request import deadline


@dataclass(frozen=True, slots=True)
class Built:
    """A compiled expression before admission: its type, estimate and runner."""

    expression: str
    type: object
    estimate: tuple[int, int]
    runner: Runner


@dataclass(frozen=True, slots=True)
class Program:
    expression: str
    runner: Runner
    estimated_cost: int  # the estimate's maximum, what admission compares to the limit
    estimated_min: int = 0


def truncate(message: str) -> str:
    message = " ".join(message.split())
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 3] + "..."


def build(expression: str) -> Built:
    """Parse, check, estimate and plan; raises CompileError (truncated message).

    The work is bounded by the length and nesting limits (``MAX_NESTING_DEPTH``, checked
    while normalising, before anything recursive runs); the request deadline is checked
    between the phases (``DeadlineExceeded``: never cached, never a verdict)."""
    try:
        tree = parse(expression)
        deadline.check()
        root = ast.build(tree)
        result_type = check.check(root)
        deadline.check()
        estimated = estimator.estimate(root)
        deadline.check()
        runner = compile_tree(root)
    except CompileError as exc:
        raise CompileError(truncate(str(exc))) from None
    except RecursionError:
        raise CompileError("expression is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - a defect here must not reach a client
        # as a 500 or a traceback: the expression is refused with what went wrong
        raise CompileError(truncate(f"internal error: {type(exc).__name__}: {exc}")) from None
    return Built(expression, result_type, estimated, runner)


def admission_error(built: Built, max_cost: int = MAX_COST) -> str | None:
    """Why admission refuses a compiled expression (KEP-5500), or None."""
    if built.type not in ("bool", "dyn"):
        return f"expression must evaluate to bool, not {format_type(built.type)}"
    if built.estimate[1] > max_cost:
        return f"estimated cost {built.estimate[1]} exceeds the limit of {max_cost}"
    return None


def compile_program(expression: str, max_cost: int = MAX_COST) -> Program:
    """``build`` plus admission; raises CompileError with a precise message."""
    built = build(expression)
    refused = admission_error(built, max_cost)
    if refused is not None:
        raise CompileError(refused)
    return Program(expression, built.runner, built.estimate[1], built.estimate[0])


def taint_activation(key: str, value: str, effect: str) -> tuple[str, str, str]:
    """What a program runs on: the taint's fields (``Runner.run``)."""
    return (key, value, effect)


def run_program(program: Program | Built, key: str, value: str, effect: str, *,
                cost_limit: int = MAX_COST) -> tuple[str, str]:
    """Evaluate; returns (kind, message) with kind in true/false/runtime/cost/non-bool."""
    kind_, message, _used = evaluate(program.runner, key, value, effect, cost_limit=cost_limit)
    return kind_, message


def evaluate(runner: Runner, key: str, value: str, effect: str, *,
             cost_limit: int = MAX_COST) -> tuple[str, str, int]:
    """(kind, message, units used).  A pure function of (program, taint): the only
    limiter is the deterministic cost limit.  ``deadline.DeadlineExceeded`` (the request
    ran out of time) propagates: it is not an outcome."""
    activation = Activation(cost_limit)
    try:
        result = runner.run(taint_activation(key, value, effect), activation)
    except CostLimitExceeded:
        return "cost", (f"operation cancelled: actual cost limit exceeded "
                        f"({activation.used} > {cost_limit})"), activation.used
    except CelError as exc:
        return "runtime", truncate(str(exc) or "evaluation error"), activation.used
    except RecursionError:
        return "runtime", "expression is nested too deeply to evaluate", activation.used
    except Exception as exc:  # a library defect: never let it escape
        return "runtime", truncate(f"{type(exc).__name__}: {exc}"), activation.used
    if result is True or result is False:
        return ("true" if result else "false"), "", activation.used
    return "non-bool", f"expression evaluated to {kind(result)}, not bool", activation.used
