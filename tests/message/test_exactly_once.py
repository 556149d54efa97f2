"""Exactly-once over a real journal: random producers append committed and uncommitted messages,
at-least-once copies, rollbacks (older ACKs re-appended) and messages without UUIDs, as raw appends
of frames built with build_uuid; a blocking ReadCommitted tails the journal, crashing and restarting
from its checkpoints with ring sizes from 1 up, and must deliver exactly what `Committed` defines.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.message import Envelope, Flags, ReadCommitted, build_uuid
from gazette.message.checkpoint import Checkpoint
from gazette.message.framing import JSONFraming
from gazette.message.sequencer import QueueOutcome
from gazette.message.uuid import CLOCK_TICK

NDJSON = "application/x-ndjson"
WAIT_S = 10.0  # a deadline to fail by, never a pass condition: committed data is there to read
NUDGE_S = 0.25  # then more messages are appended, so a reader that missed some fails fast
OUT, CONT, ACK = int(Flags.OUTSIDE_TXN), int(Flags.CONTINUE_TXN), int(Flags.ACK_TXN)
PRODUCERS = tuple(bytes.fromhex(f"03000000ee{i:02x}") for i in range(3))
RING_SIZES = st.sampled_from([1, 2, 3, 4, 8, 1024])
FRAMING = JSONFraming()
REACHED = {outcome.name for outcome in QueueOutcome} | {"replay"}

SEEN: set[str] = set()  # outcome names and "replay" reached by any example in this process
Key = tuple[str, int, int]  # (producer hex, clock, flags); ("", n, 0) for the n-th message without UUID


@dataclasses.dataclass(frozen=True)
class Frame:
    producer: bytes  # b"" without UUID
    clock: int  # 0 without UUID
    flags: int
    data: bytes
    n: int = 0  # a message without UUID holds {"n": n}

    @property
    def key(self) -> Key:
        return (self.producer.hex(), self.clock, self.flags) if self.clock else ("", self.n, 0)


@dataclasses.dataclass
class _Producer:
    last_ack: int  # clocks at or below are acknowledged (or rolled back)
    span: list[Frame] = dataclasses.field(default_factory=list)  # the open transaction, journal order


class Committed:
    """What a read-committed reader must deliver, stated per producer (reference 6.4), frame by
    frame in journal order, with no ring and no replay:

    * a message without UUID is committed, always;
    * a producer's first message reads as if its last ACK were its clock - 1;
    * OUTSIDE: committed iff its clock is above the last ACK; it becomes the last ACK and ends any
      open transaction;
    * CONTINUE above the last ACK joins the open transaction unless its clock is already there (a copy);
    * ACK above the last ACK commits the transaction's messages at or below its clock, then itself;
      any ACK ends the transaction and becomes the last ACK (one at or below it is a rollback).

    Each key is committed once per time this says so (an older ACK lowers the last ACK: at least once).
    """

    def __init__(self) -> None:
        self.producers: dict[bytes, _Producer] = {}
        self.keys: list[Key] = []

    def observe(self, frame: Frame) -> None:
        if not frame.clock:
            self.keys.append(frame.key)
            return
        state = self.producers.setdefault(frame.producer, _Producer(frame.clock - 1))
        if frame.flags == CONT:
            if frame.clock > state.last_ack and all(m.clock != frame.clock for m in state.span):
                state.span.append(frame)
            return
        if frame.clock > state.last_ack:
            if frame.flags == ACK:
                self.keys.extend(m.key for m in state.span if m.clock <= frame.clock)
            self.keys.append(frame.key)
        elif frame.flags == OUT:
            return  # a copy of an acknowledged message
        state.last_ack = frame.clock
        state.span = []

    def copy_is_unambiguous(self, frame: Frame) -> bool:
        """Whether appending a copy of CONTINUE `frame` keeps one meaning across reader restarts.

        A checkpoint keeps a producer's last ACK and where its transaction begins, not the clocks in
        it, and a reader de-duplicates a transaction by clock order. A copy of a message that is not
        in the open transaction but whose clock lies between the transaction's clocks is therefore
        ambiguous (its own producer never writes one: its clocks only grow), and is not written.
        """
        state = self.producers.get(frame.producer)
        if frame.flags != CONT or not frame.clock or state is None or not state.span:
            return True
        if frame.clock <= state.last_ack or any(m.clock == frame.clock for m in state.span):
            return True
        return frame.clock > max(m.clock for m in state.span)


def _seen(label: str) -> None:
    event(label)
    SEEN.add(label)


class ExactlyOnceMachine(RuleBasedStateMachine):
    """Writers append to a fresh journal; `self.reader` tails it and restarts from checkpoints."""

    cluster: LocalCluster  # set by the test functions (one broker for the module)
    client: Client
    pool: concurrent.futures.ThreadPoolExecutor
    journals = iter(range(1 << 30))

    @initialize(n_producers=st.integers(1, 3), ring_size=RING_SIZES)
    def setup(self, n_producers: int, ring_size: int) -> None:
        self.journal = f"exactly-once/j-{next(self.journals):05d}"
        self.client.apply_journals(
            [
                self.cluster.journal_spec(
                    self.journal, labels={"content-type": NDJSON}, fragment_length=1 << 24
                )
            ]
        )
        self.producers = PRODUCERS[:n_producers]
        self.clocks = {p: (1 << 60) + i * 1_000_000 * CLOCK_TICK for i, p in enumerate(self.producers)}
        self.frames: list[Frame] = []  # every frame appended, in journal order
        # What rules pick copies from: the frames rules wrote, not a slow reader's nudges (whose
        # number depends on the machine's load), so a derandomized run takes the same path anywhere.
        self.pickable: list[Frame] = []
        self.last_batch: dict[bytes, list[Frame]] = {}
        self.committed = Committed()
        self.delivered: list[Key] = []
        # The reader's own client: closing it ends a blocked read, so a reader that misses messages
        # fails at the deadline instead of stalling every example after it.
        self.reader_client = Client(self.client.broker)
        self.reader: ReadCommitted | None = None
        self.it: Iterator[Envelope] | None = None
        self._open(ReadCommitted(self.reader_client, self.journal, block=True, ring_size=ring_size))

    def _open(self, reader: ReadCommitted) -> None:
        self.reader = reader
        self.it = iter(reader)

    def _drop_reader(self) -> None:
        """Records what the reader's sequencer did (hypothesis events), then ends its read."""
        assert self.reader is not None
        for (_flag, outcome), n in self.reader.sequencer.queued.items():
            if n:
                _seen(outcome.name)
        if self.reader.replays:
            _seen("replay")
        self.reader.close()
        self.reader = self.it = None

    # -- writers ----------------------------------------------------------------------------------

    def _new(self, producer: bytes, flags: int, clock: int | None = None) -> Frame:
        if clock is None:
            self.clocks[producer] += CLOCK_TICK
            clock = self.clocks[producer]
        uuid = build_uuid(producer, clock, flags)
        data = (
            FRAMING.encode_ack(uuid)
            if flags == ACK
            else FRAMING.encode({"at": f"{producer.hex()}@{clock}"}, uuid)
        )
        return Frame(producer, clock, flags, data)

    def _write(self, frames: list[Frame], nudge: bool = False) -> None:
        """Appends `frames` in one append, unless a copy among them would be ambiguous."""
        trial = copy.deepcopy(self.committed)
        for f in frames:
            if not trial.copy_is_unambiguous(f):
                return
            trial.observe(f)
        res = self.client.append(self.journal, [f.data for f in frames])
        assert res.end - res.begin == sum(len(f.data) for f in frames)
        self.committed = trial
        self.frames.extend(frames)
        if not nudge:
            self.pickable.extend(frames)
        if frames[0].producer:
            self.last_batch[frames[0].producer] = frames

    def _producer(self, p: int) -> bytes:
        return self.producers[p % len(self.producers)]

    @rule(p=st.integers(0, 2), flags=st.lists(st.sampled_from([OUT, CONT, CONT]), min_size=1, max_size=4))
    def publish(self, p: int, flags: list[int]) -> None:
        producer = self._producer(p)
        self._write([self._new(producer, f) for f in flags])

    @rule(p=st.integers(0, 2))
    def commit(self, p: int) -> None:
        """The producer appends the ACK of its transaction (or an empty one)."""
        self._write([self._new(self._producer(p), ACK)])

    @rule(p=st.integers(0, 2), pick=st.integers(0, 1 << 16))
    def commit_below_pending(self, p: int, pick: int) -> None:
        """An ACK whose clock lies just below one of the open transaction's messages."""
        producer = self._producer(p)
        state = self.committed.producers.get(producer)
        if state is not None and state.span:
            below = state.span[pick % len(state.span)].clock - 1
            self._write([self._new(producer, ACK, below)])

    @rule(p=st.integers(0, 2))
    def retry(self, p: int) -> None:
        """An at-least-once retry: the producer's last append lands once more."""
        frames = self.last_batch.get(self._producer(p))
        if frames:
            self._write(frames)

    @rule(pick=st.integers(0, 1 << 16))
    def duplicate_older(self, pick: int) -> None:
        """A late copy of any message appended before."""
        if self.pickable:
            self._write([self.pickable[pick % len(self.pickable)]])

    @rule(p=st.integers(0, 2), latest=st.booleans(), pick=st.integers(0, 1 << 16))
    def roll_back(self, p: int, latest: bool, pick: int) -> None:
        """A producer restored from a checkpoint re-appends its ACK intent: its latest ACK (rolling
        back what it wrote since) or an older one (exactly-once is lost; at-least-once remains)."""
        producer = self._producer(p)
        acks = [f for f in self.frames if f.producer == producer and f.flags == ACK]
        if acks:
            self._write([acks[-1] if latest else acks[pick % len(acks)]])

    @rule()
    def without_uuid(self) -> None:
        self._without_uuid(1)

    def _without_uuid(self, count: int, nudge: bool = False) -> None:
        first = sum(1 for f in self.frames if not f.clock)
        ns = range(first, first + count)
        frames = [Frame(b"", 0, OUT, orjson.dumps({"n": n}, option=orjson.OPT_APPEND_NEWLINE), n) for n in ns]
        self._write(frames, nudge)

    # -- the reader ------------------------------------------------------------------------------

    def _take(self, n: int) -> None:
        """The reader's next `n` envelopes (known to be committed, so a blocking read returns them)."""
        it = self.it
        assert it is not None
        future = self.pool.submit(lambda: [next(it) for _ in range(n)])
        try:
            envs = future.result(NUDGE_S)
        except concurrent.futures.TimeoutError:
            # A slow reader, or one that missed messages: n more committed messages (without UUID)
            # let either deliver n, and a wrong one then fails the prefix check at once.
            self._without_uuid(n, nudge=True)
            try:
                envs = future.result(WAIT_S)
            except concurrent.futures.TimeoutError:
                self.reader_client.close()  # ends the blocked read
                concurrent.futures.wait([future])
                raise AssertionError(
                    f"the reader did not deliver {n} more committed messages within {WAIT_S:.0f} s "
                    f"(delivered {len(self.delivered)} of {len(self.committed.keys)})"
                ) from None
        self.delivered.extend(_key(e) for e in envs)
        self.delivered_so_far_is_a_prefix()

    @rule(n=st.integers(1, 20))
    def read(self, n: int) -> None:
        self._take(min(n, len(self.committed.keys) - len(self.delivered)))

    @rule(ring_size=RING_SIZES, through_json=st.booleans())
    def crash_and_restart(self, ring_size: int, through_json: bool) -> None:
        """The reader's process dies after a checkpoint; a new reader resumes from it."""
        assert self.reader is not None
        mid = self.reader.sequencer.dequeuing
        cp = self.reader.checkpoint()
        if through_json:
            cp = Checkpoint.from_dict(json.loads(json.dumps(cp.to_dict())))
        self._drop_reader()
        self._open(
            ReadCommitted(self.reader_client, self.journal, block=True, checkpoint=cp, ring_size=ring_size)
        )
        event("restart mid-sequence" if mid else "restart")

    @invariant()
    def delivered_so_far_is_a_prefix(self) -> None:
        if hasattr(self, "committed"):
            assert self.delivered == self.committed.keys[: len(self.delivered)]

    def teardown(self) -> None:
        if not hasattr(self, "committed"):
            return
        try:
            while len(self.delivered) < len(self.committed.keys):
                self._take(len(self.committed.keys) - len(self.delivered))
            assert self.delivered == self.committed.keys
            assert self.reader is not None
            cp = self.reader.checkpoint()
        finally:
            self._drop_reader()
            self.reader_client.close()
        # Nothing more is committed after the last checkpoint, and it resumes at the write head.
        rest = ReadCommitted(self.client, self.journal, checkpoint=cp)
        assert list(rest) == []
        assert rest.checkpoint().offsets == {self.journal: self.client.read_head(self.journal)}
        # One reader without restarts agrees (a different ring size, replays or not).
        whole = ReadCommitted(self.client, self.journal, ring_size=3 if len(self.pickable) % 2 else 4096)
        assert [_key(e) for e in whole] == self.committed.keys
        # Each script has a journal of its own: delete it, or a soak's 1000 scripts would pass the
        # broker's journal limit (1024) and find no broker to assign their journals to.
        self.client.delete_journals([self.journal])


def _key(env: Envelope) -> Key:
    if not env.clock:
        return ("", env.message["n"], 0)
    if not env.is_ack:
        assert env.message["at"] == f"{env.producer.hex()}@{env.clock}"
    return (env.producer.hex(), env.clock, env.flags)


MACHINE_SETTINGS = settings(
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def machine(etcd, module_etcd_root, tmp_path_factory) -> Iterator[type[ExactlyOnceMachine]]:
    data = tmp_path_factory.mktemp("exactly-once")
    with LocalCluster(brokers=1, mode="inprocess", store=f"file://{data}/store/", etcd=etcd.endpoint,
                      root=module_etcd_root, data_dir=str(data / "data")) as cluster:  # fmt: skip
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="reader") as pool:
            ExactlyOnceMachine.cluster = cluster
            ExactlyOnceMachine.client = cluster.client()
            ExactlyOnceMachine.pool = pool
            yield ExactlyOnceMachine


def test_read_committed_delivers_exactly_the_committed_messages(machine: Any) -> None:
    SEEN.clear()
    run_state_machine_as_test(machine, settings=MACHINE_SETTINGS)  # max_examples: the profile's
    assert SEEN >= REACHED, f"never reached: {sorted(REACHED - SEEN)}"


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_read_committed_exactly_once_soak(machine: Any) -> None:
    """Under `make soak`: 1000 scripts of up to 150 steps (about 8 minutes against the real broker;
    the soak profile's 5000 would take over half an hour)."""
    run_state_machine_as_test(
        machine, settings=settings(MACHINE_SETTINGS, max_examples=1000, stateful_step_count=150)
    )
