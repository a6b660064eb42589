"""What a JSON body becomes once parsed, accounted before it is parsed.

Why: counting only a request's bytes against the in-flight budget assumes a body grows
about as much as a kubelet-registered node does when parsed (~6x). A body of empty lists
grows ~18x (`[],`: 3 bytes, a 56-byte list and its slot), of one-member objects ~34x
(`{"":0},`: 7 bytes, a 184-byte dict), so one Nodes-mode request of such shapes could take
a worker past a gigabyte (docs/operate/hardening.md).

So every decoder calls `account(text)` before it hands `text` to the JSON parser: the
server (`extender.server.listener`) has set, for the request being answered, what to
charge it to (its listener's in-flight budget), and the request is charged
`parse_charge(text)`: nothing for ordinary bodies, and for a body that grows more than
`EXPANSION` times the difference, so that it weighs against the budget like an
ordinary body of its parsed size. A charge the budget cannot take raises `Unaffordable`
(413 when the budget could never hold it, else 503 with `Retry-After`) before anything
is parsed. Texts not parsed are not charged: a NodeNames array decoded from the cache
costs nothing.

`parsed_bytes_bound(text)` is an upper bound of the resident memory parsing takes, from
C-speed counts of the text's bytes (CPython 3.11, 64-bit, orjson; `tests/server/
test_expansion.py` measures every shape against it in a fresh process):

* orjson's parser (yyjson) first copies the text and builds a document of 16 bytes per
  value and per key, then makes the Python objects from it;
* a list (`[`): 56 bytes; an object (`{`): 128 bytes plus 56 per member (`:`), which
  covers a dict's table at every size (184 bytes for 1-5 members, ~54 per member beyond);
* a value (`,`, plus one per container): an 8-byte slot with a list's over-allocation
  (16), and an int or float object if it is a number (32);
* a string (two `"`): a 56-byte str object plus its characters: one byte per text byte
  when the text is ASCII without `\\u` escapes, else up to four (one character outside
  the BMP makes a whole string four bytes a character).

Counts overcount (a `[` or `,` inside a string counts too), which only loosens the bound.
Counting reads the whole text (its cost is in docs/operate/hardening.md), so texts under
`COUNTED_FROM` bytes are not counted: each weighs at most ~3 MB parsed, and only the few
threads answering hold one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

DOCUMENT_BYTES = 16  # yyjson, per value and per key
LIST_BYTES = 56
OBJECT_BYTES = 128
MEMBER_BYTES = 56
VALUE_BYTES = 16 + 32
STRING_BYTES = 56

#: The growth the documented ceiling allows a request on top of its bytes (docs/operate/
#: hardening.md: RSS <= state + caches + 7 x the in-flight budgets).
EXPANSION = 6
#: Texts under this many bytes are not counted (see the module docstring).
COUNTED_FROM = 64 << 10


class Unaffordable(BaseException):  # noqa: N818 - reads as the answer it becomes
    """The request's parsed size does not fit in its budget: answered `status` (413:
    never; 503: not now, retry). A ``BaseException``, so that no ``except Exception``
    on the way turns it into an ordinary error answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# the current request's account: charge(bytes) raises Unaffordable, or takes them
_ACCOUNT: ContextVar[Callable[[int], None] | None] = ContextVar("extender_parse_account", default=None)


@contextmanager
def charged_to(charge: Callable[[int], None] | None) -> Iterator[None]:
    """Charge the texts the block parses with `charge` (the server, per request)."""
    token = _ACCOUNT.set(charge)
    try:
        yield
    finally:
        _ACCOUNT.reset(token)


def parsed_bytes_bound(text: bytes | bytearray) -> int:
    """An upper bound of the bytes parsing `text` takes (see the module docstring)."""
    lists, objects = text.count(b"["), text.count(b"{")
    members, commas, quotes = text.count(b":"), text.count(b","), text.count(b'"')
    narrow = text.isascii() and b"\\u" not in text
    characters = len(text) if narrow else 4 * len(text)
    values = commas + lists + objects
    document = len(text) + DOCUMENT_BYTES * (values + members)
    return (document + LIST_BYTES * lists + OBJECT_BYTES * objects + MEMBER_BYTES * members
            + VALUE_BYTES * values + STRING_BYTES * (quotes // 2) + characters)


def parse_charge(text: bytes | bytearray) -> int:
    """The bytes parsing `text` adds to its request's charge (which holds its bytes
    already): its parsed bound over `EXPANSION`, less its size; 0 for most bodies."""
    if len(text) < COUNTED_FROM:
        return 0
    return max(0, -(-parsed_bytes_bound(text) // EXPANSION) - len(text))


def account(text: bytes | bytearray) -> None:
    """Before parsing `text`: charge what it becomes to the current request (nothing
    outside a server). Raises `Unaffordable` if its budget cannot take it."""
    charge = _ACCOUNT.get()
    if charge is not None and len(text) >= COUNTED_FROM:
        extra = parse_charge(text)
        if extra:
            charge(extra)
