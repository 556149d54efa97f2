"""Etcd writes a primary makes on its journal's behalf (reference 4.1 UpdateAssignments, UpdateSuspend).

After a pipeline sync the primary advertises the route in every assignment value (consistency, which
lets the allocator finish migrations: reference 12, item 2); suspension changes rewrite the spec.
Both are single transactions guarded by the mod revisions they were computed from.
"""

from __future__ import annotations

import dataclasses

import aetcd

from gazette.allocator.journals import route_equivalent
from gazette.keyspace import layout
from gazette.keyspace.keyspace import KeySpace, KeyValue
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.spec import JournalSpec, SuspendLevel


def assignments_of(ks: KeySpace, journal: str) -> list[KeyValue]:
    return ks.prefixed(layout.item_assign_prefix(ks.root, journal))


def route_value(route: pb.Route) -> bytes:
    """The advertised route: members and primary (endpoints are not part of route equivalence)."""
    return pb.Route(members=route.members, primary=route.primary).SerializeToString()


def assignments_match(assignments: list[KeyValue], route: pb.Route) -> bool:
    return bool(assignments) and all(route_equivalent(kv.decoded, route) for kv in assignments)


async def update_assignments(etcd: aetcd.Client, assignments: list[KeyValue], route: pb.Route) -> tuple[bool, int]:
    """Writes `route` into every assignment whose value differs, keeping each key's lease.

    Returns (succeeded, revision): the revision to read through before resolving again.
    """
    tx = etcd.transactions
    value = route_value(route)
    compare = [tx.mod(kv.key.encode()) == kv.mod_revision for kv in assignments]
    success = [
        tx.put(kv.key.encode(), value, lease=kv.lease or None)
        for kv in assignments
        if not route_equivalent(kv.decoded, route)
    ]
    ok, resp = await etcd.transaction(compare=compare, success=success, failure=[])
    return ok, _revision(resp)


async def update_suspend(
    etcd: aetcd.Client,
    ks: KeySpace,
    spec: JournalSpec,
    item_mod_revision: int,
    level: SuspendLevel,
    offset: int,
) -> tuple[bool, int]:
    """Writes the spec with a new suspension, guarded by the item's and every assignment's revision."""
    tx = etcd.transactions
    item_key = layout.item_key(ks.root, spec.name).encode()
    updated = dataclasses.replace(spec, suspend_level=level, suspend_offset=offset)
    compare = [tx.mod(item_key) == item_mod_revision]
    compare += [tx.mod(kv.key.encode()) == kv.mod_revision for kv in assignments_of(ks, spec.name)]
    ok, resp = await etcd.transaction(
        compare=compare, success=[tx.put(item_key, updated.to_proto().SerializeToString())], failure=[]
    )
    return ok, _revision(resp)


def _revision(responses) -> int:
    """The revision a successful txn wrote at (0 when it wrote nothing or failed)."""
    for r in responses:
        if r.WhichOneof("response") == "response_put":
            return int(r.response_put.header.revision)
    return 0
