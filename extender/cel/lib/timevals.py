"""Timestamp and duration arithmetic and accessors with cel-go's ranges.

cel-python's types are ``datetime`` subclasses: subtraction leaks a plain ``timedelta``
(``duration('2h') - duration('1h') > duration('0s')`` then has no overload), nothing
checks cel-go's int64-nanosecond limits, and accessors in a time zone fail where the
local time leaves Python's year range (Go's ``time`` handles year 10000).  Here:

* every duration result is a ``DurationType`` and must fit int64 nanoseconds (cel-go
  ``subtractTimeChecked`` / ``addDurationChecked``: "integer overflow" otherwise);
* timestamp results must stay in 0001-01-01..9999-12-31 UTC ("timestamp out of range");
* accessors shift by 400 years (146097 days, a whole number of weeks and the Gregorian
  leap cycle) when the zone moves the local time outside Python's years.
"""

from __future__ import annotations

import datetime
from typing import Any

from celpy import celtypes as T

from extender.cel.values import INT64_MAX, INT64_MIN, EvalError, check_int, kind

_US = datetime.timedelta(microseconds=1)
_CYCLE_YEARS = 400


def _nanos(d: datetime.timedelta) -> int:
    return (d // _US) * 1000


def nanoseconds(d: datetime.timedelta) -> int:
    """A duration in nanoseconds (cel-go ``int(duration)``)."""
    return _nanos(d)


def from_nanoseconds(n: int) -> T.DurationType:
    """cel-go ``duration(int)``: nanoseconds (truncated to microseconds here)."""
    return duration(datetime.timedelta(microseconds=int(n / 1000)))


def rfc3339_nano(ts: Any) -> str:
    """Go ``Time.Format(time.RFC3339Nano)`` in UTC (cel-go ``string(timestamp)``): the
    fraction without trailing zeros, ``Z`` for UTC."""
    utc = ts.astimezone(datetime.UTC)
    text = f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}"
    if utc.microsecond:
        text += "." + f"{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def duration(d: datetime.timedelta) -> T.DurationType:
    """A duration result, or "integer overflow" outside int64 nanoseconds (cel-go)."""
    if not INT64_MIN <= _nanos(d) <= INT64_MAX:
        raise EvalError("integer overflow")
    return T.DurationType(d)


def timestamp(dt: Any) -> T.TimestampType:
    return T.TimestampType(dt)


def add(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb == "duration":
        return duration(datetime.timedelta.__add__(a, b))
    ts, d = (a, b) if ka == "timestamp" else (b, a)
    return _shift(ts, d)


def sub(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb == "duration":
        return duration(datetime.timedelta.__sub__(a, b))
    if ka == kb == "timestamp":
        return duration(datetime.datetime.__sub__(a, b))
    return _shift(a, -datetime.timedelta(microseconds=b // _US))


def neg(a: Any) -> T.DurationType:
    return duration(-datetime.timedelta(microseconds=a // _US))


def _shift(ts: Any, d: datetime.timedelta) -> T.TimestampType:
    try:
        return timestamp(datetime.datetime.__add__(ts, datetime.timedelta(microseconds=d // _US)))
    except OverflowError:
        raise EvalError("timestamp out of range") from None


def _local(ts: Any, tz: Any) -> tuple[datetime.datetime, int]:
    """``ts`` in zone ``tz`` and the years to add back (0, or +/-400 near the edges)."""
    zone = T.TimestampType.tz_parse(str(tz)) if tz is not None else datetime.UTC
    if zone is None:
        raise EvalError(f"unknown time zone {tz!r}")
    utc = datetime.datetime.fromtimestamp(0, datetime.UTC) + (ts - datetime.datetime(
        1970, 1, 1, tzinfo=datetime.UTC))
    try:
        return utc.astimezone(zone), 0
    except OverflowError:
        years = -_CYCLE_YEARS if utc.year > 5000 else _CYCLE_YEARS
        return utc.replace(year=utc.year + years).astimezone(zone), -years


def _accessor(name: str):
    def impl(v: Any, tz: Any = None) -> Any:
        if kind(v) == "duration":
            if tz is not None:
                raise TypeError("duration accessors take no time zone")
            return int(_DURATION[name](_nanos(v)))
        if kind(v) != "timestamp" or (tz is not None and kind(tz) != "string"):
            raise TypeError(kind(v))
        local, years = _local(v, tz)
        return check_int(_TIMESTAMP[name](local, years))

    impl.__name__ = name
    return impl


def _trunc(n: int, unit: int) -> int:
    return n // unit if n >= 0 else -((-n) // unit)


_DURATION = {
    "getHours": lambda ns: _trunc(ns, 3600 * 10**9),
    "getMinutes": lambda ns: _trunc(ns, 60 * 10**9),
    "getSeconds": lambda ns: _trunc(ns, 10**9),
    "getMilliseconds": lambda ns: _trunc(ns, 10**6),  # Go Duration.Milliseconds(): total
}
_TIMESTAMP = {
    "getFullYear": lambda d, y: d.year + y,
    "getMonth": lambda d, y: d.month - 1,
    "getDate": lambda d, y: d.day,
    "getDayOfMonth": lambda d, y: d.day - 1,
    "getDayOfWeek": lambda d, y: (d.weekday() + 1) % 7,
    "getDayOfYear": lambda d, y: d.timetuple().tm_yday - 1,
    "getHours": lambda d, y: d.hour,
    "getMinutes": lambda d, y: d.minute,
    "getSeconds": lambda d, y: d.second,
    "getMilliseconds": lambda d, y: d.microsecond // 1000,
}
ACCESSORS = {name: _accessor(name) for name in _TIMESTAMP}
