"""bench/wordcount_group.py: our word count in Kafka Streams' shape on a tiny corpus (4 journals, 2
consumer processes, the one that paused at its kill point SIGKILLed and restarted), the oracle passing
over its committed output and stores (a smoke test of the code paths, not a measurement); the pause
claimed by one process only; the rows' pairing with Kafka Streams' figure and their place in the suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import kstreams_peer, wordcount_group, wordcount_pause  # noqa: E402
from bench.report import rows_of  # noqa: E402
from gazette.local.cluster import LocalCluster  # noqa: E402

TINY = kstreams_peer.Settings("smoke", runs=1, words=4000)


def test_a_member_paused_mid_transaction_killed_and_restarted_leaves_every_count_once() -> None:
    """The columnar word count over 4 journals in 2 processes; the process that counted its pause
    point first is SIGKILLed and restarted; word_count's oracle passes (each word's committed counts
    1..n once, the stores equal to the corpus) and the timings are those of a run with a kill."""
    import collections

    words = wordcount_group.consumer.make_words(TINY.words, seed=0)
    expected = collections.Counter(w["word"] for w in words)
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        layout = wordcount_group.Layout("bench/wcgroup-test", TINY.partitions)
        wordcount_group.consumer._apply_journals(cluster, client, [layout.words(k) for k in range(4)])
        heads, shares = wordcount_group.publish_corpus(client, layout, words)
        assert sum(shares.values()) == TINY.words and all(shares.values())
        r = wordcount_group.word_count(cluster, client, TINY, "columnar", layout, heads, shares, expected)
    assert r.output_records == TINY.words
    assert r.killed_counted is not None and r.killed_counted >= TINY.pause_after
    assert r.killed_at_s is not None and 0 <= r.killed_at_s < r.seconds
    assert r.rejoined_s is not None and r.rejoined_s > 0
    assert r.rate == pytest.approx(TINY.words / r.seconds)
    assert [part.split(":")[0] for part in r.placement.split(", ")] == ["000", "001", "002", "003"]


def test_one_process_of_the_group_claims_the_pause(tmp_path: Path) -> None:
    assert wordcount_pause.read_pause(str(tmp_path)) is None
    assert wordcount_pause._claim_pause(str(tmp_path), 1200) is True
    assert wordcount_pause._claim_pause(str(tmp_path), 1300) is False  # another process, or a restart
    paused = wordcount_pause.read_pause(str(tmp_path))
    assert paused is not None and paused["pid"] == os.getpid() and paused["counted"] == 1200
    for name, at in (
        ("first-count-000-11", "5.5"),
        ("first-count-000-12", "3.25"),
        ("first-count-001-11", "4.0"),
    ):
        (tmp_path / name).write_text(at)
    assert wordcount_pause.first_consumes(str(tmp_path)) == {"count-000": 3.25, "count-001": 4.0}


def test_our_rows_stand_beside_kafka_streams_and_refuse_unknown_apps() -> None:
    ours = wordcount_group.group_figures(TINY)
    ours["cons_group_e2e_columnar"].samples.append(30.0)
    ours["cons_group_e2e"].samples.append(5.0)
    theirs = kstreams_peer.peer_figures(TINY)
    theirs["kstreams_e2e"].samples.append(10.0)
    rows = {r.figure.key: r for r in rows_of(theirs | ours, wordcount_group.PEER_OF, peer_figures=theirs)}
    assert rows["cons_group_e2e_columnar"].peer_ratio == pytest.approx(3.0)
    assert rows["cons_group_e2e_columnar"].ratio == pytest.approx(3.0) and rows["cons_group_e2e_columnar"].met
    assert rows["cons_group_e2e"].ratio == pytest.approx(0.5) and rows["cons_group_e2e"].met is False
    assert "4 journals, 2 processes, a SIGKILL" in rows["cons_group_e2e_columnar"].figure.name
    with pytest.raises(ValueError, match="unknown word count 'vectorised'"):
        wordcount_group.run(TINY, print, ("vectorised",))


def test_the_suite_runs_the_part_after_kafka_streams_even_without_kafka() -> None:
    from bench import runner

    suite_module = importlib.import_module("bench.__main__")
    args = argparse.Namespace(
        quick=True, runs=None, no_spark=True, spark=False, no_gazette=True, no_kafka=True, no_allocator=True
    )
    parts = suite_module.parts(args, runner.QUICK, {})
    names = [p.name for p in parts]
    assert names.index("word count group") == names.index("kafka streams peer") + 1
    part = parts[names.index("word count group")]
    assert part.skip_note is None  # ours needs no Kafka; its limit row then says why it is missing
    assert part.settings == kstreams_peer.settings_for(runner.QUICK)
    assert dataclasses.asdict(part.settings)["words"] == kstreams_peer.QUICK.words
