"""Resolution of a journal to its Route and local replica (docs/semantics.md#resolution), shared by every RPC.

Reads only the broker's KeySpace mirror: the item (JournalSpec) and its assignment keys, ordered by
(zone, suffix), give the route; slot 0 is the primary. The status order of that section is kept exactly.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from gazette.keyspace import layout
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.selector import journal_labels
from gazette.protocol.spec import JournalSpec, SuspendLevel
from gazette.protocol.status import Status

if TYPE_CHECKING:
    from gazette.auth.tokens import Claims
    from gazette.broker.replica import Replica
    from gazette.keyspace.keyspace import KeySpace

ProcessID = tuple[str, str]  # (zone, suffix)


def decode_value(root: str):
    """Returns the KeySpace decoder for a broker root: items, members and assignments."""
    items, members, assign = (
        layout.items_prefix(root),
        layout.members_prefix(root),
        layout.assign_prefix(root),
    )

    def decode(key: str, raw: bytes) -> Any:
        if key.startswith(items):
            spec = JournalSpec.from_proto(pb.JournalSpec.FromString(raw))
            name = key[len(items) :]
            if spec.name != name:
                raise ValueError(f'item key "{key}" holds the spec of "{spec.name}"')
            return spec
        if key.startswith(members):
            return pb.BrokerSpec.FromString(raw)
        if key.startswith(assign):
            layout.parse_assignment_key(root, key)  # a malformed key is refused here, once for every reader
            return pb.Route.FromString(raw) if raw else pb.Route(primary=-1)
        raise ValueError(f'key "{key}" is outside the broker key space')

    return decode


@dataclasses.dataclass
class Resolution:
    status: Status
    header: pb.Header
    spec: JournalSpec | None
    route: pb.Route
    replica: Replica | None
    mod_revision: int = 0
    create_revision: int = 0
    # Set on any change of the journal's assignments or spec after this resolution.
    invalidated: asyncio.Event | None = None


class Resolver:
    """Resolves journals against the KeySpace; owns nothing but a view of it and the replica table."""

    def __init__(self, ks: KeySpace, self_id: ProcessID, replicas: dict[str, Replica]):
        self.ks = ks
        self.root = ks.root
        self.self_id = self_id
        self.replicas = replicas
        self._invalidations: dict[str, asyncio.Event] = {}
        self._last_state: dict[str, tuple] = {}

    def header(self, route: pb.Route | None = None, process_id: ProcessID | None = None) -> pb.Header:
        zone, suffix = process_id or self.self_id
        return pb.Header(
            process_id=pb.ProcessSpec.ID(zone=zone, suffix=suffix),
            route=route if route is not None else pb.Route(primary=-1),
            etcd=pb.Header.Etcd(
                cluster_id=self.ks.cluster_id,
                member_id=self.ks.member_id,
                revision=self.ks.revision,
                raft_term=self.ks.raft_term,
            ),
        )

    def route_of(self, journal: str) -> pb.Route:
        """Builds the route from assignment keys; also returns each assignment's stored Route value."""
        members: list[pb.ProcessSpec.ID] = []
        endpoints: list[str] = []
        primary = -1
        for kv in self.ks.prefixed(layout.item_assign_prefix(self.root, journal)):
            key = layout.parse_assignment_key(self.root, kv.key)
            if key.slot == 0:
                primary = len(members)
            members.append(pb.ProcessSpec.ID(zone=key.zone, suffix=key.suffix))
            member = self.ks.get(layout.member_key(self.root, key.zone, key.suffix))
            endpoints.append(member.decoded.process_spec.endpoint if member is not None else "")
        return pb.Route(members=members, primary=primary, endpoints=endpoints)

    def spec_of(self, journal: str) -> tuple[JournalSpec | None, int, int]:
        kv = self.ks.get(layout.item_key(self.root, journal))
        if kv is None:
            return None, 0, 0
        return kv.decoded, kv.mod_revision, kv.create_revision

    async def resolve(
        self,
        journal: str,
        *,
        require_primary: bool,
        may_proxy: bool,
        min_etcd_revision: int = 0,
        proxy_header: pb.Header | None = None,
        claims: Claims | None = None,
    ) -> Resolution:
        """`claims`: the caller's verified authorization; a journal its selector does not match
        resolves as if it did not exist (JOURNAL_NOT_FOUND, no route), as Gazette's resolver does."""
        if proxy_header is not None and proxy_header.HasField("etcd"):
            if proxy_header.etcd.cluster_id and proxy_header.etcd.cluster_id != self.ks.cluster_id:
                raise ValueError(
                    f"proxied request from etcd cluster {proxy_header.etcd.cluster_id}, "
                    f"but this broker is of cluster {self.ks.cluster_id}"
                )
            pid = proxy_header.process_id
            if pid.zone and (pid.zone, pid.suffix) != self.self_id:
                raise ValueError(f"request addressed to process {pid.zone}#{pid.suffix}, not to this broker")
            min_etcd_revision = max(min_etcd_revision, proxy_header.etcd.revision)
        if min_etcd_revision > self.ks.revision:
            await self.ks.wait_for_revision(min_etcd_revision)

        spec, mod_rev, create_rev = self.spec_of(journal)
        route = self.route_of(journal)
        if (
            spec is not None
            and claims is not None
            and not claims.matches(journal_labels(spec.labels, spec.name))
        ):
            spec, mod_rev, create_rev, route = None, 0, 0, pb.Route(primary=-1)
        invalidated = self.invalidation(journal)

        def done(status: Status, process_id: ProcessID | None = None) -> Resolution:
            return Resolution(
                status=status,
                header=self.header(route, process_id),
                spec=spec,
                route=route,
                replica=self.replicas.get(journal) if status == Status.OK else None,
                mod_revision=mod_rev,
                create_revision=create_rev,
                invalidated=invalidated,
            )

        if spec is None:
            return done(Status.JOURNAL_NOT_FOUND)
        if spec.suspend_level == SuspendLevel.FULL:
            return done(Status.SUSPENDED)
        if require_primary and route.primary < 0:
            return done(Status.NO_JOURNAL_PRIMARY_BROKER)
        if not route.members:
            return done(Status.INSUFFICIENT_JOURNAL_BROKERS)

        ids = [(m.zone, m.suffix) for m in route.members]
        if require_primary:
            chosen = ids[route.primary]
        elif self.self_id in ids:
            chosen = self.self_id
        else:
            chosen = ids[0]
        if chosen != self.self_id and not may_proxy:
            status = Status.NOT_JOURNAL_PRIMARY_BROKER if require_primary else Status.NOT_JOURNAL_BROKER
            return done(status)
        res = done(Status.OK, chosen)
        if chosen != self.self_id:
            res.replica = None
        return res

    def invalidation(self, journal: str) -> asyncio.Event:
        """The event set on the next change of the journal's spec or assignments."""
        event = self._invalidations.get(journal)
        if event is None:
            event = self._invalidations[journal] = asyncio.Event()
            self._last_state[journal] = self._state(journal)
        return event

    def on_keyspace_change(self) -> None:
        """Fires invalidation events of journals whose spec or assignments changed (KeySpace observer)."""
        for journal, event in list(self._invalidations.items()):
            state = self._state(journal)
            if self._last_state[journal] != state:
                event.set()
                self._invalidations[journal] = asyncio.Event()
                self._last_state[journal] = state
            if state == (0, ()):
                # Neither spec nor assignments: forget it, so names resolved once (and typos) do
                # not cost a scan on every batch. A later resolve starts afresh.
                del self._invalidations[journal], self._last_state[journal]

    def _state(self, journal: str) -> tuple:
        """What invalidates a resolution: the spec's and every assignment's (key, mod revision)."""
        spec_kv = self.ks.get(layout.item_key(self.root, journal))
        assignments = self.ks.prefixed(layout.item_assign_prefix(self.root, journal))
        return (
            spec_kv.mod_revision if spec_kv else 0,
            tuple((kv.key, kv.mod_revision) for kv in assignments),
        )
