"""bench/kafka_peer.py: a one-node Kafka broker running the message benchmark's work with tiny settings,
and bench/spark.py's data set replayed into it and read by Spark's Kafka source (smoke tests of the code
paths, not measurements); the pairing with our figures; the skip, saying how to fix it, without the jars.

They skip when Java, the jars (`make kafka-jars`), confluent-kafka or pyspark are missing, except under
CI, where that is a failure (tests/needs.py): `make test` fetches the jars first, so a skip would hide a
broken setup.
"""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from needs import KAFKA_JARS_STEP, VENV_STEP, import_or_missing, missing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import kafka_peer, messages, spark  # noqa: E402
from bench.report import rows_of  # noqa: E402

TINY = messages.Settings("smoke", runs=1, messages=3000)
SPARK_RUN_TIMEOUT_S = 300  # a bound on a hung run, not a measure: it takes well under a minute


def _require(*checks) -> None:
    try:
        for check in checks:
            check()
    except kafka_peer.KafkaUnavailable as exc:
        missing(str(exc), VENV_STEP if str(exc).startswith(kafka_peer.NO_CLIENT) else KAFKA_JARS_STEP)


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    _require(kafka_peer.check)
    with kafka_peer.kafka_broker() as address:
        yield address


def test_kafka_peer_measures_every_figure_and_pairs_it_with_ours(bootstrap: str) -> None:
    logs: list[str] = []
    figures = kafka_peer.run(TINY, logs.append, bootstrap)
    assert list(figures) == list(kafka_peer.part_figures())
    for key in kafka_peer.peer_figures():  # each run checked the topic's end offset (messages, markers)
        assert len(figures[key].samples) == 1 and figures[key].samples[0] > 0, figures[key]
    for key in kafka_peer.reader_figures():  # each read checked it saw every message of the same run
        assert len(figures[key].samples) == 1 and figures[key].samples[0] > 0, figures[key]
    assert all(not figures[key].samples for key in kafka_peer.OURS_AGAIN)
    assert any("confluent-kafka" in line for line in logs)

    ours = messages.message_figures()
    for key in ours:
        ours[key].samples.append(100.0)
    everything = ours | figures
    kafka_peer.fill_ours(everything)
    assert everything["kafka_ours_publish"].samples == [100.0]  # our publish_committed, again
    pairs = {k: v for k, v in kafka_peer.PEER_OF.items() if v in figures}
    assert set(pairs) <= set(everything)  # every pair names a figure of ours that exists
    rows = {
        r.figure.key: r
        for r in rows_of(everything, kafka_peer.PEER_OF, peer_figures=kafka_peer.peer_figures())
    }
    for key, peer_key in pairs.items():
        ours_value = everything[key].value
        assert rows[key].role == "ours"
        assert rows[key].peer_ratio == pytest.approx(ours_value / figures[peer_key].value)
        assert rows[peer_key].role == "peer" and rows[peer_key].cells()[5] == "peer"

    # Issue 26's goal is a ratio to Kafka's consumer of the same run: the columnar reader's row
    # divides by it (its limit), and its target is met or not on that ratio.
    columnar = rows["kafka_ours_read_txn_columnar"]
    consumer = figures["kafka_consume_txn"].value
    assert columnar.ratio == pytest.approx(figures["kafka_ours_read_txn_columnar"].value / consumer)
    assert columnar.met == (columnar.ratio >= 2.0)
    assert columnar.cells()[7].startswith("≥ 2× Kafka's consumer")


def test_read_committed_consumer_sees_committed_transactions_only(bootstrap: str) -> None:
    """The figures' shape of data: an aborted transaction is invisible to the read_committed consumer,
    and the count it is asked for is what it must find (no more within the bound)."""
    from confluent_kafka import Producer

    kafka_peer.create_topic(bootstrap, "aborts")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "test-aborts"})
    producer.init_transactions(kafka_peer.CLIENT_TIMEOUT_S)
    for i, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for n in range(10):
            producer.produce("aborts", json.dumps({"txn": i, "n": n}).encode())
        producer.flush(kafka_peer.CLIENT_TIMEOUT_S)  # in the log before the abort (else dropped unsent)
        (producer.commit_transaction if commit else producer.abort_transaction)(kafka_peer.CLIENT_TIMEOUT_S)
    assert kafka_peer.high_watermarks(bootstrap, "aborts") == [33]  # 30 messages and 3 markers
    assert kafka_peer.consume_read_committed(bootstrap, "aborts", 20) > 0
    with pytest.raises(RuntimeError, match="nothing in 1 s after 20 of 21"):  # the aborted ones never come
        kafka_peer.consume_read_committed(bootstrap, "aborts", 21, poll_timeout_s=1.0)


def test_spark_reads_the_same_committed_messages_from_kafka_as_from_our_fragments(
    bootstrap: str, tmp_path: Path
) -> None:
    """bench/spark.py's data set (transactions, rollbacks, duplicates) replayed into Kafka: the replay
    commits as many messages as the data set has committed ones (load_dataset checks it), and the
    bench's query gives the same rows through Spark's Kafka source (read_committed) as through our
    committed source over the fragments."""
    import_or_missing("pyspark")
    _require(kafka_peer.check, kafka_peer.spark_jars)
    argv = [sys.executable, str(ROOT / "tests" / "kafka_spark_check.py"), str(tmp_path), bootstrap]
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=SPARK_RUN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["transactions"] > 0 and out["committed"] < out["messages"]
    assert out["kafka"] == out["ours"]
    assert sum(int(row[1]) for row in out["kafka"]) == out["committed"]  # the query's count(1) per kind


def test_spark_figures_pair_kafkas_source_with_our_committed_read() -> None:
    """bench/spark.py's results with the Kafka reader become a peer row of our committed read."""
    samples = {
        "json": [2.0],
        "uncommitted": [1.0],
        "committed": [1.0],
        "read_committed": [2.0],
        spark.KAFKA: [4.0],
    }
    results = {
        "data": {"bytes": 8_000_000},
        "readers": [{"shape": "all columns", "reader": k, "samples": v} for k, v in samples.items()],
        "kafka": {"note": None, "load_seconds": 1.0, "transactions": 10},
    }
    figures = spark.figures_of(results)
    assert list(figures)[-1] == "spark_kafka_all" and figures["spark_kafka_all"].samples == [2.0]  # MB/s
    rows = {r.figure.key: r for r in rows_of(figures, kafka_peer.PEER_OF)}
    assert rows["spark_committed_all"].peer_ratio == pytest.approx(4.0)  # t(kafka) / t(ours)
    assert rows["spark_kafka_all"].role == "peer"
    assert "spark_kafka_all" not in spark.figures_of(
        {**results, "kafka": None, "readers": results["readers"][:4]}
    )


def test_the_replay_plan_commits_what_the_sequencer_commits() -> None:
    """One producer's lines: a committed transaction, an outside message, a re-sent duplicate, a
    transaction rolled back by an ACK at the last commit's clock, then one committed again."""
    from gazette.message.uuid import Flags

    C, OUT, A = Flags.CONTINUE_TXN, Flags.OUTSIDE_TXN, Flags.ACK_TXN
    events = [
        (10, C, b"a"), (11, C, b"b"), (12, A, b"ack1"),  # committed
        (13, OUT, b"c"), (13, OUT, b"c"),  # outside, then its duplicate
        (14, C, b"d"), (13, A, b"rollback"),  # rolled back to clock 13
        (15, C, b"e"), (15, C, b"e"), (16, A, b"ack2"),  # committed, a duplicate inside
    ]  # fmt: skip
    plan = kafka_peer._Plan()
    kafka_peer._plan(events, plan)
    assert plan.transactions == [([b"a", b"b"], True), ([b"d"], False), ([b"e"], True)]
    assert plan.outside == [b"c"] and plan.committed == 4
    with pytest.raises(RuntimeError, match="still open"):
        kafka_peer._plan([(20, C, b"f")], kafka_peer._Plan())


def test_without_the_jars_the_suite_skips_the_part_saying_how_to_fetch_them(monkeypatch, tmp_path) -> None:
    from rich.console import Console

    monkeypatch.setattr(kafka_peer, "BROKER_JARS", tmp_path)
    monkeypatch.setattr(kafka_peer, "SPARK_JARS", tmp_path)
    for call in (kafka_peer.check, kafka_peer.spark_jars, lambda: kafka_peer.run(TINY, print)):
        with pytest.raises(kafka_peer.KafkaUnavailable, match=r"run `make kafka-jars`"):
            call()
    assert kafka_peer.version() is None

    suite_module = importlib.import_module("bench.__main__")
    part = suite_module.Part("kafka peer", kafka_peer.part_figures, lambda s, log: kafka_peer.run(TINY, log))
    figures, notes, status = suite_module.run_parts([part], None, Console(file=io.StringIO(), width=200))
    assert list(figures) == list(kafka_peer.part_figures())
    assert status["kafka peer"]["status"] == "skipped"
    assert set(notes) == set(figures) and all(n.startswith(kafka_peer.NOT_FETCHED) for n in notes.values())


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """kafka-storage format refused an id starting with "-" as an option ("argument --cluster-id:
    expected one argument"), one fresh clone in 64: such a draw is drawn again."""
    draws = iter([b"\xf8" + bytes(15), bytes(16)])  # 0xf8 encodes to "-" first in URL-safe base64
    assert kafka_peer.new_cluster_id(lambda: next(draws)) == "A" * 22
    assert all(not kafka_peer.new_cluster_id().startswith("-") for _ in range(2000))
