"""One evaluation's activation (cel-go's word for what a program runs against: here the
taint, the comprehension variables, the cost used so far and the request deadline), and
how the compiled closures charge cost to it.

Cost is checked after every charge, so the limit interrupts where cel-go's cost tracker
does, with the same units used (``CostLimitExceeded``); the request deadline
(``extender.request.deadline``) is checked after every costly call (and every 32
comprehension iterations, ``extender.cel.folds``).  ``CostLimitExceeded`` is a
``BaseException`` so no ``except Exception`` turns it into a CEL error.
"""

from __future__ import annotations

from typing import Any

from extender.cel.values import CelError
from extender.request import deadline

#: a library call charged at least this many units is followed by a deadline check
DEADLINE_CALL_COST = 64
UNINIT = object()  # an accumulator not evaluated yet (cel-go initialises it lazily)


class CostLimitExceeded(BaseException):  # noqa: N818 - mirrors cel-go's wording
    """The runtime cost budget was exhausted."""


class Activation:
    """One evaluation's state: the cost used against the limit, the request deadline
    (None outside a request), the taint and the comprehension variables. Programs are
    shared by every thread, so all that changes while one runs lives here."""

    __slots__ = ("used", "limit", "deadline", "ticks", "taint", "vars")

    def __init__(self, limit: int) -> None:
        self.used, self.limit, self.ticks = 0, limit, 0
        self.deadline = deadline.current()
        self.taint: tuple[str, str, str] = ("", "", "")
        self.vars: list = []

    def charge(self, units: int) -> None:
        self.used += units
        if self.used > self.limit:
            raise CostLimitExceeded(self.used)


def charge_each(b: Activation, parts: tuple[int, ...]) -> None:
    """Charge ``parts`` one at a time (a fused charge went over the limit: report the
    units used where the unfused charges stop)."""
    for units in parts:
        b.charge(units)



def charged(b: Activation, units: int, result: Any) -> Any:
    b.used += units
    if b.used > b.limit:
        raise CostLimitExceeded(b.used)
    if units >= DEADLINE_CALL_COST and b.deadline is not None:
        deadline.check(b.deadline)  # a long library call cannot be interrupted
    if isinstance(result, CelError):
        raise result
    return result
