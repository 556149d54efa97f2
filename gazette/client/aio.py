"""The async client: the real implementation of the journal API (the sync facade only forwards).

What a call retries, where, how long it waits between attempts and when it gives up is the client
call policy's (`policy.py`, docs/semantics.md#client-retries-and-backoff); reads follow Gazette's RetryReader: they resume from the last offset after stream breaks, tolerate offset
jumps, and end at the write head unless blocking. Every failure is a `GazetteError` carrying the status.
Given several broker endpoints, a call that finds its broker UNAVAILABLE moves on to the next one (the
policy's `Rotation`),
so a client survives the loss of the broker it was talking to (any broker proxies any journal).
Every call is bounded by a timeout (the client's default unless given; `timeouts.py`): retries stop
there with a CallTimeout naming the journal, the broker and the last status, never hanging the caller.
Given auth keys, each call carries a token signed for what it needs, as Gazette's AuthJournalClient
signs (List: LIST over its selector; Apply: APPLY; Read and ListFragments: READ, Append: APPEND, on
the one journal); https:// endpoints are dialed over TLS (`tls`: CA to trust, certificate to present).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import NamedTuple

import grpc
from google.protobuf.duration_pb2 import Duration

from gazette.auth.tls import TLSConfig, aio_channel
from gazette.auth.tokens import UNARY_TOKEN_TTL_S, Capability, KeyedAuth, name_selector
from gazette.client.policy import (
    APPEND,
    IMPATIENT,
    READ,
    UNARY,
    Attempts,
    CallPolicy,
    Deadline,
    Rotation,
    rpc_failure,
)
from gazette.client.timeouts import (
    DEFAULT_TIMEOUT_S,
    USE_CLIENT_DEFAULT,
    CallTrace,
    Timeout,
    check_timeout,
    resolve_timeout,
)
from gazette.fragment.fragment import Fragment
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol import gazette_py_pb2_grpc as gpy_grpc
from gazette.protocol.endpoints import client_options
from gazette.protocol.errors import GazetteError, PeerError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec, SpecChange, SuspendLevel
from gazette.protocol.status import Status
from gazette.protocol.validate import validate_journal_name

APPEND_CHUNK_BYTES = 1 << 20
APPEND_METHOD = "/protocol.Journal/Append"
_APPEND_CONTENT_TAG = b"\x22"  # AppendRequest field 4 (content), length-delimited


def _encoded(data: bytes) -> bytes:
    return data


def _append_content_message(content: memoryview) -> bytes:
    """The wire bytes of AppendRequest(content=content), as protobuf writes them."""
    n = len(content)
    length = bytearray()
    while n >= 0x80:
        length.append(n & 0x7F | 0x80)
        n >>= 7
    length.append(n)
    return b"".join((_APPEND_CONTENT_TAG, length, content))


FLUSH_METHOD = "/gazette_py.Flusher/Flush"
# Looking up a journal's replication to explain INSUFFICIENT_JOURNAL_BROKERS takes at most this long.
EXPLAIN_LOOKUP_TIMEOUT_S = 2.0


@dataclasses.dataclass(frozen=True)
class Route:
    members: tuple[tuple[str, str], ...]
    primary: int
    endpoints: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, r: pb.Route) -> Route:
        return cls(tuple((m.zone, m.suffix) for m in r.members), r.primary, tuple(r.endpoints))

    @property
    def primary_id(self) -> tuple[str, str] | None:
        return self.members[self.primary] if 0 <= self.primary < len(self.members) else None


class JournalInfo(NamedTuple):
    spec: JournalSpec
    route: Route
    mod_revision: int


@dataclasses.dataclass(frozen=True)
class AppendResult:
    journal: str
    begin: int
    end: int
    sha1: str
    registers: LabelSet


@dataclasses.dataclass(frozen=True)
class ReadChunk:
    offset: int
    content: bytes
    write_head: int
    fragment: Fragment | None


def _names(names: Iterable[str], shown: int = 3) -> str:
    """Journal names for a message: the first `shown`, then how many more."""
    names = list(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return (", ".join(names[:shown]) + more) or "journals"


def _check(status: int, what: str, **context) -> None:
    if status != Status.OK:
        raise GazetteError(Status(status), what, **context)


def broker_endpoints(broker: str | Sequence[str]) -> tuple[str, ...]:
    """`"http://a:1,http://b:2"` or a sequence -> the endpoints, in order; at least one."""
    parts = broker.split(",") if isinstance(broker, str) else list(broker)
    out = tuple(p.strip() for p in parts if p.strip())
    if not out:
        raise ValueError(f"no broker endpoint in {broker!r}: give one or more, comma-separated")
    return out


class AsyncClient:
    """Talks to a broker address (brokers proxy to the journal's primary or members as needed).

    `broker` may list several endpoints (comma-separated or a sequence): calls use one at a time
    and move to the next when it is UNAVAILABLE. `timeout` (seconds, None: no bound) is the default
    of every call's `timeout=`, except blocking reads, which wait as long as they are asked to
    unless given one: a call that runs out raises `CallTimeout` instead of retrying for ever.
    `auth_keys` (base64 keys as Gazette's --auth-keys, or a KeyedAuth) signs every call; `tls` is the
    CA to trust and the certificate to present at https:// endpoints (default: the system's roots).
    A broker that refuses a call's authorization raises GazetteError with grpc_code "UNAUTHENTICATED".
    `keepalive` (seconds, at least 1; None: off) pings the brokers that often, so a call on a
    connection a network partition silently cut fails over within twice that instead of waiting for
    its timeout. Only for gazette-py brokers: Gazette's Go brokers refuse frequent pings (GOAWAY).
    """

    def __init__(
        self,
        broker: str | Sequence[str] = "http://127.0.0.1:8080",
        etcd: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        auth_keys: KeyedAuth | str | None = None,
        tls: TLSConfig | None = None,
        keepalive: float | None = None,
    ) -> None:
        """Validates `timeout` (seconds, None: no bound; ValueError otherwise) and opens one lazy
        gRPC channel per broker endpoint: nothing is contacted until the first call. `etcd` is kept
        for the tools that need the cluster's etcd. Create it on the loop that will use it: grpc.aio
        channels are bound to the loop that made them."""
        self.timeout = check_timeout(timeout)
        self.endpoints = broker_endpoints(broker)
        self.broker = ",".join(self.endpoints)
        self.etcd = etcd
        self.auth = KeyedAuth.coerce(auth_keys)
        self.tls = tls
        options = client_options(keepalive)
        self._channels = [aio_channel(e, tls, options) for e in self.endpoints]
        self.rotation = Rotation(self.endpoints)  # the endpoint calls use now; the policy moves it on
        self._stubs = [pb_grpc.JournalStub(c) for c in self._channels]
        # Append per stub, taking requests already encoded (`_append_content_message`): no protobuf
        # message, and one copy of the content, per chunk.
        self._encoded_appends = [
            c.stream_unary(
                APPEND_METHOD, request_serializer=_encoded, response_deserializer=pb.AppendResponse.FromString
            )
            for c in self._channels
        ]
        # gazette-py's own RPCs (not in Gazette's protocol.Journal), on the same channels.
        self._flushers = [gpy_grpc.FlusherStub(c) for c in self._channels]

    def call_metadata(self, capability: Capability, journal: str | None = None, selector: LabelSelector | None = None,
            ttl_s: float | None = None) -> tuple[tuple[str, str], ...] | None:  # fmt: skip
        """Call metadata authorizing `capability` on `journal` (or over `selector`; neither: every
        journal); None without auth keys."""
        if self.auth is None:
            return None
        sel = name_selector(journal) if journal is not None else selector
        return (
            self.auth.metadata(capability, sel)
            if ttl_s is None
            else self.auth.metadata(capability, sel, ttl_s)
        )

    @property
    def endpoint(self) -> str:
        """The endpoint in use."""
        return self.rotation.endpoint

    @property
    def stub(self) -> pb_grpc.JournalStub:
        """The stub of the endpoint in use."""
        return self._stubs[self.rotation.index]

    async def close(self) -> None:
        """Closes every channel; calls in flight fail and later calls are refused. `async with`
        closes it on exit."""
        for channel in self._channels:
            await channel.close()

    async def __aenter__(self) -> AsyncClient:
        """The client itself; leaving the `async with` block closes it."""
        return self

    async def __aexit__(self, *exc) -> None:
        """Closes the client (see `close`); exceptions propagate."""
        await self.close()

    # --- journal space ---------------------------------------------------------------------------
    async def apply_journals(
        self, changes: Iterable[JournalSpec | SpecChange], *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> int:
        """Creates, updates or deletes journals atomically; returns the etcd revision applied at.

        A plain JournalSpec is created or overwritten (expect_mod_revision -1); pass SpecChange
        values (as `journals apply` YAML yields) for compare-and-swap or deletion. CallTimeout after
        `timeout` seconds (the client's default unless given).
        """
        req = pb.ApplyRequest()
        for ch in changes:
            if isinstance(ch, JournalSpec):
                ch = SpecChange(spec=ch, expect_mod_revision=-1, delete=False)
            if ch.delete:
                req.changes.add(expect_mod_revision=ch.expect_mod_revision or -1, delete=ch.spec.name)
            else:
                ch.spec.validate()
                req.changes.add(expect_mod_revision=ch.expect_mod_revision, upsert=ch.spec.to_proto())
        subject = _names(c.upsert.name if c.HasField("upsert") else c.delete for c in req.changes)
        async with self._bounded(timeout, CallTrace("apply of", subject)) as deadline:
            resp = await self._unary(
                "Apply", req, deadline, self.call_metadata(Capability.APPLY, ttl_s=UNARY_TOKEN_TTL_S)
            )
        _check(resp.status, "apply failed: a journal's mod revision did not match (re-list and retry)")
        return resp.header.etcd.revision

    async def delete_journals(self, names: Iterable[str], *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """Deletes the named journals atomically; returns the etcd revision (CallTimeout after `timeout`)."""
        names = list(names)
        req = pb.ApplyRequest(
            changes=[pb.ApplyRequest.Change(expect_mod_revision=-1, delete=n) for n in names]
        )
        async with self._bounded(timeout, CallTrace("delete of", _names(names))) as deadline:
            resp = await self._unary(
                "Apply", req, deadline, self.call_metadata(Capability.APPLY, ttl_s=UNARY_TOKEN_TTL_S)
            )
        _check(resp.status, "delete failed")
        return resp.header.etcd.revision

    async def list_journals(
        self,
        selector: str | LabelSelector | None = None,
        *,
        patient: bool = False,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[JournalInfo]:
        """Journals matching `selector`. Tries each broker once unless `patient` (then it retries
        UNAVAILABLE with backoff, as appends do: for callers that must ride through broker restarts),
        and in any case gives up with CallTimeout after `timeout` seconds (the client's default)."""
        sel = selector if isinstance(selector, LabelSelector) else LabelSelector.parse(selector or "")
        trace = CallTrace("listing of journals", f"matching {str(sel)!r}" if str(sel) else "")
        md = self.call_metadata(Capability.LIST, selector=sel)

        async def listing(stub: pb_grpc.JournalStub) -> list[JournalInfo]:
            out: list[JournalInfo] = []
            async for resp in stub.List(pb.ListRequest(selector=sel.to_proto()), metadata=md):
                if resp.header.HasField("etcd"):
                    trace.saw(resp.status)
                    _check(resp.status, "list failed")
                for j in resp.journals:
                    out.append(
                        JournalInfo(JournalSpec.from_proto(j.spec), Route.from_proto(j.route), j.mod_revision)
                    )
            return out

        async with self._bounded(timeout, trace) as deadline:
            return await self._call(listing, deadline, UNARY if patient else IMPATIENT)

    # --- append ----------------------------------------------------------------------------------
    async def append(
        self,
        journal: str,
        data: bytes | Sequence[bytes],
        *,
        check_registers: str | LabelSelector | None = None,
        union_registers: LabelSet | dict[str, str] | None = None,
        subtract_registers: LabelSet | dict[str, str] | None = None,
        offset: int | None = None,
        suspend: int = 0,
        timeout: Timeout = USE_CLIENT_DEFAULT,
        _trace: CallTrace | None = None,
    ) -> AppendResult:
        """Appends `data` atomically: all of it lands contiguously, or none of it.

        `suspend` is an AppendRequest.Suspend value (default SUSPEND_RESUME); `reset_head` uses KEEP.
        While the journal's route is in flux (no primary, too few brokers) or a broker is UNAVAILABLE
        the append is retried, for at most `timeout` seconds (the client's default unless given): then
        CallTimeout names the broker and the last status, e.g. for INSUFFICIENT_JOURNAL_BROKERS how
        many brokers the journal needs and how many are in its route. (`_trace`: the AppendService's record
        of what its attempts saw.)
        """
        validate_journal_name(journal, allow_meta=True)
        parts = [data] if isinstance(data, bytes | bytearray | memoryview) else list(data)
        first = pb.AppendRequest(journal=journal, offset=offset or 0)
        first.suspend = suspend  # type: ignore[assignment]
        if check_registers is not None:
            sel = (
                check_registers
                if isinstance(check_registers, LabelSelector)
                else LabelSelector.parse(check_registers)
            )
            first.check_registers.CopyFrom(sel.to_proto())
        if union_registers:
            first.union_registers.CopyFrom(LabelSet(union_registers).to_proto())
        if subtract_registers:
            first.subtract_registers.CopyFrom(LabelSet(subtract_registers).to_proto())

        def requests():
            yield first.SerializeToString()
            for part in parts:
                view = memoryview(part)
                for i in range(0, len(view), APPEND_CHUNK_BYTES):
                    yield _append_content_message(view[i : i + APPEND_CHUNK_BYTES])
            yield b""  # the empty message commits; half-close follows

        trace = _trace if _trace is not None else CallTrace("append to", journal)
        md = self.call_metadata(Capability.APPEND, journal)
        async with self._bounded(timeout, trace) as deadline:
            resp = await self._call(
                lambda stub: self._encoded_appends[self._stubs.index(stub)](requests(), metadata=md),
                deadline,
                APPEND,
                journal=journal,
            )
        status = Status(resp.status)
        registers = LabelSet.from_proto(resp.registers)
        if status != Status.OK:
            raise GazetteError(
                status,
                _append_message(status, journal, resp, trace),
                registers=registers,
                store_health_error=resp.store_health_error,
            )
        c = resp.commit
        return AppendResult(journal, c.begin, c.end, Fragment.from_proto(c).sha1, registers)

    async def reset_head(self, journal: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """Reset head (docs/semantics.md#reset-head): re-syncs the journal's pipeline at its indexed head
        (after consistency was lost and appends fail INDEX_HAS_GREATER_OFFSET). Returns the head; a concurrent
        write that moved the head first (WRONG_APPEND_OFFSET) is benign and returns the new head. Its steps
        share one `timeout` (the client's default unless given); the step that runs out raises
        CallTimeout."""
        # One deadline for every step; the step that runs out raises its own CallTimeout.
        left = Deadline(resolve_timeout(timeout, self.timeout), CallTrace("reset head of", journal)).left
        head = await self.read_head(journal, timeout=left())
        # SUSPEND_KEEP (do not resume a partially suspended journal) is newer than some Gazette
        # brokers, which refuse it as an invalid variant (v0.103.0 does). On a journal that is not
        # suspended the default, SUSPEND_RESUME, does the same and every broker knows it.
        listing = await self.list_journals(
            LabelSelector(include=[("name", journal.partition(";")[0])]), timeout=left()
        )
        suspended = any(i.spec.suspend_level != SuspendLevel.NONE for i in listing)
        suspend = pb.AppendRequest.SUSPEND_KEEP if suspended else pb.AppendRequest.SUSPEND_RESUME
        try:
            await self.append(journal, b"", offset=head, suspend=suspend, timeout=left())
        except GazetteError as exc:
            if exc.status != Status.WRONG_APPEND_OFFSET:
                raise
            return await self.read_head(journal, timeout=left())
        return head

    # --- read ------------------------------------------------------------------------------------
    async def read(
        self,
        journal: str,
        offset: int = 0,
        *,
        block: bool = False,
        end_offset: int | None = None,
        begin_mod_time: int = 0,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> AsyncIterator[ReadChunk]:
        """Yields committed content from `offset`; non-blocking reads stop at the write head.

        `timeout` bounds each wait for the next chunk (time spent by the caller between chunks does
        not count, and a read that keeps delivering is never cut short): a non-blocking read uses
        the client's default unless given one; a blocking read waits as long as asked unless given
        one, then ends with CallTimeout (naming the offset it waited at, the broker, the last status).
        """
        validate_journal_name(journal, allow_meta=True)
        seconds = resolve_timeout(timeout, None if block else self.timeout)
        trace = CallTrace("read of", journal)
        write_head = 0
        fragment: Fragment | None = None

        def waited_for_content() -> None:
            if trace.status == Status.OK or not (trace.status or trace.detail):
                seen = "OK, but" if trace.status == Status.OK else "none:"
                trace.status, trace.detail = None, f"{seen} no content came at offset {offset}"

        deadline = Deadline(seconds, trace, on_expiry=waited_for_content)
        attempts = Attempts(READ, deadline, self.rotation)
        while True:
            if end_offset is not None and offset >= end_offset:
                return
            req = pb.ReadRequest(
                journal=journal,
                offset=offset,
                block=block,
                end_offset=end_offset or 0,
                begin_mod_time=begin_mod_time,
            )
            index = self.rotation.index
            trace.endpoint = self.endpoint
            call = self._stubs[index].Read(req, metadata=self.call_metadata(Capability.READ, journal))
            responses = aiter(call)
            try:
                while True:
                    try:
                        resp = await deadline.within(anext(responses))
                    except StopAsyncIteration:
                        break
                    if resp.content:
                        if resp.offset != offset:
                            raise PeerError(
                                f"read of {journal} got content at {resp.offset}, expected {offset}",
                            )
                        yield ReadChunk(offset, resp.content, write_head, fragment)
                        offset += len(resp.content)
                        attempts.progress()  # the next chunk has a fresh bound
                        continue
                    status = Status(resp.status)
                    trace.saw(status)
                    write_head = resp.write_head or write_head
                    if status == Status.OFFSET_NOT_YET_AVAILABLE and not block:
                        return
                    if status == Status.OK:
                        offset = resp.offset  # may jump forward past a deleted range
                        fragment = Fragment.from_proto(resp.fragment) if resp.HasField("fragment") else None
                        continue
                    if status == Status.INSUFFICIENT_JOURNAL_BROKERS:
                        await self._explain_insufficient(trace, resp.header, journal)
                    if attempts.retries_status(status):
                        break  # transient: retry below
                    message = f"read of {journal} at offset {offset} failed"
                    if status == Status.INSUFFICIENT_JOURNAL_BROKERS:
                        message += f": {trace.insufficient_brokers()}"
                    raise GazetteError(status, message)
            except grpc.aio.AioRpcError as exc:
                if not attempts.retries_rpc(exc, index):
                    raise rpc_failure(exc, trace) from exc
            finally:
                call.cancel()
            await attempts.pause()

    async def read_all(
        self,
        journal: str,
        offset: int = 0,
        end_offset: int | None = None,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> bytes:
        """The committed content from `offset` to the write head (or `end_offset`); `timeout` bounds
        each wait for the next chunk, as in `read`."""
        out = bytearray()
        async for chunk in self.read(journal, offset, end_offset=end_offset, timeout=timeout):
            out += chunk.content
        return bytes(out)

    async def read_head(self, journal: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """The journal's current write head (a metadata-only read at offset -1); CallTimeout after
        `timeout` seconds (the client's default unless given)."""
        validate_journal_name(journal, allow_meta=True)
        trace = CallTrace("write head of", journal)

        async def head(stub: pb_grpc.JournalStub) -> int:
            req = pb.ReadRequest(journal=journal, offset=-1, metadata_only=True)
            async for resp in stub.Read(req, metadata=self.call_metadata(Capability.READ, journal)):
                trace.saw(resp.status)
                if resp.status not in (Status.OK, Status.OFFSET_NOT_YET_AVAILABLE):
                    raise GazetteError(Status(resp.status), f"reading the write head of {journal} failed")
                return resp.write_head
            return 0

        async with self._bounded(timeout, trace) as deadline:
            return await self._call(head, deadline, IMPATIENT)

    # --- fragments -------------------------------------------------------------------------------
    async def list_fragments(
        self,
        journal: str,
        *,
        begin_mod_time: int = 0,
        end_mod_time: int = 0,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[Fragment]:
        """The journal's fragments (its index's CoverSet): persisted ones and those still spooled.
        CallTimeout after `timeout` seconds (the client's default unless given)."""
        listed = await self.fragments_with_urls(journal, begin_mod_time, end_mod_time, timeout=timeout)
        return [f for f, _ in listed]

    async def fragments_with_urls(
        self,
        journal: str,
        begin_mod_time: int = 0,
        end_mod_time: int = 0,
        signature_ttl_s: float = 0.0,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[tuple[Fragment, str]]:
        """As `list_fragments`, each with a signed GET URL valid `signature_ttl_s` ("" if unpersisted).
        Every page shares the one `timeout`."""
        validate_journal_name(journal)
        out: list[tuple[Fragment, str]] = []
        token = 0
        async with self._bounded(timeout, CallTrace("listing of fragments of", journal)) as deadline:
            while True:
                req = pb.FragmentsRequest(
                    journal=journal,
                    begin_mod_time=begin_mod_time,
                    end_mod_time=end_mod_time,
                    next_page_token=token,
                )
                if signature_ttl_s:
                    req.signatureTTL.CopyFrom(Duration(seconds=int(signature_ttl_s)))
                resp = await self._unary(
                    "ListFragments", req, deadline, self.call_metadata(Capability.READ, journal)
                )
                _check(resp.status, f"listing fragments of {journal} failed")
                out.extend((Fragment.from_proto(f.spec), f.signed_url) for f in resp.fragments)
                token = resp.next_page_token
                if not token:
                    return out

    async def flush(self, journal: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> Fragment | None:
        """Rolls the journal's spool and returns once it is persisted (None: nothing to persist).
        CallTimeout after `timeout` seconds (the client's default unless given)."""
        validate_journal_name(journal)
        req = gpy.FlushRequest(journal=journal)
        md = self.call_metadata(Capability.APPEND, journal, ttl_s=UNARY_TOKEN_TTL_S)
        try:
            async with self._bounded(timeout, CallTrace("flush of", journal)) as deadline:
                # The RPC carries the call's deadline, so a broker whose store keeps failing answers
                # with the store's error before the bound runs out.
                resp = await self._call(
                    lambda stub: self._flushers[self._stubs.index(stub)].Flush(
                        req, metadata=md, timeout=deadline.left()
                    ),
                    deadline,
                )
        except GazetteError as exc:
            code = getattr(exc, "grpc_code", None)
            if code == grpc.StatusCode.UNIMPLEMENTED.name:
                raise PeerError(
                    f"flush of {journal}: {FLUSH_METHOD} is not implemented where it went ({exc.message}); "
                    "Flush needs a gazette-py broker as the journal's primary (a Gazette broker persists "
                    "its spools on its own, at the journal's fragment.length or flush_interval)",
                    grpc_code=code,
                ) from exc
            raise
        _check(resp.status, f"flush of {journal} failed: {resp.store_error}".rstrip(": "))
        return Fragment.from_proto(resp.fragment) if resp.HasField("fragment") else None

    # --- calls -----------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _bounded(self, timeout: Timeout, trace: CallTrace) -> AsyncIterator[Deadline]:
        """Runs the block within `timeout` (the client's default for USE_CLIENT_DEFAULT), its
        deadline; running out raises the CallTimeout of `trace`, which the block keeps up to date."""
        deadline = Deadline(resolve_timeout(timeout, self.timeout), trace)
        trace.endpoint = trace.endpoint or self.endpoint
        async with deadline.bound():
            yield deadline

    async def _explain_insufficient(self, trace: CallTrace, header: pb.Header, journal: str) -> None:
        """Notes in `trace` what INSUFFICIENT_JOURNAL_BROKERS lacks: the brokers of the journal's route
        (from the response's header) and, looked up once, the replication its spec asks for."""
        if header.HasField("route"):
            trace.route_members = tuple(f"{m.zone}#{m.suffix}" for m in header.route.members)
        if trace.replication is not None:
            return
        trace.replication = 0  # looked up once per call, found or not
        try:
            async with asyncio.timeout(EXPLAIN_LOOKUP_TIMEOUT_S):
                listing = await self.list_journals(
                    LabelSelector(include=[("name", journal.partition(";")[0])]), timeout=None
                )
        except (GazetteError, TimeoutError):
            return  # the message says less, the call goes on
        if listing:
            trace.replication = listing[0].spec.replication
            if trace.route_members is None:
                trace.route_members = tuple(f"{z}#{s}" for z, s in listing[0].route.members)

    async def _unary(self, method_name: str, req, deadline: Deadline, metadata=None):
        return await self._call(lambda stub: getattr(stub, method_name)(req, metadata=metadata), deadline)

    async def _call(self, make_call, deadline: Deadline, policy: CallPolicy = UNARY, journal: str = ""):
        """Runs an RPC (made anew per attempt on the endpoint in use) under `policy`, within
        `deadline` (the caller's `_bounded` block), noting each attempt in the deadline's trace;
        returns the last answer, whose status the caller checks. INSUFFICIENT_JOURNAL_BROKERS of
        `journal` is explained in the trace."""
        trace = deadline.trace
        attempts = Attempts(policy, deadline, self.rotation)
        while True:
            index = self.rotation.index
            trace.endpoint = self.endpoint
            try:
                resp = await make_call(self._stubs[index])
            except grpc.aio.AioRpcError as exc:
                if not attempts.retries_rpc(exc, index):
                    raise rpc_failure(exc, trace) from exc
            else:
                status = getattr(resp, "status", Status.OK)
                if status != Status.OK:
                    trace.saw(status)
                    if status == Status.INSUFFICIENT_JOURNAL_BROKERS and journal:
                        await self._explain_insufficient(trace, resp.header, journal)
                if not attempts.retries_status(Status(status)):
                    return resp
            await attempts.pause()


def _append_message(status: Status, journal: str, resp: pb.AppendResponse, trace: CallTrace) -> str:
    if status == Status.REGISTER_MISMATCH:
        return f"append to {journal}: registers {LabelSet.from_proto(resp.registers)!r} do not match check_registers"
    if status == Status.WRONG_APPEND_OFFSET:
        return f"append to {journal}: the explicit offset is not the journal's write head"
    if status == Status.FRAGMENT_STORE_UNHEALTHY:
        return f"append to {journal}: its fragment store is unhealthy: {resp.store_health_error}"
    if status == Status.INDEX_HAS_GREATER_OFFSET:
        return (
            f"append to {journal}: persisted fragments extend past the broker's write position (every "
            "replica's spool was lost, e.g. a restart with one replica); once no broker that might hold "
            "unpersisted writes is left, re-sync with an empty append at the write head: "
            f"client.reset_head({journal!r}) or `gazette journals reset-head -l name={journal}`"
        )
    if status == Status.NOT_ALLOWED:
        return f"append to {journal}: the journal is not writable (O_RDONLY)"
    if status == Status.INSUFFICIENT_JOURNAL_BROKERS:
        return f"append to {journal} at broker {trace.endpoint}: {trace.insufficient_brokers()}"
    return f"append to {journal} failed"
