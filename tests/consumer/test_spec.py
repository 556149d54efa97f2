"""ShardSpec validation and stored forms; replica status reduction; shard consistency (5.1)."""

from __future__ import annotations

import pytest

from gazette.allocator.state import Assignment
from gazette.consumer import ConsumerCheckpoint, ReplicaCode, ReplicaStatus, ShardSpec, ShardSpecError, Source
from gazette.consumer.allocation import ConsumerSpec, consumer_spec_exiting, shard_assignment_is_consistent
from gazette.message.checkpoint import Checkpoint, ProducerState


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
    assert spec.ring_buffer_size == 8192 and spec.read_channel_size == 8192
    assert spec.desired_replication() == 3
    assert spec.desired_replication(max_hot_standbys=1) == 2
    assert ShardSpec.from_json(spec.to_json()) == spec
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
        ({"hot_standbys": -1}, "hot_standbys -1 (expected an integer >= 0)"),
        ({"labels": {"id": "x"}}, 'label "id" is reserved'),
        ({"recovery_log_prefix": "recovery/logs"}, "needs a hint_prefix"),
        ({"recovery_log_prefix": "recovery/logs", "hint_prefix": "hints/"}, "hint_prefix"),
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
    with pytest.raises(ShardSpecError, match=r"unknown field\(s\) \['color'\]"):
        ShardSpec.from_dict({"id": "count-000", "color": "red"})
    with pytest.raises(ShardSpecError, match="has no id"):
        ShardSpec.from_dict({"sources": []})


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
    spec = ConsumerSpec(shard_limit=7, endpoint="http://x:1")
    assert ConsumerSpec.from_json(consumer_spec_exiting(spec.to_json())) == ConsumerSpec(
        7, True, "http://x:1"
    )
    cp = ConsumerCheckpoint(
        Checkpoint({"a/journal": 42}, [ProducerState("a/journal", b"\x01" * 6, 99, -1)]),
        {"out/journal": b'{"ack": 1}\n'},
    )
    assert ConsumerCheckpoint.from_json(cp.to_json()) == cp
    assert cp.read_through == {"a/journal": 42}
    with pytest.raises(ValueError, match="exactly the keys"):
        ConsumerCheckpoint.from_dict({"sequencer": {}})
