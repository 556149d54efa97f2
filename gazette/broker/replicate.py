"""The Replicate RPC, a replica's side of the pipeline (docs/semantics.md#replicate).

The first request carries the primary's header; once the route it names is the one this broker
resolves, the stream owns the replica's spool and applies every request to it, acknowledging those
that ask. The stream ends (and the spool is rolled back and released) when the primary closes it, a
request fails, or this broker sees the journal's route change: a primary that lost its route must not
go on writing here (docs/semantics.md#revisions-and-the-keyspace).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from gazette import tunables
from gazette.allocator.journals import route_equivalent
from gazette.auth.tokens import Claims
from gazette.broker.append import spool_write_failure
from gazette.broker.wire import ReplicateContent
from gazette.fragment.fragment import Fragment
from gazette.fragment.spool import Spool, SpoolError
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import validate_journal_name
from gazette.tasks import cancel_and_wait, first_of

if TYPE_CHECKING:
    from gazette.broker.broker import Broker

log = logging.getLogger(__name__)

SPOOL_RECHECK_S = 0.5  # a stream waiting for the spool looks again this often for an idle pipeline
_EOF = object()
_ROUTE_CHANGED = object()


def apply_replicate(spool: Spool, req: pb.ReplicateRequest | ReplicateContent) -> pb.ReplicateResponse | None:
    """Applies one request to the spool: a proposal (with registers) or content (with its delta).
    Returns the response, or None for content decoded raw (which never asks an acknowledgement)."""
    if isinstance(req, ReplicateContent):
        spool.apply_content(req.content, req.content_delta)
        return None
    assert isinstance(req, pb.ReplicateRequest)
    if req.HasField("proposal"):
        if req.content:
            raise SpoolError("a ReplicateRequest carries either a proposal or content, not both")
        if not req.HasField("registers"):
            raise SpoolError("a ReplicateRequest proposal must carry registers")
        status, frag, registers = spool.apply_proposal(
            Fragment.from_proto(req.proposal), LabelSet.from_proto(req.registers)
        )
        resp = pb.ReplicateResponse(status=to_pb(status))
        if status != Status.OK:
            resp.fragment.CopyFrom(frag.to_proto())
            resp.registers.CopyFrom(registers.to_proto())
        return resp
    if req.HasField("registers") or req.acknowledge:
        raise SpoolError("a content ReplicateRequest carries only content and content_delta")
    spool.apply_content(req.content, req.content_delta)
    return pb.ReplicateResponse(status=to_pb(Status.OK))


async def serve_replicate(
    broker: Broker,
    requests: AsyncIterator[pb.ReplicateRequest | ReplicateContent],
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> AsyncIterator[pb.ReplicateResponse]:
    try:
        first = await anext(requests)
    except StopAsyncIteration:
        return
    if not isinstance(first, pb.ReplicateRequest):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first ReplicateRequest must carry a header and a proposal with acknowledge")
        return
    journal = first.proposal.journal
    problem = None
    if not first.HasField("header") or not first.HasField("proposal") or not first.acknowledge:
        problem = "the first ReplicateRequest must carry a header and a proposal with acknowledge"
    else:
        try:
            validate_journal_name(journal)
        except Exception as exc:
            problem = str(exc)
    if problem:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)

    while True:
        res = await broker.resolver.resolve(
            journal, require_primary=False, may_proxy=False, proxy_header=first.header, claims=claims
        )
        if res.status != Status.OK:
            yield pb.ReplicateResponse(status=to_pb(res.status), header=res.header)
            return
        if not route_equivalent(res.header.route, first.header.route):
            yield pb.ReplicateResponse(status=to_pb(Status.WRONG_ROUTE), header=res.header)
            return
        replica = res.replica
        assert res.invalidated is not None
        if replica is None:
            await asyncio.sleep(tunables.REPLICA_WAIT_S)  # assigned here, replica not built yet
            continue
        if replica.spool_slot.qsize():
            spool = replica.spool_slot.get_nowait()
            break
        stale = None
        if replica.pipeline_slot.qsize():  # (empty while an append holds the pipeline: leave it be)
            stale = replica.pipeline_slot.get_nowait()
            replica.pipeline_slot.put_nowait(None)  # no await in between: nobody sees the slot empty
        if stale is not None:
            # The route names another primary, yet a pipeline this broker built while it was the
            # journal's primary sits idle in its slot, holding the spool (nobody else would ever
            # shut it down): the new primary's stream would wait for the spool for ever, and with
            # it every append to the journal. Shut it down; its spool goes back to the slot.
            log.info("Replicate of %s: shutting down this broker's idle pipeline of a former primacy", journal)
            await stale.shutdown(expect_err=True)
            continue
        got, got_spool = await first_of(
            replica.spool_slot.get(), res.invalidated, timeout=SPOOL_RECHECK_S, give_back=replica.spool_slot.put_nowait
        )  # a spool taken just as this stream is cancelled goes back, else the replica would lose it
        if got and got_spool is not None:
            spool = got_spool
            break

    # One queue carries the primary's requests (pumped by a task of ours) and, from the route
    # watcher, a sentinel: the stream then ends normally, without cancelling gRPC's own task.
    inbox: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for r in requests:
                inbox.put_nowait(r)
            inbox.put_nowait(_EOF)
        except Exception as exc:  # the primary's stream broke
            inbox.put_nowait(exc)

    async def watch_route() -> None:
        while True:
            await broker.resolver.invalidation(journal).wait()
            if not route_equivalent(broker.resolver.route_of(journal), first.header.route):
                inbox.put_nowait(_ROUTE_CHANGED)
                return

    released = False

    def release(*_) -> None:
        """Rolls back partial content and hands the spool back, once (also if gRPC ends the RPC
        without resuming this generator)."""
        nonlocal released
        if not released:
            released = True
            spool.rollback()
            replica.spool_slot.put_nowait(spool)

    context.add_done_callback(release)
    tasks = [
        asyncio.create_task(pump(), name=f"replicate pump {journal}"),
        asyncio.create_task(watch_route(), name=f"replicate route watch {journal}"),
    ]
    header: pb.Header | None = res.header
    req: pb.ReplicateRequest | ReplicateContent = first
    failed_with: tuple[grpc.StatusCode, str] | None = None
    try:
        while True:
            try:
                resp = apply_replicate(spool, req)
            except SpoolError as exc:
                log.warning("Replicate of %s failed: %s", journal, exc)
                failed_with = (grpc.StatusCode.FAILED_PRECONDITION, str(exc))
                return
            except OSError as exc:  # this replica's spool file could not take the content (a full disk)
                failed = spool_write_failure(broker, journal, exc)
                log.error("Replicate of %s failed: %s", journal, failed)
                failed_with = (failed.code, str(failed).removeprefix("append rolled back: "))
                return
            if resp is None:
                pass  # content: nothing to acknowledge
            elif req.acknowledge:
                if header is not None:
                    resp.header.CopyFrom(header)
                    header = None
                yield resp
            elif resp.status != pb.OK:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"no acknowledgement requested but the proposal was refused ({pb.Status.Name(resp.status)})",
                )
            item = await inbox.get()
            if item is _EOF:
                return
            if item is _ROUTE_CHANGED:
                log.info("Replicate of %s ended: the journal's route changed", journal)
                return
            if isinstance(item, Exception):
                raise item
            req = item
    finally:
        if failed_with is None:
            for t in tasks:
                await cancel_and_wait(t)
        else:
            # Ends the stream with this status once the handler returns. Not `context.abort`, and the
            # pump is left reading (it ends with the call): cancelling its pending read of the
            # primary's stream can lose the status to gRPC's "Internal error from Core".
            await cancel_and_wait(tasks[1])
            context.set_code(failed_with[0])
            context.set_details(failed_with[1])
        release()

