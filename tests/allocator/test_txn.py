"""Batched allocator transactions against a real etcd: op limits, failure, moves that keep bytes."""

from __future__ import annotations

import aetcd
import pytest

from gazette.allocator.converge import Checkpoint, Compare, Move, Put
from gazette.allocator.txn import TxnFailed, commit


def create(key: str, value: bytes = b"") -> Checkpoint:
    return Checkpoint(compares=[Compare(key, "create", 0)], ops=[Put(key, value, 0)])


async def test_checkpoints_are_batched_under_the_op_limit(etcd_client: aetcd.Client, etcd_root: str) -> None:
    anchor = f"{etcd_root}/members/leader"
    put = await etcd_client.put(anchor.encode(), b"")
    fixed = [Compare(anchor, "mod", put.header.revision)]
    keys = [f"{etcd_root}/k/{i:03d}" for i in range(300)]
    revision = await commit(etcd_client, [create(k) for k in keys], fixed, max_ops=128)
    got = [await etcd_client.get(k.encode()) for k in keys]
    revisions = sorted({g.mod_revision for g in got if g is not None})
    # 1 fixed + 127 checkpoint compares per transaction: 127 + 127 + 46.
    assert len(revisions) == 3 and revisions[-1] == revision
    counts = [sum(1 for g in got if g is not None and g.mod_revision == r) for r in revisions]
    assert counts == [127, 127, 46]


async def test_a_failed_batch_raises_with_the_applied_revision(
    etcd_client: aetcd.Client, etcd_root: str
) -> None:
    taken = f"{etcd_root}/k/taken"
    await etcd_client.put(taken.encode(), b"")
    first = [create(f"{etcd_root}/k/a{i}") for i in range(5)]
    second = [create(f"{etcd_root}/k/b{i}") for i in range(3)] + [create(taken)]
    with pytest.raises(TxnFailed) as info:
        await commit(etcd_client, first + second, max_ops=5)
    applied = await etcd_client.get(f"{etcd_root}/k/a0".encode())
    assert applied is not None and info.value.applied_revision == applied.mod_revision
    assert await etcd_client.get(f"{etcd_root}/k/b0".encode()) is None


async def test_a_move_keeps_the_bytes_and_lease(etcd_client: aetcd.Client, etcd_root: str) -> None:
    lease = await etcd_client.lease(30)
    src, dst = f"{etcd_root}/assign/j#a#m#3", f"{etcd_root}/assign/j#a#m#0"
    raw = b"\x00\xffroute bytes"
    put = await etcd_client.put(src.encode(), raw, lease=lease.id)
    try:
        await commit(
            etcd_client, [Checkpoint([Compare(src, "mod", put.header.revision)], [Move(src, dst, lease.id)])]
        )
        assert await etcd_client.get(src.encode()) is None
        got = await etcd_client.get(dst.encode())
        assert got is not None and got.value == raw and got.lease == lease.id
    finally:
        await lease.revoke()


async def test_limits_are_checked_before_anything_is_sent(etcd_client: aetcd.Client, etcd_root: str) -> None:
    big = Checkpoint(ops=[Put(f"{etcd_root}/k/{i}", b"", 0) for i in range(6)])
    with pytest.raises(ValueError, match="exceeds the 5-op transaction limit"):
        await commit(etcd_client, [big], max_ops=5)
    with pytest.raises(ValueError, match="fixed compares"):
        await commit(etcd_client, [], [Compare("k", "mod", 1)] * 5, max_ops=5)
    assert await etcd_client.get(f"{etcd_root}/k/0".encode()) is None
