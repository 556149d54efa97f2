"""Shardspace: gazctl's YAML form of a set of shards (Gazette's consumer/shardspace).

A document is `common:` (a partial ShardSpec) and `shards:` (entries: a partial ShardSpec with its
`id`, plus `comment`, `delete` and `revision`), with gazctl's field names (`ShardSpec.to_dict`).
Loading pushes `common` down as Gazette's UnionShardSpecs does: an entry's zero-valued fields (absent,
null, 0, "", false, [], "0s") take common's value, and labels are united per label name, the
entry's values winning. (gazctl refuses a name both give different values, as a shard's labels are
single-valued; gazette-py lets the entry override, as it does for journals.) Dumping hoists as
Gazette's Hoist does: a field (per label name, for labels) equal in every shard moves to `common`,
and zero-valued fields are left out, so `gazctl shards apply` reads what `dump` writes and the other
way round. Durations are written as Go duration text ("1s"); numbers read as seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import yaml

from gazette.consumer.spec import DICT_FIELDS, ShardSpec
from gazette.protocol.durations import format_duration, parse_duration
from gazette.protocol.errors import ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.spec import _as_labels

if TYPE_CHECKING:
    from gazette.consumer.client import ShardChange

SPEC_FIELDS = tuple(f for f in DICT_FIELDS if f != "id")  # what `common` may set
ENTRY_KEYS = ("comment", "delete", "revision")  # an entry's keys beside its spec's
DURATION_FIELDS = ("max_txn_duration", "min_txn_duration")


def _fields(data: Any, where: str) -> dict[str, Any]:
    """The non-zero spec fields of a shardspace map (labels as a LabelSet, durations in seconds)."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"{where} is a {type(data).__name__}, expected a map of ShardSpec fields")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in SPEC_FIELDS:
            raise ValidationError(
                f'{where} has unknown field "{key}" (known: {", ".join(SPEC_FIELDS)})'
                if key != "id"
                else f'{where} may not set "id" (it belongs to each shard)'
            )
        if value is None:
            continue
        try:
            if key == "labels":
                value = _as_labels(value)
            elif key in DURATION_FIELDS:
                value = parse_duration(value, what=key)
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc.message}") from None
        if value:  # zero-valued fields are unset
            out[key] = value
    return out


def load_shardspace(text: str) -> list[ShardChange]:
    """Parses shardspace YAML into ShardChanges, in entry order; every error names the entry and rule."""
    from gazette.consumer.client import ShardChange

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"shard specs are not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict) or set(doc) - {"common", "shards"}:
        raise ValidationError(
            'shard specs must be a map with "shards" (a list) and optionally "common" (a map)'
        )
    raw_common = doc.get("common") or {}
    if isinstance(raw_common, Mapping):
        for key in ENTRY_KEYS:
            if key in raw_common:
                raise ValidationError(f'"common" may not set "{key}" (it belongs to each shard)')
    common = _fields(raw_common, '"common"')
    entries = doc.get("shards") or []
    if not isinstance(entries, list):
        raise ValidationError(f'"shards" is a {type(entries).__name__}, expected a list')
    changes = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ValidationError(f"shards[{i}] is not a map with an id")
        shard_id = entry["id"]
        rest = {k: v for k, v in entry.items() if k not in ("id", *ENTRY_KEYS)}
        fields = {**common, **_fields(rest, f'shard "{shard_id}"')}
        if "labels" in common and "labels" in fields:
            fields["labels"] = fields["labels"].union(common["labels"])
        revision = entry.get("revision") or 0
        delete = entry.get("delete") or False
        comment = entry.get("comment")
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < -1:
            raise ValidationError(
                f'shard "{shard_id}" has revision {revision!r} (expected -1, 0 or a revision)'
            )
        if not isinstance(delete, bool):
            raise ValidationError(f'shard "{shard_id}" has delete {delete!r} (expected true or false)')
        if comment is not None and not isinstance(comment, str):
            raise ValidationError(f'shard "{shard_id}" has comment {comment!r} (expected text)')
        if delete:
            changes.append(ShardChange(delete=shard_id, expect_mod_revision=revision or -1))
        else:
            spec = ShardSpec(shard_id, fields.pop("sources", ()), **fields)
            changes.append(ShardChange(upsert=spec, expect_mod_revision=revision))
    return changes


def _spec_fields(spec: ShardSpec) -> dict[str, Any]:
    return {f: getattr(spec, f) for f in SPEC_FIELDS}


def _render(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Non-zero fields in gazctl's YAML form, in Gazette's field order."""
    out: dict[str, Any] = {}
    for key in SPEC_FIELDS:
        value = fields.get(key)
        if not value:
            continue
        if key == "sources":
            value = [
                {"journal": s.journal, **({"min_offset": s.min_offset} if s.min_offset else {})}
                for s in value
            ]
        elif key in DURATION_FIELDS:
            value = format_duration(value)
        elif key == "labels":
            value = [{"name": n, "value": v} for n, v in value]
        out[key] = value
    return out


def _zero(key: str) -> Any:
    return LabelSet() if key == "labels" else ()


def dump_shardspace(shards: Iterable[tuple[ShardSpec, int]]) -> str:
    """(spec, mod revision) pairs as hoisted shardspace YAML, shards in the given order."""
    listed = [(spec, _spec_fields(spec), revision) for spec, revision in shards]
    common: dict[str, Any] = {}
    if listed:
        for key in SPEC_FIELDS:
            values = [fields[key] for _, fields, _ in listed]
            if key == "labels":
                common[key] = functools.reduce(LabelSet.intersect, values)
            elif all(v == values[0] for v in values):
                common[key] = values[0]
    entries = []
    for spec, fields, revision in listed:
        own = {k: v for k, v in fields.items() if k == "labels" or v != common.get(k, _zero(k))}
        own["labels"] = fields["labels"].subtract(common.get("labels", LabelSet()))
        entries.append({"id": spec.id, **_render(own), **({"revision": revision} if revision else {})})
    return yaml.safe_dump({"common": _render(common), "shards": entries}, sort_keys=False)
