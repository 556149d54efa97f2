"""ShardSpec validation and its forms (Gazette's consumer.ShardSpec exactly, gazette-py's former JSON,
gazctl's shardspace dict); replica status reduction and forms; shard consistency (5.1)."""

from __future__ import annotations

import pytest

from gazette.allocator.state import Assignment
from gazette.consumer import ConsumerCheckpoint, ReplicaCode, ReplicaStatus, ShardSpec, ShardSpecError, Source
from gazette.consumer.allocation import (
    ConsumerSpec,
    consumer_spec_exiting,
    decode_value,
    shard_assignment_is_consistent,
)
from gazette.message.checkpoint import Checkpoint, ProducerState
from gazette.protocol import shard_pb2
from gazette.protocol.labels import LabelSet


def test_spec_defaults_sorting_and_round_trip() -> None:
    spec = ShardSpec(
        "count-000",
        ["b/journal", {"journal": "a/journal", "min_offset": 10}],
        max_txn_duration="250ms",
        hot_standbys=2,
        labels={"app.gazette.dev/tag": "x"},
    )
    assert spec.sources == (Source("a/journal", 10), Source("b/journal", 0))
    assert spec.max_txn_duration == 0.25 and spec.min_txn_duration == 0.0
    assert spec.ring_buffer_size == 0 and spec.read_channel_size == 0  # 0: the default, kept as given
    assert spec.effective_ring_buffer_size == 8192 and spec.effective_read_channel_size == 8192
    assert spec.desired_replication() == 3
    assert spec.desired_replication(max_hot_standbys=1) == 2
    assert ShardSpec.from_json(spec.to_json()) == spec
    assert ShardSpec.from_bytes(spec.to_bytes()) == ShardSpec.from_proto(spec.to_proto()) == spec
    disabled = ShardSpec("count-001", ["a/journal"], disable=True, hot_standbys=1)
    assert disabled.desired_replication() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": "ab"}, 'shard id "ab" is too short'),
        ({"id": "bad id!"}, "shard id"),
        ({"max_txn_duration": 0}, "max_txn_duration 0 (expected > 0"),
        ({"max_txn_duration": "soon"}, "max_txn_duration"),
        ({"min_txn_duration": -1}, "min_txn_duration -1 (expected >= 0)"),
        ({"min_txn_duration": "2s", "max_txn_duration": "1s"}, "above max_txn_duration"),
        ({"sources": ["a/journal", "a/journal"]}, 'lists source journal "a/journal" twice'),
        ({"sources": [{"journal": "a/journal", "min_offset": -5}]}, "min_offset -5"),
        ({"sources": [{"journal": "a/journal", "offset": 5}]}, "unknown keys: ['offset']"),
        ({"sources": ["/abs/journal"]}, "sources[0]"),
        ({"sources": "a/journal"}, "is not a list of journals"),
        ({"hot_standbys": -1}, "hot_standbys -1 (expected an integer from 0 to 4294967295)"),
        ({"labels": {"id": "x"}}, 'label "id" is reserved'),
        ({"recovery_log_prefix": "recovery/logs"}, "needs a hint_prefix"),
        ({"recovery_log_prefix": "recovery/logs", "hint_prefix": "hints/"}, "hint_prefix"),
        ({"hint_prefix": "/hints"}, "but no recovery_log_prefix"),
        (
            {"labels": [{"name": "aa", "value": "1"}, {"name": "aa", "value": "2"}]},
            'label "aa" has more than one value',
        ),
        ({"sources": ["a/journal;"]}, "metadata suffix"),
        ({"hot_standbys": 2**32}, "hot_standbys 4294967296 (expected an integer from 0 to 4294967295)"),
        ({"hint_backups": 2**31}, "hint_backups"),
        ({"disable": "yes"}, "disable 'yes' (expected true or false)"),
    ],
)
def test_spec_rejects_bad_input(kwargs: dict, message: str) -> None:
    args = {"id": "count-000", "sources": ["a/journal"], **kwargs}
    with pytest.raises(ShardSpecError) as info:
        ShardSpec(args.pop("id"), args.pop("sources"), **args)
    assert message in str(info.value)


def test_stored_spec_errors() -> None:
    with pytest.raises(ShardSpecError, match="not JSON"):
        ShardSpec.from_json(b"{nope")
    with pytest.raises(ShardSpecError, match="not JSON"):
        ShardSpec.from_bytes(b"{nope")  # "{" is JSON's, never a marshaled ShardSpec's first byte
    with pytest.raises(ShardSpecError, match="neither a marshaled consumer.ShardSpec nor a JSON object"):
        ShardSpec.from_bytes(b"\x0a\x7f")
    with pytest.raises(ShardSpecError, match=r"unknown field\(s\) \['color'\]"):
        ShardSpec.from_dict({"id": "count-000", "color": "red"})
    with pytest.raises(ShardSpecError, match="has no id"):
        ShardSpec.from_dict({"sources": []})


def test_spec_converts_to_gazettes_proto_exactly() -> None:
    spec = ShardSpec(
        "count-000",
        [{"journal": "a/journal;derived", "min_offset": 7}, "b/journal"],
        max_txn_duration="1m30.5s", min_txn_duration="3ms", hot_standbys=2, disable=True,
        disable_wait_for_ack=True, ring_buffer_size=16, read_channel_size=32,
        labels=[{"name": "store", "value": "rocksdb"}, {"name": "tier", "value": ""}],
        recovery_log_prefix="recovery/logs", hint_prefix="/hints", hint_backups=3,
    )  # fmt: skip
    msg = spec.to_proto()
    assert [(s.journal, s.min_offset) for s in msg.sources] == [("a/journal;derived", 7), ("b/journal", 0)]
    assert msg.max_txn_duration.seconds == 90 and msg.max_txn_duration.nanos == 500_000_000
    assert msg.min_txn_duration.ToNanoseconds() == 3_000_000
    assert (msg.hot_standbys, msg.disable, msg.disable_wait_for_ack) == (2, True, True)
    assert (msg.ring_buffer_size, msg.read_channel_size, msg.hint_backups) == (16, 32, 3)
    assert [(lbl.name, lbl.value) for lbl in msg.labels.labels] == [("store", "rocksdb"), ("tier", "")]
    assert (msg.recovery_log_prefix, msg.hint_prefix) == ("recovery/logs", "/hints")
    assert ShardSpec.from_proto(msg) == spec and ShardSpec.from_bytes(msg.SerializeToString()) == spec
    assert spec.to_bytes()[:1] == b"\x0a"  # the id's tag: never "{"
    assert spec.recovery_log == "recovery/logs/count-000"
    # Gazette's defaults survive a round trip: 0 stays 0 (not the effective 8192).
    bare = shard_pb2.ShardSpec(id="bare-000")
    bare.max_txn_duration.FromSeconds(1)
    again = ShardSpec.from_proto(bare).to_proto()
    assert (again.ring_buffer_size, again.read_channel_size, again.min_txn_duration.ToNanoseconds()) == (
        0,
        0,
        0,
    )
    assert again.SerializeToString(deterministic=True) == ShardSpec.from_proto(again).to_bytes()
    with pytest.raises(ShardSpecError, match="max_txn_duration"):
        ShardSpec.from_proto(shard_pb2.ShardSpec(id="bare-000"))  # 0: required > 0, as Gazette's Validate


def test_spec_from_dict_takes_gazctl_fields() -> None:
    """Labels as name/value lists (the single label store=rocksdb, not name=value), `;meta` sources,
    null fields, Go durations; the former JSON form's [name, value] pairs too."""
    spec = ShardSpec.from_dict(
        {
            "id": "count-000",
            "sources": [{"journal": "a/journal;meta"}, {"journal": "b/journal", "min_offset": 5}],
            "labels": [{"name": "store", "value": "rocksdb"}],
            "max_txn_duration": "10m",
            "hint_prefix": None,
        }
    )
    assert spec.labels == LabelSet({"store": "rocksdb"})
    assert spec.sources == (Source("a/journal;meta"), Source("b/journal", 5)) and spec.max_txn_duration == 600
    assert ShardSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["labels"] == [{"name": "store", "value": "rocksdb"}]
    former = b'{"id": "count-000", "sources": [{"journal": "a/journal", "min_offset": 0}], "labels": [["kk", "v"]], "ring_buffer_size": 8192}'
    assert ShardSpec.from_bytes(former) == ShardSpec(
        "count-000", ["a/journal"], labels={"kk": "v"}, ring_buffer_size=8192
    )


def test_status_reduces_monotonically() -> None:
    standby = ReplicaStatus(ReplicaCode.STANDBY)
    failed = ReplicaStatus(ReplicaCode.FAILED, ("boom",))
    assert standby.reduce(ReplicaStatus(ReplicaCode.IDLE)) == standby
    assert standby.reduce(failed) == failed
    assert failed.reduce(ReplicaStatus(ReplicaCode.PRIMARY)) == failed
    assert failed.reduce(ReplicaStatus(ReplicaCode.FAILED, ("again",))).errors == ("boom", "again")
    assert ReplicaStatus.from_json(b"") == ReplicaStatus()
    assert ReplicaStatus.from_json(failed.to_json()) == failed
    with pytest.raises(ValueError, match="integer code"):
        ReplicaStatus.from_json(b'{"code": "x"}')
    # Stored as Gazette's consumer.ReplicaStatus; "" is IDLE; gazette-py's former JSON still reads.
    assert shard_pb2.ReplicaStatus.FromString(failed.to_bytes()) == shard_pb2.ReplicaStatus(
        code=shard_pb2.ReplicaStatus.FAILED, errors=["boom"]
    )
    assert ReplicaStatus.from_bytes(failed.to_bytes()) == failed and ReplicaStatus().to_bytes() == b""
    assert (
        ReplicaStatus.from_bytes(b"") == ReplicaStatus()
        and ReplicaStatus.from_bytes(failed.to_json()) == failed
    )
    with pytest.raises(ValueError, match="not a ReplicaStatus code"):
        ReplicaStatus.from_bytes(shard_pb2.ReplicaStatus(code=150).SerializeToString())  # type: ignore[arg-type]


def _assignment(slot: int, code: ReplicaCode) -> Assignment:
    return Assignment(f"k{slot}", "shard", "z", f"member-{slot}", slot, ReplicaStatus(code), 1, 0)


@pytest.mark.parametrize(
    ("codes", "index", "consistent"),
    [
        ((ReplicaCode.PRIMARY, ReplicaCode.STANDBY), 1, True),
        ((ReplicaCode.PRIMARY, ReplicaCode.IDLE), 1, False),
        ((ReplicaCode.PRIMARY, ReplicaCode.BACKFILL), 1, False),
        ((ReplicaCode.PRIMARY,), 0, True),
        ((ReplicaCode.PRIMARY, ReplicaCode.FAILED), 1, False),
        ((ReplicaCode.FAILED, ReplicaCode.FAILED), 1, True),
        ((ReplicaCode.FAILED, ReplicaCode.STANDBY), 0, True),
    ],
)
def test_shard_consistency(codes: tuple[ReplicaCode, ...], index: int, consistent: bool) -> None:
    assignments = [_assignment(slot, code) for slot, code in enumerate(codes)]
    assert shard_assignment_is_consistent(None, assignments[index], assignments) is consistent


def test_consumer_spec_and_checkpoint_forms() -> None:
    spec = ConsumerSpec(shard_limit=7, endpoint="http://x:1", zone="a", suffix="m-1")
    assert ConsumerSpec.from_bytes(consumer_spec_exiting(spec.to_bytes())) == ConsumerSpec(
        7, True, "http://x:1", "a", "m-1"
    )
    msg = shard_pb2.ConsumerSpec.FromString(spec.to_bytes())
    assert (msg.process_spec.id.zone, msg.process_spec.id.suffix, msg.process_spec.endpoint) == (
        "a",
        "m-1",
        "http://x:1",
    )
    assert (msg.shard_limit, msg.exiting) == (7, False)
    former = b'{"shard_limit": 7, "exiting": true, "endpoint": "http://x:1"}'  # gazette-py's former JSON
    assert ConsumerSpec.from_bytes(former) == ConsumerSpec(7, True, "http://x:1")
    cp = ConsumerCheckpoint(
        Checkpoint({"a/journal": 42}, [ProducerState("a/journal", b"\x01" * 6, 99, -1)]),
        {"out/journal": b'{"ack": 1}\n'},
    )
    assert ConsumerCheckpoint.from_json(cp.to_json()) == cp
    assert cp.read_through == {"a/journal": 42}
    with pytest.raises(ValueError, match="exactly the keys"):
        ConsumerCheckpoint.from_dict({"sequencer": {}})


def test_key_space_values_are_gazettes_and_former_json_still_decodes() -> None:
    """Keys and values under a consumer root as Gazette's consumer/key_space.go decodes them."""
    root = "/gazette/consumers/app"
    decode = decode_value(root)
    spec = ShardSpec("count-000", ["a/journal"])
    assert decode(f"{root}/items/count-000", spec.to_bytes()) == spec
    assert decode(f"{root}/items/count-000", spec.to_json()) == spec  # gazette-py's former JSON
    with pytest.raises(ValueError, match='holds the spec of shard "count-000"'):
        decode(f"{root}/items/count-001", spec.to_bytes())
    member = ConsumerSpec(32, False, "http://h:1", "zone-a", "m-1")
    assert decode(f"{root}/members/zone-a#m-1", member.to_bytes()) == member
    with pytest.raises(ValueError, match="holds the ConsumerSpec of zone-a#m-1"):
        decode(f"{root}/members/zone-a#m-2", member.to_bytes())
    # A former JSON member value has no id: the key names it.
    assert decode(f"{root}/members/zone-a#m-1", b'{"shard_limit": 32, "endpoint": "http://h:1"}') == member
    failed = ReplicaStatus(ReplicaCode.FAILED, ("boom",))
    key = f"{root}/assign/count-000#zone-a#m-1#0"
    assert decode(key, failed.to_bytes()) == decode(key, failed.to_json()) == failed
    assert decode(key, b"") == ReplicaStatus()
