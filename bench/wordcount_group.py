"""Our word count in Kafka Streams' shape: 4 journals, a group of 2 consumer processes, a SIGKILL.

bench/consumer.py times one shard in one `gazette consumer run` process with no failure; Kafka
Streams' peer (bench/kstreams_peer.py) runs on 4 partitions in 2 JVMs, one of them SIGKILLed mid-run
and restarted. This part runs ours the same way, beside it in the same `python -m bench` run, for the
columnar word count (ColumnarWordCount, the main row) and the per-message one (WordCount):

* the corpus of bench.consumer.make_words (same words, same seed as Kafka Streams' run of that
  index), split over `partitions` journals by gazette.examples.wordcount.partition_of as the example
  splits it (the example's layout: `<prefix>/words/part-NNN`, one shard `count-NNN` per part, one
  counts journal `<prefix>/word-counts-<app>` for all shards; a fresh prefix per run), published in
  transactions of bench.messages.TXN_MESSAGES before the shards exist (untimed; Kafka Streams' corpus
  is produced beforehand too, in a transaction committed once its instances run);
* `instances` members (`gazette consumer run` subprocesses of a LocalCluster's ConsumerGroup) started
  first (each serving), then the shards applied at once, so that the allocator spreads them;
* the run is timed from the first message a shard takes (the earliest first transaction's start,
  the consumer's own clock, from Inspect) until the last shard has read through its journal's head
  with its counts stored and ACKs written (stat_shard, then the end of each shard's last transaction
  from Inspect of its primary), as bench.consumer times one shard. A shard that had read its whole
  journal in the killed process (or before it moved) is taken to end at the kill, an upper bound;
* the kill, at a known point as Kafka Streams' (whose victim blocks after `pause_after` count
  updates, kill_at of an instance's share): the applications are the example's, made able to pause
  (bench/wordcount_pause.py): the first member process to have counted `pause_after` words blocks
  its shards mid-transaction and says so in a file; this process, polling for it every POLL_S,
  SIGKILLs that member (group.kill) and restarts it at once (group.restart: a new member). Its
  shards are taken over once its lease expires (the cluster's consumer lease TTL, as Kafka Streams'
  instance waits out its group session), and redo what its open transactions had read: `rejoined`
  is the kill to every one of its shards having a live PRIMARY again. The start of a shard killed in
  its first transaction is when its process was first asked to consume it (that process' clock,
  recorded by the application; Inspect of its next primary no longer knows it);
* the oracle: the counts journal read with ReadCommitted holds each word's counts 1, 2, ..., n once
  each, in order, and no other word (kstreams_peer.check_counts), and the shards' stores hold
  exactly the corpus' counts.

Rows: rates in k msg/s whose limit and peer is Kafka Streams' row of the same run (issue 26's goal:
at least as fast). `python -m bench.kstreams_peer --ours-group` (or `--ours`) runs it beside the peer.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from bench import consumer, kstreams_peer, wordcount_pause
from bench.figures import Figure, Target
from bench.messages import publish
from gazette.consumer import Application, ConsumerGroup, ShardSpec
from gazette.consumer.client import ShardInspection
from gazette.consumer.consumer import ShardInfo
from gazette.examples.wordcount import partition_of, read_counts, store_counts
from gazette.local.cluster import LocalCluster

UNIT = consumer.UNIT
MAX_TXN_DURATION = consumer.MAX_TXN_DURATION  # the example's default
POLL_S = 0.01  # for the paused member's file (it waits, mid-transaction, to be killed)
RUN_TIMEOUT_S = 300.0  # a bound on a hung run, not a measure
REJOIN_TIMEOUT_S = 120.0  # the kill to the victim's shards served again (a lease TTL, normally)
INSPECT_TIMEOUT_S = 10.0
PEER_KEY = "kstreams_e2e"
PEER_TARGET = Target("ratio", 1.0, "≥ 1.0 of Kafka Streams (issue 26)")
APPS = ("columnar", "per-message")

Log = Callable[[str], None]


class GroupBenchError(consumer.ConsumerBenchError):
    """A run of the group word count went wrong (a shard never served, a kill that missed, the oracle)."""


def describe(settings: kstreams_peer.Settings) -> str:
    kill = ", a SIGKILL" if settings.kill else ""
    return f"{settings.partitions} journals, {settings.instances} processes{kill}"


def group_figures(settings: kstreams_peer.Settings = kstreams_peer.FULL) -> dict[str, Figure]:
    """Our two rows, each with Kafka Streams' row as its limit and target (same work, same run)."""
    shape = describe(settings)
    figures = [
        Figure(
            "cons_group_e2e_columnar", f"Word count e2e columnar, {shape}", UNIT, True, PEER_KEY, PEER_TARGET
        ),
        Figure("cons_group_e2e", f"Word count e2e per-message, {shape}", UNIT, True, PEER_KEY, PEER_TARGET),
    ]
    return {f.key: f for f in figures}


# Our figure -> Kafka Streams' figure doing the same work.
PEER_OF = {"cons_group_e2e_columnar": PEER_KEY, "cons_group_e2e": PEER_KEY}
FIGURE_OF = {"columnar": "cons_group_e2e_columnar", "per-message": "cons_group_e2e"}


# --- the layout ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
    """One run's journals and shards, the example's layout under `prefix`."""

    prefix: str
    partitions: int

    def words(self, i: int) -> str:
        return f"{self.prefix}/words/part-{i:03d}"

    @property
    def counts(self) -> str:
        return f"{self.prefix}/word-counts"

    def shard(self, i: int) -> str:
        return f"count-{i:03d}"

    def specs(self) -> list[ShardSpec]:
        return [
            ShardSpec(self.shard(i), [self.words(i)], max_txn_duration=MAX_TXN_DURATION)
            for i in range(self.partitions)
        ]


def publish_corpus(
    client: Any, layout: Layout, words: list[dict[str, Any]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Each word into its partition's journal (transactions of TXN_MESSAGES); per shard, the head of
    its journal and its number of words."""
    parts: list[list[dict[str, Any]]] = [[] for _ in range(layout.partitions)]
    for w in words:
        parts[partition_of(w["word"], layout.partitions)].append(w)
    heads, shares = {}, {}
    for i, part in enumerate(parts):
        if part:
            publish(client, layout.words(i), part, txn=True)
        heads[layout.shard(i)] = client.read_head(layout.words(i))
        shares[layout.shard(i)] = len(part)
    return heads, shares


def _live_primary(shards: list[ShardInfo], shard_id: str, dead: str | None = None) -> str | None:
    """The suffix of the shard's PRIMARY, unless it is `dead` (a killed member whose lease lingers)."""
    suffix = consumer._primary_of(shards, shard_id)
    return None if suffix == dead else suffix


# --- one run ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    rate: float  # words/s, the first message a shard took to the last shard's last transaction
    seconds: float
    startup_s: float  # shards applied to the first message taken
    killed_at_s: float | None  # first message to the SIGKILL
    killed_counted: int | None  # words the killed process had counted (its pause point)
    rejoined_s: float | None  # SIGKILL to each of the victim's shards served by a live PRIMARY
    placement: str  # which member's shards, before the kill and at the end
    output_records: int


def word_count(
    cluster: LocalCluster, client: Any, settings: kstreams_peer.Settings, app_kind: str, layout: Layout,
    heads: Mapping[str, int], shares: Mapping[str, int], expected: Mapping[str, int],
) -> Result:  # fmt: skip
    """One run of `app_kind` ("columnar" or "per-message") over the corpus published in `layout`
    (see the module), in a fresh consumer group with its own root, counts journal and stores; checks
    the oracle."""
    tag = f"{app_kind}-{uuid.uuid4().hex[:8]}"
    db_dir = os.path.join(cluster.data_dir, f"bench-wcgroup-{tag}")
    os.makedirs(db_dir)
    output = f"{layout.counts}-{app_kind}"
    consumer._apply_journals(cluster, client, [output])
    kind = (
        wordcount_pause.PausingColumnarWordCount
        if app_kind == "columnar"
        else wordcount_pause.PausingWordCount
    )
    app: Application = kind(db_dir, output, db_dir, settings.pause_after if settings.kill else None)
    group: ConsumerGroup = cluster.run_consumer(
        app, (), processes=settings.instances, root=consumer._consumer_root(cluster, f"bench-wcgroup-{tag}")
    )
    try:
        result = _timed(group, settings, layout, heads, sum(shares.values()), db_dir)
    finally:
        group.close()
    emitted: dict[str, list[int]] = collections.defaultdict(list)
    records = 0
    for word, count in read_counts(client, output):
        emitted[word].append(count)
        records += 1
    kstreams_peer.check_counts(expected, emitted, every_update=True)
    stored = store_counts(db_dir)
    if stored != expected:
        wrong = sorted(w for w in stored.keys() | expected.keys() if stored.get(w) != expected.get(w))
        raise GroupBenchError(
            f"the stores of {app_kind} hold other counts than the corpus for {len(wrong)} words, e.g. "
            f"{wrong[0]!r}: {stored.get(wrong[0])} stored, {expected.get(wrong[0])} in the corpus"
        )
    return dataclasses.replace(result, output_records=records)


def _timed(
    group: ConsumerGroup, settings: kstreams_peer.Settings, layout: Layout, heads: Mapping[str, int],
    words: int, marker_dir: str,
) -> Result:  # fmt: skip
    """Applies the shards, kills and restarts the member that paused at its kill point, waits until
    every shard read through its head; the timings (the oracle is the caller's)."""
    ids = [layout.shard(i) for i in range(layout.partitions)]
    journal_of = {layout.shard(i): layout.words(i) for i in range(layout.partitions)}
    applied = time.time()
    group.apply(layout.specs())
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed: float | None = None
    killed_counted: int | None = None
    rejoined: float | None = None
    before: dict[str, str | None] = {}
    shards = group.client()
    starts: list[float] = []
    ends: dict[str, float] = {}  # per shard, the end of its last transaction seen
    if settings.kill:
        while (paused := wordcount_pause.read_pause(marker_dir)) is None:
            if time.monotonic() > deadline:
                raise GroupBenchError(
                    f"no member counted {settings.pause_after} words {RUN_TIMEOUT_S:.0f} s after the shards were "
                    "applied"
                )
            time.sleep(POLL_S)
        victim = next(
            (m.index for m in group.members if m.running and group.pid(m.index) == paused["pid"]), None
        )
        if victim is None:
            raise GroupBenchError(f"the paused process {paused['pid']} is no member of the group")
        listing = group.list_shards()
        before = {sid: _live_primary(listing, sid) for sid in ids}
        dead = group.members[victim].suffix
        victim_shards = [sid for sid in ids if before[sid] == dead]
        group.kill(victim)  # SIGKILL, mid-transaction: its lease lingers until it expires
        killed, killed_counted = time.time(), int(paused["counted"])
        # The other members' shards as they were: one may be done and then move to the restarted member.
        for sid in ids:
            if sid not in victim_shards:
                _observe(shards.inspect(sid, timeout=INSPECT_TIMEOUT_S), starts, ends)
        group.restart(victim)  # at once, as a new member
        group.wait_for(
            lambda s: all(_live_primary(s, sid, dead) for sid in victim_shards),
            REJOIN_TIMEOUT_S,
            f"a live PRIMARY of each of {victim_shards} after the kill of {dead}",
        )
        rejoined = time.time() - killed
    for sid in ids:
        shards.stat_shard(sid, {journal_of[sid]: heads[sid]}, timeout=max(1.0, deadline - time.monotonic()))
        _observe(shards.inspect(sid, timeout=INSPECT_TIMEOUT_S), starts, ends)
        if sid not in ends:
            if killed is None:
                raise GroupBenchError(f"shard {sid} read through its journal without a transaction")
            # Its new primary found its journal read: its transactions were done before the kill, in
            # the killed process (or before it moved): the kill bounds when.
            ends[sid] = killed
    listing = group.list_shards()
    after = {sid: _live_primary(listing, sid) for sid in ids}
    start = min(starts + list(wordcount_pause.first_consumes(marker_dir).values()))
    seconds = max(ends.values()) - start
    return Result(
        rate=words / seconds,
        seconds=seconds,
        startup_s=start - applied,
        killed_at_s=None if killed is None else killed - start,
        killed_counted=killed_counted,
        rejoined_s=rejoined,
        placement=_placement(before or after, after),
        output_records=0,
    )


def _observe(info: ShardInspection, starts: list[float], ends: dict[str, float]) -> None:
    """Notes the start of the primary's first transaction (when Inspect still lists it) and the end of
    its last one."""
    txns = info.transactions
    if txns:
        if info.transactions_completed == len(txns):
            starts.append(txns[0].began_at)
        last = txns[-1]
        end = last.began_at + last.consume_s + last.commit_s + last.ack_s
        ends[info.shard] = max(ends.get(info.shard, end), end)


def _placement(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> str:
    """Per shard, the member holding it before the kill and at the end ("000: 0, 001: 1->1'"), by
    index: a restarted member keeps its index, "1'" being its new incarnation."""

    def name(suffix: str | None) -> str:
        if suffix is None:
            return "-"
        index = suffix.split("-")[1] if suffix.startswith("consumer-") else suffix
        return index + ("'" if suffix not in before.values() else "")

    return ", ".join(
        f"{sid[len('count-') :]}: {name(before[sid])}"
        + ("" if after[sid] == before[sid] else f"->{name(after[sid])}")
        for sid in before
    )


# --- the part --------------------------------------------------------------------------------------


def run(settings: kstreams_peer.Settings, log: Log, apps: tuple[str, ...] = APPS) -> dict[str, Figure]:
    """Measures our word count in Kafka Streams' shape `settings.runs` times for each of `apps`, in
    one subprocess broker; GroupBenchError when a run fails (the oracle included)."""
    for kind in apps:
        if kind not in APPS:
            raise ValueError(f"unknown word count {kind!r}: expected one of {', '.join(APPS)}")
    figures = {k: f for k, f in group_figures(settings).items() if k in {FIGURE_OF[a] for a in apps}}
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        log(
            f"{settings.words} words, {describe(settings)} (the first process to count {settings.pause_after} "
            f"words, kill_at={settings.kill_at} of its share, paused and killed), consumer lease TTL "
            f"{cluster.lease_ttl_s} s, transactions up to {MAX_TXN_DURATION}"
        )
        for i in range(settings.runs):
            words = consumer.make_words(settings.words, seed=i)
            expected = collections.Counter(w["word"] for w in words)
            layout = Layout(f"bench/wcgroup-{i}", settings.partitions)
            consumer._apply_journals(cluster, client, [layout.words(k) for k in range(layout.partitions)])
            heads, shares = publish_corpus(client, layout, words)
            for kind in apps:
                log(f"word count group run {i + 1}/{settings.runs}, {kind}")
                r = word_count(cluster, client, settings, kind, layout, heads, shares, expected)
                figures[FIGURE_OF[kind]].samples.append(r.rate / 1000)
                kill = "" if r.killed_at_s is None else (
                    f", SIGKILL {r.killed_at_s:.2f} s in, paused at {r.killed_counted} words counted; its shards "
                    f"served again {r.rejoined_s:.2f} s later"
                )  # fmt: skip
                log(
                    f"  e2e {r.rate / 1000:.4g}k words/s ({settings.words} words in {r.seconds:.2f} s{kill}; "
                    f"apply to first message {r.startup_s:.2f} s; shard: member {r.placement}; "
                    f"{r.output_records} counts, oracle passed; load average {os.getloadavg()[0]:.1f})"
                )
    return figures
