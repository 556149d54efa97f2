"""Member: the lifecycle a broker and a consumer share (docs/architecture.md#members).

Gazette builds both of its servers on the same allocator, keyspace and task-group packages; this is
that common part, written once. A `Member` is one process in a cluster of members that split items
(journals, shards) through etcd:

- an etcd connection, a lease (`Session`) and the member key announced under it;
- the `KeySpace` mirror of the cluster's root and the `Allocator` loop over it;
- a gRPC server bound before the announcement (the endpoint is part of the member's value) and
  started once the member is announced, and an optional Prometheus `/metrics` endpoint;
- the reconcile loop: each change of the KeySpace wakes it, and it acts on the assignments held by
  this member, whose keys are parsed and validated once, here (`held_assignments`);
- one `TaskGroup` for background work, stopped with a bound that names what it had to cancel;
- a graceful stop (mark the member exiting, wait for the allocator to move its items away) and a
  crash stop (nothing drained);
- the lease-loss policy, a parameter: `LeaseLossPolicy.STOP` ends the member as a crash would
  (Gazette's behaviour); `LeaseLossPolicy.RENEW` announces again under a new lease (brokers, whose
  unpersisted spools must survive an etcd outage: docs/semantics.md#member-sessions).

`Broker` and `Consumer` subclass it and keep only what is theirs: the services they serve, their
items (replicas, shards) and what must happen before their lease ends.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import aetcd
import grpc

from gazette import tunables
from gazette.allocator import Allocator, Session, announce
from gazette.allocator.state import AllocatorAdapter
from gazette.auth import tls as _tls
from gazette.auth.tls import TLSConfig
from gazette.keyspace import layout
from gazette.keyspace.etcd import connect
from gazette.keyspace.keyspace import KeySpace, KeyValue
from gazette.metrics import MetricsServer
from gazette.protocol.endpoints import GRPC_MESSAGE_OPTIONS, GRPC_SERVER_KEEPALIVE_OPTIONS, advertised_host
from gazette.protocol.validate import validate_suffix, validate_zone
from gazette.tasks import TaskGroup, cancel_and_wait

log = logging.getLogger(__name__)


class LeaseLossPolicy(enum.Enum):
    """What a member does when its etcd lease is lost."""

    STOP = "stop"  # stop at once as a crash would; another member takes its items over
    RENEW = "renew"  # keep serving what is safe, get a new lease and announce again


class Member:
    """One member of an allocator-run cluster rooted at `root` (see the module docstring).

    Subclasses set `kind` (for log lines), `lease_loss` and `server_grace_s`, and implement the hooks
    below; everything else (order of start and stop, bounds, the lease policy) is decided here.
    """

    kind = "member"
    lease_loss = LeaseLossPolicy.STOP
    server_grace_s = 1.0  # a graceful stop lets in-flight RPCs finish this long
    metrics: Any  # the subclass's metrics (a `registry` attribute), served at `metrics_endpoint`

    def __init__(
        self,
        etcd_endpoint: str,
        *,
        root: str,
        zone: str,
        suffix: str | None,
        lease_ttl_s: int,
        exit_drain_s: float,
        watch_apply_delay_s: float,
        host: str,
        port: int,
        advertise: str | None,
        metrics_port: int | None,
        server_tls: TLSConfig | None,
    ) -> None:
        self.etcd_endpoint = etcd_endpoint
        self.root = root.rstrip("/")
        self.zone = zone
        self.suffix = suffix or f"{self.kind}-{secrets.token_hex(4)}"
        validate_zone(self.zone)
        validate_suffix(self.suffix)
        self.member_key = layout.member_key(self.root, self.zone, self.suffix)
        self.lease_ttl_s = lease_ttl_s
        self.exit_drain_s = exit_drain_s
        self.watch_apply_delay_s = watch_apply_delay_s
        self.host = host
        self.port = port
        self.advertise = advertised_host(host, advertise)  # in this member's endpoint
        self.endpoint = ""  # scheme://advertise:port of the gRPC server, once started
        self.metrics_port = metrics_port
        self.metrics_endpoint = ""  # http://advertise:port/metrics, once started (if served)
        self.server_tls = server_tls
        self.tasks = TaskGroup(f"{self.kind} {zone}#{self.suffix}")
        self.stopped = asyncio.Event()
        self.lease_lost = asyncio.Event()  # set from a lease loss until the member announced again
        self._stopping = False
        self._wakeup = asyncio.Event()  # wakes the reconcile loop
        self._reconciler: asyncio.Task[None] | None = None
        self._renewing: asyncio.Task | None = None
        self._server: grpc.aio.Server | None = None
        self._metrics_server: MetricsServer | None = None

    @property
    def id(self) -> tuple[str, str]:
        """(zone, suffix): this member's identity in assignment keys and routes."""
        return (self.zone, self.suffix)

    @property
    def name(self) -> str:
        return f"{self.kind} {self.zone}#{self.suffix}"

    # --- hooks for subclasses --------------------------------------------------------------------
    def _decode_value(self) -> Callable[[str, bytes], Any]:
        """The KeySpace's decoder of this cluster's values."""
        raise NotImplementedError

    def _adapter(self) -> AllocatorAdapter:
        """The allocator's view of this cluster's items and members."""
        raise NotImplementedError

    def _member_value(self) -> bytes:
        """The value announced at the member key (needs `endpoint`)."""
        raise NotImplementedError

    def _mark_exiting(self, value: bytes) -> bytes:
        """The member value marked as exiting (what a graceful stop announces)."""
        raise NotImplementedError

    async def _open(self, server: grpc.aio.Server) -> None:
        """Before the announcement: what the services need, and the services added to `server`."""

    def _reconcile(self) -> None:
        """Acts on the current KeySpace: starts items newly held here, stops those no longer held."""
        raise NotImplementedError

    async def _stop_items(self, graceful: bool) -> None:
        """Stops every item held (their stops may run as tasks of `self.tasks`)."""

    async def _before_lease_ends(self, graceful: bool) -> None:
        """Last work that must happen while the member key still exists."""

    async def _close(self) -> None:
        """After the lease: closes what `_open` opened."""

    def _revoke_on_stop(self, graceful: bool) -> bool:
        """Whether a stop revokes the lease (else it is left to expire, as after a crash)."""
        return graceful

    def _before_renewal(self) -> None:
        """RENEW policy: what to drop or keep before the new lease (called once per loss)."""

    def _after_renewal(self) -> None:
        """RENEW policy: called when the renewal attempt ends (announced again, or stopping)."""

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> Member:
        """Connects, opens the services, announces the member, starts the KeySpace, the allocator,
        the server and the reconcile loop, in that order."""
        self.etcd: aetcd.Client = connect(self.etcd_endpoint)
        self.ks = KeySpace(self.etcd, self.root, self._decode_value(), self.watch_apply_delay_s)
        server = self._server = grpc.aio.server(
            options=[*GRPC_MESSAGE_OPTIONS, *GRPC_SERVER_KEEPALIVE_OPTIONS, ("grpc.so_reuseport", 0)]
        )
        await self._open(server)
        self.port, scheme = _tls.bind(server, f"{self.host}:{self.port}", self.server_tls)
        self.endpoint = f"{scheme}{self.advertise}:{self.port}"
        self.session = await Session.grant(self.etcd, self.lease_ttl_s)
        self.session.add_lost_callback(self._on_lease_lost)
        self.announcement = await self._announce(self.session)
        await self.ks.start()
        self._observe()
        self.ks.add_observer(self._wakeup.set)
        self.allocator = self._new_allocator()
        self.allocator.start()
        await server.start()
        if self.metrics_port is not None:
            self._metrics_server = MetricsServer(self.metrics.registry, self.host, self.metrics_port)
            self.metrics_endpoint = f"http://{self.advertise}:{self._metrics_server.port}/metrics"
        self._reconciler = asyncio.create_task(self._reconcile_loop(), name=f"{self.name} reconcile")
        self._reconcile()
        return self

    def _observe(self) -> None:
        """KeySpace observers a subclass adds before the reconcile loop's (e.g. a route resolver)."""

    async def _announce(self, session: Session):  # type: ignore[no-untyped-def]
        return await announce(
            self.etcd, self.member_key, self._member_value(), session,
            retry_interval_s=max(1.0, self.lease_ttl_s / 4), mark_exiting=self._mark_exiting,
        )  # fmt: skip

    def _new_allocator(self) -> Allocator:
        return Allocator(
            self.etcd, self.ks, self.member_key, self._adapter(), min_revision=self.announcement.revision
        )

    async def stop(self, graceful: bool = True) -> None:
        """Gracefully: marks itself exiting and waits (up to `exit_drain_s`) for the allocator to
        move its items away, then stops. Otherwise (a crash): stops at once. Either way the server,
        the reconcile loop, the allocator and the items stop, background tasks get
        tunables.STOP_TASKS_TIMEOUT_S (the late ones are cancelled and named), `_before_lease_ends` runs, and the lease is revoked
        or left to expire (`_revoke_on_stop`). Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        try:
            if graceful and not self.session.lost:
                await self._drain()
            if self._server is not None:
                await self._server.stop(self.server_grace_s if graceful else 0)
            await self._stop_serving()
            await cancel_and_wait(self._reconciler)
            await self.allocator.stop()
            await self._stop_items(graceful)
            late = await self.tasks.stop(tunables.STOP_TASKS_TIMEOUT_S)
            if late:
                log.warning("%s: cancelled %d task(s) still running %.0f s into its stop: %s",
                            self.name, len(late), tunables.STOP_TASKS_TIMEOUT_S, ", ".join(late))  # fmt: skip
            await self._before_lease_ends(graceful)
        finally:
            # Also when this stop is itself cancelled (a caller's bound ran out): the KeySpace watch,
            # the lease's keep-alive and the etcd channel must not outlive the member.
            await self.ks.stop()
            await self.session.close(revoke=self._revoke_on_stop(graceful))
            await self._close()
            if self._metrics_server is not None:
                self._metrics_server.close()
            await self.etcd.close()
            self.stopped.set()

    async def _stop_serving(self) -> None:
        """After the server stopped: what else serves calls (e.g. a service's open streams)."""

    async def _drain(self) -> None:
        try:
            await self.announcement.set_exiting()
            async with asyncio.timeout(self.exit_drain_s):
                await self.allocator.wait_drained()
        except TimeoutError:
            log.warning("%s still held items after %.0f s; stopping anyway", self.name, self.exit_drain_s)
        except Exception as exc:
            log.warning("%s could not drain its items before exiting: %s", self.name, exc)

    def background(self, coro, name: str) -> asyncio.Task:  # type: ignore[no-untyped-def]
        """Starts a task this member owns and waits for (bounded) on stop."""
        return self.tasks.spawn(coro, name)

    # --- the lease -------------------------------------------------------------------------------
    def _on_lease_lost(self, reason: Exception) -> None:
        if self.lease_loss is LeaseLossPolicy.STOP:
            log.error("%s lost its etcd lease (%s); stopping", self.name, reason)
            if not self._stopping:
                self.background(self.stop(graceful=False), "stop after lease loss")
            return
        log.error("%s lost its etcd lease (%s); announcing again", self.name, reason)
        self.lease_lost.set()
        if not self._stopping and self._renewing is None:
            self._renewing = self.background(self._renew_session(), "renew session after lease loss")

    async def _renew_session(self) -> None:
        """RENEW policy: stops the allocator, lets the old lease go, and announces again under a new
        one (retrying while etcd is away or the new lease is lost too), then starts a new allocator."""
        self._before_renewal()
        try:
            await self.allocator.stop()
            await self.session.close(revoke=False)
            while not self._stopping:
                try:
                    session = await Session.grant(self.etcd, self.lease_ttl_s)
                except Exception as exc:  # etcd still away
                    log.warning("%s cannot get a new lease yet: %s", self.name, exc)
                    await asyncio.sleep(tunables.RENEW_RETRY_S)
                    continue
                self.session = session
                try:
                    self.announcement = await self._announce(session)
                    break
                except Exception as exc:
                    # The new lease was lost too before the member key was put (etcd away again, or
                    # this host cut off from it): without another try the member would stay up but
                    # never announce, hold nothing and never exit.
                    log.warning("%s could not announce under its new lease yet: %s", self.name, exc)
                    await session.close(revoke=False)
                    await asyncio.sleep(tunables.RENEW_RETRY_S)
            else:
                return
            self.allocator = self._new_allocator()
            self.allocator.start()
            session.add_lost_callback(self._on_lease_lost)
            log.warning("%s announced again under a new lease", self.name)
        finally:
            self._renewing = None
            self.lease_lost.clear()
            self._after_renewal()
            self._wakeup.set()

    # --- reconciling -----------------------------------------------------------------------------
    async def _reconcile_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._stopping:
                self._reconcile()

    def held_assignments(self) -> Iterator[tuple[layout.AssignmentKey, KeyValue, KeyValue]]:
        """(parsed key, assignment, item) of each assignment held by this member whose item exists.

        Assignment keys are validated once, where the KeySpace decodes them (both members'
        `_decode_value` refuse a malformed key, which the KeySpace then skips with a warning), so
        no reader of the KeySpace meets one."""
        for kv in self.ks.prefixed(layout.assign_prefix(self.root)):
            key = layout.parse_assignment_key(self.root, kv.key)
            if (key.zone, key.suffix) != self.id:
                continue
            item = self.ks.get(layout.item_key(self.root, key.item))
            if item is not None:
                yield key, kv, item
