"""The Read RPC (docs/semantics.md#read): metadata then content, per fragment, with long-polling.

Any replica serves reads, except a range it lacks because it joined the route after the range was
written (still only in its peers' spools): the primary serves those; and a primary that lacks a
committed range (its spool missed a commit a peer got) reads it from that peer. Local fragments are read from their spool file; persisted ones are opened
from the store, decompressed and verified (in a thread, never on the loop) and streamed from the
requested offset. A non-blocking read at the write head ends with OFFSET_NOT_YET_AVAILABLE.

A read below the first content the journal still has jumps forward, as Gazette's does: its first
response carries the larger offset. The index does it for persisted fragments (a store's first
fragments pruned); for a journal without stores the primary does it once no member of the route
holds anything below (its replicas were replaced one by one, and the early content went with
them): nothing can ever fill that range, and the read would otherwise wait for ever.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from gazette import tunables
from gazette.auth.tokens import Capability, Claims
from gazette.fragment.content import open_fragment
from gazette.fragment.fragment import Fragment
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import split_journal_meta, validate_journal_name
from gazette.tasks import first_of

if TYPE_CHECKING:
    from gazette.broker.broker import Broker

log = logging.getLogger(__name__)

_THREAD_QUEUE_DEPTH = 8


async def iterate_in_thread(make: Callable[[], Iterator[Any]]) -> AsyncIterator[Any]:
    """Runs a blocking generator in a thread, handing its items to the loop with backpressure."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(_THREAD_QUEUE_DEPTH)
    stop = threading.Event()
    done = object()

    def put(item) -> None:
        fut = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        while not stop.is_set():
            try:
                fut.result(timeout=0.5)
                return
            except TimeoutError:
                continue

    def run() -> None:
        try:
            for item in make():
                if stop.is_set():
                    return
                put(item)
            put(done)
        except BaseException as exc:  # handed to the consumer, re-raised there
            put(exc)

    thread = threading.Thread(target=run, daemon=True, name="fragment-reader")
    thread.start()
    try:
        while True:
            item = await queue.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


async def serve_read(
    broker: Broker, req: pb.ReadRequest, context: grpc.aio.ServicerContext, claims: Claims | None = None
) -> AsyncIterator[pb.ReadResponse]:
    journal, _meta = split_journal_meta(req.journal)
    try:
        validate_journal_name(journal)
        if req.offset < -1:
            raise ValidationError(f"read offset {req.offset} is invalid (expected >= -1)")
        if req.end_offset and req.end_offset < req.offset:
            raise ValidationError(f"end_offset {req.end_offset} is before offset {req.offset}")
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    res = await broker.resolver.resolve(
        journal,
        require_primary=False,
        may_proxy=not req.do_not_proxy,
        min_etcd_revision=req.min_etcd_revision,
        proxy_header=req.header if req.HasField("header") else None,
        claims=claims,
    )
    if res.status != Status.OK:
        yield pb.ReadResponse(status=to_pb(res.status), header=res.header)
        return
    if res.replica is None:
        async for resp in broker.proxy.read(res, req):
            yield resp
        return
    assert res.spec is not None
    if not res.spec.readable:
        yield pb.ReadResponse(status=to_pb(Status.NOT_ALLOWED), header=res.header)
        return

    replica = res.replica
    index = replica.index
    await index.wait_first_refresh()
    offset = req.offset
    header: pb.Header | None = res.header
    peers_tried_at: int | None = None
    jump_checked_at: int | None = None
    while True:
        if req.end_offset and offset >= req.end_offset:
            return
        q = await index.query(offset, False, req.begin_mod_time)  # never waits when not blocking
        # A gap: no local fragment covers `offset`, though the index knows content past it.
        in_gap = q.status == Status.OFFSET_NOT_YET_AVAILABLE and q.offset < q.write_head
        if in_gap and not replica.is_primary and not req.do_not_proxy:
            # This replica joined after [offset, ...) was written: that range lives only in its
            # peers' spools until they persist it. The primary serves the rest of this read.
            async for resp in _read_at_primary(broker, journal, req, offset):
                yield resp
            return
        if in_gap and replica.is_primary and offset != peers_tried_at:
            # The primary itself lacks a committed range: its spool missed the commit a peer got
            # before the old primary died (the pipeline then rolled past it). That peer serves it now,
            # rather than readers waiting until it persists the range minutes later.
            peers_tried_at = offset
            async for resp in _read_at_peers(broker, res.route, req, offset):
                if resp.content:
                    offset += len(resp.content)
                elif header is not None:
                    resp.header.CopyFrom(header)
                    header = None
                yield resp
                if req.metadata_only:
                    return
            continue
        storeless = not replica.spec.stores
        if in_gap and replica.is_primary and storeless and offset != jump_checked_at:
            # No peer served `offset` either. Without a store nothing will ever list it: if no
            # member holds content at or below it, it is gone (the replicas that held it were
            # replaced), and the read jumps to the first content a member still has.
            jump_checked_at = offset
            first = await _route_begin_offset(broker, res.route, index, journal)
            if first is not None and first > offset:
                offset = first
                if req.end_offset and offset >= req.end_offset:
                    # Past the requested end: only the jump is told (the client's offset moves there).
                    meta = pb.ReadResponse(status=to_pb(Status.OK), offset=offset, write_head=q.write_head)
                    if header is not None:
                        meta.header.CopyFrom(header)
                    yield meta
                    return
                continue
        if req.block:
            # A read blocked on a replica that is then unassigned from this broker would wait
            # forever: end it when the journal's route or spec changes (the client resumes here).
            # At a non-primary, also stop waiting once the wait turns into a gap (content past
            # `offset` arrived here, `offset` itself did not): the loop then asks the primary. So
            # does a storeless journal's primary, to check (once per offset) for a jump.
            watch_gap = (not replica.is_primary and not req.do_not_proxy) or (
                replica.is_primary and storeless and offset != jump_checked_at
            )
            got, blocked = await first_of(_content_or_gap(index, offset, req.begin_mod_time, watch_gap), res.invalidated)
            if not got or blocked is None:
                return
            if blocked.status != Status.OK:
                offset = blocked.offset  # (a read from -1 keeps the head it began at)
                continue  # a gap: handed to the primary at the top of the loop
            q = blocked
        meta = pb.ReadResponse(status=to_pb(q.status), offset=q.offset, write_head=q.write_head)
        if header is not None:
            meta.header.CopyFrom(header)
            header = None
        if q.fragment is not None:
            meta.fragment.CopyFrom(q.fragment.to_proto())
        yield meta
        if q.status != Status.OK or req.metadata_only or (req.end_offset and q.offset >= req.end_offset):
            return  # (the last: a jump past the requested end, told by `meta` alone, as Gazette does)
        assert q.fragment is not None
        offset = q.offset
        stop = min(q.fragment.end, req.end_offset) if req.end_offset else q.fragment.end
        if q.file is not None:
            while offset < stop:
                data = q.file.pread(offset, min(tunables.BROKER_READ_CHUNK_BYTES, stop - offset))
                if not data:  # committed bytes the spool file no longer holds: never wait on them
                    problem = (
                        f"broker {broker.id[1]}: the spool file of {journal} [{q.fragment.begin}, "
                        f"{q.fragment.end}) ends at offset {offset}: it was truncated or damaged on this "
                        "broker's disk (another replica, or the store once persisted, has the content)"
                    )
                    log.error("read of %s failed: %s", journal, problem)
                    await context.abort(grpc.StatusCode.DATA_LOSS, problem)
                yield pb.ReadResponse(offset=offset, content=data)
                offset += len(data)
        else:
            async for data in _remote_content(q.fragment, offset, stop):
                yield pb.ReadResponse(offset=offset, content=data)
                offset += len(data)
                broker.metrics.read_bytes(len(data))


async def _content_or_gap(index: Any, offset: int, begin_mod_time: int, watch_gap: bool) -> Any:
    """A blocking index query that also returns (OFFSET_NOT_YET_AVAILABLE) when `watch_gap` and the
    index comes to know content past `offset` without covering `offset`: a replica re-synced past a
    range it never received (it restarted, or joined late) would otherwise wait for that range to be
    persisted and listed, minutes later."""
    while True:
        q = await index.query(offset, False, begin_mod_time)  # never yields when not blocking
        if q.status == Status.OK or (watch_gap and q.offset < q.write_head):
            return q
        offset = q.offset  # -1 (the write head) is resolved once, as a blocking query does
        await index.wait_for_change()


async def _read_at_primary(
    broker: Broker, journal: str, req: pb.ReadRequest, offset: int
) -> AsyncIterator[pb.ReadResponse]:
    res = await broker.resolver.resolve(journal, require_primary=True, may_proxy=True)
    if res.status != Status.OK or res.replica is not None:
        yield pb.ReadResponse(status=to_pb(Status.NO_JOURNAL_PRIMARY_BROKER), header=res.header)
        return
    fwd = pb.ReadRequest()
    fwd.CopyFrom(req)
    fwd.offset = offset
    async for resp in broker.proxy.read(res, fwd):
        yield resp


PEER_READ_TIMEOUT_S = 30.0  # a peer that stops answering (paused) gives the read back to the primary


async def _read_at_peers(
    broker: Broker, route: pb.Route, req: pb.ReadRequest, offset: int
) -> AsyncIterator[pb.ReadResponse]:
    """What the first peer holding `offset` has from there (a non-blocking read of its own index):
    its fragment metadata and content, ending where it ends or where it would answer otherwise."""
    for member, endpoint in zip(route.members, route.endpoints, strict=False):
        if (member.zone, member.suffix) == (broker.zone, broker.suffix) or not endpoint:
            continue
        fwd = pb.ReadRequest()
        fwd.CopyFrom(req)
        fwd.ClearField("header")
        fwd.offset, fwd.block, fwd.do_not_proxy = offset, False, True
        served = False
        call = broker.proxy.stub(endpoint).Read(
            fwd, timeout=PEER_READ_TIMEOUT_S, metadata=broker.proxy.metadata(Capability.READ, fwd.journal)
        )
        try:
            async for resp in call:
                if not resp.content and (resp.status != pb.OK or resp.offset != offset or resp.fragment_url):
                    # The peer lacks it too, is at its head or would jump; or it is a Gazette broker
                    # answering with a persisted fragment's URL (our own index lists that fragment
                    # at its next refresh): not ours to follow.
                    break
                resp.ClearField("header")
                served = served or bool(resp.content) or req.metadata_only
                offset += len(resp.content)
                yield resp
        except grpc.aio.AioRpcError:
            pass  # gone, paused or not a member any more: the next peer, or the primary's own wait
        finally:
            call.cancel()
        if served:
            return


PEER_LIST_TIMEOUT_S = 10.0  # a peer that does not answer may hold the content: no jump


async def _route_begin_offset(broker: Broker, route: pb.Route, index: Any, journal: str) -> int | None:
    """The lowest offset from which any member of `route` (this broker included) holds content of
    `journal`, from each peer's own fragment listing. None when nobody holds any, or when a peer
    did not answer (it may hold what the others lack: better to wait than to skip it)."""
    begins = [index.begin_offset()] if index.fragments() else []
    for i, member in enumerate(route.members):
        if (member.zone, member.suffix) == (broker.zone, broker.suffix):
            continue
        endpoint = route.endpoints[i] if i < len(route.endpoints) else ""
        if not endpoint:
            return None
        req = pb.FragmentsRequest(journal=journal, do_not_proxy=True, page_limit=1)
        try:
            resp = await broker.proxy.stub(endpoint).ListFragments(
                req, timeout=PEER_LIST_TIMEOUT_S, metadata=broker.proxy.metadata(Capability.READ, journal)
            )
        except grpc.aio.AioRpcError:
            return None
        if resp.status != pb.OK:
            return None
        if resp.fragments:
            begins.append(resp.fragments[0].spec.begin)
    return min(begins) if begins else None


async def _remote_content(fragment: Fragment, offset: int, stop: int) -> AsyncIterator[bytes]:
    """Content of a persisted fragment from `offset` up to `stop`, in BROKER_READ_CHUNK_BYTES pieces."""

    def chunks() -> Iterator[bytes]:
        pos = offset
        for data in open_fragment(fragment, offset):
            for i in range(0, len(data), tunables.BROKER_READ_CHUNK_BYTES):
                piece = data[i : i + tunables.BROKER_READ_CHUNK_BYTES]
                if pos + len(piece) > stop:
                    piece = piece[: stop - pos]
                if piece:
                    yield piece
                    pos += len(piece)
                if pos >= stop and stop < fragment.end:
                    return  # a bounded read: the rest (and its SHA1 check) is not needed

    async for piece in iterate_in_thread(chunks):
        yield piece
