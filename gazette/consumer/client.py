"""Shard clients: list, apply, stat (read-your-writes), unassign and inspect shards of a consumer application.

`AsyncShardClient` talks to the Shard service of consumer members: at given endpoints, or at the
endpoints the members of a consumer root announce in etcd (found again when one stops answering).
Any member answers; Stat and Inspect are proxied to the shard's primary. `ShardClient` is the sync
facade on the process's loop thread. `ConsumerGroup.client()` returns one for a running group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import orjson

from gazette.client.loop import LoopThread, default_loop
from gazette.consumer.allocation import ConsumerSpec
from gazette.consumer.consumer import ReplicaInfo, ShardInfo
from gazette.consumer.spec import ShardSpec, ShardSpecError
from gazette.consumer.status import ReplicaCode, ReplicaStatus
from gazette.consumer.store import ConsumerCheckpoint
from gazette.consumer.transaction import TxnTiming
from gazette.keyspace import layout
from gazette.keyspace.etcd import connect
from gazette.protocol import consumer_pb2 as pb
from gazette.protocol import consumer_pb2_grpc as pb_grpc
from gazette.protocol.endpoints import GRPC_CLIENT_OPTIONS, grpc_target
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import Status
from gazette.protocol.validate import validate_journal_name, validate_shard_id

# Backoff between attempts (as the journal client's): 50 ms x2, 100 ms x2, 1 s x2, then 5 s.
RETRY_BACKOFF_S = (0.05, 0.05, 0.1, 0.1, 1.0, 1.0, 5.0)
MAX_RETRY_ATTEMPTS = 20
# While a shard changes hands, Stat and Inspect answer these; the client asks again.
PRIMARY_RETRY_STATUSES = frozenset({Status.NO_SHARD_PRIMARY, Status.NOT_SHARD_PRIMARY, Status.SHARD_STOPPED})
UNARY_TIMEOUT_S = 30.0  # List, Apply and Unassign
INSPECT_TIMEOUT_S = 30.0  # Inspect, by default (it waits for a primary meanwhile)

T = TypeVar("T")


class ShardTimeoutError(GazetteError, TimeoutError):
    """A Stat or Inspect did not complete within its timeout (e.g. the read-through was not reached)."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.OK, message)


@dataclasses.dataclass(frozen=True)
class ShardChange:
    """One change of `apply_shards`: upsert `upsert`, or delete shard id `delete`.

    `expect_mod_revision`: -1 applies whatever the current revision, 0 requires that the shard does
    not exist, > 0 that it is the shard's current mod revision (as `list_shards` reports it).
    """

    upsert: ShardSpec | None = None
    delete: str = ""
    expect_mod_revision: int = -1

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
    transactions' timings (oldest first).
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


def _backoff(attempt: int) -> float:
    return RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]


def _member(header: pb.Header) -> tuple[str, str]:
    return (header.process_id.zone, header.process_id.suffix)


def shard_info_from_pb(s: pb.ListResponse.Shard) -> ShardInfo:
    replicas = tuple(
        ReplicaInfo(
            r.id.zone,
            r.id.suffix,
            r.slot,
            ReplicaStatus(ReplicaCode(r.status.code), tuple(r.status.errors)),
            r.endpoint,
        )
        for r in s.replicas
    )
    return ShardInfo(ShardSpec.from_json(s.spec_json), s.mod_revision, replicas)


class AsyncShardClient:
    """The Shard service of a consumer application, through `endpoint` (one member's address, or a
    list to fail over between) or through the members announced under `root` in the etcd at `etcd`."""

    def __init__(
        self,
        endpoint: str | Sequence[str] | None = None,
        *,
        etcd: str | None = None,
        root: str | None = None,
    ) -> None:
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
        self._endpoints: list[str] = list(self._fixed)
        self._next = 0
        self._channels: dict[str, tuple[grpc.aio.Channel, pb_grpc.ShardStub]] = {}

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel, _ in channels:
            await channel.close()

    async def __aenter__(self) -> AsyncShardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- the shard space

    async def list_shards(self, selector: str | LabelSelector | None = None) -> list[ShardInfo]:
        """Shards whose labels (plus the meta-label `id`) match `selector`, with their replicas."""
        text = str(selector) if isinstance(selector, LabelSelector) else (selector or "")
        LabelSelector.parse(text)  # bad selectors fail here, naming the problem
        resp = await self._call("List", pb.ListRequest(selector=text), UNARY_TIMEOUT_S)
        self._check(resp.status, "list of shards")
        return [shard_info_from_pb(s) for s in resp.shards]

    async def apply_shards(self, changes: Iterable[ShardSpec | ShardChange]) -> int:
        """Creates, updates or deletes shards in one etcd transaction; returns its revision.

        A plain ShardSpec is written whatever its current revision; ShardChanges carry a
        compare-and-swap revision (ETCD_TRANSACTION_FAILED when one does not match) or a deletion.
        Source journals must exist with a content type that has a registered framing.
        """
        req = pb.ApplyRequest()
        for ch in changes:
            if isinstance(ch, ShardSpec):
                ch = ShardChange(upsert=ch)
            elif not isinstance(ch, ShardChange):
                raise ValidationError(f"{ch!r} is neither a ShardSpec nor a ShardChange")
            if ch.upsert is not None:
                req.changes.add(
                    expect_mod_revision=ch.expect_mod_revision, upsert_json=ch.upsert.to_json().decode()
                )
            else:
                req.changes.add(expect_mod_revision=ch.expect_mod_revision, delete=ch.delete)
        try:
            resp = await self._call("Apply", req, UNARY_TIMEOUT_S)
        except ValidationError as exc:
            raise ShardSpecError(str(exc)) from None
        if resp.status == Status.ETCD_TRANSACTION_FAILED:
            raise GazetteError(
                Status.ETCD_TRANSACTION_FAILED,
                "apply of shards failed: a shard's mod revision did not match its expect_mod_revision "
                "(list the shards again and retry)",
            )
        self._check(resp.status, "apply of shards")
        return int(resp.header.etcd_revision)

    async def delete_shards(self, shard_ids: Iterable[str]) -> int:
        return await self.apply_shards([ShardChange(delete=s) for s in shard_ids])

    async def unassign(
        self, shards: str | Iterable[str], *, only_failed: bool = False, dry_run: bool = False
    ) -> list[str]:
        """Removes each shard's primary assignment (with `only_failed`: every FAILED assignment
        instead), so that the allocator promotes a standby or places it anew. Returns the shards
        acted on (or that would be, `dry_run`)."""
        ids = [shards] if isinstance(shards, str) else list(shards)
        for s in ids:
            validate_shard_id(s)
        req = pb.UnassignRequest(shards=ids, only_failed=only_failed, dry_run=dry_run)
        resp = await self._call("Unassign", req, UNARY_TIMEOUT_S)
        if resp.status == Status.SHARD_NOT_FOUND:
            raise GazetteError(Status.SHARD_NOT_FOUND, f"unassign: one of the shards {ids} does not exist")
        if resp.status == Status.ETCD_TRANSACTION_FAILED:
            raise GazetteError(
                Status.ETCD_TRANSACTION_FAILED, "unassign raced with an assignment change; try again"
            )
        self._check(resp.status, "unassign")
        return list(resp.shards)

    # ---- at the primary

    async def stat_shard(
        self, shard: str, read_through: Mapping[str, int] | None = None, *, timeout: float | None = None
    ) -> ShardStat:
        """Read-your-writes: returns once the shard's primary has completed (committed and
        acknowledged) a transaction reading each source journal in `read_through` through at least
        the given offset (e.g. an append's `end`); journals that are not sources are ignored.
        Raises ShardTimeoutError after `timeout` seconds."""
        validate_shard_id(shard)
        offsets = dict(read_through or {})
        for journal, offset in offsets.items():
            validate_journal_name(journal)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValidationError(
                    f"stat of shard {shard}: read_through[{journal!r}] {offset!r} is not an offset >= 0"
                )
        req = pb.StatRequest(shard=shard, read_through=offsets)
        resp = await self._at_primary("Stat", req, timeout, f"stat of shard {shard} (read_through {offsets})")
        return ShardStat(shard, dict(resp.read_through), dict(resp.publish_at), _member(resp.header))

    async def inspect(self, shard: str, *, timeout: float | None = INSPECT_TIMEOUT_S) -> ShardInspection:
        """The primary's last committed checkpoint, sequencer state, outcome counts and recent
        transaction timings. Bounded by default: a paused or partitioned primary raises
        ShardTimeoutError instead of holding the caller (a widget's refresh) indefinitely."""
        validate_shard_id(shard)
        resp = await self._at_primary(
            "Inspect", pb.InspectRequest(shard=shard), timeout, f"inspect of shard {shard}"
        )
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
        )

    async def _at_primary(self, method: str, req: Any, timeout: float | None, what: str) -> Any:
        """Calls `method`, asking again (with backoff) while the shard has no running primary."""
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise ShardTimeoutError(f"{what} did not complete within {timeout} s")
            try:
                resp = await self._call(method, req, remaining)
            except GazetteError as exc:
                if getattr(exc, "grpc_code", None) == "DEADLINE_EXCEEDED":
                    raise ShardTimeoutError(f"{what} did not complete within {timeout} s") from None
                raise
            status = Status(resp.status)
            if status == Status.SHARD_STOPPED:
                await self._raise_if_failed(req.shard, what)
            if status in PRIMARY_RETRY_STATUSES and attempt < MAX_RETRY_ATTEMPTS:
                pause = _backoff(attempt)
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                await asyncio.sleep(pause)
                attempt += 1
                continue
            self._check(status, what)
            return resp

    async def _raise_if_failed(self, shard: str, what: str) -> None:
        """A FAILED primary stays so until unassigned: no use asking again."""
        for info in await self.list_shards(LabelSelector([("id", shard, False)])):
            primary = info.primary
            if primary is not None and primary.status.code == ReplicaCode.FAILED:
                raise GazetteError(
                    Status.SHARD_STOPPED,
                    f"{what} failed: the shard's primary FAILED ({primary.status.error}); "
                    f"`gazette shards unassign --failed {shard}` places it again",
                )

    # ---- transport

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != Status.OK:
            raise GazetteError(Status(status), f"{what} failed")

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
                spec = ConsumerSpec.from_json(kv.value)
            except ValueError:
                continue
            if spec.endpoint:
                (exiting if spec.exiting else live).append(spec.endpoint)
        found = live + exiting
        if not found:
            raise GazetteError(
                Status.OK, f'no consumer member under "{self.root}" announces a Shard service endpoint'
            )
        return found

    def _stub(self, endpoint: str) -> pb_grpc.ShardStub:
        entry = self._channels.get(endpoint)
        if entry is None:
            channel = grpc.aio.insecure_channel(grpc_target(endpoint), options=GRPC_CLIENT_OPTIONS)
            entry = self._channels[endpoint] = (channel, pb_grpc.ShardStub(channel))
        return entry[1]

    async def _call(self, method: str, req: Any, timeout: float | None) -> Any:
        """One RPC, trying the next member (found again through etcd) while members are UNAVAILABLE."""
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt = 0
        last: Exception = GazetteError(Status.OK, "no consumer member answered")
        while True:
            if not self._endpoints or attempt:
                try:
                    self._endpoints = await self._discover()
                except (GazetteError, OSError) as exc:
                    if attempt >= MAX_RETRY_ATTEMPTS:
                        raise
                    last = exc
                    self._endpoints = []
            if self._endpoints:
                endpoint = self._endpoints[self._next % len(self._endpoints)]
                remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
                try:
                    return await getattr(self._stub(endpoint), method)(req, timeout=remaining)
                except grpc.aio.AioRpcError as exc:
                    code = exc.code()
                    if code == grpc.StatusCode.INVALID_ARGUMENT:
                        raise ValidationError(exc.details() or "invalid argument") from None
                    if code != grpc.StatusCode.UNAVAILABLE or attempt >= MAX_RETRY_ATTEMPTS:
                        raise GazetteError(
                            Status.OK,
                            f"{method} at {endpoint}: {code.name}: {exc.details()}",
                            grpc_code=code.name,
                        ) from None
                    last = GazetteError(Status.OK, f"{method} at {endpoint}: UNAVAILABLE: {exc.details()}")
                    self._next += 1
            if deadline is not None and time.monotonic() >= deadline:
                raise GazetteError(Status.OK, f"{method}: {last}", grpc_code="DEADLINE_EXCEEDED")
            await asyncio.sleep(_backoff(attempt))
            attempt += 1


class ShardClient:
    """The sync facade of AsyncShardClient (same arguments and methods, not awaitable)."""

    def __init__(
        self,
        endpoint: str | Sequence[str] | None = None,
        *,
        etcd: str | None = None,
        root: str | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        self._loop = loop or default_loop()

        async def make() -> AsyncShardClient:
            return AsyncShardClient(endpoint, etcd=etcd, root=root)

        self.aio: AsyncShardClient = self._loop.run(make())

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._loop.run(fn(*args, **kwargs))

    def close(self) -> None:
        self._run(self.aio.close)

    def __enter__(self) -> ShardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_shards(self, selector: str | LabelSelector | None = None) -> list[ShardInfo]:
        result: list[ShardInfo] = self._run(self.aio.list_shards, selector)
        return result

    def apply_shards(self, changes: Iterable[ShardSpec | ShardChange]) -> int:
        return int(self._run(self.aio.apply_shards, list(changes)))

    def delete_shards(self, shard_ids: Iterable[str]) -> int:
        return int(self._run(self.aio.delete_shards, list(shard_ids)))

    def unassign(
        self, shards: str | Iterable[str], *, only_failed: bool = False, dry_run: bool = False
    ) -> list[str]:
        ids = [shards] if isinstance(shards, str) else list(shards)
        result: list[str] = self._run(self.aio.unassign, ids, only_failed=only_failed, dry_run=dry_run)
        return result

    def stat_shard(
        self, shard: str, read_through: Mapping[str, int] | None = None, *, timeout: float | None = None
    ) -> ShardStat:
        result: ShardStat = self._run(self.aio.stat_shard, shard, read_through, timeout=timeout)
        return result

    def inspect(self, shard: str, *, timeout: float | None = INSPECT_TIMEOUT_S) -> ShardInspection:
        result: ShardInspection = self._run(self.aio.inspect, shard, timeout=timeout)
        return result
