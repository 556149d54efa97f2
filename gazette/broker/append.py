"""The Append RPC: the append FSM (docs/semantics.md#append-fsm) with every state, over a replication
Pipeline.

Resolve -> AcquirePipeline -> StartPipeline -> SendPipelineSync <-> RecvPipelineSync ->
UpdateAssignments -> AwaitDesiredReplicas -> ValidatePreconditions (-> UpdateSuspend) ->
StreamContent -> ReadAcknowledgements, ending in Finished, Error or Proxy. The FSM owns the
replica's pipeline slot from AcquirePipeline until it hands the send side back in
ReadAcknowledgements; acknowledgements are then read in order behind a read barrier, so appends
overlap (full duplex). Commit = an empty content message then half-close; anything else rolls back.
The pulse and Flush run the same FSM as zero-byte appends.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from gazette import tunables
from gazette.allocator.journals import journal_desired_replication, route_equivalent
from gazette.auth.tokens import Claims
from gazette.broker.assignments import (
    assignments_match,
    assignments_of,
    update_assignments,
    update_suspend,
)
from gazette.broker.failures import AppendFailed, spool_write_failure
from gazette.broker.flow import FlowControlUnderflow
from gazette.broker.pipeline import Pipeline
from gazette.broker.resolver import Resolution
from gazette.broker.wire import ContentChunk
from gazette.fragment.fragment import ZERO_SUM, Codec, Fragment
from gazette.fragment.health import health_of
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import SuspendLevel
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import (
    split_journal_meta,
    validate_journal_name,
    validate_label_name,
    validate_label_value,
)
from gazette.tasks import first_of

if TYPE_CHECKING:
    from gazette.broker.context import BrokerContext
    from gazette.broker.replica import Replica

log = logging.getLogger(__name__)

# Appends wait for an unhealthy primary store through this many failed checks
# (docs/semantics.md#fragment-stores).
STORE_HEALTH_MAX_FAILED_CHECKS = 5
# SUSPEND_IF_FLUSHED takes a journal whose spec has no flush_interval as idle once its last fragment
# has been persisted this long (Gazette's default of the idle window).
IDLE_FLUSH_INTERVAL_S = 24 * 3600.0

SUSPEND = pb.AppendRequest.Suspend
# What the Append RPC's request stream yields: content-only requests come decoded raw (broker/wire.py).
AppendChunk = pb.AppendRequest | ContentChunk


class State(enum.Enum):
    RESOLVE = "Resolve"
    ACQUIRE_PIPELINE = "AcquirePipeline"
    START_PIPELINE = "StartPipeline"
    SEND_PIPELINE_SYNC = "SendPipelineSync"
    RECV_PIPELINE_SYNC = "RecvPipelineSync"
    UPDATE_ASSIGNMENTS = "UpdateAssignments"
    AWAIT_DESIRED_REPLICAS = "AwaitDesiredReplicas"
    VALIDATE_PRECONDITIONS = "ValidatePreconditions"
    UPDATE_SUSPEND = "UpdateSuspend"
    STREAM_CONTENT = "StreamContent"
    READ_ACKNOWLEDGEMENTS = "ReadAcknowledgements"
    ERROR = "Error"
    PROXY = "Proxy"
    FINISHED = "Finished"


class AppendFSM:
    """One Append RPC (or pulse, or Flush) at this broker, as Gazette's append state machine
    (docs/semantics.md#append-fsm). Each `_on_<state>` handler checks one thing and sets the next
    `state`; `run` drives it over the client's content stream and `response` gives the reply.
    While it owns the replica's pipeline slot no other append can send; it hands the send side back
    before reading acknowledgements, so consecutive appends overlap."""

    def __init__(
        self,
        broker: BrokerContext,
        req: pb.AppendRequest,
        *,
        force_roll: bool = False,
        claims: Claims | None = None,
    ) -> None:
        self.broker = broker
        self.req = req
        self.claims = claims  # the caller's verified authorization (None: this broker's own, or no auth)
        self.journal, _ = split_journal_meta(req.journal)
        self.force_roll = force_roll
        self.state = State.RESOLVE
        self.res: Resolution | None = None
        self.replica: Replica | None = None
        self.pln: Pipeline | None = None
        self.owns_pipeline = False  # Go's plnReturnCh != nil
        self.read_through_rev = 0
        self.roll_to = 0
        self.registers = LabelSet()
        self.next_suspend: tuple[SuspendLevel, int] | None = None
        self.status = Status.OK
        self.err: AppendFailed | None = None
        self.store_health_error = ""
        self.client_commit = False
        self.client_begin = 0
        self.client_length = 0
        self.client_sum = hashlib.sha1()
        self.total_chunks = 0
        self.delayed_chunks = 0  # chunks the journal's max_append_rate held back (broker/flow.py)
        self.pln_codec = Codec.NONE
        self.rolled: Fragment | None = None
        self.proposed_end = 0  # the end of the proposal StreamContent sent
        self._cancelled = False

    # --- driving ---------------------------------------------------------------------------------
    async def run_to_stream(self) -> State:
        """Runs until StreamContent or a terminal state, which it returns."""
        handlers = {
            State.RESOLVE: self._on_resolve,
            State.ACQUIRE_PIPELINE: self._on_acquire_pipeline,
            State.START_PIPELINE: self._on_start_pipeline,
            State.SEND_PIPELINE_SYNC: self._on_send_pipeline_sync,
            State.RECV_PIPELINE_SYNC: self._on_recv_pipeline_sync,
            State.UPDATE_ASSIGNMENTS: self._on_update_assignments,
            State.AWAIT_DESIRED_REPLICAS: self._on_await_desired_replicas,
            State.VALIDATE_PRECONDITIONS: self._on_validate_preconditions,
            State.UPDATE_SUSPEND: self._on_update_suspend,
        }
        while self.state in handlers:
            await handlers[self.state]()
        return self.state

    async def run(self, requests: AsyncIterator[AppendChunk]) -> State:
        """The whole FSM over a client's content stream (already past its first message)."""
        try:
            if await self.run_to_stream() != State.STREAM_CONTENT:
                return self.state
            await self._stream_content(requests)
            await self._read_acknowledgements()
        except BaseException:
            # Interrupted (the client's cancellation can land inside any scatter or gather) while
            # holding the pipeline: peers may hold content, a proposal or a pending response the
            # local spool and the next reader know nothing of, so the pipeline must not be reused.
            if self.owns_pipeline and self.pln is not None:
                self._drop_pipeline(expect_err=True)
            raise
        finally:
            self.return_pipeline()
        if self._cancelled:
            raise asyncio.CancelledError()
        return self.state

    def return_pipeline(self) -> None:
        """Puts the pipeline (or None, if it was dropped) back in the replica's slot if this FSM
        holds it, so the next append can send; a no-op otherwise."""
        if self.owns_pipeline and self.replica is not None:
            self.replica.pipeline_slot.put_nowait(self.pln)
            self.owns_pipeline = False
            self.pln = None

    def response(self) -> pb.AppendResponse:
        """The AppendResponse of the finished FSM: status, header, registers where the status
        carries them, and on success the commit fragment of just this client's bytes."""
        assert self.res is not None
        resp = pb.AppendResponse(
            status=to_pb(self.status), header=self.res.header, total_chunks=self.total_chunks,
            delayed_chunks=self.delayed_chunks,
        )  # fmt: skip
        if self.status in (
            Status.OK,
            Status.REGISTER_MISMATCH,
            Status.WRONG_APPEND_OFFSET,
            Status.INDEX_HAS_GREATER_OFFSET,
        ):
            resp.registers.CopyFrom(self.registers.to_proto())
        if self.store_health_error:
            resp.store_health_error = self.store_health_error
        if self.state == State.FINISHED:
            commit = Fragment(
                journal=self.journal,
                begin=self.client_begin,
                end=self.client_begin + self.client_length,
                sum=self.client_sum.digest() if self.client_length else ZERO_SUM,
                codec=self.pln_codec,
            )
            resp.commit.CopyFrom(commit.to_proto())
        return resp

    def _fail(self, message: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self.err = AppendFailed(message, code)
        self.state = State.ERROR

    def _drop_pipeline(self, expect_err: bool) -> None:
        pln, self.pln = self.pln, None
        if pln is not None:
            self.broker.background(pln.shutdown(expect_err), f"pipeline shutdown {self.journal}")

    # --- states ----------------------------------------------------------------------------------
    async def _on_resolve(self) -> None:
        req = self.req
        try:
            res = await self.broker.resolver.resolve(
                self.journal,
                require_primary=True,
                may_proxy=not req.do_not_proxy,
                min_etcd_revision=max(req.min_etcd_revision, self.read_through_rev),
                proxy_header=req.header if req.HasField("header") else None,
                claims=self.claims,
            )
        except ValueError as exc:
            self._fail(f"resolve: {exc}", grpc.StatusCode.INVALID_ARGUMENT)
            return
        self.res = res
        local = (
            res.header.process_id.zone == self.broker.zone
            and res.header.process_id.suffix == self.broker.suffix
        )
        if res.status == Status.SUSPENDED and req.suspend == SUSPEND.SUSPEND_RESUME:
            assert res.spec is not None
            self.next_suspend = (SuspendLevel.NONE, res.spec.suspend_offset)
            self.state = State.UPDATE_SUSPEND
        elif res.status != Status.OK:
            self.status = res.status
            self.state = State.ERROR
        elif not local:
            self.return_pipeline()  # no longer primary: release what we held
            self.state = State.AWAIT_DESIRED_REPLICAS
        elif res.replica is None:
            await asyncio.sleep(tunables.REPLICA_WAIT_S)  # assigned here, replica not built yet
        else:
            if self.owns_pipeline and res.replica is not self.replica:
                self.return_pipeline()  # the replica was rebuilt (journal re-created)
            self.replica = res.replica
            self.state = State.START_PIPELINE if self.owns_pipeline else State.ACQUIRE_PIPELINE
            if res.spec is not None and res.spec.stores and not self.owns_pipeline:
                # Store health before taking the pipeline, so waiting on a sick store blocks no one
                # else; and first, since a store down from the start never completes a refresh.
                err = await health_of(res.spec.stores[0]).wait_healthy(STORE_HEALTH_MAX_FAILED_CHECKS)
                if err is not None:
                    self.status, self.store_health_error = Status.FRAGMENT_STORE_UNHEALTHY, err
                    self.state = State.ERROR

    async def _on_acquire_pipeline(self) -> None:
        assert self.replica is not None and self.res is not None
        slot = self.replica.pipeline_slot
        if slot.qsize():
            self.pln = slot.get_nowait()
        else:
            got, pln = await first_of(slot.get(), self.res.invalidated, give_back=slot.put_nowait)
            if not got:
                self.state = State.RESOLVE
                return
            self.pln = pln
        self.owns_pipeline = True
        if self.res.invalidated is not None and self.res.invalidated.is_set():
            self.state = State.RESOLVE
        else:
            self.state = State.START_PIPELINE

    async def _on_start_pipeline(self) -> None:
        assert self.replica is not None and self.res is not None
        pln = self.pln
        if (
            pln is not None
            and route_equivalent(pln.route, self.res.route)
            and pln.send_err() is None
            and pln.recv_err() is None
        ):
            self.registers = pln.spool.registers
            self.state = State.UPDATE_ASSIGNMENTS
            return
        if pln is not None:
            self._drop_pipeline(expect_err=pln.send_err() is not None or pln.recv_err() is not None)
        slot = self.replica.spool_slot
        if slot.qsize():
            spool = slot.get_nowait()
        else:
            got, taken = await first_of(slot.get(), self.res.invalidated, give_back=slot.put_nowait)
            if not got or taken is None:
                self.state = State.RESOLVE
                return
            spool = taken
        self.registers = spool.registers
        self.roll_to = 0
        journal, proxy = self.journal, self.broker.proxy
        self.pln = Pipeline(self.res.header, spool, slot, lambda endpoint: proxy.replicate(endpoint, journal))
        self.state = State.SEND_PIPELINE_SYNC

    async def _on_send_pipeline_sync(self) -> None:
        assert self.pln is not None and self.res is not None and self.res.spec is not None
        spec = self.res.spec
        proposal = self.pln.spool.maybe_roll(
            spec.fragment_length, spec.compression, spec.flush_interval, self.roll_to
        )
        req = pb.ReplicateRequest(
            proposal=proposal.to_proto(), registers=self.registers.to_proto(), acknowledge=True
        )
        if self.roll_to == 0:
            req.header.CopyFrom(self.pln.header)
            req.deprecated_journal = self.journal
        await self.pln.scatter(req)
        self.state = State.RECV_PIPELINE_SYNC

    async def _on_recv_pipeline_sync(self) -> None:
        assert self.pln is not None
        roll_to, roll_registers, read_through = await self.pln.gather_sync()
        err = self.pln.recv_err() or self.pln.send_err()
        if err is not None:
            self._drop_pipeline(expect_err=True)
            self._fail(f"pipeline sync of {self.journal}: {err}")
            return
        if roll_to:
            own_end = self.pln.spool.fragment.end
            if roll_to > own_end and self.replica is not None:
                # A peer has commits this primary lacks: the journal moves past them, and only that
                # peer's spool (persisted promptly, see Spool) holds [own_end, roll_to). List the
                # stores until they do, so readers here are not left waiting on the gap.
                log.info(
                    "pipeline sync of %s rolls forward from %d to a peer's end %d",
                    self.journal,
                    own_end,
                    roll_to,
                )
                self.replica.refresh_until_covered(own_end, roll_to)
            self.roll_to = roll_to
            if roll_registers is not None:
                self.registers = roll_registers
            self.state = State.SEND_PIPELINE_SYNC
        elif read_through:
            self._drop_pipeline(expect_err=False)
            self.read_through_rev = read_through
            self.state = State.RESOLVE
        else:
            # Every member of the route agreed on the spool's fragment: each holds its commits.
            if self.replica is not None:
                self.replica.index.acknowledge_through(self.pln.spool.fragment.end)
                self.replica.synced_route = self.pln.route
            self.state = State.UPDATE_ASSIGNMENTS

    async def _on_update_assignments(self) -> None:
        assert self.res is not None
        assignments = assignments_of(self.broker.ks, self.journal)
        if assignments_match(assignments, self.res.route):
            self.state = State.AWAIT_DESIRED_REPLICAS
            return
        try:
            ok, revision = await update_assignments(self.broker.etcd, assignments, self.res.route)
        except Exception as exc:
            self._fail(f"updating assignments of {self.journal}: {exc}")
            return
        # Either way the KeySpace moves on: resolve again once it has seen the change.
        self.read_through_rev = revision
        self.state = State.RESOLVE

    async def _on_await_desired_replicas(self) -> None:
        res = self.res
        assert res is not None and res.spec is not None
        n, desired = (
            len(res.route.members),
            journal_desired_replication(res.spec, self.broker.max_replication),
        )
        local = (
            res.header.process_id.zone == self.broker.zone
            and res.header.process_id.suffix == self.broker.suffix
        )
        if n > desired:
            # The allocator is mid-migration: never append to N > R members nor proxy to an outgoing primary.
            self.read_through_rev = res.header.etcd.revision + 1
            self.state = State.RESOLVE
        elif n < desired:
            self.status = Status.INSUFFICIENT_JOURNAL_BROKERS
            self.state = State.ERROR
        elif not local:
            self.state = State.PROXY
        else:
            self.state = State.VALIDATE_PRECONDITIONS

    async def _on_validate_preconditions(self) -> None:
        res, replica, pln, req = self.res, self.replica, self.pln, self.req
        assert res is not None and res.spec is not None and replica is not None and pln is not None
        spec = res.spec
        if not replica.index.first_refresh_done:
            got, _ = await first_of(replica.index.wait_first_refresh(), res.invalidated)
            if not got:
                self.state = State.RESOLVE
                return
        index_min, index_max, index_mod_time = replica.index.summary()
        # As Gazette: the index is dirty (the journal is in use, not idle) unless its last fragment
        # was persisted more than a flush interval ago; a local fragment (mod_time 0) is always dirty.
        idle_window = spec.flush_interval or IDLE_FLUSH_INTERVAL_S
        index_dirty = index_mod_time == 0 or index_mod_time > time.time() - idle_window
        spool_end = pln.spool.fragment.end
        max_offset = max(spool_end, index_max)

        if req.HasField("check_registers") and self.registers:
            if not LabelSelector.from_proto(req.check_registers).matches(self.registers):
                self.status = Status.REGISTER_MISMATCH
                self.state = State.ERROR
                return
        if spool_end < spec.suspend_offset:
            self.roll_to = spec.suspend_offset  # roll forward to the journal's resumption offset
            self.state = State.SEND_PIPELINE_SYNC
            return
        if spool_end != max_offset and req.offset == 0 and spec.writable:
            self.status = Status.INDEX_HAS_GREATER_OFFSET
            self.state = State.ERROR
            return
        if req.offset and req.offset != max_offset:
            self.status = Status.WRONG_APPEND_OFFSET
            self.state = State.ERROR
            return
        if req.offset and spool_end != max_offset:
            self.roll_to = max_offset  # reset-head: re-sync the pipeline at the explicit offset
            self.state = State.SEND_PIPELINE_SYNC
            return

        level = spec.suspend_level
        if req.suspend == SUSPEND.SUSPEND_RESUME and level != SuspendLevel.NONE:
            self.next_suspend = (SuspendLevel.NONE, spool_end)
            self.state = State.UPDATE_SUSPEND
            return
        if req.suspend == SUSPEND.SUSPEND_NO_RESUME and level != SuspendLevel.NONE:
            self.status = Status.SUSPENDED
            self.state = State.ERROR
            return
        if req.suspend in (SUSPEND.SUSPEND_IF_FLUSHED, SUSPEND.SUSPEND_NOW):
            if level != SuspendLevel.FULL and index_min == index_max:
                self.next_suspend = (SuspendLevel.FULL, spool_end)
                self.state = State.UPDATE_SUSPEND
                return
            if level == SuspendLevel.NONE and (not index_dirty or req.suspend == SUSPEND.SUSPEND_NOW):
                self.next_suspend = (SuspendLevel.PARTIAL, spool_end)
                self.roll_to = spool_end  # the primary stays: roll so the dirty spool is persisted
                self.state = State.UPDATE_SUSPEND
                return
            if level == SuspendLevel.PARTIAL:
                self.status = Status.SUSPENDED
                self.state = State.ERROR
                return

        if pln.spool.fragment.begin == index_min or (self.force_roll and pln.spool.fragment.length):
            # The spool holds the journal's first write (roll, so the store soon proves the journal
            # was written), or a Flush asked for the roll.
            self.roll_to = spool_end
        self.state = State.STREAM_CONTENT

    async def _on_update_suspend(self) -> None:
        res = self.res
        assert res is not None and res.spec is not None and self.next_suspend is not None
        level, offset = self.next_suspend
        try:
            ok, revision = await update_suspend(
                self.broker.etcd, self.broker.ks, res.spec, res.mod_revision, level, offset
            )
        except Exception as exc:
            self._fail(f"updating the suspension of {self.journal}: {exc}")
            return
        self.read_through_rev = revision
        self.state = State.RESOLVE

    # --- content ---------------------------------------------------------------------------------
    async def _stream_content(self, requests: AsyncIterator[AppendChunk]) -> None:
        res, pln, req = self.res, self.pln, self.req
        assert res is not None and res.spec is not None and pln is not None
        spec = res.spec
        spool = pln.spool
        proposal = spool.maybe_roll(spec.fragment_length, spec.compression, spec.flush_interval, self.roll_to)
        if proposal != spool.fragment:
            if spool.fragment.length:
                self.rolled = spool.fragment  # completed by this roll (Flush waits for its upload)
            await pln.scatter(
                pb.ReplicateRequest(
                    proposal=proposal.to_proto(), registers=self.registers.to_proto(), acknowledge=False
                )
            )
        self.client_begin = spool.fragment.end
        self.pln_codec = spool.fragment.codec

        problem: str | None = None
        eof = False
        writable = spec.writable and req.suspend not in (
            SUSPEND.SUSPEND_IF_FLUSHED,
            SUSPEND.SUSPEND_NOW,
            SUSPEND.SUSPEND_KEEP,
        )
        assert self.replica is not None
        flow = self.replica.append_flow  # ours while we hold the pipeline
        admitted = flow.admit(
            requests, _content_size, journal_rate=spec.max_append_rate, invalidated=res.invalidated
        )
        try:
            async for chunk in admitted:
                if self.client_commit:
                    problem = "expected EOF after the empty commit message"
                    break
                content: bytes | memoryview
                if isinstance(chunk, ContentChunk):  # the usual case: decoded raw, content only
                    content = chunk.content
                else:
                    if chunk.journal or chunk.HasField("header") or chunk.offset:
                        problem = "expected a content-only AppendRequest"
                        break
                    content = chunk.content
                    if not content:
                        self.client_commit = True
                        continue
                if not writable:
                    self.status = Status.NOT_ALLOWED
                    break
                try:
                    await pln.scatter_content(content, self.client_length)
                except OSError as exc:  # this broker's spool file could not take the content
                    problem = self._spool_failure(exc)
                    break
                self.client_sum.update(content)
                self.client_length += len(content)
                if pln.send_err() is not None:
                    break
            else:
                eof = True
                if not self.client_commit:
                    problem = "client closed the stream without the empty commit message"
        except asyncio.CancelledError:
            # The client went away: roll back through the pipeline before letting the cancel go on.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self._cancelled = True
            problem = "client cancelled the append"
        except grpc.aio.AioRpcError as exc:
            problem = f"client stream broke: {exc.code().name}"
        except FlowControlUnderflow as exc:
            problem = str(exc)
        self.delayed_chunks = flow.delayed_chunks
        self.total_chunks = flow.total_chunks  # every chunk read, the commit chunk included (as Gazette)

        # As Gazette, a register update that is present (even if empty) needs appended bytes.
        if (
            eof
            and problem is None
            and self.client_length == 0
            and (req.HasField("union_registers") or req.HasField("subtract_registers"))
        ):
            problem = "register modification requires a non-empty append"

        send_err = pln.send_err()
        if problem is None and send_err is None and self.status == Status.OK:
            proposal = spool.next()
            registers = self.registers
            # As Gazette's append FSM: subtract first, then union with the request's values winning.
            if req.subtract_registers.labels:
                registers = registers.subtract(LabelSet.from_proto(req.subtract_registers))
            if req.union_registers.labels:
                registers = LabelSet.from_proto(req.union_registers).union(registers)
            self.registers = registers
        else:
            proposal = spool.fragment  # roll back whatever was spooled
            self.broker.metrics.rollback(spool.delta)
            if problem is not None and self.err is None:
                self.err = AppendFailed(f"append rolled back: {problem}", grpc.StatusCode.ABORTED)
        await pln.scatter(
            pb.ReplicateRequest(
                proposal=proposal.to_proto(), registers=self.registers.to_proto(), acknowledge=True
            )
        )
        self.proposed_end = proposal.end
        self.state = State.READ_ACKNOWLEDGEMENTS

    def _spool_failure(self, exc: OSError) -> str:
        """Fails this append for a spool write that raised `exc`: the content is rolled back on every
        member and what was committed before stays."""
        self.err = spool_write_failure(self.broker, self.journal, exc)
        log.error("%s", self.err)
        return str(self.err).removeprefix("append rolled back: ")

    async def _read_acknowledgements(self) -> None:
        pln, replica = self.pln, self.replica
        assert pln is not None and replica is not None
        send_err = pln.send_err()
        proposed_end = self.proposed_end
        wait_for, close_after = pln.barrier()

        async def read() -> None:
            # Runs to its end even if this append is cancelled meanwhile: its responses must be read,
            # in turn, or the next append would take them for its own acknowledgements.
            try:
                if send_err is not None:
                    await pln.close_send()
                await wait_for.wait()
                await pln.gather_ok()
                if send_err is not None:
                    await pln.gather_eof()
                elif pln.recv_err() is None:
                    # Every peer acknowledged the proposal (in order, behind the barrier): readers may
                    # now be served it (docs/semantics.md#no-dirty-reads).
                    replica.index.acknowledge_through(proposed_end)
            finally:
                close_after.set()

        reader = self.broker.background(read(), f"acknowledgements of {self.journal}")
        # Release the send side for the next append, or (after a send error) let it build a new pipeline.
        replica.pipeline_slot.put_nowait(pln if send_err is None else None)
        self.owns_pipeline = False
        self.pln = None
        await asyncio.shield(reader)
        if self.err is not None or self.status != Status.OK:
            self.state = State.ERROR
        elif (err := pln.recv_err() or send_err) is not None:
            self._fail(f"append to {self.journal} failed in replication: {err}")
        else:
            self.state = State.FINISHED
            if self.client_length:
                self.broker.metrics.commit(
                    self.journal, self.client_length, self.client_begin + self.client_length
                )


def _validate_registers(req: pb.AppendRequest) -> None:
    """As Gazette's AppendRequest.Validate: check_registers is a valid selector, and union_registers and
    subtract_registers are valid label sets as sent (sorted, unique, no name with both "" and a value)."""
    if req.HasField("check_registers"):
        try:
            LabelSelector.from_proto(req.check_registers)
        except ValidationError as exc:
            raise ValidationError(f"check_registers: {exc.message}") from None
    for field in ("union_registers", "subtract_registers"):
        if not req.HasField(field):
            continue
        previous: tuple[str, str] | None = None
        for i, lbl in enumerate(getattr(req, field).labels):
            where = f"{field}.labels[{i}]"
            try:
                validate_label_name(lbl.name)
                validate_label_value(lbl.value, name=lbl.name)
            except ValidationError as exc:
                raise ValidationError(f"{where}: {exc.message}") from None
            if lbl.prefix:
                raise ValidationError(f"{where}: prefix may be set only in a label selector")
            if previous is not None and (lbl.name, lbl.value) <= previous:
                raise ValidationError(f"{where}: labels are not in unique, sorted order (at {lbl.name})")
            if previous is not None and previous[0] == lbl.name and previous[1] == "":
                raise ValidationError(f'{where}: label "{lbl.name}" has both an empty and a non-empty value')
            previous = (lbl.name, lbl.value)


def _content_size(chunk: AppendChunk) -> int:
    """What a chunk costs the journal's append rate: its content bytes."""
    return len(chunk.content)


async def _as_protos(requests: AsyncIterator[AppendChunk]) -> AsyncIterator[pb.AppendRequest]:
    """The requests as protobuf messages, for a generated stub (the proxy's)."""
    async for req in requests:
        yield req.to_proto() if isinstance(req, ContentChunk) else req


async def serve_append(
    broker: BrokerContext,
    requests: AsyncIterator[AppendChunk],
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> pb.AppendResponse:
    try:
        first = await anext(requests)
    except StopAsyncIteration:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "append stream closed before its first message")
        raise
    if not isinstance(first, pb.AppendRequest) or first.content:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first AppendRequest must carry no content")
    assert isinstance(first, pb.AppendRequest)
    journal, _meta = split_journal_meta(first.journal)
    try:
        validate_journal_name(journal)
        _validate_registers(first)
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    fsm = AppendFSM(broker, first, claims=claims)
    state = await fsm.run(requests)
    if state == State.PROXY:
        assert fsm.res is not None
        return await broker.proxy.append(fsm.res, first, _as_protos(requests))
    if fsm.err is not None:
        raise fsm.err
    return fsm.response()


async def _commit_only() -> AsyncIterator[pb.AppendRequest]:
    yield pb.AppendRequest()


async def zero_byte_append(
    broker: BrokerContext, journal: str, *, suspend: int = SUSPEND.SUSPEND_NO_RESUME, force_roll: bool = False
) -> AppendFSM:
    """Runs the FSM as an empty append at this broker (the pulse and Flush); never proxies."""
    req = pb.AppendRequest(journal=journal, do_not_proxy=True)
    req.suspend = suspend  # type: ignore[assignment]
    fsm = AppendFSM(broker, req, force_roll=force_roll)
    await fsm.run(_commit_only())
    return fsm
