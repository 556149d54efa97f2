"""The brokers' adapter: desired replication of a JournalSpec, route consistency, exiting specs."""

from __future__ import annotations

from gazette.allocator.journals import (
    assignments_route,
    broker_is_exiting,
    broker_item_limit,
    broker_spec_exiting,
    journal_adapter,
    journal_assignment_is_consistent,
    journal_desired_replication,
    journal_is_consistent,
)
from gazette.allocator.state import Assignment
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.spec import JournalSpec


def asn(zone: str, suffix: str, slot: int, value: pb.Route | None = None) -> Assignment:
    key = f"/r/assign/j/x#{zone}#{suffix}#{slot}"
    return Assignment(key, "j/x", zone, suffix, slot, pb.Route(primary=-1) if value is None else value, 1, 0)


def route(primary: int, *members: tuple[str, str], endpoints: tuple[str, ...] = ()) -> pb.Route:
    ids = [pb.ProcessSpec.ID(zone=z, suffix=s) for z, s in members]
    return pb.Route(members=ids, primary=primary, endpoints=list(endpoints))


def test_desired_replication_follows_replication_cap_and_suspension() -> None:
    assert journal_desired_replication(JournalSpec("a/journal", replication=3)) == 3
    assert journal_desired_replication(JournalSpec("a/journal", replication=5), max_replication=2) == 2
    assert journal_desired_replication(JournalSpec("a/journal", replication=3, suspend_level="partial")) == 1
    assert journal_desired_replication(JournalSpec("a/journal", replication=3, suspend_level="full")) == 0
    adapter = journal_adapter(max_replication=4)
    assert adapter.item_replication(JournalSpec("a/journal", replication=5)) == 4


def test_route_of_assignment_keys() -> None:
    got = assignments_route([asn("b", "b1", 1), asn("a", "a2", 0), asn("a", "a1", 2)])
    assert [(m.zone, m.suffix) for m in got.members] == [("a", "a1"), ("a", "a2"), ("b", "b1")]
    assert got.primary == 1
    assert assignments_route([asn("a", "a1", 1)]).primary == -1
    assert assignments_route([]) == pb.Route(primary=-1)


def test_consistency_compares_members_and_primary_only() -> None:
    good = route(0, ("a", "a1"), ("b", "b1"), endpoints=("http://x:1", "http://y:2"))
    fresh = [asn("a", "a1", 0, good), asn("b", "b1", 1)]  # b1 still holds the empty value
    assert journal_assignment_is_consistent(None, fresh[0], fresh)
    assert not journal_assignment_is_consistent(None, fresh[1], fresh)
    assert not journal_is_consistent(fresh)

    both = [asn("a", "a1", 0, good), asn("b", "b1", 1, good)]
    assert journal_is_consistent(both)
    # Another primary, or another member set, is a different route.
    moved = [asn("a", "a1", 1, good), asn("b", "b1", 0, good)]
    assert not journal_is_consistent(moved)
    grown = [*both, asn("c", "c1", 2, good)]
    assert not journal_is_consistent(grown)
    assert journal_is_consistent([])


def test_broker_spec_values() -> None:
    spec = pb.BrokerSpec(
        process_spec=pb.ProcessSpec(id=pb.ProcessSpec.ID(zone="a", suffix="b1"), endpoint="http://h:1"),
        journal_limit=7,
    )
    assert broker_item_limit(spec) == 7 and not broker_is_exiting(spec)
    exiting = pb.BrokerSpec.FromString(broker_spec_exiting(spec.SerializeToString()))
    assert broker_is_exiting(exiting)
    exiting.exiting = False
    assert exiting == spec  # nothing else changed
