"""bench/kstreams_peer.py: Kafka Streams' exactly-once word count on a tiny corpus, an instance SIGKILLed
mid-transaction and restarted, and the exactly-once oracle over its committed output (smoke tests of the
code paths, not measurements); the oracle itself on counts that break it; the pairing with our word
count's figure; the skip, saying what to run, without the built program.

The runs skip when Java, the broker's jars (`make kafka-jars`), the built program (`make kafka-streams`)
or confluent-kafka are missing, except under CI, where that is a failure (tests/needs.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from needs import KAFKA_JARS_STEP, KAFKA_STREAMS_STEP, VENV_STEP, missing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import consumer, kafka_peer, kstreams_peer  # noqa: E402
from bench.figures import Figure  # noqa: E402
from bench.report import rows_of  # noqa: E402

# The victim blocks at a quarter of its share of the updates: any one counting task has more than that.
TINY = kstreams_peer.Settings("smoke", runs=1, words=4000, kill_at=0.25)


def _require() -> None:
    try:
        kstreams_peer.check()
    except kafka_peer.KafkaUnavailable as exc:
        text = str(exc)
        step = (
            VENV_STEP if text.startswith(kafka_peer.NO_CLIENT)
            else KAFKA_STREAMS_STEP if text.startswith(kstreams_peer.NOT_BUILT)
            else KAFKA_JARS_STEP
        )  # fmt: skip
        missing(text, step)


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    _require()
    with kafka_peer.kafka_broker() as address:
        yield address


def test_a_kill_mid_transaction_leaves_every_count_once_in_the_committed_output(
    bootstrap: str, tmp_path: Path
) -> None:
    """Two instances on four partitions, one blocked mid-transaction at its kill point, SIGKILLed and
    restarted: the read_committed output still holds each word's counts 1..n once each (word_count
    checks it), one record per word of the corpus."""
    logs: list[str] = []
    result = kstreams_peer.word_count(bootstrap, TINY, 0, tmp_path, logs.append)
    assert result.output_records == TINY.words
    assert result.killed_at_s is not None and result.killed_at_s >= 0
    # The restarted instance may get tasks only after the survivor, holding them all once the victim's
    # session timed out, has finished: when it ran with tasks is not asserted.
    assert result.rejoined_s is None or result.rejoined_s > 0
    assert result.rate > 0 and result.seconds > result.killed_at_s
    assert result.cpu_s > 0  # three JVMs' CPU time, read from /proc before each stopped
    events = sorted(p.name for p in tmp_path.glob("events-*.txt"))
    assert events == ["events-0-0.txt", "events-1-0.txt", "events-1-1.txt"]  # instance 1 ran twice
    assert f"paused {TINY.pause_after}" in (tmp_path / "events-1-0.txt").read_text()


def test_the_part_measures_its_figure_with_the_cache_on_and_by_key(bootstrap: str) -> None:
    """The by-key topology (no parse, no repartition) with Kafka Streams' record cache on: updates of
    a word merge, and the oracle accepts counts rising strictly to the corpus' count."""
    settings = dataclasses.replace(TINY, kill=False, cache_bytes=1 << 20, topology="by-key")
    logs: list[str] = []
    figures = kstreams_peer.run(settings, logs.append, bootstrap)
    assert list(figures) == ["kstreams_e2e"]
    assert len(figures["kstreams_e2e"].samples) == 1 and figures["kstreams_e2e"].samples[0] > 0
    assert "by-key" in figures["kstreams_e2e"].name and "cache" in figures["kstreams_e2e"].name
    assert any("oracle passed" in line for line in logs), logs


def test_the_oracle_rejects_duplicates_gaps_missing_and_foreign_words() -> None:
    expected = {"a": 3, "b": 1}
    kstreams_peer.check_counts(expected, {"a": [1, 2, 3], "b": [1]}, every_update=True)
    kstreams_peer.check_counts(expected, {"a": [2, 3], "b": [1]}, every_update=False)  # merged by the cache
    wrong = {
        "duplicate": {"a": [1, 2, 2, 3], "b": [1]},  # a count re-emitted, as a replay without EOS would
        "gap": {"a": [1, 3], "b": [1]},
        "short": {"a": [1, 2], "b": [1]},
        "missing": {"a": [1, 2, 3]},
        "foreign": {"a": [1, 2, 3], "b": [1], "c": [1]},
    }
    for case, emitted in wrong.items():
        with pytest.raises(kstreams_peer.KStreamsBenchError, match="1 words' committed counts are not 1..n"):
            kstreams_peer.check_counts(expected, emitted, every_update=True)
        if case not in ("gap",):  # with the cache on, a gap is a merge
            with pytest.raises(kstreams_peer.KStreamsBenchError, match="rising strictly"):
                kstreams_peer.check_counts(expected, emitted, every_update=False)
    kstreams_peer.check_counts(expected, wrong["gap"], every_update=False)
    with pytest.raises(kstreams_peer.KStreamsBenchError, match="'a' counted \\[3, 2, 3\\]"):
        kstreams_peer.check_counts(expected, {"a": [3, 2, 3], "b": [1]}, every_update=False)


def test_the_peer_pairs_with_our_word_count() -> None:
    """Our word count's end-to-end rate stands beside Kafka Streams' in the same unit."""
    ours = consumer.consumer_figures()
    for figure in ours.values():
        figure.samples.append(30.0)
    theirs = kstreams_peer.peer_figures()
    theirs["kstreams_e2e"].samples.append(10.0)
    rows = {r.figure.key: r for r in rows_of(ours | theirs, kstreams_peer.PEER_OF, peer_figures=theirs)}
    assert rows["cons_e2e"].peer_ratio == pytest.approx(3.0)
    assert rows["kstreams_e2e"].role == "peer"


def test_settings_follow_the_consumer_bench_and_refuse_nonsense() -> None:
    from bench import runner

    for bench, ours, base in (
        (runner.QUICK, consumer.QUICK, kstreams_peer.QUICK),
        (runner.FULL, consumer.FULL, kstreams_peer.FULL),
    ):
        for runs in (1, 9):
            settings = kstreams_peer.settings_for(dataclasses.replace(bench, runs=runs))
            assert (settings.words, settings.name) == (ours.words, ours.name)
            assert settings.runs == min(runs, base.runs)
    assert kstreams_peer.FULL.pause_after == consumer.FULL.words // 4  # half of one of two instances' share
    for bad, match in (
        ({"topology": "flat-map"}, "topology is 'flat-map'"),
        ({"kill_at": 1.0}, "kill_at is 1.0"),
        ({"partitions": 0}, "partitions is 0"),
        ({"cache_bytes": -1}, "cache_bytes is -1"),
    ):
        with pytest.raises(ValueError, match=match):
            dataclasses.replace(TINY, **bad)


def test_without_the_program_the_suite_skips_the_part_saying_how_to_build_it(monkeypatch, tmp_path) -> None:
    from rich.console import Console

    monkeypatch.setattr(kstreams_peer, "STREAMS_JARS", tmp_path)
    monkeypatch.setattr(kstreams_peer, "PROGRAM_JAR", tmp_path / "kstreams-wordcount.jar")
    assert kstreams_peer.version() is None
    with pytest.raises(kstreams_peer.KStreamsUnavailable, match=r"run `make kafka-streams`"):
        kstreams_peer.classpath()

    monkeypatch.setattr(kafka_peer, "check", lambda: None)  # whatever else is here or not
    suite_module = importlib.import_module("bench.__main__")
    part = suite_module.Part(
        "kafka streams peer", kstreams_peer.peer_figures, lambda s, log: kstreams_peer.run(TINY, log)
    )
    figures, notes, status = suite_module.run_parts([part], None, Console(file=io.StringIO(), width=200))
    assert list(figures) == ["kstreams_e2e"] and isinstance(figures["kstreams_e2e"], Figure)
    assert status["kafka streams peer"]["status"] == "skipped"
    assert notes["kstreams_e2e"].startswith(kstreams_peer.NOT_BUILT)
