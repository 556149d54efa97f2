"""Broker: one process's journal service: etcd session, KeySpace, replicas, gRPC server, persister.

Built on `gazette.member.Member` (the lifecycle it shares with consumers); the Broker adds its
replicas, the persister and the Journal service. A graceful stop (SIGTERM) rolls every spool and
drains the persister before revoking its lease, so nothing committed on this broker is left
unpersisted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from gazette import tunables
from gazette.allocator import broker_spec_exiting, journal_adapter
from gazette.auth.tls import TLSConfig
from gazette.auth.tokens import AuthError, Capability, Claims, KeyedAuth, header_of
from gazette.broker.append import serve_append, zero_byte_append
from gazette.broker.failures import AppendFailed
from gazette.broker.journals import (
    serve_apply,
    serve_flush,
    serve_fragment_store_health,
    serve_list,
    serve_list_fragments,
)
from gazette.broker.metrics import BrokerMetrics
from gazette.broker.proxy import Proxy
from gazette.broker.read import serve_read
from gazette.broker.replica import Replica
from gazette.broker.replicate import serve_replicate
from gazette.broker.resolver import Resolver, decode_value
from gazette.broker.wire import add_journal_servicer
from gazette.fragment.fragment import Fragment
from gazette.fragment.persister import Persister
from gazette.fragment.stores import get_store
from gazette.keyspace import layout
from gazette.member import LeaseLossPolicy, Member
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol import gazette_py_pb2_grpc as gpy_grpc
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import Status

log = logging.getLogger(__name__)

DEFAULT_ROOT = "/gazette/cluster"
IMPLEMENTATION = "gazette-py"  # gazette_py.BrokerImplementation in what our brokers announce
GRACEFUL_STOP_S = 5.0
RENEW_HOLD_TTLS = 3  # after a lease renewal, unassigned replicas are kept this many lease TTLs


def implementation_of(spec: pb.BrokerSpec) -> str:
    """The gazette_py.BrokerImplementation a member's announced BrokerSpec carries ("" for Gazette's)."""
    return gpy.BrokerImplementation.FromString(spec.SerializeToString()).implementation


class Broker(Member):
    """One broker process's journal service (docs/architecture.md#the-broker).

    A `Member` (etcd session and announcement, KeySpace, allocator, reconcile loop, bounded stop)
    that owns one Replica per journal assigned here (reconciled from the KeySpace), the shared
    Persister, the Journal and Flusher gRPC services and its metrics. A graceful `stop()` waits for
    the allocator to move its journals away and persists every spool before its lease is revoked. On
    a lease loss it announces again (`LeaseLossPolicy.RENEW`, see `_before_renewal`). Lives on one
    event loop thread."""

    kind = "broker"
    lease_loss = LeaseLossPolicy.RENEW
    server_grace_s = GRACEFUL_STOP_S

    def __init__(
        self,
        etcd_endpoint: str,
        *,
        root: str = DEFAULT_ROOT,
        zone: str = "local",
        suffix: str | None = None,
        host: str = "127.0.0.1",
        advertise: str | None = None,
        port: int = 0,
        metrics_port: int | None = 0,
        journal_limit: int = tunables.BROKER_JOURNAL_LIMIT,
        lease_ttl_s: int = tunables.LEASE_TTL_S,
        max_replication: int = tunables.BROKER_MAX_REPLICATION,
        spool_dir: str | None = None,
        watch_apply_delay_s: float = 0.03,
        exit_drain_s: float = tunables.BROKER_EXIT_DRAIN_S,
        auth_keys: KeyedAuth | str | None = None,
        server_tls: TLSConfig | None = None,
        peer_tls: TLSConfig | None = None,
    ) -> None:
        """`auth_keys` (Gazette's --auth-keys) makes every RPC require a signed token, and signs this
        broker's own calls to its peers; `server_tls` serves over TLS (https:// endpoint), and
        `peer_tls` is what this broker presents and trusts when it dials https:// peers."""
        super().__init__(
            etcd_endpoint, root=root, zone=zone, suffix=suffix, lease_ttl_s=lease_ttl_s,
            exit_drain_s=exit_drain_s, watch_apply_delay_s=watch_apply_delay_s, host=host, port=port,
            advertise=advertise, metrics_port=metrics_port, server_tls=server_tls,
        )  # fmt: skip
        self.journal_limit = journal_limit
        self.max_replication = max_replication
        self.spool_dir = spool_dir
        self.metrics = BrokerMetrics()
        self.auth = KeyedAuth.coerce(auth_keys)
        self.proxy = Proxy(self.auth, peer_tls, pings=self._peer_is_ours)
        self.replicas: dict[str, Replica] = {}
        self._hold_until = 0.0  # loop time until which unassigned replicas are kept (lease renewal)

    # --- the member's hooks ----------------------------------------------------------------------
    def _decode_value(self):  # type: ignore[no-untyped-def]
        return decode_value(self.root)

    def _adapter(self):  # type: ignore[no-untyped-def]
        return journal_adapter(self.max_replication)

    def _member_value(self) -> bytes:
        # A BrokerSpec, then the field that tells peers this broker is gazette-py (a peer parses
        # the same bytes as gazette_py.BrokerImplementation; Gazette's keep it as unknown).
        mark = gpy.BrokerImplementation(implementation=IMPLEMENTATION)
        return self._broker_spec().SerializeToString() + mark.SerializeToString()

    def _mark_exiting(self, value: bytes) -> bytes:
        return broker_spec_exiting(value)

    async def _open(self, server: grpc.aio.Server) -> None:
        self.persister = Persister()
        await self.persister.start()
        service = JournalService(self)
        add_journal_servicer(service, server)  # Append and Replicate content decoded raw
        gpy_grpc.add_FlusherServicer_to_server(FlusherService(service), server)
        self.resolver = Resolver(self.ks, self.id, self.replicas)

    def _observe(self) -> None:
        self.ks.add_observer(self.resolver.on_keyspace_change)

    async def start(self) -> Broker:
        await super().start()
        log.info("broker %s#%s serving at %s", self.zone, self.suffix, self.endpoint)
        return self

    async def _stop_items(self, graceful: bool) -> None:
        for journal, replica in self.replicas.items():
            self.background(replica.stop(), f"stop replica {journal}")
        self.replicas.clear()

    async def _before_lease_ends(self, graceful: bool) -> None:
        # The lease outlives the persister's drain: the member key (and the assignments under it)
        # must outlive this broker's unpersisted spools.
        await self.persister.stop(drain=graceful and not self.session.lost)

    def _revoke_on_stop(self, graceful: bool) -> bool:
        return True

    async def _close(self) -> None:
        await self.persister.stop(
            drain=False
        )  # a no-op after _before_lease_ends; else (a cancelled stop) no retries linger
        await self.proxy.close()

    def _broker_spec(self) -> pb.BrokerSpec:
        return pb.BrokerSpec(
            process_spec=pb.ProcessSpec(
                id=pb.ProcessSpec.ID(zone=self.zone, suffix=self.suffix), endpoint=self.endpoint
            ),
            journal_limit=self.journal_limit,
        )

    def _peer_is_ours(self, endpoint: str) -> bool:
        """Whether the member announced at `endpoint` is a gazette-py broker (its announcement
        carries gazette_py.BrokerImplementation, which the decoded BrokerSpec keeps as an unknown
        field; Gazette's brokers announce none). One not announced (yet) counts as ours, as before."""
        for kv in self.ks.prefixed(layout.members_prefix(self.root)):
            spec = kv.decoded
            if spec.process_spec.endpoint == endpoint:
                return implementation_of(spec) == IMPLEMENTATION
        return True

    def _before_renewal(self) -> None:
        """Lease loss: Gazette ends the process (docs/semantics.md#member-sessions), which also ends every
        spool. When etcd itself was down past the TTL, every broker loses its lease at once and acknowledged
        appends not yet persisted would exist nowhere. So instead: drop the spools this broker was primary
        of (they may hold commits no peer acknowledged, unsafe to reuse or persist now that another
        primary may have taken over), keep the others (replicated, legitimate content) for
        RENEW_HOLD_TTLS lease TTLs in case their journals come back here, and announce again under
        a new lease (`Member._renew_session`). A journal that comes back syncs its pipeline from the
        longest kept spool."""
        self._hold_until = asyncio.get_running_loop().time() + 1e9  # hold until the new session is up
        for journal, replica in list(self.replicas.items()):
            if replica.is_primary:
                del self.replicas[journal]
                self.background(replica.stop(discard=True), f"discard replica {journal}")
            else:
                replica.persist_promptly = True

    def _after_renewal(self) -> None:
        loop = asyncio.get_running_loop()
        hold_s = RENEW_HOLD_TTLS * self.lease_ttl_s
        self._hold_until = loop.time() + hold_s
        loop.call_later(hold_s + 0.1, self._wakeup.set)

    async def pulse(self, journal: str) -> None:
        """A zero-byte append at this broker (docs/semantics.md#pulse); failures are the caller's to log."""
        fsm = await zero_byte_append(self, journal)
        if fsm.err is not None:
            raise fsm.err
        if fsm.status not in (Status.OK, Status.NOT_JOURNAL_PRIMARY_BROKER, Status.SUSPENDED):
            raise GazetteError(fsm.status, f"pulse of {journal}")

    async def sign_url(self, fragment: Fragment, ttl_s: float) -> str:
        store = get_store(fragment.backing_store)
        return await asyncio.to_thread(store.sign_get, fragment.content_path, ttl_s)

    # --- replicas --------------------------------------------------------------------------------
    def _still_exists(self, journal: str, create_revision: int) -> bool:
        item = self.ks.get(layout.item_key(self.root, journal))
        return item is not None and item.create_revision == create_revision

    def _reconcile(self) -> None:
        """Creates replicas for journals newly assigned here; stops those no longer assigned."""
        if self._stopping:
            return
        if (
            self.ks.get(self.member_key) is None
            and self._renewing is None
            and self.ks.revision >= self.announcement.revision
        ):
            # Our member key is gone, so our lease is: act on it now, before the keep-alive notices,
            # so that spools we were primary of are dropped rather than persisted (zombie writes).
            # Only once the KeySpace has seen our announcement: just after a renewal it may still
            # lack the new key (it applied the old key's expiry, not yet our put), which is no loss.
            self.session.declare_lost("the member key vanished from etcd (lease expired)")
            return
        assigned: dict[str, tuple[JournalSpec, int, bool]] = {
            key.item: (item.decoded, item.create_revision, key.slot == 0)
            for key, _kv, item in self.held_assignments()
        }
        holding = asyncio.get_running_loop().time() < self._hold_until
        for journal, replica in list(self.replicas.items()):
            now = assigned.get(journal)
            if now is None and holding and self._still_exists(journal, replica.create_revision):
                continue  # kept across a lease renewal: its journal may come back here
            if now is None or now[1] != replica.create_revision:
                # No longer ours: what the spool holds was replicated, so persist it as a replica
                # does (after a delay, skipping what the primary stored).
                replica.is_primary = False
                del self.replicas[journal]
                self.background(replica.stop(), f"stop replica {journal}")
            else:
                replica.update_spec(now[0])
                replica.set_primary(now[2])
        for journal, (spec, create_rev, primary) in assigned.items():
            if journal not in self.replicas:
                replica = Replica(
                    spec,
                    create_rev,
                    self.persister,
                    spool_dir=self.spool_dir,
                    metrics=self.metrics,
                    pulse=self.pulse,
                    route_changed=self.resolver.invalidation,
                )
                replica.is_primary = primary
                self.replicas[journal] = replica
                replica.start()


class JournalService(pb_grpc.JournalServicer):
    """gRPC adapter: verifies each RPC's authorization, counts it, and maps handler errors to gRPC
    statuses. With auth keys, a call is refused UNAUTHENTICATED before anything else is looked at
    unless its token is valid and holds the RPC's capability (Gazette's VerifiedJournalServer); the
    token's selector then narrows what the call sees (journals it does not match are not found)."""

    def __init__(self, broker: Broker) -> None:
        self.b = broker

    def _done(self, op: str, status: int | str) -> None:
        name = status if isinstance(status, str) else pb.Status.Name(status)
        self.b.metrics.completed.labels(op, name).inc()

    async def verify(self, op: str, context, require: Capability) -> Claims | None:
        """The verified claims of this call (None when the broker has no auth keys); otherwise the
        call is aborted UNAUTHENTICATED with Gazette's message."""
        if self.b.auth is None:
            return None
        try:
            return self.b.auth.verify(header_of(context.invocation_metadata()), require)
        except AuthError as exc:
            self._done(op, "UNAUTHENTICATED")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.message)
            raise  # abort raises; this only tells the type checker so

    async def List(self, request, context) -> AsyncIterator[pb.ListResponse]:
        self.b.metrics.started.labels("List").inc()
        claims = await self.verify("List", context, Capability.LIST)
        async for resp in serve_list(self.b, request, context, claims):
            yield resp
        self._done("List", 0)

    async def Apply(self, request, context) -> pb.ApplyResponse:
        self.b.metrics.started.labels("Apply").inc()
        claims = await self.verify("Apply", context, Capability.APPLY)
        resp = await serve_apply(self.b, request, context, claims)
        self._done("Apply", resp.status)
        return resp

    async def Read(self, request, context) -> AsyncIterator[pb.ReadResponse]:
        self.b.metrics.started.labels("Read").inc()
        claims = await self.verify("Read", context, Capability.READ)
        status = 0
        try:
            async for resp in serve_read(self.b, request, context, claims):
                status = resp.status or status
                yield resp
        except grpc.aio.AioRpcError as exc:  # the broker we proxied to failed: pass its status on
            self._done("Read", "FAILED")
            await context.abort(exc.code(), f"proxied read failed: {exc.details()}")
            raise
        self._done("Read", status)

    async def Append(self, request_iterator, context) -> pb.AppendResponse:
        self.b.metrics.started.labels("Append").inc()
        claims = await self.verify("Append", context, Capability.APPEND)
        try:
            resp = await serve_append(self.b, request_iterator, context, claims)
        except AppendFailed as exc:
            self._done("Append", "FAILED")
            await context.abort(exc.code, str(exc))
            raise
        except grpc.aio.AioRpcError as exc:  # the broker we proxied to failed: pass its status on
            self._done("Append", "FAILED")
            await context.abort(exc.code(), f"proxied append failed: {exc.details()}")
            raise
        self._done("Append", resp.status)
        return resp

    async def Replicate(self, request_iterator, context) -> AsyncIterator[pb.ReplicateResponse]:
        self.b.metrics.started.labels("Replicate").inc()
        claims = await self.verify("Replicate", context, Capability.REPLICATE)
        async for resp in serve_replicate(self.b, request_iterator, context, claims):
            yield resp
        self._done("Replicate", 0)

    async def ListFragments(self, request, context) -> pb.FragmentsResponse:
        self.b.metrics.started.labels("ListFragments").inc()
        claims = await self.verify("ListFragments", context, Capability.READ)
        resp = await serve_list_fragments(self.b, request, context, claims)
        self._done("ListFragments", resp.status)
        return resp

    async def FragmentStoreHealth(self, request, context) -> pb.FragmentStoreHealthResponse:
        self.b.metrics.started.labels("FragmentStoreHealth").inc()
        await self.verify("FragmentStoreHealth", context, Capability.READ)
        resp = await serve_fragment_store_health(self.b, request, context)
        self._done("FragmentStoreHealth", resp.status)
        return resp


class FlusherService(gpy_grpc.FlusherServicer):
    """gRPC adapter of gazette-py's own Flush RPC (package gazette_py, beside protocol.Journal)."""

    def __init__(self, journals: JournalService) -> None:
        self.journals = journals

    async def Flush(self, request, context) -> gpy.FlushResponse:
        self.journals.b.metrics.started.labels("Flush").inc()
        # Flush rolls the journal's spool (an empty append at its primary): it takes APPEND.
        claims = await self.journals.verify("Flush", context, Capability.APPEND)
        resp = await serve_flush(self.journals.b, request, context, claims)
        self.journals._done("Flush", resp.status)
        return resp
