"""`gazette demo`: the main job end to end on a 3-broker, 2-zone subprocess cluster, checked.

Four producers publish a word corpus (two committed, two in transactions, some rolled back) to R=3
JSON journals while a 2-process word-count consumer (hot standby) counts it; a broker and the
primary consumer are SIGKILLed mid-run. The consumer's counts must equal the corpus, and Spark SQL
over the persisted fragments (fragments_io) the consumer's. Then the batch-report example writes a
report file per transaction as a side effect, exactly once (each report checked against the SHA-1
its committed message carries). `run_demo` returns False on a mismatch.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gazette import tunables
from gazette.client.sync import Client
from gazette.consumer import ConsumerGroup, ReplicaCode, ShardInfo
from gazette.examples import reports, wordcount
from gazette.local.cluster import LocalCluster
from gazette.message import Publisher, ReadCommitted

# Gazette's own words first, then common English ones; ranks weigh them like natural text (Zipf).
VOCABULARY = (
    "gazette journal fragment spool broker append read commit rollback register store etcd route "
    "primary replica sequencer producer clock ack checkpoint shard consumer transaction offset "
    "the of and to in is it that for on was with as be by at this from or an are not have but had "
    "they you which one all were we when there can more if no out so said what up its about into "
    "than them only other new some could time these two may then do first any my now such like"
).split()
PARTITIONS = 4
REPLICATION = 3
BROKERS = 3
ZONES = ("zone-a", "zone-b")
CONSUMER_PROCESSES = 2
CONSUMER_ROOT = "/gazette/consumers/wordcount"
WORDS_PREFIX = "examples/words/"
CONTENT_TYPE = wordcount.JSON_LABELS["content-type"]
COMMITTED_PUBLISHERS = 2
TXN_PUBLISHERS = 2
ROLLBACK_EVERY_TXNS = 4  # every 4th transaction of a transactional producer is rolled back
# Fractions of the corpus published when a fault is injected, and where producers wait for it.
BROKER_KILL_AT, BROKER_KILL_GATE = 0.30, 0.45
CONSUMER_KILL_AT, CONSUMER_KILL_GATE = 0.60, 0.75
# Any single wait of the demo (a flush, a failover, a catch-up): generous, since a fragment store
# that fails a health check is retried after 10 s, then 100 s, and appends wait for it meanwhile.
STEP_TIMEOUT_S = 180.0
STAT_POLL_TIMEOUT_S = 10.0
TOP_WORDS = 10
REPORT_EVENTS = 200  # events of the batch-report (side effects) example
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
}
SPARK_SQL = "SELECT word, count(*) AS n FROM words WHERE flags <> 2 GROUP BY word"  # 2: ACK_TXN
JAVA_MISSING = (
    "Spark skipped: Java not found; install it with `apt-get install openjdk-17-jre-headless` "
    "or `conda install openjdk`"
)
# Test hooks, never set by a user by accident: pretend Java is absent; drop one occurrence of the
# most common word from the consumer's counts (a forced mismatch).
TEST_NO_JAVA_ENV = "GAZETTE_DEMO_TEST_NO_JAVA"
TEST_DROP_WORD_ENV = "GAZETTE_DEMO_TEST_DROP_WORD"
LOG_LEVEL_ENV = "GAZETTE_DEMO_LOG_LEVEL"  # of the broker and consumer logs under the data dir


@dataclasses.dataclass(frozen=True)
class DemoSize:
    words: int
    batch_words: int  # committed producers flush (and report progress) every batch
    txn_words: int  # words per transaction of a transactional producer


SMALL = DemoSize(words=4_000, batch_words=100, txn_words=100)
FULL = DemoSize(words=120_000, batch_words=1_000, txn_words=500)


class DemoError(Exception):
    """A step of the demo could not complete (the message names the step and what was seen)."""


def corpus(n: int, seed: int = 7) -> list[str]:
    """`n` words of VOCABULARY drawn with Zipf weights (deterministic for a seed)."""
    rng = random.Random(seed)
    return rng.choices(VOCABULARY, weights=[1 / (rank + 1) for rank in range(len(VOCABULARY))], k=n)


def journal_of(word: str) -> str:
    return wordcount.words_journal(wordcount.partition_of(word, PARTITIONS))


def _mapping(message: dict[str, str]) -> tuple[str, str]:
    return journal_of(message["word"]), CONTENT_TYPE


# --- producers ----------------------------------------------------------------------------------


class _Gates:
    """Producers report published words here and, past a fault's gate, wait until it was injected."""

    def __init__(self, total: int, faults: list[tuple[float, float]]) -> None:
        self.total = total
        self.published = 0
        self.abort = threading.Event()
        self._lock = threading.Lock()
        self.triggers = [int(at * total) for at, _ in faults]
        self._gates = [(int(gate * total), threading.Event()) for _, gate in faults]

    def advance(self, n: int) -> None:
        with self._lock:
            self.published += n
            done = self.published
        for gate, injected in self._gates:
            while done >= gate and not injected.wait(tunables.LOCAL_POLL_INTERVAL_S):
                if self.abort.is_set():
                    raise DemoError("publishing stopped: the demo is aborting")

    def release(self, i: int) -> None:
        self._gates[i][1].set()


def _publish_committed(client: Client, words: list[str], size: DemoSize, gates: _Gates) -> None:
    pub = Publisher(client)
    try:
        for i in range(0, len(words), size.batch_words):
            chunk = words[i : i + size.batch_words]
            for word in chunk:
                pub.publish_committed(_mapping, {"word": word})
            pub.flush(STEP_TIMEOUT_S)
            gates.advance(len(chunk))
    finally:
        pub.close(STEP_TIMEOUT_S)


def _publish_transactions(
    client: Client, words: list[str], size: DemoSize, gates: _Gates, seed: int
) -> collections.Counter[str]:
    """Publishes `words` in transactions (uncommitted, then their ACK intents); every
    ROLLBACK_EVERY_TXNS-th transaction is extra words rolled back instead: the producer re-appends its
    last committed ACK of each journal, as a restarted producer does. Returns the rolled-back words."""
    rng = random.Random(seed)
    pub = Publisher(client)
    last_acks: dict[str, bytes] = {}
    rolled_back: collections.Counter[str] = collections.Counter()
    try:
        for n, i in enumerate(range(0, len(words), size.txn_words), start=1):
            if n % ROLLBACK_EVERY_TXNS == 0:
                doomed = [
                    w for w in corpus(size.txn_words, rng.randrange(1 << 30)) if journal_of(w) in last_acks
                ]
                for word in doomed:
                    pub.publish_uncommitted(_mapping, {"word": word})
                pub.flush(STEP_TIMEOUT_S)
                pub.build_ack_intents()  # this transaction's intents are dropped (a "crash") ...
                for journal in sorted({journal_of(w) for w in doomed}):
                    pub.service.append(journal, last_acks[journal])  # ... and the last ACKs re-appended
                pub.flush(STEP_TIMEOUT_S)
                rolled_back.update(doomed)
            chunk = words[i : i + size.txn_words]
            for word in chunk:
                pub.publish_uncommitted(_mapping, {"word": word})
            pub.flush(STEP_TIMEOUT_S)
            intents = pub.build_ack_intents()
            for journal, ack in intents:
                pub.service.append(journal, ack)
            pub.flush(STEP_TIMEOUT_S)
            last_acks.update(intents)
            gates.advance(len(chunk))
    finally:
        pub.close(STEP_TIMEOUT_S)
    return rolled_back


# --- the run --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Kill:
    """One SIGKILL and what work remained when it landed."""

    what: str
    target: str
    published: int  # corpus words published (committed or in a committed transaction) by then
    to_publish: int
    unread: dict[str, int]  # journal -> bytes between the consumer's read-through and the write head
    detail: str = ""

    @property
    def work_remained(self) -> bool:
        return sum(self.unread.values()) > 0


@dataclasses.dataclass
class _Phase:
    name: str
    seconds: float
    ok: bool


class _Demo:
    def __init__(self, size: DemoSize, data_dir: str, console: Console, columnar: bool = False) -> None:
        self.size = size
        self.columnar = columnar  # run ColumnarWordCount (the columnar consumer path) instead of WordCount
        self.console = console
        self.data_dir = os.path.abspath(data_dir)
        self.store = f"file://{self.data_dir}/fragments/"
        self.db_dir = os.path.join(self.data_dir, "wordcount")
        self.reports_dir = os.path.join(self.data_dir, "reports")
        self.words = corpus(size.words)
        self.expected: collections.Counter[str] = collections.Counter(self.words)
        self.journals = [wordcount.words_journal(i) for i in range(PARTITIONS)]
        self.shard_ids = [s.id for s in wordcount.shards(PARTITIONS)]
        self.phases: list[_Phase] = []
        self.failures: list[str] = []  # mismatches
        self.error = ""  # what stopped the run early, if anything
        self.checks: list[str] = []
        self.kills: list[Kill] = []
        self.rolled_back: collections.Counter[str] = collections.Counter()
        self.consumer_counts: dict[str, int] = {}
        self.spark_counts: dict[str, int] | None = None
        self.spark_note = ""
        self.heads: dict[str, int] = {}
        self.cluster = LocalCluster(
            brokers=BROKERS,
            mode="subprocess",
            zones=ZONES,
            store=self.store,
            data_dir=self.data_dir,
            log_level=os.environ.get(LOG_LEVEL_ENV, "WARNING"),
        )
        self.group: ConsumerGroup | None = None
        self.victim_consumer = -1

    # --- bookkeeping
    def phase(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            result = fn()
        except BaseException:
            self.phases.append(_Phase(name, time.monotonic() - t0, False))
            self.console.print(f"[red]✗[/red] {escape(name)} ({time.monotonic() - t0:.1f}s)", soft_wrap=True)
            raise
        self.phases.append(_Phase(name, time.monotonic() - t0, True))
        self.console.print(f"[green]✓[/green] {escape(name)} ({time.monotonic() - t0:.1f}s)", soft_wrap=True)
        return result

    def check(self, ok: bool, good: str, bad: str) -> None:
        if ok:
            self.checks.append(good)
        else:
            self.failures.append(bad)

    def progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=True,
        )  # fmt: skip

    @property
    def client(self) -> Client:
        return self.cluster.client()

    @property
    def consumers(self) -> ConsumerGroup:
        assert self.group is not None
        return self.group

    # --- phases
    def start(self) -> None:
        self.cluster.start()

    def create_journals(self) -> None:
        specs = [
            self.cluster.journal_spec(
                name, replication=REPLICATION, labels=wordcount.JSON_LABELS, fragment_length=256 << 10,
                compression="snappy", refresh_interval="1s",
            )
            for name in [*self.journals, wordcount.COUNTS_JOURNAL]
        ]  # fmt: skip
        self.client.apply_journals(specs)
        self.cluster.wait_for_routes(timeout=STEP_TIMEOUT_S)

    def start_consumer(self) -> None:
        os.makedirs(self.db_dir, exist_ok=True)
        shards = wordcount.shards(PARTITIONS, hot_standbys=1, max_txn_duration="1s")
        app: Any = wordcount.WordCount(self.db_dir)
        if self.columnar:
            from gazette.examples.wordcount_columnar import ColumnarWordCount

            app = ColumnarWordCount(self.db_dir)
        self.group = self.cluster.run_consumer(app, shards, processes=CONSUMER_PROCESSES, root=CONSUMER_ROOT)
        self.consumers.wait_for(_primary_and_standby, STEP_TIMEOUT_S, "a PRIMARY and a hot STANDBY per shard")

    def publish(self) -> None:
        """Producers in threads; this thread shows progress and injects the faults on their way."""
        gates = _Gates(
            len(self.words), [(BROKER_KILL_AT, BROKER_KILL_GATE), (CONSUMER_KILL_AT, CONSUMER_KILL_GATE)]
        )
        faults = [self.kill_broker, self.kill_consumer]
        n = COMMITTED_PUBLISHERS + TXN_PUBLISHERS
        slices = [self.words[i::n] for i in range(n)]
        producers: list[Callable[[], collections.Counter[str] | None]] = [
            functools.partial(_publish_committed, self.client, s, self.size, gates)
            for s in slices[:COMMITTED_PUBLISHERS]
        ] + [
            functools.partial(_publish_transactions, self.client, s, self.size, gates, seed=100 + k)
            for k, s in enumerate(slices[COMMITTED_PUBLISHERS:])
        ]
        errors: list[BaseException] = []
        rolled_back: list[collections.Counter[str]] = []

        def run(producer: Callable[[], collections.Counter[str] | None]) -> None:
            try:
                result = producer()
                if result is not None:
                    rolled_back.append(result)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
                gates.abort.set()

        threads = [
            threading.Thread(target=run, args=(p,), name=f"demo-producer-{i}")
            for i, p in enumerate(producers)
        ]
        try:
            with self.progress() as progress:
                task = progress.add_task(f"publishing ({n} producers)", total=len(self.words))
                for t in threads:
                    t.start()
                next_fault = 0
                while any(t.is_alive() for t in threads):
                    progress.update(task, completed=gates.published)
                    if next_fault < len(faults) and gates.published >= gates.triggers[next_fault]:
                        faults[next_fault](gates)
                        gates.release(next_fault)
                        next_fault += 1
                    if errors:
                        break
                    time.sleep(tunables.LOCAL_POLL_INTERVAL_S)
                progress.update(task, completed=gates.published)
        finally:
            gates.abort.set()
            for t in threads:
                t.join(STEP_TIMEOUT_S)
        if errors:
            raise DemoError(f"a producer failed: {type(errors[0]).__name__}: {errors[0]}") from errors[0]
        if next_fault < len(faults):
            raise DemoError(f"publishing ended before fault {next_fault + 1} of {len(faults)} was injected")
        for c in rolled_back:
            self.rolled_back.update(c)
        self.heads = {j: self.client.read_head(j) for j in self.journals}

    def _unread(self) -> dict[str, int]:
        """Bytes between each shard's read-through (its last completed transaction) and the head."""
        shards = self.consumers.client()
        out = {}
        for shard_id, journal in zip(self.shard_ids, self.journals, strict=True):
            head = self.client.read_head(journal)
            through = shards.stat_shard(shard_id, timeout=STAT_POLL_TIMEOUT_S).read_through.get(journal, 0)
            out[journal] = max(0, head - through)
        return out

    def kill_broker(self, gates: _Gates) -> None:
        """SIGKILLs the broker that is primary of the most word journals, then starts it again: with
        R=3 on 3 brokers, appends wait (INSUFFICIENT_JOURNAL_BROKERS) until the route is full again."""
        primaries: collections.Counter[int] = collections.Counter()
        for info in self.client.list_journals():
            if info.spec.name.startswith(WORDS_PREFIX) and info.route.primary >= 0:
                _, suffix = info.route.members[info.route.primary]
                primaries[int(suffix.rsplit("-", 1)[1])] += 1
        if not primaries:
            raise DemoError("no word journal has a primary broker to kill")
        victim, n_primary = primaries.most_common(1)[0]
        unread = self._unread()
        published = gates.published
        self.cluster.kill_broker(victim)
        t_kill = time.monotonic()
        self.cluster.restart_broker(victim)
        handle = self.cluster.brokers[victim]
        self.kills.append(
            Kill(
                "broker", f"broker-{victim} ({handle.zone})", published, gates.total - published, unread,
                f"primary of {n_primary} journals; back in {time.monotonic() - t_kill:.1f} s",
            )
        )  # fmt: skip

    def kill_consumer(self, gates: _Gates) -> None:
        """SIGKILLs the consumer process that is primary of the most shards."""
        primaries: dict[int, list[str]] = collections.defaultdict(list)
        for info in self.consumers.list_shards():
            if info.primary is not None and info.primary.status.code == ReplicaCode.PRIMARY:
                primaries[int(info.primary.suffix.split("-")[1])].append(info.spec.id)
        if not primaries:
            raise DemoError("no shard has a PRIMARY consumer to kill")
        victim = max(primaries, key=lambda i: len(primaries[i]))
        unread = self._unread()
        published = gates.published
        self.cluster.kill_consumer(victim, self.group)
        self.kills.append(
            Kill(
                "consumer", f"consumer-{victim}", published, gates.total - published, unread,
                f"primary of {len(primaries[victim])} shards",
            )
        )  # fmt: skip
        self.victim_consumer = victim

    def recover(self) -> None:
        """The killed consumer starts again; routes are full, every shard has a primary and a standby."""
        self.consumers.restart(self.victim_consumer)
        self.cluster.wait_for_routes(timeout=STEP_TIMEOUT_S)
        self.consumers.wait_for(_primary_and_standby, STEP_TIMEOUT_S, "a PRIMARY and a hot STANDBY per shard")

    def catch_up(self) -> None:
        """Waits until each shard's read-through reaches its journal's head (read-your-writes)."""
        shards = self.consumers.client()
        total = sum(self.heads.values())
        deadline = time.monotonic() + STEP_TIMEOUT_S
        with self.progress() as progress:
            task = progress.add_task("consumer catching up (bytes)", total=total)
            while True:
                through = {
                    j: shards.stat_shard(s, timeout=STAT_POLL_TIMEOUT_S).read_through.get(j, 0)
                    for s, j in zip(self.shard_ids, self.journals, strict=True)
                }
                progress.update(task, completed=sum(min(through[j], self.heads[j]) for j in self.journals))
                if all(through[j] >= self.heads[j] for j in self.journals):
                    break
                if time.monotonic() > deadline:
                    behind = {
                        j: self.heads[j] - through[j] for j in self.journals if through[j] < self.heads[j]
                    }
                    logs = self.cluster.dump_tasks()  # what every process waits on, for the report
                    raise DemoError(
                        f"the consumer did not reach the write heads in {STEP_TIMEOUT_S:.0f} s: behind {behind} "
                        f"(each process wrote its tasks' stacks to its log: {len(logs)} logs under the data dir)"
                    )
                time.sleep(tunables.LOCAL_POLL_INTERVAL_S * 4)
        for shard_id, journal in zip(self.shard_ids, self.journals, strict=True):
            shards.stat_shard(shard_id, {journal: self.heads[journal]}, timeout=STEP_TIMEOUT_S)

    def check_consumer(self) -> None:
        counts = wordcount.store_counts(self.db_dir)
        if os.environ.get(TEST_DROP_WORD_ENV):
            top = self.expected.most_common(1)[0][0]
            counts[top] = counts.get(top, 0) - 1
            self.console.print(
                f"test hook {TEST_DROP_WORD_ENV}: one '{top}' dropped from the consumer's counts"
            )
        self.consumer_counts = counts
        self.check(
            counts == dict(self.expected),
            f"consumer counts equal the corpus: {sum(counts.values())} words, {len(counts)} distinct",
            f"consumer counts differ from the corpus: {_diff(dict(self.expected), counts)}",
        )
        # Exactly once downstream too: each word's published counts are 1..n, once each, in order.
        # Read-your-writes downstream: every shard's last ACK is below the head once stat returned.
        head = self.client.read_head(wordcount.COUNTS_JOURNAL)
        by_word: dict[str, list[int]] = {}
        reader = ReadCommitted(
            self.client, wordcount.COUNTS_JOURNAL, block=True, end_offset=head, skip_acks=True
        )
        for env in reader:
            by_word.setdefault(env.message["word"], []).append(env.message["count"])
        bad = sorted(w for w, ns in by_word.items() if ns != list(range(1, len(ns) + 1)))
        totals = {w: len(ns) for w, ns in by_word.items()}
        self.check(
            not bad and totals == dict(self.expected),
            f"{wordcount.COUNTS_JOURNAL}: each word's committed counts run 1..n exactly once",
            f"{wordcount.COUNTS_JOURNAL} differs from the corpus: {sum(totals.values())} counts read; "
            f"words repeating or skipping a count: {bad[:5]}; {_diff(dict(self.expected), totals)}",
        )

    def side_effects(self) -> None:
        """The batch-report example on the same cluster: a report file per transaction, exactly once."""
        try:
            result = reports.run(
                self.cluster, REPORT_EVENTS, work_dir=self.reports_dir, timeout=STEP_TIMEOUT_S
            )
        except reports.VerificationError as exc:
            self.check(False, "", f"batch reports (side effects): {exc}")
            return
        left = reports.leftovers(self.client, result["store"])
        self.check(
            left == {"staged": [], "unreferenced": []},
            f"side effects: {result['events']} events in {result['reports']} committed report files, "
            "each matching its message's SHA-1, nothing staged or unreferenced left",
            f"batch reports (side effects) left objects behind: {left}",
        )

    def flush(self) -> int:
        return len(self.cluster.flush_fragments())

    def spark(self) -> None:
        try:
            rows = spark_word_counts(self.store)
        except SparkUnavailable as exc:
            self.spark_note = str(exc)
            self.console.print(escape(self.spark_note), soft_wrap=True)
            return
        self.spark_counts = rows
        self.check(
            rows == self.consumer_counts,
            f"Spark SQL counts over the persisted fragments equal the consumer's ({len(rows)} words)",
            f"Spark SQL counts differ from the consumer's: {_diff(self.consumer_counts, rows)}",
        )

    # --- the whole run
    def run(self, keep: bool) -> bool:
        size = self.size
        self.console.print(
            f"[bold]gazette-py demo[/bold]: {size.words} words, {COMMITTED_PUBLISHERS + TXN_PUBLISHERS} producers, "
            f"{PARTITIONS} journals (R={REPLICATION}), {BROKERS} brokers in {len(ZONES)} zones, "
            f"{CONSUMER_PROCESSES} consumer processes; data in {self.data_dir}",
            soft_wrap=True,
        )
        t0 = time.monotonic()
        try:
            self.phase(
                f"start etcd and {BROKERS} brokers in zones {', '.join(ZONES)} (subprocesses)", self.start
            )
            self.phase(
                f"create {PARTITIONS} word journals and {wordcount.COUNTS_JOURNAL} (R={REPLICATION})",
                self.create_journals,
            )
            self.phase(
                f"start the word-count consumer ({CONSUMER_PROCESSES} processes, hot standby)",
                self.start_consumer,
            )
            self.phase(
                "publish the corpus; SIGKILL a broker and the primary consumer on the way", self.publish
            )
            self.phase("recover: restart the consumer; full routes and hot standbys again", self.recover)
            self.phase("consumer reads through the write heads (stat read-your-writes)", self.catch_up)
            self.phase("check the consumer's counts (store and output journal)", self.check_consumer)
            for k in self.kills:
                self.check(
                    k.work_remained,
                    f"{k.what} kill landed while work remained: {k.target}, {sum(k.unread.values())} bytes unread, "
                    f"{k.to_publish} words still to publish",
                    f"{k.what} kill of {k.target} landed with no work remaining (the consumer had read everything)",
                )
            self.phase(
                "batch reports: a report file per transaction, side effects exactly once", self.side_effects
            )
            n_flushed = self.phase("flush spools to the file:// store", self.flush)
            self.phase("Spark SQL over the persisted fragments (fragments_io)", self.spark)
        except Exception as exc:
            self.error = f"the demo stopped: {type(exc).__name__}: {exc}"
            n_flushed = 0
        self.report(time.monotonic() - t0, n_flushed)
        for line in self.failures:
            self.console.print(f"[red]MISMATCH[/red] {escape(line)}", soft_wrap=True)
        if self.error:
            self.console.print(f"[red]FAILED[/red] {escape(self.error)}", soft_wrap=True)
        ok = not self.failures and not self.error
        if ok:
            self.console.print("[bold green]demo ok[/bold green]: every check passed")
        if keep and self.cluster.brokers:
            self.keep_up()
        return ok

    def report(self, elapsed: float, n_flushed: int) -> None:
        console = self.console
        table = Table(title=f"word counts (top {TOP_WORDS})")
        for col in ("word", "corpus", "consumer", "Spark SQL"):
            table.add_column(col, justify="left" if col == "word" else "right")
        spark = self.spark_counts
        for w, n in self.expected.most_common(TOP_WORDS):
            table.add_row(
                w,
                str(n),
                str(self.consumer_counts.get(w, "-")),
                "skipped" if spark is None else str(spark.get(w, 0)),
            )
        table.add_row(
            "[bold]all words[/bold]", str(self.expected.total()), str(sum(self.consumer_counts.values())),
            "skipped" if spark is None else str(sum(spark.values())),
        )  # fmt: skip
        console.print(table)
        if self.rolled_back:
            console.print(
                f"rolled back: {self.rolled_back.total()} words in aborted transactions, in the journals "
                "but counted by neither the consumer nor Spark",
                soft_wrap=True,
            )
        kills = Table(title="SIGKILLs")
        for col in ("killed", "role", "published", "to publish", "consumer unread (bytes)"):
            kills.add_column(col, justify="left" if col in ("killed", "role") else "right")
        for k in self.kills:
            kills.add_row(
                k.target, k.detail, str(k.published), str(k.to_publish), str(sum(k.unread.values()))
            )
        console.print(kills)
        timing = Table(title="phases")
        timing.add_column("phase")
        timing.add_column("seconds", justify="right")
        for p in self.phases:
            timing.add_row(p.name if p.ok else f"[red]{escape(p.name)} (failed)[/red]", f"{p.seconds:.1f}")
        timing.add_row("[bold]total[/bold]", f"{elapsed:.1f}")
        console.print(timing)
        for line in self.checks:
            console.print(f"[green]✓[/green] {escape(line)}", soft_wrap=True)
        console.print(f"data: {self.data_dir}", soft_wrap=True)
        console.print(f"  fragments ({n_flushed} flushed at the end): {self.store}", soft_wrap=True)
        console.print(f"  consumer stores (sqlite): {self.db_dir}", soft_wrap=True)
        console.print(
            f"  batch reports (side effects) and their shard's store: {self.reports_dir}", soft_wrap=True
        )
        console.print(
            f"  etcd, spools and process logs: {self.data_dir}/{{etcd,spool,*.log,consumers}}", soft_wrap=True
        )
        console.print("open the notebooks: make lab (notebooks/01-quickstart.ipynb)", soft_wrap=True)

    def keep_up(self) -> None:
        endpoints = ",".join(self.cluster.broker_endpoints)
        self.console.print(
            f"cluster left up: export GAZETTE_BROKER={endpoints} GAZETTE_ETCD={self.cluster.etcd_endpoint} "
            f"GAZETTE_CONSUMER_ROOT={CONSUMER_ROOT}; then `gazette journals list`, `gazette shards list`; "
            "Ctrl-C stops it",
            soft_wrap=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass

    def close(self) -> None:
        self.cluster.close()


def _primary_and_standby(shards: list[ShardInfo]) -> bool:
    return bool(shards) and all(
        sorted(r.status.code for r in s.replicas) == sorted([ReplicaCode.PRIMARY, ReplicaCode.STANDBY])
        for s in shards
    )


def _diff(want: dict[str, int], got: dict[str, int]) -> str:
    keys = sorted(set(want) | set(got), key=lambda w: (-want.get(w, 0), w))
    wrong = [f"{w}: {want.get(w, 0)} != {got.get(w, 0)}" for w in keys if want.get(w, 0) != got.get(w, 0)]
    return f"{len(wrong)} words differ ({'; '.join(wrong[:5])}{'; ...' if len(wrong) > 5 else ''})"


# --- Spark ----------------------------------------------------------------------------------------


class SparkUnavailable(Exception):
    """Spark cannot run here (no Java, or no pyspark); the message is the one line the demo prints."""


def spark_word_counts(store: str) -> dict[str, int]:
    """Committed word counts of the persisted `examples/words/` fragments under `store`, by Spark SQL
    over a fragments_io view. Raises SparkUnavailable (with how to fix it) where Spark cannot run."""
    try:
        import fragments_io
    except ImportError as exc:  # pyspark or pyarrow missing
        raise SparkUnavailable(
            f"Spark skipped: {exc}; install the extra with `pip install -e '.[spark]'`"
        ) from None
    try:
        if os.environ.get(TEST_NO_JAVA_ENV):
            raise fragments_io.JavaNotFoundError(f"{TEST_NO_JAVA_ENV} is set")
        fragments_io.check_java()
    except fragments_io.JavaNotFoundError:
        raise SparkUnavailable(JAVA_MISSING) from None
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local run: no "resolves to a loopback" warning
    spark = fragments_io.spark_session("local[2]", "gazette-demo", **SPARK_CONF)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        fragments_io.sql_view(spark, "words", store=store, journals=WORDS_PREFIX)  # committed by default
        return {r.word: int(r.n) for r in spark.sql(SPARK_SQL).collect()}
    finally:
        spark.stop()


def run_demo(*, small: bool, keep: bool, data_dir: str, console: Console, columnar: bool = False) -> bool:
    """Runs the demo in `data_dir` (emptied first); True when every check passed. `columnar` counts
    with ColumnarWordCount (the columnar consumer path, needs pyarrow), under the same checks."""
    data_dir = os.path.abspath(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    demo = _Demo(SMALL if small else FULL, data_dir, console, columnar)
    try:
        return demo.run(keep)
    finally:
        demo.close()
