"""The `gazette` sink: `df.write.format("gazette")` and `df.writeStream.format("gazette")`, exactly once
(docs/sink.md).

- Planning (driver, `plan_write`): lists the journal or the selector's journals through a broker,
  fails before any task runs on a journal that is missing or whose content type the sink cannot
  frame with UUIDs (JSON lines, CSV), and fixes the routing (sorted listing, key, mapping) for the
  whole write.
- Tasks (executors, `write_task`): each attempt publishes its rows *uncommitted* (CONTINUE_TXN)
  under a fresh random producer id of its own, flushes, and returns to the driver the framed ACK of
  each journal it wrote (and the rollback ACK of each). It never appends an ACK: a failed,
  killed or speculative attempt's messages are never acknowledged, so committed readers never
  deliver them; a retried attempt is a new producer, so its row order may differ.
- Commit (driver, `commit_write`): Spark hands over the messages of the attempts it committed. The
  driver records their ACKs durably first (sink_intents.IntentLog: under the streaming
  checkpointLocation per batchId, or under checkpointLocation per writeId for a batch write), then
  appends them, one append per journal. A commit whose record exists already (a driver restarted
  after recording) appends the *recorded* ACKs again (duplicates of an ACK change nothing) and
  rolls back what this run's attempts wrote; a batch write whose writeId was recorded writes no
  rows at all. `abort` appends the rollback ACKs of the attempts it is given.

Appends go through the client layer (gazette.client, gazette.message.Publisher): unlike the
reader, the sink needs a broker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from fragments_io.errors import OptionError, SinkCommitError, SinkJournalError
from fragments_io.sink_encode import (
    SINK_FRAMINGS,
    Router,
    Shape,
    explain_unframable,
    messages_of,
    shape_of,
    split,
)
from fragments_io.sink_intents import Acks, IntentLog, fault
from fragments_io.sink_options import WriteOptions
from gazette.client.sync import Client, connect
from gazette.message.framing import Framing, FramingError, framing_for
from gazette.message.mapping import CONTENT_TYPE_LABEL
from gazette.message.publisher import Publisher
from gazette.message.uuid import CLOCK_TICK, Clock, Flags
from gazette.protocol.errors import GazetteError
from gazette.protocol.selector import LabelSelector

log = logging.getLogger("fragments_io.sink")

MAX_PENDING_BATCHES = 4  # per journal: a task waits for its oldest append beyond this (bounds memory)
ROLLBACK_TIMEOUT_S = 10.0  # a failing task's best-effort rollback
TASK_FAULT_ENV = "FRAGMENTS_IO_SINK_TASK_FAULT"
TASK_HOLD_ENV = "FRAGMENTS_IO_SINK_TASK_HOLD"  # the file a `hold-after-rows` attempt writes, then waits on
TASK_HOLD_TIMEOUT_S = 180.0
TASK_HOLD_POLL_S = 0.05

_clients: dict[tuple[str, float], Client] = {}
_clients_lock = threading.Lock()


def client_for(broker: str, timeout_s: float) -> Client:
    """One client per broker list and timeout per process (Python workers are reused across tasks)."""
    with _clients_lock:
        client = _clients.get((broker, timeout_s))
        if client is None:
            client = _clients[(broker, timeout_s)] = connect(broker=broker, timeout=timeout_s)
        return client


@dataclasses.dataclass(frozen=True)
class SinkPlan:
    """What every task and the commit of one write share (pickled to the executors)."""

    opts: WriteOptions
    journals: tuple[str, ...]
    content_types: tuple[str, ...]  # of each journal
    router: Router
    shape: Shape
    replay: bool = False  # batch: this writeId was recorded by an earlier run; tasks write nothing

    def framing_kind(self, i: int) -> str:
        return SINK_FRAMINGS[self.content_types[i]]

    def framings(self) -> dict[str, Framing]:
        out: dict[str, Framing] = {}
        for ct in set(self.content_types):
            kind = SINK_FRAMINGS[ct]
            out[ct] = (
                framing_for(ct, uuid_pointer=self.opts.uuid_pointer) if kind == "json" else framing_for(ct)
            )
        return out


@dataclasses.dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task attempt hands the driver: its producer, the framed ACK and rollback ACK of each
    journal it wrote, and how many rows it published."""

    partition: int
    attempt: int
    producer: str  # hex; "" when the attempt wrote nothing
    acks: tuple[tuple[str, bytes], ...] = ()
    rollbacks: tuple[tuple[str, bytes], ...] = ()
    rows: int = 0


# --- planning (driver) ---------------------------------------------------------------------------


def plan_write(opts: WriteOptions, schema: StructType, *, streaming: bool) -> SinkPlan:
    """The plan of a write of `schema`; SinkJournalError or OptionError before any task runs."""
    client = client_for(opts.broker, opts.timeout_s)
    if opts.journal is not None:
        selector = LabelSelector(include=[("name", opts.journal)])
        what = f"journal {opts.journal}"
    else:
        assert opts.selector is not None
        try:
            selector = LabelSelector.parse(opts.selector)
        except (GazetteError, ValueError) as exc:
            raise OptionError(f"option journals={opts.selector!r} is not a label selector: {exc}") from None
        what = f'selector "{opts.selector}"'
    try:
        listing = client.list_journals(selector, timeout=opts.timeout_s)
    except GazetteError as exc:
        raise SinkJournalError(f"cannot list {what} through broker {opts.broker}: {exc}") from None
    if not listing:
        raise SinkJournalError(
            f"{what} does not exist" if opts.journal is not None else f"{what} matches no journal"
        )
    specs = sorted(listing, key=lambda info: info.spec.name)
    journals = tuple(info.spec.name for info in specs)
    content_types = tuple(info.spec.labels.value_of(CONTENT_TYPE_LABEL) or "" for info in specs)
    for name, ct in zip(journals, content_types, strict=True):
        if ct not in SINK_FRAMINGS:
            raise SinkJournalError(
                f"journal {name} has content type {ct!r}, which the gazette sink cannot frame with message "
                f"UUIDs (it writes {', '.join(sorted(SINK_FRAMINGS))})"
            )
    shape = shape_of(
        to_arrow_schema(schema, timezone="UTC"), opts.key, {SINK_FRAMINGS[c] for c in content_types}
    )
    router = Router(journals, opts.key, opts.mapping)
    replay = False
    if opts.write_id is not None and not streaming:
        assert opts.checkpoint_location is not None
        replay = IntentLog(opts.checkpoint_location).recorded(write_name(opts.write_id)) is not None
        if replay:
            log.warning(
                "writeId %s was recorded by an earlier run: its ACKs are appended again and no row is written",
                opts.write_id,
            )
    return SinkPlan(opts, journals, content_types, router, shape, replay)


def write_name(write_id: str) -> str:
    return f"write-{write_id}"


# --- tasks (executors) ---------------------------------------------------------------------------


def _task_attempt() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)


def write_task(plan: SinkPlan, batches: Iterable[pa.RecordBatch]) -> SinkCommitMessage:
    """Publishes the rows of `batches` uncommitted under a new producer; returns its ACKs unappended."""
    partition, attempt = _task_attempt()
    if plan.replay:
        for _ in batches:  # the rows were written and recorded by an earlier run
            pass
        return SinkCommitMessage(partition, attempt, "")
    client = client_for(plan.opts.broker, plan.opts.timeout_s)
    framings = plan.framings()
    clock = Clock.now()  # the publisher never moves a clock it is given: each tick is predictable
    pub = Publisher(client, clock=clock, framings=framings)
    first: dict[str, tuple[int, Any, Framing]] = {}  # journal -> (rollback clock, a message, framing)
    rows = 0
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            index = plan.router.route(batch, rows)
            per_framing: dict[str, list[Any]] = {}
            for j, msgs in _groups(plan, batch, index, rows, per_framing):
                journal = plan.journals[j]
                if journal not in first:
                    # The batch's first tick is the clock's next: a rollback ACK just below it
                    # discards this producer's span (the Sequencer's ACK_ROLLBACK).
                    first[journal] = (clock.value + CLOCK_TICK - 1, msgs[0], framings[plan.content_types[j]])
                try:
                    pub.publish_uncommitted_batch(journal, msgs)
                except FramingError as exc:
                    raise explain_unframable(batch, msgs, rows, exc) from None
                pending = pub.service.pending_of(journal)
                if len(pending) > MAX_PENDING_BATCHES:
                    pending[0].result(plan.opts.timeout_s)
            rows += batch.num_rows
            task_fault("kill-after-rows", partition, attempt, rows, pub)
            task_fault("hold-after-rows", partition, attempt, rows, pub)
        pub.flush(plan.opts.timeout_s)
        acks = tuple(pub.build_ack_intents())
    except BaseException as exc:
        _best_effort_rollback(pub, exc)
        raise
    finally:
        try:
            pub.close(plan.opts.timeout_s)
        except GazetteError as exc:
            log.warning("closing the publisher of partition %d attempt %d: %s", partition, attempt, exc)
    rollbacks = tuple(
        (j, framing.encode_ack(pub.uuid(c, int(Flags.ACK_TXN)), like))
        for j, (c, like, framing) in first.items()
    )
    task_fault(
        "raise-after-write", partition, attempt, rows, pub
    )  # as a speculative loser: done, then dropped
    return SinkCommitMessage(
        partition, attempt, pub.producer_id.hex() if first else "", acks, rollbacks, rows
    )


def task_fault(point: str, partition: int, attempt: int, rows: int, pub: Publisher) -> None:
    """Test hook of the fault tests: FRAGMENTS_IO_SINK_TASK_FAULT holds comma-separated
    `<point>:<rows>:<partition>`, each acting on the first attempt of that partition only.
    `kill-after-rows` flushes and SIGKILLs the Python worker once `rows` rows are published (a task
    dying mid-write); `hold-after-rows` flushes, then holds the attempt mid-write (`_hold`) so that a
    test can kill the executor under it, or have Spark speculate a copy of it; `raise-after-write` fails the attempt after all its rows
    were appended (a duplicate attempt whose output must never count)."""
    spec = os.environ.get(TASK_FAULT_ENV)
    if not spec or attempt != 0:
        return
    for item in spec.split(","):
        name, at, part = (item.split(":") + ["0", "0"])[:3]
        if name != point or int(part) != partition or rows < int(at):
            continue
        if name == "kill-after-rows":
            pub.flush(ROLLBACK_TIMEOUT_S)
            os.kill(os.getpid(), signal.SIGKILL)
        if name == "hold-after-rows":
            pub.flush(ROLLBACK_TIMEOUT_S)
            _hold(partition, attempt, rows, pub)
            return
        raise RuntimeError(
            f"injected task fault {point} after {rows} rows (partition {partition}, attempt 0)"
        )


def _hold(partition: int, attempt: int, rows: int, pub: Publisher) -> None:
    """Writes the file FRAGMENTS_IO_SINK_TASK_HOLD names (JSON: this Python worker's pid, the
    partition, attempt, producer id and rows published, all flushed), then waits for a test to
    remove it (the attempt then goes on writing), up to TASK_HOLD_TIMEOUT_S (then it fails). A
    worker whose parent died meanwhile (its executor was killed) exits at once, as a killed process
    would, without rolling back."""
    path = os.environ.get(TASK_HOLD_ENV)
    if not path:
        raise RuntimeError(f"task fault hold-after-rows needs {TASK_HOLD_ENV}, the file it holds on")
    info: dict[str, Any] = {"pid": os.getpid(), "partition": partition, "attempt": attempt, "rows": rows}
    info["producer"] = pub.producer_id.hex()
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)  # whole or absent: the test never reads a partial file
    parent = os.getppid()
    deadline = time.monotonic() + TASK_HOLD_TIMEOUT_S
    while os.path.exists(path):
        if os.getppid() != parent:
            os._exit(1)
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the held sink task was not released ({path} still exists) within {TASK_HOLD_TIMEOUT_S:.0f} s"
            )
        time.sleep(TASK_HOLD_POLL_S)


def _groups(
    plan: SinkPlan, batch: pa.RecordBatch, index: Any, row0: int, cache: dict[str, list[Any]]
) -> list[tuple[int, list[Any]]]:
    """(journal index, messages) of `batch`: messages framed once per framing kind, split by journal."""
    if index is None:
        kind = plan.framing_kind(0)
        return [(0, messages_of(batch, plan.shape, kind, row0))]
    out: list[tuple[int, list[Any]]] = []
    kinds = {plan.framing_kind(j) for j in range(len(plan.journals))}
    for kind in kinds:
        if kind not in cache:
            cache[kind] = messages_of(batch, plan.shape, kind, row0)
        for j, msgs in split(cache[kind], index, len(plan.journals)):
            if plan.framing_kind(j) == kind:
                out.append((j, msgs))
    return out


def _best_effort_rollback(pub: Publisher, exc: BaseException) -> None:
    """A failing attempt appends rollback ACKs so readers drop its messages at once. Its messages
    are never acknowledged either way: this only saves readers from holding them as pending."""
    try:
        pub.rollback(timeout=ROLLBACK_TIMEOUT_S)
    except Exception as why:  # the attempt fails with `exc` anyway
        log.warning("a failed sink task could not roll back producer %s: %s", pub.producer_id.hex(), why)


# --- commit (driver) ------------------------------------------------------------------------------


def _append_grouped(client: Client, acks: Sequence[tuple[str, bytes]], timeout_s: float, hook: bool) -> None:
    """Appends the framed ACKs, one append per journal (in first-seen order)."""
    by_journal: dict[str, list[bytes]] = {}
    for journal, frame in acks:
        by_journal.setdefault(journal, []).append(frame)
    for n, (journal, frames) in enumerate(by_journal.items()):
        try:
            client.append(journal, b"".join(frames), timeout=timeout_s)
        except GazetteError as exc:
            raise SinkCommitError(
                f"appending {len(frames)} ACK(s) to journal {journal} failed: {exc}; the intents are recorded "
                "where the write can be completed (same writeId, or the query's checkpoint)"
            ) from None
        if hook and n == 0:
            fault("after-first-ack")


def commit_write(
    plan: SinkPlan, messages: Sequence[SinkCommitMessage | None], intents: IntentLog | None, name: str | None
) -> Acks:
    """Records, then appends, the ACKs of the committed attempts' `messages`; completes an earlier
    run's recorded commit instead when `name` has a record. Returns the ACKs appended."""
    msgs = [m for m in messages if m is not None]
    client = client_for(plan.opts.broker, plan.opts.timeout_s)
    recorded = intents.recorded(name) if intents is not None and name is not None else None
    stale: list[tuple[str, bytes]] = []
    if recorded is None:
        acks: Acks = [a for m in msgs for a in m.acks]
        fault("before-record")
        if intents is not None and name is not None:
            intents.record(name, acks)
        fault("after-record")
    else:
        log.warning("%s was recorded by an earlier run: appending its recorded ACKs again", name)
        acks = recorded
        stale = [r for m in msgs for r in m.rollbacks]  # this run's attempts of a batch already committed
    _append_grouped(client, acks, plan.opts.timeout_s, hook=True)
    fault("after-acks")
    if stale:
        rollback_attempts(plan, stale)
    if intents is not None and name is not None:
        intents.mark_done(name)
    return acks


def rollback_attempts(plan: SinkPlan, rollbacks: Sequence[tuple[str, bytes]]) -> None:
    """Appends rollback ACKs (best effort: unacknowledged messages stay uncommitted regardless)."""
    if not rollbacks:
        return
    try:
        _append_grouped(
            client_for(plan.opts.broker, plan.opts.timeout_s), rollbacks, plan.opts.timeout_s, hook=False
        )
    except SinkCommitError as exc:
        log.warning(
            "rollback ACKs of aborted attempts were not all appended (they stay uncommitted): %s", exc
        )


def _rollbacks_of(messages: Sequence[SinkCommitMessage | None]) -> list[tuple[str, bytes]]:
    return [r for m in messages if m is not None for r in m.rollbacks]


class GazetteBatchWriter(DataSourceArrowWriter):
    """`df.write.format("gazette")`: see the module docstring."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:  # type: ignore[override]
        return write_task(self.plan, iterator)

    def commit(self, messages: list[SinkCommitMessage | None]) -> None:  # type: ignore[override]
        opts = self.plan.opts
        if opts.write_id is not None:
            assert opts.checkpoint_location is not None
            commit_write(self.plan, messages, IntentLog(opts.checkpoint_location), write_name(opts.write_id))
        else:
            commit_write(self.plan, messages, None, None)

    def abort(self, messages: list[SinkCommitMessage | None]) -> None:  # type: ignore[override]
        rollback_attempts(self.plan, _rollbacks_of(messages))


class GazetteStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("gazette")`: each micro-batch committed once, by its batchId."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan
        assert plan.opts.checkpoint_location is not None
        self.intents = IntentLog.for_stream(plan.opts.checkpoint_location)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:  # type: ignore[override]
        return write_task(self.plan, iterator)

    def commit(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        commit_write(self.plan, messages, self.intents, f"batch-{batchId}")
        self.intents.prune_batches_before(batchId)

    def abort(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        rollback_attempts(self.plan, _rollbacks_of(messages))
