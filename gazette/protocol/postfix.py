"""`JournalSpec.fragment.path_postfix_template`: the Go text/template subset that Gazette evaluates.

Gazette renders a journal's postfix template with Go's text/template every time it persists a spool,
and the result is the directory between the journal name and the fragment's content name in the
store (`<store>/<journal>/<postfix>/<content name>`). Journal YAML written for Gazette must load here
unchanged, and a fragment persisted by this broker must land exactly where a Gazette broker would put
it, so this module evaluates the same templates over the same data with the same results, e.g.

    date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}

renders `date=2024-03-05/hour=07` for a spool whose first append was 2024-03-05T07:08:09Z.

The data (the shape Gazette's JournalSpec validation executes the template on; Gazette's
broker/protocol/journal_spec_extensions.go and broker/fragment/stores.go):
  .Spool            the completed spool: Journal, Begin, End (int64 offsets), CompressionCodec (prints
                    its name, e.g. SNAPPY; method ToExtension), ModTime (always 0 while persisting),
                    PathPostfix ("" while persisting), Fragment (those same fields), FirstAppendTime
                    (time.Time, UTC; the zero time 0001-01-01T00:00:00Z when unknown) and Registers
                    (a LabelSet)
  .JournalSpec      the journal's spec: Name, LabelSet (its labels) and, promoted from LabelSet,
                    Labels, ValueOf, ValuesOf; Name, LabelSet, Labels, ValueOf and ValuesOf are also
                    promoted to the top level (`{{ .Name }}`), as in Go
  a LabelSet        Labels (a []Label of Name, Value, Prefix), `ValueOf "name"` (the first value, ""
                    when absent) and `ValuesOf "name"` (a []string); registers are therefore reached
                    as `{{ .Spool.Registers.ValueOf "tenant" }}`
  a time.Time       Format "LAYOUT" (Go's reference-time layouts: 2006 06 01 1 Jan January 02 2 _2
                    002 __2 15 03 3 04 4 05 5 PM pm Mon Monday MST -0700 -07:00 -07 Z0700 Z07:00
                    Z07 .000 .999 ,000 ...), UTC, Unix, UnixMilli, UnixMicro, UnixNano, Year, Month,
                    Day, Hour, Minute, Second, Nanosecond, YearDay, Weekday, IsZero, String
Gazette fields this broker does not carry to the renderer (.Spool.Sum, .Spool.BackingStore and the
rest of .JournalSpec, e.g. .JournalSpec.Replication or .JournalSpec.Fragment) are refused by name.

The syntax: literal text and actions `{{ pipeline }}`, with `{{-` / `-}}` trimming the white space
before / after an action, and comments `{{/* ... */}}`. A pipeline is commands joined by `|` (the
value of each is passed as the last argument of the next); a command is a field chain (`.A.B`, `$.A`,
`(pipeline).A`, whose last element may be a method taking the command's arguments), a constant
("string", `raw string`, an integer, true/false) or a call of one of the functions printf, print,
println, len, index, and, or, not. Values print as Go's fmt prints them: integers in decimal, names
of enums (time.Month, time.Weekday, CompressionCodec), a time as Go's Time.String(); printing a struct
or a slice of structs is refused (Go would print braces, which no path can hold). printf supports
the verbs %v %d %s %x %X %o %b %t %% with the flags - + # 0 and space, widths and precisions (not
%#v, `*` widths, %[n] indexes, or zero padding of strings). Outside the subset, and refused: control
actions (if, range, with, define, template, block, else, end), variables other than `$`, the other Go
functions (eq, lt, slice, html, js, urlquery, call, ...), character and floating-point constants.
Like Go, a pipeline may end in a dangling "|", and of several syntax errors the first in the text is
reported.

Errors: everything Go's text/template would reject on this data (bad syntax, an unclosed action, an
unknown field or function, a method given the wrong arguments) and everything outside the subset
raises a ValidationError naming path_postfix_template, the character offset and what is wrong. So does
the former single-brace syntax of this project (`{journal}`, `{first_append:%Y-%m-%d}`,
`{registers.NAME}`, ...): Go treats it as literal text, so Gazette would create a directory literally
named `{first_append:%Y-%m-%d}` and then skip every fragment under it when listing the store (its
fragment path parser refuses the braces); the error shows the Gazette form of the field and of the
whole template.

The rendered postfix must be "" or a clean relative path in the path alphabet (letters, digits and
`-_+/.=%`, no leading or trailing "/", no "//", no "." or ".." segments, at most 512 characters;
validate.validate_path_component, Go's ValidatePathComponent counts bytes instead), and a
template is valid only if it parses and renders such a path on the zero value (offsets 0, the zero
time, no registers or labels, codec INVALID) for the journal's name. Differences from Gazette:
  * Gazette's JournalSpec validation only checks that the template executes on the zero value; the
    rendered text is not checked (`{{ .Spool.FirstAppendTime }}`, which prints spaces, validates).
    Nor is the postfix checked when persisting: Gazette joins `journal/postfix/name` with Go's
    path.Join, which cleans it (so "a//b/" is written as "a/b" and "../x" climbs out of the journal's
    directory), and only its store listing checks postfixes, with Go's ValidatePathComponent
    (alphabet, clean, not rooted, <= 512 bytes), warning about and skipping objects that fail. This
    broker checks the rendered postfix both when validating and when rendering, and refuses what
    Gazette would write but not list, plus "." and ".." segments, which Gazette's check lets through.
  * Gazette validates on a zero JournalSpec (Name ""), this module with the journal's own name.
  * Gazette validates on a struct whose .JournalSpec is embedded but whose .Spool is a named field,
    while persisting on a struct that embeds both; so a top-level `.Fragment` validates in Gazette
    (as .JournalSpec.Fragment) but fails when persisting (ambiguous with .Spool.Fragment). It is
    refused here. Fields only the persisting struct has (`.Begin`, `.Spool.File`, ...) fail Gazette's
    validation and are refused here too.
  * Gazette renders .Spool.BackingStore as the store it is about to write to and, when it falls back
    to a later store, .Spool.PathPostfix as the postfix of the failed attempt; this broker refuses
    BackingStore and renders PathPostfix as "".
  * Gazette's FirstAppendTime has nanoseconds; this broker's first append time is a float of unix
    seconds, so layouts finer than microseconds (.000000000) end in zeros here.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.validate import validate_path_component

POSTFIX_LEN = (0, 512)
# The journal a template is checked with when no spec name is at hand.
PLACEHOLDER_JOURNAL = "examples/journal"

_SUBSET = "outside the subset of Go templates this broker supports"


class _TemplateError(Exception):
    """A problem at a character offset of the template; becomes a ValidationError."""

    def __init__(self, pos: int, rule: str) -> None:
        super().__init__(rule)
        self.pos = pos
        self.rule = rule


class _CallError(Exception):
    """A failure inside a method or function (Go: an error result or a panic)."""


def _error(template: str, pos: int, rule: str) -> ValidationError:
    return ValidationError(f'path_postfix_template "{template}" is not valid at position {pos}: {rule}')


# ---- Go values -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _GoTime:
    """A Go time.Time in UTC: unix seconds (floored) and nanoseconds within the second."""

    sec: int
    nsec: int = 0

    @property
    def dt(self) -> datetime.datetime:
        return _EPOCH + datetime.timedelta(seconds=self.sec)


_EPOCH = datetime.datetime(1970, 1, 1)
_ZERO_TIME = _GoTime(int((datetime.datetime(1, 1, 1) - _EPOCH).total_seconds()))  # Go's time.Time{}


@dataclasses.dataclass(eq=False, slots=True)
class _Method:
    params: tuple[_Type, ...]
    result: _Type
    fn: Callable[..., Any]  # (receiver payload, *argument payloads) -> result payload


@dataclasses.dataclass(eq=False, slots=True)
class _Type:
    name: str  # Go's name of the type, for messages
    kind: str  # "int" | "uint" | "string" | "bool" | "time" | "struct" | "slice" | "any"
    fields: tuple[str, ...] = ()
    methods: dict[str, _Method] = dataclasses.field(default_factory=dict)
    outside: tuple[str, ...] = ()  # Gazette's fields and methods of the type that are refused
    stringer: Callable[[Any], str] | None = None  # a String() method, which fmt prints with
    elem: _Type | None = None  # of a slice


@dataclasses.dataclass(frozen=True, slots=True)
class _Val:
    type: _Type
    v: Any  # int | str | bool | _GoTime | dict (struct fields) | tuple (slice elements)


_ANY = _Type("any", "any")
_INT = _Type("int", "int")
_INT64 = _Type("int64", "int")
_UINT8 = _Type("uint8", "uint")
_STRING = _Type("string", "string")
_BOOL = _Type("bool", "bool")
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def _month_name(m: int) -> str:
    return _MONTHS[m - 1] if 1 <= m <= 12 else f"%!Month({m})"


def _weekday_name(d: int) -> str:
    return _DAYS[d] if 0 <= d <= 6 else f"%!Weekday({d})"


def _codec_name(c: int) -> str:
    return _CODEC_NAMES.get(c, str(c))


_MONTH = _Type("time.Month", "int", stringer=_month_name)
_WEEKDAY = _Type("time.Weekday", "int", stringer=_weekday_name)
_CODEC_NAMES = {
    0: "INVALID",
    1: "NONE",
    2: "GZIP",
    3: "ZSTANDARD",
    4: "SNAPPY",
    5: "GZIP_OFFLOAD_DECOMPRESSION",
}
_CODEC_EXTS = {1: ".raw", 2: ".gz", 3: ".zst", 4: ".sz", 5: ""}
_CODEC = _Type("protocol.CompressionCodec", "int", stringer=_codec_name, outside=("Validate",))
_JOURNAL = _Type("protocol.Journal", "string", stringer=str, outside=("Validate", "SplitMeta", "StripMeta"))
_TIME = _Type(
    "time.Time",
    "time",
    outside=(
        "Local", "In", "Add", "AddDate", "Sub", "Truncate", "Round", "Date", "Clock", "ISOWeek", "Zone",
        "Location", "Before", "After", "Equal", "Compare", "AppendFormat", "GoString", "ZoneBounds",
        "MarshalText", "MarshalJSON", "MarshalBinary", "GobEncode", "IsDST",
    ),
)  # fmt: skip
_STRINGS = _Type("[]string", "slice", elem=_STRING)
_LABEL = _Type("protocol.Label", "struct", fields=("Name", "Value", "Prefix"), outside=("Validate",))
_LABELS = _Type("[]protocol.Label", "slice", elem=_LABEL)
_LABEL_SET = _Type("protocol.LabelSet", "struct", fields=("Labels",), outside=("Validate",))
_FRAGMENT_FIELDS = ("Journal", "Begin", "End", "CompressionCodec", "ModTime", "PathPostfix")
_FRAGMENT_OUTSIDE = ("Sum", "BackingStore")
_FRAGMENT = _Type("protocol.Fragment", "struct", fields=_FRAGMENT_FIELDS, outside=_FRAGMENT_OUTSIDE)
_SPOOL = _Type(
    "fragment.Spool",
    "struct",
    fields=("Fragment", *_FRAGMENT_FIELDS, "FirstAppendTime", "Registers"),
    outside=_FRAGMENT_OUTSIDE,
)
_SPEC_OUTSIDE = ("Replication", "Fragment", "Flags", "MaxAppendRate", "Suspend")
_JOURNAL_SPEC = _Type(
    "protocol.JournalSpec",
    "struct",
    fields=("Name", "LabelSet", "Labels"),
    outside=(*_SPEC_OUTSIDE, "Validate"),
)
_ROOT = _Type(
    "struct { Spool; protocol.JournalSpec }",
    "struct",
    fields=("Spool", "JournalSpec", "Name", "LabelSet", "Labels"),
    outside=("Replication", "Flags", "MaxAppendRate", "Suspend"),
)
_AMBIGUOUS_FRAGMENT = (
    "Gazette's validation takes .Fragment for .JournalSpec.Fragment, but a Gazette broker fails on it "
    "when persisting (it is ambiguous with .Spool.Fragment there); write .Spool.Fragment"
)


def _labels_value_of(ls: dict[str, _Val], name: str) -> str:
    for label in ls["Labels"].v:
        if label.v["Name"].v == name:
            return str(label.v["Value"].v)
    return ""


def _labels_values_of(ls: dict[str, _Val], name: str) -> tuple[_Val, ...]:
    return tuple(_Val(_STRING, lbl.v["Value"].v) for lbl in ls["Labels"].v if lbl.v["Name"].v == name)


def _codec_ext(c: int) -> str:
    if c not in _CODEC_EXTS:
        raise _CallError("invalid CompressionCodec")
    return _CODEC_EXTS[c]


def _wrap_int64(n: int) -> int:
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


_LABEL_SET.methods.update(
    ValueOf=_Method((_STRING,), _STRING, _labels_value_of),
    ValuesOf=_Method((_STRING,), _STRINGS, _labels_values_of),
)
for _t in (_JOURNAL_SPEC, _ROOT):  # promoted from the embedded LabelSet
    _t.methods.update(
        ValueOf=_Method((_STRING,), _STRING, lambda s, n: _labels_value_of(s["LabelSet"].v, n)),
        ValuesOf=_Method((_STRING,), _STRINGS, lambda s, n: _labels_values_of(s["LabelSet"].v, n)),
    )
_JOURNAL.methods["String"] = _Method((), _STRING, str)
_CODEC.methods.update(
    String=_Method((), _STRING, _codec_name),
    ToExtension=_Method((), _STRING, _codec_ext),
)
_MONTH.methods["String"] = _Method((), _STRING, _month_name)
_WEEKDAY.methods["String"] = _Method((), _STRING, _weekday_name)
_TIME.methods.update(
    Format=_Method((_STRING,), _STRING, lambda t, layout: _format_time(t, layout)),
    String=_Method((), _STRING, lambda t: _time_string(t)),
    UTC=_Method((), _TIME, lambda t: t),
    Unix=_Method((), _INT64, lambda t: t.sec),
    UnixMilli=_Method((), _INT64, lambda t: _wrap_int64(t.sec * 1000 + t.nsec // 1_000_000)),
    UnixMicro=_Method((), _INT64, lambda t: _wrap_int64(t.sec * 1_000_000 + t.nsec // 1000)),
    UnixNano=_Method((), _INT64, lambda t: _wrap_int64(t.sec * 1_000_000_000 + t.nsec)),
    Year=_Method((), _INT, lambda t: t.dt.year),
    Month=_Method((), _MONTH, lambda t: t.dt.month),
    Day=_Method((), _INT, lambda t: t.dt.day),
    Hour=_Method((), _INT, lambda t: t.dt.hour),
    Minute=_Method((), _INT, lambda t: t.dt.minute),
    Second=_Method((), _INT, lambda t: t.dt.second),
    Nanosecond=_Method((), _INT, lambda t: t.nsec),
    YearDay=_Method((), _INT, lambda t: t.dt.timetuple().tm_yday),
    Weekday=_Method((), _WEEKDAY, lambda t: (t.dt.weekday() + 1) % 7),
    IsZero=_Method((), _BOOL, lambda t: t == _ZERO_TIME),
)
_TIME.stringer = lambda t: _time_string(t)


def _label_set(labels: LabelSet) -> _Val:
    items = tuple(
        _Val(_LABEL, {"Name": _Val(_STRING, n), "Value": _Val(_STRING, v), "Prefix": _Val(_BOOL, False)})
        for n, v in labels.items
    )
    return _Val(_LABEL_SET, {"Labels": _Val(_LABELS, items)})


def _data(
    journal: str, begin: int, end: int, when: _GoTime, registers: LabelSet, labels: LabelSet, codec: int
) -> _Val:
    """The template's data: Gazette's {Spool, JournalSpec} for a completed spool."""
    fragment = {
        "Journal": _Val(_JOURNAL, journal),
        "Begin": _Val(_INT64, begin),
        "End": _Val(_INT64, end),
        "CompressionCodec": _Val(_CODEC, codec),
        "ModTime": _Val(_INT64, 0),
        "PathPostfix": _Val(_STRING, ""),
    }
    spool = {
        "Fragment": _Val(_FRAGMENT, fragment),
        **fragment,
        "FirstAppendTime": _Val(_TIME, when),
        "Registers": _label_set(registers),
    }
    label_set = _label_set(labels)
    spec = {"Name": _Val(_JOURNAL, journal), "LabelSet": label_set, "Labels": label_set.v["Labels"]}
    return _Val(_ROOT, {"Spool": _Val(_SPOOL, spool), "JournalSpec": _Val(_JOURNAL_SPEC, spec), **spec})


# ---- time.Time.Format ----------------------------------------------------------------------------

# The zone chunks of a Go layout starting with "-" or "Z", longest first (all render UTC's zero offset).
_ZONE_CHUNKS = (
    ("-070000", "num_seconds_tz"), ("-07:00:00", "num_colon_seconds_tz"), ("-0700", "num_tz"),
    ("-07:00", "num_colon_tz"), ("-07", "num_short_tz"), ("Z070000", "iso_seconds_tz"),
    ("Z07:00:00", "iso_colon_seconds_tz"), ("Z0700", "iso_tz"), ("Z07:00", "iso_colon_tz"), ("Z07", "iso_short_tz"),
)  # fmt: skip


def _layout_chunks(layout: str) -> list[tuple[str, str]]:
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


def _format_time(t: _GoTime, layout: str) -> str:
    """Go's Time.Format for a UTC time."""
    dt = t.dt
    hour12 = dt.hour % 12 or 12
    out: list[str] = []
    for kind, text in _layout_chunks(layout):
        if kind == "lit":
            out.append(text)
        elif kind == "year":
            out.append(f"{dt.year % 100:02d}")
        elif kind == "long_year":
            out.append(f"{dt.year:04d}")
        elif kind == "month":
            out.append(_MONTHS[dt.month - 1][:3])
        elif kind == "long_month":
            out.append(_MONTHS[dt.month - 1])
        elif kind == "num_month":
            out.append(str(dt.month))
        elif kind == "zero_month":
            out.append(f"{dt.month:02d}")
        elif kind == "weekday":
            out.append(_DAYS[(dt.weekday() + 1) % 7][:3])
        elif kind == "long_weekday":
            out.append(_DAYS[(dt.weekday() + 1) % 7])
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
            digits = f"{t.nsec:09d}"[: len(text) - 1]
            if kind == "frac9":
                digits = digits.rstrip("0")
            if digits:
                out.append(text[0] + digits)
    return "".join(out)


def _time_string(t: _GoTime) -> str:
    return _format_time(t, "2006-01-02 15:04:05.999999999 -0700 MST")


def _go_time(unix_seconds: float | None) -> _GoTime:
    if unix_seconds is None:
        return _ZERO_TIME
    micros = round(unix_seconds * 1_000_000)  # what a float of unix seconds holds
    sec, us = divmod(micros, 1_000_000)
    return _GoTime(sec, us * 1000)


# ---- fmt -----------------------------------------------------------------------------------------


def _print_v(val: _Val) -> str:
    """`val` as Go's fmt prints it with %v (and text/template prints an action's value)."""
    t = val.type
    if t.stringer is not None:
        return t.stringer(val.v)
    if t.kind in ("int", "uint"):
        return str(val.v)
    if t.kind == "string":
        return str(val.v)
    if t.kind == "bool":
        return "true" if val.v else "false"
    if t.kind == "slice":
        return "[" + " ".join(_print_v(e) for e in val.v) + "]"
    raise _CallError(
        f"printing a {t.name} is {_SUBSET}: Go prints its fields in braces, which no path can hold; "
        "pick one of its fields"
    )


def _sprint(args: Sequence[_Val], spaces_always: bool) -> str:
    out: list[str] = []
    prev_string = False
    for i, a in enumerate(args):
        is_string = a.type.kind == "string"
        if i > 0 and (spaces_always or (not is_string and not prev_string)):
            out.append(" ")
        out.append(_print_v(a))
        prev_string = is_string
    return "".join(out)


_PRINTF_RE = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d*))?(.?)", re.S)


def _pad(s: str, flags: str, width: int | None) -> str:
    if width is None or len(s) >= width:
        return s
    return s.ljust(width) if "-" in flags else s.rjust(width)


def _printf_int(n: int, verb: str, flags: str, width: int | None, prec: int | None) -> str:
    base = {"d": 10, "v": 10, "x": 16, "X": 16, "o": 8, "b": 2}[verb]
    negative = n < 0
    u = -n if negative else n
    digits = {10: "d", 16: "x", 8: "o", 2: "b"}[base]
    body = format(u, digits)
    if verb == "X":
        body = body.upper()
    if prec is not None:
        if prec == 0 and u == 0:
            return _pad("", flags, width)
        body = body.rjust(prec, "0")
    elif "0" in flags and "-" not in flags and width is not None:
        body = body.rjust(width - (1 if negative or "+" in flags or " " in flags else 0), "0")
    if "#" in flags:
        if base == 16:
            body = ("0X" if verb == "X" else "0x") + body
        elif base == 8 and not body.startswith("0"):
            body = "0" + body
        elif base == 2:
            body = "0b" + body
    sign = "-" if negative else "+" if "+" in flags else " " if " " in flags else ""
    return _pad(sign + body, flags, width)


def _printf_string(s: str, verb: str, flags: str, width: int | None, prec: int | None) -> str:
    if verb in "xX":
        if prec is not None or set(flags) - {"-"}:
            raise _CallError(f"printf: %{flags}{verb} with a precision or flags on a string is {_SUBSET}")
        s = s.encode().hex()
        if verb == "X":
            s = s.upper()
    elif prec is not None:
        s = s[:prec]
    if "0" in flags and "-" not in flags and width is not None and len(s) < width:
        raise _CallError(f"printf: zero padding of a non-integer is {_SUBSET}")
    return _pad(s, flags, width)


_PRINTF_VERBS = "vdsxXobt"


def _printf(fmt: str, args: Sequence[_Val]) -> str:
    """Go's fmt.Sprintf for the verbs %v %d %s %x %X %o %b %t %% on this module's values."""
    out: list[str] = []
    arg = 0
    i = 0
    while i < len(fmt):
        j = fmt.find("%", i)
        if j < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:j])
        m = _PRINTF_RE.match(fmt, j)
        assert m is not None
        flags, width_s, prec_s, verb = m.groups()
        i = m.end()
        if verb == "%":
            out.append("%")  # takes no argument; Go ignores flags, width and precision here
            continue
        if verb == "" or verb not in _PRINTF_VERBS:
            raise _CallError(f"printf: {fmt[j:i]!r} is {_SUBSET} (verbs %v %d %s %x %X %o %b %t %%)")
        if arg >= len(args):
            raise _CallError(f"printf: no argument for %{verb} (Go would print %!{verb}(MISSING))")
        a = args[arg]
        arg += 1
        width = int(width_s) if width_s is not None else None
        prec = (int(prec_s) if prec_s else 0) if prec_s is not None else None
        t = a.type
        if verb == "v":
            if "#" in flags:
                raise _CallError(f"printf: %#v (Go syntax) is {_SUBSET}")
            flags = flags.replace("+", "")  # %+v adds field names to structs, not a sign
        if "0" in flags and (verb in "st" or (verb == "v" and t.kind not in ("int", "uint"))):
            raise _CallError(f"printf: zero padding of a non-integer is {_SUBSET}")
        if t.stringer is not None and verb in "vsxX":  # fmt prints a Stringer through String()
            out.append(_printf_string(t.stringer(a.v), verb, flags, width, prec))
        elif t.kind in ("int", "uint") and verb in "vdxXob":
            out.append(_printf_int(a.v, verb, flags, width, prec))
        elif t.kind == "string" and verb in "vsxX":
            out.append(_printf_string(a.v, verb, flags, width, prec))
        elif t.kind == "bool" and verb in "vt":
            out.append(_pad("true" if a.v else "false", flags, width))
        elif t.kind == "slice" and verb in "vs" and not flags and width is None and prec is None:
            out.append("[" + " ".join(_printf(f"%{verb}", [e]) for e in a.v) + "]")
        elif t.kind in ("int", "uint", "string", "bool"):
            raise _CallError(
                f"printf: %{verb} does not apply to a {t.name} (Go would print %!{verb}({t.name}=...), which no "
                "path can hold)"
            )
        else:
            raise _CallError(f"printf: %{flags}{width_s or ''}{verb} of a {t.name} is {_SUBSET}")
    if arg < len(args):
        extra = ", ".join(f"{a.type.name}={_print_v(a)}" for a in args[arg:])
        raise _CallError(f"printf: too many arguments (Go would append %!(EXTRA {extra}))")
    return "".join(out)


# ---- lexing --------------------------------------------------------------------------------------

_SPACE = " \t\r\n"
_KEYWORDS = frozenset(
    {"block", "break", "continue", "define", "else", "end", "if", "range", "template", "with"}
)
_FUNCS = frozenset({"and", "or", "not", "len", "index", "print", "printf", "println"})
_GO_FUNCS = _FUNCS | {"call", "html", "js", "urlquery", "slice", "eq", "ne", "lt", "le", "gt", "ge"}


@dataclasses.dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # text ldelim rdelim space field ident var dot number string pipe ( ) char := = bool nil eof
    pos: int
    text: str
    value: Any = None  # text of a text token, unquoted string, bool


def _is_alnum(c: str) -> bool:
    return c == "_" or c.isalpha() or unicodedata.category(c) == "Nd"


def _has_left_trim(src: str, i: int) -> bool:
    return src[i : i + 1] == "-" and src[i + 1 : i + 2] != "" and src[i + 1] in _SPACE


def _at_right_delim(src: str, i: int) -> tuple[bool, bool]:
    if src[i : i + 1] != "" and src[i] in _SPACE and src.startswith("-}}", i + 1):
        return True, True
    return src.startswith("}}", i), False


def _skip_space(src: str, i: int) -> int:
    while i < len(src) and src[i] in _SPACE:
        i += 1
    return i


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks: list[_Tok] = []

    def emit(self, kind: str, pos: int, end: int, value: Any = None) -> None:
        self.toks.append(_Tok(kind, pos, self.src[pos:end], value))

    def run(self) -> list[_Tok]:
        """The tokens; a lexing error ends them as an "error" token, which the parser raises when it
        reaches it (as Go's parser does, so an earlier syntax error is the one reported)."""
        try:
            self.lex()
        except _TemplateError as exc:
            self.toks.append(_Tok("error", exc.pos, "", exc))
        return self.toks

    def lex(self) -> None:
        src = self.src
        i = 0
        while i < len(src):
            j = src.find("{{", i)
            if j < 0:
                self.text(i, len(src), src[i:])
                break
            text = src[i:j]
            after = j + 2
            trim_left = _has_left_trim(src, after)
            if trim_left:
                text = text.rstrip(_SPACE)
            if text:
                self.text(i, j, text)
            k = after + 2 if trim_left else after
            if src.startswith("/*", k):
                i = self.comment(j, k)
            else:
                self.emit("ldelim", j, after)
                i = self.action(j, k)
        self.toks.append(_Tok("eof", len(src), ""))

    def text(self, pos: int, end: int, text: str) -> None:
        old = _old_syntax_error(self.src, text, pos)
        if old is not None:
            raise old
        self.emit("text", pos, end, text)

    def comment(self, start: int, k: int) -> int:
        src = self.src
        end = src.find("*/", k + 2)
        if end < 0:
            raise _TemplateError(start, "unclosed comment")
        delim, trim = _at_right_delim(src, end + 2)
        if not delim:
            raise _TemplateError(start, "comment ends before closing delimiter")
        i = end + 2 + (2 if trim else 0) + 2
        return _skip_space(src, i) if trim else i

    def action(self, start: int, i: int) -> int:
        src = self.src
        n = len(src)
        parens = 0
        while True:
            delim, trim = _at_right_delim(src, i)
            if delim:
                if parens:
                    raise _TemplateError(i, "unclosed left paren")
                end = i + (4 if trim else 2)  # " -}}" or "}}"
                self.emit("rdelim", i, end)
                return _skip_space(src, end) if trim else end
            if i >= n:
                raise _TemplateError(start, 'unclosed action (no "}}" closes this "{{")')
            c = src[i]
            if c in _SPACE:
                j = _skip_space(src, i)
                if src.startswith("-}}", j):
                    j -= 1  # the last space belongs to a " -}}"
                if j > i:
                    self.emit("space", i, j)
                i = j
            elif c == "|":
                self.emit("pipe", i, i + 1)
                i += 1
            elif c == "(":
                parens += 1
                self.emit("(", i, i + 1)
                i += 1
            elif c == ")":
                parens -= 1
                if parens < 0:
                    raise _TemplateError(i, "unexpected right paren")
                self.emit(")", i, i + 1)
                i += 1
            elif c == '"':
                i = self.quoted(i)
            elif c == "`":
                j = src.find("`", i + 1)
                if j < 0:
                    raise _TemplateError(i, "unterminated raw quoted string")
                self.emit("string", i, j + 1, src[i + 1 : j])
                i = j + 1
            elif c == "'":
                raise _TemplateError(i, f"character constants are {_SUBSET}")
            elif c == "$":
                j = i + 1
                while j < n and _is_alnum(src[j]):
                    j += 1
                self.terminated(j)
                self.emit("var", i, j)
                i = j
            elif c == "." and not (i + 1 < n and src[i + 1].isdigit() and src[i + 1].isascii()):
                j = i + 1
                while j < n and _is_alnum(src[j]):
                    j += 1
                self.terminated(j)
                self.emit("dot" if j == i + 1 else "field", i, j)
                i = j
            elif c in "+-." or ("0" <= c <= "9"):
                i = self.number(i)
            elif _is_alnum(c):
                j = i + 1
                while j < n and _is_alnum(src[j]):
                    j += 1
                self.terminated(j)
                word = src[i:j]
                if word in ("true", "false"):
                    self.emit("bool", i, j, word == "true")
                elif word == "nil":
                    self.emit("nil", i, j)
                else:
                    self.emit("ident", i, j)
                i = j
            elif c == ":":
                if not src.startswith(":=", i):
                    raise _TemplateError(i, "expected :=")
                self.emit(":=", i, i + 2)
                i += 2
            elif c == "=":
                self.emit("=", i, i + 1)
                i += 1
            elif c.isascii() and c.isprintable():
                self.emit("char", i, i + 1)
                i += 1
            else:
                raise _TemplateError(i, f"unrecognized character in action: U+{ord(c):04X}")

    def terminated(self, i: int) -> None:
        """A field, identifier or variable must be followed by space, punctuation or the delimiter."""
        src = self.src
        if i >= len(src) or src[i] in _SPACE or src[i] in ".,|:()" or src.startswith("}}", i):
            return
        raise _TemplateError(i, f"bad character {src[i]!r}")

    def number(self, i: int) -> int:
        src = self.src
        n = len(src)
        j = i
        if j < n and src[j] in "+-":
            j += 1
        digits = "0123456789_"
        if src.startswith("0", j):
            j += 1
            if j < n and src[j] in "xX":
                digits, j = "0123456789abcdefABCDEF_", j + 1
            elif j < n and src[j] in "oO":
                digits, j = "01234567_", j + 1
            elif j < n and src[j] in "bB":
                digits, j = "01_", j + 1
        while j < n and src[j] in digits:
            j += 1
        if j < n and src[j] == ".":
            j += 1
            while j < n and src[j] in digits:
                j += 1
        if len(digits) == 11 and j < n and src[j] in "eE":
            j += 1
            if j < n and src[j] in "+-":
                j += 1
            while j < n and src[j] in "0123456789_":
                j += 1
        if len(digits) == 23 and j < n and src[j] in "pP":
            j += 1
            if j < n and src[j] in "+-":
                j += 1
            while j < n and src[j] in "0123456789_":
                j += 1
        if j < n and src[j] == "i":
            j += 1
        if j < n and _is_alnum(src[j]):
            raise _TemplateError(i, f"bad number syntax: {src[i : j + 1]!r}")
        self.emit("number", i, j)
        return j

    def quoted(self, i: int) -> int:
        src = self.src
        j = i + 1
        while True:
            if j >= len(src) or src[j] == "\n":
                raise _TemplateError(i, "unterminated quoted string")
            if src[j] == "\\":
                if j + 1 >= len(src) or src[j + 1] == "\n":
                    raise _TemplateError(i, "unterminated quoted string")
                j += 2
                continue
            if src[j] == '"':
                break
            j += 1
        self.emit("string", i, j + 1, _unquote(src[i + 1 : j], i))
        return j + 1


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


def _unquote(body: str, pos: int) -> str:
    """Go's strconv.Unquote of a double-quoted string's body."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
            continue
        size = {"x": 2, "u": 4, "U": 8}.get(e)
        if size is not None:
            hexdigits = body[i + 2 : i + 2 + size]
            if len(hexdigits) == size and all(h in "0123456789abcdefABCDEF" for h in hexdigits):
                code = int(hexdigits, 16)
                if e == "x":
                    out.append(chr(code))  # a byte; paths hold only ASCII ones anyway
                elif code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                    out.append(chr(code))
                else:
                    raise _TemplateError(pos, f"invalid escape \\{e}{hexdigits} in quoted string")
                i += 2 + size
                continue
        elif e in "01234567":
            octal = body[i + 1 : i + 4]
            if len(octal) == 3 and all(o in "01234567" for o in octal) and int(octal, 8) <= 255:
                out.append(chr(int(octal, 8)))
                i += 4
                continue
        raise _TemplateError(pos, f"invalid escape \\{e} in quoted string")
    return "".join(out)


# ---- parsing -------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False, slots=True)
class _Node:
    kind: str  # text action pipe command field var chain ident dot nil bool number string
    pos: int
    end: int = 0
    text: str = ""  # text of a text node, name of an identifier or variable
    value: Any = None  # of a constant
    idents: tuple[str, ...] = ()  # of a field, variable or chain
    children: list[_Node] = dataclasses.field(default_factory=list)  # commands, arguments, chained node


_LITERALS = ("bool", "dot", "nil", "number", "string")
_OPERAND_START = ("bool", "dot", "field", "ident", "number", "nil", "string", "var", "(")


class _Parser:
    def __init__(self, src: str, toks: list[_Tok]) -> None:
        self.src = src
        self.toks = toks
        self.i = 0

    def peek(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind == "error":
            raise tok.value
        return tok

    def next(self) -> _Tok:
        tok = self.peek()
        self.i += 1
        return tok

    def peek_non_space(self) -> _Tok:
        while self.peek().kind == "space":
            self.i += 1
        return self.toks[self.i]

    def next_non_space(self) -> _Tok:
        tok = self.peek_non_space()
        self.i += 1
        return tok

    def unexpected(self, tok: _Tok, context: str) -> _TemplateError:
        what = (
            "EOF"
            if tok.kind == "eof"
            else '"' + (tok.text if len(tok.text) <= 10 else tok.text[:10] + "...") + '"'
        )
        return _TemplateError(tok.pos, f"unexpected {what} in {context}")

    def template(self) -> list[_Node]:
        nodes: list[_Node] = []
        while True:
            tok = self.next()
            if tok.kind == "eof":
                return nodes
            if tok.kind == "text":
                nodes.append(_Node("text", tok.pos, tok.pos + len(tok.text), text=tok.value))
                continue
            assert tok.kind == "ldelim"
            nodes.append(self.action(tok))

    def action(self, ldelim: _Tok) -> _Node:
        tok = self.peek_non_space()
        if tok.kind == "ident" and tok.text in _KEYWORDS:
            raise _TemplateError(tok.pos, f"{{{{{tok.text}}}}} and the other control actions are {_SUBSET}")
        if tok.kind == "var":
            j = self.i + 1
            while self.toks[j].kind == "space":
                j += 1
            if self.toks[j].kind in (":=", "=") or (self.toks[j].kind == "char" and self.toks[j].text == ","):
                raise _TemplateError(tok.pos, f"variable declarations are {_SUBSET}")
        pipe = self.pipeline("command", "rdelim")
        rdelim = self.toks[self.i - 1]
        return _Node("action", ldelim.pos, rdelim.pos + len(rdelim.text), children=[pipe])

    def pipeline(self, context: str, end: str) -> _Node:
        start = self.peek_non_space().pos
        cmds: list[_Node] = []
        while True:
            tok = self.next_non_space()
            if tok.kind == end:  # Go accepts a trailing "|" too
                if not cmds:
                    raise _TemplateError(tok.pos, f"missing value for {context}")
                for stage, cmd in enumerate(cmds[1:], start=2):
                    if cmd.children[0].kind in _LITERALS:
                        raise _TemplateError(cmd.pos, f"non executable command in pipeline stage {stage}")
                return _Node("pipe", start, tok.pos, children=cmds)
            if tok.kind in _OPERAND_START:
                self.i -= 1
                cmds.append(self.command())
                continue
            raise self.unexpected(tok, context)

    def command(self) -> _Node:
        start = self.peek_non_space().pos
        args: list[_Node] = []
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                args.append(operand)
            tok = self.next()
            if tok.kind == "space":
                continue
            if tok.kind in ("rdelim", ")"):
                self.i -= 1
            elif tok.kind != "pipe":
                raise self.unexpected(tok, "operand")
            break
        if not args:
            raise _TemplateError(start, "empty command")
        return _Node("command", start, args[-1].end, children=args)

    def operand(self) -> _Node | None:
        node = self.term()
        if node is None or self.peek().kind != "field":
            return node
        fields: list[str] = []
        end = node.end
        while self.peek().kind == "field":
            tok = self.next()
            fields.append(tok.text[1:])
            end = tok.pos + len(tok.text)
        if node.kind == "field":
            return _Node("field", node.pos, end, idents=node.idents + tuple(fields))
        if node.kind == "var":
            return _Node("var", node.pos, end, text=node.text, idents=node.idents + tuple(fields))
        if node.kind in _LITERALS:
            raise _TemplateError(node.end, f"unexpected . after term {self.src[node.pos : node.end]!r}")
        return _Node("chain", node.pos, end, idents=tuple(fields), children=[node])

    def term(self) -> _Node | None:
        tok = self.next_non_space()
        end = tok.pos + len(tok.text)
        if tok.kind == "ident":
            if tok.text in _KEYWORDS:
                raise self.unexpected(tok, "operand")
            if tok.text not in _GO_FUNCS:
                raise _TemplateError(tok.pos, f'function "{tok.text}" not defined')
            if tok.text not in _FUNCS:
                raise _TemplateError(
                    tok.pos, f'function "{tok.text}" is {_SUBSET} (it has: {", ".join(sorted(_FUNCS))})'
                )
            return _Node("ident", tok.pos, end, text=tok.text)
        if tok.kind == "var":
            if tok.text != "$":
                raise _TemplateError(tok.pos, f'undefined variable "{tok.text}"')
            return _Node("var", tok.pos, end, text="$")
        if tok.kind == "field":
            return _Node("field", tok.pos, end, idents=(tok.text[1:],))
        if tok.kind in ("dot", "nil"):
            return _Node(tok.kind, tok.pos, end)
        if tok.kind == "bool":
            return _Node("bool", tok.pos, end, value=tok.value)
        if tok.kind == "string":
            return _Node("string", tok.pos, end, value=tok.value)
        if tok.kind == "number":
            return _Node("number", tok.pos, end, value=_number(tok))
        if tok.kind == "(":
            pipe = self.pipeline("parenthesized pipeline", ")")
            close = self.toks[self.i - 1]
            pipe.pos, pipe.end = tok.pos, close.pos + 1
            return pipe
        self.i -= 1
        return None


def _number(tok: _Tok) -> int:
    text = tok.text
    body = text.lstrip("+-")
    lower = body.lower()
    if any(c in lower for c in ".i") or (not lower.startswith("0x") and "e" in lower) or "p" in lower:
        raise _TemplateError(tok.pos, f"floating-point and complex constants are {_SUBSET}")
    try:
        if re.fullmatch(r"0[0-7_]+", body) and not body.startswith("0_"):
            value = int(body[1:].replace("_", ""), 8) if body.strip("0_") else 0
        else:
            value = int(body, 0)
    except ValueError:
        raise _TemplateError(tok.pos, f"illegal number syntax: {text!r}") from None
    value = -value if text.startswith("-") else value
    if not -(1 << 63) <= value < (1 << 63):
        raise _TemplateError(tok.pos, f"{text} overflows int")
    return value


# ---- the former single-brace syntax --------------------------------------------------------------

_OLD_START = re.compile(r"\{\s*[A-Za-z_]")
_OLD_FIELD = re.compile(r"\{\s*([A-Za-z_][^\s{}:]*)\s*(?::([^{}]*))?\}")
_STRFTIME = {
    "Y": "2006", "y": "06", "m": "01", "d": "02", "e": "_2", "H": "15", "I": "03", "M": "04",
    "S": "05", "p": "PM", "b": "Jan", "h": "Jan", "B": "January", "a": "Mon", "A": "Monday",
    "j": "002", "Z": "MST", "z": "-0700", "F": "2006-01-02", "T": "15:04:05",
}  # fmt: skip
_TIME_FIELD = ".Spool.FirstAppendTime.Format"


def _from_strftime(fmt: str) -> str | None:
    """The Gazette form of the former `{first_append:FMT}`: Format actions, literals outside them."""
    pieces: list[tuple[bool, str]] = []  # (is layout, text)
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            j = fmt.find("%", i)
            j = len(fmt) if j < 0 else j
            pieces.append((False, fmt[i:j]))
            i = j
            continue
        d = fmt[i + 1 : i + 2]
        if d == "%":
            pieces.append((False, "%"))
        elif d == "f" and pieces and not pieces[-1][0] and pieces[-1][1].endswith("."):
            pieces[-1] = (False, pieces[-1][1][:-1])
            pieces.append((True, ".000000"))
        elif d in _STRFTIME:
            pieces.append((True, _STRFTIME[d]))
        else:
            return None
        i += 2
    layouts = [i for i, (is_layout, _) in enumerate(pieces) if is_layout]
    if not layouts:
        return None
    first, last = layouts[0], layouts[-1]
    span = pieces[first : last + 1]
    expected: list[tuple[str, str]] = []  # the chunks Go should see: each directive's, literals merged
    for is_layout, text in span:
        for chunk in _layout_chunks(text) if is_layout else [("lit", text)]:
            if chunk[0] == "lit" and expected and expected[-1][0] == "lit":
                expected[-1] = ("lit", expected[-1][1] + chunk[1])
            else:
                expected.append(chunk)
    joined = "".join(text for _, text in span)
    if _layout_chunks(joined) == expected and '"' not in joined and "\\" not in joined:
        before = "".join(text for _, text in pieces[:first])
        after = "".join(text for _, text in pieces[last + 1 :])
        return before + _format_action(joined) + after
    # Go would read some literal text as layout elements: one action per directive, text outside.
    return "".join(_format_action(text) if is_layout else text for is_layout, text in pieces)


def _format_action(layout: str) -> str:
    return f'{{{{ {_TIME_FIELD} "{layout}" }}}}'


def _gazette_form(name: str, spec: str | None) -> str | None:
    """The Gazette form of the former field `{name:spec}`, None when there is no simple one."""
    if name == "journal" and spec is None:
        return "{{ .Spool.Journal }}"
    if name in ("begin", "end"):
        field = ".Spool.Begin" if name == "begin" else ".Spool.End"
        if not spec or spec == "d":
            return f"{{{{ {field} }}}}"
        m = re.fullmatch(r"(0?)(\d*)([dxXob])", spec)
        return f'{{{{ printf "%{m[1]}{m[2]}{m[3]}" {field} }}}}' if m else None
    if name == "first_append":
        return _from_strftime(spec or "%Y-%m-%d")
    if name.startswith("registers.") and '"' not in name and '"' not in (spec or ""):
        get = f'.Spool.Registers.ValueOf "{name[len("registers.") :]}"'
        return f"{{{{ {get} }}}}" if spec is None else f'{{{{ or ({get}) "{spec}" }}}}'
    return None


def _old_syntax_error(template: str, text: str, pos: int) -> _TemplateError | None:
    """An error for former single-brace fields in literal text (which Go writes out as they are)."""
    start = _OLD_START.search(text)
    if start is None:
        return None
    at = pos + start.start()
    m = _OLD_FIELD.match(text, start.start())
    if m is None:
        return _TemplateError(
            at,
            "a single \"{\" followed by a name is this project's former template syntax, which Go's "
            "text/template writes out literally; Gazette's template actions are {{ ... }}, "
            'e.g. {{ .Spool.FirstAppendTime.Format "2006-01-02" }}',
        )
    form = _gazette_form(m[1], m[2])
    rule = (
        f"\"{m[0]}\" is this project's former template syntax, which Go's text/template writes out literally "
        "(Gazette would create a directory of that name, then skip its fragments when listing the store)"
    )
    if form is None:
        rule += (
            '; write a Gazette action instead, e.g. {{ .Spool.Journal }}, {{ .Spool.Begin }}, {{ .Spool.FirstAppendTime.Format "2006-01-02" }} '
            'or {{ .Spool.Registers.ValueOf "NAME" }}'
        )
        return _TemplateError(at, rule)
    rule += f"; in Gazette's syntax: {form}"
    if "{{" not in template and "}}" not in template:
        whole: list[str] = []
        last = 0
        for f in _OLD_FIELD.finditer(template):
            converted = _gazette_form(f[1], f[2])
            if converted is None:
                return _TemplateError(at, rule)
            whole += [template[last : f.start()], converted]
            last = f.end()
        whole.append(template[last:])
        rule += f" (the whole template: {''.join(whole)})"
    return _TemplateError(at, rule)


# ---- execution -----------------------------------------------------------------------------------

_MISSING = _Val(_ANY, None)  # no piped value


def _truth(val: _Val) -> bool:
    if val.type.kind in ("struct", "time"):
        return True
    if val.type.kind in ("string", "slice"):
        return len(val.v) > 0
    return bool(val.v)


class _Exec:
    def __init__(self, src: str, root: _Val) -> None:
        self.src = src
        self.root = root

    def err(self, node: _Node, rule: str) -> _TemplateError:
        return _TemplateError(node.pos, f"at <{self.src[node.pos : node.end].strip()}>: {rule}")

    def run(self, nodes: Sequence[_Node]) -> str:
        out: list[str] = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
                continue
            pipe = node.children[0]
            val = self.pipeline(pipe)
            try:
                out.append(_print_v(val))
            except _CallError as exc:
                raise self.err(pipe, str(exc)) from None
        return "".join(out)

    def pipeline(self, pipe: _Node) -> _Val:
        val = _MISSING
        for cmd in pipe.children:
            val = self.command(cmd, val)
        return val

    def command(self, cmd: _Node, final: _Val) -> _Val:
        first = cmd.children[0]
        args = cmd.children
        if first.kind == "field":
            return self.chain(self.root, first, first.idents, args, final)
        if first.kind == "var" and first.idents:
            return self.chain(self.root, first, first.idents, args, final)
        if first.kind == "chain":
            return self.chain(self.value(first.children[0], _ANY), first, first.idents, args, final)
        if first.kind == "ident":
            return self.function(first, args, final)
        if len(args) > 1 or final is not _MISSING:
            raise self.err(first, f"can't give argument to non-function {self.src[first.pos : first.end]}")
        if first.kind == "pipe":
            return self.pipeline(first)
        if first.kind in ("dot", "var"):
            return self.root
        if first.kind == "nil":
            raise self.err(first, "nil is not a command")
        return self.constant(first, _ANY)

    def constant(self, node: _Node, typ: _Type) -> _Val:
        if typ is _ANY:
            typ = {"bool": _BOOL, "number": _INT, "string": _STRING}[node.kind]
        expected = {"string": "string", "int": "number", "uint": "number", "bool": "bool"}.get(typ.kind)
        if expected != node.kind:
            noun = {"string": "string", "int": "integer", "uint": "integer", "bool": "bool"}.get(
                typ.kind, typ.name
            )
            raise self.err(node, f"expected {noun}; found {self.src[node.pos : node.end]}")
        if typ.kind == "uint" and node.value < 0:
            raise self.err(node, f"expected unsigned integer; found {self.src[node.pos : node.end]}")
        return _Val(typ, node.value)

    def value(self, node: _Node, typ: _Type) -> _Val:
        """An argument of type `typ` (Go's evalArg)."""
        if node.kind == "dot" or (node.kind == "var" and not node.idents):
            val = self.root
        elif node.kind in ("field", "var"):
            val = self.chain(self.root, node, node.idents, [node], _MISSING)
        elif node.kind == "chain":
            val = self.chain(self.value(node.children[0], _ANY), node, node.idents, [node], _MISSING)
        elif node.kind == "pipe":
            val = self.pipeline(node)
        elif node.kind == "ident":
            val = self.function(node, [node], _MISSING)
        elif node.kind == "nil":
            raise self.err(node, f"nil is {_SUBSET}")
        else:
            return self.constant(node, typ)
        return self.check_type(node, val, typ)

    def check_type(self, node: _Node, val: _Val, typ: _Type) -> _Val:
        if typ is _ANY or val.type is typ:
            return val
        raise self.err(node, f"wrong type for value; expected {typ.name}; got {val.type.name}")

    def chain(self, recv: _Val, node: _Node, idents: Sequence[str], args: list[_Node], final: _Val) -> _Val:
        for name in idents[:-1]:
            recv = self.field(recv, name, node, [node], _MISSING)
        return self.field(recv, idents[-1], node, args, final)

    def field(self, recv: _Val, name: str, node: _Node, args: list[_Node], final: _Val) -> _Val:
        t = recv.type
        method = t.methods.get(name)
        if method is not None:
            return self.call(
                name,
                node,
                method.params,
                None,
                args,
                final,
                lambda *a: _Val(method.result, method.fn(recv.v, *a)),
            )
        if t.kind == "struct" and name in recv.v:
            if len(args) > 1 or final is not _MISSING:
                raise self.err(node, f"{name} has arguments but cannot be invoked as function")
            field: _Val = recv.v[name]
            return field
        if t is _ROOT and name == "Fragment":
            raise self.err(node, _AMBIGUOUS_FRAGMENT)
        if name in t.outside:
            raise self.err(node, f"{name} of {t.name} is Gazette data {_SUBSET}")
        known = sorted({*t.fields, *t.methods})
        listing = f" (it has: {', '.join(known)})" if known else ""
        raise self.err(node, f"can't evaluate field {name} in type {t.name}{listing}")

    def call(
        self,
        name: str,
        node: _Node,
        params: Sequence[_Type],
        variadic: _Type | None,
        args: list[_Node],
        final: _Val,
        fn: Callable[..., _Val],
    ) -> _Val:
        arg_nodes = args[1:]
        count = len(arg_nodes) + (final is not _MISSING)
        if variadic is not None:
            if count < len(params):
                raise self.err(
                    node, f"wrong number of args for {name}: want at least {len(params)} got {count}"
                )
        elif count != len(params):
            raise self.err(node, f"wrong number of args for {name}: want {len(params)} got {count}")
        types = [*params, *[variadic or _ANY] * count][:count]
        values = [
            self.value(a, typ).v if typ is not _ANY else self.value(a, typ)
            for a, typ in zip(arg_nodes, types, strict=False)
        ]
        if final is not _MISSING:
            last = self.check_type(node, final, types[-1])
            values.append(last if types[-1] is _ANY else last.v)
        try:
            return fn(*values)
        except _CallError as exc:
            raise self.err(node, f"error calling {name}: {exc}") from None

    def function(self, ident: _Node, args: list[_Node], final: _Val) -> _Val:
        name = ident.text
        if name in ("and", "or"):
            if len(args) == 1 and final is _MISSING:
                raise self.err(ident, f"wrong number of args for {name}: want at least 1 got 0")
            val = _MISSING
            for a in args[1:]:
                val = self.value(a, _ANY)
                if _truth(val) == (name == "or"):
                    return val
            return final if final is not _MISSING else val
        if name == "not":
            return self.call(name, ident, (_ANY,), None, args, final, lambda v: _Val(_BOOL, not _truth(v)))
        if name == "len":
            return self.call(name, ident, (_ANY,), None, args, final, _len)
        if name == "index":
            return self.call(name, ident, (_ANY,), _ANY, args, final, _index)
        if name == "printf":
            return self.call(
                name, ident, (_STRING,), _ANY, args, final, lambda f, *a: _Val(_STRING, _printf(f, a))
            )
        spaces = name == "println"
        return self.call(
            name, ident, (), _ANY, args, final, lambda *a: _Val(_STRING, _sprint(a, spaces) + "\n" * spaces)
        )


def _len(item: _Val) -> _Val:
    if item.type.kind in ("string", "slice"):
        return _Val(_INT, len(item.v.encode()) if item.type.kind == "string" else len(item.v))
    raise _CallError(f"len of type {item.type.name}")


def _index(item: _Val, *indexes: _Val) -> _Val:
    for idx in indexes:
        kind = item.type.kind
        if kind not in ("slice", "string"):
            raise _CallError(f"can't index item of type {item.type.name}")
        if idx.type.kind not in ("int", "uint"):
            raise _CallError(f"cannot index slice/array with type {idx.type.name}")
        seq = item.v.encode() if kind == "string" else item.v
        if not 0 <= idx.v < len(seq):
            raise _CallError(f"index out of range: {idx.v}")
        item = _Val(_UINT8, seq[idx.v]) if kind == "string" else seq[idx.v]
    return item


# ---- the public functions ------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _compile(template: str) -> tuple[_Node, ...]:
    try:
        return tuple(_Parser(template, _Lexer(template).run()).template())
    except _TemplateError as exc:
        raise _error(template, exc.pos, exc.rule) from None


def _check_rendered(template: str, rendered: str) -> str:
    try:
        validate_path_component("path postfix", rendered, POSTFIX_LEN)
        for segment in rendered.split("/"):
            if segment in (".", ".."):
                raise ValidationError(f'path postfix "{rendered}" must not have a "{segment}" segment')
    except ValidationError as exc:
        raise ValidationError(
            f'path_postfix_template "{template}" does not render a clean relative path: {exc.message}'
        ) from None
    return rendered


def _render(template: str, data: _Val) -> str:
    nodes = _compile(template)
    try:
        rendered = _Exec(template, data).run(nodes)
    except _TemplateError as exc:
        raise _error(template, exc.pos, exc.rule) from None
    return _check_rendered(template, rendered)


def render_postfix(
    template: str,
    *,
    journal: str,
    begin: int,
    end: int,
    first_append_time: float | None,
    registers: LabelSet,
    labels: LabelSet | None = None,
    compression_codec: int | None = None,
) -> str:
    """Renders `template` for a completed spool as a Gazette broker would.

    `first_append_time` is unix seconds (None: Go's zero time, 0001-01-01T00:00:00Z), `labels` the
    journal's labels (None: none) and `compression_codec` the spool's codec number (a Codec; None:
    0, INVALID, Go's zero value)."""
    if template == "":
        return ""
    data = _data(
        journal,
        begin,
        end,
        _go_time(first_append_time),
        registers,
        labels if labels is not None else LabelSet(),
        int(compression_codec) if compression_codec is not None else 0,
    )
    return _render(template, data)


def validate_postfix_template(template: str, *, journal: str = PLACEHOLDER_JOURNAL) -> None:
    """Raises ValidationError unless `template` parses and renders on the zero value for `journal`."""
    if not isinstance(template, str):
        raise ValidationError(f"path_postfix_template {template!r} is not a string")
    if template == "":
        return
    _render(template, _data(journal, 0, 0, _ZERO_TIME, LabelSet(), LabelSet(), 0))
