"""Consumer: one member of a consumer application: lease, announcement, allocator, shards
(docs/semantics.md#allocation, #shard-lifecycle).

The consumer announces `<root>/members/<zone>#<suffix>` (a ConsumerSpec with its shard_limit and
endpoint) under an etcd lease, runs the generic Allocator with the shard adapter, and starts a Shard
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
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

import aetcd
import grpc
from aetcd import rpc

from gazette.allocator import Allocator, Session, announce
from gazette.allocator.state import Assignment
from gazette.auth import tls as _tls
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
from gazette.keyspace.etcd import connect, txn
from gazette.keyspace.keyspace import KeySpace
from gazette.metrics import MetricsServer
from gazette.protocol import gazette_py_pb2_grpc, shard_pb2_grpc
from gazette.protocol.endpoints import GRPC_MESSAGE_OPTIONS, GRPC_SERVER_KEEPALIVE_OPTIONS, advertised_host
from gazette.protocol.validate import validate_suffix, validate_zone

log = logging.getLogger(__name__)

DEFAULT_LEASE_TTL_S = 20
DEFAULT_EXIT_DRAIN_S = 30.0  # a graceful stop waits this long for the allocator to move shards away
SERVER_GRACE_S = 1.0  # a graceful stop lets in-flight Shard RPCs finish this long


class Consumer:
    """Runs `app` as one member of the consumer application rooted at `root` (on the current loop)."""

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
        lease_ttl_s: int = DEFAULT_LEASE_TTL_S,
        max_hot_standbys: int = MAX_HOT_STANDBYS_DEFAULT,
        exit_drain_s: float = DEFAULT_EXIT_DRAIN_S,
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
    ) -> None:
        """Security, as Gazette's consumer flags: `auth_keys` (--consumer.auth-keys) makes every
        Shard RPC require a signed token and signs calls proxied to other members; `server_tls`
        serves over TLS (https:// endpoint); `peer_tls` is presented to and trusts other members;
        `broker_auth_keys` and `broker_tls` (--broker.*) are those of this member's journal client.
        `metrics_port` serves /metrics over HTTP on `host` (0: a free port; None: not served)."""
        if not isinstance(app, Application):
            raise TypeError(f"{app!r} is not a gazette.consumer.Application")
        self.app = app
        self.etcd_endpoint = etcd_endpoint
        self.broker_endpoint = broker_endpoint
        self.root = root.rstrip("/")
        self.zone = zone
        self.suffix = suffix or f"consumer-{secrets.token_hex(4)}"
        validate_zone(self.zone)
        validate_suffix(self.suffix)
        if isinstance(shard_limit, bool) or not isinstance(shard_limit, int) or shard_limit < 0:
            raise ValueError(f"shard_limit {shard_limit!r} is not an integer >= 0")
        self.shard_limit = shard_limit
        self.lease_ttl_s = lease_ttl_s
        self.max_hot_standbys = max_hot_standbys
        self.exit_drain_s = exit_drain_s
        self.watch_apply_delay_s = watch_apply_delay_s
        self.hooks = hooks or Hooks()
        self.host = host
        self.advertise = advertised_host(host, advertise)  # in this member's endpoint
        self.auth = KeyedAuth.coerce(auth_keys)
        self.server_tls = server_tls
        self.peer_tls = peer_tls
        self.broker_auth = KeyedAuth.coerce(broker_auth_keys)
        self.broker_tls = broker_tls
        self.port = port
        self.endpoint = ""  # http://advertise:port of the Shard service, once started
        self.metrics_port = metrics_port
        self.metrics = ConsumerMetrics(lambda: self.shards.values())
        self.metrics_endpoint = ""  # http://advertise:port/metrics, once started (if served)
        self._metrics_server: MetricsServer | None = None
        self.member_key = layout.member_key(self.root, self.zone, self.suffix)
        self.shards: dict[str, Shard] = {}
        self.stopped = asyncio.Event()
        self._stopping = False
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._holding_view = False  # hold_etcd_view (a test hook)

    @property
    def id(self) -> tuple[str, str]:
        return (self.zone, self.suffix)

    # ---- lifecycle

    async def start(self) -> Consumer:
        self.etcd: aetcd.Client = connect(self.etcd_endpoint)
        self.client = AsyncClient(
            self.broker_endpoint, self.etcd_endpoint, auth_keys=self.broker_auth, tls=self.broker_tls
        )
        self.ks = KeySpace(self.etcd, self.root, decode_value(self.root), self.watch_apply_delay_s)
        self.service = ShardService(self)
        self._server = grpc.aio.server(
            options=[*GRPC_MESSAGE_OPTIONS, *GRPC_SERVER_KEEPALIVE_OPTIONS, ("grpc.so_reuseport", 0)]
        )
        shard_pb2_grpc.add_ShardServicer_to_server(self.service, self._server)
        gazette_py_pb2_grpc.add_ShardsServicer_to_server(InspectService(self.service), self._server)
        self.port, scheme = _tls.bind(self._server, f"{self.host}:{self.port}", self.server_tls)
        self.endpoint = f"{scheme}{self.advertise}:{self.port}"
        self.session = await Session.grant(self.etcd, self.lease_ttl_s)
        self.session.add_lost_callback(self._on_lease_lost)
        spec = ConsumerSpec(
            shard_limit=self.shard_limit, endpoint=self.endpoint, zone=self.zone, suffix=self.suffix
        )
        self.announcement = await announce(
            self.etcd, self.member_key, spec.to_bytes(), self.session,
            retry_interval_s=max(1.0, self.lease_ttl_s / 4), mark_exiting=consumer_spec_exiting,
        )  # fmt: skip
        await self.ks.start()
        self.ks.add_observer(self._wakeup.set)
        self.allocator = Allocator(
            self.etcd, self.ks, self.member_key, shard_adapter(self.max_hot_standbys),
            min_revision=self.announcement.revision,
        )  # fmt: skip
        self.allocator.start()
        await self._server.start()
        if self.metrics_port is not None:
            self._metrics_server = MetricsServer(self.metrics.registry, self.host, self.metrics_port)
            self.metrics_endpoint = f"http://{self.advertise}:{self._metrics_server.port}/metrics"
        self._tasks.append(
            asyncio.create_task(self._reconcile_loop(), name=f"consumer {self.suffix} reconcile")
        )
        self._wakeup.set()
        log.info("consumer %s#%s started under %s", self.zone, self.suffix, self.root)
        return self

    async def stop(self, graceful: bool = True) -> None:
        """Gracefully: marks itself exiting, lets the allocator move its shards to other members (up
        to `exit_drain_s`), stops its shards and revokes its lease. Otherwise (a crash): cancels
        everything at once, drops unsent appends, and leaves the lease to expire. Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        if graceful and not self.session.lost:
            try:
                await self.announcement.set_exiting()
                async with asyncio.timeout(self.exit_drain_s):
                    await self.allocator.wait_drained()
            except TimeoutError:
                log.warning(
                    "consumer %s still had shards after %.0f s; stopping anyway",
                    self.suffix,
                    self.exit_drain_s,
                )
            except Exception as exc:
                log.warning("consumer %s could not drain its shards: %s", self.suffix, exc)
        await self._server.stop(SERVER_GRACE_S if graceful else 0)
        await self.service.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.allocator.stop()
        shards, self.shards = list(self.shards.values()), {}
        await asyncio.gather(*(s.stop() for s in shards), return_exceptions=True)
        me = asyncio.current_task()
        while pending := [t for t in self._background if t is not me]:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.ks.stop()
        await self.session.close(revoke=graceful)
        await self.client.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        await self.etcd.close()
        self.stopped.set()

    def hold_etcd_view(self) -> None:
        """Test hook (zombie scenarios): from now on this member acts on its current view of etcd,
        applying no updates and ignoring the loss of its lease, so it believes it is still primary
        of what it holds. Only the stores' fences can stop it. `gazette consumer run` wires it to
        SIGUSR1 when GAZETTE_TEST_HOLD_VIEW_ON_SIGUSR1=1; nothing else calls it."""
        log.warning("consumer %s: TEST HOOK: holding its etcd view (a zombie from now on)", self.suffix)
        self._holding_view = True
        self.ks.hold()

    def _on_lease_lost(self, reason: Exception) -> None:
        if self._holding_view:
            log.warning("consumer %s lost its etcd lease (%s); ignored: holding its etcd view", self.suffix, reason)
            return
        log.error("consumer %s lost its etcd lease (%s); stopping", self.suffix, reason)
        if not self._stopping:
            self._spawn(self.stop(graceful=False), "stop after lease loss")

    def _spawn(self, coro, name: str) -> asyncio.Task[None]:  # type: ignore[no-untyped-def]
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ---- shards

    async def _reconcile_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._reconcile()

    def _reconcile(self) -> None:
        """Starts a Shard for each new assignment held here; stops those no longer held."""
        if self._stopping:
            return
        held: dict[str, tuple[ShardSpec, str, int, Assignment]] = {}
        for kv in self.ks.prefixed(layout.assign_prefix(self.root)):
            try:
                key = layout.parse_assignment_key(self.root, kv.key)
            except ValueError:
                continue
            if (key.zone, key.suffix) != self.id:
                continue
            item = self.ks.get(layout.item_key(self.root, key.item))
            if item is None:
                continue
            assignment = Assignment(
                kv.key, key.item, key.zone, key.suffix, key.slot, kv.decoded, kv.mod_revision, kv.lease
            )
            held[key.item] = (item.decoded, item.key, item.create_revision, assignment)
        for shard_id, shard in list(self.shards.items()):
            now = held.get(shard_id)
            # A primary whose slot 0 was removed (an unassign) and that holds the shard again in
            # another slot is a new assignment (the allocator never demotes by moving slot 0).
            if now is None or now[2] != shard.create_revision or (shard.assignment.slot == 0 and now[3].slot != 0):
                del self.shards[shard_id]
                self._spawn(shard.stop(), f"stop shard {shard_id}")
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
    for kv in ks.prefixed(layout.assign_prefix(ks.root)):
        try:
            key = layout.parse_assignment_key(ks.root, kv.key)
        except ValueError:
            continue
        replicas.setdefault(key.item, []).append(ReplicaInfo(key.zone, key.suffix, key.slot, kv.decoded))
    out = []
    prefix = layout.items_prefix(ks.root)
    for kv in ks.prefixed(prefix):
        shard_id = kv.key[len(prefix) :]
        reps = tuple(sorted(replicas.get(shard_id, ()), key=lambda r: r.slot))
        out.append(ShardInfo(kv.decoded, kv.mod_revision, reps, kv.create_revision))
    return out
