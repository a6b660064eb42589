"""Status codes and statuses, as in `k8s.io/kube-scheduler/framework/interface.go`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Code(Enum):
    """`Code.String()` values are what metrics and explain output show."""

    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    WAIT = "Wait"
    SKIP = "Skip"
    PENDING = "Pending"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, eq=False)
class Status:
    """The result of one plugin at one extension point.

    `reasons` are the wire messages (upstream constants); `details` are the richer,
    human explanations (which taint, which toleration, why a value did not parse)
    that only `explain` and debug logs show.

    Identity equality and hashing (eq=False): plugins share one status object across
    thousands of nodes and the encoder groups by object, in C. Compare `code`,
    `reasons` and `details` when you mean equal content.
    """

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    msg: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Precomputed: the wire encoder reads it for thousands of nodes per request.
        object.__setattr__(self, "msg", ", ".join(self.reasons))

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_rejection(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def message(self) -> str:
        """Upstream `Status.Message()`: reasons joined by `, `."""
        return self.msg


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def unschedulable(reason: str, *details: str, unresolvable: bool = True) -> Status:
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
    return Status(code, (reason,), tuple(details))


def error(message: str) -> Status:
    return Status(Code.ERROR, (message,))
