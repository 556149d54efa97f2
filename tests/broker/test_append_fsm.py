"""The append FSM (gazette/broker/append.py) tested one state at a time, as Gazette's
broker/append_fsm_test.go does: each test builds an `AppendFSM` at a broker of a real in-process
cluster (two brokers on the session's etcd), steps its `_on_<state>` handlers one by one and checks
the state each one names next, with the status, error, offsets and registers it leaves.

Peers are the cluster's real brokers, except where a peer must give an answer no real broker gives
on demand (Gazette's mockBroker): a `ScriptedPeer` stands in for the Replicate stream and records
what the primary sends.

Gazette's cases without a counterpart here, and why:
- "context canceled" (Resolve, AcquirePipeline, StartPipeline awaiting the spool, UpdateAssignments,
  ValidatePreconditions awaiting the first listing, and awaiting an unhealthy store): the FSM has no
  request context; a client going away cancels the task running it. What stands in: a cancelled
  handler raises CancelledError and leaves the FSM in its state with the slots intact
  (test_resolve_cancelled_while_awaiting_a_future_revision,
  test_acquire_pipeline_cancelled_while_waiting, test_start_pipeline_cancelled_while_awaiting_the_spool,
  test_validate_preconditions_awaits_the_first_store_listing), an etcd failure in UpdateAssignments
  is an Error (test_update_assignments_failure_is_an_error), and a client cancelled mid-stream rolls
  back (test_run_whole_append_and_client_failures). The unhealthy-store wait is not cancelled
  separately: it is the same kind of await as the others.
- The fragment-store health cases are ValidatePreconditions' in Gazette; here the wait happens in
  Resolve, before the pipeline is taken, so they are Resolve's
  (test_resolve_waits_for_a_healthy_primary_store).
- "A non-validating AppendRequest (journal '/invalid')" has the outcome here of "a valid but
  unexpected non-content chunk": any chunk carrying a journal, header or offset is refused without
  validating it (test_stream_content_rolls_back[non-content-chunk]).
- TestFSMRunBasicCases' append-timeout fixture (flow-control underflow): AppendFlowControl polices
  the minimum rate on its own injectable clock, tested in tests/broker/test_flow.py; the FSM only
  turns the FlowControlUnderflow it raises into a rollback, the path of the other stream errors.
- Gazette's exact error texts (`gatherSync: recv from zone:"peer" ...`, `append stream: ...`): ours
  are worded differently; the tests check the status code and that the cause is carried.
- TestFSMPipelineRace's exact replication messages (the second append's unacknowledged roll): the
  peers here are real brokers; test_pipelined_appends_order_their_commits checks the outcome (both
  finish, in acquisition order, contiguous, replicas in sync).

Bugs these tests found, fixed: tasks.first_of dropped a slot's pipeline or spool when the hand-off
and the append's cancellation landed together (AcquirePipeline, StartPipeline; it now gives them
back); AppendResponse.total_chunks left out the commit chunk Gazette counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from gazette.allocator.journals import route_equivalent
from gazette.broker.append import STORE_HEALTH_MAX_FAILED_CHECKS, AppendFSM, State
from gazette.broker.assignments import assignments_match, assignments_of
from gazette.broker.broker import Broker
from gazette.broker.pipeline import Pipeline
from gazette.client.loop import default_loop
from gazette.fragment.fragment import Codec, Fragment
from gazette.fragment.health import _HEALTH, StoreHealth
from gazette.keyspace import layout
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.labels import LabelSet
from gazette.protocol.spec import JournalFlag, SuspendLevel
from gazette.protocol.status import Status
from gazette.testing import async_wait_for, wait_for

RUN_BOUND_S = 30.0  # far above what any scenario takes (well under a second each)
SUSPEND = pb.AppendRequest.Suspend
# The handlers a test may step, by state: StreamContent and ReadAcknowledgements take the client's
# stream and are driven explicitly.
STEPPABLE = {
    State.RESOLVE,
    State.ACQUIRE_PIPELINE,
    State.START_PIPELINE,
    State.SEND_PIPELINE_SYNC,
    State.RECV_PIPELINE_SYNC,
    State.UPDATE_ASSIGNMENTS,
    State.AWAIT_DESIRED_REPLICAS,
    State.VALIDATE_PRECONDITIONS,
    State.UPDATE_SUSPEND,
}


def run(coro, timeout: float = RUN_BOUND_S):  # type: ignore[no-untyped-def]
    """Runs a scenario on the brokers' loop."""
    return default_loop().run(coro, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(etcd, module_etcd_root, tmp_path_factory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("append-fsm")
    with LocalCluster(
        brokers=2, mode="inprocess", etcd=etcd.endpoint, root=module_etcd_root, data_dir=str(data / "data")
    ) as c:
        yield c


# --- helpers -------------------------------------------------------------------------------------


async def step(fsm: AppendFSM) -> State:
    """Runs the handler of the FSM's current state once; returns the state it named next."""
    assert fsm.state in STEPPABLE, f"{fsm.state} is not stepped by its own handler"
    await getattr(fsm, f"_on_{fsm.state.name.lower()}")()
    return fsm.state


async def run_to(fsm: AppendFSM, target: State) -> list[State]:
    """Steps until `target` (or a state that is not stepped); returns the states stepped through,
    the last being the one reached."""
    trace = [fsm.state]
    while fsm.state != target and fsm.state in STEPPABLE:
        trace.append(await step(fsm))
    return trace


def fsm_at(broker: Broker, journal: str, **req) -> AppendFSM:  # type: ignore[no-untyped-def]
    return AppendFSM(broker, pb.AppendRequest(journal=journal, **req))


async def stream(*items: pb.AppendRequest | BaseException) -> AsyncIterator[pb.AppendRequest]:
    """A client's content stream: each item in turn, an exception raised where it stands."""
    for item in items:
        if isinstance(item, BaseException):
            raise item
        yield item


def content(data: bytes) -> pb.AppendRequest:
    return pb.AppendRequest(content=data)


COMMIT = pb.AppendRequest()  # the empty content message that asks to commit


def labels(*pairs: str) -> pb.LabelSet:
    return LabelSet(list(zip(pairs[::2], pairs[1::2], strict=True))).to_proto()


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def create(cluster: LocalCluster, journal: str, replication: int = 1, **fields) -> tuple[Broker, Broker]:  # type: ignore[no-untyped-def]
    """Creates `journal`, waits for its full route and for its primary's pulses to settle (an idle
    synced pipeline and consistent assignment values); returns (primary, the other broker)."""
    cluster.client().apply_journals([cluster.journal_spec(journal, replication=replication, **fields)])
    cluster.wait_for_routes([journal])
    p = primary_of(cluster, journal)
    run(settled(p, journal))
    other = next(h.broker for h in cluster.brokers if h.broker is not p)
    return p, other


def primary_of(cluster: LocalCluster, journal: str) -> Broker:
    """The broker that is the journal's primary, once it has built its replica."""
    brokers = [h.broker for h in cluster.brokers]

    def primary() -> Broker | None:
        for b in brokers:
            replica = b.replicas.get(journal)
            if replica is not None and replica.is_primary:
                return b
        return None

    return wait_for(f"the primary of {journal} to build its replica", primary)


async def settled(broker: Broker, journal: str) -> None:
    async def idle() -> bool:
        replica = broker.replicas.get(journal)
        if replica is None or not replica.pipeline_slot.qsize():
            return False
        pln = replica.pipeline_slot._queue[0]  # type: ignore[attr-defined]
        res = await broker.resolver.resolve(journal, require_primary=True, may_proxy=False)
        return (
            res.status == Status.OK
            and pln is not None
            and route_equivalent(pln.route, res.route)
            and assignments_match(assignments_of(broker.ks, journal), res.route)
        )

    await async_wait_for(f"the pipeline of {journal} to be synced and idle", idle, timeout=20)


async def drop_pipeline(fsm: AppendFSM) -> None:
    """Shuts the pipeline the FSM holds down (its peers release their spools), so the next
    StartPipeline builds and syncs a new one."""
    assert fsm.owns_pipeline
    if fsm.pln is not None:
        await fsm.pln.shutdown(expect_err=False)
        fsm.pln = None


class ScriptedPeer:
    """A peer's Replicate stream answered by the test (Gazette's mockBroker): `requests` receives
    every request the primary writes (and HALF_CLOSED when it half-closes), `answers` is what the
    primary's reads return, in order (an exception is raised by the read)."""

    HALF_CLOSED = "half-closed"

    def __init__(self) -> None:
        self.requests: asyncio.Queue = asyncio.Queue()
        self.answers: asyncio.Queue = asyncio.Queue()
        self._cancelled = False

    async def write(self, data: bytes) -> None:
        self.requests.put_nowait(pb.ReplicateRequest.FromString(bytes(data)))

    async def done_writing(self) -> None:
        self.requests.put_nowait(self.HALF_CLOSED)

    async def read(self):  # type: ignore[no-untyped-def]
        answer = await self.answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def cancel(self) -> bool:
        if not self._cancelled:
            self._cancelled = True
            self.answers.put_nowait(rpc_error(grpc.StatusCode.CANCELLED, "cancelled"))
        return True

    def done(self) -> bool:
        return self._cancelled

    def cancelled(self) -> bool:
        return self._cancelled

    async def request(self) -> pb.ReplicateRequest | str:
        return await asyncio.wait_for(self.requests.get(), 10)


@pytest.fixture
def scripted(monkeypatch):  # type: ignore[no-untyped-def]
    """`scripted(broker, journal)`: from now on, pipelines `broker` builds for `journal` talk to
    ScriptedPeers (appended to the returned list) instead of the real peers."""

    def install(broker: Broker, journal: str) -> list[ScriptedPeer]:
        peers: list[ScriptedPeer] = []
        real = broker.proxy.replicate

        def replicate(endpoint: str, name: str):  # type: ignore[no-untyped-def]
            if name != journal:
                return real(endpoint, name)
            peers.append(ScriptedPeer())
            return peers[-1]

        monkeypatch.setattr(broker.proxy, "replicate", replicate)
        return peers

    return install


# --- Resolve -------------------------------------------------------------------------------------


def test_resolve_journal_not_found(cluster: LocalCluster) -> None:
    broker = cluster.brokers[0].broker

    async def scenario() -> None:
        fsm = fsm_at(broker, "fsm/does/not/exist")
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.JOURNAL_NOT_FOUND and fsm.err is None
        # run() ends there without reading the client's stream.
        fsm = fsm_at(broker, "fsm/does/not/exist")
        assert await fsm.run(stream(rpc_error(grpc.StatusCode.INTERNAL, "never read"))) == State.ERROR
        assert fsm.response().status == pb.JOURNAL_NOT_FOUND

    run(scenario())


def test_resolve_local_primary_acquires_or_starts_when_it_owns_the_pipeline(cluster: LocalCluster) -> None:
    journal = "fsm/resolve/local"
    primary, _ = create(cluster, journal)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        assert await step(fsm) == State.ACQUIRE_PIPELINE
        assert fsm.res is not None and fsm.res.status == Status.OK and not fsm.owns_pipeline
        assert fsm.replica is primary.replicas[journal]
        assert await step(fsm) == State.START_PIPELINE and fsm.owns_pipeline
        # Resolving again while owning the pipeline (as after an invalidation) goes straight to
        # StartPipeline, keeping it.
        fsm.state = State.RESOLVE
        assert await step(fsm) == State.START_PIPELINE
        assert fsm.owns_pipeline and fsm.replica.pipeline_slot.qsize() == 0
        fsm.return_pipeline()
        assert fsm.replica.pipeline_slot.qsize() == 1 and not fsm.owns_pipeline

    run(scenario())


def test_resolve_at_a_non_primary_returns_the_pipeline_it_holds_and_proxies(cluster: LocalCluster) -> None:
    journal = "fsm/resolve/remote"
    primary, other = create(cluster, journal, replication=2)

    async def scenario() -> None:
        # `other` is a replica of the journal, not its primary. An FSM there that holds the
        # replica's pipeline slot (as one that took it while primary) gives it back on resolving.
        replica = other.replicas[journal]
        fsm = fsm_at(other, journal)
        fsm.replica, fsm.pln, fsm.owns_pipeline = replica, replica.pipeline_slot.get_nowait(), True
        assert replica.pipeline_slot.qsize() == 0
        assert await step(fsm) == State.AWAIT_DESIRED_REPLICAS
        assert fsm.res is not None
        assert (fsm.res.header.process_id.zone, fsm.res.header.process_id.suffix) == primary.id
        assert not fsm.owns_pipeline and replica.pipeline_slot.qsize() == 1
        assert await step(fsm) == State.PROXY
        assert fsm.status == Status.OK and fsm.err is None

        # With do_not_proxy it is an error instead.
        fsm = fsm_at(other, journal, do_not_proxy=True)
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.NOT_JOURNAL_PRIMARY_BROKER

    run(scenario())


def test_resolve_request_addressed_to_another_process_is_invalid(cluster: LocalCluster) -> None:
    journal = "fsm/resolve/addressed"
    primary, _ = create(cluster, journal)

    async def scenario() -> None:
        # A proxied request names the broker it was resolved to, and the etcd it was resolved at.
        header = pb.Header(process_id=pb.ProcessSpec.ID(zone="elsewhere", suffix="nobody"))
        header.etcd.CopyFrom(primary.resolver.header().etcd)
        fsm = fsm_at(primary, journal, header=header)
        assert await step(fsm) == State.ERROR
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "not to this broker" in str(fsm.err)

        header.process_id.zone, header.process_id.suffix = primary.id
        header.etcd.cluster_id += 1
        fsm = fsm_at(primary, journal, header=header)
        assert await step(fsm) == State.ERROR
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "etcd cluster" in str(fsm.err)

        header.etcd.cluster_id -= 1  # addressed right: resolved as usual
        fsm = fsm_at(primary, journal, header=header)
        assert await step(fsm) == State.ACQUIRE_PIPELINE and fsm.err is None

    run(scenario())


def test_resolve_cancelled_while_awaiting_a_future_revision(cluster: LocalCluster) -> None:
    journal = "fsm/resolve/future"
    primary, _ = create(cluster, journal)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal, min_etcd_revision=primary.ks.revision + 10**9)
        task = asyncio.create_task(step(fsm))
        done, _ = await asyncio.wait({task}, timeout=0.3)
        assert not done, "a resolve at a revision the KeySpace has not reached must wait for it"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fsm.state == State.RESOLVE and fsm.res is None and fsm.err is None

    run(scenario())


def test_resolve_waits_for_a_healthy_primary_store(cluster: LocalCluster, tmp_path) -> None:
    journal = "fsm/resolve/store-health"
    blocker = tmp_path / "blocked"
    blocker.write_bytes(b"a file where the store's directory should be")
    url = f"file://{blocker}/store/"  # lists as empty, but nothing can be written to it
    # The process-wide StoreHealth of the URL, checking only when told (no timed retries).
    health = _HEALTH[url] = StoreHealth(url, failing_retry_s=(3600.0,), jitter_fraction=0.0)
    try:
        cluster.client().apply_journals([cluster.journal_spec(journal, stores=[url])])
        cluster.wait_for_routes([journal])
        primary = primary_of(cluster, journal)

        async def checks_until_done(task: asyncio.Task, at_most: int) -> int:
            n = 0
            while not task.done() and n < at_most:
                await health.check()
                n += 1
                await asyncio.wait({task}, timeout=0.05)
            return n

        async def scenario() -> None:
            # The store stays unhealthy through STORE_HEALTH_MAX_FAILED_CHECKS checks: the append fails.
            fsm = fsm_at(primary, journal)
            task = asyncio.create_task(step(fsm))
            checks = await checks_until_done(task, 3 * STORE_HEALTH_MAX_FAILED_CHECKS)
            assert task.done() and await task == State.ERROR
            assert checks <= STORE_HEALTH_MAX_FAILED_CHECKS
            assert fsm.status == Status.FRAGMENT_STORE_UNHEALTHY and "store" in fsm.store_health_error
            assert fsm.response().store_health_error == fsm.store_health_error
            assert not fsm.owns_pipeline

            # It recovers while an append waits: the append goes on.
            fsm = fsm_at(primary, journal)
            task = asyncio.create_task(step(fsm))
            await health.check()
            done, _ = await asyncio.wait({task}, timeout=0.1)
            assert not done, "an append waits while the store is unhealthy"
            blocker.unlink()
            await health.check()
            assert await asyncio.wait_for(task, 10) == State.ACQUIRE_PIPELINE
            assert fsm.status == Status.OK and fsm.store_health_error == ""

        run(scenario())
    finally:
        if blocker.is_file():
            blocker.unlink()  # healthy from now on
        _HEALTH.pop(url, None)
        run(health.stop())


# --- AcquirePipeline -----------------------------------------------------------------------------


def test_acquire_pipeline(cluster: LocalCluster) -> None:
    journal = "fsm/acquire/basic"
    primary, _ = create(cluster, journal)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        assert await run_to(fsm, State.START_PIPELINE) == [
            State.RESOLVE, State.ACQUIRE_PIPELINE, State.START_PIPELINE
        ]  # fmt: skip
        assert fsm.owns_pipeline and fsm.pln is not None
        fsm.return_pipeline()

        # The pipeline is free at once, but the resolution was invalidated meanwhile: resolve again,
        # holding the pipeline.
        fsm = fsm_at(primary, journal)
        assert await step(fsm) == State.ACQUIRE_PIPELINE
        assert fsm.res is not None
        fsm.res.invalidated = asyncio.Event()  # this resolution's own, not the resolver's shared one
        fsm.res.invalidated.set()
        assert await step(fsm) == State.RESOLVE
        assert fsm.owns_pipeline and fsm.err is None
        assert await step(fsm) == State.START_PIPELINE  # kept through the new resolution
        fsm.return_pipeline()

    run(scenario())


def test_acquire_pipeline_route_changes_while_waiting(cluster: LocalCluster) -> None:
    journal = "fsm/acquire/changed"
    primary, _ = create(cluster, journal)
    client = cluster.client()

    async def hold() -> tuple[AppendFSM, AppendFSM, asyncio.Task]:
        holder = fsm_at(primary, journal)
        await run_to(holder, State.START_PIPELINE)
        waiter = fsm_at(primary, journal)
        assert await step(waiter) == State.ACQUIRE_PIPELINE
        task = asyncio.create_task(step(waiter))
        done, _ = await asyncio.wait({task}, timeout=0.2)
        assert not done, "the pipeline is held: acquiring it must wait"
        return holder, waiter, task

    holder, waiter, task = run(hold())
    # A change of the journal's spec in etcd invalidates the waiter's resolution.
    client.apply_journals([cluster.journal_spec(journal, labels={"changed": "yes"})])

    async def finish() -> None:
        assert await asyncio.wait_for(task, 10) == State.RESOLVE
        assert not waiter.owns_pipeline and waiter.err is None
        holder.return_pipeline()
        assert holder.replica is not None and holder.replica.pipeline_slot.qsize() == 1

    run(finish())


def test_acquire_pipeline_cancelled_while_waiting(cluster: LocalCluster) -> None:
    journal = "fsm/acquire/cancelled"
    primary, _ = create(cluster, journal)

    async def scenario() -> None:
        holder = fsm_at(primary, journal)
        await run_to(holder, State.START_PIPELINE)
        held = holder.pln
        waiter = fsm_at(primary, journal)
        await step(waiter)
        task = asyncio.create_task(step(waiter))
        done, _ = await asyncio.wait({task}, timeout=0.2)
        assert not done
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert waiter.state == State.ACQUIRE_PIPELINE and not waiter.owns_pipeline
        holder.return_pipeline()
        replica = primary.replicas[journal]
        assert replica.pipeline_slot.qsize() == 1 and replica.pipeline_slot._queue[0] is held  # type: ignore[attr-defined]

    run(scenario())


def test_acquire_pipeline_cancel_racing_the_hand_off_keeps_the_pipeline(cluster: LocalCluster) -> None:
    journal = "fsm/acquire/race"
    primary, _ = create(cluster, journal)
    replica = primary.replicas[journal]
    handed: list = []

    async def scenario() -> None:
        holder = fsm_at(primary, journal)
        await run_to(holder, State.START_PIPELINE)
        handed.append(holder.pln)
        waiter = fsm_at(primary, journal)
        task = asyncio.create_task(waiter.run(stream(COMMIT)))
        # Nothing in Resolve yields once the store is known healthy: in AcquirePipeline, it waits.
        await async_wait_for(
            "the append to wait for the pipeline", lambda: waiter.state == State.ACQUIRE_PIPELINE
        )
        # The holder hands the pipeline over, and the waiting append's client goes away, at once.
        holder.return_pipeline()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not waiter.owns_pipeline
        assert replica.pipeline_slot.qsize() == 1, "the pipeline was taken by a cancelled append and lost"

    try:
        run(scenario())
    finally:
        if handed and not replica.pipeline_slot.qsize():
            replica.pipeline_slot.put_nowait(handed[0])  # let the replica (and the cluster) stop


# --- StartPipeline, SendPipelineSync, RecvPipelineSync --------------------------------------------


def test_start_and_sync_a_new_pipeline_through_mismatch_wrong_route_and_peer_failure(
    cluster: LocalCluster, scripted
) -> None:
    journal = "fsm/sync/scripted"
    primary, other = create(cluster, journal, replication=2)
    peers = scripted(primary, journal)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        assert await run_to(fsm, State.RECV_PIPELINE_SYNC) == [
            State.START_PIPELINE, State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC
        ]  # fmt: skip
        assert len(peers) == 1
        peer = peers[0]
        assert fsm.res is not None
        spool_end = fsm.pln.spool.fragment.end if fsm.pln else -1
        first = await peer.request()
        assert isinstance(first, pb.ReplicateRequest)
        assert first.HasField("header") and first.deprecated_journal == journal and first.acknowledge
        assert (first.header.process_id.zone, first.header.process_id.suffix) == other.id
        assert first.proposal.journal == journal
        assert (first.proposal.begin, first.proposal.end) == (spool_end, spool_end)
        assert first.proposal.compression_codec == pb.SNAPPY
        assert LabelSet.from_proto(first.registers) == LabelSet()

        # The peer is ahead, with registers: roll forward to its end, adopting them.
        ahead = spool_end + 892
        peer.answers.put_nowait(
            pb.ReplicateResponse(
                status=pb.PROPOSAL_MISMATCH, fragment=pb.Fragment(journal=journal, begin=567, end=ahead),
                registers=labels("reg", ""),
            )
        )  # fmt: skip
        assert await step(fsm) == State.SEND_PIPELINE_SYNC
        assert fsm.roll_to == ahead and fsm.registers == LabelSet({"reg": ""})
        assert fsm.read_through_rev == 0 and fsm.err is None
        assert await step(fsm) == State.RECV_PIPELINE_SYNC
        second = await peer.request()
        assert isinstance(second, pb.ReplicateRequest)
        assert not second.HasField("header") and second.acknowledge  # not the stream's first message
        assert (second.proposal.begin, second.proposal.end) == (ahead, ahead)
        assert LabelSet.from_proto(second.registers) == LabelSet({"reg": ""})

        # The peer knows a later route: tear the pipeline down and resolve through its revision.
        wrong = pb.Header()
        wrong.CopyFrom(fsm.pln.header if fsm.pln else pb.Header())
        wrong.etcd.revision += 1
        wrong.route.members[1].suffix = "other"
        peer.answers.put_nowait(pb.ReplicateResponse(status=pb.WRONG_ROUTE, header=wrong))
        assert await step(fsm) == State.RESOLVE
        assert fsm.read_through_rev == wrong.etcd.revision and fsm.err is None
        assert fsm.pln is None and fsm.owns_pipeline
        assert await peer.request() == ScriptedPeer.HALF_CLOSED  # the old pipeline is shut down
        peer.answers.put_nowait(grpc.aio.EOF)

        # Restart; this time the peer fails outright.
        fsm.read_through_rev = 0
        assert await run_to(fsm, State.RECV_PIPELINE_SYNC) == [
            State.RESOLVE, State.START_PIPELINE, State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC
        ]  # fmt: skip
        assert len(peers) == 2
        assert isinstance(await peers[1].request(), pb.ReplicateRequest)
        peers[1].answers.put_nowait(rpc_error(grpc.StatusCode.UNKNOWN, "foobar"))
        assert await step(fsm) == State.ERROR
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.UNAVAILABLE
        assert "foobar" in str(fsm.err) and journal in str(fsm.err)
        assert fsm.pln is None
        assert await peers[1].request() == ScriptedPeer.HALF_CLOSED  # the failed pipeline is torn down
        fsm.return_pipeline()  # returns None: the next append builds a new pipeline

    try:
        run(scenario())
    finally:
        # Back to real peers: the next append (a pulse, after the undo) rebuilds a real pipeline.
        for peer in peers:
            peer.answers.put_nowait(grpc.aio.EOF)


def test_recv_pipeline_sync_wrong_route_at_no_later_revision_is_an_error(
    cluster: LocalCluster, scripted
) -> None:
    journal = "fsm/sync/wrong-route"
    primary, _ = create(cluster, journal, replication=2)
    peers = scripted(primary, journal)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        await run_to(fsm, State.RECV_PIPELINE_SYNC)
        await peers[0].request()
        same = pb.Header()
        same.CopyFrom(fsm.pln.header if fsm.pln else pb.Header())
        same.route.members[1].suffix = "other"  # another route, at the very same revision
        peers[0].answers.put_nowait(pb.ReplicateResponse(status=pb.WRONG_ROUTE, header=same))
        assert await step(fsm) == State.ERROR
        assert fsm.err is not None and "WRONG_ROUTE" in str(fsm.err) and fsm.read_through_rev == 0
        fsm.return_pipeline()

    try:
        run(scenario())
    finally:
        for peer in peers:
            peer.answers.put_nowait(grpc.aio.EOF)


def test_sync_of_a_new_pipeline_succeeds(cluster: LocalCluster, scripted) -> None:
    journal = "fsm/sync/ok"
    primary, _ = create(cluster, journal, replication=2)
    peers = scripted(primary, journal)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        spool_slot = primary.replicas[journal].spool_slot
        assert spool_slot.qsize() == 1
        assert await step(fsm) == State.SEND_PIPELINE_SYNC
        assert spool_slot.qsize() == 0, "the new pipeline holds the spool"
        assert isinstance(fsm.pln, Pipeline) and fsm.roll_to == 0
        assert await step(fsm) == State.RECV_PIPELINE_SYNC
        await peers[0].request()
        peers[0].answers.put_nowait(pb.ReplicateResponse(status=pb.OK))
        assert await step(fsm) == State.UPDATE_ASSIGNMENTS
        assert fsm.err is None and fsm.roll_to == 0
        peers[0].answers.put_nowait(grpc.aio.EOF)  # the peer's answer to the half-close
        await drop_pipeline(fsm)  # back to real peers for whoever appends next
        assert await peers[0].request() == ScriptedPeer.HALF_CLOSED
        fsm.return_pipeline()

    try:
        run(scenario())
    finally:
        for peer in peers:
            peer.answers.put_nowait(grpc.aio.EOF)


def test_recv_pipeline_sync_rolls_forward_to_a_real_peer_ahead(cluster: LocalCluster) -> None:
    journal = "fsm/sync/peer-ahead"
    primary, other = create(cluster, journal, replication=2)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        # The peer's Replicate handler gives its spool back once the pipeline is shut down; move it
        # ahead of the primary's, with registers (what a peer that saw commits the primary lost holds).
        peer_replica = other.replicas[journal]
        await async_wait_for("the peer to release its spool", lambda: peer_replica.spool_slot.qsize() == 1)
        spool = peer_replica.spool_slot.get_nowait()
        ahead = spool.fragment.end + 892
        spool.apply_proposal(Fragment(journal, ahead, ahead, codec=Codec.SNAPPY), LabelSet({"reg": ""}))
        peer_replica.spool_slot.put_nowait(spool)

        assert await run_to(fsm, State.RECV_PIPELINE_SYNC) == [
            State.START_PIPELINE, State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC
        ]  # fmt: skip
        assert await step(fsm) == State.SEND_PIPELINE_SYNC
        assert fsm.roll_to == ahead and fsm.registers == LabelSet({"reg": ""}) and fsm.err is None
        assert await run_to(fsm, State.UPDATE_ASSIGNMENTS) == [
            State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC, State.UPDATE_ASSIGNMENTS
        ]  # fmt: skip
        assert fsm.pln is not None
        assert (fsm.pln.spool.fragment.begin, fsm.pln.spool.fragment.end) == (ahead, ahead)
        assert fsm.pln.spool.registers == LabelSet({"reg": ""})

        assert await run_to(fsm, State.STREAM_CONTENT) == [
            State.UPDATE_ASSIGNMENTS, State.AWAIT_DESIRED_REPLICAS, State.VALIDATE_PRECONDITIONS,
            State.STREAM_CONTENT,
        ]  # fmt: skip
        await fsm._stream_content(stream(content(b"foo"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED and fsm.err is None
        commit = fsm.response().commit
        assert (commit.begin, commit.end) == (ahead, ahead + 3)

    run(scenario())


def test_start_pipeline_reuses_an_intact_pipeline_and_rebuilds_one_of_another_route(
    cluster: LocalCluster,
) -> None:
    journal = "fsm/start/reuse"
    primary, _ = create(cluster, journal, replication=2)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        intact = fsm.pln
        assert intact is not None
        assert await step(fsm) == State.UPDATE_ASSIGNMENTS  # no new sync
        assert fsm.pln is intact
        fsm.return_pipeline()

        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        assert fsm.pln is intact
        stale = pb.Route()
        stale.CopyFrom(intact.route)
        stale.members[1].suffix = "other"
        intact.route = stale  # as if built for a route that has changed since
        assert await step(fsm) == State.SEND_PIPELINE_SYNC
        assert fsm.pln is not None and fsm.pln is not intact
        assert route_equivalent(fsm.pln.route, fsm.res.route if fsm.res else pb.Route())
        assert await run_to(fsm, State.UPDATE_ASSIGNMENTS) == [
            State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC, State.UPDATE_ASSIGNMENTS
        ]  # fmt: skip
        fsm.return_pipeline()

    run(scenario())


def test_start_pipeline_invalidated_while_awaiting_the_spool(cluster: LocalCluster) -> None:
    journal = "fsm/start/spool-wait"
    primary, _ = create(cluster, journal)
    replica = primary.replicas[journal]

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        held = replica.spool_slot.get_nowait()  # someone else holds the spool
        # This resolution's own invalidation (setting the resolver's shared event would leave it set).
        assert fsm.res is not None
        fsm.res.invalidated = invalidated = asyncio.Event()
        try:
            task = asyncio.create_task(step(fsm))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            assert not done, "StartPipeline must wait for the spool"
            invalidated.set()
            assert await asyncio.wait_for(task, 10) == State.RESOLVE
            assert fsm.err is None and fsm.pln is None and fsm.owns_pipeline
        finally:
            replica.spool_slot.put_nowait(held)
        # Once the spool is back, the new resolution starts a pipeline with it.
        assert await run_to(fsm, State.UPDATE_ASSIGNMENTS) == [
            State.RESOLVE, State.START_PIPELINE, State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC,
            State.UPDATE_ASSIGNMENTS,
        ]  # fmt: skip
        assert fsm.pln is not None and fsm.pln.spool is held
        fsm.return_pipeline()

    run(scenario())


def test_start_pipeline_cancelled_while_awaiting_the_spool(cluster: LocalCluster) -> None:
    journal = "fsm/start/spool-cancel"
    primary, _ = create(cluster, journal)
    replica = primary.replicas[journal]

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        held = replica.spool_slot.get_nowait()
        try:
            task = asyncio.create_task(step(fsm))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            assert not done
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert fsm.state == State.START_PIPELINE and fsm.pln is None and fsm.err is None
        finally:
            replica.spool_slot.put_nowait(held)
        fsm.return_pipeline()
        assert replica.spool_slot.qsize() == 1 and replica.pipeline_slot.qsize() == 1

    run(scenario())


def test_start_pipeline_cancel_racing_the_spool_release_keeps_the_spool(cluster: LocalCluster) -> None:
    journal = "fsm/start/spool-race"
    primary, _ = create(cluster, journal)
    replica = primary.replicas[journal]

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.START_PIPELINE)
        await drop_pipeline(fsm)
        held = replica.spool_slot.get_nowait()
        task = asyncio.create_task(step(fsm))
        done, _ = await asyncio.wait({task}, timeout=0.2)
        assert not done
        replica.spool_slot.put_nowait(held)  # released, and the append's client goes away, at once
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        fsm.return_pipeline()
        assert replica.spool_slot.qsize() == 1, "the spool was taken by a cancelled append and lost"

    try:
        run(scenario())
    finally:
        if not replica.spool_slot.qsize():
            replica.spool_slot.put_nowait(replica.spool)  # let the replica (and the cluster) stop


# --- UpdateAssignments ---------------------------------------------------------------------------


def test_update_assignments_when_stale(cluster: LocalCluster) -> None:
    journal = "fsm/assignments/stale"
    primary, _ = create(cluster, journal, replication=2)

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        assert await run_to(fsm, State.UPDATE_ASSIGNMENTS) == [
            State.RESOLVE, State.ACQUIRE_PIPELINE, State.START_PIPELINE, State.UPDATE_ASSIGNMENTS
        ]  # fmt: skip
        # An assignment value goes stale (as written by the allocator, before any sync).
        kv = assignments_of(primary.ks, journal)[1]
        await primary.etcd.put(kv.key.encode(), b"", lease=kv.lease or None)
        await async_wait_for(
            "the KeySpace to see the stale value",
            lambda: (
                not assignments_match(assignments_of(primary.ks, journal), fsm.res.route if fsm.res else None)
            ),
        )
        assert await step(fsm) == State.RESOLVE
        assert fsm.read_through_rev > kv.mod_revision and fsm.err is None
        # Resolved again through that revision, the assignments are up to date and the held
        # pipeline is reused.
        assert await run_to(fsm, State.VALIDATE_PRECONDITIONS) == [
            State.RESOLVE, State.START_PIPELINE, State.UPDATE_ASSIGNMENTS, State.AWAIT_DESIRED_REPLICAS,
            State.VALIDATE_PRECONDITIONS,
        ]  # fmt: skip
        assert fsm.res is not None and assignments_match(assignments_of(primary.ks, journal), fsm.res.route)
        fsm.return_pipeline()

    run(scenario())


def test_update_assignments_failure_is_an_error(cluster: LocalCluster, monkeypatch) -> None:
    journal = "fsm/assignments/failure"
    primary, _ = create(cluster, journal, replication=2)

    async def failing(*_args, **_kw):  # type: ignore[no-untyped-def]
        raise ConnectionError("etcd is unreachable")

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.UPDATE_ASSIGNMENTS)
        assert fsm.res is not None
        fsm.res.route = pb.Route(members=list(fsm.res.route.members)[::-1], primary=1)  # differs from etcd
        monkeypatch.setattr("gazette.broker.append.update_assignments", failing)
        try:
            assert await step(fsm) == State.ERROR
        finally:
            monkeypatch.undo()
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.UNAVAILABLE
        assert "etcd is unreachable" in str(fsm.err)
        fsm.return_pipeline()

    run(scenario())


# --- AwaitDesiredReplicas ------------------------------------------------------------------------


def test_await_desired_replicas(cluster: LocalCluster) -> None:
    journal = "fsm/replicas/two"
    primary, other = create(cluster, journal, replication=2)

    async def scenario() -> None:
        # Local primary with as many members as desired.
        fsm = fsm_at(primary, journal)
        assert await run_to(fsm, State.VALIDATE_PRECONDITIONS) == [
            State.RESOLVE, State.ACQUIRE_PIPELINE, State.START_PIPELINE, State.UPDATE_ASSIGNMENTS,
            State.AWAIT_DESIRED_REPLICAS, State.VALIDATE_PRECONDITIONS,
        ]  # fmt: skip
        fsm.return_pipeline()

        # Remote primary, as many members as desired: proxy.
        fsm = fsm_at(other, journal)
        assert await run_to(fsm, State.PROXY) == [State.RESOLVE, State.AWAIT_DESIRED_REPLICAS, State.PROXY]

        # More members than the spec wants: a migration is under way, read through the next revision.
        fsm = fsm_at(other, journal)
        assert await step(fsm) == State.AWAIT_DESIRED_REPLICAS
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, replication=1)
        assert await step(fsm) == State.RESOLVE
        assert fsm.read_through_rev == fsm.res.header.etcd.revision + 1

        # Fewer members than the spec wants.
        fsm = fsm_at(other, journal)
        assert await step(fsm) == State.AWAIT_DESIRED_REPLICAS
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, replication=3)
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.INSUFFICIENT_JOURNAL_BROKERS and fsm.err is None

    run(scenario())


def test_await_desired_replicas_of_a_journal_the_cluster_cannot_fully_replicate(
    cluster: LocalCluster,
) -> None:
    journal = "fsm/replicas/three"
    cluster.client().apply_journals([cluster.journal_spec(journal, replication=3)])
    brokers = [h.broker for h in cluster.brokers]

    def primary() -> Broker | None:
        for b in brokers:
            res = run(b.resolver.resolve(journal, require_primary=True, may_proxy=False), 5)
            if res.status == Status.OK and len(res.route.members) == 2 and res.replica is not None:
                return b
        return None

    broker = wait_for("the journal to be assigned to both brokers", primary)

    async def scenario() -> None:
        fsm = fsm_at(broker, journal)
        trace = await run_to(fsm, State.ERROR)
        assert trace[-2:] == [State.AWAIT_DESIRED_REPLICAS, State.ERROR]
        assert fsm.status == Status.INSUFFICIENT_JOURNAL_BROKERS
        fsm.return_pipeline()

    run(scenario())


# --- ValidatePreconditions -----------------------------------------------------------------------


def test_validate_preconditions_awaits_the_first_store_listing(cluster: LocalCluster) -> None:
    journal = "fsm/validate/listing"
    primary, _ = create(cluster, journal)
    index = primary.replicas[journal].index

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.VALIDATE_PRECONDITIONS)
        index._first_refresh.clear()  # as a replica whose stores were never listed yet
        # This resolution's own invalidation (setting the resolver's shared event would leave it set).
        assert fsm.res is not None
        fsm.res.invalidated = invalidated = asyncio.Event()
        try:
            task = asyncio.create_task(step(fsm))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            assert not done, "preconditions must wait for the first listing"
            invalidated.set()  # the route changes meanwhile
            assert await asyncio.wait_for(task, 10) == State.RESOLVE
            assert fsm.err is None and fsm.owns_pipeline

            # Resolved again (holding the pipeline), it waits again; a cancellation leaves it there.
            assert await run_to(fsm, State.VALIDATE_PRECONDITIONS) == [
                State.RESOLVE, State.START_PIPELINE, State.UPDATE_ASSIGNMENTS, State.AWAIT_DESIRED_REPLICAS,
                State.VALIDATE_PRECONDITIONS,
            ]  # fmt: skip
            task = asyncio.create_task(step(fsm))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            assert not done
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert fsm.state == State.VALIDATE_PRECONDITIONS and fsm.owns_pipeline and fsm.err is None

            task = asyncio.create_task(step(fsm))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            assert not done
        finally:
            index._first_refresh.set()  # the listing arrives
        assert await asyncio.wait_for(task, 10) == State.STREAM_CONTENT
        fsm.return_pipeline()

    run(scenario())


def test_validate_preconditions_registers(cluster: LocalCluster) -> None:
    journal = "fsm/validate/registers"
    primary, _ = create(cluster, journal)
    not_matched = pb.LabelSelector(include=labels("not", "matched"))

    async def scenario() -> None:
        # The selector does not match, but the journal has no registers: it passes.
        fsm = fsm_at(primary, journal, check_registers=not_matched)
        assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
        # Give the journal registers through a committed append.
        fsm.req.union_registers.CopyFrom(labels("some", "register"))
        await fsm._stream_content(stream(content(b"x"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED and fsm.registers == LabelSet({"some": "register"})

        fsm = fsm_at(primary, journal, check_registers=not_matched)
        await run_to(fsm, State.VALIDATE_PRECONDITIONS)
        assert fsm.registers == LabelSet({"some": "register"})
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.REGISTER_MISMATCH and fsm.err is None
        assert fsm.response().registers == labels("some", "register")
        fsm.return_pipeline()

        fsm = fsm_at(primary, journal, check_registers=pb.LabelSelector(exclude=labels("is", "matched")))
        assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
        fsm.return_pipeline()

    run(scenario())


def test_validate_preconditions_offsets(cluster: LocalCluster) -> None:
    journal = "fsm/validate/offsets"
    primary, _ = create(cluster, journal)
    replica = primary.replicas[journal]

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.VALIDATE_PRECONDITIONS)
        assert fsm.pln is not None
        end = fsm.pln.spool.fragment.end
        # The stores hold a fragment beyond the spool's end (the synced offset was lost).
        replica.index.replace_remote(
            [Fragment(journal, 0, end + 456, backing_store=cluster.store, mod_time=1)]
        )
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.INDEX_HAS_GREATER_OFFSET
        fsm.return_pipeline()

        # ... except for a journal that is not writable.
        fsm = fsm_at(primary, journal)
        await run_to(fsm, State.VALIDATE_PRECONDITIONS)
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, flags=JournalFlag.O_RDONLY)
        assert await step(fsm) == State.STREAM_CONTENT
        fsm.return_pipeline()

        # An explicit offset other than the journal's end.
        fsm = fsm_at(primary, journal, offset=end + 455)
        await run_to(fsm, State.VALIDATE_PRECONDITIONS)
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.WRONG_APPEND_OFFSET
        fsm.return_pipeline()

        # The journal's end: re-sync the pipeline there (reset head), then append.
        fsm = fsm_at(primary, journal, offset=end + 456)
        await run_to(fsm, State.VALIDATE_PRECONDITIONS)
        assert await step(fsm) == State.SEND_PIPELINE_SYNC
        assert fsm.roll_to == end + 456
        assert await run_to(fsm, State.STREAM_CONTENT) == [
            State.SEND_PIPELINE_SYNC, State.RECV_PIPELINE_SYNC, State.UPDATE_ASSIGNMENTS,
            State.AWAIT_DESIRED_REPLICAS, State.VALIDATE_PRECONDITIONS, State.STREAM_CONTENT,
        ]  # fmt: skip
        await fsm._stream_content(stream(content(b"foo"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED
        commit = fsm.response().commit
        assert (commit.begin, commit.end) == (end + 456, end + 459)

    run(scenario())


# --- UpdateSuspend (through Resolve and ValidatePreconditions) ------------------------------------


def test_suspend_and_resume(cluster: LocalCluster) -> None:
    journal = "fsm/suspend/one"
    primary, _ = create(cluster, journal)
    replica = primary.replicas[journal]

    def spec_suspend(broker: Broker) -> tuple[SuspendLevel, int]:
        kv = broker.ks.get(layout.item_key(broker.root, journal))
        assert kv is not None
        return kv.decoded.suspend_level, kv.decoded.suspend_offset

    async def scenario() -> None:
        # Partial suspension of a journal with persisted fragments (SUSPEND_NOW at its end).
        replica.index.replace_remote([Fragment(journal, 0, 1024, backing_store=cluster.store, mod_time=1)])
        fsm = fsm_at(primary, journal, offset=1024, suspend=SUSPEND.SUSPEND_NOW)
        trace = await run_to(fsm, State.UPDATE_SUSPEND)
        assert trace[-2:] == [State.VALIDATE_PRECONDITIONS, State.UPDATE_SUSPEND]
        assert fsm.next_suspend == (SuspendLevel.PARTIAL, 1024) and fsm.roll_to == 1024
        assert await step(fsm) == State.RESOLVE and fsm.read_through_rev > 0
        assert await step(fsm) == State.START_PIPELINE  # resolved through the write; still owning
        assert spec_suspend(primary) == (SuspendLevel.PARTIAL, 1024)
        trace = await run_to(fsm, State.ERROR)
        assert trace[-2:] == [State.VALIDATE_PRECONDITIONS, State.ERROR]
        assert fsm.status == Status.SUSPENDED  # already partially suspended
        fsm.return_pipeline()

        # SUSPEND_KEEP (reset-head) syncs through the suspended journal, changing nothing ...
        fsm = fsm_at(primary, journal, offset=1024, suspend=SUSPEND.SUSPEND_KEEP)
        assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
        assert fsm.status == Status.OK and fsm.next_suspend is None
        await fsm._stream_content(stream(COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED
        # ... but may carry no content.
        fsm = fsm_at(primary, journal, offset=1024, suspend=SUSPEND.SUSPEND_KEEP)
        await run_to(fsm, State.STREAM_CONTENT)
        await fsm._stream_content(stream(content(b"data"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.ERROR and fsm.status == Status.NOT_ALLOWED and fsm.err is None
        assert spec_suspend(primary) == (SuspendLevel.PARTIAL, 1024)

        # SUSPEND_RESUME wakes it at the spool's end.
        fsm = fsm_at(primary, journal, suspend=SUSPEND.SUSPEND_RESUME)
        trace = await run_to(fsm, State.UPDATE_SUSPEND)
        assert trace[-2:] == [State.VALIDATE_PRECONDITIONS, State.UPDATE_SUSPEND]
        assert fsm.next_suspend == (SuspendLevel.NONE, 1024)
        assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
        assert spec_suspend(primary) == (SuspendLevel.NONE, 1024)
        assert fsm.pln is not None and fsm.pln.spool.fragment.begin == 1024
        fsm.return_pipeline()

    run(scenario())


def test_full_suspension_and_resume_at_resolve(cluster: LocalCluster) -> None:
    journal = "fsm/suspend/full"
    primary, _ = create(cluster, journal)

    async def suspend() -> None:
        # A journal with an empty index is fully suspended by SUSPEND_IF_FLUSHED.
        fsm = fsm_at(primary, journal, suspend=SUSPEND.SUSPEND_IF_FLUSHED)
        trace = await run_to(fsm, State.UPDATE_SUSPEND)
        assert trace[-2:] == [State.VALIDATE_PRECONDITIONS, State.UPDATE_SUSPEND]
        assert fsm.next_suspend is not None and fsm.next_suspend[0] == SuspendLevel.FULL
        assert await step(fsm) == State.RESOLVE
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.SUSPENDED
        fsm.return_pipeline()

        # Desired replication 0: the allocator takes the journal's assignments away. (A resume
        # racing that loses its guarded write and resolves again, as it should.)
        await async_wait_for(
            "the suspended journal's assignments to be removed",
            lambda: not assignments_of(primary.ks, journal),
        )
        # A fully suspended journal stays so for an append that does not resume it ...
        fsm = fsm_at(primary, journal, suspend=SUSPEND.SUSPEND_NO_RESUME)
        assert await step(fsm) == State.ERROR
        assert fsm.status == Status.SUSPENDED and not fsm.owns_pipeline
        # ... and is resumed, in Resolve, by one that does.
        fsm = fsm_at(primary, journal, suspend=SUSPEND.SUSPEND_RESUME)
        assert await step(fsm) == State.UPDATE_SUSPEND
        assert fsm.next_suspend is not None and fsm.next_suspend[0] == SuspendLevel.NONE
        assert await step(fsm) == State.RESOLVE and fsm.read_through_rev > 0
        await asyncio.wait_for(primary.ks.wait_for_revision(fsm.read_through_rev), 10)
        kv = primary.ks.get(layout.item_key(primary.root, journal))
        assert kv is not None and kv.decoded.suspend_level == SuspendLevel.NONE

    run(suspend())
    # Resumed, the journal is assigned again, and appends to it reach StreamContent.
    cluster.wait_for_routes([journal])
    primary = primary_of(cluster, journal)
    run(settled(primary, journal))

    async def append() -> None:
        fsm = fsm_at(primary, journal)
        assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
        assert fsm.status == Status.OK
        fsm.return_pipeline()

    run(append())


# --- StreamContent and ReadAcknowledgements ------------------------------------------------------


@pytest.fixture
def streaming(cluster: LocalCluster, request):  # type: ignore[no-untyped-def]
    """(primary, peer, journal, start): `start(**req)` runs a new FSM of a replicated journal (one
    of this test's own) to StreamContent."""
    journal = "fsm/stream/" + "".join(c if c.isalnum() else "-" for c in request.node.name)
    primary, peer = create(cluster, journal, replication=2)

    async def start(**req) -> AppendFSM:  # type: ignore[no-untyped-def]
        fsm = fsm_at(primary, journal, **req)
        assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
        return fsm

    return primary, peer, journal, start


def _in_sync(primary: Broker, peer: Broker, journal: str) -> Fragment:
    mine, theirs = primary.replicas[journal].spool, peer.replicas[journal].spool
    assert mine.fragment == theirs.fragment and mine.registers == theirs.registers and mine.delta == 0
    return mine.fragment


def test_stream_content_commits_and_updates_registers(streaming) -> None:
    primary, peer, journal, start = streaming

    async def scenario() -> None:
        # Give the journal a register "before".
        setup = await start(union_registers=labels("before", ""))
        await setup._stream_content(stream(content(b"x"), COMMIT))
        await setup._read_acknowledgements()
        begin = _in_sync(primary, peer, journal).end

        fsm = await start(
            check_registers=pb.LabelSelector(include=labels("before", "")),
            union_registers=labels("after", ""),
            subtract_registers=labels("before", ""),
        )
        await fsm._stream_content(stream(content(b"foo"), content(b"bar"), COMMIT))
        assert fsm.state == State.READ_ACKNOWLEDGEMENTS and fsm.client_commit
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED and fsm.err is None and fsm.status == Status.OK
        assert fsm.registers == LabelSet({"after": ""})
        resp = fsm.response()
        assert (resp.commit.begin, resp.commit.end) == (begin, begin + 6)
        assert resp.total_chunks == 3 and LabelSet.from_proto(resp.registers) == LabelSet({"after": ""})
        assert not fsm.owns_pipeline and fsm.pln is None
        frag = _in_sync(primary, peer, journal)
        assert frag.end == begin + 6 and primary.replicas[journal].spool.registers == LabelSet({"after": ""})

    run(scenario())


@pytest.mark.parametrize(
    ("chunks", "problem"),
    [
        pytest.param((content(b"baz"),), "without the empty commit message", id="eof-without-commit"),
        pytest.param(
            (content(b"baz"), pb.AppendRequest(journal="other/journal")),
            "content-only",
            id="non-content-chunk",
        ),
        pytest.param(
            (content(b"baz"), rpc_error(grpc.StatusCode.CANCELLED, "client went away")),
            "client stream broke: CANCELLED",
            id="client-stream-error",
        ),
        pytest.param(
            (content(b"baz"), COMMIT, content(b"bing")), "expected EOF after", id="content-after-commit"
        ),
    ],
)
def test_stream_content_rolls_back(streaming, chunks, problem) -> None:
    primary, peer, journal, start = streaming

    async def scenario() -> None:
        before = _in_sync(primary, peer, journal)
        fsm = await start()
        await fsm._stream_content(stream(*chunks))
        assert fsm.state == State.READ_ACKNOWLEDGEMENTS
        await fsm._read_acknowledgements()
        assert fsm.state == State.ERROR
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.ABORTED and problem in str(fsm.err)
        assert _in_sync(primary, peer, journal).end == before.end  # rolled back everywhere
        # The next append commits where the rolled-back one began.
        fsm = await start()
        await fsm._stream_content(stream(content(b"ok"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED
        assert (fsm.response().commit.begin, fsm.response().commit.end) == (before.end, before.end + 2)

    run(scenario())


def test_stream_content_register_update_needs_content(streaming) -> None:
    primary, peer, journal, start = streaming

    async def scenario() -> None:
        fsm = await start(union_registers=labels("foo", ""))
        await fsm._stream_content(stream(COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.ERROR and fsm.err is not None
        assert "register modification requires a non-empty append" in str(fsm.err)
        assert primary.replicas[journal].spool.registers == LabelSet()
        _in_sync(primary, peer, journal)

    run(scenario())


def test_stream_content_to_a_read_only_journal(streaming) -> None:
    primary, peer, journal, start = streaming

    async def scenario() -> None:
        before = _in_sync(primary, peer, journal)
        fsm = await start()
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, flags=JournalFlag.O_RDONLY)
        await fsm._stream_content(stream(content(b"baz"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.ERROR and fsm.err is None and fsm.status == Status.NOT_ALLOWED
        assert _in_sync(primary, peer, journal).end == before.end

        # A zero-length append to it is fine.
        fsm = await start()
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, flags=JournalFlag.O_RDONLY)
        await fsm._stream_content(stream(COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED and fsm.err is None and fsm.status == Status.OK

    run(scenario())


def test_stream_content_over_a_broken_pipeline(streaming) -> None:
    primary, peer, journal, start = streaming
    replica = primary.replicas[journal]

    async def scenario() -> None:
        fsm = await start()
        assert fsm.pln is not None
        (to_peer,) = [s for s in fsm.pln.streams if s is not None]
        await to_peer.done_writing()  # the stream to the peer breaks: sends fail, the peer ends it
        await fsm._stream_content(stream(content(b"baz"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.ERROR
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.UNAVAILABLE
        assert "failed in replication" in str(fsm.err)
        # No pipeline goes back to the slot: the next append builds a new one.
        assert replica.pipeline_slot.qsize() == 1 and replica.pipeline_slot._queue[0] is None  # type: ignore[attr-defined]
        fsm = await start()
        await fsm._stream_content(stream(content(b"ok"), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED

    run(scenario())


def test_stream_content_rolls_an_empty_spool_to_the_spec_codec(streaming) -> None:
    primary, peer, journal, start = streaming

    async def append(fsm: AppendFSM, data: bytes) -> pb.Fragment:
        await fsm._stream_content(stream(content(data), COMMIT))
        await fsm._read_acknowledgements()
        assert fsm.state == State.FINISHED
        return fsm.response().commit

    async def scenario() -> None:
        # The spool is empty: the codec the spec now names is proposed before the first chunk.
        fsm = await start()
        assert fsm.pln is not None and fsm.pln.spool.fragment.length == 0
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, compression=Codec.GZIP)
        first = await append(fsm, b"foo")
        assert (first.begin, first.end, first.compression_codec) == (0, 3, pb.GZIP)
        # The journal's first write: the next append rolls the spool (to the spec's codec).
        second = await append(await start(), b"bar")
        assert (second.begin, second.end, second.compression_codec) == (3, 6, pb.SNAPPY)
        # A non-empty spool within its length is not rolled for a codec change.
        fsm = await start()
        assert fsm.res is not None and fsm.res.spec is not None
        fsm.res.spec = dataclasses.replace(fsm.res.spec, compression=Codec.GZIP)
        third = await append(fsm, b"baz")
        assert (third.begin, third.end, third.compression_codec) == (6, 9, pb.SNAPPY)
        assert _in_sync(primary, peer, journal) == Fragment(
            journal, 3, 9, sum=hashlib.sha1(b"barbaz").digest(), codec=Codec.SNAPPY
        )

    run(scenario())


# --- run() ---------------------------------------------------------------------------------------


def test_run_whole_append_and_client_failures(streaming) -> None:
    primary, peer, journal, _ = streaming

    async def scenario() -> None:
        begin = _in_sync(primary, peer, journal).end
        fsm = fsm_at(primary, journal)
        assert await fsm.run(stream(content(b"bar"), content(b"bing"), COMMIT)) == State.FINISHED
        resp = fsm.response()
        assert (resp.commit.begin, resp.commit.end, resp.total_chunks) == (begin, begin + 7, 3)
        assert Fragment.from_proto(resp.commit).sum == hashlib.sha1(b"barbing").digest()

        # The client goes away mid-stream: the append is rolled back and the cancellation goes on.
        gate = asyncio.Event()

        async def hanging() -> AsyncIterator[pb.AppendRequest]:
            yield content(b"partial")
            gate.set()
            await asyncio.Event().wait()

        fsm = fsm_at(primary, journal)
        task = asyncio.create_task(fsm.run(hanging()))
        await asyncio.wait_for(gate.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert fsm.err is not None and "client cancelled" in str(fsm.err)
        assert _in_sync(primary, peer, journal).end == begin + 7

        # The client's stream breaks mid-append: rolled back, and an Error.
        fsm = fsm_at(primary, journal)
        broken = rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset")
        assert await fsm.run(stream(content(b"partial"), broken)) == State.ERROR
        assert fsm.err is not None and fsm.err.code == grpc.StatusCode.ABORTED
        assert "client stream broke: UNAVAILABLE" in str(fsm.err)
        assert _in_sync(primary, peer, journal).end == begin + 7

        # Anything else raised mid-stream propagates, with the pipeline dropped (its peers and the
        # local spool roll back when it shuts down) and none left in the slot for the next append.
        fsm = fsm_at(primary, journal)
        with pytest.raises(RuntimeError, match="decoder bug"):
            await fsm.run(stream(content(b"partial"), RuntimeError("decoder bug")))
        assert not fsm.owns_pipeline
        replica = primary.replicas[journal]
        assert replica.pipeline_slot.qsize() == 1 and replica.pipeline_slot._queue[0] is None  # type: ignore[attr-defined]
        fsm = fsm_at(primary, journal)
        assert await fsm.run(stream(content(b"next"), COMMIT)) == State.FINISHED
        assert (fsm.response().commit.begin, fsm.response().commit.end) == (begin + 7, begin + 11)
        assert _in_sync(primary, peer, journal).end == begin + 11

    run(scenario())


def test_run_reports_every_chunk_read_as_gazette_does(streaming) -> None:
    primary, _, journal, _ = streaming

    async def scenario() -> None:
        fsm = fsm_at(primary, journal)
        assert await fsm.run(stream(content(b"bar"), content(b"bing"), COMMIT)) == State.FINISHED
        resp = fsm.response()
        assert (resp.total_chunks, resp.delayed_chunks) == (3, 0)

    run(scenario())


def test_pipelined_appends_order_their_commits(streaming) -> None:
    primary, peer, journal, _ = streaming

    async def scenario() -> None:
        first = fsm_at(primary, journal)
        second = fsm_at(primary, journal)
        await step(first)
        await step(second)
        await step(first)  # wins the pipeline
        assert first.owns_pipeline and not second.owns_pipeline

        async def write(fsm: AppendFSM, data: bytes) -> None:
            assert (await run_to(fsm, State.STREAM_CONTENT))[-1] == State.STREAM_CONTENT
            await fsm._stream_content(stream(content(data), COMMIT))
            await fsm._read_acknowledgements()

        await asyncio.gather(write(second, b"second"), write(first, b"first"))
        assert first.state == second.state == State.FINISHED
        assert first.response().commit.end == second.response().commit.begin
        assert second.response().commit.end - second.response().commit.begin == len(b"second")
        _in_sync(primary, peer, journal)

    run(scenario())
