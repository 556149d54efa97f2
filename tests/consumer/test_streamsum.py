"""Stream-sum (reference 9.1) in process: every stream's sum verifies through a consumer kill and
restart; the summer fails loudly on a repeated or skipped chunk; the CRC matches Go's crc64.ECMA."""

from __future__ import annotations

import os

import pytest

from gazette.consumer import ReplicaCode
from gazette.examples import streamsum
from gazette.message import Publisher


def test_crc64_matches_go_crc64_ecma() -> None:
    # crc64.Checksum([]byte("123456789"), crc64.MakeTable(crc64.ECMA)) == 0x995dc9bbdf1939fa
    assert streamsum.crc64_update(0, b"123456789") == 0x995DC9BBDF1939FA
    assert streamsum.crc64_update(streamsum.crc64_update(0, b"1234"), b"56789") == 0x995DC9BBDF1939FA


def test_check_rejects_wrong_duplicate_and_unknown_sums() -> None:
    expected = {"aa": {"seq": 4, "sum": "01"}}
    assert streamsum.check(expected, [{"id": "aa", "seq": 4, "sum": "01"}]) == 1
    with pytest.raises(streamsum.VerificationError, match="differs"):
        streamsum.check(expected, [{"id": "aa", "seq": 4, "sum": "02"}])
    with pytest.raises(streamsum.VerificationError, match="read twice"):
        streamsum.check(expected, [{"id": "aa", "seq": 4, "sum": "01"}] * 2)
    with pytest.raises(streamsum.VerificationError, match="unknown stream"):
        streamsum.check(expected, [{"id": "bb", "seq": 4, "sum": "01"}])
    with pytest.raises(ValueError, match="streams >= 1"):
        streamsum.Chunker(None, 2, 0)  # type: ignore[arg-type]


def test_stream_sums_verify_through_a_consumer_kill_and_restart(cluster, tmp_path) -> None:
    client = cluster.client()
    partitions = 2
    client.apply_journals(streamsum.journals(partitions))
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    group = cluster.run_consumer(
        streamsum.Summer(db_dir), streamsum.shards(partitions, hot_standbys=0, max_txn_duration="50ms")
    )
    group.wait_for_primaries()
    chunker = streamsum.Chunker(client, partitions, streams=30, chunks=4, seed=7)
    total = chunker.remaining
    assert total == 30 * 5

    chunker.publish(total // 2)
    # Wait until some sums were committed, then crash the only member mid-stream and restart it.
    group.wait_for(lambda _: len(streamsum.read_sums(client)) > 0, 60, "a first committed sum")
    group.kill(0)
    chunker.publish(total // 4)  # chunks arrive while no summer runs
    group.restart(0)
    chunker.publish()
    assert chunker.remaining == 0

    sums = streamsum.verify(client, chunker.expected, timeout=90, list_shards=group.list_shards)
    assert len(sums) == 30
    # Quiescent: nothing more appears (no duplicated sum after the verifier saw them all).
    group.wait_for_primaries()
    assert streamsum.check(chunker.expected, streamsum.read_sums(client)) == 30


def test_summer_fails_loudly_on_a_repeated_chunk(cluster, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals(streamsum.journals(1))
    cluster.wait_for_routes()
    group = cluster.run_consumer(
        streamsum.Summer(str(tmp_path)), streamsum.shards(1, hot_standbys=0, max_txn_duration="50ms")
    )
    group.wait_for_primaries()
    pub = Publisher(client)
    journal = streamsum.chunks_journal(0)
    for seq in (1, 2, 2):
        pub.publish_committed(journal, {"id": "ab" * 16, "seq": seq, "data": "00"})
    pub.flush()
    pub.close()
    (info,) = group.wait_for(
        lambda shards: shards[0].primary is not None and shards[0].primary.status.code == ReplicaCode.FAILED,
        60,
        "the summer to fail",
    )
    assert info.primary is not None
    assert "SequenceError" in info.primary.status.error
    assert "repeated chunk" in info.primary.status.error
    assert streamsum.failed_shards(group.list_shards()) == {"summer-000": info.primary.status.error}


def test_example_run_helper_verifies_every_stream(cluster, tmp_path) -> None:
    sums = streamsum.run(cluster, partitions=2, streams=10, chunks=2, processes=1, db_dir=str(tmp_path))
    assert sorted(s["id"] for s in sums) == sorted({s["id"] for s in sums}) and len(sums) == 10
