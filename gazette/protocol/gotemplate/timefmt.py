"""Go's time.Time.Format for a UTC time: the reference-time layouts ("2006-01-02", "15:04:05", ...).

A layout is split into chunks exactly as Go's time package splits it (so text that Go reads as a
layout element, e.g. the "1" in "v1", is one here too) and each element is rendered for the time; the
time is always UTC, so every zone element renders the zero offset or "UTC".
"""

from __future__ import annotations

import datetime

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")

# The zone chunks of a Go layout starting with "-" or "Z", longest first (all render UTC's zero offset).
_ZONE_CHUNKS = (
    ("-070000", "num_seconds_tz"), ("-07:00:00", "num_colon_seconds_tz"), ("-0700", "num_tz"),
    ("-07:00", "num_colon_tz"), ("-07", "num_short_tz"), ("Z070000", "iso_seconds_tz"),
    ("Z07:00:00", "iso_colon_seconds_tz"), ("Z0700", "iso_tz"), ("Z07:00", "iso_colon_tz"), ("Z07", "iso_short_tz"),
)  # fmt: skip


def layout_chunks(layout: str) -> list[tuple[str, str]]:
    """Splits a Go time layout into ("lit", text) and (std name, source text) chunks, as Go does."""
    out: list[tuple[str, str]] = []
    lit_start = i = 0
    n = len(layout)

    def std(kind: str, length: int) -> None:
        nonlocal i, lit_start
        if i > lit_start:
            out.append(("lit", layout[lit_start:i]))
        out.append((kind, layout[i : i + length]))
        i += length
        lit_start = i

    while i < n:
        c = layout[i]
        rest = layout[i:]
        if c == "J" and rest.startswith("Jan"):
            if rest.startswith("January"):
                std("long_month", 7)
                continue
            if not (len(rest) > 3 and "a" <= rest[3] <= "z"):
                std("month", 3)
                continue
        elif c == "M" and rest.startswith("Mon"):
            if rest.startswith("Monday"):
                std("long_weekday", 6)
                continue
            if not (len(rest) > 3 and "a" <= rest[3] <= "z"):
                std("weekday", 3)
                continue
        elif c == "M" and rest.startswith("MST"):
            std("tz", 3)
            continue
        elif c == "0":
            if len(rest) >= 2 and "1" <= rest[1] <= "6":
                std(("zero_month", "zero_day", "zero_hour12", "zero_minute", "zero_second", "year")[
                    int(rest[1]) - 1], 2)  # fmt: skip
                continue
            if rest.startswith("002"):
                std("zero_yday", 3)
                continue
        elif c == "1":
            if rest.startswith("15"):
                std("hour", 2)
            else:
                std("num_month", 1)
            continue
        elif c == "2":
            if rest.startswith("2006"):
                std("long_year", 4)
            else:
                std("day", 1)
            continue
        elif c == "_":
            if rest.startswith("_2"):
                if rest.startswith("_2006"):  # a literal "_" and the year
                    i += 1
                    std("long_year", 4)
                else:
                    std("under_day", 2)
                continue
            if rest.startswith("__2"):
                std("under_yday", 3)
                continue
        elif c in "345":
            std({"3": "hour12", "4": "minute", "5": "second"}[c], 1)
            continue
        elif c == "P" and rest.startswith("PM"):
            std("PM", 2)
            continue
        elif c == "p" and rest.startswith("pm"):
            std("pm", 2)
            continue
        elif c in "-Z":
            for text, kind in _ZONE_CHUNKS:
                if rest.startswith(text):
                    std(kind, len(text))
                    break
            else:
                i += 1
            continue
        elif c in ".," and len(rest) >= 2 and rest[1] in "09":
            j = 1
            while j < len(rest) and rest[j] == rest[1]:
                j += 1
            if not (j < len(rest) and rest[j].isdigit() and rest[j].isascii()):
                std("frac0" if rest[1] == "0" else "frac9", j)
                continue
        i += 1
    if lit_start < n:
        out.append(("lit", layout[lit_start:]))
    return out


def format_time(dt: datetime.datetime, nsec: int, layout: str) -> str:
    """Go's Time.Format of a UTC time: `dt` to the second and `nsec` nanoseconds within it."""
    hour12 = dt.hour % 12 or 12
    out: list[str] = []
    for kind, text in layout_chunks(layout):
        if kind == "lit":
            out.append(text)
        elif kind == "year":
            out.append(f"{dt.year % 100:02d}")
        elif kind == "long_year":
            out.append(f"{dt.year:04d}")
        elif kind == "month":
            out.append(MONTHS[dt.month - 1][:3])
        elif kind == "long_month":
            out.append(MONTHS[dt.month - 1])
        elif kind == "num_month":
            out.append(str(dt.month))
        elif kind == "zero_month":
            out.append(f"{dt.month:02d}")
        elif kind == "weekday":
            out.append(DAYS[(dt.weekday() + 1) % 7][:3])
        elif kind == "long_weekday":
            out.append(DAYS[(dt.weekday() + 1) % 7])
        elif kind == "day":
            out.append(str(dt.day))
        elif kind == "under_day":
            out.append(f"{dt.day:2d}")
        elif kind == "zero_day":
            out.append(f"{dt.day:02d}")
        elif kind == "under_yday":
            out.append(f"{dt.timetuple().tm_yday:3d}")
        elif kind == "zero_yday":
            out.append(f"{dt.timetuple().tm_yday:03d}")
        elif kind == "hour":
            out.append(f"{dt.hour:02d}")
        elif kind == "hour12":
            out.append(str(hour12))
        elif kind == "zero_hour12":
            out.append(f"{hour12:02d}")
        elif kind == "minute":
            out.append(str(dt.minute))
        elif kind == "zero_minute":
            out.append(f"{dt.minute:02d}")
        elif kind == "second":
            out.append(str(dt.second))
        elif kind == "zero_second":
            out.append(f"{dt.second:02d}")
        elif kind == "PM":
            out.append("PM" if dt.hour >= 12 else "AM")
        elif kind == "pm":
            out.append("pm" if dt.hour >= 12 else "am")
        elif kind.startswith("iso"):
            out.append("Z")  # UTC
        elif kind == "num_tz":
            out.append("+0000")
        elif kind == "num_colon_tz":
            out.append("+00:00")
        elif kind == "num_short_tz":
            out.append("+00")
        elif kind == "num_seconds_tz":
            out.append("+000000")
        elif kind == "num_colon_seconds_tz":
            out.append("+00:00:00")
        elif kind == "tz":
            out.append("UTC")
        elif kind in ("frac0", "frac9"):
            digits = f"{nsec:09d}"[: len(text) - 1]
            if kind == "frac9":
                digits = digits.rstrip("0")
            if digits:
                out.append(text[0] + digits)
    return "".join(out)
