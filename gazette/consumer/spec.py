"""ShardSpec: what a shard reads and how its transactions are timed (docs/semantics.md#shard-specs).

Specs are validated on construction, by the rules of Gazette's ShardSpec.Validate (every error names
the shard, the field and the rule), and one more: min_txn_duration may not exceed max_txn_duration
(Gazette would let max cut min short). They are stored in etcd under `<consumer root>/items/<shard id>`
as Gazette's `consumer.ShardSpec` protobuf (`to_bytes`), the value Gazette's consumers and gazctl
read and write there, and travel in the Shard service as that message: `to_proto`/`from_proto`
convert field for field, exactly (ring_buffer_size and read_channel_size keep 0, which means "the
default" as in Gazette; durations are whole nanoseconds). `from_bytes` also reads the JSON objects
gazette-py stored before it spoke Gazette's protocol (they begin with "{", which no marshaled
ShardSpec does), so a consumer root written by an older gazette-py keeps working; nothing writes
JSON any more.

`to_dict`/`from_dict` are the YAML/JSON form with gazctl's field names (a shardspace entry):
labels as `[{name, value}]` (a name-to-value mapping is accepted too), sources as journal names or
`{journal, min_offset}`, journal names with a `;meta` suffix allowed, durations as "1s" or seconds.
"""

from __future__ import annotations

import dataclasses
import datetime
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from google.protobuf.message import DecodeError

from gazette.protocol import shard_pb2
from gazette.protocol.durations import NS_PER_S, format_duration, parse_duration
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.spec import _as_labels
from gazette.protocol.validate import (
    SHARD_RESERVED_LABELS,
    validate_journal_name,
    validate_labels,
    validate_shard_id,
)

RING_BUFFER_SIZE_DEFAULT = 8192  # envelopes (0 means this: docs/semantics.md#shard-specs)
READ_CHANNEL_SIZE_DEFAULT = 8192  # envelopes buffered between decoding and the transaction loop
MAX_HOT_STANDBYS_DEFAULT = 3  # --consumer.max-hot-standbys
UINT32_MAX = 2**32 - 1  # hot_standbys, ring_buffer_size, read_channel_size are uint32 on the wire
INT32_MAX = 2**31 - 1  # hint_backups is an int32
MAX_DURATION_NS = 2**63 - 1  # a Go time.Duration

DurationLike = str | float | int | datetime.timedelta

# The field names of a shardspace entry (gazctl's YAML), in Gazette's order.
DICT_FIELDS = (
    "id", "sources", "recovery_log_prefix", "hint_prefix", "hint_backups", "max_txn_duration",
    "min_txn_duration", "disable", "hot_standbys", "labels", "disable_wait_for_ack", "ring_buffer_size",
    "read_channel_size",
)  # fmt: skip


class ShardSpecError(ValidationError):
    """A ShardSpec (or its stored form) breaks a rule; the message names the shard and the field."""


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A journal the shard reads, from `min_offset` at the earliest. The name may carry a `;meta`
    suffix (Gazette's journal metadata): the shard then reads the journal under that name, and its
    checkpoint keeps offsets by it."""

    journal: str
    min_offset: int = 0


def _source(value: Any, shard: str, i: int) -> Source:
    if isinstance(value, Source):
        src = value
    elif isinstance(value, str):
        src = Source(value)
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"journal", "min_offset"})
        if unknown or "journal" not in value:
            raise ShardSpecError(
                f'shard "{shard}" sources[{i}] {dict(value)!r} must have key "journal" and optionally '
                f'"min_offset" (unknown keys: {unknown})'
            )
        src = Source(value["journal"], value.get("min_offset") or 0)
    else:
        raise ShardSpecError(
            f'shard "{shard}" sources[{i}] {value!r} is not a journal name, a Source or a '
            '{"journal": ..., "min_offset": ...} mapping'
        )
    try:
        validate_journal_name(src.journal, allow_meta=True)
    except ValidationError as exc:
        raise ShardSpecError(f'shard "{shard}" sources[{i}]: {exc}') from None
    if isinstance(src.min_offset, bool) or not isinstance(src.min_offset, int) or src.min_offset < 0:
        raise ShardSpecError(
            f'shard "{shard}" source "{src.journal}" has min_offset {src.min_offset!r} (expected an integer >= 0)'
        )
    return src


def _count(shard: str, field: str, value: Any, maximum: int = UINT32_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ShardSpecError(
            f'shard "{shard}" has {field} {value!r} (expected an integer from 0 to {maximum})'
        )
    return value


def _nanoseconds(seconds: float) -> int:
    return round(seconds * NS_PER_S)


@dataclasses.dataclass(frozen=True, init=False)
class ShardSpec:
    """A shard of a consumer application (docs/semantics.md#shard-specs); validated on construction.

    `sources` take journal names, `Source`s or `{"journal", "min_offset"}` mappings and are kept sorted
    by journal. Durations take seconds or strings like "1s", "250ms". Desired replication is
    `1 + hot_standbys` (0 when `disable`). `ring_buffer_size` and `read_channel_size` are kept as
    given, 0 meaning the default (`effective_ring_buffer_size` and `effective_read_channel_size` are
    what the shard uses).
    """

    id: str
    sources: tuple[Source, ...]
    max_txn_duration: float
    min_txn_duration: float
    hot_standbys: int
    disable: bool
    disable_wait_for_ack: bool
    ring_buffer_size: int
    read_channel_size: int
    labels: LabelSet
    recovery_log_prefix: str
    hint_prefix: str
    hint_backups: int

    def __init__(
        self,
        id: str,
        sources: Iterable[str | Source | Mapping[str, Any]] = (),
        *,
        max_txn_duration: DurationLike = 1.0,
        min_txn_duration: DurationLike = 0.0,
        hot_standbys: int = 0,
        disable: bool = False,
        disable_wait_for_ack: bool = False,
        ring_buffer_size: int = 0,
        read_channel_size: int = 0,
        labels: LabelSet | Mapping[str, str] | Iterable[Any] | None = None,
        recovery_log_prefix: str = "",
        hint_prefix: str = "",
        hint_backups: int = 0,
    ) -> None:
        try:
            validate_shard_id(id)
        except ValidationError as exc:
            raise ShardSpecError(str(exc)) from None
        if sources is None:
            sources = ()
        if isinstance(sources, str | bytes) or not isinstance(sources, Iterable):
            raise ShardSpecError(f'shard "{id}" sources {sources!r} is not a list of journals')
        srcs = sorted((_source(s, id, i) for i, s in enumerate(sources)), key=lambda s: s.journal)
        for a, b in zip(srcs, srcs[1:], strict=False):
            if a.journal == b.journal:
                raise ShardSpecError(f'shard "{id}" lists source journal "{a.journal}" twice')
        try:
            max_txn = parse_duration(max_txn_duration, what=f'shard "{id}" max_txn_duration')
            min_txn = parse_duration(min_txn_duration, what=f'shard "{id}" min_txn_duration')
        except ValidationError as exc:
            raise ShardSpecError(str(exc)) from None
        if max_txn <= 0:
            raise ShardSpecError(
                f'shard "{id}" has max_txn_duration {max_txn_duration!r} (expected > 0, e.g. "1s")'
            )
        if min_txn < 0:
            raise ShardSpecError(f'shard "{id}" has min_txn_duration {min_txn_duration!r} (expected >= 0)')
        if min_txn > max_txn:
            raise ShardSpecError(
                f'shard "{id}" has min_txn_duration {min_txn_duration!r} above max_txn_duration {max_txn_duration!r}'
            )
        if _nanoseconds(max_txn) > MAX_DURATION_NS:
            raise ShardSpecError(f'shard "{id}" has max_txn_duration {max_txn_duration!r} (too long)')
        for name, flag in (("disable", disable), ("disable_wait_for_ack", disable_wait_for_ack)):
            if not isinstance(flag, bool):
                raise ShardSpecError(f'shard "{id}" has {name} {flag!r} (expected true or false)')
        try:
            label_set = _as_labels(labels)
            validate_labels(label_set, reserved=SHARD_RESERVED_LABELS)
        except ValidationError as exc:
            raise ShardSpecError(f'shard "{id}" labels: {exc}') from None
        names = [n for n, _ in label_set]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:  # Gazette's ValidateSingleValueLabels
            raise ShardSpecError(
                f'shard "{id}" labels: label "{repeated[0]}" has more than one value '
                f"({', '.join(label_set.values_of(repeated[0]))}); a shard's labels are single-valued"
            )
        for name, text in (("recovery_log_prefix", recovery_log_prefix), ("hint_prefix", hint_prefix)):
            if not isinstance(text, str):
                raise ShardSpecError(f'shard "{id}" has {name} {text!r} (expected a string)')
        if recovery_log_prefix:
            try:
                validate_journal_name(f"{recovery_log_prefix}/{id}")
            except ValidationError as exc:
                raise ShardSpecError(f'shard "{id}" recovery_log_prefix: {exc}') from None
            if not hint_prefix:
                raise ShardSpecError(f'shard "{id}" has a recovery_log_prefix, so it needs a hint_prefix')
        elif hint_prefix:
            raise ShardSpecError(
                f'shard "{id}" has hint_prefix "{hint_prefix}" but no recovery_log_prefix (hints '
                "describe a recovery log: set both, or neither)"
            )
        if hint_prefix and (
            not hint_prefix.startswith("/")
            or hint_prefix.endswith("/")
            or posixpath.normpath(hint_prefix) != hint_prefix
        ):
            raise ShardSpecError(
                f'shard "{id}" hint_prefix "{hint_prefix}" is not a clean absolute path without a trailing "/"'
            )
        set_ = object.__setattr__
        set_(self, "id", id)
        set_(self, "sources", tuple(srcs))
        set_(self, "max_txn_duration", max_txn)
        set_(self, "min_txn_duration", min_txn)
        set_(self, "hot_standbys", _count(id, "hot_standbys", hot_standbys))
        set_(self, "disable", disable)
        set_(self, "disable_wait_for_ack", disable_wait_for_ack)
        set_(self, "ring_buffer_size", _count(id, "ring_buffer_size", ring_buffer_size))
        set_(self, "read_channel_size", _count(id, "read_channel_size", read_channel_size))
        set_(self, "labels", label_set)
        set_(self, "recovery_log_prefix", recovery_log_prefix)
        set_(self, "hint_prefix", hint_prefix)
        set_(self, "hint_backups", _count(id, "hint_backups", hint_backups, INT32_MAX))

    # ---- derived

    def desired_replication(self, max_hot_standbys: int = MAX_HOT_STANDBYS_DEFAULT) -> int:
        """`1 + hot_standbys` (standbys capped at `max_hot_standbys`), or 0 when disabled
        (docs/semantics.md#allocation-goals)."""
        return 0 if self.disable else 1 + min(self.hot_standbys, max_hot_standbys)

    @property
    def effective_ring_buffer_size(self) -> int:
        """The sequencer ring's size: `ring_buffer_size`, or the default for 0."""
        return self.ring_buffer_size or RING_BUFFER_SIZE_DEFAULT

    @property
    def effective_read_channel_size(self) -> int:
        """The most envelopes the shard's source readers buffer ahead of its transaction loop (its read
        channel, gazette/consumer/read_channel.py): `read_channel_size`, or the default for 0."""
        return self.read_channel_size or READ_CHANNEL_SIZE_DEFAULT

    @property
    def recovery_log(self) -> str:
        """The journal the shard records its store to (`<recovery_log_prefix>/<id>`), or ""."""
        return f"{self.recovery_log_prefix}/{self.id}" if self.recovery_log_prefix else ""

    def source(self, journal: str) -> Source | None:
        return next((s for s in self.sources if s.journal == journal), None)

    # ---- Gazette's consumer.ShardSpec: the wire and the stored form

    def to_proto(self) -> shard_pb2.ShardSpec:
        msg = shard_pb2.ShardSpec(
            id=self.id,
            sources=[
                shard_pb2.ShardSpec.Source(journal=s.journal, min_offset=s.min_offset) for s in self.sources
            ],
            recovery_log_prefix=self.recovery_log_prefix,
            hint_prefix=self.hint_prefix,
            hint_backups=self.hint_backups,
            disable=self.disable,
            hot_standbys=self.hot_standbys,
            labels=self.labels.to_proto(),
            disable_wait_for_ack=self.disable_wait_for_ack,
            ring_buffer_size=self.ring_buffer_size,
            read_channel_size=self.read_channel_size,
        )
        msg.max_txn_duration.FromNanoseconds(_nanoseconds(self.max_txn_duration))
        msg.min_txn_duration.FromNanoseconds(_nanoseconds(self.min_txn_duration))
        return msg

    @classmethod
    def from_proto(cls, msg: shard_pb2.ShardSpec) -> ShardSpec:
        """The ShardSpec of a consumer.ShardSpec message; ShardSpecError if it breaks a rule."""
        return cls(
            msg.id,
            [Source(s.journal, s.min_offset) for s in msg.sources],
            max_txn_duration=msg.max_txn_duration.ToNanoseconds() / NS_PER_S,
            min_txn_duration=msg.min_txn_duration.ToNanoseconds() / NS_PER_S,
            hot_standbys=msg.hot_standbys,
            disable=msg.disable,
            disable_wait_for_ack=msg.disable_wait_for_ack,
            ring_buffer_size=msg.ring_buffer_size,
            read_channel_size=msg.read_channel_size,
            labels=LabelSet.from_proto(msg.labels),
            recovery_log_prefix=msg.recovery_log_prefix,
            hint_prefix=msg.hint_prefix,
            hint_backups=msg.hint_backups,
        )

    def to_bytes(self) -> bytes:
        """The marshaled consumer.ShardSpec: what `<root>/items/<id>` holds."""
        return self.to_proto().SerializeToString(deterministic=True)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "stored shard spec") -> ShardSpec:
        """Reads a stored value: a marshaled consumer.ShardSpec, or (written by gazette-py before it
        stored protobuf) a JSON object, told apart by its first byte "{"."""
        raw = bytes(raw)
        if raw[:1] == b"{":
            return cls.from_json(raw)
        try:
            msg = shard_pb2.ShardSpec.FromString(raw)
        except DecodeError as exc:
            raise ShardSpecError(
                f"{where} ({len(raw)} bytes, beginning {raw[:16].hex() or '(empty)'}) is neither a "
                f"marshaled consumer.ShardSpec nor a JSON object: {exc}"
            ) from None
        return cls.from_proto(msg)

    # ---- the shardspace form (gazctl's YAML field names)

    def to_dict(self) -> dict[str, Any]:
        """Every field under gazctl's names, in Gazette's order; durations as Go duration text."""
        return {
            "id": self.id,
            "sources": [{"journal": s.journal, "min_offset": s.min_offset} for s in self.sources],
            "recovery_log_prefix": self.recovery_log_prefix,
            "hint_prefix": self.hint_prefix,
            "hint_backups": self.hint_backups,
            "max_txn_duration": format_duration(self.max_txn_duration),
            "min_txn_duration": format_duration(self.min_txn_duration),
            "disable": self.disable,
            "hot_standbys": self.hot_standbys,
            "labels": [{"name": n, "value": v} for n, v in self.labels],
            "disable_wait_for_ack": self.disable_wait_for_ack,
            "ring_buffer_size": self.ring_buffer_size,
            "read_channel_size": self.read_channel_size,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShardSpec:
        """A ShardSpec of a shardspace entry (or of `to_dict`); absent and null fields are zero."""
        if not isinstance(data, Mapping):
            raise ShardSpecError(f"a shard spec is a {type(data).__name__}, expected an object")
        fields = {k: v for k, v in data.items() if v is not None}
        shard_id = fields.pop("id", None)
        if shard_id is None:
            raise ShardSpecError(f"shard spec {dict(data)!r} has no id")
        if not isinstance(shard_id, str):
            raise ShardSpecError(f"shard spec id {shard_id!r} is not a string")
        unknown = sorted(set(fields) - set(DICT_FIELDS))
        if unknown:
            raise ShardSpecError(
                f'shard "{shard_id}" spec has unknown field(s) {unknown} (known: {", ".join(DICT_FIELDS)})'
            )
        return cls(shard_id, fields.pop("sources", ()), **fields)

    def to_json(self) -> bytes:
        """`to_dict` as JSON (for output; the stored form is `to_bytes`)."""
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes | str) -> ShardSpec:
        """Reads `to_json` output, and the JSON objects older gazette-py stored in etcd (labels as
        [name, value] pairs there)."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ShardSpecError(f"stored shard spec is not JSON: {exc}") from None
        return cls.from_dict(data)
