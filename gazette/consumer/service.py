"""The Shard gRPC service each Consumer member hosts: List, Apply, Stat, Unassign, Inspect (reference 7.8).

List and Apply read and write ShardSpecs under `<root>/items/` (Apply: one etcd transaction of
compare-and-swaps on mod revisions, refusing sources without a registered framing). Stat and Inspect
resolve the shard's primary: served here when this member holds it (Stat blocks until the shard's
read-through reaches the requested offsets), else proxied once to the primary's member.
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

from gazette.consumer.spec import ShardSpec, ShardSpecError
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.keyspace import layout
from gazette.keyspace.etcd import txn
from gazette.message.framing import content_types
from gazette.protocol import consumer_pb2 as pb
from gazette.protocol import consumer_pb2_grpc as pb_grpc
from gazette.protocol.endpoints import GRPC_CLIENT_OPTIONS, grpc_target
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import validate_shard_id

if TYPE_CHECKING:
    from gazette.consumer.consumer import Consumer
    from gazette.consumer.shard import Shard
    from gazette.consumer.transaction import TransactionLoop

log = logging.getLogger(__name__)

RESOLVE_POLL_S = 0.05  # how often a request waiting for a local primary to recover looks again
RECOVERY_LOG_CONTENT_TYPE = "application/x-gazette-recoverylog"  # reference 7.7
CONTENT_TYPE_LABEL = "content-type"


def shard_labels(spec: ShardSpec) -> LabelSet:
    """A shard's labels plus its `id` meta-label, as List selectors match them."""
    return spec.labels.union(LabelSet([("id", spec.id)]))


def status_to_pb(status: ReplicaStatus) -> pb.ReplicaStatus:
    return pb.ReplicaStatus(code=int(status.code), errors=list(status.errors))


@dataclasses.dataclass
class _Primary:
    """Where a shard's primary is: `status` OK and `local` (this member's shard and its running
    transaction loop), or OK and `endpoint` (another member's), or why neither."""

    status: Status
    local: tuple[Shard, TransactionLoop] | None = None
    endpoint: str = ""


class ShardService(pb_grpc.ShardServicer):
    """The Shard service of one Consumer member; `close()` drops its proxy channels."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._proxies: dict[str, tuple[grpc.aio.Channel, pb_grpc.ShardStub]] = {}

    async def close(self) -> None:
        proxies, self._proxies = list(self._proxies.values()), {}
        for channel, _ in proxies:
            await channel.close()

    def header(self, proxied: bool = False) -> pb.Header:
        c = self.consumer
        return pb.Header(
            process_id=pb.ProcessId(zone=c.zone, suffix=c.suffix),
            etcd_revision=c.ks.revision,
            proxied=proxied,
        )

    def _stub(self, endpoint: str) -> pb_grpc.ShardStub:
        entry = self._proxies.get(endpoint)
        if entry is None:
            channel = grpc.aio.insecure_channel(grpc_target(endpoint), options=GRPC_CLIENT_OPTIONS)
            entry = self._proxies[endpoint] = (channel, pb_grpc.ShardStub(channel))
        return entry[1]

    # ---- List

    async def List(self, request: pb.ListRequest, context: grpc.aio.ServicerContext) -> pb.ListResponse:
        try:
            selector = LabelSelector.parse(request.selector)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        c = self.consumer
        root, ks = c.root, c.ks
        endpoints = {}
        for kv in ks.prefixed(layout.members_prefix(root)):
            try:
                member = layout.parse_member_key(root, kv.key)
            except ValueError:
                continue
            endpoints[(member.zone, member.suffix)] = kv.decoded.endpoint
        replicas: dict[str, list[pb.Replica]] = {}
        for kv in ks.prefixed(layout.assign_prefix(root)):
            try:
                key = layout.parse_assignment_key(root, kv.key)
            except ValueError:
                continue
            status = kv.decoded if isinstance(kv.decoded, ReplicaStatus) else ReplicaStatus()
            replicas.setdefault(key.item, []).append(
                pb.Replica(
                    id=pb.ProcessId(zone=key.zone, suffix=key.suffix),
                    slot=key.slot,
                    status=status_to_pb(status),
                    endpoint=endpoints.get((key.zone, key.suffix), ""),
                )
            )
        resp = pb.ListResponse(status=to_pb(Status.OK), header=self.header())
        for kv in ks.prefixed(layout.items_prefix(root)):
            spec: ShardSpec = kv.decoded
            if not selector.matches(shard_labels(spec)):
                continue
            resp.shards.add(
                spec_json=spec.to_json().decode(),
                mod_revision=kv.mod_revision,
                create_revision=kv.create_revision,
                replicas=sorted(replicas.get(spec.id, []), key=lambda r: r.slot),
            )
        return resp

    # ---- Apply

    async def Apply(self, request: pb.ApplyRequest, context: grpc.aio.ServicerContext) -> pb.ApplyResponse:
        c = self.consumer
        compares: list[rpc.Compare] = []
        ops: list[rpc.RequestOp] = []
        upserts: list[ShardSpec] = []
        try:
            seen: set[str] = set()
            for i, ch in enumerate(request.changes):
                if bool(ch.upsert_json) == bool(ch.delete):
                    raise ValidationError(f"change {i} must have exactly one of upsert_json or delete")
                if ch.expect_mod_revision < -1:
                    raise ValidationError(
                        f"change {i} has expect_mod_revision {ch.expect_mod_revision} "
                        "(expected -1: any, 0: must not exist, or a mod revision)"
                    )
                if ch.upsert_json:
                    spec = ShardSpec.from_json(ch.upsert_json)
                    shard_id = spec.id
                    upserts.append(spec)
                    key = layout.item_key(c.root, shard_id).encode()
                    ops.append(rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=spec.to_json())))
                else:
                    shard_id = ch.delete
                    validate_shard_id(shard_id)
                    if ch.expect_mod_revision == 0:
                        raise ValidationError(
                            f'deleting shard "{shard_id}" needs its mod revision (or -1 to ignore it), not 0'
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
        try:
            resp = await txn(c.etcd, rpc.TxnRequest(compare=compares, success=ops))
        except grpc.aio.AioRpcError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"etcd transaction failed: {exc.details()}")
        if not resp.succeeded:
            return pb.ApplyResponse(status=to_pb(Status.ETCD_TRANSACTION_FAILED), header=self.header())
        revision = int(resp.header.revision)
        if ops:
            await c.ks.wait_for_revision(revision)
        header = self.header()
        header.etcd_revision = revision
        return pb.ApplyResponse(status=to_pb(Status.OK), header=header)

    async def _check_journals(self, specs: Iterable[ShardSpec]) -> None:
        """Reference 7.2: every source journal exists with a content type that has a registered
        framing, and a recovery log (if any) exists with the recovery-log content type."""
        wanted: dict[str, list[str]] = {}  # journal -> what needs it
        for spec in specs:
            for src in spec.sources:
                wanted.setdefault(src.journal, []).append(f'source of shard "{spec.id}"')
            if spec.recovery_log_prefix:
                wanted.setdefault(f"{spec.recovery_log_prefix}/{spec.id}", []).append(
                    f'recovery log of shard "{spec.id}"'
                )
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

    # ---- Unassign

    async def Unassign(
        self, request: pb.UnassignRequest, context: grpc.aio.ServicerContext
    ) -> pb.UnassignResponse:
        c = self.consumer
        try:
            for shard_id in request.shards:
                validate_shard_id(shard_id)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        compares, ops, acted = [], [], []
        for shard_id in request.shards:
            if c.ks.get(layout.item_key(c.root, shard_id)) is None:
                return pb.UnassignResponse(status=to_pb(Status.SHARD_NOT_FOUND), header=self.header())
            removed = False
            for kv in c.ks.prefixed(layout.item_assign_prefix(c.root, shard_id)):
                key = layout.parse_assignment_key(c.root, kv.key)
                status = kv.decoded if isinstance(kv.decoded, ReplicaStatus) else ReplicaStatus()
                if request.only_failed and status.code != ReplicaCode.FAILED:
                    continue
                if not request.only_failed and key.slot != 0:
                    continue
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
                removed = True
            if removed:
                acted.append(shard_id)
        header = self.header()
        if request.dry_run or not ops:
            return pb.UnassignResponse(status=to_pb(Status.OK), header=header, shards=acted)
        try:
            resp = await txn(c.etcd, rpc.TxnRequest(compare=compares, success=ops))
        except grpc.aio.AioRpcError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"etcd transaction failed: {exc.details()}")
        if not resp.succeeded:
            return pb.UnassignResponse(status=to_pb(Status.ETCD_TRANSACTION_FAILED), header=header)
        await c.ks.wait_for_revision(int(resp.header.revision))
        header.etcd_revision = int(resp.header.revision)
        return pb.UnassignResponse(status=to_pb(Status.OK), header=header, shards=acted)

    # ---- Stat and Inspect: resolved at the primary

    def _where(self, shard_id: str) -> _Primary:
        """Where the shard's primary is, by this member's KeySpace (local: not checked for recovery)."""
        c = self.consumer
        if c.ks.get(layout.item_key(c.root, shard_id)) is None:
            return _Primary(Status.SHARD_NOT_FOUND)
        for kv in c.ks.prefixed(layout.item_assign_prefix(c.root, shard_id)):
            key = layout.parse_assignment_key(c.root, kv.key)
            if key.slot != 0:
                continue
            if isinstance(kv.decoded, ReplicaStatus) and kv.decoded.code == ReplicaCode.FAILED:
                return _Primary(Status.SHARD_STOPPED)  # until unassigned
            if (key.zone, key.suffix) == c.id:
                return _Primary(Status.OK)
            member = c.ks.get(layout.member_key(c.root, key.zone, key.suffix))
            endpoint = member.decoded.endpoint if member is not None else ""
            return _Primary(Status.OK, endpoint=endpoint) if endpoint else _Primary(Status.NO_SHARD_PRIMARY)
        return _Primary(Status.NO_SHARD_PRIMARY)

    async def _primary(self, shard_id: str) -> _Primary:
        """As `_where`, but a local primary is waited for until its store is recovered and its
        transaction loop runs (SHARD_STOPPED if it failed instead)."""
        while True:
            where = self._where(shard_id)
            if where.status != Status.OK or where.endpoint:
                return where
            shard = self.consumer.shards.get(shard_id)
            if shard is not None and shard.assignment.slot == 0:
                txn = shard.txn_loop
                if txn is not None and not txn.stopped:
                    return _Primary(Status.OK, local=(shard, txn))
                if shard.error is not None or (txn is not None and txn.stopped):
                    return _Primary(Status.SHARD_STOPPED)
            change = asyncio.ensure_future(self.consumer.ks.wait_for_change())
            try:
                await asyncio.wait({change}, timeout=RESOLVE_POLL_S)
            finally:
                change.cancel()

    async def _at_primary(
        self, request: Any, context: grpc.aio.ServicerContext, method: str, make: type[Any]
    ) -> Any:
        """Stat and Inspect: validates the shard id and finds its primary. Returns the response to
        send as is (a status, or the primary member's own answer, proxied once), or the local
        (shard, transaction loop) when this member is the primary."""
        try:
            validate_shard_id(request.shard)
        except GazetteError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        where = await self._primary(request.shard)
        if where.status != Status.OK:
            return make(status=to_pb(where.status), header=self.header())
        if where.local is not None:
            return where.local
        if request.header.proxied:
            return make(status=to_pb(Status.NOT_SHARD_PRIMARY), header=self.header())
        proxied = type(request)()
        proxied.CopyFrom(request)
        proxied.header.CopyFrom(self.header(proxied=True))
        return await self._proxy(context, getattr(self._stub(where.endpoint), method), proxied)

    async def Stat(self, request: pb.StatRequest, context: grpc.aio.ServicerContext) -> pb.StatResponse:
        where = await self._at_primary(request, context, "Stat", pb.StatResponse)
        if not isinstance(where, tuple):
            return where  # type: ignore[no-any-return]
        shard, txn = where
        sources = {s.journal for s in shard.spec.sources}
        wanted = {j: o for j, o in request.read_through.items() if j in sources}
        while any(shard.read_through.get(j, 0) < o for j, o in wanted.items()):
            await txn.wait_progress()
            if txn.stopped:
                return pb.StatResponse(status=to_pb(Status.SHARD_STOPPED), header=self.header())
        return pb.StatResponse(
            status=to_pb(Status.OK),
            header=self.header(),
            read_through=shard.read_through,
            publish_at=txn.publish_at,
        )

    async def Inspect(
        self, request: pb.InspectRequest, context: grpc.aio.ServicerContext
    ) -> pb.InspectResponse:
        where = await self._at_primary(request, context, "Inspect", pb.InspectResponse)
        if not isinstance(where, tuple):
            return where  # type: ignore[no-any-return]
        shard, txn = where
        described = txn.describe_sequencer()
        return pb.InspectResponse(
            status=to_pb(Status.OK),
            header=self.header(),
            checkpoint_json=txn.last_committed.to_json().decode(),
            sequencer_json=orjson.dumps(described).decode(),
            queued=described["queued"],
            transactions=[
                pb.TxnTiming(
                    began_at=t.began_at,
                    messages=t.messages,
                    consume_s=t.consume_s,
                    commit_s=t.commit_s,
                    ack_s=t.ack_s,
                )
                for t in txn.timings
            ],
            transactions_completed=txn.transactions,
            read_through=shard.read_through,
            publish_at=txn.publish_at,
        )

    async def _proxy(self, context: grpc.aio.ServicerContext, method, request):  # type: ignore[no-untyped-def]
        """Forwards `request` to the primary's member once; its gRPC failure becomes this call's."""
        try:
            return await method(request, timeout=context.time_remaining())
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"proxied to the shard's primary: {exc.details()}")
