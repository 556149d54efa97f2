"""The Replicate RPC, a replica's side of the pipeline (docs/semantics.md#replicate).

The first request carries the primary's header; once the route it names is the one this broker
resolves, the stream owns the replica's spool and applies every request to it, acknowledging those
that ask. The stream ends (and the spool is rolled back and released) when the primary closes it, a
request fails, or this broker sees the journal's route change: a primary that lost its route must not
go on writing here (docs/semantics.md#revisions-and-the-keyspace).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from gazette import tunables
from gazette.allocator.journals import route_equivalent
from gazette.auth.tokens import Claims
from gazette.broker.failures import spool_write_failure
from gazette.broker.wire import ReplicateContent
from gazette.fragment.fragment import Fragment
from gazette.fragment.spool import Spool, SpoolError
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import validate_journal_name
from gazette.tasks import cancel_and_wait, first_of

if TYPE_CHECKING:
    from gazette.broker.context import BrokerContext
    from gazette.broker.replica import Replica
    from gazette.broker.resolver import Resolution

log = logging.getLogger(__name__)

SPOOL_RECHECK_S = 0.5  # a stream waiting for the spool looks again this often for an idle pipeline
Request = pb.ReplicateRequest | ReplicateContent  # content-only requests come decoded raw (broker/wire.py)


def apply_replicate(spool: Spool, req: Request) -> pb.ReplicateResponse | None:
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


@dataclasses.dataclass(frozen=True)
class _StreamEnd:
    """The inbox's last item, saying why the stream ends: the primary closed it (the default), its
    stream broke (`error`), or this broker saw the journal's route change."""

    route_changed: bool = False
    error: Exception | None = None


class ReplicateStream:
    """One Replicate RPC at this broker (docs/semantics.md#replicate), a method per phase:
    `_first_request` validates the primary's first request; `_acquire_spool` resolves the journal at
    the primary's header and takes the replica's spool (`_take_spool`, one attempt); `_start`
    arranges the spool's give-back and starts the pump and the route watcher; `_apply` and
    `_next_request` are the loop over the primary's requests; `_finish` stops the tasks, sets the
    stream's status and gives the spool back (`_release`). `serve` drives them and is the stream's
    only generator: every response is yielded there."""

    def __init__(
        self,
        broker: BrokerContext,
        requests: AsyncIterator[Request],
        context: grpc.aio.ServicerContext,
        claims: Claims | None = None,
    ) -> None:
        self.broker = broker
        self.requests = requests
        self.context = context
        self.claims = claims
        self.first = pb.ReplicateRequest()
        self.journal = ""
        self.replica: Replica | None = None
        self.spool: Spool | None = None  # the replica's, owned from `_acquire_spool` to `_release`
        self.header: pb.Header | None = None  # sent with the first acknowledgement only
        # One queue carries the primary's requests (pumped by a task of ours) and, last, why the stream
        # ends: the route watcher ends it that way, without cancelling gRPC's own task.
        self.inbox: asyncio.Queue[Request | _StreamEnd] = asyncio.Queue()
        self.pump: asyncio.Task | None = None
        self.route_watch: asyncio.Task | None = None
        self.failed_with: tuple[grpc.StatusCode, str] | None = None  # a refused request: the stream's status
        self.released = False

    async def serve(self) -> AsyncIterator[pb.ReplicateResponse]:
        if await self._first_request() is None:
            return
        refusal = await self._acquire_spool()
        if refusal is not None:
            yield refusal
            return
        self._start()  # with no await since the spool was taken: nothing can lose it in between
        try:
            req: Request | None = self.first
            while req is not None:
                resp = await self._apply(req)
                if self.failed_with is not None:
                    return
                if resp is not None:
                    yield resp
                req = await self._next_request()
        finally:
            await self._finish()

    async def _first_request(self) -> pb.ReplicateRequest | None:
        """The primary's first request: a header and a proposal of a valid journal, asking an
        acknowledgement. None if the primary sent nothing; otherwise a bad one aborts the stream."""
        try:
            first = await anext(self.requests)
        except StopAsyncIteration:
            return None
        problem = "the first ReplicateRequest must carry a header and a proposal with acknowledge"
        if (
            isinstance(first, pb.ReplicateRequest)
            and first.HasField("header")
            and first.HasField("proposal")
            and first.acknowledge
        ):
            try:
                validate_journal_name(first.proposal.journal)
                problem = ""
            except Exception as exc:
                problem = str(exc)
        if problem:
            await self.context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
            return None
        assert isinstance(first, pb.ReplicateRequest)
        self.first, self.journal = first, first.proposal.journal
        return first

    async def _acquire_spool(self) -> pb.ReplicateResponse | None:
        """Resolves the journal at the primary's header until this broker's replica of it is built and
        its spool taken (None: `replica`, `spool` and `header` are set), or refuses the stream with the
        response to send: the journal does not resolve here, or not under the primary's route."""
        while True:
            res = await self.broker.resolver.resolve(
                self.journal,
                require_primary=False,
                may_proxy=False,
                proxy_header=self.first.header,
                claims=self.claims,
            )
            if res.status != Status.OK:
                return pb.ReplicateResponse(status=to_pb(res.status), header=res.header)
            if not route_equivalent(res.header.route, self.first.header.route):
                return pb.ReplicateResponse(status=to_pb(Status.WRONG_ROUTE), header=res.header)
            assert res.invalidated is not None
            if res.replica is None:
                await asyncio.sleep(tunables.REPLICA_WAIT_S)  # assigned here, replica not built yet
                continue
            spool = await self._take_spool(res.replica, res)
            if spool is not None:
                self.replica, self.spool, self.header = res.replica, spool, res.header
                return None

    async def _take_spool(self, replica: Replica, res: Resolution) -> Spool | None:
        """One attempt at the replica's spool: taken at once if it is in its slot; else waited for up
        to SPOOL_RECHECK_S or until the journal's assignments change. None: resolve and try again."""
        if replica.spool_slot.qsize():
            return replica.spool_slot.get_nowait()
        stale = None
        if replica.pipeline_slot.qsize():  # (empty while an append holds the pipeline: leave it be)
            stale = replica.pipeline_slot.get_nowait()
            replica.pipeline_slot.put_nowait(None)  # no await in between: nobody sees the slot empty
        if stale is not None:
            # The route names another primary, yet a pipeline this broker built while it was the
            # journal's primary sits idle in its slot, holding the spool (nobody else would ever
            # shut it down): the new primary's stream would wait for the spool for ever, and with
            # it every append to the journal. Shut it down; its spool goes back to the slot.
            log.info(
                "Replicate of %s: shutting down this broker's idle pipeline of a former primacy", self.journal
            )
            await stale.shutdown(expect_err=True)
            return None
        got, spool = await first_of(
            replica.spool_slot.get(),
            res.invalidated,
            timeout=SPOOL_RECHECK_S,
            give_back=replica.spool_slot.put_nowait,
        )  # a spool taken just as this stream is cancelled goes back, else the replica would lose it
        return spool if got else None

    def _start(self) -> None:
        """Arranges the spool's give-back (also if gRPC ends the RPC without resuming `serve`) and
        starts the pump of the primary's requests and the route watcher."""
        self.context.add_done_callback(self._release)
        self.pump = asyncio.create_task(self._pump(), name=f"replicate pump {self.journal}")
        self.route_watch = asyncio.create_task(
            self._watch_route(), name=f"replicate route watch {self.journal}"
        )

    async def _pump(self) -> None:
        try:
            async for r in self.requests:
                self.inbox.put_nowait(r)
            self.inbox.put_nowait(_StreamEnd())
        except Exception as exc:  # the primary's stream broke
            self.inbox.put_nowait(_StreamEnd(error=exc))

    async def _watch_route(self) -> None:
        while True:
            await self.broker.resolver.invalidation(self.journal).wait()
            if not route_equivalent(self.broker.resolver.route_of(self.journal), self.first.header.route):
                self.inbox.put_nowait(_StreamEnd(route_changed=True))
                return

    async def _apply(self, req: Request) -> pb.ReplicateResponse | None:
        """Applies one request to the spool; returns the acknowledgement to send, if it asked one. A
        request the spool cannot take sets `failed_with`; a refused proposal that asked no
        acknowledgement aborts the stream."""
        assert self.spool is not None
        try:
            resp = apply_replicate(self.spool, req)
        except SpoolError as exc:
            log.warning("Replicate of %s failed: %s", self.journal, exc)
            self.failed_with = (grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            return None
        except OSError as exc:  # this replica's spool file could not take the content (a full disk)
            failed = spool_write_failure(self.broker, self.journal, exc)
            log.error("Replicate of %s failed: %s", self.journal, failed)
            self.failed_with = (failed.code, str(failed).removeprefix("append rolled back: "))
            return None
        if resp is None:
            return None  # content: nothing to acknowledge
        if req.acknowledge:
            if self.header is not None:
                resp.header.CopyFrom(self.header)
                self.header = None
            return resp
        if resp.status != pb.OK:
            await self.context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no acknowledgement requested but the proposal was refused ({pb.Status.Name(resp.status)})",
            )
        return None

    async def _next_request(self) -> Request | None:
        """The primary's next request; None when the stream ends (the primary closed it, or this
        broker saw the journal's route change). Raises what broke the primary's stream."""
        item = await self.inbox.get()
        if not isinstance(item, _StreamEnd):
            return item
        if item.error is not None:
            raise item.error
        if item.route_changed:
            log.info("Replicate of %s ended: the journal's route changed", self.journal)
        return None

    async def _finish(self) -> None:
        """Stops the pump and the route watcher, sets the stream's status if a request failed, and
        gives the spool back."""
        assert self.pump is not None and self.route_watch is not None
        if self.failed_with is None:
            await cancel_and_wait(self.pump)
            await cancel_and_wait(self.route_watch)
        else:
            # Ends the stream with this status once the handler returns. Not `context.abort`, and the
            # pump is left reading (it ends with the call): cancelling its pending read of the
            # primary's stream can lose the status to gRPC's "Internal error from Core".
            await cancel_and_wait(self.route_watch)
            self.context.set_code(self.failed_with[0])
            self.context.set_details(self.failed_with[1])
        self._release()

    def _release(self, *_: object) -> None:
        """Rolls back partial content and hands the spool back, once (also if gRPC ends the RPC
        without resuming `serve`)."""
        if not self.released and self.spool is not None and self.replica is not None:
            self.released = True
            self.spool.rollback()
            self.replica.spool_slot.put_nowait(self.spool)


def serve_replicate(
    broker: BrokerContext,
    requests: AsyncIterator[Request],
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> AsyncIterator[pb.ReplicateResponse]:
    """The Replicate RPC: the responses of one `ReplicateStream`."""
    return ReplicateStream(broker, requests, context, claims).serve()
