"""Shard clients: list, apply, stat (read-your-writes), unassign, hints and inspect shards of a consumer
application.

`AsyncShardClient` speaks Gazette's consumer.Shard protocol (List, Apply, Stat, GetHints, Unassign),
so it works with gazette-py consumers and with Gazette's own alike, and gazette-py's
gazette_py.Shards/Inspect, which only gazette-py consumers serve (a Gazette consumer's UNIMPLEMENTED
becomes an error saying so). It talks to consumer members at given endpoints, or at the endpoints
the members of a consumer root announce in etcd (found again when one stops answering). Any member
answers; Stat and Inspect are proxied to the shard's primary. Statuses are `ShardStatus`es.
`ShardClient` is the sync facade on the process's loop thread; `ConsumerGroup.client()` returns one
for a running group.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import orjson

from gazette.auth.tls import TLSConfig, aio_channel
from gazette.auth.tokens import UNARY_TOKEN_TTL_S, Capability, KeyedAuth, name_selector, names_selector
from gazette.client.loop import LoopThread, default_loop
from gazette.client.policy import SHARD_PRIMARY, UNARY, Attempts, Deadline, Rotation, rpc_failure
from gazette.client.timeouts import (
    DEFAULT_TIMEOUT_S,
    USE_CLIENT_DEFAULT,
    CallTimeout,
    CallTrace,
    Timeout,
    check_timeout,
    resolve_timeout,
)
from gazette.consumer.allocation import ConsumerSpec
from gazette.consumer.consumer import ReplicaInfo, ShardInfo
from gazette.consumer.recoverylog.hints import FSMHints, ShardHints
from gazette.consumer.recoverylog.ops import RecoveryLogError
from gazette.consumer.side_effects import SideEffectsState
from gazette.consumer.spec import ShardSpec, ShardSpecError
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.consumer.store import ConsumerCheckpoint
from gazette.consumer.transaction import TxnTiming
from gazette.keyspace import layout
from gazette.keyspace.etcd import connect
from gazette.message.checkpoint import Checkpoint
from gazette.message.sequencer import Sequencer
from gazette.protocol import gazette_py_pb2, gazette_py_pb2_grpc, shard_pb2, shard_pb2_grpc
from gazette.protocol.endpoints import client_options
from gazette.protocol.errors import ConfigurationError, GazetteError, PeerError, ValidationError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import ShardStatus
from gazette.protocol.validate import validate_journal_name, validate_shard_id

# The gazette_py.Shards service (Inspect) rides beside consumer.Shard; these methods go to it.
GAZETTE_PY_METHODS = frozenset({"Inspect"})

T = TypeVar("T")


class ShardTimeoutError(CallTimeout):
    """A shard call did not complete within its timeout (e.g. a Stat whose read-through was not
    reached): a CallTimeout naming the shard, the consumer member asked and the last status."""


@dataclasses.dataclass(frozen=True)
class ShardChange:
    """One change of `apply_shards`: upsert `upsert`, or delete shard id `delete`.

    `expect_mod_revision`: -1 applies whatever the current revision, 0 requires that the shard does
    not exist, > 0 that it is the shard's current mod revision (as `list_shards` reports it).
    `primary_hints` (upserts only) are written as the shard's primary hints in the same transaction
    (e.g. to start a shard from another's recovered store).
    """

    upsert: ShardSpec | None = None
    delete: str = ""
    expect_mod_revision: int = -1
    primary_hints: FSMHints | None = None

    def __post_init__(self) -> None:
        if (self.upsert is None) == (not self.delete):
            raise ValidationError(
                f"{self!r} must have exactly one of upsert (a ShardSpec) or delete (a shard id)"
            )
        if self.upsert is not None and not isinstance(self.upsert, ShardSpec):
            raise ValidationError(f"ShardChange.upsert {self.upsert!r} is not a ShardSpec")
        rev = self.expect_mod_revision
        if isinstance(rev, bool) or not isinstance(rev, int) or rev < -1:
            raise ValidationError(
                f"ShardChange expect_mod_revision {rev!r} is not -1 (any), 0 (must not exist) or a revision"
            )
        if self.delete:
            validate_shard_id(self.delete)
            if rev == 0:
                raise ValidationError(f'deleting shard "{self.delete}" needs its mod revision (or -1), not 0')
            if self.primary_hints is not None:
                raise ValidationError(f'deleting shard "{self.delete}" takes no primary_hints (upserts only)')
        if self.primary_hints is not None and not isinstance(self.primary_hints, FSMHints):
            raise ValidationError(f"ShardChange.primary_hints {self.primary_hints!r} is not an FSMHints")

    @property
    def shard(self) -> str:
        return self.upsert.id if self.upsert is not None else self.delete


@dataclasses.dataclass(frozen=True)
class ShardStat:
    """A Stat answer: offsets of the shard's last fully completed transaction, and (advisory) the end
    of its last ACK append per journal it published to; `member` is the primary that answered."""

    shard: str
    read_through: dict[str, int]
    publish_at: dict[str, int]
    member: tuple[str, str]


@dataclasses.dataclass(frozen=True)
class ShardInspection:
    """What Inspect reports of a primary shard (the notebook widgets show it).

    `checkpoint` is the last committed checkpoint (read-through offsets, producer states, ACK intents),
    `sequencer` the Sequencer's `describe()` (producers' partial spans, ring occupancy, outcome counts),
    `queued` the queue-outcome counts by "<flag>/<OUTCOME>", `transactions` the most recent completed
    transactions' timings (oldest first). `side_effects` is where the shard's side effects are
    (committing, committed but unpublished, published, pending cleanup), None when its store keeps none.
    """

    shard: str
    member: tuple[str, str]
    checkpoint: ConsumerCheckpoint
    sequencer: dict[str, Any]
    queued: dict[str, int]
    transactions: list[TxnTiming]
    transactions_completed: int
    read_through: dict[str, int]
    publish_at: dict[str, int]
    side_effects: SideEffectsState | None = None
    from_stat: bool = False  # built from Stat: the primary is a Gazette consumer, which has no Inspect


def _inspection_from_stat(stat: ShardStat) -> ShardInspection:
    """What a Gazette consumer's Stat tells of a shard, shaped as Inspect's answer: its last committed
    read-through as the checkpoint (no producers, no ACK intents) and publish_at."""
    checkpoint = ConsumerCheckpoint(Checkpoint(dict(stat.read_through), []))
    return ShardInspection(
        shard=stat.shard, member=stat.member, checkpoint=checkpoint,
        sequencer=Sequencer.from_checkpoint(checkpoint.sequencer).describe(), queued={}, transactions=[],
        transactions_completed=0, read_through=dict(stat.read_through), publish_at=dict(stat.publish_at),
        from_stat=True,
    )  # fmt: skip


def _trace(operation: str, subject: str) -> CallTrace:
    """The CallTrace of a shard call (its peers are consumer members)."""
    return CallTrace(operation, subject, peer="consumer")


def _ids(ids: Iterable[str], shown: int = 3) -> str:
    """Shard ids for a message: the first `shown`, then how many more."""
    ids = list(ids)
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return (", ".join(ids[:shown]) + more) or "shards"


def _member(header: Any) -> tuple[str, str]:
    """The process id of a protocol.Header (who answered, or the resolved primary)."""
    return (header.process_id.zone, header.process_id.suffix)


def shard_info_from_pb(s: shard_pb2.ListResponse.Shard) -> ShardInfo:
    """A listed shard: Gazette's route members (by zone, suffix) each with its status, as replicas
    with the primary first (slot 0) and the others numbered 1, 2, ... in route order."""
    route = s.route
    if len(route.members) != len(s.status):
        raise PeerError(
            f'listed shard "{s.spec.id}" has {len(route.members)} route members but {len(s.status)} statuses',
        )
    order = sorted(range(len(route.members)), key=lambda i: i != route.primary)
    replicas = []
    for slot, i in enumerate(order):
        member = route.members[i]
        try:
            status = ReplicaStatus.from_proto(s.status[i])
        except ValueError as exc:
            raise PeerError(f'listed shard "{s.spec.id}": {exc}') from None
        endpoint = route.endpoints[i] if i < len(route.endpoints) else ""
        number = slot if route.primary >= 0 else slot + 1
        replicas.append(ReplicaInfo(member.zone, member.suffix, number, status, endpoint))
    return ShardInfo(ShardSpec.from_proto(s.spec), s.mod_revision, tuple(replicas), s.create_revision)


class AsyncShardClient:
    """The Shard service of a consumer application, through `endpoint` (one member's address, or a
    list to fail over between) or through the members announced under `root` in the etcd at `etcd`.

    `timeout` (seconds, None: no bound) is the default of every call's `timeout=`: a call that runs
    out (a Stat still short of its read-through, members that do not answer) raises ShardTimeoutError.
    `auth_keys` signs each call as Gazette's AuthShardClient does (Stat, GetHints, Inspect: READ of
    the shard; List: LIST over its selector; Apply: APPLY; Unassign: APPLY of the shards named);
    `tls` is the CA and client certificate for https:// members. `keepalive` (seconds; None: off)
    pings the members that often, so a call to one that stopped (SIGSTOP) or that a partition cut
    off fails over within twice that: only for gazette-py members (Go consumers refuse frequent pings).
    """

    def __init__(
        self,
        endpoint: str | Sequence[str] | None = None,
        *,
        etcd: str | None = None,
        root: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        auth_keys: KeyedAuth | str | None = None,
        tls: TLSConfig | None = None,
        keepalive: float | None = None,
    ) -> None:
        """Raises ValidationError unless exactly one of `endpoint` and (`etcd`, `root`) is given, and
        ValueError for a bad `timeout` or `keepalive`. Channels open lazily, at the first call."""
        self.timeout = check_timeout(timeout)
        self._options = client_options(keepalive)
        self.auth = KeyedAuth.coerce(auth_keys)
        self.tls = tls
        if endpoint is None and not (etcd and root):
            raise ValidationError(
                "a shard client needs a consumer endpoint (e.g. http://127.0.0.1:9000), or etcd= and root= "
                "(the consumer application's etcd root) to find its members"
            )
        if endpoint is not None and (etcd or root):
            raise ValidationError(
                "give a shard client either a consumer endpoint or etcd= and root=, not both"
            )
        self._fixed = [endpoint] if isinstance(endpoint, str) else list(endpoint or [])
        if endpoint is not None and not self._fixed:
            raise ValidationError("a shard client needs at least one consumer endpoint")
        self.etcd = etcd
        self.root = root.rstrip("/") if root else None
        self._rotation = Rotation(self._fixed)  # members found anew (etcd) after a failed attempt
        self._channels: dict[str, tuple[grpc.aio.Channel, Any, Any]] = {}  # channel, Shard and Shards stubs

    async def close(self) -> None:
        """Closes the channels opened to members; a later call opens new ones."""
        channels, self._channels = list(self._channels.values()), {}
        for channel, *_stubs in channels:
            await channel.close()

    async def __aenter__(self) -> AsyncShardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- the shard space

    async def list_shards(
        self, selector: str | LabelSelector | None = None, *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> list[ShardInfo]:
        """Shards whose labels (plus the meta-label `id`) match `selector`, with their replicas.
        ShardTimeoutError after `timeout` seconds (the client's default unless given)."""
        parsed = LabelSelector.coerce(selector)  # bad selectors fail here, naming the problem
        trace = _trace("listing of shards", f"matching {str(parsed)!r}" if str(parsed) else "")
        resp = await self._call(
            "List", shard_pb2.ListRequest(selector=parsed.to_proto()), self._seconds(timeout), trace
        )
        self._check(resp.status, "list of shards")
        return [shard_info_from_pb(s) for s in resp.shards]

    async def apply_shards(
        self, changes: Iterable[ShardSpec | ShardChange], *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> int:
        """Creates, updates or deletes shards in one etcd transaction; returns its revision.
        ShardTimeoutError after `timeout` seconds (the client's default unless given).

        A plain ShardSpec is written whatever its current revision; ShardChanges carry a
        compare-and-swap revision (ETCD_TRANSACTION_FAILED when one does not match) or a deletion.
        Source journals must exist with a content type that has a registered framing (a gazette-py
        member checks; a Gazette consumer does not).
        """
        req = shard_pb2.ApplyRequest()
        for ch in changes:
            if isinstance(ch, ShardSpec):
                ch = ShardChange(upsert=ch)
            elif not isinstance(ch, ShardChange):
                raise ValidationError(f"{ch!r} is neither a ShardSpec nor a ShardChange")
            change = req.changes.add(expect_mod_revision=ch.expect_mod_revision)
            if ch.upsert is not None:
                change.upsert.CopyFrom(ch.upsert.to_proto())
                if ch.primary_hints is not None:
                    change.primary_hints.CopyFrom(ch.primary_hints.to_proto())
            else:
                change.delete = ch.delete
        trace = _trace(
            "apply of shards", _ids(c.upsert.id if c.HasField("upsert") else c.delete for c in req.changes)
        )
        try:
            resp = await self._call("Apply", req, self._seconds(timeout), trace)
        except ValidationError as exc:
            raise ShardSpecError(str(exc)) from None
        if resp.status == ShardStatus.ETCD_TRANSACTION_FAILED:
            raise GazetteError(
                ShardStatus.ETCD_TRANSACTION_FAILED,
                "apply of shards failed: a shard's mod revision did not match its expect_mod_revision "
                "(list the shards again and retry)",
            )
        self._check(resp.status, "apply of shards")
        return int(resp.header.etcd.revision)

    async def delete_shards(self, shard_ids: Iterable[str], *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """Deletes the shards in one etcd transaction; returns its revision (as `apply_shards`)."""
        return await self.apply_shards([ShardChange(delete=s) for s in shard_ids], timeout=timeout)

    async def unassign(
        self,
        shards: str | Iterable[str],
        *,
        only_failed: bool = False,
        dry_run: bool = False,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[str]:
        """Removes each shard's FAILED assignments and its primary's (with `only_failed`: the FAILED
        ones only), as Gazette's Unassign does, so that the allocator promotes a standby or places
        the shard anew. Returns the shards acted on (or that would be, `dry_run`); shards without
        such assignments, unknown ones too, are not among them. ShardTimeoutError after `timeout`
        seconds (the client's default unless given)."""
        ids = [shards] if isinstance(shards, str) else list(shards)
        for s in ids:
            validate_shard_id(s)
        req = shard_pb2.UnassignRequest(shards=ids, only_failed=only_failed, dry_run=dry_run)
        resp = await self._call("Unassign", req, self._seconds(timeout), _trace("unassign of", _ids(ids)))
        if resp.status == ShardStatus.ETCD_TRANSACTION_FAILED:
            raise GazetteError(
                ShardStatus.ETCD_TRANSACTION_FAILED, "unassign raced with an assignment change; try again"
            )
        self._check(resp.status, "unassign")
        return list(resp.shards)

    async def get_hints(self, shard: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> ShardHints:
        """The shard's stored recovery-log hints, the primary's and its backups' (`.backup.0`
        newest; None where none are stored), as the Shard service's GetHints reads them from etcd.
        A shard without a recovery log has none (no backups either). ShardTimeoutError after
        `timeout` seconds (the client's default unless given)."""
        validate_shard_id(shard)
        resp = await self._call(
            "GetHints",
            shard_pb2.GetHintsRequest(shard=shard),
            self._seconds(timeout),
            _trace("hints of shard", shard),
        )
        self._check(resp.status, f"hints of shard {shard}")
        try:
            primary = (
                FSMHints.from_proto(resp.primary_hints.hints, f"primary hints of shard {shard}")
                if resp.primary_hints.HasField("hints")
                else None
            )
            backups = tuple(
                FSMHints.from_proto(b.hints, f"backup hints {n} of shard {shard}")
                if b.HasField("hints")
                else None
                for n, b in enumerate(resp.backup_hints)
            )
        except RecoveryLogError as exc:
            raise PeerError(str(exc)) from None
        return ShardHints(primary, backups)

    # ---- at the primary

    async def stat_shard(
        self,
        shard: str,
        read_through: Mapping[str, int] | None = None,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> ShardStat:
        """Read-your-writes: returns once the shard's primary has completed (committed and
        acknowledged) a transaction reading each source journal in `read_through` through at least
        the given offset (e.g. an append's `end`); journals that are not sources are ignored.
        Raises ShardTimeoutError after `timeout` seconds (the client's default unless given; None
        waits as long as it takes)."""
        validate_shard_id(shard)
        offsets = dict(read_through or {})
        for journal, offset in offsets.items():
            validate_journal_name(journal, allow_meta=True)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValidationError(
                    f"stat of shard {shard}: read_through[{journal!r}] {offset!r} is not an offset >= 0"
                )
        req = shard_pb2.StatRequest(shard=shard, read_through=offsets)
        trace = _trace("stat of shard", f"{shard} (read_through {offsets})" if offsets else shard)
        resp = await self._at_primary("Stat", req, self._seconds(timeout), trace)
        return ShardStat(shard, dict(resp.read_through), dict(resp.publish_at), _member(resp.header))

    async def inspect(
        self, shard: str, *, timeout: Timeout = USE_CLIENT_DEFAULT, stat_fallback: bool = False
    ) -> ShardInspection:
        """The primary's last committed checkpoint, sequencer state, outcome counts and recent
        transaction timings. Bounded by `timeout` (the client's default unless given): a paused or
        partitioned primary raises ShardTimeoutError instead of holding the caller (a widget's
        refresh) indefinitely. Only gazette-py consumers serve it (gazette_py.Shards/Inspect); a
        Gazette consumer's refusal raises a PeerError saying so, unless `stat_fallback`: then
        the inspection is built from Gazette's Stat (`from_stat`): the checkpoint's read-through
        offsets, without producer states, ACK intents or transactions, which only Inspect tells."""
        validate_shard_id(shard)
        try:
            resp = await self._at_primary(
                "Inspect",
                gazette_py_pb2.InspectRequest(shard=shard),
                self._seconds(timeout),
                _trace("inspect of shard", shard),
            )
        except GazetteError as exc:
            if not stat_fallback or getattr(exc, "grpc_code", None) != grpc.StatusCode.UNIMPLEMENTED.name:
                raise
            return _inspection_from_stat(await self.stat_shard(shard, timeout=timeout))
        return ShardInspection(
            shard=shard,
            member=_member(resp.header),
            checkpoint=ConsumerCheckpoint.from_json(resp.checkpoint_json),
            sequencer=orjson.loads(resp.sequencer_json),
            queued=dict(resp.queued),
            transactions=[
                TxnTiming(t.began_at, t.messages, t.consume_s, t.commit_s, t.ack_s) for t in resp.transactions
            ],
            transactions_completed=resp.transactions_completed,
            read_through=dict(resp.read_through),
            publish_at=dict(resp.publish_at),
            side_effects=(
                SideEffectsState.from_proto(resp.side_effects) if resp.HasField("side_effects") else None
            ),
        )

    def _seconds(self, timeout: Timeout) -> float | None:
        return resolve_timeout(timeout, self.timeout)

    async def _at_primary(self, method: str, req: Any, timeout: float | None, trace: CallTrace) -> Any:
        """Calls `method`, asking again (the call policy's SHARD_PRIMARY) while the shard has no
        running primary, for at most `timeout` seconds in all (then ShardTimeoutError from `trace`)."""
        what = f"{trace.operation} {trace.subject}"
        deadline = Deadline(timeout, trace, ShardTimeoutError)
        attempts = Attempts(SHARD_PRIMARY, deadline)
        while True:
            try:
                resp = await self._call(method, req, deadline.left(), trace)
            except ShardTimeoutError:
                raise deadline.error() from None  # of the whole call
            status = ShardStatus(resp.status)
            trace.saw(status)
            if status == ShardStatus.SHARD_STOPPED:
                await self._raise_if_failed(req.shard, what, deadline.left())
            if attempts.retries_status(status):
                await attempts.pause()
                continue
            self._check(status, what)
            return resp

    async def _raise_if_failed(self, shard: str, what: str, timeout: float | None) -> None:
        """A FAILED primary stays so until unassigned: no use asking again."""
        for info in await self.list_shards(LabelSelector([("id", shard, False)]), timeout=timeout):
            primary = info.primary
            if primary is not None and primary.status.code == ReplicaCode.FAILED:
                raise GazetteError(
                    ShardStatus.SHARD_STOPPED,
                    f"{what} failed: the shard's primary FAILED ({primary.status.error}); "
                    f"`gazette shards unassign --failed {shard}` places it again",
                )

    # ---- transport

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != ShardStatus.OK:
            raise GazetteError(ShardStatus(status), f"{what} failed")

    async def _discover(self) -> list[str]:
        if self._fixed:
            return list(self._fixed)
        assert self.etcd is not None and self.root is not None
        client = connect(self.etcd)
        try:
            resp = await client.get_prefix(layout.members_prefix(self.root).encode())
        finally:
            await client.close()
        live: list[str] = []
        exiting: list[str] = []
        for kv in resp:
            try:
                spec = ConsumerSpec.from_bytes(kv.value)
            except ValueError:
                continue
            if spec.endpoint:
                (exiting if spec.exiting else live).append(spec.endpoint)
        found = live + exiting
        if not found:
            raise ConfigurationError(
                f'no consumer member under "{self.root}" announces a Shard service endpoint'
            )
        return found

    def _stub(self, endpoint: str, method: str) -> Any:
        """The stub with `method`: consumer.Shard's, or gazette_py.Shards' for GAZETTE_PY_METHODS."""
        entry = self._channels.get(endpoint)
        if entry is None:
            channel = aio_channel(endpoint, self.tls, self._options)
            entry = self._channels[endpoint] = (
                channel,
                shard_pb2_grpc.ShardStub(channel),
                gazette_py_pb2_grpc.ShardsStub(channel),
            )
        return entry[2] if method in GAZETTE_PY_METHODS else entry[1]

    def _metadata(self, method: str, req: Any) -> tuple[tuple[str, str], ...] | None:
        """The authorization of `method` with `req` (Gazette's AuthShardClient claims)."""
        if self.auth is None:
            return None
        if method == "List":
            return self.auth.metadata(
                Capability.LIST, LabelSelector.from_proto(req.selector), UNARY_TOKEN_TTL_S
            )
        if method == "Apply":
            return self.auth.metadata(Capability.APPLY, None, UNARY_TOKEN_TTL_S)
        if method == "Unassign":
            return self.auth.metadata(
                Capability.APPLY, names_selector(list(req.shards), "id"), UNARY_TOKEN_TTL_S
            )
        return self.auth.metadata(Capability.READ, name_selector(req.shard, "id"), UNARY_TOKEN_TTL_S)

    async def _call(self, method: str, req: Any, timeout: float | None, trace: CallTrace) -> Any:
        """One RPC under the call policy: tried again at the next member (found again through etcd)
        while members are UNAVAILABLE, for at most `timeout` seconds (then ShardTimeoutError from
        `trace`, noted at each attempt). The RPC carries what is left of `timeout` as its deadline."""
        deadline = Deadline(timeout, trace, ShardTimeoutError)
        attempts = Attempts(UNARY, deadline, self._rotation)
        while True:
            if not self._rotation.endpoints or attempts.attempt:
                try:
                    async with asyncio.timeout(deadline.left()):  # etcd may not answer either
                        self._rotation.replace(await self._discover())
                except TimeoutError:
                    trace.saw_error(TimeoutError(f"etcd at {self.etcd} did not list the members"))
                    raise deadline.error() from None
                except (GazetteError, OSError) as exc:
                    self._rotation.replace(())
                    if not attempts.retries_unreachable(exc):
                        raise
            if self._rotation.endpoints:
                index = self._rotation.index
                endpoint = trace.endpoint = self._rotation.endpoint
                try:
                    return await getattr(self._stub(endpoint, method), method)(
                        req, timeout=deadline.left(), metadata=self._metadata(method, req)
                    )
                except grpc.aio.AioRpcError as exc:
                    code = exc.code()
                    if code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline.seconds is not None:
                        raise deadline.error() from None
                    if code == grpc.StatusCode.INVALID_ARGUMENT:
                        raise ValidationError(exc.details() or "invalid argument") from None
                    if code == grpc.StatusCode.UNIMPLEMENTED and method in GAZETTE_PY_METHODS:
                        raise PeerError(
                            f"{method} at {endpoint}: the consumer there is not a gazette-py consumer (it "
                            f"does not serve gazette_py.Shards/{method}, only Gazette's consumer.Shard "
                            "service: List, Apply, Stat, GetHints, Unassign)",
                            grpc_code=code.name,
                        ) from None
                    if not attempts.retries_rpc(exc, index):
                        raise rpc_failure(exc, trace) from None
            await attempts.pause()


class ShardClient:
    """The sync facade of AsyncShardClient (same arguments and methods, not awaitable). `timeout`
    (seconds, None: no bound) is the default of every call's `timeout=` (ShardTimeoutError)."""

    def __init__(
        self,
        endpoint: str | Sequence[str] | None = None,
        *,
        etcd: str | None = None,
        root: str | None = None,
        loop: LoopThread | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        auth_keys: KeyedAuth | str | None = None,
        tls: TLSConfig | None = None,
        keepalive: float | None = None,
    ) -> None:
        """As `AsyncShardClient` (ValidationError unless exactly one of `endpoint` and `etcd`+`root`
        is given), its calls run on `loop` (default: the process's shared background loop thread)."""
        self._loop = loop or default_loop()

        async def make() -> AsyncShardClient:
            return AsyncShardClient(
                endpoint,
                etcd=etcd,
                root=root,
                timeout=timeout,
                auth_keys=auth_keys,
                tls=tls,
                keepalive=keepalive,
            )

        self.aio: AsyncShardClient = self._loop.run(make())

    @property
    def timeout(self) -> float | None:
        """The default timeout of this client's calls, in seconds (None: no bound)."""
        return self.aio.timeout

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._loop.run(fn(*args, **kwargs))

    def close(self) -> None:
        """Closes the channels opened to consumer members (on the loop thread)."""
        self._run(self.aio.close)

    def __enter__(self) -> ShardClient:
        """The client itself; leaving the `with` block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the client (see `close`); exceptions propagate."""
        self.close()

    def list_shards(
        self, selector: str | LabelSelector | None = None, *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> list[ShardInfo]:
        """Shards whose labels (plus the meta-label `id`) match `selector`, each with its route and
        replica statuses. GazetteError on a failing status, ShardTimeoutError after `timeout` seconds
        (the client's default unless given)."""
        result: list[ShardInfo] = self._run(self.aio.list_shards, selector, timeout=timeout)
        return result

    def apply_shards(
        self, changes: Iterable[ShardSpec | ShardChange], *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> int:
        """Creates, updates or deletes shards in one etcd transaction and returns its revision (see
        `AsyncShardClient.apply_shards`). A ShardChange whose revision no longer matches raises
        GazetteError(ETCD_TRANSACTION_FAILED); an invalid spec ShardSpecError; ShardTimeoutError after
        `timeout` seconds."""
        return int(self._run(self.aio.apply_shards, list(changes), timeout=timeout))

    def delete_shards(self, shard_ids: Iterable[str], *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """Deletes the shards in one etcd transaction and returns its revision; their recovery logs
        and stored state are left alone. Errors as `apply_shards`."""
        return int(self._run(self.aio.delete_shards, list(shard_ids), timeout=timeout))

    def unassign(
        self,
        shards: str | Iterable[str],
        *,
        only_failed: bool = False,
        dry_run: bool = False,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[str]:
        """Removes the shards' FAILED and primary assignments (with `only_failed`, FAILED ones only)
        so the allocator places them anew; returns the shards acted on, or that would be with
        `dry_run` (see `AsyncShardClient.unassign`). ShardTimeoutError after `timeout` seconds."""
        ids = [shards] if isinstance(shards, str) else list(shards)
        result: list[str] = self._run(
            self.aio.unassign, ids, only_failed=only_failed, dry_run=dry_run, timeout=timeout
        )
        return result

    def get_hints(self, shard: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> ShardHints:
        """The shard's stored recovery-log hints, the primary's and its backups' (None where none is
        stored; see `AsyncShardClient.get_hints`). ShardTimeoutError after `timeout` seconds."""
        result: ShardHints = self._run(self.aio.get_hints, shard, timeout=timeout)
        return result

    def stat_shard(
        self,
        shard: str,
        read_through: Mapping[str, int] | None = None,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> ShardStat:
        """Read-your-writes (see `AsyncShardClient.stat_shard`); ShardTimeoutError after `timeout`."""
        result: ShardStat = self._run(self.aio.stat_shard, shard, read_through, timeout=timeout)
        return result

    def inspect(
        self, shard: str, *, timeout: Timeout = USE_CLIENT_DEFAULT, stat_fallback: bool = False
    ) -> ShardInspection:
        """The shard primary's last committed checkpoint, sequencer state, outcome counts and recent
        transaction timings (gazette-py consumers only: a Gazette consumer's refusal raises
        GazetteError, or with `stat_fallback` answers from Stat: see `AsyncShardClient.inspect`).
        ShardTimeoutError after `timeout` seconds."""
        result: ShardInspection = self._run(
            self.aio.inspect, shard, timeout=timeout, stat_fallback=stat_fallback
        )
        return result
