"""Timestamps and durations with cel-go's (Go ``time``'s) semantics, nanosecond-exact.

* ``Duration``: int64 nanoseconds; arithmetic overflow is cel-go's "integer overflow";
  ``string()`` is Go's ``FormatFloat(d.Seconds(), 'f', -1) + "s"``; the accessors are
  Go's ``Hours()``/``Minutes()``/``Seconds()`` (float64, truncated) and
  ``Milliseconds()``.
* ``Timestamp``: Unix seconds + nanoseconds, in 0001-01-01..9999-12-31 UTC, and the UTC
  offset it was written with (Go keeps the location: ``string()`` prints it back, e.g.
  ``2024-01-01T00:00:00+05:30``); ``timestamp(string)`` is Go's
  ``time.Parse(time.RFC3339, s)`` (a one-digit hour and a comma before the fraction are
  accepted, as Go's general parser does); ``ts + d`` adds seconds and nanoseconds as
  cel-go's ``addTimeDurationChecked`` (the offset is kept).
* The accessors read the UTC calendar fields (Kubernetes sets DefaultUTCTimeZone), or
  those in a zone named by IANA name or ``+hh:mm``; a local time past Python's year range
  is shifted by 400 years (146097 days, whole weeks and the Gregorian cycle).
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from decimal import Decimal
from typing import Any

from extender.cel.values import INT64_MAX, INT64_MIN, EvalError, check_int, kind

NS = 10**9
MIN_UNIX, MAX_UNIX = -62135596800, 253402300799
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_CYCLE_YEARS = 400


def _checked(v: int) -> int:
    if v < INT64_MIN or v > INT64_MAX:
        raise EvalError("integer overflow")
    return v


class Duration:
    """CEL ``google.protobuf.Duration``: int64 nanoseconds."""

    cel_type = "duration"
    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.ns == self.ns

    def __lt__(self, other: Duration) -> bool:
        return self.ns < other.ns

    def __gt__(self, other: Duration) -> bool:
        return self.ns > other.ns

    def __hash__(self) -> int:
        return hash(("duration", self.ns))

    def __repr__(self) -> str:
        return f"duration({go_duration_string(self)!r})"


class Timestamp:
    """CEL ``google.protobuf.Timestamp``: Unix seconds, nanoseconds, written UTC offset."""

    cel_type = "timestamp"
    __slots__ = ("sec", "nsec", "offset")

    def __init__(self, sec: int, nsec: int = 0, offset: int = 0) -> None:
        self.sec, self.nsec, self.offset = sec, nsec, offset

    def instant(self) -> tuple[int, int]:
        return self.sec, self.nsec

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timestamp) and other.instant() == self.instant()

    def __lt__(self, other: Timestamp) -> bool:
        return self.instant() < other.instant()

    def __gt__(self, other: Timestamp) -> bool:
        return self.instant() > other.instant()

    def __hash__(self) -> int:
        return hash(("timestamp", self.sec, self.nsec))

    def utc(self) -> datetime.datetime:
        return _EPOCH + datetime.timedelta(seconds=self.sec, microseconds=self.nsec // 1000)

    def __repr__(self) -> str:
        return f"timestamp({rfc3339_nano(self)!r})"


def is_zero(v: Any) -> bool:
    """cel-go's zero value: ``duration(0)``; Go's zero time, 0001-01-01T00:00:00Z."""
    if isinstance(v, Duration):
        return v.ns == 0
    return isinstance(v, Timestamp) and v.sec == MIN_UNIX and v.nsec == 0


# --- durations ------------------------------------------------------------------------

_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": NS,
          "m": 60 * NS, "h": 3600 * NS}
_DURATION_PART = re.compile(r"([0-9]*)(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> Duration:
    """Go ``time.ParseDuration``: ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+``, a bare ``0``; a
    fraction of a nanosecond is dropped; beyond int64 nanoseconds is an error."""
    s, neg = text, False
    if s[:1] in "+-":
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return Duration(0)
    if not s:
        raise EvalError(f"time: invalid duration {go_quote(text)}")
    total = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m or (m.group(1) == "" and (m.group(2) or ".") == "."):
            raise EvalError(f"time: invalid duration {go_quote(text)}")
        number = Decimal((m.group(1) or "0") + (m.group(2) or ""))
        total += number * _UNITS[m.group(3)]
        pos = m.end()
    ns = int(total)
    if ns > INT64_MAX + (1 if neg else 0):
        raise EvalError(f"time: invalid duration {go_quote(text)}")
    return Duration(-ns if neg else ns)


def go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _float_seconds(ns: int) -> float:
    sec, nsec = _go_divmod(ns, NS)
    return float(sec) + float(nsec) / 1e9


def _go_divmod(n: int, d: int) -> tuple[int, int]:
    """Go's truncated division and remainder."""
    q = abs(n) // d
    q = q if n >= 0 else -q
    return q, n - q * d


def go_duration_string(d: Duration) -> str:
    """cel-go ``string(duration)``: ``FormatFloat(d.Seconds(), 'f', -1, 64) + "s"``."""
    f = _float_seconds(d.ns)
    text = format(Decimal(repr(f)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if text in ("-0", ""):
        text = "0" if text == "" else "-0"
    return text + "s"


def duration_accessor(name: str, d: Duration) -> int:
    ns = d.ns
    if name == "getMilliseconds":
        return _go_divmod(ns, 10**6)[0]
    unit = {"getHours": 3600 * NS, "getMinutes": 60 * NS, "getSeconds": NS}[name]
    whole, rest = _go_divmod(ns, unit)
    return int(float(whole) + float(rest) / float(unit))


def add_durations(a: Duration, b: Duration) -> Duration:
    return Duration(_checked(a.ns + b.ns))


def sub_durations(a: Duration, b: Duration) -> Duration:
    return Duration(_checked(a.ns - b.ns))


def neg_duration(a: Duration) -> Duration:
    return Duration(_checked(-a.ns))


# --- timestamps ------------------------------------------------------------------------

_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
                      r"(?:[.,]([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})")
_CONVERSION_ERROR = "type conversion error from 'string' to 'google.protobuf.Timestamp'"


def _days_in(month: int, year: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def parse_rfc3339(text: str) -> Timestamp:
    """Go ``time.Parse(time.RFC3339, text)`` and cel-go's range check."""
    m = _RFC3339.fullmatch(text)
    if not m:
        raise EvalError(_CONVERSION_ERROR)
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= _days_in(month, year) and hour <= 23
            and minute <= 59 and second <= 59):
        raise EvalError(_CONVERSION_ERROR)
    fraction = m.group(7) or ""
    nsec = int((fraction + "000000000")[:9]) if fraction else 0
    zone = m.group(8)
    offset = 0
    if zone != "Z":
        if int(zone[1:3]) > 24 or int(zone[4:6]) > 60:  # Go's general parser allows 24:60
            raise EvalError(_CONVERSION_ERROR)
        offset = (int(zone[1:3]) * 60 + int(zone[4:6])) * 60 * (-1 if zone[0] == "-" else 1)
    sec = _civil_to_unix(year, month, day) + hour * 3600 + minute * 60 + second - offset
    if sec < MIN_UNIX or sec > MAX_UNIX:
        raise EvalError("timestamp out of range")
    return Timestamp(sec, nsec, offset)


def _civil_to_unix(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 (proleptic Gregorian, year 0 allowed) in seconds."""
    y = year - (1 if month <= 2 else 0)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return (era * 146097 + doe - 719468) * 86400


def from_unix(sec: int) -> Timestamp:
    """cel-go ``timestamp(int)``."""
    if sec < MIN_UNIX or sec > MAX_UNIX:
        raise EvalError("timestamp overflow")
    return Timestamp(sec, 0, 0)


def _unix_to_civil(sec: int) -> tuple[int, int, int, int, int, int]:
    """(year, month, day, hour, minute, second) of Unix seconds, any year."""
    days, rest = divmod(sec, 86400)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return year, month, day, rest // 3600, rest // 60 % 60, rest % 60


def rfc3339_nano(ts: Timestamp) -> str:
    """Go ``Time.Format(time.RFC3339Nano)`` in the timestamp's own offset."""
    year, month, day, hour, minute, second = _unix_to_civil(ts.sec + ts.offset)
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    if ts.nsec:
        text += "." + f"{ts.nsec:09d}".rstrip("0")
    if ts.offset == 0:
        return text + "Z"
    sign = "-" if ts.offset < 0 else "+"
    hours, minutes = divmod(abs(ts.offset) // 60, 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


def add(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb == "duration":
        return add_durations(a, b)
    ts, d = (a, b) if ka == "timestamp" else (b, a)
    return _shift(ts, d.ns)


def sub(a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == kb == "duration":
        return sub_durations(a, b)
    if ka == kb == "timestamp":
        seconds = _checked(a.sec - b.sec)
        return Duration(_checked(_checked(seconds * NS) + (a.nsec - b.nsec)))
    return _shift(a, _checked(-b.ns))


def neg(a: Any) -> Duration:
    return neg_duration(a)


def _shift(ts: Timestamp, ns: int) -> Timestamp:
    """cel-go ``addTimeDurationChecked``: seconds and nanoseconds added separately."""
    sec2, nsec2 = _go_divmod(ns, NS)
    sec = _checked(ts.sec + sec2)
    nsec = ts.nsec + nsec2
    if nsec < 0 or nsec >= NS:
        carry = _go_divmod(nsec, NS)[0]
        sec = _checked(sec + carry)
        nsec -= carry * NS
        if nsec < 0:
            sec = _checked(sec - 1)
            nsec += NS
    if sec < MIN_UNIX or sec > MAX_UNIX:
        raise EvalError("timestamp overflow")
    return Timestamp(sec, nsec, ts.offset)


# --- accessors -------------------------------------------------------------------------

def _zone(tz: str) -> datetime.tzinfo:
    """cel-go ``timeZone``: an IANA name (``LoadLocation``), else ``[+-]hh:mm``."""
    if ":" not in tz:
        if tz in ("", "UTC", "Local"):
            return datetime.UTC
        try:
            return zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            raise EvalError(f"unknown time zone {tz}") from None
    hours, _, minutes = tz.partition(":")
    try:
        hr, mins = _go_atoi(hours), _go_atoi(minutes)
    except ValueError:
        raise EvalError(f'strconv.Atoi: parsing "{tz}": invalid syntax') from None
    offset = hr * 60 - mins if tz.startswith("-") else hr * 60 + mins
    try:
        return datetime.timezone(datetime.timedelta(minutes=offset))
    except ValueError:  # beyond Python's +/-24h: Go still shifts
        return _WideOffset(offset)


class _WideOffset(datetime.tzinfo):
    def __init__(self, minutes: int) -> None:
        self.minutes = minutes


def _go_atoi(text: str) -> int:
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(text)
    return int(text)


def _local(ts: Timestamp, tz: str | None) -> tuple[datetime.datetime, int]:
    """``ts`` in zone ``tz`` and the years to add back (0, or +/-400 near the edges)."""
    utc = ts.utc().replace(microsecond=0)
    if tz is None:
        return utc, 0
    zone = _zone(tz)
    if isinstance(zone, _WideOffset):
        return _shifted(utc, datetime.timedelta(minutes=zone.minutes))
    try:
        return utc.astimezone(zone), 0
    except OverflowError:
        years = -_CYCLE_YEARS if utc.year > 5000 else _CYCLE_YEARS
        return utc.replace(year=utc.year + years).astimezone(zone), -years


def _shifted(utc: datetime.datetime, delta: datetime.timedelta) -> tuple[datetime.datetime, int]:
    try:
        return utc + delta, 0
    except OverflowError:
        years = -_CYCLE_YEARS if utc.year > 5000 else _CYCLE_YEARS
        return utc.replace(year=utc.year + years) + delta, -years


_TIMESTAMP = {
    "getFullYear": lambda d, y, ns: d.year + y,
    "getMonth": lambda d, y, ns: d.month - 1,
    "getDate": lambda d, y, ns: d.day,
    "getDayOfMonth": lambda d, y, ns: d.day - 1,
    "getDayOfWeek": lambda d, y, ns: (d.weekday() + 1) % 7,
    "getDayOfYear": lambda d, y, ns: d.timetuple().tm_yday - 1,
    "getHours": lambda d, y, ns: d.hour,
    "getMinutes": lambda d, y, ns: d.minute,
    "getSeconds": lambda d, y, ns: d.second,
    "getMilliseconds": lambda d, y, ns: ns // 10**6,
}


def _accessor(name: str):
    def impl(v: Any, tz: Any = None) -> Any:
        if kind(v) == "duration":
            if tz is not None:
                raise TypeError("duration accessors take no time zone")
            return duration_accessor(name, v)
        if kind(v) != "timestamp" or (tz is not None and kind(tz) != "string"):
            raise TypeError(kind(v))
        local, years = _local(v, tz)
        return check_int(_TIMESTAMP[name](local, years, v.nsec))

    impl.__name__ = name
    return impl


ACCESSORS = {name: _accessor(name) for name in _TIMESTAMP}
