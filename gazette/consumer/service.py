"""The Shard gRPC services each Consumer member hosts (docs/semantics.md#shard-resolution-and-stat).

`ShardService` is Gazette's `consumer.Shard` (shard.proto), served with Gazette's messages and
semantics (consumer/shard_api.go, consumer/resolver.go), so gazctl and Gazette's Go clients use a
gazette-py consumer as they would a Gazette one:

* List: the shards whose labels, plus the meta-label `id`, match the request's LabelSelector, each
  with its spec, revisions, route (members in (zone, suffix) order, the primary's index, their
  endpoints) and a ReplicaStatus per route member.
* Apply: upserts and deletes in one etcd transaction of compare-and-swaps on `expect_mod_revision`
  (0: must not exist, -1: any, else the current mod revision); an upsert's `primary_hints` are
  written to the shard's `.primary` hints key (as JSON, as Gazette writes hints) in that transaction.
  gazette-py also refuses shards whose source journals (or recovery log) it could not read: missing
  journals, or content types without a registered framing (Gazette leaves that check to gazctl).
* GetHints: the shard's primary and backup FSMHints read from etcd (JSON or protobuf there).
* Unassign: removes each shard's FAILED assignments and, unless `only_failed`, its primary's.
* Stat: resolved at the shard's primary, blocking until its read-through reaches the requested
  offsets of its source journals (read-your-writes), then its progress.

Stat (and gazette-py's Inspect) resolve as Gazette does: a request without a header may be proxied
once to the primary's member, carrying this member's resolution header (the primary's process id,
the route, this member's etcd revision); the receiver checks the etcd cluster and the process id,
waits to read through that revision, and answers NOT_SHARD_PRIMARY rather than proxying again.

With auth keys (the member's `auth_keys`), every call must carry a token holding the capability
Gazette's VerifiedShardServer requires (Stat, GetHints: READ; List: LIST; Apply, Unassign: APPLY;
gazette-py's Inspect: READ), else it is refused UNAUTHENTICATED; the token's selector, matched
against a shard's labels plus `id`, narrows List, makes other shards not found to Stat and GetHints,
and refuses an Apply or Unassign naming one (UNAUTHENTICATED "not authorized to <id>").

`InspectService` serves gazette-py's own `gazette_py.Shards/Inspect` (gazette_py.proto) beside it:
the primary's checkpoint, sequencer and transaction timings that the notebook widgets show. A Gazette
consumer does not serve it (UNIMPLEMENTED), which is how a client tells the two apart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import grpc
import orjson
from aetcd import rpc

from gazette.auth.tls import aio_channel
from gazette.auth.tokens import UNARY_TOKEN_TTL_S, AuthError, Capability, Claims, header_of, name_selector
from gazette.consumer.recoverylog.hints import FSMHints, fetch_hints, primary_hints_key
from gazette.consumer.recoverylog.ops import RecoveryLogError
from gazette.consumer.spec import ShardSpec, ShardSpecError
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.keyspace import layout
from gazette.keyspace.etcd import txn
from gazette.message.framing import content_types
from gazette.protocol import broker_pb2, gazette_py_pb2, gazette_py_pb2_grpc, shard_pb2, shard_pb2_grpc
from gazette.protocol.endpoints import GRPC_PEER_OPTIONS
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import ShardStatus, to_pb
from gazette.protocol.validate import split_journal_meta, validate_journal_name, validate_shard_id

if TYPE_CHECKING:
    from gazette.consumer.consumer import Consumer
    from gazette.consumer.shard import Shard
    from gazette.consumer.transaction import TransactionLoop

log = logging.getLogger(__name__)

RESOLVE_POLL_S = 0.05  # how often a request waiting for a local primary to recover looks again
RECOVERY_LOG_CONTENT_TYPE = "application/x-gazette-recoverylog"  # docs/semantics.md#recovery-logs
CONTENT_TYPE_LABEL = "content-type"


def shard_labels(spec: ShardSpec) -> LabelSet:
    """A shard's labels plus its `id` meta-label, as List selectors match them (Gazette's LabelSetExt)."""
    return LabelSet([("id", spec.id)]).union(spec.labels)


def _status_of(decoded: Any) -> ReplicaStatus:
    return decoded if isinstance(decoded, ReplicaStatus) else ReplicaStatus()


@dataclasses.dataclass
class _Resolution:
    """A shard resolved to its primary (Gazette's Resolution): `status`, and `header` (the primary's
    process id when OK, else this member's; the route; this member's etcd header). When OK, either
    `local` (this member's shard and its running transaction loop) or `endpoint` (the primary's
    member, to proxy to)."""

    status: ShardStatus
    header: broker_pb2.Header
    local: tuple[Shard, TransactionLoop] | None = None
    endpoint: str = ""


class ShardService(shard_pb2_grpc.ShardServicer):
    """Gazette's consumer.Shard service of one Consumer member; `close()` drops its proxy channels."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._proxies: dict[str, grpc.aio.Channel] = {}

    async def close(self) -> None:
        proxies, self._proxies = list(self._proxies.values()), {}
        for channel in proxies:
            await channel.close()

    # ---- headers and routes

    def header(
        self, route: broker_pb2.Route | None = None, process_id: tuple[str, str] | None = None
    ) -> broker_pb2.Header:
        """A response header: `process_id` (this member by default), `route` (none: primary -1), and
        this member's etcd header (its KeySpace's revision)."""
        c, ks = self.consumer, self.consumer.ks
        zone, suffix = process_id or c.id
        return broker_pb2.Header(
            process_id=broker_pb2.ProcessSpec.ID(zone=zone, suffix=suffix),
            route=route if route is not None else broker_pb2.Route(primary=-1),
            etcd=broker_pb2.Header.Etcd(
                cluster_id=ks.cluster_id, member_id=ks.member_id, revision=ks.revision, raft_term=ks.raft_term
            ),
        )

    def route(self, shard_id: str) -> tuple[broker_pb2.Route, list[ReplicaStatus]]:
        """The shard's route from its assignments (members in key order, i.e. by (zone, suffix); the
        primary is slot 0's index; endpoints from the members' ConsumerSpecs) and each member's status."""
        c = self.consumer
        route = broker_pb2.Route(primary=-1)
        statuses = []
        for kv in c.ks.prefixed(layout.item_assign_prefix(c.root, shard_id)):
            key = layout.parse_assignment_key(c.root, kv.key)
            if key.slot == 0:
                route.primary = len(route.members)
            route.members.add(zone=key.zone, suffix=key.suffix)
            member = c.ks.get(layout.member_key(c.root, key.zone, key.suffix))
            route.endpoints.append(member.decoded.endpoint if member is not None else "")
            statuses.append(_status_of(kv.decoded))
        return route, statuses

    def _channel(self, endpoint: str) -> grpc.aio.Channel:
        channel = self._proxies.get(endpoint)
        if channel is None:
            # Pings, as between brokers: a call proxied to a member that stopped fails within seconds.
            channel = self._proxies[endpoint] = aio_channel(
                endpoint, self.consumer.peer_tls, GRPC_PEER_OPTIONS
            )
        return channel

    async def verify(self, context: grpc.aio.ServicerContext, require: Capability) -> Claims | None:
        """The call's verified claims (None when the member has no auth keys); otherwise the call is
        aborted UNAUTHENTICATED with Gazette's message."""
        auth = self.consumer.auth
        if auth is None:
            return None
        try:
            return auth.verify(header_of(context.invocation_metadata()), require)
        except AuthError as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.message)
            raise  # abort raises; this only tells the type checker so

    @staticmethod
    async def _authorize_ids(
        claims: Claims | None, shard_ids: list[str], context: grpc.aio.ServicerContext
    ) -> None:
        """Apply's deletes and Unassign are authorized by the shard id alone, as Gazette's."""
        for shard_id in shard_ids:
            if claims is not None and not claims.matches(LabelSet([("id", shard_id)])):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"not authorized to {shard_id}")

    # ---- List

    async def List(
        self, request: shard_pb2.ListRequest, context: grpc.aio.ServicerContext
    ) -> shard_pb2.ListResponse:
        claims = await self.verify(context, Capability.LIST)
        try:
            selector = LabelSelector.from_proto(request.selector)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"selector: {exc}")
        c = self.consumer
        resp = shard_pb2.ListResponse(status=to_pb(ShardStatus.OK), header=self.header())
        for kv in c.ks.prefixed(layout.items_prefix(c.root)):
            spec: ShardSpec = kv.decoded
            labels = shard_labels(spec)
            if not selector.matches(labels) or (claims is not None and not claims.matches(labels)):
                continue
            route, statuses = self.route(spec.id)
            resp.shards.add(
                spec=spec.to_proto(),
                mod_revision=kv.mod_revision,
                create_revision=kv.create_revision,
                route=route,
                status=[s.to_proto() for s in statuses],
            )
        return resp

    # ---- Apply

    async def Apply(
        self, request: shard_pb2.ApplyRequest, context: grpc.aio.ServicerContext
    ) -> shard_pb2.ApplyResponse:
        claims = await self.verify(context, Capability.APPLY)
        c = self.consumer
        compares: list[rpc.Compare] = []
        ops: list[rpc.RequestOp] = []
        upserts: list[ShardSpec] = []
        try:
            seen: set[str] = set()
            for i, ch in enumerate(request.changes):
                has_upsert = ch.HasField("upsert")
                if has_upsert == bool(ch.delete):
                    raise ValidationError(f"changes[{i}] must have exactly one of upsert and delete")
                if has_upsert:
                    if ch.expect_mod_revision < -1:
                        raise ValidationError(
                            f"changes[{i}] has expect_mod_revision {ch.expect_mod_revision} "
                            "(expected -1: any, 0: must not exist, or a mod revision)"
                        )
                    spec = ShardSpec.from_proto(ch.upsert)
                    shard_id = spec.id
                    # An upsert is authorized against the shard's labels as upserted, plus `id`.
                    if claims is not None and not claims.matches(shard_labels(spec)):
                        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"not authorized to {shard_id}")
                    upserts.append(spec)
                    key = layout.item_key(c.root, shard_id).encode()
                    ops.append(rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=spec.to_bytes())))
                    if ch.HasField("primary_hints"):
                        ops.append(self._hints_op(spec, ch.primary_hints, i))
                else:
                    shard_id = ch.delete
                    validate_shard_id(shard_id)
                    await self._authorize_ids(claims, [shard_id], context)
                    if ch.expect_mod_revision == 0 or ch.expect_mod_revision < -1:
                        raise ValidationError(
                            f'deleting shard "{shard_id}" needs its mod revision (or -1 to ignore it), '
                            f"not {ch.expect_mod_revision}"
                        )
                    if ch.HasField("primary_hints"):
                        raise ValidationError(
                            f"changes[{i}]: hints may be set only with an upsert, not a delete"
                        )
                    key = layout.item_key(c.root, shard_id).encode()
                    ops.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key)))
                if shard_id in seen:
                    raise ValidationError(f'shard "{shard_id}" appears in more than one change')
                seen.add(shard_id)
                if ch.expect_mod_revision != -1:
                    compares.append(
                        rpc.Compare(
                            key=key,
                            result=rpc.Compare.EQUAL,
                            target=rpc.Compare.MOD,
                            mod_revision=ch.expect_mod_revision,
                        )
                    )
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        try:
            await self._check_journals(upserts)
        except ShardSpecError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except GazetteError as exc:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"could not look up the shards' journals at the broker: {exc}"
            )
        header = self.header()
        try:
            resp = await txn(c.etcd, rpc.TxnRequest(compare=compares, success=ops))
        except grpc.aio.AioRpcError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"etcd transaction failed: {exc.details()}")
        revision = int(resp.header.revision)
        header.etcd.revision = revision
        if not resp.succeeded:
            return shard_pb2.ApplyResponse(status=to_pb(ShardStatus.ETCD_TRANSACTION_FAILED), header=header)
        if ops:
            await c.ks.wait_for_revision(revision)  # read our own write before answering
        return shard_pb2.ApplyResponse(status=to_pb(ShardStatus.OK), header=header)

    @staticmethod
    def _hints_op(spec: ShardSpec, msg: Any, i: int) -> rpc.RequestOp:
        """The put of an upsert's primary hints, as JSON under the spec's `.primary` hints key."""
        if not spec.hint_prefix:
            raise ValidationError(
                f'changes[{i}] carries primary_hints, but shard "{spec.id}" has no hint_prefix to store them under'
            )
        try:
            hints = FSMHints.from_proto(msg, f'primary_hints of shard "{spec.id}"')
        except RecoveryLogError as exc:
            raise ValidationError(str(exc)) from None
        if hints.log != spec.recovery_log:
            raise ValidationError(
                f'primary_hints of shard "{spec.id}" are of log "{hints.log}", not of its recovery log '
                f'"{spec.recovery_log}"'
            )
        key = primary_hints_key(spec.hint_prefix, spec.id).encode()
        return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=hints.to_json()))

    async def _check_journals(self, specs: Iterable[ShardSpec]) -> None:
        """As docs/semantics.md#shard-specs requires: every source journal exists with a content type that has
        a registered framing, and a recovery log (if any) exists with the recovery-log content type."""
        wanted: dict[str, list[str]] = {}  # journal (without ;meta) -> what needs it
        for spec in specs:
            for src in spec.sources:
                journal, _meta = split_journal_meta(src.journal)
                wanted.setdefault(journal, []).append(f'source of shard "{spec.id}"')
            if spec.recovery_log:
                wanted.setdefault(spec.recovery_log, []).append(f'recovery log of shard "{spec.id}"')
        if not wanted:
            return
        selector = LabelSelector([("name", j, False) for j in sorted(wanted)])
        infos = {i.spec.name: i.spec for i in await self.consumer.client.list_journals(selector)}
        framed = content_types()
        for journal, uses in sorted(wanted.items()):
            info = infos.get(journal)
            for use in uses:
                if info is None:
                    raise ShardSpecError(f'journal "{journal}" ({use}) does not exist')
                content_type = info.labels.value_of(CONTENT_TYPE_LABEL)
                if use.startswith("recovery log"):
                    if content_type != RECOVERY_LOG_CONTENT_TYPE:
                        raise ShardSpecError(
                            f'journal "{journal}" ({use}) has content-type {content_type!r}, '
                            f'expected "{RECOVERY_LOG_CONTENT_TYPE}"'
                        )
                elif content_type is None:
                    raise ShardSpecError(
                        f'journal "{journal}" ({use}) has no content-type label, so no framing to read '
                        f"its messages with (registered: {', '.join(framed)})"
                    )
                elif content_type not in framed:
                    raise ShardSpecError(
                        f'journal "{journal}" ({use}) has content-type "{content_type}", which has no '
                        f"registered framing (registered: {', '.join(framed)}; see "
                        "gazette.message.framing.register_framing)"
                    )

    # ---- GetHints

    async def GetHints(
        self, request: shard_pb2.GetHintsRequest, context: grpc.aio.ServicerContext
    ) -> shard_pb2.GetHintsResponse:
        claims = await self.verify(context, Capability.READ)
        try:
            validate_shard_id(request.shard)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        c = self.consumer
        header = self.header()
        kv = c.ks.get(layout.item_key(c.root, request.shard))
        if kv is None:
            return shard_pb2.GetHintsResponse(status=to_pb(ShardStatus.SHARD_NOT_FOUND), header=header)
        spec: ShardSpec = kv.decoded
        if claims is not None and not claims.matches(shard_labels(spec)):
            return shard_pb2.GetHintsResponse(status=to_pb(ShardStatus.SHARD_NOT_FOUND), header=header)
        resp = shard_pb2.GetHintsResponse(status=to_pb(ShardStatus.OK), header=header)
        if not spec.recovery_log:
            return resp  # no recovery log, no hints
        try:
            stored = await fetch_hints(c.etcd, spec.hint_prefix, spec.id, spec.hint_backups)
            for hints in (stored.primary, *stored.backups):
                if hints is not None and hints.log != spec.recovery_log:
                    raise RecoveryLogError(
                        f'stored hints of shard "{spec.id}" are of log "{hints.log}", not of its recovery '
                        f'log "{spec.recovery_log}"'
                    )
        except RecoveryLogError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except grpc.aio.AioRpcError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"reading hints from etcd: {exc.details()}")
        if stored.primary is not None:
            resp.primary_hints.hints.CopyFrom(stored.primary.to_proto())
        for backup in stored.backups:
            entry = resp.backup_hints.add()
            if backup is not None:
                entry.hints.CopyFrom(backup.to_proto())
        return resp

    # ---- Unassign

    async def Unassign(
        self, request: shard_pb2.UnassignRequest, context: grpc.aio.ServicerContext
    ) -> shard_pb2.UnassignResponse:
        claims = await self.verify(context, Capability.APPLY)
        c = self.consumer
        try:
            for shard_id in request.shards:
                validate_shard_id(shard_id)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        await self._authorize_ids(claims, list(request.shards), context)
        compares: list[rpc.Compare] = []
        ops: list[rpc.RequestOp] = []
        acted: list[str] = []
        for shard_id in request.shards:
            for kv in c.ks.prefixed(layout.item_assign_prefix(c.root, shard_id)):
                key = layout.parse_assignment_key(c.root, kv.key)
                failed = _status_of(kv.decoded).code == ReplicaCode.FAILED
                if not failed and (request.only_failed or key.slot != 0):
                    continue  # a FAILED assignment always goes; a live primary unless only_failed
                raw = kv.key.encode()
                compares.append(
                    rpc.Compare(
                        key=raw,
                        result=rpc.Compare.EQUAL,
                        target=rpc.Compare.MOD,
                        mod_revision=kv.mod_revision,
                    )
                )
                ops.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=raw)))
                if not acted or acted[-1] != shard_id:
                    acted.append(shard_id)
        if request.dry_run or not ops:
            return shard_pb2.UnassignResponse(status=to_pb(ShardStatus.OK), shards=acted)
        try:
            resp = await txn(c.etcd, rpc.TxnRequest(compare=compares, success=ops))
        except grpc.aio.AioRpcError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"etcd transaction failed: {exc.details()}")
        if not resp.succeeded:
            return shard_pb2.UnassignResponse(status=to_pb(ShardStatus.ETCD_TRANSACTION_FAILED), shards=acted)
        await c.ks.wait_for_revision(int(resp.header.revision))
        return shard_pb2.UnassignResponse(status=to_pb(ShardStatus.OK), shards=acted)

    # ---- resolution at the primary (Stat, Inspect)

    async def resolve(
        self,
        shard_id: str,
        proxy_header: broker_pb2.Header | None,
        context: grpc.aio.ServicerContext,
        claims: Claims | None = None,
    ) -> _Resolution:
        """Gazette's Resolve: the shard's status and primary, waiting for a local primary's store to
        be recovered (its transaction loop running). `proxy_header` is the header of a request proxied
        here: checked against this member, then read through; such a request is not proxied again."""
        c = self.consumer
        try:
            validate_shard_id(shard_id)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if proxy_header is not None:
            etcd = proxy_header.etcd
            if etcd.cluster_id and etcd.cluster_id != c.ks.cluster_id:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"request Etcd ClusterId doesn't match our own ({etcd.cluster_id} vs {c.ks.cluster_id})",
                )
            pid = proxy_header.process_id
            if (pid.zone or pid.suffix) and (pid.zone, pid.suffix) != c.id:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"request ProcessId doesn't match our own ({pid.zone}#{pid.suffix} vs {c.zone}#{c.suffix})",
                )
            if etcd.revision > c.ks.revision:
                await c.ks.wait_for_revision(etcd.revision)
        may_proxy = proxy_header is None
        while True:
            route, statuses = self.route(shard_id)
            item = c.ks.get(layout.item_key(c.root, shard_id))
            if item is None:
                return self._resolved(ShardStatus.SHARD_NOT_FOUND, route)
            if claims is not None and not claims.matches(shard_labels(item.decoded)):
                # As if it did not exist (Gazette's resolver): no route either.
                return self._resolved(ShardStatus.SHARD_NOT_FOUND, broker_pb2.Route(primary=-1))
            if route.primary < 0:
                return self._resolved(ShardStatus.NO_SHARD_PRIMARY, route)
            primary = route.members[route.primary]
            if statuses[route.primary].code == ReplicaCode.FAILED:
                return self._resolved(ShardStatus.SHARD_STOPPED, route)  # until its assignment is removed
            if (primary.zone, primary.suffix) != c.id:
                if not may_proxy:
                    return self._resolved(ShardStatus.NOT_SHARD_PRIMARY, route)
                endpoint = route.endpoints[route.primary]
                if not endpoint:
                    return self._resolved(ShardStatus.NO_SHARD_PRIMARY, route)
                return self._resolved(ShardStatus.OK, route, endpoint=endpoint)
            shard = c.shards.get(shard_id)
            if shard is not None and shard.assignment.slot == 0:
                loop = shard.txn_loop
                if loop is not None and not loop.stopped:
                    return self._resolved(ShardStatus.OK, route, local=(shard, loop))
                if shard.error is not None or (loop is not None and loop.stopped):
                    return self._resolved(ShardStatus.SHARD_STOPPED, route)
            change = asyncio.ensure_future(c.ks.wait_for_change())  # still recovering
            try:
                await asyncio.wait({change}, timeout=RESOLVE_POLL_S)
            finally:
                change.cancel()

    def _resolved(self, status: ShardStatus, route: broker_pb2.Route, **kw: Any) -> _Resolution:
        """A resolution whose header names the primary when OK, else this member (its author)."""
        primary = route.members[route.primary] if status == ShardStatus.OK else None
        pid = (primary.zone, primary.suffix) if primary is not None else None
        return _Resolution(status, self.header(route, pid), **kw)

    async def proxy(self, endpoint: str, path: str, request: Any, response_type: Any, context: Any) -> Any:
        """Forwards `request` to the primary's member once; its gRPC failure becomes this call's. With
        auth keys it carries a token this member signs for READ of that one shard."""
        method = self._channel(endpoint).unary_unary(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )
        auth = self.consumer.auth
        md = None
        if auth is not None:
            md = auth.metadata(Capability.READ, name_selector(request.shard, "id"), UNARY_TOKEN_TTL_S)
        try:
            return await method(request, timeout=context.time_remaining(), metadata=md)
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"proxied to the shard's primary at {endpoint}: {exc.details()}")

    async def Stat(
        self, request: shard_pb2.StatRequest, context: grpc.aio.ServicerContext
    ) -> shard_pb2.StatResponse:
        claims = await self.verify(context, Capability.READ)
        try:
            for journal, offset in request.read_through.items():
                validate_journal_name(journal, allow_meta=True)
                if offset < 0:
                    raise ValidationError(f"read_through[{journal}] {offset} is not an offset >= 0")
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        res = await self.resolve(
            request.shard, request.header if request.HasField("header") else None, context, claims
        )
        if res.status != ShardStatus.OK:
            return shard_pb2.StatResponse(status=to_pb(res.status), header=res.header)
        if res.local is None:
            proxied = shard_pb2.StatRequest()
            proxied.CopyFrom(request)
            proxied.header.CopyFrom(res.header)
            return await self.proxy(
                res.endpoint, "/consumer.Shard/Stat", proxied, shard_pb2.StatResponse, context
            )
        shard, loop = res.local
        sources = {s.journal for s in shard.spec.sources}
        wanted = {j: o for j, o in request.read_through.items() if j in sources and o}
        while any(shard.read_through.get(j, 0) < o for j, o in wanted.items()):
            await loop.wait_progress()
            if loop.stopped:
                return shard_pb2.StatResponse(status=to_pb(ShardStatus.SHARD_STOPPED), header=self.header())
        return shard_pb2.StatResponse(
            status=to_pb(ShardStatus.OK),
            header=res.header,
            read_through=shard.read_through,
            publish_at=loop.publish_at,
        )

    async def inspect(
        self, request: gazette_py_pb2.InspectRequest, context: grpc.aio.ServicerContext
    ) -> gazette_py_pb2.InspectResponse:
        claims = await self.verify(context, Capability.READ)
        res = await self.resolve(
            request.shard, request.header if request.HasField("header") else None, context, claims
        )
        if res.status != ShardStatus.OK:
            return gazette_py_pb2.InspectResponse(status=to_pb(res.status), header=res.header)
        if res.local is None:
            proxied = gazette_py_pb2.InspectRequest()
            proxied.CopyFrom(request)
            proxied.header.CopyFrom(res.header)
            return await self.proxy(
                res.endpoint, "/gazette_py.Shards/Inspect", proxied, gazette_py_pb2.InspectResponse, context
            )
        shard, loop = res.local
        described = loop.describe_sequencer()
        effects = loop.side_effects.state().to_proto() if loop.side_effects is not None else None
        return gazette_py_pb2.InspectResponse(
            status=to_pb(ShardStatus.OK),
            header=res.header,
            checkpoint_json=loop.last_committed.to_json().decode(),
            sequencer_json=orjson.dumps(described).decode(),
            queued=described["queued"],
            transactions=[
                gazette_py_pb2.TxnTiming(
                    began_at=t.began_at,
                    messages=t.messages,
                    consume_s=t.consume_s,
                    commit_s=t.commit_s,
                    ack_s=t.ack_s,
                )
                for t in loop.timings
            ],
            transactions_completed=loop.transactions,
            read_through=shard.read_through,
            publish_at=loop.publish_at,
            side_effects=effects,
        )


class InspectService(gazette_py_pb2_grpc.ShardsServicer):
    """gazette-py's gazette_py.Shards service: Inspect, resolved and proxied as ShardService's Stat."""

    def __init__(self, shards: ShardService) -> None:
        self._shards = shards

    async def Inspect(
        self, request: gazette_py_pb2.InspectRequest, context: grpc.aio.ServicerContext
    ) -> gazette_py_pb2.InspectResponse:
        return await self._shards.inspect(request, context)
