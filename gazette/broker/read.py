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
import dataclasses
import enum
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from gazette import tunables
from gazette.auth.tokens import Capability, Claims
from gazette.fragment.content import open_fragment
from gazette.fragment.fragment import Fragment
from gazette.fragment.index import Index, QueryResult
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import split_journal_meta, validate_journal_name
from gazette.tasks import first_of

if TYPE_CHECKING:
    from gazette.broker.context import BrokerContext
    from gazette.broker.resolver import Resolution

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


class Step(enum.Enum):
    """What a local read does next at its offset (`next_step`)."""

    SERVE = "serve"  # the index has a fragment for the offset: send its metadata and content
    AT_PRIMARY = "at_primary"  # the primary serves the rest of this read
    FROM_PEERS = "from_peers"  # a peer may hold the range this primary lacks: read it from there
    CHECK_JUMP = "check_jump"  # storeless: does every member's content begin past the offset?
    ASK_PRIMARY = "ask_primary"  # this replica holds commits at the offset: how far do all members?
    WAIT = "wait"  # for the index to change (a commit, an acknowledgement, a listing)
    WAIT_TO_ASK = "wait_to_ask"  # the same, asking the primary again after a while
    NOT_YET = "not_yet"  # a non-blocking read ends: OFFSET_NOT_YET_AVAILABLE


@dataclasses.dataclass(frozen=True)
class ReadFacts:
    """What the read path's rules look at, for one offset of one read at one replica."""

    found: bool  # the index has a fragment covering the offset
    offset: int
    write_head: int  # the index's end: what every member is known to hold
    pending_end: int  # this replica's commits not yet known to be held by every member reach here
    is_primary: bool
    may_proxy: bool  # not do_not_proxy
    storeless: bool  # the journal has no fragment stores
    block: bool
    peers_tried: bool  # FROM_PEERS already ran at this offset
    jump_checked: bool  # CHECK_JUMP already ran at this offset
    asked: bool  # ASK_PRIMARY already ran at this offset since the index last changed


def next_step(f: ReadFacts) -> Step:
    """The read path's rules (docs/semantics.md#read), as one pure function.

    - Covered: serve it.
    - A gap (content past the offset is known, the offset is not): at a replica that joined late the
      range lives only in its peers' spools, so the primary serves the rest; a primary that lacks a
      committed range asks its peers once, then (storeless) checks once whether every member's
      content begins later, and otherwise waits for a listing of the stores.
    - At the head, a non-primary replica holding commits there asks the primary how far every member
      holds the journal (it alone knows); asked already, it hands the read to the primary, or with
      do_not_proxy waits and asks again. Nothing else serves a commit before every member has it.
    - Otherwise: wait (blocking) or end with OFFSET_NOT_YET_AVAILABLE.
    """
    if f.found:
        return Step.SERVE
    wait = Step.WAIT if f.block else Step.NOT_YET
    if f.offset < f.write_head:  # a gap
        if not f.is_primary:
            return Step.AT_PRIMARY if f.may_proxy else wait
        if not f.peers_tried:
            return Step.FROM_PEERS
        if f.storeless and not f.jump_checked:
            return Step.CHECK_JUMP
        return wait
    if not f.is_primary and f.pending_end > f.offset:
        if not f.asked:
            return Step.ASK_PRIMARY
        if f.may_proxy:
            return Step.AT_PRIMARY
        return Step.WAIT_TO_ASK if f.block else Step.NOT_YET
    return wait


ASK_RETRY_S = (0.01, 1.0)  # a do_not_proxy read at a replica asks the primary again after this (doubling)
PRIMARY_HEAD_TIMEOUT_S = 5.0


class ReadStream:
    """One Read RPC at this broker: `run` validates, resolves, then proxies the read or serves it
    from the local replica, one `next_step` at a time, each step a method (an async generator of
    the responses it sends)."""

    def __init__(
        self,
        broker: BrokerContext,
        req: pb.ReadRequest,
        context: grpc.aio.ServicerContext,
        claims: Claims | None,
    ) -> None:
        self.broker = broker
        self.req = req
        self.context = context
        self.claims = claims
        self.journal, _ = split_journal_meta(req.journal)
        self.offset = req.offset
        self.header: pb.Header | None = None  # sent with the first response, then None
        self.peers_tried_at: int | None = None
        self.jump_checked_at: int | None = None
        self.asked_at: int | None = None
        self.ask_wait = ASK_RETRY_S[0]
        self.step = Step.WAIT  # the step being taken
        self.change = asyncio.Event()  # set at the index's next change after the step's query
        self.done = False  # a step ended the read
        self.index: Index | None = None  # the local replica's, once serving locally

    async def run(self) -> AsyncIterator[pb.ReadResponse]:
        await self._validate()
        req = self.req
        res = await self.broker.resolver.resolve(
            self.journal,
            require_primary=False,
            may_proxy=not req.do_not_proxy,
            min_etcd_revision=req.min_etcd_revision,
            proxy_header=req.header if req.HasField("header") else None,
            claims=self.claims,
        )
        if res.status != Status.OK:
            yield pb.ReadResponse(status=to_pb(res.status), header=res.header)
            return
        if res.replica is None:
            async for resp in self.broker.proxy.read(res, req):
                yield resp
            return
        assert res.spec is not None
        if not res.spec.readable:
            yield pb.ReadResponse(status=to_pb(Status.NOT_ALLOWED), header=res.header)
            return
        self.header = res.header
        async for resp in self._serve_local(res):
            yield resp

    async def _validate(self) -> None:
        req = self.req
        try:
            validate_journal_name(self.journal)
            if req.offset < -1:
                raise ValidationError(f"read offset {req.offset} is invalid (expected >= -1)")
            if req.end_offset and req.end_offset < req.offset:
                raise ValidationError(f"end_offset {req.end_offset} is before offset {req.offset}")
        except GazetteError as exc:
            await self.context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def _with_header(self, resp: pb.ReadResponse) -> pb.ReadResponse:
        if self.header is not None:
            resp.header.CopyFrom(self.header)
            self.header = None
        return resp

    async def _serve_local(self, res: Resolution) -> AsyncIterator[pb.ReadResponse]:
        """The read at this broker's replica: the rules' next step at the read's offset, until a step
        ends the read (`self.done`) or the requested end is reached."""
        req, replica = self.req, res.replica
        assert replica is not None
        index = self.index = replica.index
        await index.wait_first_refresh()
        if self.offset == -1 and replica.is_primary:
            # A primary tells the head once its pipeline synced under the current route (a new
            # primary's index is behind what every member holds until then).
            await replica.sync_for_reads(res.route, PRIMARY_HEAD_TIMEOUT_S)
        if self.offset == -1 and replica.head_behind():
            # A read from the head at a replica whose index is behind what it knows of the journal:
            # it asks the primary how far every member holds it first (as ASK_PRIMARY does).
            await self._release_acknowledged()
        steps = {
            Step.SERVE: self._serve, Step.AT_PRIMARY: self._at_primary, Step.FROM_PEERS: self._from_peers,
            Step.CHECK_JUMP: self._check_jump, Step.ASK_PRIMARY: self._ask_primary, Step.NOT_YET: self._not_yet,
            Step.WAIT: self._wait, Step.WAIT_TO_ASK: self._wait,
        }  # fmt: skip
        while not self.done and not (req.end_offset and self.offset >= req.end_offset):
            self.change = index.changed()  # taken before the query: a change after it is never missed
            q = await index.query(self.offset, False, req.begin_mod_time)  # never waits when not blocking
            if self.offset == -1 and q.status != Status.OK:
                self.offset = q.offset  # a read from the head keeps the head it began at
            self.step = next_step(
                ReadFacts(
                    found=q.status == Status.OK, offset=q.offset, write_head=q.write_head,
                    pending_end=index.pending_end(), is_primary=replica.is_primary, may_proxy=not req.do_not_proxy,
                    storeless=not replica.spec.stores, block=req.block, peers_tried=self.offset == self.peers_tried_at,
                    jump_checked=self.offset == self.jump_checked_at, asked=self.offset == self.asked_at,
                )
            )  # fmt: skip
            async for resp in steps[self.step](res, q):
                yield resp

    async def _serve(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """SERVE: the metadata of the fragment at `q`, then its content from `q.offset` (bounded by
        end_offset). The read ends after the metadata alone for metadata_only, or a jump past the
        requested end (as Gazette's does)."""
        req = self.req
        meta = pb.ReadResponse(status=to_pb(q.status), offset=q.offset, write_head=q.write_head)
        if q.fragment is not None:
            meta.fragment.CopyFrom(q.fragment.to_proto())
        yield self._with_header(meta)
        if req.metadata_only or (req.end_offset and q.offset >= req.end_offset):
            self.done = True
            return
        assert q.fragment is not None
        offset = q.offset
        stop = min(q.fragment.end, req.end_offset) if req.end_offset else q.fragment.end
        if q.file is not None:
            while offset < stop:
                data = q.file.pread(offset, min(tunables.BROKER_READ_CHUNK_BYTES, stop - offset))
                if not data:  # committed bytes the spool file no longer holds: never wait on them
                    problem = (
                        f"broker {self.broker.id[1]}: the spool file of {self.journal} [{q.fragment.begin}, "
                        f"{q.fragment.end}) ends at offset {offset}: it was truncated or damaged on this "
                        "broker's disk (another replica, or the store once persisted, has the content)"
                    )
                    log.error("read of %s failed: %s", self.journal, problem)
                    await self.context.abort(grpc.StatusCode.DATA_LOSS, problem)
                yield pb.ReadResponse(offset=offset, content=data)
                offset += len(data)
        else:
            async for data in _remote_content(q.fragment, offset, stop):
                yield pb.ReadResponse(offset=offset, content=data)
                offset += len(data)
                self.broker.metrics.read_bytes(len(data))
        self.offset = offset

    async def _at_primary(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """AT_PRIMARY: the primary serves the rest of the read."""
        self.done = True
        async for resp in _read_at_primary(self.broker, self.journal, self.req, self.offset):
            yield resp

    async def _from_peers(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """FROM_PEERS: what the first peer holding the offset has from there; the read goes on after it."""
        self.peers_tried_at = self.offset
        async for resp in _read_at_peers(self.broker, res.route, self.req, self.offset):
            self.offset += len(resp.content)
            yield resp if resp.content else self._with_header(resp)
            if self.req.metadata_only:
                self.done = True
                return

    async def _check_jump(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """CHECK_JUMP: a storeless journal whose members all begin past the offset jumps there (past
        the requested end, only the jump is told, and the client's offset moves there)."""
        self.jump_checked_at = self.offset
        first = await _route_begin_offset(self.broker, res.route, self.index, self.journal)
        if first is None or first <= self.offset:
            return
        self.offset = first
        if self.req.end_offset and first >= self.req.end_offset:
            self.done = True
            yield self._with_header(
                pb.ReadResponse(status=to_pb(Status.OK), offset=first, write_head=q.write_head)
            )

    async def _ask_primary(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """ASK_PRIMARY: releases this replica's commits through what the primary says every member holds."""
        self.asked_at = self.offset
        await self._release_acknowledged()
        return
        yield  # (an async generator that sends nothing)

    async def _release_acknowledged(self) -> None:
        """Releases this replica's held-back commits through what the primary says every member holds."""
        head = await acknowledged_at_primary(self.broker, self.journal)
        if head is not None and self.index is not None:
            self.index.acknowledge_through(head)

    async def _not_yet(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """NOT_YET: a non-blocking read ends at what it may be served."""
        self.done = True
        yield self._with_header(
            pb.ReadResponse(
                status=to_pb(Status.OFFSET_NOT_YET_AVAILABLE), offset=q.offset, write_head=q.write_head
            )
        )

    async def _wait(self, res: Resolution, q: QueryResult) -> AsyncIterator[pb.ReadResponse]:
        """WAIT, WAIT_TO_ASK: for the index to change (WAIT_TO_ASK: or a while, then ask again). The
        read ends when the journal's route or spec changes: a read blocked on a replica then unassigned
        from here would wait for ever; the client resumes it where it ended."""
        asking = self.step == Step.WAIT_TO_ASK
        got, _ = await first_of(
            self.change.wait(), res.invalidated, timeout=self.ask_wait if asking else None
        )
        if not got and res.invalidated is not None and res.invalidated.is_set():
            self.done = True
        elif asking:
            self.asked_at = None
            self.ask_wait = min(self.ask_wait * 2, ASK_RETRY_S[1])
        return
        yield  # (an async generator that sends nothing)


async def serve_read(
    broker: BrokerContext,
    req: pb.ReadRequest,
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> AsyncIterator[pb.ReadResponse]:
    """The Read RPC (see ReadStream)."""
    async for resp in ReadStream(broker, req, context, claims).run():
        yield resp


async def acknowledged_at_primary(broker: BrokerContext, journal: str) -> int | None:
    """How far every member holds `journal`, as its primary says: the write head of a metadata-only,
    non-blocking read at the head there (a gazette-py primary's index ends where every member
    acknowledged; a Gazette primary's where it committed). None: no primary answered."""
    res = await broker.resolver.resolve(journal, require_primary=True, may_proxy=True)
    if res.status != Status.OK or res.replica is not None:
        return None
    route = res.header.route
    if route.primary < 0 or route.primary >= len(route.endpoints) or not route.endpoints[route.primary]:
        return None
    req = pb.ReadRequest(journal=journal, offset=-1, block=False, metadata_only=True, do_not_proxy=True)
    call = broker.proxy.stub(route.endpoints[route.primary]).Read(
        req, timeout=PRIMARY_HEAD_TIMEOUT_S, metadata=broker.proxy.metadata(Capability.READ, journal)
    )
    try:
        async for resp in call:
            return int(resp.write_head) if resp.status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE) else None
    except grpc.aio.AioRpcError:
        return None
    finally:
        call.cancel()
    return None


async def _read_at_primary(
    broker: BrokerContext, journal: str, req: pb.ReadRequest, offset: int
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
    broker: BrokerContext, route: pb.Route, req: pb.ReadRequest, offset: int
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


async def _route_begin_offset(broker: BrokerContext, route: pb.Route, index: Any, journal: str) -> int | None:
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
