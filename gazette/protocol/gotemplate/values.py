"""The Go values and types the evaluator works on, and Go's basic and time types.

A value is a payload tagged with its Go type (Val); a type (Type) says how the executor treats the
value (its kind), which fields and methods a template may reach on it, which of Go's others it refuses,
and how fmt prints it. The caller describes its own data with these (struct types, their fields and
methods); this module has the types of Go's builtins and of time.Time, time.Month and time.Weekday.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from gazette.protocol.gotemplate.timefmt import DAYS, MONTHS, format_time


@dataclasses.dataclass(frozen=True, slots=True)
class GoTime:
    """A Go time.Time in UTC: unix seconds (floored) and nanoseconds within the second."""

    sec: int
    nsec: int = 0

    @property
    def dt(self) -> datetime.datetime:
        return _EPOCH + datetime.timedelta(seconds=self.sec)


_EPOCH = datetime.datetime(1970, 1, 1)
ZERO_TIME = GoTime(int((datetime.datetime(1, 1, 1) - _EPOCH).total_seconds()))  # Go's time.Time{}


@dataclasses.dataclass(eq=False, slots=True)
class Method:
    """A method a template may call: its parameter and result types, and what computes it."""

    params: tuple[Type, ...]
    result: Type
    fn: Callable[..., Any]  # (receiver payload, *argument payloads) -> result payload


@dataclasses.dataclass(eq=False, slots=True)
class Type:
    """A Go type as the executor sees it (types are compared by identity)."""

    name: str  # Go's name of the type, for messages
    kind: str  # "int" | "uint" | "string" | "bool" | "time" | "struct" | "slice" | "any"
    fields: tuple[str, ...] = ()
    methods: dict[str, Method] = dataclasses.field(default_factory=dict)
    outside: tuple[str, ...] = ()  # fields and methods of the Go type that are refused (not in the subset)
    refused: dict[str, str] = dataclasses.field(default_factory=dict)  # other names refused: the reason
    stringer: Callable[[Any], str] | None = None  # a String() method, which fmt prints with
    elem: Type | None = None  # of a slice


@dataclasses.dataclass(frozen=True, slots=True)
class Val:
    """A Go value: its type and its payload."""

    type: Type
    v: Any  # int | str | bool | GoTime | dict (struct fields) | tuple (slice elements)


ANY = Type("any", "any")
INT = Type("int", "int")
INT64 = Type("int64", "int")
UINT8 = Type("uint8", "uint")
STRING = Type("string", "string")
BOOL = Type("bool", "bool")
STRINGS = Type("[]string", "slice", elem=STRING)


def _month_name(m: int) -> str:
    return MONTHS[m - 1] if 1 <= m <= 12 else f"%!Month({m})"


def _weekday_name(d: int) -> str:
    return DAYS[d] if 0 <= d <= 6 else f"%!Weekday({d})"


def _time_string(t: GoTime) -> str:
    return format_time(t.dt, t.nsec, "2006-01-02 15:04:05.999999999 -0700 MST")


def _wrap_int64(n: int) -> int:
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


_MONTH = Type("time.Month", "int", stringer=_month_name)
_WEEKDAY = Type("time.Weekday", "int", stringer=_weekday_name)
TIME = Type(
    "time.Time",
    "time",
    outside=(
        "Local", "In", "Add", "AddDate", "Sub", "Truncate", "Round", "Date", "Clock", "ISOWeek", "Zone",
        "Location", "Before", "After", "Equal", "Compare", "AppendFormat", "GoString", "ZoneBounds",
        "MarshalText", "MarshalJSON", "MarshalBinary", "GobEncode", "IsDST",
    ),
    stringer=_time_string,
)  # fmt: skip

_MONTH.methods["String"] = Method((), STRING, _month_name)
_WEEKDAY.methods["String"] = Method((), STRING, _weekday_name)
TIME.methods.update(
    Format=Method((STRING,), STRING, lambda t, layout: format_time(t.dt, t.nsec, layout)),
    String=Method((), STRING, _time_string),
    UTC=Method((), TIME, lambda t: t),
    Unix=Method((), INT64, lambda t: t.sec),
    UnixMilli=Method((), INT64, lambda t: _wrap_int64(t.sec * 1000 + t.nsec // 1_000_000)),
    UnixMicro=Method((), INT64, lambda t: _wrap_int64(t.sec * 1_000_000 + t.nsec // 1000)),
    UnixNano=Method((), INT64, lambda t: _wrap_int64(t.sec * 1_000_000_000 + t.nsec)),
    Year=Method((), INT, lambda t: t.dt.year),
    Month=Method((), _MONTH, lambda t: t.dt.month),
    Day=Method((), INT, lambda t: t.dt.day),
    Hour=Method((), INT, lambda t: t.dt.hour),
    Minute=Method((), INT, lambda t: t.dt.minute),
    Second=Method((), INT, lambda t: t.dt.second),
    Nanosecond=Method((), INT, lambda t: t.nsec),
    YearDay=Method((), INT, lambda t: t.dt.timetuple().tm_yday),
    Weekday=Method((), _WEEKDAY, lambda t: (t.dt.weekday() + 1) % 7),
    IsZero=Method((), BOOL, lambda t: t == ZERO_TIME),
)
