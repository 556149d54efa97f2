"""ShardSpec: what a shard reads and how its transactions are timed (reference 7.2).

Specs are validated on construction (every error names the field and the rule) and stored as JSON
objects under `<consumer root>/items/<shard id>`; `to_json`/`from_json` are exact inverses. Recovery-log
fields are accepted and validated but not used yet (no recovery logs in this round of issue 5).
"""

from __future__ import annotations

import dataclasses
import datetime
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from gazette.protocol.durations import format_duration, parse_duration
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.validate import (
    SHARD_RESERVED_LABELS,
    validate_journal_name,
    validate_labels,
    validate_shard_id,
)

RING_BUFFER_SIZE_DEFAULT = 8192  # envelopes (reference 7.2: 0 means this)
READ_CHANNEL_SIZE_DEFAULT = 8192  # envelopes buffered between decoding and the transaction loop
MAX_HOT_STANDBYS_DEFAULT = 3  # --consumer.max-hot-standbys

DurationLike = str | float | int | datetime.timedelta


class ShardSpecError(ValidationError):
    """A ShardSpec (or its stored JSON) breaks a rule; the message names the shard and the field."""


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A journal the shard reads, from `min_offset` at the earliest."""

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
        src = Source(value["journal"], value.get("min_offset", 0))
    else:
        raise ShardSpecError(
            f'shard "{shard}" sources[{i}] {value!r} is not a journal name, a Source or a '
            '{"journal": ..., "min_offset": ...} mapping'
        )
    try:
        validate_journal_name(src.journal)
    except ValidationError as exc:
        raise ShardSpecError(f'shard "{shard}" sources[{i}]: {exc}') from None
    if isinstance(src.min_offset, bool) or not isinstance(src.min_offset, int) or src.min_offset < 0:
        raise ShardSpecError(
            f'shard "{shard}" source "{src.journal}" has min_offset {src.min_offset!r} (expected an integer >= 0)'
        )
    return src


def _count(shard: str, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ShardSpecError(f'shard "{shard}" has {field} {value!r} (expected an integer >= 0)')
    return value


@dataclasses.dataclass(frozen=True, init=False)
class ShardSpec:
    """A shard of a consumer application (reference 7.2); validated on construction.

    `sources` take journal names, `Source`s or `{"journal", "min_offset"}` mappings and are kept sorted
    by journal. Durations take seconds or strings like "1s", "250ms". Desired replication is
    `1 + hot_standbys` (0 when `disable`).
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
        labels: LabelSet | Mapping[str, str] | None = None,
        recovery_log_prefix: str = "",
        hint_prefix: str = "",
        hint_backups: int = 0,
    ) -> None:
        try:
            validate_shard_id(id)
        except ValidationError as exc:
            raise ShardSpecError(str(exc)) from None
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
        for name, flag in (("disable", disable), ("disable_wait_for_ack", disable_wait_for_ack)):
            if not isinstance(flag, bool):
                raise ShardSpecError(f'shard "{id}" has {name} {flag!r} (expected true or false)')
        label_set = LabelSet(labels)
        try:
            validate_labels(label_set, reserved=SHARD_RESERVED_LABELS)
        except ValidationError as exc:
            raise ShardSpecError(f'shard "{id}" labels: {exc}') from None
        if recovery_log_prefix:
            try:
                validate_journal_name(recovery_log_prefix)
            except ValidationError as exc:
                raise ShardSpecError(f'shard "{id}" recovery_log_prefix: {exc}') from None
            if not hint_prefix:
                raise ShardSpecError(f'shard "{id}" has a recovery_log_prefix, so it needs a hint_prefix')
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
        set_(
            self,
            "ring_buffer_size",
            _count(id, "ring_buffer_size", ring_buffer_size) or RING_BUFFER_SIZE_DEFAULT,
        )
        set_(
            self,
            "read_channel_size",
            _count(id, "read_channel_size", read_channel_size) or READ_CHANNEL_SIZE_DEFAULT,
        )
        set_(self, "labels", label_set)
        set_(self, "recovery_log_prefix", recovery_log_prefix)
        set_(self, "hint_prefix", hint_prefix)
        set_(self, "hint_backups", _count(id, "hint_backups", hint_backups))

    # ---- derived

    def desired_replication(self, max_hot_standbys: int = MAX_HOT_STANDBYS_DEFAULT) -> int:
        """`1 + hot_standbys` (standbys capped at `max_hot_standbys`), or 0 when disabled (reference 5.1)."""
        return 0 if self.disable else 1 + min(self.hot_standbys, max_hot_standbys)

    def source(self, journal: str) -> Source | None:
        return next((s for s in self.sources if s.journal == journal), None)

    # ---- stored form

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sources": [{"journal": s.journal, "min_offset": s.min_offset} for s in self.sources],
            "max_txn_duration": format_duration(self.max_txn_duration),
            "min_txn_duration": format_duration(self.min_txn_duration),
            "hot_standbys": self.hot_standbys,
            "disable": self.disable,
            "disable_wait_for_ack": self.disable_wait_for_ack,
            "ring_buffer_size": self.ring_buffer_size,
            "read_channel_size": self.read_channel_size,
            "labels": [[n, v] for n, v in self.labels],
            "recovery_log_prefix": self.recovery_log_prefix,
            "hint_prefix": self.hint_prefix,
            "hint_backups": self.hint_backups,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShardSpec:
        if not isinstance(data, Mapping):
            raise ShardSpecError(f"a shard spec is a {type(data).__name__}, expected an object")
        fields = dict(data)
        shard_id = fields.pop("id", None)
        if shard_id is None:
            raise ShardSpecError(f"shard spec {dict(data)!r} has no id")
        known = {f.name for f in dataclasses.fields(cls)} - {"id"}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ShardSpecError(f'shard "{shard_id}" spec has unknown field(s) {unknown}')
        labels = fields.pop("labels", None)
        if labels is not None and not isinstance(labels, Mapping):
            try:
                labels = LabelSet((str(n), str(v)) for n, v in labels)
            except (TypeError, ValueError):
                raise ShardSpecError(
                    f'shard "{shard_id}" labels {labels!r} is not a mapping or a list of [name, value] pairs'
                ) from None
        return cls(shard_id, fields.pop("sources", ()), labels=labels, **fields)

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes | str) -> ShardSpec:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ShardSpecError(f"stored shard spec is not JSON: {exc}") from None
        return cls.from_dict(data)
