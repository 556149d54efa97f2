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

The syntax is the subset of Go's text/template that gazette.protocol.gotemplate evaluates (its
docstring has the details): literal text and actions `{{ pipeline }}` (with `{{-` / `-}}` trimming
and comments), pipelines joined by `|`, field chains ending in a method call or not, string, integer
and boolean constants, and the functions printf, print, println, len, index, and, or, not. Values
print as Go's fmt prints them (a CompressionCodec by its name, e.g. SNAPPY); printing a struct is
refused. Control actions (if, range, with, ...), variables other than `$`, Go's other functions and
character or floating-point constants are outside the subset, and refused.

Errors: everything Go's text/template would reject on this data (bad syntax, an unclosed action, an
unknown field or function, a method given the wrong arguments) and everything outside the subset
raises a ValidationError naming path_postfix_template, the character offset and what is wrong. So does
the former single-brace syntax of this project (`{journal}`, `{first_append:%Y-%m-%d}`,
`{registers.NAME}`, ...): Go treats it as literal text, so Gazette would create a directory literally
named `{first_append:%Y-%m-%d}` and then skip every fragment under it when listing the store (its
fragment path parser refuses the braces); the error shows the Gazette form of the field and of the
whole template (gazette.protocol.postfix_migration).

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

import functools

from gazette.protocol import gotemplate
from gazette.protocol.errors import ValidationError
from gazette.protocol.gotemplate import CallError, TemplateError
from gazette.protocol.gotemplate.values import (
    BOOL,
    INT64,
    STRING,
    STRINGS,
    TIME,
    ZERO_TIME,
    GoTime,
    Method,
    Type,
    Val,
)
from gazette.protocol.labels import LabelSet
from gazette.protocol.postfix_migration import check_former_syntax
from gazette.protocol.validate import validate_path_component

POSTFIX_LEN = (0, 512)
# The journal a template is checked with when no spec name is at hand.
PLACEHOLDER_JOURNAL = "examples/journal"


def _error(template: str, pos: int, rule: str) -> ValidationError:
    return ValidationError(f'path_postfix_template "{template}" is not valid at position {pos}: {rule}')


# ---- the data Gazette gives ------------------------------------------------------------------------


def _codec_name(c: int) -> str:
    return _CODEC_NAMES.get(c, str(c))


_CODEC_NAMES = {
    0: "INVALID",
    1: "NONE",
    2: "GZIP",
    3: "ZSTANDARD",
    4: "SNAPPY",
    5: "GZIP_OFFLOAD_DECOMPRESSION",
}
_CODEC_EXTS = {1: ".raw", 2: ".gz", 3: ".zst", 4: ".sz", 5: ""}
_CODEC = Type("protocol.CompressionCodec", "int", stringer=_codec_name, outside=("Validate",))
_JOURNAL = Type("protocol.Journal", "string", stringer=str, outside=("Validate", "SplitMeta", "StripMeta"))
_LABEL = Type("protocol.Label", "struct", fields=("Name", "Value", "Prefix"), outside=("Validate",))
_LABELS = Type("[]protocol.Label", "slice", elem=_LABEL)
_LABEL_SET = Type("protocol.LabelSet", "struct", fields=("Labels",), outside=("Validate",))
_FRAGMENT_FIELDS = ("Journal", "Begin", "End", "CompressionCodec", "ModTime", "PathPostfix")
_FRAGMENT_OUTSIDE = ("Sum", "BackingStore")
_FRAGMENT = Type("protocol.Fragment", "struct", fields=_FRAGMENT_FIELDS, outside=_FRAGMENT_OUTSIDE)
_SPOOL = Type(
    "fragment.Spool",
    "struct",
    fields=("Fragment", *_FRAGMENT_FIELDS, "FirstAppendTime", "Registers"),
    outside=_FRAGMENT_OUTSIDE,
)
_SPEC_OUTSIDE = ("Replication", "Fragment", "Flags", "MaxAppendRate", "Suspend")
_JOURNAL_SPEC = Type(
    "protocol.JournalSpec",
    "struct",
    fields=("Name", "LabelSet", "Labels"),
    outside=(*_SPEC_OUTSIDE, "Validate"),
)
_ROOT = Type(
    "struct { Spool; protocol.JournalSpec }",
    "struct",
    fields=("Spool", "JournalSpec", "Name", "LabelSet", "Labels"),
    outside=("Replication", "Flags", "MaxAppendRate", "Suspend"),
    refused={
        "Fragment": "Gazette's validation takes .Fragment for .JournalSpec.Fragment, but a Gazette broker "
        "fails on it when persisting (it is ambiguous with .Spool.Fragment there); write .Spool.Fragment"
    },
)


def _labels_value_of(ls: dict[str, Val], name: str) -> str:
    for label in ls["Labels"].v:
        if label.v["Name"].v == name:
            return str(label.v["Value"].v)
    return ""


def _labels_values_of(ls: dict[str, Val], name: str) -> tuple[Val, ...]:
    return tuple(Val(STRING, lbl.v["Value"].v) for lbl in ls["Labels"].v if lbl.v["Name"].v == name)


def _codec_ext(c: int) -> str:
    if c not in _CODEC_EXTS:
        raise CallError("invalid CompressionCodec")
    return _CODEC_EXTS[c]


_LABEL_SET.methods.update(
    ValueOf=Method((STRING,), STRING, _labels_value_of),
    ValuesOf=Method((STRING,), STRINGS, _labels_values_of),
)
for _t in (_JOURNAL_SPEC, _ROOT):  # promoted from the embedded LabelSet
    _t.methods.update(
        ValueOf=Method((STRING,), STRING, lambda s, n: _labels_value_of(s["LabelSet"].v, n)),
        ValuesOf=Method((STRING,), STRINGS, lambda s, n: _labels_values_of(s["LabelSet"].v, n)),
    )
_JOURNAL.methods["String"] = Method((), STRING, str)
_CODEC.methods.update(
    String=Method((), STRING, _codec_name),
    ToExtension=Method((), STRING, _codec_ext),
)


def _label_set(labels: LabelSet) -> Val:
    items = tuple(
        Val(_LABEL, {"Name": Val(STRING, n), "Value": Val(STRING, v), "Prefix": Val(BOOL, False)})
        for n, v in labels.items
    )
    return Val(_LABEL_SET, {"Labels": Val(_LABELS, items)})


def _data(
    journal: str, begin: int, end: int, when: GoTime, registers: LabelSet, labels: LabelSet, codec: int
) -> Val:
    """The template's data: Gazette's {Spool, JournalSpec} for a completed spool."""
    fragment = {
        "Journal": Val(_JOURNAL, journal),
        "Begin": Val(INT64, begin),
        "End": Val(INT64, end),
        "CompressionCodec": Val(_CODEC, codec),
        "ModTime": Val(INT64, 0),
        "PathPostfix": Val(STRING, ""),
    }
    spool = {
        "Fragment": Val(_FRAGMENT, fragment),
        **fragment,
        "FirstAppendTime": Val(TIME, when),
        "Registers": _label_set(registers),
    }
    label_set = _label_set(labels)
    spec = {"Name": Val(_JOURNAL, journal), "LabelSet": label_set, "Labels": label_set.v["Labels"]}
    return Val(_ROOT, {"Spool": Val(_SPOOL, spool), "JournalSpec": Val(_JOURNAL_SPEC, spec), **spec})


def _go_time(unix_seconds: float | None) -> GoTime:
    if unix_seconds is None:
        return ZERO_TIME
    micros = round(unix_seconds * 1_000_000)  # what a float of unix seconds holds
    sec, us = divmod(micros, 1_000_000)
    return GoTime(sec, us * 1000)


# ---- the public functions ------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _parse(template: str) -> gotemplate.Template:
    try:
        return gotemplate.parse(template, functools.partial(check_former_syntax, template))
    except TemplateError as exc:
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


def _render(template: str, data: Val) -> str:
    parsed = _parse(template)
    try:
        rendered = gotemplate.execute(parsed, data)
    except TemplateError as exc:
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
    _render(template, _data(journal, 0, 0, ZERO_TIME, LabelSet(), LabelSet(), 0))
