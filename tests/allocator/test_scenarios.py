"""Allocator scenarios against a real etcd (reference 9): several members, each with its own client,
lease, KeySpace and Allocator on one root, with journals as items and brokers' specs as members.

A RouteWriter plays the primaries' part (reference 12.2): it writes each journal's route into all of
its assignment keys, which is what makes assignments consistent; tests switch it off to hold
consistency back. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable

import aetcd
import pytest
from aetcd import rpc
from aetcd.utils import prefix_range_end

from gazette.allocator import (
    Allocator,
    MemberKeyLost,
    Session,
    State,
    announce,
    broker_spec_exiting,
    journal_adapter,
    journal_assignment_is_consistent,
    journal_is_consistent,
)
from gazette.allocator.journals import assignments_route
from gazette.allocator.state import Assignment
from gazette.broker.resolver import decode_value
from gazette.keyspace import layout
from gazette.keyspace.etcd import EmbeddedEtcd, connect
from gazette.keyspace.keyspace import KeySpace
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.spec import JournalSpec
from gazette.tasks import cancel_and_wait

TTL_S = 3
WAIT_S = 20.0
POLL_S = 0.05
ADAPTER = journal_adapter()


class Node:
    """One member process: client, lease session, announcement, KeySpace and Allocator."""

    def __init__(self, endpoint: str, root: str, zone: str, suffix: str, limit: int) -> None:
        self.endpoint, self.root = endpoint, root
        self.id = (zone, suffix)
        self.limit = limit
        self.key = layout.member_key(root, zone, suffix)

    async def start(self) -> Node:
        self.client = connect(self.endpoint)
        self.session = await Session.grant(self.client, TTL_S)
        spec = pb.BrokerSpec(
            process_spec=pb.ProcessSpec(id=pb.ProcessSpec.ID(zone=self.id[0], suffix=self.id[1])),
            journal_limit=self.limit,
        )
        self.announcement = await announce(
            self.client, self.key, spec.SerializeToString(), self.session, mark_exiting=broker_spec_exiting
        )
        self.ks = KeySpace(self.client, self.root, decode_value(self.root), watch_apply_delay_s=0.01)
        await self.ks.start()
        self.alloc = Allocator(
            self.client, self.ks, self.key, ADAPTER, min_revision=self.announcement.revision
        )
        self.alloc.start()
        return self

    async def stop(self) -> None:
        await self.alloc.stop()
        await self.ks.stop()
        await self.session.close()
        await self.client.close()


class RouteWriter:
    """Writes each journal's route into every one of its assignment keys, as a synced primary does."""

    def __init__(self, client: aetcd.Client, ks: KeySpace) -> None:
        self.client, self.ks = client, ks
        self.enabled = True
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.ks.add_observer(self._wake.set)
        self._wake.set()
        self._task = asyncio.create_task(self._run())

    def enable(self, on: bool) -> None:
        self.enabled = on
        self._wake.set()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self.enabled:
                continue
            state = State.from_keyspace(self.ks, "", ADAPTER)
            live = {item.id for item in state.items}
            for item_id, assignments in state.assignments.items():
                if item_id in live and not journal_is_consistent(assignments):
                    await self._write(assignments)

    async def _write(self, assignments: list[Assignment]) -> None:
        value = assignments_route(assignments).SerializeToString()
        compares = [
            rpc.Compare(
                key=a.key.encode(),
                result=rpc.Compare.EQUAL,
                target=rpc.Compare.MOD,
                mod_revision=a.mod_revision,
            )
            for a in assignments
        ]
        puts = [
            rpc.RequestOp(request_put=rpc.PutRequest(key=a.key.encode(), value=value, ignore_lease=True))
            for a in assignments
        ]
        await self.client.connect()
        # A failed compare means the assignments changed: the next KeySpace change brings us back.
        await self.client.kvstub.Txn(rpc.TxnRequest(compare=compares, success=puts), timeout=10)


class Cluster:
    """Nodes on one root, an observer KeySpace, a RouteWriter, and helpers to read and wait."""

    def __init__(self, etcd: EmbeddedEtcd, root: str) -> None:
        self.endpoint, self.root = etcd.endpoint, root
        self.nodes: dict[str, Node] = {}

    async def open(self) -> None:
        self.client = connect(self.endpoint)
        self.ks = KeySpace(self.client, self.root, decode_value(self.root), watch_apply_delay_s=0.01)
        await self.ks.start()
        self.writer = RouteWriter(self.client, self.ks)
        self.writer.start()

    async def close(self) -> None:
        await self.writer.stop()
        for node in self.nodes.values():
            await node.stop()
        await self.ks.stop()
        await self.client.close()

    async def add(self, who: str, limit: int) -> Node:
        zone, suffix = who.split("/")
        node = await Node(self.endpoint, self.root, zone, suffix, limit).start()
        self.nodes[who] = node
        return node

    async def journal(self, name: str, replication: int) -> None:
        raw = JournalSpec(name, replication=replication).to_proto().SerializeToString()
        await self.client.put(layout.item_key(self.root, name).encode(), raw)

    # ---- reading the observer's view

    def state(self) -> State:
        return State.from_keyspace(self.ks, "", ADAPTER)

    def of(self, journal: str) -> list[Assignment]:
        return self.state().assignments.get(journal, [])

    def load(self) -> Counter[tuple[str, str]]:
        state = self.state()
        live = {i.id for i in state.items}
        return Counter(a.member for j, asns in state.assignments.items() if j in live for a in asns)

    def held_by(self, who: str) -> list[Assignment]:
        member = tuple(who.split("/"))
        return [a for asns in self.state().assignments.values() for a in asns if a.member == member]

    def placed(self, want: dict[str, int], consistent: bool = True) -> bool:
        """Each journal has exactly R assignments on distinct members, slots 0..R-1, spanning two zones
        when R > 1 and members in two zones have capacity, and (optionally) all consistent."""
        state = self.state()
        zones_with_capacity = {m.zone for m in state.members if state.effective_limit(m) > 0}
        for journal, r in want.items():
            asns = state.assignments.get(journal, [])
            if sorted(a.slot for a in asns) != list(range(r)) or len({a.member for a in asns}) != r:
                return False
            if r > 1 and len(zones_with_capacity) > 1 and len({a.zone for a in asns}) < 2:
                return False
            if consistent and not journal_is_consistent(asns):
                return False
        for m in state.members:
            if sum(1 for asns in state.assignments.values() for a in asns if a.member == m.id) > m.item_limit:
                return False
        return True

    def leader(self) -> Node:
        leaders = [n for n in self.nodes.values() if n.alloc.is_leader]
        assert len(leaders) == 1, f"leaders: {[n.key for n in leaders]}"
        return leaders[0]

    def settled(self) -> bool:
        """The leader saw the observer's current revision and had nothing it could change."""
        return any(
            n.alloc.is_leader and n.alloc.idle_revision >= self.ks.revision for n in self.nodes.values()
        )

    async def until(self, pred: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not pred():
            if loop.time() > deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}; assignments:\n{self.dump()}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ks.wait_for_change(), POLL_S)

    def dump(self) -> str:
        state = self.state()
        lines = [
            f"{a.key} {'consistent' if journal_assignment_is_consistent(None, a, asns) else '-'}"
            for asns in state.assignments.values()
            for a in asns
        ]
        lines += [
            f"{m.key} limit={m.item_limit} exiting={m.exiting} shed={state.shed.get(m.id, 0)}"
            for m in state.members
        ]
        return "\n".join(lines)

    async def history(self, journal: str, start: int) -> list[list[Assignment]]:
        """The journal's assignments at every etcd revision from `start` to now."""
        prefix = layout.item_assign_prefix(self.root, journal).encode()
        decode = decode_value(self.root)
        await self.client.connect()
        now = (
            await self.client.kvstub.Range(rpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix)))
        ).header.revision
        out = []
        for revision in range(start, now + 1):
            resp = await self.client.kvstub.Range(
                rpc.RangeRequest(key=prefix, range_end=prefix_range_end(prefix), revision=revision)
            )
            asns = []
            for kv in resp.kvs:
                key = kv.key.decode()
                ak = layout.parse_assignment_key(self.root, key)
                asns.append(
                    Assignment(
                        key,
                        ak.item,
                        ak.zone,
                        ak.suffix,
                        ak.slot,
                        decode(key, kv.value),
                        kv.mod_revision,
                        kv.lease,
                    )
                )
            out.append(asns)
        return out


@pytest.fixture
async def cluster(etcd: EmbeddedEtcd, etcd_root: str) -> AsyncIterator[Cluster]:
    c = Cluster(etcd, etcd_root)
    await c.open()
    try:
        yield c
    finally:
        await c.close()


def assert_removals_kept_consistency(history: list[list[Assignment]], r: int) -> int:
    """At every revision that removed assignments (moves aside), the consistent assignments left were
    at least `r`; and no revision held fewer than `r` assignments. Returns how many removals there were."""
    removals = 0
    for before, after in zip(history, history[1:], strict=False):
        assert len(after) >= r, f"fewer than {r} assignments: {[a.key for a in after]}"
        gone = {a.member for a in before} - {a.member for a in after}
        if not gone:
            continue
        removals += 1
        consistent = [a for a in before if journal_assignment_is_consistent(None, a, before)]
        left = [a for a in consistent if a.member not in gone]
        assert len(left) >= r, (
            f"removal of {sorted(gone)} left {len(left)} consistent of {[a.key for a in before]}"
        )
    return removals


# ---- scenarios


async def test_initial_placement_spans_zones(cluster: Cluster) -> None:
    for who in ("zone-a/A1", "zone-a/A2", "zone-b/B1"):
        await cluster.add(who, 3)
    want = {"test/j-1": 1, "test/j-2": 2, "test/j-3": 3, "test/j-4": 2}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(lambda: cluster.placed(want), "every journal placed and consistent")
    await cluster.until(cluster.settled, "the leader to settle")
    assert cluster.leader() is cluster.nodes["zone-a/A1"]  # the oldest member key
    assert all(load <= 3 for load in cluster.load().values())
    # Stopped before its member exited: a waiter learns it rather than hanging.
    node = cluster.nodes["zone-b/B1"]
    await node.alloc.stop()
    with pytest.raises(RuntimeError, match="stopped before the member exited"):
        await node.alloc.wait_exited()


async def test_scale_up_rebalances(cluster: Cluster) -> None:
    await cluster.add("a/A1", 10)
    await cluster.add("b/B1", 10)
    want = {f"test/j-{i}": 2 for i in range(6)}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(lambda: cluster.placed(want), "placement on two members")
    assert cluster.load() == {("a", "A1"): 6, ("b", "B1"): 6}

    await cluster.add("a/A2", 10)
    await cluster.add("b/B2", 10)
    # Fair share is 10 x 12 / 40 = 3 each.
    balanced = {("a", "A1"): 3, ("a", "A2"): 3, ("b", "B1"): 3, ("b", "B2"): 3}
    await cluster.until(
        lambda: cluster.placed(want) and cluster.load() == balanced, "an even spread over four"
    )


async def test_scale_down_moves_load_without_losing_consistent_replicas(cluster: Cluster) -> None:
    for who in ("a/A1", "a/A2", "b/B1", "b/B2"):
        await cluster.add(who, 10)
    want = {f"test/j-{i}": 2 for i in range(4)}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(lambda: cluster.placed(want), "placement")
    await cluster.until(
        lambda: len(cluster.held_by("a/A1")) > 0 and cluster.placed(want), "A1 to hold journals"
    )
    start = cluster.ks.revision

    exiting = cluster.nodes["a/A1"]
    await exiting.announcement.set_exiting()
    await asyncio.wait_for(exiting.alloc.wait_exited(), WAIT_S)
    assert exiting.alloc.state is not None and exiting.alloc.state.local_assignments() == []
    await cluster.until(lambda: cluster.placed(want) and not cluster.held_by("a/A1"), "placement without A1")

    removals = 0
    for name in want:
        removals += assert_removals_kept_consistency(await cluster.history(name, start), 2)
    assert removals >= 1  # the check above was not vacuous


async def test_lease_expiry_replaces_the_members_assignments(cluster: Cluster) -> None:
    for who in ("a/A1", "a/A2", "b/B1", "b/B2"):
        await cluster.add(who, 10)
    want = {f"test/j-{i}": 2 for i in range(4)}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(
        lambda: cluster.placed(want) and len(cluster.held_by("b/B2")) > 0, "B2 holding journals"
    )

    victim = cluster.nodes["b/B2"]
    await victim.client.revoke_lease(victim.session.lease_id)  # as if it crashed and its TTL ran out
    await cluster.until(
        lambda: (
            cluster.placed(want)
            and not cluster.held_by("b/B2")
            and cluster.state().member_by_id.get(("b", "B2")) is None
        ),
        "replacement of B2's assignments",
    )
    with pytest.raises(MemberKeyLost, match="is not in etcd"):
        await asyncio.wait_for(victim.alloc.wait_exited(), WAIT_S)
    await asyncio.wait_for(victim.session.wait_lost(), WAIT_S)


async def test_capacity_shedding_drains_an_exiting_member_only_from_excess(cluster: Cluster) -> None:
    for who in ("a/A1", "a/A2", "b/B1"):
        await cluster.add(who, 2)
    want = {f"test/j-{i}": 1 for i in range(5)}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(lambda: cluster.placed(want), "placement")

    exiting = cluster.nodes["a/A1"]
    await exiting.announcement.set_exiting()
    # 6 slots for 5 replicas: an excess of 1, so A1 sheds one slot and must keep one journal.
    await cluster.until(
        lambda: cluster.placed(want) and len(cluster.held_by("a/A1")) == 1 and cluster.settled(),
        "A1 to shed down to one journal",
    )
    assert cluster.state().shed == {("a", "A1"): 1}
    assert not exiting.alloc.exited

    # New capacity: A1 sheds everything, and its allocator reports it may exit.
    await cluster.add("b/B2", 2)
    await asyncio.wait_for(exiting.alloc.wait_exited(), WAIT_S)
    await cluster.until(lambda: cluster.placed(want) and not cluster.held_by("a/A1"), "placement without A1")


async def test_replacement_waits_for_consistency(cluster: Cluster) -> None:
    for who in ("a/A1", "a/A2", "b/B1"):
        await cluster.add(who, 10)
    want = {"test/j-1": 2}
    await cluster.journal("test/j-1", 2)
    await cluster.until(lambda: cluster.placed(want), "placement")
    assert len(cluster.held_by("b/B1")) == 1  # the only member of zone b

    # Primaries stop syncing; B1 exits. Its replacement is added, but B1's assignment stays while the
    # journal is inconsistent.
    cluster.writer.enable(False)
    await cluster.nodes["b/B1"].announcement.set_exiting()
    await cluster.until(
        lambda: len(cluster.of("test/j-1")) == 3 and cluster.settled(), "the replacement added"
    )
    assert len(cluster.held_by("b/B1")) == 1
    assert not journal_is_consistent(cluster.of("test/j-1"))

    # Once the routes are written (the replicas synced), B1's assignment goes.
    cluster.writer.enable(True)
    await asyncio.wait_for(cluster.nodes["b/B1"].alloc.wait_exited(), WAIT_S)
    await cluster.until(
        lambda: cluster.placed(want) and {a.zone for a in cluster.of("test/j-1")} == {"a"},
        "placement in zone a",
    )


async def test_assignments_of_deleted_journals_are_removed(cluster: Cluster) -> None:
    a1 = await cluster.add("a/A1", 10)
    await cluster.add("b/B1", 10)
    want = {"test/j-1": 2, "test/j-2": 2}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(lambda: cluster.placed(want), "placement")
    before = {a.key for a in cluster.of("test/j-2")}

    await cluster.client.delete(layout.item_key(cluster.root, "test/j-1").encode())
    # An assignment of a journal that never existed, under a live member's lease.
    ghost = layout.assignment_key(cluster.root, "test/ghost", "a", "A1", 0)
    await cluster.client.put(ghost.encode(), b"", lease=a1.session.lease_id)
    await cluster.until(
        lambda: not cluster.of("test/j-1") and not cluster.of("test/ghost") and cluster.settled(),
        "dead assignments removed",
    )
    assert {a.key for a in cluster.of("test/j-2")} == before


async def test_a_primary_is_promoted_when_slot_zero_goes(cluster: Cluster) -> None:
    await cluster.add("a/A1", 10)
    await cluster.add("b/B1", 10)
    await cluster.journal("test/j-1", 2)
    await cluster.until(lambda: cluster.placed({"test/j-1": 2}), "placement")
    cluster.writer.enable(False)
    primary = next(a for a in cluster.of("test/j-1") if a.slot == 0)
    replica = next(a for a in cluster.of("test/j-1") if a.slot == 1)
    stored = (await cluster.client.get(replica.key.encode())).value  # type: ignore[union-attr]

    await cluster.client.delete(primary.key.encode())
    promoted_key = layout.assignment_key(cluster.root, "test/j-1", replica.zone, replica.suffix, 0)
    await cluster.until(lambda: cluster.ks.get(promoted_key) is not None, "the replica promoted to slot 0")
    got = await cluster.client.get(promoted_key.encode())
    assert got is not None and got.value == stored and got.lease == replica.lease  # the same bytes, lease
    assert cluster.ks.get(replica.key) is None
    # The lost replica is replaced (at the next slot), and routes synced again.
    cluster.writer.enable(True)
    await cluster.until(lambda: cluster.placed({"test/j-1": 2}), "full replication again")


async def test_leadership_passes_when_the_leaders_lease_ends(cluster: Cluster) -> None:
    for who in ("a/A1", "a/A2", "b/B1"):
        await cluster.add(who, 10)
    want = {f"test/j-{i}": 2 for i in range(3)}
    for name, r in want.items():
        await cluster.journal(name, r)
    await cluster.until(lambda: cluster.placed(want) and cluster.settled(), "placement")
    old = cluster.leader()
    assert old is cluster.nodes["a/A1"]
    await cluster.until(lambda: len(cluster.held_by("a/A1")) > 0, "A1 holding journals")

    await old.client.revoke_lease(old.session.lease_id)
    heir = cluster.nodes["a/A2"]  # the next-oldest member key
    await cluster.until(
        lambda: cluster.placed(want) and not cluster.held_by("a/A1") and heir.alloc.is_leader,
        "A2 leading and A1's journals replaced",
    )
    assert heir.alloc.commits > 0
    with pytest.raises(MemberKeyLost):
        await asyncio.wait_for(old.alloc.wait_exited(), WAIT_S)
