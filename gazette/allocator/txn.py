"""Batched, guarded etcd transactions for the allocator's checkpoints
(docs/semantics.md#allocator-leader-loop).

Checkpoints are grouped into transactions of at most MAX_TXN_OPS compares and ops (etcd's default
--max-txn-ops), each also carrying fixed compares (the leader's own member key, unchanged). A
checkpoint is never split across transactions; a transaction whose compares fail raises TxnFailed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import aetcd
from aetcd import rpc

from gazette.allocator.converge import Checkpoint, Compare, Delete, Move, Put
from gazette.keyspace.etcd import txn

MAX_TXN_OPS = 128

_TARGETS = {"mod": rpc.Compare.MOD, "create": rpc.Compare.CREATE}


class TxnFailed(Exception):
    """A transaction's compares did not hold (the KeySpace was stale); nothing of it was applied.

    `applied_revision` is the header revision of the last transaction of the batch that did commit
    (0 if none did): the caller must observe it before planning again.
    """

    def __init__(self, message: str, applied_revision: int) -> None:
        super().__init__(message)
        self.applied_revision = applied_revision


async def commit(
    client: aetcd.Client,
    checkpoints: Iterable[Checkpoint],
    fixed: Sequence[Compare] = (),
    max_ops: int = MAX_TXN_OPS,
) -> int:
    """Applies `checkpoints` in as few transactions as the op limit allows; returns the last
    committed header revision (0 if there was nothing to do)."""
    if len(fixed) >= max_ops:
        raise ValueError(f"{len(fixed)} fixed compares leave no room under the {max_ops}-op limit")
    batches: list[list[Checkpoint]] = [[]]
    n_cmp, n_ops = len(fixed), 0
    for cp in checkpoints:
        c, o = len(cp.compares), cp.op_count
        if len(fixed) + c > max_ops or o > max_ops:
            raise ValueError(
                f"a checkpoint of {c} compares and {o} ops exceeds the {max_ops}-op transaction limit"
            )
        if n_cmp + c > max_ops or n_ops + o > max_ops:
            batches.append([])
            n_cmp, n_ops = len(fixed), 0
        batches[-1].append(cp)
        n_cmp, n_ops = n_cmp + c, n_ops + o
    revision = 0
    for batch in batches:
        if batch:
            revision = await _commit_one(client, batch, fixed, revision)
    return revision


async def _commit_one(
    client: aetcd.Client, batch: list[Checkpoint], fixed: Sequence[Compare], applied: int
) -> int:
    await client.connect()
    compares = [_compare(c) for c in fixed]
    moves: list[Move] = []
    for cp in batch:
        compares.extend(_compare(c) for c in cp.compares)
        moves.extend(op for op in cp.ops if isinstance(op, Move))
    values = await _current_values(client, [m.src for m in moves]) if moves else {}
    ops: list[rpc.RequestOp] = []
    for cp in batch:
        for op in cp.ops:
            if isinstance(op, Put):
                ops.append(_put(op.key, op.value, op.lease))
            elif isinstance(op, Delete):
                ops.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=op.key.encode())))
            else:
                # A vanished source fails the txn on its ModRevision compare; the value is moot then.
                ops.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=op.src.encode())))
                ops.append(_put(op.dst, values.get(op.src, b""), op.lease))
    resp = await txn(client, rpc.TxnRequest(compare=compares, success=ops, failure=[]))
    if not resp.succeeded:
        raise TxnFailed(
            f"allocator transaction of {len(compares)} compares and {len(ops)} ops did not apply: "
            f"a compared key changed (etcd is at revision {resp.header.revision})",
            applied,
        )
    return int(resp.header.revision)


async def _current_values(client: aetcd.Client, keys: list[str]) -> dict[str, bytes]:
    """The stored bytes of `keys` (moves re-put exactly the bytes they delete), in one round trip."""
    reads = [rpc.RequestOp(request_range=rpc.RangeRequest(key=k.encode())) for k in keys]
    resp = await txn(client, rpc.TxnRequest(compare=[], success=reads, failure=[]))
    out: dict[str, bytes] = {}
    for r in resp.responses:
        for kv in r.response_range.kvs:
            out[kv.key.decode()] = bytes(kv.value)
    return out


def _compare(c: Compare) -> rpc.Compare:
    msg = rpc.Compare(key=c.key.encode(), result=rpc.Compare.EQUAL, target=_TARGETS[c.target])
    if c.target == "mod":
        msg.mod_revision = c.value
    else:
        msg.create_revision = c.value
    return msg


def _put(key: str, value: bytes, lease: int) -> rpc.RequestOp:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value, lease=lease))
