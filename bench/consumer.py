"""Consumer figures: the word-count example's exactly-once rate end to end, and its fail-over time.

End to end: words pre-published in transactions, then one `gazette consumer run` subprocess counts
them into sqlite (SQLStore) until its checkpoint reads through the write heads with ACKs written;
limit: ReadCommitted of the same journal in the same run. The columnar word count
(ColumnarWordCount, a BatchApplication) counts the same journal in a second subprocess, and the
columnar reader (ReadCommittedTables) reads it, both beside the per-message rows of the same run. Fail-over: SIGKILL of a shard's primary until
its hot standby commits a transaction; limit: the lease TTL + 5 s. `python -m bench.consumer [--quick]
[--profile]` runs them alone (or profiles an in-process consumer)."""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import os
import pstats
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from bench import runner
from bench.figures import Figure, Target
from bench.messages import TXN_MESSAGES, RateTarget, publish, read_rate
from gazette.client.sync import Client
from gazette.consumer import ConsumerGroup, Shard, ShardSpec
from gazette.consumer.client import ShardClient, ShardInspection
from gazette.consumer.consumer import ShardInfo
from gazette.consumer.status import ReplicaCode
from gazette.consumer.store import Store
from gazette.examples.wordcount import JSON_LABELS, WordCount
from gazette.examples.wordcount_columnar import WORD_SCHEMA, ColumnarWordCount
from gazette.local.cluster import LocalCluster
from gazette.message import Publisher, ReadCommitted
from gazette.message.columnar import ReadCommittedTables

GOAL_MSGS_PER_S = 100_000  # issue 5: end-to-end exactly-once word count, one consumer process
FAILOVER_SLACK_S = 5.0  # issue 5: fail-over within the lease TTL plus this
VOCABULARY_WORDS = 10_000  # distinct words, drawn uniformly (seeded by the run)
MAX_TXN_DURATION = "1s"  # the example's default (gazette.examples.wordcount.shards)
FAILOVER_WORDS = 10  # published (committed, one append) after the kill: the new primary's first transaction
LIMIT_PASSES = 2  # the ReadCommitted limit is the best of this many passes over the run's journal
STAT_TIMEOUT_S = 300.0
FAILOVER_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.02
UNIT = "k msg/s"

E2E_GOAL = RateTarget("value", GOAL_MSGS_PER_S / 1000, "≥ 100k msg/s")
COLUMNAR_E2E_TARGET = Target("ratio", 1.0, "≥ 1.0 of ReadCommitted (issue 26)")
FAILOVER_TARGET = Target("ratio", 1.0, "≤ lease TTL + 5 s")


class ConsumerBenchError(RuntimeError):
    """A consumer figure could not be measured (wrong counts, a shard that never got its primary...)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    runs: int  # end-to-end runs
    words: int  # per end-to-end run
    failovers: int  # fail-over runs (each waits out one lease TTL)


QUICK = Settings("quick", runs=5, words=100_000, failovers=3)
FULL = Settings("full", runs=7, words=300_000, failovers=5)


def settings_for(bench: runner.Settings) -> Settings:
    """The consumer settings matching `python -m bench`'s (quick or full, same number of runs)."""
    base = QUICK if bench.name == QUICK.name else FULL
    return dataclasses.replace(base, runs=bench.runs)


def consumer_figures() -> dict[str, Figure]:
    figures = [
        Figure(
            "cons_read_committed", f"Limit: ReadCommitted of the words, txns of {TXN_MESSAGES}", UNIT, True
        ),
        Figure(
            "cons_e2e",
            "Word count e2e exactly-once (SQLStore, 1 shard)",
            UNIT,
            True,
            "cons_read_committed",
            E2E_GOAL,
        ),
        Figure(
            "cons_read_committed_columnar",
            "Columnar reader (ReadCommittedTables) of the words",
            UNIT,
            True,
            "cons_read_committed",
        ),
        Figure(
            "cons_e2e_columnar",
            "Word count e2e columnar (ColumnarWordCount, 1 shard)",
            UNIT,
            True,
            "cons_read_committed",
            COLUMNAR_E2E_TARGET,
        ),
        Figure("cons_failover_limit", "Limit: consumer lease TTL + 5 s", "s", False),
        Figure(
            "cons_failover_primary",
            "Fail-over: SIGKILL to standby PRIMARY",
            "s",
            False,
            "cons_failover_limit",
        ),
        Figure(
            "cons_failover",
            "Fail-over: SIGKILL to standby's first commit",
            "s",
            False,
            "cons_failover_limit",
            FAILOVER_TARGET,
        ),
    ]
    return {f.key: f for f in figures}


def make_words(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` word messages drawn from VOCABULARY_WORDS distinct words."""
    rng = random.Random(seed)
    vocabulary = [f"w{i:05d}" for i in range(VOCABULARY_WORDS)]
    return [{"word": w} for w in rng.choices(vocabulary, k=count)]


# --- the cluster's journals and shards ----------------------------------------------------------------


def _apply_journals(cluster: LocalCluster, client: Client, names: list[str]) -> None:
    client.apply_journals(
        cluster.journal_spec(
            name,
            labels=JSON_LABELS,
            fragment_length=runner.FRAGMENT_LENGTH,
            compression="none",
            refresh_interval="1s",
        )
        for name in names
    )
    cluster.wait_for_routes(names)


def _consumer_root(cluster: LocalCluster, name: str) -> str:
    return f"{cluster.root.rsplit('/', 1)[0]}/consumers/{name}"


def _db_path(db_dir: str, shard_id: str) -> str:
    """Where WordCount.new_store keeps the shard's sqlite file."""
    return os.path.join(db_dir, shard_id.replace("/", "_") + ".db")


def _stored_total(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT COALESCE(SUM(count), 0) FROM counts").fetchone()[0])
    finally:
        conn.close()


def _primary_of(shards: list[ShardInfo], shard_id: str) -> str | None:
    """The member suffix of the shard's PRIMARY replica, if it has one."""
    for s in shards:
        if s.spec.id == shard_id and s.primary is not None and s.primary.status.code == ReplicaCode.PRIMARY:
            return s.primary.suffix
    return None


def _standby_of(shards: list[ShardInfo], shard_id: str) -> str | None:
    for s in shards:
        if s.spec.id == shard_id:
            for r in s.replicas:
                if r.slot > 0 and r.status.code == ReplicaCode.STANDBY:
                    return r.suffix
    return None


def _member_index(group: ConsumerGroup, suffix: str) -> int:
    for m in group.members:
        if m.suffix == suffix:
            return m.index
    raise ConsumerBenchError(f"no member of the consumer group has suffix {suffix!r}")


# --- end to end ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class E2E:
    rate: float  # msgs/s, first message to the last transaction's ACKs
    seconds: float
    startup_s: float  # shard spec applied to the first message (assignment, store, checkpoint, first read)
    transactions: int
    commit_s: float  # sum of the transactions' store commits
    ack_s: float  # sum of their ACK appends (after commit)


def consume(
    group: ConsumerGroup, shard_id: str, journal: str, head: int, words: int, acks: bool = True
) -> E2E:
    """Applies shard `shard_id` reading `journal` (already holding `words` words up to `head`) and
    waits until it read through `head` with its ACKs written; times it from the shard's first message
    to the end of its last transaction (the consumer's own clock, from Inspect)."""
    applied = time.time()
    group.apply([ShardSpec(shard_id, [journal], max_txn_duration=MAX_TXN_DURATION)])
    group.wait_for(
        lambda s: _primary_of(s, shard_id) is not None, STAT_TIMEOUT_S, f"shard {shard_id} PRIMARY"
    )
    shards = group.client()
    shards.stat_shard(shard_id, {journal: head}, timeout=STAT_TIMEOUT_S)
    info = shards.inspect(shard_id)
    return _e2e_of(info, applied, words, acks)


def _e2e_of(info: ShardInspection, applied: float, words: int, with_acks: bool = True) -> E2E:
    """The run's figures from Inspect; the transactions' messages count ACKs unless the shard's
    application is columnar (`with_acks` False: its tables leave them out)."""
    txns = info.transactions
    if not txns:
        raise ConsumerBenchError(f"shard {info.shard} read through its journal without a transaction")
    if info.transactions_completed > len(txns):
        raise ConsumerBenchError(
            f"shard {info.shard} completed {info.transactions_completed} transactions but Inspect reports "
            f"the last {len(txns)} only: raise MAX_TXN_DURATION or lower the words per run"
        )
    consumed = sum(t.messages for t in txns)
    acks = -(-words // TXN_MESSAGES) if with_acks else 0
    if consumed != words + acks:
        raise ConsumerBenchError(
            f"shard {info.shard} consumed {consumed} envelopes, expected {words} words and {acks} ACKs"
        )
    first, last = txns[0], txns[-1]
    end = last.began_at + last.consume_s + last.commit_s + last.ack_s
    seconds = end - first.began_at
    return E2E(
        rate=words / seconds,
        seconds=seconds,
        startup_s=first.began_at - applied,
        transactions=len(txns),
        commit_s=sum(t.commit_s for t in txns),
        ack_s=sum(t.ack_s for t in txns),
    )


def _run_e2e(
    cluster: LocalCluster,
    client: Client,
    settings: Settings,
    figures: dict[str, Figure],
    log: Callable[[str], None],
) -> None:
    db_dir = os.path.join(cluster.data_dir, "bench-wordcount-e2e")
    os.makedirs(db_dir, exist_ok=True)
    output = "bench/consumer/counts"
    _apply_journals(cluster, client, [output])
    group = cluster.run_consumer(
        WordCount(db_dir, output), (), processes=1, root=_consumer_root(cluster, "bench-wordcount-e2e")
    )
    col_dir = os.path.join(cluster.data_dir, "bench-wordcount-columnar")
    os.makedirs(col_dir, exist_ok=True)
    col_output = "bench/consumer/counts-columnar"
    _apply_journals(cluster, client, [col_output])
    col_group = cluster.run_consumer(
        ColumnarWordCount(col_dir, col_output), (), processes=1,
        root=_consumer_root(cluster, "bench-wordcount-columnar"),
    )  # fmt: skip
    try:
        n = settings.words
        acks = -(-n // TXN_MESSAGES)
        for i in range(settings.runs):
            log(f"consumer e2e run {i + 1}/{settings.runs}")
            journal, shard_id = f"bench/consumer-{i}/words", f"bench-count-{i}"
            _apply_journals(cluster, client, [journal])
            pub_rate = publish(client, journal, make_words(n, seed=i), txn=True)
            head = client.read_head(journal)
            limit = max(
                read_rate(ReadCommitted(client, journal), n + acks, "ReadCommitted of the words")
                for _ in range(LIMIT_PASSES)
            )
            columnar_read = max(
                read_rows(ReadCommittedTables(client, journal, WORD_SCHEMA), n) for _ in range(LIMIT_PASSES)
            )
            e2e = consume(group, shard_id, journal, head, n)
            stored = _stored_total(_db_path(db_dir, shard_id))
            if stored != n:
                raise ConsumerBenchError(f"shard {shard_id} stored counts summing to {stored}, expected {n}")
            group.apply([], deletes=[shard_id])
            col_id = f"bench-count-columnar-{i}"
            col = consume(col_group, col_id, journal, head, n, acks=False)
            stored = _stored_total(_db_path(col_dir, col_id))
            if stored != n:
                raise ConsumerBenchError(f"shard {col_id} stored counts summing to {stored}, expected {n}")
            col_group.apply([], deletes=[col_id])
            figures["cons_read_committed"].samples.append(limit / 1000)
            figures["cons_e2e"].samples.append(e2e.rate / 1000)
            figures["cons_read_committed_columnar"].samples.append(columnar_read / 1000)
            figures["cons_e2e_columnar"].samples.append(col.rate / 1000)
            log(
                f"  e2e {e2e.rate / 1000:.4g}k msg/s ({n} words in {e2e.seconds:.2f} s, {e2e.transactions} txns, "
                f"commits {e2e.commit_s:.2f} s, ACKs {e2e.ack_s:.2f} s; apply to first message "
                f"{e2e.startup_s:.2f} s), ReadCommitted {limit / 1000:.4g}k, published at {pub_rate / 1000:.4g}k"
            )
            log(
                f"  columnar e2e {col.rate / 1000:.4g}k msg/s ({col.seconds:.2f} s, {col.transactions} txns, "
                f"{col.rate / e2e.rate:.2f}x per-message, {col.rate / limit:.2f} of ReadCommitted); "
                f"columnar reader {columnar_read / 1000:.4g}k ({columnar_read / limit:.2f}x ReadCommitted)"
            )
    finally:
        group.close()
        col_group.close()


def read_rows(reader: ReadCommittedTables, expected: int) -> float:
    """Rows per second of a columnar reader over a whole journal (all `expected` rows)."""
    start = time.perf_counter()
    count = sum(t.num_rows for t in reader)
    elapsed = time.perf_counter() - start
    if count != expected:
        raise ConsumerBenchError(f"ReadCommittedTables yielded {count} rows, expected {expected}")
    return count / elapsed


# --- fail-over ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Failover:
    primary_s: float  # SIGKILL until the standby is PRIMARY (etcd)
    commit_s: float  # SIGKILL until its first transaction committed and acknowledged


def _publish_committed(client: Client, journal: str, words: list[dict[str, Any]]) -> int:
    with Publisher(client) as pub:
        for w in words:
            pub.publish_committed(journal, w)
        pub.flush()
    return client.read_head(journal)


def _wait_standby_ready(group: ConsumerGroup, shard_id: str) -> tuple[str, str]:
    """Waits for a PRIMARY and a STANDBY of the shard; returns their member suffixes."""
    shards = group.wait_for(
        lambda s: _primary_of(s, shard_id) is not None and _standby_of(s, shard_id) is not None,
        FAILOVER_TIMEOUT_S,
        f"shard {shard_id} to have a PRIMARY and a STANDBY",
    )
    primary, standby = _primary_of(shards, shard_id), _standby_of(shards, shard_id)
    assert primary is not None and standby is not None
    return primary, standby


def failover(
    cluster: LocalCluster, client: Client, group: ConsumerGroup, shard_id: str, journal: str
) -> Failover:
    """SIGKILLs the shard's primary, publishes FAILOVER_WORDS words, and times until the standby is
    PRIMARY and until it has committed (and acknowledged) a transaction reading them; restarts the
    killed member afterwards (it becomes the next standby)."""
    primary, standby = _wait_standby_ready(group, shard_id)
    killed, heir = _member_index(group, primary), _member_index(group, standby)
    heir_client = ShardClient(group.endpoint(heir), loop=cluster._loop)
    try:
        start = time.monotonic()
        group.kill(killed)
        head = _publish_committed(client, journal, make_words(FAILOVER_WORDS, seed=int(start)))
        deadline = start + FAILOVER_TIMEOUT_S
        while _primary_of(group.list_shards(), shard_id) != standby:
            if time.monotonic() > deadline:
                raise ConsumerBenchError(
                    f"standby {standby} of {shard_id} was not PRIMARY {FAILOVER_TIMEOUT_S:.0f} s after the kill"
                )
            time.sleep(POLL_INTERVAL_S)
        promoted = time.monotonic()
        stat = heir_client.stat_shard(shard_id, {journal: head}, timeout=FAILOVER_TIMEOUT_S)
        committed = time.monotonic()
    finally:
        heir_client.close()
    if stat.member[1] != standby:
        raise ConsumerBenchError(
            f"the stat of {shard_id} was answered by {stat.member}, not the standby {standby}"
        )
    group.restart(killed)
    return Failover(promoted - start, committed - start)


def _run_failover(
    cluster: LocalCluster,
    client: Client,
    settings: Settings,
    figures: dict[str, Figure],
    log: Callable[[str], None],
) -> None:
    db_dir = os.path.join(cluster.data_dir, "bench-wordcount-failover")
    os.makedirs(db_dir, exist_ok=True)
    journal, output, shard_id = "bench/failover/words", "bench/failover/counts", "bench-failover"
    _apply_journals(cluster, client, [journal, output])
    spec = ShardSpec(shard_id, [journal], max_txn_duration=MAX_TXN_DURATION, hot_standbys=1)
    group = cluster.run_consumer(
        WordCount(db_dir, output),
        [spec],
        processes=2,
        root=_consumer_root(cluster, "bench-wordcount-failover"),
    )
    try:
        head = _publish_committed(client, journal, make_words(FAILOVER_WORDS, seed=0))
        group.wait_for(
            lambda s: _primary_of(s, shard_id) is not None, FAILOVER_TIMEOUT_S, f"{shard_id} PRIMARY"
        )
        group.client().stat_shard(shard_id, {journal: head}, timeout=FAILOVER_TIMEOUT_S)
        limit = cluster.lease_ttl_s + FAILOVER_SLACK_S
        for i in range(settings.failovers):
            log(f"consumer fail-over run {i + 1}/{settings.failovers}")
            f = failover(cluster, client, group, shard_id, journal)
            figures["cons_failover_limit"].samples.append(limit)
            figures["cons_failover_primary"].samples.append(f.primary_s)
            figures["cons_failover"].samples.append(f.commit_s)
            log(
                f"  PRIMARY after {f.primary_s:.2f} s, first commit after {f.commit_s:.2f} s (limit {limit:.0f} s)"
            )
        stored = _stored_total(_db_path(db_dir, shard_id))
        expected = FAILOVER_WORDS * (settings.failovers + 1)
        if stored != expected:
            raise ConsumerBenchError(
                f"shard {shard_id} stored counts summing to {stored}, expected {expected}"
            )
    finally:
        group.close()


def run(settings: Settings, log: Callable[[str], None]) -> dict[str, Figure]:
    """Measures the end-to-end rate `settings.runs` times and the fail-over `settings.failovers`
    times, against one subprocess broker (two cores: more brokers would only compete for them)."""
    figures = consumer_figures()
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        _run_e2e(cluster, client, settings, figures, log)
        _run_failover(cluster, client, settings, figures, log)
    return figures


# --- profiling ----------------------------------------------------------------------------------------


class _ProfiledWordCount(WordCount):
    """WordCount whose shard worker thread runs under `profiler` (enabled where the store is made)."""

    def __init__(self, db_dir: str, output: str, profiler: cProfile.Profile) -> None:
        super().__init__(db_dir, output)
        self.profiler = profiler

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        self.profiler.enable()
        return super().new_store(shard, recorder)


class _ProfiledColumnarWordCount(ColumnarWordCount):
    """ColumnarWordCount whose shard worker thread runs under `profiler` (as _ProfiledWordCount)."""

    def __init__(self, db_dir: str, output: str, profiler: cProfile.Profile) -> None:
        super().__init__(db_dir, output)
        self.profiler = profiler

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        self.profiler.enable()
        return super().new_store(shard, recorder)


def profile(words: int, top: int, columnar: bool = False) -> str:
    """Runs the word count of `words` pre-published words with the consumer in this process (the
    broker stays a subprocess) under cProfile, on the loop thread (reads, sequencing, appends) and on
    the shard's worker thread (the application and sqlite); returns the top entries of each.
    `columnar` profiles ColumnarWordCount instead."""
    out = io.StringIO()
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        journal, output, shard_id = "bench/profile/words", "bench/profile/counts", "bench-profile"
        _apply_journals(cluster, client, [journal, output])
        publish(client, journal, make_words(words, seed=0), txn=True)
        head = client.read_head(journal)
        db_dir = os.path.join(cluster.data_dir, "bench-wordcount-profile")
        os.makedirs(db_dir, exist_ok=True)
        # CPU time of each thread: wall time would charge one thread's waits for the GIL to whatever
        # it was running when the other one took it.
        worker_side, loop_side = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
        profiled = _ProfiledColumnarWordCount if columnar else _ProfiledWordCount
        group = cluster.run_consumer(
            profiled(db_dir, output, worker_side), (), processes=1,
            root=_consumer_root(cluster, "bench-wordcount-profile"), mode="inprocess",
        )  # fmt: skip
        cluster._loop.loop.call_soon_threadsafe(loop_side.enable)
        e2e = consume(group, shard_id, journal, head, words, acks=not columnar)
        cluster._loop.run(_disable(loop_side))
        consumer = group.consumers[0]
        assert consumer is not None
        consumer.shards[shard_id].worker.submit(worker_side.disable).result()
        print(
            f"##### word count of {words} words, in-process consumer under cProfile: {e2e.rate / 1000:.1f}k msg/s "
            f"({e2e.seconds:.2f} s, {e2e.transactions} txns, commits {e2e.commit_s:.2f} s, ACKs {e2e.ack_s:.2f} s)",
            file=out,
        )
        for name, prof in (("loop thread", loop_side), ("shard worker thread", worker_side)):
            for order in ("tottime", "cumulative"):
                print(f"\n=== {name}: top {top} by {order} ===", file=out)
                pstats.Stats(prof, stream=out).strip_dirs().sort_stats(order).print_stats(top)
    return out.getvalue()


async def _disable(prof: cProfile.Profile) -> None:
    prof.disable()


def main() -> None:
    from rich.console import Console

    from bench import report

    parser = argparse.ArgumentParser(prog="python -m bench.consumer", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.runs} runs of {QUICK.words} words")
    parser.add_argument("--runs", type=int, help="override the number of end-to-end runs")
    parser.add_argument("--failovers", type=int, help="override the number of fail-over runs")
    parser.add_argument("--words", type=int, help="override the words per end-to-end run")
    parser.add_argument("--profile", action="store_true", help="instead, profile one in-process word count")
    parser.add_argument("--top", type=int, default=25, help="entries per profile listing")
    parser.add_argument("--columnar", action="store_true", help="with --profile: the columnar word count")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    for field in ("runs", "failovers", "words"):
        value = getattr(args, field)
        if value is not None:
            if value < 1:
                parser.error(f"--{field} {value} must be at least 1")
            settings = dataclasses.replace(settings, **{field: value})
    if args.profile:
        print(profile(settings.words, args.top, args.columnar))
        return
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)  # piped or captured: don't wrap the table
    figures = run(settings, log=console.log)
    title = (
        f"gazette-py consumer bench ({settings.name}, median of {settings.runs} / {settings.failovers} runs)"
    )
    report.print_table(report.rows_of(figures), title, console)
    e2e = figures["cons_e2e"]
    console.log(f"{e2e.name}: {e2e.value * 1000 / GOAL_MSGS_PER_S:.2f} of the {GOAL_MSGS_PER_S:,} msg/s goal")


if __name__ == "__main__":
    main()
