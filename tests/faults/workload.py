"""The fault suite's workload and oracle: writers whose records carry attempt ids, a concurrent
reader, and the check that nothing acknowledged was lost, moved, torn or reordered.

Each Append RPC is one *attempt* (the writers retry by hand, so every copy of a record in the
journal names the RPC that put it there). A record is a line `w:seq:attempt:part/nparts:payload`
whose payload is derived from its id, so a torn, shifted or foreign byte fails the check; each part
travels in its own content message, so an append that lands half-way is visible as a torn copy.
An attempt ends ACKED (the broker's response gave its [begin, end)), FAILED (a response status:
nothing was streamed) or AMBIGUOUS (the RPC broke: it may have landed, appends are at-least-once).
Writers and the reader run on their own loop thread; the test's thread injects faults.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import hashlib
import random
import re
import threading
import time
from collections.abc import Callable, Sequence

import grpc

from gazette.client.aio import AsyncClient
from gazette.client.loop import LoopThread
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.endpoints import GRPC_MESSAGE_OPTIONS, PEER_KEEPALIVE_S, grpc_target
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

ATTEMPT_TIMEOUT_S = 10.0  # a hung attempt (e.g. to a paused broker) ends, ambiguous, and is retried
RETRY_BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.25)
READ_RETRY_S = 0.1
ACKED, FAILED, AMBIGUOUS = "acked", "failed", "ambiguous"
RECORD = re.compile(rb"^([a-z0-9]+):(\d+):(\d+):(\d+)/(\d+):([0-9a-f]+)$")


def payload(writer: str, seq: int, attempt: int, part: int, length: int) -> bytes:
    seed = hashlib.sha256(f"{writer}:{seq}:{attempt}:{part}".encode()).hexdigest().encode()
    return (seed * (length // len(seed) + 1))[:length]


def record(writer: str, seq: int, attempt: int, part: int, nparts: int, length: int) -> bytes:
    return b"%s:%d:%d:%d/%d:%s\n" % (
        writer.encode(),
        seq,
        attempt,
        part,
        nparts,
        payload(writer, seq, attempt, part, length),
    )


@dataclasses.dataclass
class Attempt:
    writer: str
    seq: int
    attempt: int
    parts: list[bytes]
    endpoint: str
    started: float  # time.monotonic()
    ended: float = 0.0
    outcome: str = ""  # ACKED, FAILED or AMBIGUOUS once ended
    begin: int = -1
    end: int = -1
    detail: str = ""

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.writer, self.seq, self.attempt)

    @property
    def content(self) -> bytes:
        return b"".join(self.parts)


class Channels:
    """One grpc.aio channel per broker endpoint (restarted brokers keep their address)."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, endpoint: str) -> pb_grpc.JournalStub:
        ch = self._channels.get(endpoint)
        if ch is None:
            ch = self._channels[endpoint] = grpc.aio.insecure_channel(
                grpc_target(endpoint), options=GRPC_MESSAGE_OPTIONS
            )
        return pb_grpc.JournalStub(ch)

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


async def append_once(
    stub: pb_grpc.JournalStub, journal: str, parts: Sequence[bytes], *, do_not_proxy: bool = False
) -> pb.AppendResponse:
    """One Append RPC: the first message, one content message per part, the empty commit message."""

    async def requests():
        yield pb.AppendRequest(journal=journal, do_not_proxy=do_not_proxy)
        for part in parts:
            yield pb.AppendRequest(content=part)
        yield pb.AppendRequest()

    return await stub.Append(requests(), timeout=ATTEMPT_TIMEOUT_S)


class HeldAppend:
    """A streaming append that pauses before its content message `hold_at` (len(parts): before the
    commit message) until released: a fault can then land in the middle of it."""

    def __init__(self, attempt: Attempt, hold_at: int) -> None:
        self.attempt = attempt
        self.hold_at = hold_at
        self.holding = threading.Event()  # set once every message before `hold_at` was handed to gRPC
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def release(self) -> None:
        assert self._loop is not None and self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)


class Workload:
    """`writers` sequential writers (each retrying until acknowledged) and one blocking reader."""

    def __init__(
        self,
        journal: str,
        endpoints: Callable[[], list[str]],
        *,
        writers: int = 2,
        seed: int = 0,
        max_parts: int = 3,
        record_bytes: tuple[int, int] = (16, 400),
        reader: bool = True,
        client: bool = False,
    ) -> None:
        self.journal = journal
        self.endpoints = endpoints
        self.writer_ids = [f"w{i}" for i in range(writers)]
        self.rng = random.Random(seed)
        self.max_parts = max_parts
        self.record_bytes = record_bytes
        self.attempts: list[Attempt] = []
        self.inflight: dict[tuple[str, int, int], Attempt] = {}
        self.read_bytes = bytearray()
        self.reader_errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = asyncio.Event()
        self._loop = LoopThread("fault-workload")
        self._channels: Channels | None = None
        self._tasks: list[asyncio.Future] = []
        self._with_reader = reader
        # client=True: each attempt is one AsyncClient.append (with the client's own retries) through
        # the first endpoint, and a writer gives up at the first one that raises.
        self.client_mode = client
        self._clients: dict[str, AsyncClient] = {}

    # --- lifecycle (called from the test's thread) ------------------------------------------------
    def start(self) -> Workload:
        async def start() -> None:
            self._stop = asyncio.Event()
            self._channels = Channels()
            self._tasks = [asyncio.ensure_future(self._writer(w)) for w in self.writer_ids]
            if self._with_reader:
                self._tasks.append(asyncio.ensure_future(self._reader()))

        self._loop.run(start())
        return self

    def stop_writers(self, timeout: float = 60.0) -> None:
        """Lets every writer finish its current append (retrying until acknowledged), then stops."""

        async def stop() -> None:
            self._stop.set()
            writers = self._tasks[: len(self.writer_ids)]
            done, pending = await asyncio.wait(writers, timeout=timeout)
            for t in pending:
                t.cancel()
            await asyncio.gather(*writers, return_exceptions=True)
            for t in done:
                if t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if pending:
                raise AssertionError(f"writers still retrying {timeout:.0f} s after being asked to stop")

        self._loop.run(stop())

    def close(self) -> None:
        async def close() -> None:
            self._stop.set()
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._channels is not None:
                await self._channels.close()
            for c in self._clients.values():
                await c.close()

        try:
            self._loop.run(close(), timeout=30)
        finally:
            self._loop.stop()

    def run(self, coro, timeout: float | None = None):
        """Runs a coroutine on the workload's loop (where its channels live)."""
        return self._loop.run(coro, timeout)

    def stub(self, endpoint: str) -> pb_grpc.JournalStub:
        assert self._channels is not None
        return self._channels.stub(endpoint)

    def held_append(
        self, endpoint: str, writer: str, seq: int, parts: list[bytes], hold_at: int, timeout_s: float = 120.0
    ):
        """Starts a HeldAppend straight to `endpoint` (do_not_proxy); returns (handle, future of its
        end). The attempt joins `attempts`, so `verify` checks its copies like any other."""
        a = Attempt(writer, seq, 0, parts, endpoint, time.monotonic())
        held = HeldAppend(a, hold_at)
        with self._lock:
            self.attempts.append(a)
            self.inflight[a.key] = a

        async def run() -> None:
            held._loop = asyncio.get_running_loop()
            held._release = asyncio.Event()
            release = held._release

            async def requests():
                yield pb.AppendRequest(journal=self.journal, do_not_proxy=True)
                for i, part in enumerate([*parts, b""]):
                    if i == hold_at:
                        held.holding.set()
                        await release.wait()
                    yield pb.AppendRequest(content=part)

            outcome, detail, begin, end = AMBIGUOUS, "", -1, -1
            try:
                assert self._channels is not None
                resp = await self._channels.stub(endpoint).Append(requests(), timeout=timeout_s)
            except grpc.aio.AioRpcError as exc:
                detail = f"{exc.code().name}: {exc.details()}"
            else:
                if resp.status == pb.OK:
                    outcome, begin, end = ACKED, resp.commit.begin, resp.commit.end
                else:
                    outcome, detail = FAILED, Status(resp.status).name
            finally:
                with self._lock:
                    a.ended, a.outcome, a.detail, a.begin, a.end = (
                        time.monotonic(),
                        outcome,
                        detail,
                        begin,
                        end,
                    )
                    self.inflight.pop(a.key, None)

        return held, asyncio.run_coroutine_threadsafe(run(), self._loop.loop)

    # --- observations (thread-safe snapshots) ----------------------------------------------------
    def inflight_keys(self) -> set[tuple[str, int, int]]:
        with self._lock:
            return set(self.inflight)

    def busy_moment(
        self, deadline_s: float = 30.0, poll_s: float = 0.001
    ) -> tuple[float, set[tuple[str, int, int]]]:
        """Waits for a moment with appends in flight, so a fault sent at once lands on a busy writer:
        returns that moment and the keys in flight then (the time is read first, so each of those
        appends ends after it). Writers can all be between attempts, backing off after a failure,
        so sampling at an arbitrary moment can find none in flight."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            t = time.monotonic()
            keys = self.inflight_keys()
            if keys:
                return t, keys
            time.sleep(poll_s)
        raise AssertionError(f"no append was in flight for {deadline_s:.0f} s: {self.outcomes()}")

    def acked(self) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if a.outcome == ACKED]

    def acks_after(self, t: float) -> int:
        with self._lock:
            return sum(1 for a in self.attempts if a.outcome == ACKED and a.ended > t)

    def ended_after(self, keys: set[tuple[str, int, int]], t: float) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if a.key in keys and a.ended > t]

    def unavailability(self, t_fault: float) -> float:
        """Seconds the writers went without an acknowledgement across `t_fault`: from the last ack
        before it to the first ack of an append started after it."""
        with self._lock:
            acks = [a for a in self.attempts if a.outcome == ACKED]
        before = max((a.ended for a in acks if a.ended <= t_fault), default=t_fault)
        after = min((a.ended for a in acks if a.started > t_fault), default=float("inf"))
        return after - before

    def longest_gap(self, t0: float, t1: float) -> float:
        """The longest time within [t0, t1] with no acknowledgement (seconds)."""
        with self._lock:
            times = sorted(a.ended for a in self.attempts if a.outcome == ACKED and t0 <= a.ended <= t1)
        points = [t0, *times, t1]
        return max(b - a for a, b in zip(points, points[1:], strict=False))

    def outcomes(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for a in self.attempts:
                out[a.outcome or "inflight"] = out.get(a.outcome or "inflight", 0) + 1
            return out

    # --- tasks on the loop -----------------------------------------------------------------------
    async def _writer(self, writer: str) -> None:
        assert self._channels is not None
        seq = 0
        turn = self.writer_ids.index(writer)
        while not self._stop.is_set():
            nparts = self.rng.randint(1, self.max_parts)
            lengths = [self.rng.randint(*self.record_bytes) for _ in range(nparts)]
            failures = 0
            for attempt in range(1_000_000):
                endpoints = self.endpoints()
                endpoint = endpoints[turn % len(endpoints)]
                parts = [record(writer, seq, attempt, p, nparts, n) for p, n in enumerate(lengths)]
                a = Attempt(writer, seq, attempt, parts, endpoint, time.monotonic())
                with self._lock:
                    self.attempts.append(a)
                    self.inflight[a.key] = a
                outcome, detail, begin, end = AMBIGUOUS, "", -1, -1
                if self.client_mode:
                    endpoint = a.endpoint = endpoints[0]
                    try:
                        res = await self._client(endpoint).append(self.journal, parts)
                    except GazetteError as exc:
                        outcome, detail = FAILED, str(exc)
                    else:
                        outcome, begin, end = ACKED, res.begin, res.end
                    finally:
                        with self._lock:
                            a.ended, a.outcome, a.detail, a.begin, a.end = (
                                time.monotonic(),
                                outcome,
                                detail,
                                begin,
                                end,
                            )
                            self.inflight.pop(a.key, None)
                    if outcome != ACKED:
                        return
                    break
                try:
                    resp = await append_once(self._channels.stub(endpoint), self.journal, parts)
                except asyncio.CancelledError:
                    detail = "cancelled"
                    raise
                except grpc.aio.AioRpcError as exc:
                    detail = f"{exc.code().name}: {exc.details()}"
                else:
                    if resp.status == pb.OK:
                        outcome, begin, end = ACKED, resp.commit.begin, resp.commit.end
                    else:
                        outcome, detail = FAILED, Status(resp.status).name
                finally:
                    with self._lock:
                        a.ended, a.outcome, a.detail, a.begin, a.end = (
                            time.monotonic(),
                            outcome,
                            detail,
                            begin,
                            end,
                        )
                        self.inflight.pop(a.key, None)
                if outcome == ACKED:
                    break
                failures += 1
                turn += 1  # the broker we talked to may be the one that is gone
                await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1])
            seq += 1

    def _client(self, endpoint: str) -> AsyncClient:
        c = self._clients.get(endpoint)
        if c is None:
            # Pings, as LocalCluster's own clients: an append on a connection a partition silently cut
            # fails within seconds and is tried again, instead of waiting out its timeout.
            c = self._clients[endpoint] = AsyncClient(endpoint, keepalive=PEER_KEEPALIVE_S)
        return c

    async def _reader(self) -> None:
        """A blocking reader from offset 0, resuming after breaks at another broker."""
        assert self._channels is not None
        turn = 0
        while True:
            endpoints = self.endpoints()
            stub = self._channels.stub(endpoints[turn % len(endpoints)])
            call = stub.Read(pb.ReadRequest(journal=self.journal, offset=len(self.read_bytes), block=True))
            try:
                async for resp in call:
                    if resp.content:
                        if resp.offset != len(self.read_bytes):
                            self.reader_errors.append(
                                f"content at {resp.offset} while reading at {len(self.read_bytes)}"
                            )
                            return
                        self.read_bytes += resp.content
                    elif resp.status not in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
                        break  # e.g. NOT_JOURNAL_BROKER while routes change: try another broker
            except grpc.aio.AioRpcError:
                pass
            finally:
                call.cancel()
            turn += 1
            await asyncio.sleep(READ_RETRY_S)


# --- reading back ----------------------------------------------------------------------------------
async def write_head(channels: Channels, endpoints: list[str], journal: str, deadline_s: float) -> int:
    """The largest write head any live broker reports (a replica just synced may lag the primary)."""
    deadline = time.monotonic() + deadline_s
    while True:
        heads = []
        for endpoint in endpoints:
            try:
                async for resp in channels.stub(endpoint).Read(
                    pb.ReadRequest(journal=journal, offset=-1, metadata_only=True, do_not_proxy=True),
                    timeout=5.0,
                ):
                    if resp.status in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
                        heads.append(resp.write_head)
                    break
            except grpc.aio.AioRpcError:
                pass
        if heads:
            return max(heads)
        if time.monotonic() > deadline:
            raise AssertionError(f"no broker told the write head of {journal} within {deadline_s:.0f} s")
        await asyncio.sleep(READ_RETRY_S)


async def read_journal(channels: Channels, endpoints: list[str], journal: str, deadline_s: float) -> bytes:
    """The whole journal: its write head from a broker, then every byte below it, waiting (until the
    deadline) where an offset is not yet readable, e.g. a fragment a replica has yet to persist."""
    deadline = time.monotonic() + deadline_s
    head = await write_head(channels, endpoints, journal, deadline_s)
    turn = 0
    out = bytearray()
    while len(out) < head:
        stub = channels.stub(endpoints[turn % len(endpoints)])
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(
                f"read of {journal} stalled at offset {len(out)} of {head} for {deadline_s:.0f} s "
                "(a hole no fragment covers?)"
            )
        call = stub.Read(
            pb.ReadRequest(journal=journal, offset=len(out), block=True, end_offset=head), timeout=remaining
        )
        try:
            async for resp in call:
                if resp.content:
                    if resp.offset != len(out):
                        raise AssertionError(
                            f"read of {journal} got content at {resp.offset}, expected {len(out)}"
                        )
                    out += resp.content
                elif resp.status not in (pb.OK, pb.OFFSET_NOT_YET_AVAILABLE):
                    break
        except grpc.aio.AioRpcError:
            pass
        finally:
            call.cancel()
        turn += 1
        if len(out) < head:
            await asyncio.sleep(READ_RETRY_S)
    return bytes(out[:head])


# --- the oracle ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Verdict:
    records: int
    copies: int
    duplicates: int  # copies beyond each acknowledged or landed attempt's first
    ambiguous_landed: int  # copies from attempts whose outcome the writer did not learn
    problems: list[str]

    def assert_ok(self) -> None:
        assert not self.problems, "journal check failed:\n  " + "\n  ".join(self.problems[:20])


def verify(
    content: bytes,
    attempts: list[Attempt],
    read_by_reader: bytes | None = None,
    *,
    retried_inside: bool = False,
) -> Verdict:
    """Checks the journal's bytes against every attempt the writers made.

    * every byte belongs to a whole record with a valid payload, and the records of one attempt sit
      together, parts in order (never torn, never interleaved);
    * each acknowledged attempt sits exactly at the [begin, end) its response reported, byte for
      byte, and nowhere else;
    * any other copy comes from an attempt whose outcome was AMBIGUOUS, never from one answered
      with a failure status, and at most once per attempt;
    * each writer's acknowledged appends are in the order acknowledged, and an append acknowledged
      before another began sits before it (acknowledgement order is real-time order);
    * what the concurrent reader saw is a prefix of the journal (it never read a byte that was later
      rolled back or replaced).
    With `retried_inside` (client mode: one attempt is a client call that may send several RPCs),
    an acknowledged attempt may have further whole copies besides the one at its [begin, end).
    """
    problems: list[str] = []
    by_key = {a.key: a for a in attempts}
    copies: dict[tuple[str, int, int], list[int]] = {}
    offset = 0
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif content:
        problems.append(f"the journal does not end with a whole record (its last {len(lines[-1])} bytes)")
        lines.pop()
    records = 0
    current: tuple[tuple[str, int, int], int, int, int] | None = None  # key, nparts, next part, begin
    for line in lines:
        here = offset
        offset += len(line) + 1
        m = RECORD.match(line)
        if m is None:
            problems.append(f"unparseable bytes at offset {here}: {line[:80]!r}")
            current = None
            continue
        w, seq, att, part, nparts = m.group(1).decode(), *map(int, m.group(2, 3, 4, 5))
        records += 1
        key = (w, seq, att)
        if line + b"\n" != record(w, seq, att, part, nparts, len(m.group(6))):
            problems.append(f"record {key} part {part} at offset {here} has a corrupt payload")
        if current is not None and (current[0] != key or current[2] != part):
            problems.append(f"copy of {current[0]} at {current[3]} is torn: part {current[2]} never came")
            current = None
        if current is None:
            if part != 0:
                problems.append(f"copy of {key} at offset {here} starts at part {part} (torn)")
                continue
            current = (key, nparts, 0, here)
        key, nparts, nxt, begin = current
        if nxt + 1 == nparts:
            copies.setdefault(key, []).append(begin)
            current = None
        else:
            current = (key, nparts, nxt + 1, begin)
    if current is not None:
        problems.append(f"copy of {current[0]} at {current[3]} is torn at the journal's end")

    duplicates = ambiguous_landed = 0
    for key, begins in copies.items():
        a = by_key.get(key)
        if a is None:
            problems.append(f"copy of {key} at {begins} comes from no attempt this test made")
            continue
        if len(begins) > 1 and not retried_inside:
            problems.append(f"attempt {key} (one RPC) landed {len(begins)} times, at {begins}")
        duplicates += len(begins) - 1
        if a.outcome == ACKED:
            if a.begin not in begins or (begins != [a.begin] and not retried_inside):
                problems.append(f"acknowledged {key} at [{a.begin}, {a.end}) has copies at {begins}")
        elif a.outcome == FAILED:
            problems.append(f"attempt {key} was answered {a.detail} yet landed at {begins}")
        else:
            ambiguous_landed += 1
    for a in attempts:
        if a.outcome != ACKED:
            continue
        if content[a.begin : a.end] != a.content:
            problems.append(
                f"acknowledged {a.key} is not at [{a.begin}, {a.end}) byte for byte "
                f"(found {content[a.begin : a.begin + 60]!r})"
            )
    acked = sorted((a for a in attempts if a.outcome == ACKED), key=lambda a: a.ended)
    per_writer: dict[str, int] = {}
    for a in sorted(acked, key=lambda a: (a.writer, a.seq)):
        if a.begin < per_writer.get(a.writer, 0):
            problems.append(f"{a.key} acknowledged at {a.begin}, before its writer's previous append")
        per_writer[a.writer] = a.end
    ends = [a.ended for a in acked]
    max_end_by_ack: list[int] = []
    for a in acked:
        max_end_by_ack.append(max(a.end, max_end_by_ack[-1] if max_end_by_ack else 0))
    for b in acked:
        i = bisect.bisect_left(ends, b.started)  # acks strictly before b started
        if i and max_end_by_ack[i - 1] > b.begin:
            problems.append(f"{b.key} at {b.begin} sits before an append acknowledged before it began")
    if read_by_reader is not None and content[: len(read_by_reader)] != read_by_reader:
        at = next(
            (i for i, (x, y) in enumerate(zip(read_by_reader, content, strict=False)) if x != y), len(content)
        )
        problems.append(f"the concurrent reader saw bytes the journal does not hold (from offset {at})")
    return Verdict(records, sum(len(b) for b in copies.values()), duplicates, ambiguous_landed, problems)
