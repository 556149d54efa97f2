"""Naming and token rules (docs/semantics.md#names-labels-and-selectors): journal names, label names and
values, zones, suffixes, shard ids.

Every check raises a ValidationError naming the input and the broken rule. Alphabets exclude every
character <= '#' (the allocator key separator), so etcd key order equals entity order.
"""

from __future__ import annotations

import re
import unicodedata

from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet

TOKEN_SYMBOLS = "-_+/."
PATH_SYMBOLS = TOKEN_SYMBOLS + "=%"

JOURNAL_NAME_LEN = (4, 512)
JOURNAL_META_LEN = (1, 512)
LABEL_NAME_LEN = (2, 64)
LABEL_VALUE_LEN = (0, 1024)
ZONE_LEN = (1, 32)
SUFFIX_LEN = (4, 128)
SHARD_ID_LEN = (4, 512)

# Well-known labels (Gazette's labels/labels.go).
CONTENT_TYPE = "content-type"
MESSAGE_TYPE = "app.gazette.dev/message-type"
MESSAGE_SUBTYPE = "app.gazette.dev/message-subtype"
MANAGED_BY = "app.gazette.dev/managed-by"
INSTANCE = "app.gazette.dev/instance"
REGION = "app.gazette.dev/region"
TAG = "app.gazette.dev/tag"
SINGLE_VALUED_LABELS = frozenset({CONTENT_TYPE, MESSAGE_TYPE, MESSAGE_SUBTYPE, MANAGED_BY, INSTANCE, REGION})

CONTENT_TYPE_CSV = "text/csv"
CONTENT_TYPE_JSON_LINES = "application/x-ndjson"
CONTENT_TYPE_PROTOBUF_FIXED = "application/x-protobuf-fixed"
CONTENT_TYPE_RECOVERY_LOG = "application/x-gazette-recoverylog"

JOURNAL_RESERVED_LABELS = frozenset({"name", "prefix"})
SHARD_RESERVED_LABELS = frozenset({"id"})


def _describe(symbols: str) -> str:
    return "Unicode letters and digits and " + " ".join(symbols)


def is_token_char(c: str, symbols: str = TOKEN_SYMBOLS) -> bool:
    """Unicode letter or number (Go's unicode.IsLetter / IsNumber, as Gazette checks) or one of `symbols`."""
    return c in symbols or unicodedata.category(c)[0] in "LN"


def _check_alphabet(what: str, value: str, symbols: str, bounds: tuple[int, int]) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{what} {value!r} is not a string")
    lo, hi = bounds
    n = len(value)
    if n < lo:
        raise ValidationError(f'{what} "{value}" is too short ({lo}..{hi} characters)')
    if n > hi:
        shown = value if n <= 80 else value[:77] + "..."
        raise ValidationError(f'{what} "{shown}" is too long ({n} characters; expected {lo}..{hi})')
    for i, c in enumerate(value):
        if not is_token_char(c, symbols):
            raise ValidationError(
                f'{what} "{value}" has invalid character {c!r} at position {i} (allowed: {_describe(symbols)})'
            )


def clean_path(p: str) -> str:
    """Go's path.Clean: the shortest equivalent of a slash-separated path."""
    if p == "":
        return "."
    rooted = p.startswith("/")
    parts: list[str] = []
    for seg in p.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
        else:
            parts.append(seg)
    out = "/".join(parts)
    if rooted:
        return "/" + out
    return out or "."


def validate_path_component(what: str, value: str, bounds: tuple[int, int]) -> None:
    """The path alphabet within `bounds`, equal to its path.Clean form, not starting with `/`."""
    _check_alphabet(what, value, PATH_SYMBOLS, bounds)
    if value == "":
        return
    cleaned = clean_path(value)
    if cleaned != value:
        raise ValidationError(f'{what} "{value}" is not clean (expected "{cleaned}")')
    if value.startswith("/"):
        raise ValidationError(f'{what} "{value}" must not begin with "/"')


def split_journal_meta(name: str) -> tuple[str, str]:
    """Splits `journal;meta` at the first `;` into (journal, meta); meta is "" when there is none."""
    journal, sep, meta = name.partition(";")
    return journal, meta


def validate_journal_name(name: str, *, allow_meta: bool = False) -> None:
    """Journal name rules (docs/semantics.md#names-labels-and-selectors); a `;meta` suffix is accepted only
    with `allow_meta` (requests)."""
    if not isinstance(name, str):
        raise ValidationError(f"journal name {name!r} is not a string")
    journal, sep, meta = name.partition(";")
    if sep and not allow_meta:
        raise ValidationError(
            f'journal name "{name}" has a metadata suffix ";{meta}", which is allowed only in requests'
        )
    validate_path_component("journal name", journal, JOURNAL_NAME_LEN)
    if sep:
        validate_path_component(f'metadata suffix of journal name "{name}"', meta, JOURNAL_META_LEN)


def validate_label_name(name: str) -> None:
    _check_alphabet("label name", name, TOKEN_SYMBOLS, LABEL_NAME_LEN)


def validate_label_value(value: str, *, name: str | None = None) -> None:
    what = "label value" if name is None else f'value of label "{name}"'
    _check_alphabet(what, value, PATH_SYMBOLS, LABEL_VALUE_LEN)


def validate_zone(zone: str) -> None:
    _check_alphabet("zone", zone, TOKEN_SYMBOLS, ZONE_LEN)


def validate_suffix(suffix: str) -> None:
    _check_alphabet("process suffix", suffix, TOKEN_SYMBOLS, SUFFIX_LEN)


def validate_shard_id(shard_id: str) -> None:
    _check_alphabet("shard id", shard_id, TOKEN_SYMBOLS, SHARD_ID_LEN)


# RFC 2045 token: any printable ASCII except space and tspecials.
_MIME_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_MIME_RE = re.compile(
    rf"^\s*({_MIME_TOKEN})/({_MIME_TOKEN})\s*"
    rf'((?:;\s*{_MIME_TOKEN}\s*=\s*(?:{_MIME_TOKEN}|"(?:[^"\\]|\\.)*")\s*)*);?\s*$'
)


def validate_media_type(value: str) -> None:
    """`type/subtype` with optional `; param=value` parameters (RFC 2045, as Go's mime.ParseMediaType)."""
    if not _MIME_RE.match(value):
        raise ValidationError(
            f'label "{CONTENT_TYPE}" value "{value}" is not a MIME type (expected type/subtype[; param=value])'
        )


def validate_labels(labels: LabelSet, reserved: set[str] | frozenset[str] = frozenset()) -> None:
    """Every label well-formed, none reserved, well-known labels single-valued and consistent (1.1)."""
    previous: tuple[str, str] | None = None
    for name, value in labels:
        validate_label_name(name)
        validate_label_value(value, name=name)
        if name in reserved:
            raise ValidationError(f'label "{name}" is reserved (not allowed: {", ".join(sorted(reserved))})')
        if previous is not None and previous[0] == name:
            if name in SINGLE_VALUED_LABELS:
                raise ValidationError(
                    f'label "{name}" must have a single value (has "{previous[1]}" and "{value}")'
                )
            if previous[1] == "":
                raise ValidationError(f'label "{name}" has both an empty and a non-empty value ("{value}")')
        previous = (name, value)

    content_type = labels.value_of(CONTENT_TYPE)
    if content_type is not None:
        validate_media_type(content_type)
    if labels.value_of(MESSAGE_TYPE) is not None and content_type is None:
        raise ValidationError(f'label "{MESSAGE_TYPE}" requires a "{CONTENT_TYPE}" label')
    if labels.value_of(MESSAGE_SUBTYPE) is not None and labels.value_of(MESSAGE_TYPE) is None:
        raise ValidationError(f'label "{MESSAGE_SUBTYPE}" requires a "{MESSAGE_TYPE}" label')
