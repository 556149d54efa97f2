"""Durations as float seconds, parsed from numbers or Go-style strings ("30s", "1h30m", "250ms").

Arithmetic is done in integer nanoseconds, so `parse_duration(format_duration(x)) == x` for any x
that is a whole number of nanoseconds, and formatting is canonical (largest units, no zero parts).
"""

from __future__ import annotations

import datetime
import math
import re
from decimal import Decimal, InvalidOperation

from gazette.protocol.errors import ValidationError

NS_PER_S = 1_000_000_000
_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
}
_PART_RE = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_EXPECTED = 'expected seconds as a number, or a duration such as "30s", "5m", "1h30m", "250ms"'


def parse_duration(value: str | float | int | datetime.timedelta, *, what: str = "duration") -> float:
    """Seconds of `value`: a number of seconds, a timedelta, or a Go time.ParseDuration string."""
    if isinstance(value, bool):
        raise ValidationError(f"{what} {value!r} is not a duration ({_EXPECTED})")
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValidationError(f"{what} {value!r} is not finite")
        return float(value)
    if not isinstance(value, str):
        raise ValidationError(f"{what} {value!r} is not a duration ({_EXPECTED})")
    return _parse_ns(value, what) / NS_PER_S


def _parse_ns(text: str, what: str) -> int:
    s = text.strip()
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValidationError(f'{what} "{text}" is not a duration ({_EXPECTED})')
    total = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _PART_RE.match(s, pos)
        if m is None:
            raise ValidationError(f'{what} "{text}" is not a duration ({_EXPECTED})')
        try:
            total += Decimal(m.group(1)) * _UNIT_NS[m.group(2)]
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            raise ValidationError(f'{what} "{text}" is not a duration ({_EXPECTED})') from None
        pos = m.end()
    return sign * int(total.to_integral_value())


def format_duration(seconds: float | int) -> str:
    """Canonical Go-style text of `seconds`: "0s", "250ms", "1.5s", "1m30s", "1h30m", "720h"."""
    ns = round(seconds * NS_PER_S)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < NS_PER_S:  # like Go: the largest unit below a second, with a decimal fraction
        for unit, size in (("ms", 1_000_000), ("us", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{sign}{_decimal(ns, size)}{unit}"
    hours, rest = divmod(ns, _UNIT_NS["h"])
    minutes, rest = divmod(rest, _UNIT_NS["m"])
    out = sign
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if rest:
        out += f"{_decimal(rest, NS_PER_S)}s"
    return out


def _decimal(n: int, unit: int) -> str:
    whole, frac = divmod(n, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")
