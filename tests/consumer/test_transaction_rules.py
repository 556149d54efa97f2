"""Transaction-loop rules of reference 7.4 on a real broker: DeferToNextTransaction ends a
transaction before an envelope that the next one delivers first (and the checkpoint between them
resumes at it); deferring a transaction's first envelope fails the shard; the shard clock moves once
per transaction, so what a shard publishes carries its transaction's time."""

from __future__ import annotations

import time
from typing import Any

from gazette.consumer import (
    Application,
    ConsumerCheckpoint,
    DeferToNextTransaction,
    Hooks,
    MemoryStore,
    ReplicaCode,
    Shard,
    ShardSpec,
)
from gazette.message import Envelope, Publisher, ReadUncommitted
from gazette.message.uuid import clock_to_unix_ns, get_clock
from gazette.protocol.spec import JournalSpec

JSON = {"content-type": "application/x-ndjson"}
INPUT = "tests/txn-rules/input"
OUTPUT = "tests/txn-rules/output"
WAIT_S = 60.0
CLOCK_DELTA_S = 3600.0


class Batches(Application):
    """Records each transaction's messages; defers a message marked "boundary" unless it is the
    first of its transaction (or every message, with `always`); echoes each message to OUTPUT."""

    def __init__(self, always: bool = False) -> None:
        self.always = always
        self.txns: list[list[int]] = []
        self.deferred_at: list[int] = []  # begin offsets of deferred envelopes

    def new_store(self, shard: Shard, recorder: Any) -> MemoryStore:
        return MemoryStore()

    def begin_txn(self, shard: Shard, store: Any) -> None:
        self.txns.append([])

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        if self.always or (env.message.get("boundary") and self.txns[-1]):
            self.deferred_at.append(env.begin)
            raise DeferToNextTransaction()
        self.txns[-1].append(env.message["n"])
        pub.publish_uncommitted(OUTPUT, {"n": env.message["n"]})


def _start(cluster, app: Application, hooks: Hooks | None = None):  # type: ignore[no-untyped-def]
    client = cluster.client()
    client.apply_journals([JournalSpec(name=j, replication=1, labels=JSON) for j in (INPUT, OUTPUT)])
    cluster.wait_for_routes()
    spec = ShardSpec("rules-000", [INPUT], min_txn_duration="2s", max_txn_duration="10s")
    group = cluster.run_consumer(app, [spec], hooks=hooks or Hooks())
    return client, group


def test_a_deferred_envelope_opens_the_next_transaction_and_the_checkpoint_resumes_at_it(cluster) -> None:
    app = Batches()
    checkpoints: list[ConsumerCheckpoint] = []

    def ack_gate(shard: Shard, checkpoint: ConsumerCheckpoint) -> bool:
        checkpoints.append(checkpoint)
        return True

    client, group = _start(cluster, app, Hooks(ack_gate=ack_gate))
    group.wait_for_primaries()
    # One atomic append: all ten are ready at once, so without the deferral they would be consumed
    # in one transaction (min_txn_duration 2 s keeps it open while they arrive).
    pub = Publisher(client)
    for n in range(10):
        pub.publish_committed(INPUT, {"n": n, "boundary": n in (4, 7)})
    pub.flush()
    pub.close()
    head = client.read_head(INPUT)
    stat = group.client().stat_shard("rules-000", {INPUT: head}, timeout=WAIT_S)
    assert stat.read_through[INPUT] >= head

    consumed = [n for txn in app.txns for n in txn]
    assert consumed == list(range(10))  # each exactly once, in order
    firsts = [txn[0] for txn in app.txns if txn]
    assert 4 in firsts and 7 in firsts  # each deferral opened the next transaction
    assert app.txns[:3] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    # The transaction a deferral ended checkpointed exactly at the deferred envelope.
    resumes = {cp.read_through.get(INPUT) for cp in checkpoints}
    assert set(app.deferred_at) <= resumes, (app.deferred_at, resumes)
    outputs = [e.message["n"] for e in ReadUncommitted(client, OUTPUT) if not e.is_ack]
    assert outputs == list(range(10))


def test_deferring_a_transactions_first_envelope_fails_the_shard(cluster) -> None:
    client, group = _start(cluster, Batches(always=True))
    group.wait_for_primaries()
    pub = Publisher(client)
    pub.publish_committed(INPUT, {"n": 0})
    pub.flush()
    pub.close()
    (info,) = group.wait_for(
        lambda shards: shards[0].primary is not None and shards[0].primary.status.code == ReplicaCode.FAILED,
        WAIT_S,
        "the shard to fail",
    )
    assert info.primary is not None
    assert "cannot begin with a deferral" in info.primary.status.error


def test_the_shard_clock_moves_to_each_transactions_start(cluster) -> None:
    app = Batches()
    client, group = _start(cluster, app, Hooks(publish_clock_delta_s=CLOCK_DELTA_S))
    group.wait_for_primaries()
    before_ns = time.time_ns()
    pub = Publisher(client)
    for n in range(3):
        pub.publish_committed(INPUT, {"n": n})
    pub.flush()
    pub.close()
    group.client().stat_shard("rules-000", {INPUT: client.read_head(INPUT)}, timeout=WAIT_S)
    published = [e for e in ReadUncommitted(client, OUTPUT)]
    assert published
    # The shard's publisher takes its clock from the transaction (plus the test's delta), not from
    # its own wall clock: every UUID is at least the delta ahead of when the inputs were published.
    for env in published:
        t_ns = clock_to_unix_ns(get_clock(env.uuid))
        assert t_ns >= before_ns + int(CLOCK_DELTA_S * 1e9), (t_ns - before_ns) / 1e9


class Spans(Batches):
    """Batches over whole spans (consume_messages): consumes a span up to a "boundary" message that
    does not open its transaction and returns how many it consumed; records each span's length.
    With `returns`, answers that instead (a bad count)."""

    def __init__(self, returns: Any = None) -> None:
        super().__init__()
        self.returns = returns
        self.spans: list[list[Any]] = []

    def consume_messages(self, shard: Shard, store: Any, envelopes: Any, pub: Publisher) -> int | None:
        if self.returns is not None:
            return self.returns  # type: ignore[no-any-return]
        self.spans.append([None if e.is_ack else e.message["n"] for e in envelopes])
        for i, env in enumerate(envelopes):
            if env.is_ack:
                continue
            if env.message.get("boundary") and self.txns[-1]:
                self.deferred_at.append(env.begin)
                return i
            self.txns[-1].append(env.message["n"])
            pub.publish_uncommitted(OUTPUT, {"n": env.message["n"]})
        return None


def test_a_span_consumed_in_part_resumes_at_its_first_unconsumed_envelope(cluster) -> None:
    """One transaction of ten messages reaches the application as one span; consuming it up to
    each boundary ends the transaction there, the checkpoint resumes at the boundary, and the next
    transaction gets the rest of the span first."""
    app = Spans()
    checkpoints: list[ConsumerCheckpoint] = []

    def ack_gate(shard: Shard, checkpoint: ConsumerCheckpoint) -> bool:
        checkpoints.append(checkpoint)
        return True

    client, group = _start(cluster, app, Hooks(ack_gate=ack_gate))
    group.wait_for_primaries()
    pub = Publisher(client)
    for n in range(10):
        pub.publish_uncommitted(INPUT, {"n": n, "boundary": n in (4, 7)})
    pub.commit()
    pub.close()
    head = client.read_head(INPUT)
    group.client().stat_shard("rules-000", {INPUT: head}, timeout=WAIT_S)

    assert app.spans == [[*range(10), None], [*range(4, 10), None], [7, 8, 9, None]]
    assert app.txns[:3] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    # Inside a span the journal's read-through stays before its ACK; the producer's state says where
    # the span resumes: exactly at each deferred envelope.
    resumes = {p.begin for cp in checkpoints for p in cp.sequencer.producers if p.journal == INPUT}
    assert set(app.deferred_at) <= resumes, (app.deferred_at, resumes)
    outputs = [e.message["n"] for e in ReadUncommitted(client, OUTPUT) if not e.is_ack]
    assert outputs == list(range(10))


def test_a_consume_messages_count_out_of_range_fails_the_shard(cluster) -> None:
    client, group = _start(cluster, Spans(returns=-1))
    group.wait_for_primaries()
    pub = Publisher(client)
    pub.publish_committed(INPUT, {"n": 0})
    pub.flush()
    pub.close()
    (info,) = group.wait_for(
        lambda shards: shards[0].primary is not None and shards[0].primary.status.code == ReplicaCode.FAILED,
        WAIT_S,
        "the shard to fail",
    )
    assert info.primary is not None
    assert "consume_messages returned -1 for a span of 1 envelopes" in info.primary.status.error
