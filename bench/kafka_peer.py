"""The peer: Apache Kafka with exactly-once doing our message and Spark benchmarks' work.

Starts a one-node Kafka broker in KRaft mode (broker and controller in one JVM, `java kafka.Kafka`) on
127.0.0.1, its log directory in a temp directory, from the jars `make kafka-jars` copied into
build/kafka/broker (bench/kafka-jars/broker.pom.xml); drives it with confluent-kafka (librdkafka) from
this process, with the same 100-byte JSON messages as bench/messages.py:

* a transactional producer committing a transaction every 1000 messages (ours: an ACK per 1000),
* an idempotent producer without transactions, acks=all (ours: `publish_committed`),
* a `read_committed` consumer of the transactional topic, every message parsed; beside it, in the same
  run, the same messages in the same transactions written to a journal of a subprocess gazette broker
  and read from its start by ReadCommitted (every message an Envelope, parsed with orjson) and by the
  columnar reader ReadCommittedTables (every message's fields parsed into Arrow columns, its UUID split
  into producer, clock and flags): issue 26's goal, the columnar reader ≥ 2x Kafka's consumer.

For bench/spark.py it replays the Spark data set's messages (transactions, rollbacks as aborted
transactions, duplicates dropped as an idempotent producer drops a retry) into one topic, a partition
per journal, and reads them with Spark's Kafka source (`kafka.isolation.level=read_committed`; jars in
build/kafka/spark). Without Java or the jars the part is skipped, saying to run `make kafka-jars`
(without confluent-kafka, `make venv`).
`python -m bench.kafka_peer [--quick] [--ours]` runs the publish and consume figures alone.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import dataclasses
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from bench import messages
from bench.figures import Figure, PeerUnavailable, Target
from gazette.keyspace.procutil import free_port, spawn, terminate
from gazette.local.cluster import LocalCluster
from gazette.message import ReadCommitted, build_uuid
from gazette.message.framing import JSONFraming
from gazette.message.uuid import Clock, Flags, get_clock, get_flags, get_producer_id, new_producer_id

if TYPE_CHECKING:
    from bench.spark import Dataset
    from gazette.client.sync import Client

ROOT = Path(__file__).resolve().parents[1]
JARS_DIR = ROOT / "build" / "kafka"
BROKER_JARS = JARS_DIR / "broker"  # bench/kafka-jars/broker.pom.xml's runtime dependencies
SPARK_JARS = JARS_DIR / "spark"  # bench/kafka-jars/spark.pom.xml's
FIX = "run `make kafka-jars`"
NOT_FETCHED = f"Kafka's jars not fetched: {FIX}"
NO_JAVA = f"Java not installed: {FIX} (as root it installs a JRE and Maven)"
NO_CLIENT = "confluent-kafka not installed: run `make venv` (the dev extra has it)"
READY_TIMEOUT_S = 90.0  # a JVM starting on two busy cores
STOP_TIMEOUT_S = 15.0
CLIENT_TIMEOUT_S = 60.0  # init/commit/abort of a transaction, a flush, a topic's creation
POLL_TIMEOUT_S = 5.0
BATCH = 1000  # messages per consume() call
# librdkafka's consumer stops fetching a partition whose local queue holds queued.min.messages
# (100,000) and, by default, looks again only fetch.queue.backoff.ms (1000 ms) later: a run of 200,000
# messages stalled there for about a second, a third of Kafka's rate. 10 ms is librdkafka's documented
# trade of CPU for throughput; Kafka's consumer is measured at its best here, not at a default's stall.
FETCH_QUEUE_BACKOFF_MS = 10
TXN_MESSAGES = messages.TXN_MESSAGES
UNIT = messages.UNIT
SPARK_TOPIC = "bench-events"
SPARK_LOAD_LANES = 8  # transactional producers per journal replaying the Spark data set

COLUMNAR_TARGET = Target("ratio", 2.0, "≥ 2× Kafka's consumer")

Log = Callable[[str], None]


class KafkaUnavailable(PeerUnavailable):
    """Kafka cannot run here (no Java, jars or client, or it would not start); the reason is the message."""


# Our figure -> Kafka's figure doing the same work. "kafka_ours_publish" is our `msg_publish` again
# (its own row pairs it with NATS), so that each of Kafka's figures stands beside one of ours. Our
# readers beside Kafka's consumer are measured in this part, in the same runs on the same messages.
PEER_OF = {
    "msg_publish_txn": "kafka_publish_txn",
    "kafka_ours_publish": "kafka_publish_idem",
    "kafka_ours_read_txn": "kafka_consume_txn",
    "kafka_ours_read_txn_columnar": "kafka_consume_txn",  # issue 26's goal: at least 2x Kafka's consumer
    "spark_committed_all": "spark_kafka_all",
    "spark_committed_query": "spark_kafka_query",
}
OURS_AGAIN = {"kafka_ours_publish": "msg_publish"}


def peer_figures() -> dict[str, Figure]:
    """Kafka's publish and consume figures, in table order; each the peer of one of ours."""
    figures = [
        Figure(
            "kafka_publish_txn",
            f"Peer: Kafka transactional producer, a commit per {TXN_MESSAGES}",
            UNIT,
            True,
        ),
        Figure(
            "kafka_publish_idem", "Peer: Kafka idempotent producer, acks=all, no transactions", UNIT, True
        ),
        Figure(
            "kafka_consume_txn",
            f"Peer: Kafka read_committed consumer, transactions of {TXN_MESSAGES}",
            UNIT,
            True,
        ),
    ]
    return {f.key: f for f in figures}


def reader_figures() -> dict[str, Figure]:
    """Our readers of the messages Kafka's consumer reads, measured in the same runs: their limit is
    Kafka's consumer (per-run ratios), the columnar one's target issue 26's."""
    figures = [
        Figure(
            "kafka_ours_read_txn",
            f"ReadCommitted of the same messages, txns of {TXN_MESSAGES} (beside Kafka's consumer)",
            UNIT, True, "kafka_consume_txn",
        ),
        Figure(
            "kafka_ours_read_txn_columnar",
            f"Columnar reader (ReadCommittedTables) of the same messages, txns of {TXN_MESSAGES}",
            UNIT, True, "kafka_consume_txn", COLUMNAR_TARGET,
        ),
    ]  # fmt: skip
    return {f.key: f for f in figures}


def part_figures() -> dict[str, Figure]:
    """The suite's rows of this part: our publish_committed again (filled by `fill_ours`), Kafka's,
    then our readers of the same messages as Kafka's consumer."""
    ours = Figure(
        "kafka_ours_publish", "Publish committed, 100 B JSON (beside Kafka's idempotent producer)", UNIT, True,
        "msg_encode",
    )  # fmt: skip
    return {ours.key: ours} | peer_figures() | reader_figures()


def fill_ours(figures: dict[str, Figure]) -> None:
    """Gives each row of OURS_AGAIN the samples of the figure of ours it repeats, when measured."""
    for key, source in OURS_AGAIN.items():
        if key in figures and source in figures and not figures[key].samples:
            figures[key].samples.extend(figures[source].samples)


# --- the jars, Java and the client -----------------------------------------------------------------


def _jars(directory: Path) -> list[str]:
    found = sorted(glob.glob(str(directory / "*.jar")))
    if not found:
        raise KafkaUnavailable(f"{NOT_FETCHED} ({directory} has no jars)")
    return found


def java_binary() -> str:
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailable(NO_JAVA)
    return found


def check_client() -> None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as exc:
        raise KafkaUnavailable(f"{NO_CLIENT} ({exc})") from exc


def check() -> None:
    """KafkaUnavailable, saying why and how to fix it, unless Java, the broker's jars and the client
    are here."""
    java_binary()
    _jars(BROKER_JARS)
    check_client()


def _artifact(jar: str) -> str:
    """ "kafka-clients-3.9.2.jar" -> "kafka-clients": a jar's name without its version."""
    stem = Path(jar).name.removesuffix(".jar")
    parts = stem.split("-")
    while len(parts) > 1 and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def spark_jars() -> list[str]:
    """Spark's Kafka source and those of its dependencies pyspark does not ship (its own versions of the
    others stay first on the classpath)."""
    import pyspark

    found = _jars(SPARK_JARS)
    shipped = {
        _artifact(j) for j in glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar"))
    }
    source = [j for j in found if _artifact(j).startswith("spark-sql-kafka")]
    if not source:
        raise KafkaUnavailable(f"{NOT_FETCHED} (no spark-sql-kafka jar in {SPARK_JARS})")
    return [j for j in found if _artifact(j) not in shipped]


def version() -> str | None:
    """Kafka's version ("4.2.0"), from its fetched server jar; None when not fetched."""
    for jar in glob.glob(str(BROKER_JARS / "kafka_2.13-*.jar")):
        return Path(jar).name.removeprefix("kafka_2.13-").removesuffix(".jar")
    return None


# --- the broker ------------------------------------------------------------------------------------


def _properties(data_dir: Path, port: int, controller_port: int) -> str:
    """One node, broker and controller; every internal topic of one replica and few partitions. No
    fsync per message (Kafka's default, as neither our spools nor JetStream's store sync each one)."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={data_dir}",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=4",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
        ]
    )


def new_cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding, drawn again while it
    starts with "-", which kafka-storage's argument parser takes for an option (1 draw in 64; Kafka's
    own Uuid.randomUuid draws again for the same reason)."""
    while True:
        text = base64.urlsafe_b64encode(draw()).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@contextlib.contextmanager
def kafka_broker(log: Log | None = None) -> Iterator[str]:
    """A one-node KRaft broker on 127.0.0.1 (random ports, its logs in a temp directory) as a child that
    dies with us; yields its bootstrap address. KafkaUnavailable when Java or the jars are missing or
    it does not start."""
    check()
    java, classpath = java_binary(), ":".join(_jars(BROKER_JARS))
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        port, controller_port = free_port(), free_port()
        config = Path(tmp) / "server.properties"
        config.write_text(_properties(Path(tmp) / "data", port, controller_port) + "\n")
        log_path = Path(tmp) / "server.log"
        jvm = [java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath]  # fmt: skip
        cluster_id = new_cluster_id()
        formatted = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(config)],
            capture_output=True, text=True, timeout=READY_TIMEOUT_S, check=False,
        )  # fmt: skip
        if formatted.returncode != 0:
            raise KafkaUnavailable(
                f"kafka-storage format failed: {(formatted.stderr or formatted.stdout)[-400:]}"
            )
        with log_path.open("wb") as log_file:
            proc = spawn([*jvm, "kafka.Kafka", str(config)], stdin=subprocess.DEVNULL, stdout=log_file,
                         stderr=subprocess.STDOUT)  # fmt: skip
        try:
            bootstrap = _wait_ready(proc, port, log_path)
            if log is not None:
                log(f"Kafka {version()} (KRaft, one node) at {bootstrap}, pid {proc.pid}")
            yield bootstrap
        finally:
            terminate(proc, STOP_TIMEOUT_S)


def _wait_ready(proc: subprocess.Popen[Any], port: int, log_path: Path) -> str:
    """Until the broker accepts connections and answers a metadata request with itself in it."""
    from confluent_kafka.admin import AdminClient

    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S

    def exited() -> KafkaUnavailable:
        tail = log_path.read_text(errors="replace")[-600:].strip()
        return KafkaUnavailable(f"the Kafka broker exited with status {proc.returncode}: {tail}")

    while True:  # the port first: librdkafka would log every refused connection
        if proc.poll() is not None:
            raise exited()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        if time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"the Kafka broker did not listen on {bootstrap} within {READY_TIMEOUT_S:.0f} s"
            )
        time.sleep(0.1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while True:
        with contextlib.suppress(Exception):
            if admin.list_topics(timeout=2).brokers:
                return bootstrap
        if proc.poll() is not None:
            raise exited()
        if time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"the Kafka broker at {bootstrap} answered no metadata within {READY_TIMEOUT_S:.0f} s"
            )


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, partitions, 1)], operation_timeout=CLIENT_TIMEOUT_S
    ).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic].partitions) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"topic {topic} has not all its {partitions} partitions after {CLIENT_TIMEOUT_S:.0f} s"
            )
        time.sleep(0.05)


def high_watermarks(bootstrap: str, topic: str, partitions: int = 1) -> list[int]:
    """Each partition's end offset (data records and transaction markers)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=CLIENT_TIMEOUT_S)[1]
                for p in range(partitions)]  # fmt: skip
    finally:
        consumer.close()


# --- the work: publish and consume -----------------------------------------------------------------


def _producer_conf(bootstrap: str, count: int) -> dict[str, Any]:
    """librdkafka's defaults (linger.ms=5, batches up to 1 MB, no compression, acks=all with idempotence)
    with a local queue that holds every message of a run."""
    return {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": max(100_000, 2 * count)}


def _stamped(batch: list[dict[str, Any]], framing: JSONFraming, pid: bytes, clock: Clock) -> list[bytes]:
    """Each message framed as our Publisher frames it (100 B with its UUID): done while timed, as ours."""
    return [framing.encode(m, build_uuid(pid, clock.tick(), 0)) for m in batch]


def publish_transactional(bootstrap: str, topic: str, msgs: list[dict[str, Any]], txn_id: str) -> float:
    """A transaction committed every TXN_MESSAGES messages, each commit awaited (Kafka's producer has one
    transaction open at a time): msgs/s. The producer is ready first (init_transactions), untimed."""
    from confluent_kafka import Producer

    producer = Producer({**_producer_conf(bootstrap, len(msgs)), "transactional.id": txn_id})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    framing, pid, clock = JSONFraming(), new_producer_id(), Clock.now()
    start = time.perf_counter()
    for i in range(0, len(msgs), TXN_MESSAGES):
        producer.begin_transaction()
        for data in _stamped(msgs[i : i + TXN_MESSAGES], framing, pid, clock):
            producer.produce(topic, data)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    _check_end(bootstrap, topic, len(msgs) + -(-len(msgs) // TXN_MESSAGES))  # one commit marker per txn
    return len(msgs) / elapsed


def publish_idempotent(bootstrap: str, topic: str, msgs: list[dict[str, Any]]) -> float:
    """Every message produced with idempotence on (acks=all), then flushed: msgs/s."""
    from confluent_kafka import Producer

    producer = Producer({**_producer_conf(bootstrap, len(msgs)), "enable.idempotence": True})
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)  # connected, the topic's leader known: untimed
    framing, pid, clock = JSONFraming(), new_producer_id(), Clock.now()
    start = time.perf_counter()
    for data in _stamped(msgs, framing, pid, clock):
        producer.produce(topic, data)
    left = producer.flush(CLIENT_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{topic}: {left} messages not delivered {CLIENT_TIMEOUT_S:.0f} s after the last")
    _check_end(bootstrap, topic, len(msgs))
    return len(msgs) / elapsed


def _check_end(bootstrap: str, topic: str, expected: int) -> None:
    end = high_watermarks(bootstrap, topic)[0]
    if end != expected:
        raise RuntimeError(f"{topic} ends at offset {end}, expected {expected} (messages and markers)")


def consume_read_committed(
    bootstrap: str, topic: str, expected: int, poll_timeout_s: float = POLL_TIMEOUT_S
) -> float:
    """A read_committed consumer of partition 0 from its start (assigned, no group), every message
    parsed (orjson), until `expected` messages (RuntimeError if none come for `poll_timeout_s`): msgs/s.
    Its prefetch queue is polled again after FETCH_QUEUE_BACKOFF_MS, not librdkafka's 1 s."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "isolation.level": "read_committed",
         "enable.auto.commit": False, "enable.partition.eof": False,
         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS}
    )  # fmt: skip
    try:
        consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)  # connected, as our client is: untimed
        count = 0
        loads = orjson.loads
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while count < expected:
            batch = consumer.consume(min(BATCH, expected - count), poll_timeout_s)
            if not batch:
                raise RuntimeError(
                    f"{topic}: nothing in {poll_timeout_s:g} s after {count} of {expected} messages"
                )
            for msg in batch:
                if msg.error():
                    raise KafkaException(msg.error())
                loads(cast(bytes, msg.value()))  # every message has a value here
            count += len(batch)
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return count / elapsed


def read_committed_rate(client: Client, journal: str, expected: int) -> float:
    """ReadCommitted of `journal` from its start (every message an Envelope, parsed with orjson), until
    its `expected` messages and their ACKs (one per TXN_MESSAGES) are read: messages/s, the ACKs read and
    decided but not counted (Kafka's consumer is not handed its commit markers)."""
    acks = -(-expected // TXN_MESSAGES)
    rate = messages.read_rate(ReadCommitted(client, journal), expected + acks, f"ReadCommitted of {journal}")
    return rate * expected / (expected + acks)


def _measure(
    bootstrap: str, cluster: LocalCluster, settings: messages.Settings, log: Log
) -> dict[str, list[float]]:
    msgs = messages.make_messages(settings.messages)
    samples: dict[str, list[float]] = {key: [] for key in peer_figures() | reader_figures()}
    client = cluster.client()
    create_topic(bootstrap, "warm")  # the transaction coordinator loads its log here, untimed
    publish_transactional(bootstrap, "warm", msgs[: 2 * TXN_MESSAGES], "bench-warm")
    for i in range(settings.runs):
        log(f"kafka run {i + 1}/{settings.runs}")
        txn, idem, journal = f"txn-{i}", f"idem-{i}", f"bench/kafka-peer/txn-{i}"
        create_topic(bootstrap, txn)
        create_topic(bootstrap, idem)
        messages.apply_journals(cluster, client, [journal])
        run = {
            "kafka_publish_txn": publish_transactional(bootstrap, txn, msgs, f"bench-{i}"),
            "kafka_publish_idem": publish_idempotent(bootstrap, idem, msgs),
        }
        messages.publish(client, journal, msgs, txn=True)  # Kafka's txn topic's messages, untimed here
        run |= {
            "kafka_consume_txn": consume_read_committed(bootstrap, txn, len(msgs)),
            "kafka_ours_read_txn": read_committed_rate(client, journal, len(msgs)),
            "kafka_ours_read_txn_columnar": messages.columnar_read_rate(client, journal, len(msgs)),
        }
        for key, value in run.items():
            samples[key].append(value / 1000)
        log("  " + ", ".join(f"{k} {v / 1000:.4g}k" for k, v in run.items()))
    return samples


def run(settings: messages.Settings, log: Log, bootstrap: str | None = None) -> dict[str, Figure]:
    """Measures Kafka's publish and consume figures `settings.runs` times with bench.messages' Settings
    (those of the figures of ours they pair with), in a broker started for it (or the one at
    `bootstrap`), and our readers of the same messages in a subprocess gazette broker started for it;
    KafkaUnavailable when it cannot run here. The rows of ours repeated beside them (OURS_AGAIN) come
    back empty."""
    figures = part_figures()
    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            bootstrap = stack.enter_context(kafka_broker(log))
        cluster = stack.enter_context(LocalCluster(brokers=1, mode="subprocess"))
        log(f"confluent-kafka {_client_version()}, {messages.MESSAGE_BYTES} B messages")
        for key, values in _measure(bootstrap, cluster, settings, log).items():
            figures[key].samples.extend(values)
    return figures


def _client_version() -> str:
    import confluent_kafka

    return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"


# --- the Spark data set in Kafka -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SparkSource:
    """The Spark data set's messages in a Kafka topic, and how a Spark session reads them."""

    bootstrap: str
    topic: str
    jars: list[str]
    load_seconds: float
    transactions: int

    def session_conf(self) -> dict[str, str]:
        return {"spark.jars": ",".join(self.jars)}

    def dataframe(self, spark: Any, ddl: str) -> Any:
        """The topic's committed messages as the columns of `ddl`: Spark's Kafka source (one batch from
        the earliest to the latest offsets, read_committed), each value parsed with from_json."""
        from pyspark.sql import functions as F

        raw = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.topic)
            .option("kafka.isolation.level", "read_committed")
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        return raw.select(F.from_json(F.col("value").cast("string"), ddl).alias("m")).select("m.*")


@contextlib.contextmanager
def spark_source(data: Dataset, log: Log, bootstrap: str | None = None) -> Iterator[SparkSource]:
    """A broker (started here, or the one at `bootstrap`) holding `data`'s messages (bench/spark.py's
    data set) in SPARK_TOPIC, a partition per journal; KafkaUnavailable when Kafka or Spark's Kafka
    source cannot run here."""
    jars = spark_jars()
    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            bootstrap = stack.enter_context(kafka_broker(log))
        start = time.perf_counter()
        transactions = load_dataset(bootstrap, SPARK_TOPIC, data, log)
        seconds = time.perf_counter() - start
        log(
            f"loaded {data.bytes / 1e6:,.0f} MB into Kafka in {seconds:.0f} s ({transactions:,} transactions)"
        )
        yield SparkSource(bootstrap, SPARK_TOPIC, jars, seconds, transactions)


def _events(data: Dataset) -> dict[tuple[int, bytes], list[tuple[int, int, bytes]]]:
    """Per (journal, producer): its lines in journal order, as (clock, flags, line)."""
    out: dict[tuple[int, bytes], list[tuple[int, int, bytes]]] = {}
    for j, journal in enumerate(data.journals):
        for path in sorted(data.json_dir.glob(journal.replace("/", "_") + "-*.json")):
            for line in path.read_bytes().splitlines(keepends=True):
                u = uuid.UUID(orjson.loads(line)["_meta"]["uuid"])
                out.setdefault((j, get_producer_id(u)), []).append((get_clock(u), get_flags(u), line))
    return out


@dataclasses.dataclass
class _Plan:
    """One journal's messages as Kafka would have them."""

    transactions: list[tuple[list[bytes], bool]] = dataclasses.field(default_factory=list)  # (lines, commit)
    outside: list[bytes] = dataclasses.field(default_factory=list)  # messages outside transactions
    committed: int = 0


def _plan(events: list[tuple[int, int, bytes]], plan: _Plan) -> None:
    """Adds one producer's lines to `plan`: each transaction, committed where its ACK commits and
    aborted where its ACK is at the clock of the last commit (as the Sequencer rolls back); each
    message outside transactions; a re-sent message (a clock not above the last one) left out, as
    an idempotent producer drops a retry."""
    pending: list[bytes] = []
    acked = last = 0
    for clock, flags, line in events:
        if flags == Flags.ACK_TXN:
            commit = clock > acked
            plan.transactions.append((pending, commit))
            if commit:
                plan.committed += len(pending)
                acked = clock
            pending = []
        elif clock > last:  # else the at-least-once duplicate
            last = clock
            if flags == Flags.CONTINUE_TXN:
                pending.append(line)
            else:
                plan.outside.append(line)
                plan.committed += 1
                acked = clock
    if pending:
        raise RuntimeError(f"a transaction of {len(pending)} messages is still open at the end of the data")


def _replay(
    bootstrap: str, topic: str, partition: int, txn_id: str, transactions: list[tuple[list[bytes], bool]]
) -> None:
    """Transactions into `partition` by one transactional producer: committed, or sent then aborted
    (so that they are in the log, as rolled-back messages are in our journals; an abort drops what
    is unsent)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for lines, commit in transactions:
        producer.begin_transaction()
        for line in lines:
            producer.produce(topic, line, partition=partition)
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.flush(CLIENT_TIMEOUT_S)
            producer.abort_transaction(CLIENT_TIMEOUT_S)


def load_dataset(bootstrap: str, topic: str, data: Dataset, log: Log) -> int:
    """Replays `data` into `topic` (a partition per journal): its messages outside transactions by one
    idempotent producer, its transactions by SPARK_LOAD_LANES transactional producers per journal,
    dealt round-robin, all at once (a producer awaits each commit: a lane per producer of ours would
    leave the broker idle). Checks that as many messages are committed as the data set says. The
    number of transactions."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, len(data.journals))
    plans = [_Plan() for _ in data.journals]
    for (j, _), events in _events(data).items():
        _plan(events, plans[j])
    committed = sum(plan.committed for plan in plans)
    if committed != data.committed:
        raise RuntimeError(f"{topic}: {committed} messages to commit, the data set has {data.committed}")
    outside = Producer({**_producer_conf(bootstrap, data.messages), "enable.idempotence": True})
    for j, plan in enumerate(plans):
        for line in plan.outside:
            outside.produce(topic, line, partition=j)
            outside.poll(0)
    lanes = [
        (j, k, plan.transactions[k::SPARK_LOAD_LANES])
        for j, plan in enumerate(plans)
        for k in range(SPARK_LOAD_LANES)
    ]
    with concurrent.futures.ThreadPoolExecutor(len(lanes)) as pool:
        futures = [
            pool.submit(_replay, bootstrap, topic, j, f"bench-spark-{j}-{k}", txns) for j, k, txns in lanes
        ]
        for future in futures:
            future.result()
    left = outside.flush(CLIENT_TIMEOUT_S)
    if left:
        raise RuntimeError(f"{topic}: {left} messages outside transactions not delivered")
    return sum(len(plan.transactions) for plan in plans)


def main() -> None:
    from rich.console import Console

    from bench import report

    parser = argparse.ArgumentParser(prog="python -m bench.kafka_peer", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer and smaller runs (bench's quick settings)"
    )
    parser.add_argument("--runs", type=int, help="override the number of runs")
    parser.add_argument(
        "--ours", action="store_true", help="also measure our figures it pairs with (bench.messages)"
    )
    args = parser.parse_args()
    if args.runs is not None and args.runs < 1:
        parser.error(f"--runs {args.runs} must be at least 1")
    settings = messages.QUICK if args.quick else messages.FULL
    if args.runs is not None:
        settings = dataclasses.replace(settings, runs=args.runs)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped or captured: don't squeeze the table
    figures: dict[str, Figure] = {}
    if args.ours:
        console.rule("messages")
        figures |= messages.run(settings, console.log)
    console.rule("kafka peer")
    measured = run(settings, console.log)
    if args.ours:
        figures |= measured
        fill_ours(figures)
    else:
        figures |= {k: v for k, v in measured.items() if k not in OURS_AGAIN}
    title = f"Kafka peer ({settings.name}, median of {settings.runs} runs)"
    report.print_table(report.rows_of(figures, PEER_OF, peer_figures=peer_figures()), title, console)


if __name__ == "__main__":
    main()
