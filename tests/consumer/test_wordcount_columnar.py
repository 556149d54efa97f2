"""ColumnarWordCount against WordCount on generated histories: the columnar path (ColumnarSequencer
and consume_batch) and the per-message path (Sequencer, drive_spans and consume_messages) leave the
same counts in the store and publish the same counts, each word's 1..n once.

Histories are test_sequencing's, one journal, cut into read chunks at random, with small rings (so
spans replay); words are drawn from a few. Rows with a producer but clock 0 are left out: no
publisher writes them, and a Sequencer replay hands them out a second time (the Decider does not).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from types import SimpleNamespace

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message.test_columnar import cut
from message.test_sequencing import ACK, JOURNALS, histories

from gazette.examples.wordcount import CountStore, WordCount
from gazette.examples.wordcount_columnar import WORD_SCHEMA, ColumnarCountStore, ColumnarWordCount
from gazette.message.columnar import ColumnarSequencer, meta_schema
from gazette.message.envelope import Envelope
from gazette.message.sequencer import Sequencer
from gazette.message.sequencing import Replay, drive_spans

SHARD = SimpleNamespace(fqn="/root/items/count-000", id="count-000")
WORDS = ["apple", "pear", 'q"uote', "ünï"]


def words_of(envs: list[Envelope]) -> list[Envelope]:
    return [
        Envelope(
            e.journal,
            e.begin,
            e.end,
            {"word": WORDS[e.message % len(WORDS)]},
            None,
            e.producer,
            e.clock,
            e.flags,
        )
        for e in envs
        if not (e.producer and not e.clock)
    ]


def per_message(
    envs: list[Envelope], ring_size: int, db: str
) -> tuple[dict[str, int], list[tuple[str, int]]]:
    store = CountStore(SHARD, db)  # type: ignore[arg-type]
    store.restore_checkpoint(SHARD)  # type: ignore[arg-type]
    app = WordCount("unused")
    seq = Sequencer(ring_size=ring_size)
    for span in drive_spans(seq, envs):
        if isinstance(span, Replay):
            seq.start_replay(
                [e for e in envs if e.journal == span.journal and span.begin <= e.begin and e.end <= span.end]
            )
            continue
        app.consume_messages(SHARD, store, span, None)  # type: ignore[arg-type]
    outputs = [(m["word"], m["count"]) for m in store.outputs]
    counts = dict(store.counts)
    store.destroy()
    return counts, outputs


def columnar(envs: list[Envelope], tables: list[list[Envelope]], ring_size: int, db: str):
    store = ColumnarCountStore(SHARD, db)  # type: ignore[arg-type]
    store.restore_checkpoint(SHARD)  # type: ignore[arg-type]
    app = ColumnarWordCount("unused")
    seq = ColumnarSequencer(ring_size)
    schema = meta_schema(WORD_SCHEMA)
    for chunk in tables:
        table = pa.Table.from_arrays(
            [
                pa.array([e.begin for e in chunk], pa.int64()),
                pa.array([e.end for e in chunk], pa.int64()),
                pa.array([e.producer.hex() or None for e in chunk], pa.string()),
                pa.array([e.clock for e in chunk], pa.int64()),
                pa.array([e.flags for e in chunk], pa.int32()),
                pa.array([e.message["word"] for e in chunk], pa.string()),
            ],
            schema=schema,
        )
        done = seq.add(chunk[0].journal, table)
        if done.num_rows:
            app.consume_batch(SHARD, store, chunk[0].journal, done, None)  # type: ignore[arg-type]
    outputs = [
        (w, n)
        for t in store.tables
        for w, n in zip(t.column("word").to_pylist(), t.column("count").to_pylist(), strict=True)
    ]
    counts = dict(zip(store.vocab.to_pylist(), store.vcounts.tolist(), strict=True))
    store.destroy()
    return counts, outputs


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(envs=histories(), data=st.data(), ring_size=st.sampled_from([1, 2, 5, 64]))
def test_columnar_word_count_equals_the_per_message_one(envs, data, ring_size):
    envs = words_of([e for e in envs if e.journal == JOURNALS[0]])
    tables = cut(envs, data.draw(st.lists(st.integers(1, max(len(envs), 1)), max_size=5)))
    with tempfile.TemporaryDirectory() as tmp:
        want_counts, want_out = per_message(envs, ring_size, f"{tmp}/a.db")
        got_counts, got_out = columnar(envs, tables, ring_size, f"{tmp}/b.db")
    assert got_counts == want_counts
    assert Counter(got_out) == Counter(want_out)
    per_word: dict[str, list[int]] = {}
    for w, n in got_out:
        per_word.setdefault(w, []).append(n)
    assert per_word == {w: list(range(1, n + 1)) for w, n in Counter(w for w, _ in got_out).items()}
    assert sum(1 for e in envs if e.flags != ACK) >= len(got_out)
