"""The peer: Kafka Streams' exactly-once (v2) word count over the consumer benchmark's corpus.

Our word count (bench/consumer.py, gazette.examples.wordcount) reads words published as JSON messages,
counts them per word in its store and writes every updated count to an output journal, exactly once.
Here Kafka Streams does the same work: a small Java program (bench/kafka_streams, built by `make
kafka-streams` into build/kafka/streams) with `processing.guarantee=exactly_once_v2`, the record cache
off (`statestore.cache.max.bytes=0`: every update is written, as ours writes every count) and the
commit interval at its exactly-once default (100 ms), run as `instances` JVMs of one stream thread each
on the one-node KRaft broker of bench/kafka_peer.py.

One run:

* the corpus of bench.consumer.make_words (same words, same seed as our run of that index), each word
  framed as our Publisher frames it (JSON with its UUID) and keyed by the word, into `partitions`
  partitions as our word count splits words over journals (gazette.examples.wordcount.partition_of),
  produced in one transaction left open (untimed);
* the instances started, and waited for until each runs with tasks of its own; then the transaction
  is committed, so that every word becomes readable at once (ours: words pre-published);
* the run is timed from the first input record an instance takes (its own wall clock) until a
  read_committed reader of the output topic (in this process) has seen every word's final count;
* mid-run, one instance is SIGKILLed and restarted at once with its state directory (ours: a consumer
  process killed): it blocks its stream thread mid-transaction after a known number of count updates
  (`kill_at` of its share; the program's `bench.pause.after.records`) and says so, and the kill
  follows, so that where the kill lands is not left to timing. Its group session times out after SESSION_TIMEOUT_MS (Kafka's minimum,
  as near our consumers' 5 s lease as Kafka allows);
* the oracle: after the instances stop, everything committed to the output topic is read
  (read_committed), and each word's counts must be exactly 1, 2, ..., its count in the corpus, once
  each, in order (with the cache on, the counts must rise strictly to the corpus count), and no
  other word counted.

The reader shares the machine's two cores with the instances and the broker, as our figure's consumer
shares them with our broker. Without Java, the broker's jars or the built program the part is skipped,
saying what to run. `python -m bench.kstreams_peer [--quick] [--ours | --ours-group]` runs it alone;
`--ours-group` also runs our word count in the same shape (bench/wordcount_group.py: 4 journals, 2
consumer processes, a SIGKILL; the rows of `python -m bench` beside this one), `--ours` that and
bench.consumer's one-shard figures.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import glob
import itertools
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import consumer, kafka_peer, runner
from bench.figures import Figure
from gazette.examples.wordcount import partition_of
from gazette.keyspace.procutil import spawn, terminate, terminate_all
from gazette.message.framing import JSONFraming
from gazette.message.uuid import Clock, new_producer_id

ROOT = Path(__file__).resolve().parents[1]
STREAMS_JARS = kafka_peer.JARS_DIR / "streams"  # bench/kafka_streams/pom.xml's jar and runtime dependencies
PROGRAM_JAR = STREAMS_JARS / "kstreams-wordcount.jar"
MAIN_CLASS = "dev.gazettepy.bench.WordCount"
NOT_BUILT = "Kafka Streams' word count not built: run `make kafka-streams`"
UNIT = consumer.UNIT
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms (Kafka's default)
READY_TIMEOUT_S = 120.0  # the instances started, each running with tasks (JVMs on two busy cores)
RUN_TIMEOUT_S = 600.0  # a bound on a hung run, not a measure
STALL_TIMEOUT_S = 60.0  # no new output for this long: the run is stuck (a session timeout, a restart and
# Kafka Streams' exactly-once transaction timeout take well under it)
DRAIN_TIMEOUT_S = 60.0  # reading the output to its end once the instances stopped
STOP_TIMEOUT_S = 30.0  # a clean close of the instances (Kafka Streams' own is 20 s at most)
CORPUS_TXN_TIMEOUT_MS = 600_000  # the corpus' transaction stays open while the instances start
POLL_S = 0.05
BATCH = 10_000  # output records per consume() call
TOPOLOGIES = ("group-by", "by-key")
LOG_LEVEL = "warn"  # the instances' slf4j-simple level (their logs: log-INDEX-INCARNATION.txt)

Log = Callable[[str], None]


class KStreamsUnavailable(kafka_peer.KafkaUnavailable):
    """Kafka Streams cannot run here (no Java, jars, client or built program); the reason is the message."""


class KStreamsBenchError(RuntimeError):
    """A run of the peer went wrong: an instance failed, the output never held the final counts, or it
    broke the exactly-once oracle. The message says which."""


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    runs: int
    words: int  # per run: bench.consumer.make_words(words, seed=run)
    partitions: int = 4  # of the words topic (and of the output topic and Streams' internal ones)
    instances: int = 2  # Kafka Streams JVMs, one stream thread each
    kill: bool = True  # SIGKILL one instance mid-run, then restart it
    kill_at: float = 0.5  # of the victim's share of the count updates, when it is killed
    cache_bytes: int = 0  # statestore.cache.max.bytes: 0 writes every update, as ours does
    topology: str = "group-by"  # or "by-key" (see bench/kafka_streams WordCount)

    def __post_init__(self) -> None:
        for field in ("runs", "words", "partitions", "instances"):
            if getattr(self, field) < 1:
                raise ValueError(f"Settings.{field} is {getattr(self, field)}: it must be at least 1")
        if not 0 < self.kill_at < 1:
            raise ValueError(f"Settings.kill_at is {self.kill_at}: it must be between 0 and 1 (exclusive)")
        if self.cache_bytes < 0:
            raise ValueError(f"Settings.cache_bytes is {self.cache_bytes}: it must be at least 0")
        if self.topology not in TOPOLOGIES:
            raise ValueError(
                f"Settings.topology is {self.topology!r}: expected one of {', '.join(TOPOLOGIES)}"
            )

    @property
    def pause_after(self) -> int:
        """The victim's kill point: the count update at which it blocks until killed."""
        return max(1, int(self.words / self.instances * self.kill_at))


# bench.consumer's words; fewer runs than ours: each starts its JVMs and waits out a group session
# timeout, tens of seconds on two busy cores (the table compares the medians).
QUICK = Settings("quick", runs=1, words=consumer.QUICK.words)
FULL = Settings("full", runs=3, words=consumer.FULL.words)


def settings_for(bench: runner.Settings) -> Settings:
    """The settings matching `python -m bench`'s: bench.consumer's words for that suite, and its runs
    up to those of QUICK or FULL."""
    ours = consumer.settings_for(bench)
    base = QUICK if ours.name == QUICK.name else FULL
    return dataclasses.replace(base, runs=min(ours.runs, base.runs), words=ours.words)


# Our figure -> Kafka Streams' figure doing the same work.
PEER_OF = {"cons_e2e": "kstreams_e2e"}


def describe(settings: Settings) -> str:
    kill = ", a SIGKILL" if settings.kill else ""
    cache = "" if settings.cache_bytes == 0 else f", cache {settings.cache_bytes} B"
    topology = "" if settings.topology == "group-by" else f", {settings.topology}"
    return f"{settings.partitions} partitions, {settings.instances} instances{kill}{cache}{topology}"


def peer_figures(settings: Settings = FULL) -> dict[str, Figure]:
    """Kafka Streams' figure: the peer of our word count's end-to-end rate."""
    figure = Figure(
        "kstreams_e2e", f"Peer: Kafka Streams EOS v2 word count e2e ({describe(settings)})", UNIT, True
    )
    return {figure.key: figure}


# --- the program -----------------------------------------------------------------------------------


def classpath() -> str:
    """The built program and its runtime dependencies; KStreamsUnavailable when not built."""
    jars = sorted(glob.glob(str(STREAMS_JARS / "*.jar")))
    if str(PROGRAM_JAR) not in jars:
        raise KStreamsUnavailable(f"{NOT_BUILT} ({PROGRAM_JAR} is missing)")
    return ":".join(jars)


def check() -> None:
    """KStreamsUnavailable, saying why and what to run, unless Java, the broker's jars, the client and
    the built program are here."""
    try:
        kafka_peer.check()
    except KStreamsUnavailable:
        raise
    except kafka_peer.KafkaUnavailable as exc:
        raise KStreamsUnavailable(str(exc)) from exc
    classpath()


def version() -> str | None:
    """Kafka Streams' version ("4.2.0"), from the built program's classpath; None when not built."""
    for jar in glob.glob(str(STREAMS_JARS / "kafka-streams-*.jar")):
        return Path(jar).name.removeprefix("kafka-streams-").removesuffix(".jar")
    return None


@dataclasses.dataclass
class Instance:
    """One Kafka Streams JVM, and what it reported on its standard output (a file, read as it grows)."""

    index: int
    proc: subprocess.Popen[Any]
    events: Path
    log: Path
    state: str = "CREATED"
    tasks: int = 0
    first_record_ms: int | None = None
    paused: bool = False
    running_at: float | None = None  # time.time() of the first RUNNING with tasks
    error: str | None = None
    _offset: int = 0
    _partial: bytes = b""

    def read_events(self) -> None:
        with self.events.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for raw in lines:
            self._apply(raw.decode(errors="replace").strip())

    def _apply(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "state":
            fields = rest.split()
            self.state = fields[0]
            self.tasks = int(fields[-1].removeprefix("tasks="))
            if self.running and self.running_at is None:
                self.running_at = time.time()
        elif kind == "first-record":
            self.first_record_ms = int(rest)
        elif kind == "paused":
            self.paused = True
        elif kind == "error":
            self.error = rest

    @property
    def running(self) -> bool:
        return self.state == "RUNNING" and self.tasks > 0

    def failure(self) -> str | None:
        """Why this instance cannot go on (it exited or failed), else None."""
        if self.error is not None:
            return f"instance {self.index} failed: {self.error}"
        if self.proc.poll() is not None:
            return f"instance {self.index} exited with status {self.proc.returncode}"
        if self.state in ("ERROR", "PENDING_ERROR"):
            return f"instance {self.index} is in state {self.state}"
        return None

    def cpu_seconds(self) -> float:
        """The CPU time (user and system) the JVM has used so far, from /proc; 0 where there is none
        (not Linux, or already reaped)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def log_tail(self, chars: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-chars:].strip() if self.log.exists() else ""


def start_instance(
    index: int, incarnation: int, workdir: Path, bootstrap: str, app_id: str, topics: tuple[str, str],
    settings: Settings, pause_after: int | None,
) -> Instance:  # fmt: skip
    """Starts instance `index` (its state directory under `workdir`, kept across incarnations)."""
    java = kafka_peer.java_binary()
    state_dir = workdir / f"state-{index}"
    state_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "processing.guarantee": "exactly_once_v2",
        "num.stream.threads": "1",
        "statestore.cache.max.bytes": str(settings.cache_bytes),
        "state.dir": str(state_dir),
        "replication.factor": "1",
        "consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "consumer.heartbeat.interval.ms": str(SESSION_TIMEOUT_MS // 4),
        "bench.topology": settings.topology,
    }
    if pause_after is not None:
        config["bench.pause.after.records"] = str(pause_after)
    events, log = workdir / f"events-{index}-{incarnation}.txt", workdir / f"log-{index}-{incarnation}.txt"
    jvm = [
        java,
        "-Xms128m",
        "-Xmx512m",
        "-Djava.awt.headless=true",
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={LOG_LEVEL}",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
    ]
    argv = [*jvm, "-cp", classpath(), MAIN_CLASS, *topics, *(f"{k}={v}" for k, v in config.items())]
    with events.open("wb") as out, log.open("wb") as err:
        proc = spawn(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    return Instance(index, proc, events, log)


# --- the corpus and the output ---------------------------------------------------------------------


def pending_corpus(
    bootstrap: str, topic: str, words: list[dict[str, Any]], partitions: int, txn_id: str
) -> Any:
    """A transactional producer holding `words` in `topic`, produced and flushed but not committed:
    read_committed readers (Kafka Streams' under exactly-once) see none of them until its commit."""
    from confluent_kafka import Producer

    producer = Producer(
        {**kafka_peer._producer_conf(bootstrap, len(words)), "transactional.id": txn_id,
         "transaction.timeout.ms": CORPUS_TXN_TIMEOUT_MS}
    )  # fmt: skip
    producer.init_transactions(kafka_peer.CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    framed = kafka_peer._stamped(words, JSONFraming(), new_producer_id(), Clock.now())
    for message, data in zip(words, framed, strict=True):
        word = message["word"]
        producer.produce(topic, data, key=word.encode(), partition=partition_of(word, partitions))
        producer.poll(0)
    left = producer.flush(kafka_peer.CLIENT_TIMEOUT_S)
    if left:
        raise KStreamsBenchError(
            f"{topic}: {left} words not delivered {kafka_peer.CLIENT_TIMEOUT_S:.0f} s after the last"
        )
    return producer


class OutputReader:
    """A read_committed reader of the output topic from its start: each word's counts in the order
    they were committed, and when the last word reached (or passed: the oracle tells) its count in
    the corpus."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, expected: Mapping[str, int]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.topic, self.partitions, self.expected = topic, partitions, expected
        self.emitted: dict[str, list[int]] = {}
        self.records = 0
        self.complete: set[str] = set()
        self.done_at: float | None = None  # time.time() when every word had reached its count
        self.last_record_at = time.monotonic()
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"bench-reader-{topic}", "isolation.level": "read_committed",
             "enable.auto.commit": False, "enable.partition.eof": True}
        )  # fmt: skip
        self.consumer.list_topics(topic, timeout=kafka_peer.CLIENT_TIMEOUT_S)  # connected: untimed
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self._eof: set[int] = set()

    @property
    def done(self) -> bool:
        return self.done_at is not None

    def poll(self, timeout_s: float) -> int:
        """Takes what has been committed (up to BATCH records); how many records it took."""
        from confluent_kafka import KafkaError, KafkaException

        batch = self.consumer.consume(BATCH, timeout_s)
        taken = 0
        emitted, expected, complete = self.emitted, self.expected, self.complete
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._eof.add(msg.partition() or 0)
                    continue
                raise KafkaException(err)
            self._eof.discard(msg.partition() or 0)
            key, value = msg.key(), msg.value()
            word = key.decode() if key is not None else ""
            count = int.from_bytes(value, "big", signed=True) if value is not None else -1
            seq = emitted.get(word)
            if seq is None:
                seq = emitted[word] = []
            seq.append(count)
            if count >= expected.get(word, 0) > 0:
                complete.add(word)
            taken += 1
        self.records += taken
        if taken:
            self.last_record_at = time.monotonic()
        if self.done_at is None and len(complete) == len(expected):
            self.done_at = time.time()
        return taken

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Reads on until every partition is at its end (nothing more committed there)."""
        deadline = time.monotonic() + timeout_s
        while len(self._eof) < self.partitions:
            if time.monotonic() > deadline:
                raise KStreamsBenchError(
                    f"{self.topic}: partitions {sorted(set(range(self.partitions)) - self._eof)} not read to their end "
                    f"within {timeout_s:.0f} s"
                )
            self.poll(POLL_S)

    def close(self) -> None:
        self.consumer.close()


def check_counts(
    expected: Mapping[str, int], emitted: Mapping[str, Sequence[int]], every_update: bool
) -> None:
    """The exactly-once oracle over what a read_committed reader took from the output: each word of
    the corpus has the counts 1, 2, ..., its count, each once and in order (`every_update`, the cache
    off), or counts rising strictly to its count (the cache on: updates of a word may be merged); and
    no other word. KStreamsBenchError naming a few wrong words and how many there are."""
    wrong: list[str] = []
    for word in emitted.keys() - expected.keys():
        wrong.append(f"{word!r} counted {list(emitted[word])[:5]} but not in the corpus")
    for word, n in expected.items():
        seq = list(emitted.get(word, ()))
        if every_update:
            ok = seq == list(range(1, n + 1))
        else:
            ok = bool(seq) and seq[-1] == n and seq[0] >= 1 and all(a < b for a, b in itertools.pairwise(seq))
        if not ok:
            shown = seq if len(seq) <= 8 else [*seq[:4], "...", *seq[-3:]]
            wrong.append(f"{word!r} counted {shown} (corpus: {n})")
    if wrong:
        rule = "1..n once each" if every_update else "rising strictly to n"
        raise KStreamsBenchError(
            f"{len(wrong)} words' committed counts are not {rule}: " + "; ".join(sorted(wrong)[:5])
        )


# --- one run ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    rate: float  # words/s, first input record taken to every final count readable
    seconds: float
    startup_s: float  # the corpus' commit to the first record taken
    killed_at_s: float | None  # first record to the SIGKILL
    rejoined_s: float | None  # SIGKILL to the restarted instance running with tasks (None: not by the end)
    output_records: int
    cpu_s: float  # CPU time of every instance's JVM (startup included): the cost, whatever the load


def word_count(bootstrap: str, settings: Settings, run: int, workdir: Path, log: Log) -> Result:
    """One run (see the module's docstring) in a fresh application and fresh topics; checks the oracle."""
    words = consumer.make_words(settings.words, seed=run)
    expected = collections.Counter(w["word"] for w in words)
    tag = uuid.uuid4().hex[:8]
    input_topic, output_topic, app_id = (
        f"kstreams-{tag}-words",
        f"kstreams-{tag}-counts",
        f"kstreams-wordcount-{tag}",
    )
    for topic in (input_topic, output_topic):
        kafka_peer.create_topic(bootstrap, topic, settings.partitions)
    producer = pending_corpus(bootstrap, input_topic, words, settings.partitions, f"kstreams-corpus-{tag}")
    topics = (input_topic, output_topic)
    victim = settings.instances - 1 if settings.kill else None
    instances = [
        start_instance(
            k, 0, workdir, bootstrap, app_id, topics, settings, settings.pause_after if k == victim else None
        )
        for k in range(settings.instances)
    ]
    every = list(instances)  # every incarnation, for the first record's time and the cleanup
    reader: OutputReader | None = None
    killed: float | None = None
    cpu_s = 0.0
    try:
        _wait(
            instances,
            lambda: all(i.running for i in instances),
            READY_TIMEOUT_S,
            "each instance running with tasks",
        )
        reader = OutputReader(bootstrap, output_topic, settings.partitions, expected)
        producer.commit_transaction(kafka_peer.CLIENT_TIMEOUT_S)
        committed = time.time()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not reader.done:
            reader.poll(POLL_S)
            for inst in instances:
                inst.read_events()
                problem = inst.failure()
                if problem is not None:
                    raise KStreamsBenchError(f"{problem}; its log ends: {inst.log_tail()}")
            if victim is not None and killed is None and instances[victim].paused:
                cpu_s += instances[victim].cpu_seconds()
                instances[victim].proc.kill()  # SIGKILL, mid-transaction
                killed = time.time()
                instances[victim].proc.wait(STOP_TIMEOUT_S)  # gone at once: the kernel ends it
                instances[victim] = start_instance(
                    victim, 1, workdir, bootstrap, app_id, topics, settings, None
                )
                every.append(instances[victim])
            now = time.monotonic()
            if now > deadline or now - reader.last_record_at > STALL_TIMEOUT_S:
                short = sorted(expected.keys() - reader.complete)
                why = f"{RUN_TIMEOUT_S:.0f} s after the corpus' commit" if now > deadline else (
                    f"and nothing new came for {STALL_TIMEOUT_S:.0f} s")  # fmt: skip
                raise KStreamsBenchError(
                    f"the output held not every final count {why}: {len(short)} of {len(expected)} words short "
                    f"(e.g. {short[0]!r} counted {reader.emitted.get(short[0], [])[-5:]}, corpus "
                    f"{expected[short[0]]}), {reader.records} records read"
                )
        if victim is not None and killed is None:
            raise KStreamsBenchError(
                f"instance {victim} never reached its kill point ({settings.pause_after} count updates) before the "
                f"output held every final count: it wrote fewer than kill_at={settings.kill_at} of a fair share "
                f"(with the cache on, updates of a word merge)"
            )
        for inst in instances:
            inst.read_events()
            cpu_s += inst.cpu_seconds()
        stopped = terminate_all([i.proc for i in instances], STOP_TIMEOUT_S)
        if stopped:
            log(f"  {len(stopped)} instances did not close within {STOP_TIMEOUT_S:.0f} s and were killed")
        reader.drain()
    finally:
        for inst in every:
            terminate(inst.proc, STOP_TIMEOUT_S)
        if reader is not None:
            reader.close()
        with contextlib.suppress(Exception):  # the transaction is committed (or the run failed already)
            producer.flush(0)
    check_counts(expected, reader.emitted, every_update=settings.cache_bytes == 0)
    if settings.cache_bytes == 0 and reader.records != settings.words:
        raise KStreamsBenchError(f"{reader.records} committed count records for {settings.words} words")
    firsts = [i.first_record_ms for i in every if i.first_record_ms is not None]
    assert reader.done_at is not None and firsts  # done: some instance took a record
    first = min(firsts) / 1000
    seconds = reader.done_at - first
    rejoined = instances[victim].running_at if victim is not None else None
    return Result(
        rate=settings.words / seconds,
        seconds=seconds,
        startup_s=first - committed,
        killed_at_s=None if killed is None else killed - first,
        rejoined_s=None if killed is None or rejoined is None else rejoined - killed,
        output_records=reader.records,
        cpu_s=cpu_s,
    )


def _wait(instances: list[Instance], ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        for inst in instances:
            inst.read_events()
            problem = inst.failure()
            if problem is not None:
                raise KStreamsBenchError(
                    f"{problem} while waiting for {what}; its log ends: {inst.log_tail()}"
                )
        if ready():
            return
        if time.monotonic() > deadline:
            states = ", ".join(f"{i.index}: {i.state} tasks={i.tasks}" for i in instances)
            raise KStreamsBenchError(f"no {what} within {timeout_s:.0f} s ({states})")
        time.sleep(POLL_S)


def run(settings: Settings, log: Log, bootstrap: str | None = None) -> dict[str, Figure]:
    """Measures Kafka Streams' word count `settings.runs` times in a broker started for it (or the one
    at `bootstrap`); KStreamsUnavailable when it cannot run here, KStreamsBenchError when a run fails
    (the oracle included)."""
    check()
    figures = peer_figures(settings)
    figure = figures["kstreams_e2e"]
    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            bootstrap = stack.enter_context(kafka_peer.kafka_broker(log))
        log(f"Kafka Streams {version()}: {settings.words} words, {describe(settings)}")
        for i in range(settings.runs):
            log(f"kafka streams run {i + 1}/{settings.runs}")
            with tempfile.TemporaryDirectory(prefix="bench-kstreams-") as tmp:
                r = word_count(bootstrap, settings, i, Path(tmp), log)
            figure.samples.append(r.rate / 1000)
            kill = "" if r.killed_at_s is None else f", SIGKILL {r.killed_at_s:.2f} s in" + (
                ", the restarted instance without tasks until the end" if r.rejoined_s is None
                else f", the restarted instance running with tasks {r.rejoined_s:.2f} s later"
            )  # fmt: skip
            log(
                f"  e2e {r.rate / 1000:.4g}k words/s ({settings.words} words in {r.seconds:.2f} s{kill}; commit to "
                f"first record {r.startup_s:.2f} s; {r.output_records} count records, oracle passed; the JVMs used "
                f"{r.cpu_s:.1f} CPU s, load average {os.getloadavg()[0]:.1f})"
            )
    return figures


def main() -> None:
    from rich.console import Console

    from bench import report

    parser = argparse.ArgumentParser(
        prog="python -m bench.kstreams_peer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.runs} runs of {QUICK.words} words")
    parser.add_argument("--runs", type=int, help="override the number of runs")
    parser.add_argument("--words", type=int, help="override the words per run")
    parser.add_argument(
        "--partitions", type=int, help=f"partitions of the words topic (default {FULL.partitions})"
    )
    parser.add_argument("--instances", type=int, help=f"Kafka Streams instances (default {FULL.instances})")
    parser.add_argument("--no-kill", action="store_true", help="kill no instance")
    parser.add_argument(
        "--cache-bytes", type=int, help="statestore.cache.max.bytes (default 0: every update)"
    )
    parser.add_argument("--topology", choices=TOPOLOGIES, help="group-by (parse, repartition) or by-key")
    parser.add_argument(
        "--ours",
        action="store_true",
        help="also run our word count in this shape (bench.wordcount_group) and bench.consumer (same words and runs)",
    )
    parser.add_argument(
        "--ours-group",
        action="store_true",
        help="also run our word count in this shape (bench.wordcount_group: same words, runs, partitions, kill)",
    )
    parser.add_argument(
        "--ours-apps",
        nargs="+",
        choices=("columnar", "per-message"),
        help="with --ours or --ours-group: which of our word counts (default both)",
    )
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    changes = {
        k: getattr(args, k) for k in ("runs", "words", "partitions", "instances", "cache_bytes", "topology")
    }
    try:
        settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
        if args.no_kill:
            settings = dataclasses.replace(settings, kill=False)
    except ValueError as exc:
        parser.error(str(exc))
    if args.ours_apps and not (args.ours or args.ours_group):
        parser.error("--ours-apps needs --ours or --ours-group")
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped or captured: don't squeeze the table
    figures: dict[str, Figure] = {}
    if args.ours:
        console.rule("consumer")
        base = consumer.QUICK if args.quick else consumer.FULL
        figures |= consumer.run(
            dataclasses.replace(base, runs=settings.runs, words=settings.words), console.log
        )
    console.rule("kafka streams peer")
    figures |= run(settings, console.log)
    peer_of = dict(PEER_OF)
    if args.ours or args.ours_group:
        from bench import wordcount_group  # it imports this module

        console.rule("our word count in this shape")
        apps = tuple(args.ours_apps or wordcount_group.APPS)
        figures |= wordcount_group.run(settings, console.log, apps)
        peer_of |= wordcount_group.PEER_OF
    title = f"Kafka Streams peer ({settings.name}, median of {settings.runs} runs)"
    report.print_table(report.rows_of(figures, peer_of, peer_figures=peer_figures(settings)), title, console)


if __name__ == "__main__":
    main()
