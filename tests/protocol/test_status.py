"""The broker's Status and the Shard service's ShardStatus: two enums, as on the wire, that never
compare equal to each other's members; GazetteError carries either, and its name reads right."""

from __future__ import annotations

from gazette.protocol import broker_pb2, shard_pb2
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import ShardStatus, Status


def test_numbers_are_the_wire_enums() -> None:
    assert {s.name: int(s) for s in Status} == dict(broker_pb2.Status.items())
    assert {s.name: int(s) for s in ShardStatus} == dict(shard_pb2.Status.items())


def test_the_two_enums_never_collide() -> None:
    assert int(ShardStatus.SHARD_NOT_FOUND) == int(Status.JOURNAL_NOT_FOUND) == 1
    assert ShardStatus.SHARD_NOT_FOUND != Status.JOURNAL_NOT_FOUND
    assert Status.JOURNAL_NOT_FOUND != ShardStatus.SHARD_NOT_FOUND
    assert ShardStatus.ETCD_TRANSACTION_FAILED != Status.ETCD_TRANSACTION_FAILED
    assert ShardStatus.OK != Status.OK
    # Each still equals its own number, as the generated messages hold statuses.
    assert ShardStatus.SHARD_STOPPED == 5 == shard_pb2.SHARD_STOPPED and Status.SUSPENDED == 14
    assert (
        ShardStatus(shard_pb2.StatResponse(status=shard_pb2.NO_SHARD_PRIMARY).status)
        is ShardStatus.NO_SHARD_PRIMARY
    )
    assert {ShardStatus.OK: "shard", Status.OK: "broker"}[ShardStatus.OK] == "shard"


def test_gazette_error_carries_either() -> None:
    shard = GazetteError(ShardStatus.SHARD_NOT_FOUND, "stat of shard x failed")
    assert shard.status is ShardStatus.SHARD_NOT_FOUND and shard.status.name == "SHARD_NOT_FOUND"
    assert str(shard) == "SHARD_NOT_FOUND: stat of shard x failed"
    assert shard.status != Status.JOURNAL_NOT_FOUND
    journal = GazetteError(1, "read failed")  # plain numbers are the broker's
    assert journal.status is Status.JOURNAL_NOT_FOUND and str(journal) == "JOURNAL_NOT_FOUND: read failed"
    assert str(GazetteError(ShardStatus.OK, "no member answered")) == "no member answered"
