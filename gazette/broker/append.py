"""The Append RPC: the append FSM of reference 4.1 for a route of one replica.

States kept as in Gazette: resolve -> (proxy | acquire pipeline) -> validate preconditions ->
stream content -> commit or roll back. With replication (a later issue) StartPipeline and
ReadAcknowledgements gain peers; the single-replica path here holds the replica's `pipeline` lock,
which is the spool's ownership, for the whole append. Commit = an empty content message followed by
half-close; anything else rolls back, so no byte of an aborted append becomes visible.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from gazette.broker.resolver import Resolution
from gazette.fragment.fragment import ZERO_SUM, Fragment
from gazette.fragment.health import health_of
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import GazetteError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import split_journal_meta, validate_journal_name

if TYPE_CHECKING:
    from gazette.broker.broker import Broker
    from gazette.broker.replica import Replica

log = logging.getLogger(__name__)

# Appends wait for an unhealthy primary store through this many failed checks (reference 2.6).
STORE_HEALTH_MAX_FAILED_CHECKS = 5


class AppendAborted(Exception):
    """The client stream broke or violated the protocol; the append rolls back."""


class AppendRolledBack(Exception):
    """Ends the RPC with ABORTED after the append was rolled back (the service maps it)."""


def _response(status: Status, header: pb.Header, **kw) -> pb.AppendResponse:
    return pb.AppendResponse(status=to_pb(status), header=header, **kw)


async def serve_append(
    broker: Broker, requests: AsyncIterator[pb.AppendRequest], context: grpc.aio.ServicerContext
) -> pb.AppendResponse:
    try:
        first = await anext(requests)
    except StopAsyncIteration:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "append stream closed before its first message")
        raise
    if first.content:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first AppendRequest must carry no content")
    journal, _meta = split_journal_meta(first.journal)
    try:
        validate_journal_name(journal)
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    while True:
        res = await broker.resolver.resolve(
            journal,
            require_primary=True,
            may_proxy=not first.do_not_proxy,
            min_etcd_revision=first.min_etcd_revision,
            proxy_header=first.header if first.HasField("header") else None,
        )
        if res.status != Status.OK:
            return _response(res.status, res.header)
        if res.replica is None:
            return await broker.proxy.append(res, first, requests)
        assert res.spec is not None
        desired = min(res.spec.replication, broker.max_replication)
        if len(res.route.members) > desired:
            # The allocator is mid-migration: wait for the next revision and resolve again.
            await broker.ks.wait_for_revision(broker.ks.revision + 1)
            continue
        if len(res.route.members) < desired:
            return _response(Status.INSUFFICIENT_JOURNAL_BROKERS, res.header)
        if len(res.route.members) > 1:
            # Replication pipelines arrive with the replication issue; refuse rather than write alone.
            return _response(Status.INSUFFICIENT_JOURNAL_BROKERS, res.header)
        replica = res.replica
        async with replica.pipeline:
            if res.invalidated is not None and res.invalidated.is_set():
                continue  # the route changed while we waited for the pipeline
            return await _append_locked(broker, replica, res, first, requests)


async def _append_locked(
    broker: Broker,
    replica: Replica,
    res: Resolution,
    first: pb.AppendRequest,
    requests: AsyncIterator[pb.AppendRequest],
) -> pb.AppendResponse:
    spec = res.spec
    assert spec is not None
    spool = replica.spool
    header = res.header

    # ValidatePreconditions.
    if not spec.writable:
        return _response(Status.NOT_ALLOWED, header)
    # Health first: a store that is down from the start never completes the first refresh.
    if spec.stores:
        err = await health_of(spec.stores[0]).wait_healthy(STORE_HEALTH_MAX_FAILED_CHECKS)
        if err is not None:
            return _response(Status.FRAGMENT_STORE_UNHEALTHY, header, store_health_error=err)
    await replica.index.wait_first_refresh()

    if first.HasField("check_registers") and spool.registers:
        selector = LabelSelector.from_proto(first.check_registers)
        if not selector.matches(spool.registers):
            return _response(Status.REGISTER_MISMATCH, header, registers=spool.registers.to_proto())

    max_offset = max(spool.fragment.end, replica.index.end_offset())
    roll_to = 0
    if first.offset:
        if first.offset != max_offset:
            return _response(Status.WRONG_APPEND_OFFSET, header, registers=spool.registers.to_proto())
        if first.offset != spool.fragment.end:
            roll_to = first.offset  # reset-head: re-sync the spool at the explicit offset
    elif spool.fragment.end < replica.index.end_offset():
        return _response(Status.INDEX_HAS_GREATER_OFFSET, header, registers=spool.registers.to_proto())

    roll = spool.maybe_roll(spec.fragment_length, spec.compression, spec.flush_interval, roll_to)
    if roll == spool.fragment and spool.fragment.length and spool.fragment.begin == replica.index.begin_offset():
        # The spool holds the journal's very first write: roll, so the store soon proves it was written.
        roll = spool.roll_to(spool.fragment.end, spec.compression)
    if roll != spool.fragment:
        status, _, _ = spool.apply_proposal(roll, spool.registers)
        if status != Status.OK:
            raise RuntimeError(f"primary spool refused its own roll of {replica.journal}: {status.name}")

    # StreamContent.
    begin = spool.fragment.end
    client_sum = hashlib.sha1()
    chunks = 0
    committed = False
    try:
        async for req in requests:
            if committed:
                raise AppendAborted("AppendRequest after the empty commit message")
            content = req.content  # each access copies the bytes out of the message
            if content:
                spool.apply_content(content, spool.delta)
                client_sum.update(content)
                chunks += 1
            else:
                committed = True
        if not committed:
            raise AppendAborted("client closed the stream without the empty commit message")
    except (AppendAborted, asyncio.CancelledError, grpc.aio.AioRpcError, GazetteError) as exc:
        broker.metrics.rollback(spool.delta)
        spool.rollback()
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise AppendRolledBack(str(exc)) from exc
    except BaseException:
        spool.rollback()
        raise

    delta = spool.delta
    registers = spool.registers
    if delta > 0:
        registers = registers.subtract(LabelSet.from_proto(first.subtract_registers)).union(
            LabelSet.from_proto(first.union_registers)
        )
    elif first.union_registers.labels or first.subtract_registers.labels:
        spool.rollback()
        raise AppendRolledBack("register modification requires a non-empty append")
    proposal = spool.next()
    status, _, _ = spool.apply_proposal(proposal, registers)
    if status != Status.OK:
        raise RuntimeError(f"primary spool refused its own commit of {replica.journal}: {status.name}")
    broker.metrics.commit(replica.journal, delta, spool.fragment.end)
    commit = Fragment(
        journal=replica.journal,
        begin=begin,
        end=begin + delta,
        sum=client_sum.digest() if delta else ZERO_SUM,
        codec=spool.fragment.codec,
    )
    return _response(
        Status.OK, header, commit=commit.to_proto(), registers=spool.registers.to_proto(), total_chunks=chunks
    )


