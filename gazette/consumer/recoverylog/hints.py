"""FSMHints: the log segments needed to rebuild a recorded directory, and where shards keep them in etcd.

Hints list each live file (fnode) with the segments of the log holding its operations, so playback
can skip the rest of the log (docs/semantics.md#recovery-logs). They are stored as JSON under
`<hint_prefix>/<shard id>.primary` (written by the primary) and `.backup.N` (hints verified by a
recovery, rotated newest first; docs/semantics.md#etcd-key-layout) with the field names Go's encoding/json
gives Gazette's FSMHints, as Gazette writes them. Readers accept that JSON and, as Gazette's do, the
marshaled recoverylog.FSMHints protobuf (`from_bytes`). `to_proto`/`from_proto` are the wire form of
the Shard service (GetHints, Apply's primary_hints). Properties are small files kept whole in the
hints (`{"path", "content"}`; Gazette's RocksDB stores record its "/IDENTITY" file so), written to
the directory when playback completes; the JSON has "properties" only when there are some.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import aetcd
import orjson
from aetcd import rpc
from google.protobuf.message import DecodeError

from gazette.consumer.recoverylog.ops import MAX_AUTHOR, RecoveryLogError
from gazette.keyspace.etcd import txn
from gazette.protocol import recoverylog_pb2


@dataclasses.dataclass(frozen=True, slots=True)
class Segment:
    """A run of consecutive operations of one author in one log: sequence numbers
    [first_seq_no, last_seq_no] at offsets [first_offset, last_offset) (last_offset 0: unknown),
    and the checksum the FSM expects at first_seq_no. `log` "" means the hints' log."""

    author: int
    first_seq_no: int
    first_offset: int
    first_checksum: int
    last_seq_no: int
    last_offset: int = 0
    log: str = ""

    def validate(self) -> None:
        problem = (
            "author is not in [1, 2**32 - 1]" if not 0 < self.author <= MAX_AUTHOR
            else "first_seq_no <= 0" if self.first_seq_no <= 0
            else "first_offset < 0" if self.first_offset < 0
            else "last_seq_no < first_seq_no" if self.last_seq_no < self.first_seq_no
            else "last_offset <= first_offset" if self.last_offset and self.last_offset <= self.first_offset
            else ""
        )  # fmt: skip
        if problem:
            raise RecoveryLogError(f"invalid segment {self}: {problem}")


class _NotReducible(Exception):
    pass


def _reduce(a: Segment, b: Segment) -> Segment:
    """The one segment covering overlapping or adjacent `a` and `b` (of one author and log); raises
    _NotReducible for disjoint ones and RecoveryLogError for an inconsistent pair."""
    if a.first_seq_no > b.first_seq_no or (
        a.first_seq_no == b.first_seq_no and a.last_seq_no < b.last_seq_no
    ):
        a, b = b, a
    same_log = a.log == b.log
    if a.first_seq_no < b.first_seq_no and same_log and a.first_offset > b.first_offset:
        raise RecoveryLogError(f"segments {a} and {b} do not have monotonic first offsets")
    if a.first_seq_no < b.first_seq_no and a.last_offset == 0 and b.last_offset != 0:
        raise RecoveryLogError(f"segment {a} precedes {b} but has no last offset")
    if same_log and (
        (a.last_seq_no <= b.last_seq_no and 0 < b.last_offset < a.last_offset)
        or (a.last_seq_no >= b.last_seq_no and 0 < a.last_offset < b.last_offset)
    ):
        raise RecoveryLogError(f"segments {a} and {b} do not have monotonic last offsets")
    if a.first_seq_no == b.first_seq_no and a.first_checksum != b.first_checksum:
        raise RecoveryLogError(f"segments {a} and {b} begin at one sequence number with different checksums")
    if a.last_seq_no + 1 < b.first_seq_no:
        raise _NotReducible
    if a.last_seq_no + 1 == b.first_seq_no and (a.author != b.author or not same_log):
        raise _NotReducible
    if a.author != b.author or not same_log:
        raise RecoveryLogError(f"overlapping segments {a} and {b} have different authors or logs")
    first_offset = max(a.first_offset, b.first_offset) if a.first_seq_no == b.first_seq_no else a.first_offset
    last_seq_no, last_offset = a.last_seq_no, a.last_offset
    if a.last_seq_no == b.last_seq_no and a.last_offset == 0:
        last_offset = b.last_offset
    if a.last_seq_no < b.last_seq_no:
        last_seq_no, last_offset = b.last_seq_no, b.last_offset
    return dataclasses.replace(a, first_offset=first_offset, last_seq_no=last_seq_no, last_offset=last_offset)


def add_segment(segments: list[Segment], segment: Segment) -> None:
    """Adds `segment` to an ordered, non-overlapping list, merging what it overlaps or adjoins."""
    segment.validate()
    begin = next((i for i, s in enumerate(segments) if s.first_seq_no >= segment.first_seq_no), len(segments))
    if begin > 0:
        try:
            segment, begin = _reduce(segments[begin - 1], segment), begin - 1
        except _NotReducible:
            pass
    end = begin
    while end < len(segments):
        try:
            segment = _reduce(segments[end], segment)
        except _NotReducible:
            break
        end += 1
    segments[begin:end] = [segment]


@dataclasses.dataclass(frozen=True, slots=True)
class FnodeSegments:
    """A live file (fnode = sequence number of its create) and the segments holding its operations."""

    fnode: int
    segments: tuple[Segment, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Property:
    """A small file kept in the FSM and its hints rather than as an fnode of the log: its recorded
    path ("/IDENTITY") and content."""

    path: str
    content: str


@dataclasses.dataclass(frozen=True, slots=True)
class FSMHints:
    """What a player needs to rebuild a recorder's directory from `log` (docs/semantics.md#recovery-logs)."""

    log: str
    live_nodes: tuple[FnodeSegments, ...] = ()
    properties: tuple[Property, ...] = ()

    def live_log_segments(self) -> tuple[list[int], list[Segment]]:
        """(hinted fnodes in order, the ordered and merged segments to read); validates the hints."""
        fnodes: list[int] = []
        segments: list[Segment] = []
        for node in self.live_nodes:
            if not node.segments or node.segments[0].first_seq_no != node.fnode:
                raise RecoveryLogError(
                    f"hints of {self.log!r}: fnode {node.fnode} does not begin with a segment at its create"
                )
            if fnodes and fnodes[-1] >= node.fnode:
                raise RecoveryLogError(f"hints of {self.log!r}: fnodes are not in increasing order")
            fnodes.append(node.fnode)
            for s in node.segments:
                if s.log not in ("", self.log):
                    raise RecoveryLogError(
                        f"hints of {self.log!r} name segments of another log {s.log!r} (unsupported)"
                    )
                add_segment(segments, dataclasses.replace(s, log=self.log))
        return fnodes, segments

    # ---- JSON (field names of Go's FSMHints; absent fields are zero)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "log": self.log,
            "live_nodes": [
                {"fnode": n.fnode, "segments": [_segment_dict(s) for s in n.segments]}
                for n in self.live_nodes
            ],
        }
        if self.properties:
            out["properties"] = [{"path": p.path, "content": p.content} for p in self.properties]
        return out

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "hints") -> FSMHints:
        if not isinstance(data, Mapping):
            raise RecoveryLogError(f"{where} is a JSON {type(data).__name__}, expected an object")
        log = data.get("log")
        if not isinstance(log, str) or not log:
            raise RecoveryLogError(f"{where} have log {log!r}, expected a journal name")
        nodes = []
        for i, node in enumerate(_list(data.get("live_nodes"), f"{where} live_nodes")):
            at = f"{where} live_nodes[{i}]"
            if not isinstance(node, Mapping):
                raise RecoveryLogError(f"{at} is {node!r}, expected an object")
            segments = tuple(
                _segment(s, f"{at} segments[{j}]")
                for j, s in enumerate(_list(node.get("segments"), f"{at} segments"))
            )
            nodes.append(FnodeSegments(_uint(node, "fnode", at), segments))
        properties = []
        for i, prop in enumerate(_list(data.get("properties"), f"{where} properties")):
            at = f"{where} properties[{i}]"
            if not isinstance(prop, Mapping):
                raise RecoveryLogError(f"{at} is {prop!r:.100}, expected an object")
            path, content = prop.get("path", ""), prop.get("content", "")
            if not isinstance(path, str) or not path or not isinstance(content, str):
                raise RecoveryLogError(f"{at} is {prop!r:.100}, expected a path and a string content")
            properties.append(Property(path, content))
        hints = cls(log, tuple(nodes), tuple(properties))
        hints.live_log_segments()
        return hints

    @classmethod
    def from_json(cls, raw: bytes, where: str = "hints") -> FSMHints:
        """Parses JSON hints (see `from_bytes` for stored values, which may be protobuf)."""
        if not raw.lstrip()[:1] == b"{":
            raise RecoveryLogError(f"{where} are not a JSON object (they begin {raw[:8]!r})")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RecoveryLogError(f"{where} are not valid JSON: {exc}") from None
        return cls.from_dict(data, where)

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "hints") -> FSMHints:
        """Parses a stored hints value as Gazette's readers do: JSON when its first byte is "{",
        otherwise a marshaled recoverylog.FSMHints."""
        raw = bytes(raw)
        if raw[:1] == b"{":
            return cls.from_json(raw, where)
        try:
            msg = recoverylog_pb2.FSMHints.FromString(raw)
        except DecodeError as exc:
            raise RecoveryLogError(
                f"{where} are neither JSON nor a marshaled recoverylog.FSMHints ({raw[:16].hex()}...): {exc}"
            ) from None
        return cls.from_proto(msg, where)

    # ---- recoverylog.FSMHints (the Shard service's wire form)

    def to_proto(self) -> recoverylog_pb2.FSMHints:
        return recoverylog_pb2.FSMHints(
            log=self.log,
            live_nodes=[
                recoverylog_pb2.FnodeSegments(
                    fnode=n.fnode,
                    segments=[recoverylog_pb2.Segment(**_segment_dict(s)) for s in n.segments],
                )
                for n in self.live_nodes
            ],
            properties=[recoverylog_pb2.Property(path=p.path, content=p.content) for p in self.properties],
        )

    @classmethod
    def from_proto(cls, msg: recoverylog_pb2.FSMHints, where: str = "hints") -> FSMHints:
        """Validated as `from_dict` validates JSON hints."""
        return cls.from_dict(_proto_dict(msg), where)


def _proto_dict(msg: recoverylog_pb2.FSMHints) -> dict[str, Any]:
    """FSMHints as the dict of its JSON form (field names are the same)."""
    return {
        "log": msg.log,
        "live_nodes": [
            {
                "fnode": n.fnode,
                "segments": [{f: getattr(s, f) for f in (*_SEGMENT_FIELDS, "log")} for s in n.segments],
            }
            for n in msg.live_nodes
        ],
        "properties": [{"path": p.path, "content": p.content} for p in msg.properties],
    }


_SEGMENT_FIELDS = ("author", "first_seq_no", "first_offset", "first_checksum", "last_seq_no", "last_offset")


def _segment_dict(s: Segment) -> dict[str, Any]:
    out: dict[str, Any] = {f: getattr(s, f) for f in _SEGMENT_FIELDS}
    if s.log:
        out["log"] = s.log
    return out


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecoveryLogError(f"{where} is {value!r:.100}, expected a list")
    return value


def _uint(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecoveryLogError(f"{where} has {key} {value!r}, expected an integer >= 0")
    return value


def _segment(data: Any, where: str) -> Segment:
    if not isinstance(data, Mapping):
        raise RecoveryLogError(f"{where} is {data!r:.100}, expected an object")
    log = data.get("log", "")
    if not isinstance(log, str):
        raise RecoveryLogError(f"{where} has log {log!r}, expected a string")
    segment = Segment(**{f: _uint(data, f, where) for f in _SEGMENT_FIELDS}, log=log)
    segment.validate()
    return segment


# ---- etcd keys of a shard's hints


def primary_hints_key(hint_prefix: str, shard_id: str) -> str:
    return f"{hint_prefix}/{shard_id}.primary"


def backup_hints_key(hint_prefix: str, shard_id: str, n: int) -> str:
    return f"{hint_prefix}/{shard_id}.backup.{n}"


@dataclasses.dataclass(frozen=True)
class ShardHints:
    """A shard's stored hints: the primary's and the backups (`.backup.0` newest), None where absent.
    Read from etcd (`fetch_hints`), also `raw` and `mod_revisions` by key (mod revision 0 for absent
    keys); fetched through the Shard service's GetHints (`ShardClient.get_hints`), those are empty."""

    primary: FSMHints | None
    backups: tuple[FSMHints | None, ...]
    raw: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    mod_revisions: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def pick(self) -> FSMHints | None:
        """The hints to play back: the primary's, else the newest backup, else None."""
        return next((h for h in (self.primary, *self.backups) if h is not None), None)


async def _read(etcd: aetcd.Client, keys: Iterable[str]) -> tuple[dict[str, bytes], dict[str, int]]:
    keys = list(keys)
    resp = await txn(
        etcd,
        rpc.TxnRequest(success=[rpc.RequestOp(request_range=rpc.RangeRequest(key=k.encode())) for k in keys]),
    )
    raw: dict[str, bytes] = {}
    revisions = dict.fromkeys(keys, 0)
    for r in resp.responses:
        for kv in r.response_range.kvs:
            raw[kv.key.decode()] = bytes(kv.value)
            revisions[kv.key.decode()] = int(kv.mod_revision)
    return raw, revisions


async def fetch_hints(etcd: aetcd.Client, hint_prefix: str, shard_id: str, hint_backups: int) -> ShardHints:
    """Reads the primary and `hint_backups` backup hints of a shard at one etcd revision."""
    primary_key = primary_hints_key(hint_prefix, shard_id)
    backup_keys = [backup_hints_key(hint_prefix, shard_id, n) for n in range(hint_backups)]
    raw, revisions = await _read(etcd, [primary_key, *backup_keys])

    def parse(key: str) -> FSMHints | None:
        value = raw.get(key)
        return None if not value else FSMHints.from_bytes(value, f'hints at etcd key "{key}"')

    return ShardHints(parse(primary_key), tuple(parse(k) for k in backup_keys), raw, revisions)


Guard = tuple[str, int]  # (etcd key, create revision) that must still hold for a hints write to apply


def _guard_compare(guard: Guard | None) -> list[rpc.Compare]:
    if guard is None:
        return []
    key, create_revision = guard
    return [
        rpc.Compare(
            key=key.encode(),
            result=rpc.Compare.EQUAL,
            target=rpc.Compare.CREATE,
            create_revision=create_revision,
        )
    ]


async def _txn(etcd: aetcd.Client, compares: list[rpc.Compare], ops: list[rpc.RequestOp]) -> bool:
    return bool((await txn(etcd, rpc.TxnRequest(compare=compares, success=ops))).succeeded)


def _put(key: str, value: bytes) -> rpc.RequestOp:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value))


async def store_primary_hints(
    etcd: aetcd.Client, hint_prefix: str, shard_id: str, hints: FSMHints, *, guard: Guard | None = None
) -> bool:
    """Writes the primary hints; False (nothing written) if `guard` no longer holds."""
    key = primary_hints_key(hint_prefix, shard_id)
    return await _txn(etcd, _guard_compare(guard), [_put(key, hints.to_json())])


async def rotate_backup_hints(
    etcd: aetcd.Client,
    hint_prefix: str,
    shard_id: str,
    hint_backups: int,
    hints: FSMHints,
    *,
    guard: Guard | None = None,
) -> bool:
    """Stores `hints` (verified by a recovery) as `.backup.0`, shifting older backups down one
    (the last one drops), in one transaction; False if `guard` or a backup changed meanwhile."""
    if hint_backups <= 0:
        return True
    keys = [backup_hints_key(hint_prefix, shard_id, n) for n in range(hint_backups)]
    raw, revisions = await _read(etcd, keys)
    compares = _guard_compare(guard) + [
        rpc.Compare(
            key=k.encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=revisions[k]
        )
        for k in keys
    ]
    ops = [_put(keys[0], hints.to_json())]
    ops += [_put(keys[n], raw[keys[n - 1]]) for n in range(1, hint_backups) if keys[n - 1] in raw]
    return await _txn(etcd, compares, ops)
