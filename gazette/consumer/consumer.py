"""Consumer: one member of a consumer application: lease, announcement, allocator, shards
(docs/semantics.md#allocation, #shard-lifecycle).

Built on `gazette.member.Member` (the lifecycle it shares with brokers): the consumer announces
`<root>/members/<zone>#<suffix>` (a ConsumerSpec with its shard_limit and endpoint) under an etcd
lease, runs the generic Allocator with the shard adapter, and starts a Shard
for each assignment it holds, stopping those it loses. Replica statuses are CAS writes reduced with
the stored value. Every value is Gazette's protobuf message (gazette.consumer.allocation). Each member
serves Gazette's consumer.Shard gRPC service, and gazette-py's gazette_py.Shards (Inspect) beside it
(gazette.consumer.service), at `endpoint`, which it announces, and its Prometheus metrics
(gazette.consumer.metrics) at `metrics_endpoint`, as a broker does.
`stop(graceful=False)` is a crash: nothing is drained and the lease is left to expire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import aetcd
import grpc
from aetcd import rpc

from gazette import tunables
from gazette.allocator.state import Assignment
from gazette.auth.tls import TLSConfig
from gazette.auth.tokens import KeyedAuth
from gazette.client.aio import AsyncClient
from gazette.consumer.allocation import (
    DEFAULT_SHARD_LIMIT,
    ConsumerSpec,
    consumer_spec_exiting,
    decode_value,
    shard_adapter,
)
from gazette.consumer.application import Application
from gazette.consumer.metrics import ConsumerMetrics
from gazette.consumer.service import InspectService, ShardService
from gazette.consumer.shard import Shard
from gazette.consumer.spec import MAX_HOT_STANDBYS_DEFAULT, ShardSpec
from gazette.consumer.status import ReplicaStatus
from gazette.consumer.transaction import Hooks
from gazette.keyspace import layout
from gazette.keyspace.etcd import txn
from gazette.keyspace.keyspace import KeySpace
from gazette.member import LeaseLossPolicy, Member
from gazette.protocol import gazette_py_pb2_grpc, shard_pb2_grpc
from gazette.protocol.endpoints import check_keepalive
from gazette.protocol.errors import ValidationError

log = logging.getLogger(__name__)

SERVER_GRACE_S = 1.0  # a graceful stop lets in-flight Shard RPCs finish this long


class Consumer(Member):
    """Runs `app` as one member of the consumer application rooted at `root` (on the current loop).

    A `Member` (etcd session and announcement, KeySpace, allocator, reconcile loop, bounded stop)
    that holds a Shard per assignment, serves Gazette's consumer.Shard service and gazette-py's
    Inspect, and stops as a crash would when its lease is lost (`LeaseLossPolicy.STOP`)."""

    kind = "consumer"
    lease_loss = LeaseLossPolicy.STOP
    server_grace_s = SERVER_GRACE_S

    def __init__(
        self,
        app: Application,
        etcd_endpoint: str,
        broker_endpoint: str,
        *,
        root: str,
        zone: str = "local",
        suffix: str | None = None,
        shard_limit: int = DEFAULT_SHARD_LIMIT,
        lease_ttl_s: int = tunables.LEASE_TTL_S,
        max_hot_standbys: int = MAX_HOT_STANDBYS_DEFAULT,
        exit_drain_s: float = tunables.CONSUMER_EXIT_DRAIN_S,
        watch_apply_delay_s: float = 0.01,
        hooks: Hooks | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics_port: int | None = 0,
        advertise: str | None = None,
        auth_keys: KeyedAuth | str | None = None,
        server_tls: TLSConfig | None = None,
        peer_tls: TLSConfig | None = None,
        broker_auth_keys: KeyedAuth | str | None = None,
        broker_tls: TLSConfig | None = None,
        broker_keepalive: float | None = None,
    ) -> None:
        """Security, as Gazette's consumer flags: `auth_keys` (--consumer.auth-keys) makes every
        Shard RPC require a signed token and signs calls proxied to other members; `server_tls`
        serves over TLS (https:// endpoint); `peer_tls` is presented to and trusts other members;
        `broker_auth_keys` and `broker_tls` (--broker.*) are those of this member's journal client,
        and `broker_keepalive` its ping interval (seconds; None: none; see AsyncClient).
        `metrics_port` serves /metrics over HTTP on `host` (0: a free port; None: not served)."""
        if not isinstance(app, Application):
            raise TypeError(f"{app!r} is not a gazette.consumer.Application")
        if isinstance(shard_limit, bool) or not isinstance(shard_limit, int) or shard_limit < 0:
            raise ValidationError(f"shard_limit {shard_limit!r} is not an integer >= 0")
        super().__init__(
            etcd_endpoint, root=root, zone=zone, suffix=suffix, lease_ttl_s=lease_ttl_s,
            exit_drain_s=exit_drain_s, watch_apply_delay_s=watch_apply_delay_s, host=host, port=port,
            advertise=advertise, metrics_port=metrics_port, server_tls=server_tls,
        )  # fmt: skip
        self.app = app
        self.broker_endpoint = broker_endpoint
        self.shard_limit = shard_limit
        self.max_hot_standbys = max_hot_standbys
        self.hooks = hooks or Hooks()
        self.auth = KeyedAuth.coerce(auth_keys)
        self.peer_tls = peer_tls
        self.broker_auth = KeyedAuth.coerce(broker_auth_keys)
        self.broker_tls = broker_tls
        self.broker_keepalive = check_keepalive(broker_keepalive)
        self.metrics = ConsumerMetrics(lambda: self.shards.values())
        self.shards: dict[str, Shard] = {}

    # ---- the member's hooks

    def _decode_value(self):  # type: ignore[no-untyped-def]
        return decode_value(self.root)

    def _adapter(self):  # type: ignore[no-untyped-def]
        return shard_adapter(self.max_hot_standbys)

    def _member_value(self) -> bytes:
        spec = ConsumerSpec(
            shard_limit=self.shard_limit, endpoint=self.endpoint, zone=self.zone, suffix=self.suffix
        )
        return spec.to_bytes()

    def _mark_exiting(self, value: bytes) -> bytes:
        return consumer_spec_exiting(value)

    async def _open(self, server: grpc.aio.Server) -> None:
        self.client = AsyncClient(
            self.broker_endpoint,
            self.etcd_endpoint,
            auth_keys=self.broker_auth,
            tls=self.broker_tls,
            keepalive=self.broker_keepalive,
        )
        self.service = ShardService(self)
        shard_pb2_grpc.add_ShardServicer_to_server(self.service, server)
        gazette_py_pb2_grpc.add_ShardsServicer_to_server(InspectService(self.service), server)

    async def start(self) -> Consumer:
        await super().start()
        log.info("consumer %s#%s started under %s", self.zone, self.suffix, self.root)
        return self

    async def _stop_serving(self) -> None:
        await self.service.close()

    async def _stop_items(self, graceful: bool) -> None:
        shards, self.shards = list(self.shards.values()), {}
        await asyncio.gather(*(s.stop() for s in shards), return_exceptions=True)

    async def _close(self) -> None:
        await self.client.close()

    # ---- shards

    def _reconcile(self) -> None:
        """Starts a Shard for each new assignment held here; stops those no longer held."""
        if self._stopping:
            return
        held: dict[str, tuple[ShardSpec, str, int, Assignment]] = {}
        for key, kv, item in self.held_assignments():
            assignment = Assignment(
                kv.key, key.item, key.zone, key.suffix, key.slot, kv.decoded, kv.mod_revision, kv.lease
            )
            held[key.item] = (item.decoded, item.key, item.create_revision, assignment)
        for shard_id, shard in list(self.shards.items()):
            now = held.get(shard_id)
            # A primary whose slot 0 was removed (an unassign) and that holds the shard again in
            # another slot is a new assignment (the allocator never demotes by moving slot 0).
            if (
                now is None
                or now[2] != shard.create_revision
                or (shard.assignment.slot == 0 and now[3].slot != 0)
            ):
                del self.shards[shard_id]
                self.background(shard.stop(), f"stop shard {shard_id}")
            else:
                shard.update(now[0], now[3])
        for shard_id, (spec, fqn, create_revision, assignment) in held.items():
            if shard_id not in self.shards:
                shard = self.shards[shard_id] = Shard(self, spec, fqn, assignment, create_revision)
                shard.start(self.hooks)

    async def set_status(self, shard: Shard, status: ReplicaStatus) -> None:
        """Reduces `status` into the shard's assignment value by CAS, retrying on races, and waits to
        observe the write; a no-op once the assignment is gone or this consumer is stopping."""
        while not self._stopping:
            kv = self.ks.get(shard.assignment.key)
            if kv is None:
                return
            current = kv.decoded if isinstance(kv.decoded, ReplicaStatus) else ReplicaStatus()
            reduced = current.reduce(status)
            if reduced == current:
                return
            key = kv.key.encode()
            resp = await txn(self.etcd, rpc.TxnRequest(
                compare=[rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=kv.mod_revision)],
                success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=reduced.to_bytes(), ignore_lease=True))],
            ))  # fmt: skip
            if resp.succeeded:
                await self.ks.wait_for_revision(int(resp.header.revision))
                return
            await self.ks.wait_for_revision(int(resp.header.revision))  # holds the change that beat us


# ---- the shard space


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica of a listed shard: its member, slot and status.

    Listed from etcd (`list_shards`), `slot` is the assignment's. Listed through the Shard service
    (`ShardClient.list_shards`), whose answer is Gazette's route (members in (zone, suffix) order and
    the primary's index) with a status per member, the primary is slot 0 and the others are numbered
    1, 2, ... in route order: their own slot numbers are not on the wire. `endpoint` is the member's
    Shard service, when listed through it.
    """

    zone: str
    suffix: str
    slot: int
    status: ReplicaStatus
    endpoint: str = ""


@dataclass(frozen=True)
class ShardInfo:
    """A shard as listed: its spec, its etcd mod (and create) revision, and its replicas (slot 0 first)."""

    spec: ShardSpec
    mod_revision: int
    replicas: tuple[ReplicaInfo, ...]
    create_revision: int = 0

    @property
    def primary(self) -> ReplicaInfo | None:
        return next((r for r in self.replicas if r.slot == 0), None)


async def apply_shards(
    etcd: aetcd.Client, root: str, upserts: Iterable[ShardSpec] = (), deletes: Iterable[str] = ()
) -> int:
    """Writes (or deletes) shard specs under `<root>/items/` in one etcd transaction; returns its revision."""
    ops = []
    for spec in upserts:
        if not isinstance(spec, ShardSpec):
            raise TypeError(f"{spec!r} is not a ShardSpec")
        ops.append(
            rpc.RequestOp(
                request_put=rpc.PutRequest(key=layout.item_key(root, spec.id).encode(), value=spec.to_bytes())
            )
        )
    for shard_id in deletes:
        ops.append(
            rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(key=layout.item_key(root, shard_id).encode())
            )
        )
    resp = await txn(etcd, rpc.TxnRequest(success=ops))
    return int(resp.header.revision)


async def list_shards(etcd: aetcd.Client, root: str) -> list[ShardInfo]:
    """Every shard under `root` with its replicas' statuses, read at one revision."""
    ks = KeySpace(etcd, root.rstrip("/"), decode_value(root.rstrip("/")))
    await ks.load()
    replicas: dict[str, list[ReplicaInfo]] = {}
    for kv in ks.prefixed(layout.assign_prefix(ks.root)):  # keys validated by decode_value
        key = layout.parse_assignment_key(ks.root, kv.key)
        replicas.setdefault(key.item, []).append(ReplicaInfo(key.zone, key.suffix, key.slot, kv.decoded))
    out = []
    prefix = layout.items_prefix(ks.root)
    for kv in ks.prefixed(prefix):
        shard_id = kv.key[len(prefix) :]
        reps = tuple(sorted(replicas.get(shard_id, ()), key=lambda r: r.slot))
        out.append(ShardInfo(kv.decoded, kv.mod_revision, reps, kv.create_revision))
    return out
