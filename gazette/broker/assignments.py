"""Etcd writes a primary makes on its journal's behalf (UpdateAssignments, UpdateSuspend:
docs/semantics.md#append-fsm).

After a pipeline sync the primary advertises the route in every assignment value (consistency, which
lets the allocator finish migrations: docs/semantics.md#route-consistency); suspension changes rewrite the
spec. Both are single transactions guarded by the mod revisions they were computed from.
"""

from __future__ import annotations

import dataclasses

import aetcd
from aetcd import rpc

from gazette.allocator.journals import route_equivalent
from gazette.keyspace import layout
from gazette.keyspace.etcd import txn
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


async def update_assignments(
    etcd: aetcd.Client, assignments: list[KeyValue], route: pb.Route
) -> tuple[bool, int]:
    """Writes `route` into every assignment whose value differs, keeping each key's lease.

    Returns (succeeded, revision): etcd's revision as of the txn, to read through before resolving
    again. Failed or not, that revision holds whatever the txn saw: a compare that failed did so on
    a change at or before it, so the KeySpace reaching it is guaranteed, and is all that is needed.
    """
    value = route_value(route)
    compares = [_mod_is(kv.key, kv.mod_revision) for kv in assignments]
    ops = [_put(kv.key, value, kv.lease) for kv in assignments if not route_equivalent(kv.decoded, route)]
    resp = await txn(etcd, rpc.TxnRequest(compare=compares, success=ops, failure=[]))
    return bool(resp.succeeded), int(resp.header.revision)


async def update_suspend(
    etcd: aetcd.Client,
    ks: KeySpace,
    spec: JournalSpec,
    item_mod_revision: int,
    level: SuspendLevel,
    offset: int,
) -> tuple[bool, int]:
    """Writes the spec with a new suspension, guarded by the item's and every assignment's revision.
    Returns (succeeded, etcd's revision as of the txn), as update_assignments does."""
    item_key = layout.item_key(ks.root, spec.name)
    updated = dataclasses.replace(spec, suspend_level=level, suspend_offset=offset)
    compares = [_mod_is(item_key, item_mod_revision)]
    compares += [_mod_is(kv.key, kv.mod_revision) for kv in assignments_of(ks, spec.name)]
    ops = [_put(item_key, updated.to_proto().SerializeToString(), 0)]
    resp = await txn(etcd, rpc.TxnRequest(compare=compares, success=ops, failure=[]))
    return bool(resp.succeeded), int(resp.header.revision)


def _mod_is(key: str, mod_revision: int) -> rpc.Compare:
    return rpc.Compare(
        key=key.encode(), result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=mod_revision
    )


def _put(key: str, value: bytes, lease: int) -> rpc.RequestOp:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key.encode(), value=value, lease=lease or 0))
