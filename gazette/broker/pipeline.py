"""Pipeline: the in-flight replication pipeline of one journal at its primary (docs/semantics.md#pipeline).

It holds the primary's Spool and one long-lived Replicate stream to every other member of the route.
`scatter` sends a request to every peer and applies it to the local spool; acknowledgements are read
in order by whoever holds the receive side, so several appends can be in flight (full duplex).
Ownership: the send side belongs to the holder of the replica's pipeline slot; the receive side to
the FSM whose read barrier is set. The spool goes back to the replica's spool slot on `close_send`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from gazette.allocator.journals import route_equivalent
from gazette.broker.wire import encode_replicate_content
from gazette.fragment.fragment import Fragment
from gazette.fragment.spool import Spool
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status

log = logging.getLogger(__name__)


class PipelineError(Exception):
    """A peer of the pipeline failed; the append that saw it fails and the pipeline is dropped."""


def member_name(m: pb.ProcessSpec.ID) -> str:
    return f"{m.zone}#{m.suffix}"


class Pipeline:
    """The primary's replication pipeline for one journal: its spool plus one Replicate stream per
    other route member (docs/semantics.md#pipeline). Holding it means holding every replica's
    spool, so a synced pipeline is the journal's write lock. Built by the append FSM in
    StartPipeline, reused by appends while the route is unchanged, shut down when it changes or a
    peer fails (`PipelineError`)."""

    def __init__(
        self,
        header: pb.Header,
        spool: Spool,
        spool_slot: asyncio.Queue[Spool],
        open_stream: Callable[[str], grpc.aio.StreamStreamCall],
    ) -> None:
        route = header.route
        if route.primary < 0:
            raise ValueError("a pipeline needs a route with a primary")
        self.header = header
        self.route = route
        self.spool = spool
        self._spool_slot = spool_slot
        n = len(route.members)
        self.streams: list[grpc.aio.StreamStreamCall | None] = [None] * n
        self.send_errs: list[BaseException | None] = [None] * n
        self.recv_errs: list[BaseException | None] = [None] * n
        self.recv_resp: list[pb.ReplicateResponse | None] = [None] * n
        self._read_barrier = asyncio.Event()
        self._read_barrier.set()
        self._spool_returned = False
        for i, member in enumerate(route.members):
            if i == route.primary:
                continue
            endpoint = route.endpoints[i] if i < len(route.endpoints) else ""
            if not endpoint:
                self.send_errs[i] = PipelineError(f"peer {member_name(member)} has no endpoint")
                continue
            self.streams[i] = open_stream(endpoint)
        self._has_peers = any(s is not None for s in self.streams)

    @property
    def peers(self) -> int:
        """How many peer streams are open (route members other than the primary, with an endpoint)."""
        return sum(1 for s in self.streams if s is not None)

    # --- send side -------------------------------------------------------------------------------
    async def scatter(self, req: pb.ReplicateRequest) -> None:
        """Sends `req` to every peer whose stream is healthy, then applies it to the local spool.

        All or nothing under cancellation: a cancelled Append (its client went away) must not leave a
        proposal applied by the peers and not by the primary, or the next pipeline sync would roll the
        primary past content only the replicas hold (a hole in its index). So once started, the sends
        and the local apply run to their end and the cancellation is raised after them, as Gazette's
        scatter, which has no cancellation point between its sends and its apply.
        """
        if not self._has_peers:
            self._apply(req)
            return
        await _uninterrupted(self._send_then_apply(req))

    async def scatter_content(self, content: bytes | memoryview, content_delta: int) -> None:
        """`scatter` of ReplicateRequest(content=content, content_delta=content_delta), encoded once
        for all peers straight from `content` (no protobuf message, no copy beyond the encoding)."""
        if not self._has_peers:
            self.spool.apply_content(content, content_delta)
            return
        await _uninterrupted(self._send_content_then_apply(content, content_delta))

    async def _send_then_apply(self, req: pb.ReplicateRequest) -> None:
        has_header = req.HasField("header")
        data = b"" if has_header else req.SerializeToString()  # once for all peers
        for i, stream in enumerate(self.streams):
            if stream is None or self.send_errs[i] is not None:
                continue
            if has_header:
                out = pb.ReplicateRequest()
                out.CopyFrom(req)
                out.header.process_id.CopyFrom(self.route.members[i])
                data = out.SerializeToString()
            await self._send(i, stream, data)
        self._apply(req)

    async def _send_content_then_apply(self, content: bytes | memoryview, content_delta: int) -> None:
        data = encode_replicate_content(content, content_delta)
        for i, stream in enumerate(self.streams):
            if stream is not None and self.send_errs[i] is None:
                await self._send(i, stream, data)
        self.spool.apply_content(content, content_delta)

    async def _send(self, i: int, stream: grpc.aio.StreamStreamCall, data: bytes) -> None:
        try:
            await _write_keeping_status(stream, data)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the real cause is read on receive
            self.send_errs[i] = exc

    def _apply(self, req: pb.ReplicateRequest) -> None:
        spool = self.spool
        if req.HasField("proposal"):
            status, _, _ = spool.apply_proposal(
                Fragment.from_proto(req.proposal), LabelSet.from_proto(req.registers)
            )
            if status != Status.OK:
                # Proposals are derived from this very spool: a refusal is a bug, not a peer fault.
                raise RuntimeError(
                    f"primary spool of {spool.journal} refused its own proposal: {status.name}"
                )
        else:
            spool.apply_content(req.content, req.content_delta)

    def send_err(self) -> PipelineError | None:
        """The first peer's send failure, naming the peer (None: every send went through). A send
        may only report EOF; the cause is read on the receive side (`recv_err`)."""
        for i, err in enumerate(self.send_errs):
            if err is not None:
                return PipelineError(f"send to {member_name(self.route.members[i])}: {_describe(err)}")
        return None

    async def close_send(self) -> None:
        """Rolls back partial local content, returns the spool, and half-closes every peer stream."""
        if self._spool_returned:
            return
        self._spool_returned = True
        self.spool.rollback()
        self._spool_slot.put_nowait(self.spool)
        for i, stream in enumerate(self.streams):
            if stream is not None and self.send_errs[i] is None:
                try:
                    await stream.done_writing()
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    self.send_errs[i] = exc

    # --- receive side ----------------------------------------------------------------------------
    def barrier(self) -> tuple[asyncio.Event, asyncio.Event]:
        """Installs a read barrier: wait on the first event, read responses, then set the second."""
        wait_for, self._read_barrier = self._read_barrier, asyncio.Event()
        return wait_for, self._read_barrier

    async def gather(self) -> None:
        """Receives one response from every healthy peer."""
        for i, stream in enumerate(self.streams):
            if stream is None or self.recv_errs[i] is not None:
                continue
            try:
                resp = await stream.read()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.recv_errs[i] = exc
                continue
            if resp is grpc.aio.EOF:
                self.recv_errs[i] = PipelineError("unexpected EOF")
            else:
                self.recv_resp[i] = resp

    async def gather_ok(self) -> None:
        """Reads one response per peer and records any status other than OK as that peer's error."""
        await self.gather()
        for i, stream in enumerate(self.streams):
            resp = self.recv_resp[i]
            if stream is None or self.recv_errs[i] is not None or resp is None:
                continue
            if resp.status != pb.OK:
                self.recv_errs[i] = PipelineError(f"unexpected {pb.Status.Name(resp.status)} response")

    async def gather_sync(self) -> tuple[int, LabelSet | None, int]:
        """Gathers sync responses: (roll_to_offset, roll_to_registers, read_through_revision), all
        zero/None when every peer agreed (RecvPipelineSync in docs/semantics.md#append-fsm)."""
        await self.gather()
        roll_to, roll_registers, read_through = 0, None, 0
        end = self.spool.fragment.end
        for i, stream in enumerate(self.streams):
            resp = self.recv_resp[i]
            if stream is None or self.recv_errs[i] is not None or resp is None:
                continue
            if resp.status == pb.OK:
                continue
            if resp.status == pb.WRONG_ROUTE:
                if (
                    not route_equivalent(resp.header.route, self.route)
                    and resp.header.etcd.revision > self.header.etcd.revision
                ):
                    read_through = max(read_through, resp.header.etcd.revision)
                else:
                    self.recv_errs[i] = PipelineError(f"unexpected WRONG_ROUTE: {resp.header}")
            elif resp.status == pb.PROPOSAL_MISMATCH:
                peer_end = resp.fragment.end
                if peer_end > end:
                    if peer_end > roll_to:
                        roll_to, roll_registers = peer_end, LabelSet.from_proto(resp.registers)
                elif peer_end == end and resp.fragment.begin == resp.fragment.end:
                    roll_to = max(roll_to, peer_end)
                else:
                    self.recv_errs[i] = PipelineError(
                        f"unexpected PROPOSAL_MISMATCH: peer has [{resp.fragment.begin}, {peer_end}), "
                        f"registers {LabelSet.from_proto(resp.registers)}"
                    )
            else:
                self.recv_errs[i] = PipelineError(f"unexpected {pb.Status.Name(resp.status)} response")
            self.recv_resp[i] = None
        return roll_to, roll_registers, read_through

    async def gather_eof(self) -> None:
        """Reads the expected end of every healthy peer stream after a half-close."""
        for i, stream in enumerate(self.streams):
            if stream is None or self.recv_errs[i] is not None:
                continue
            try:
                resp = await stream.read()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.recv_errs[i] = exc
                continue
            if resp is not grpc.aio.EOF:
                self.recv_errs[i] = PipelineError(f"unexpected response {resp.status} instead of EOF")

    def recv_err(self) -> PipelineError | None:
        """The first peer's receive failure or unexpected response, naming the peer (None: all OK)."""
        for i, err in enumerate(self.recv_errs):
            if err is not None:
                return PipelineError(f"recv from {member_name(self.route.members[i])}: {_describe(err)}")
        return None

    # --- teardown --------------------------------------------------------------------------------
    async def shutdown(self, expect_err: bool) -> None:
        """Gracefully ends the pipeline: half-close, wait our turn, read every peer's EOF."""
        wait_for, close_after = self.barrier()
        try:
            await self.close_send()
            await wait_for.wait()
            await self.gather_eof()
            if not expect_err and (err := self.recv_err() or self.send_err()) is not None:
                log.warning("tearing down pipeline of %s: %s", self.spool.journal, err)
        finally:
            close_after.set()
            self.cancel_streams()

    def cancel_streams(self) -> None:
        """Cancels every peer stream at once (the end of `shutdown`, or a pipeline abandoned mid-use)."""
        for stream in self.streams:
            if stream is not None:
                stream.cancel()


async def _uninterrupted(coro: Coroutine[Any, Any, None]) -> None:
    """Runs `coro` to its end in a task of its own; a cancellation of the caller meanwhile is raised
    only once it has ended (see `Pipeline.scatter`)."""
    work = asyncio.ensure_future(coro)
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                continue
        work.result()
        raise


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__


async def _write_keeping_status(stream: grpc.aio.StreamStreamCall, data: bytes) -> None:
    """Writes one serialized request to a peer's stream such that, if the peer already ended the call,
    the status it ended it with survives for the receive side.

    grpc.aio's `write()` answers a send that fails because the server has just sent its trailers
    by replacing the call's status with INTERNAL "Internal error from Core" (grpc/grpc#36066), so a
    replica's named failure (a full spool disk: RESOURCE_EXHAUSTED naming the broker and directory)
    would reach the appender as that. Once the call's metadata is out, the send goes to the call's
    core object directly and a failure is reported as a plain error, leaving the status to `read()`.
    Elsewhere (first write, or a grpc without that object) it is `write()`.
    """
    core = getattr(stream, "_cython_call", None)
    sent = getattr(stream, "_metadata_sent", None)
    if core is None or sent is None or not sent.is_set():
        await stream.write(data)
        return
    if stream.done():
        raise PipelineError("the peer's stream has ended")
    try:
        await core.send_serialized_message(data)
    except asyncio.CancelledError:
        if not stream.cancelled():
            stream.cancel()
        raise
    except Exception as exc:  # cygrpc.InternalError: the call is over; its status arrives on read
        raise PipelineError(f"send to peer failed: {exc}") from exc
