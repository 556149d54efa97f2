"""Word count on the columnar path: the same counts, store and outputs as `WordCount`, a table at a
time (gazette.consumer.BatchApplication; needs pyarrow).

Per table of committed words: the words are dictionary-encoded and found in the store's columnar
cache (words never seen are read from the table, one query per LOAD_BATCH words), each row's running
count computed with numpy (the count before the table plus its rank among the table's rows of the
same word), and the output messages framed from those columns (`Publisher.publish_uncommitted_table`). `finalize_txn` writes the changed counts with
one executemany, as `WordCount` does. The exactly-once oracle is WordCount's: each word's published
counts are 1..n once, and the store holds the corpus's counts.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gazette.consumer import BatchApplication, Shard
from gazette.consumer.store import Store
from gazette.examples.wordcount import LOAD_BATCH, OUTPUT_BATCH, CountStore, WordCount
from gazette.message import Publisher
from gazette.message.columnar import int_array, int_values
from gazette.protocol.errors import ValidationError

WORD_SCHEMA = pa.schema([pa.field("word", pa.string())])


class ColumnarCountStore(CountStore):
    """CountStore whose cache is columnar: the words seen (`vocab`, an Arrow string array), their
    counts and whether this transaction changed them (numpy arrays aligned with it). Pending
    outputs are tables of (word, count) columns. As CountStore's, the cache lives with the store
    instance and a failed commit drops it."""

    def __init__(self, shard: Shard, url: str) -> None:
        super().__init__(shard, url)
        self._clear_cache()
        self.tables: list[pa.Table] = []
        self.pending = 0  # rows in `tables`

    def _clear_cache(self) -> None:
        self.vocab: pa.Array = pa.nulls(0, pa.string())
        self.vcounts = np.zeros(0, np.int64)
        self.vchanged = np.zeros(0, bool)

    def positions(self, words: pa.Array) -> np.ndarray:
        """Where each of `words` (distinct) sits in the cache; words not cached yet are read from
        the table (one query per LOAD_BATCH words) and appended."""
        found = pc.index_in(words, value_set=self.vocab)
        pos = _int64(pc.fill_null(found, -1))
        new = np.flatnonzero(pos < 0)
        if len(new):
            fresh = words.take(int_array(new))
            names = fresh.to_pylist()
            stored: dict[str, int] = {}
            for i in range(0, len(names), LOAD_BATCH):
                batch = names[i : i + LOAD_BATCH]
                marks = ",".join("?" * len(batch))
                stored.update(
                    self.execute(f"SELECT word, count FROM counts WHERE word IN ({marks})", batch).fetchall()
                )
            base = len(self.vocab)
            self.vocab = pa.concat_arrays([self.vocab, fresh])
            loaded = np.fromiter((int(stored.get(w, 0)) for w in names), np.int64, len(names))
            self.vcounts = np.concatenate([self.vcounts, loaded])
            self.vchanged = np.concatenate([self.vchanged, np.zeros(len(names), bool)])
            pos[new] = np.arange(base, base + len(names), dtype=np.int64)
        return pos

    def changed_rows(self) -> list[tuple[str, int]]:
        """(word, count) of the words this transaction changed; clears the marks."""
        at = np.flatnonzero(self.vchanged)
        self.vchanged[:] = False
        return list(zip(self.vocab.take(int_array(at)).to_pylist(), self.vcounts[at].tolist(), strict=True))

    def _drop_counts_unless_committed(self, future: Any) -> None:
        if future.cancelled() or future.exception() is not None:
            self._clear_cache()


def _int64(arr: pa.Array) -> np.ndarray:
    """An int32 or int64 Arrow array without nulls as a writable int64 numpy array."""
    return int_values(arr).astype(np.int64, copy=True)


class ColumnarWordCount(BatchApplication, WordCount):
    """WordCount consuming a table of words at a time (see the module)."""

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        url = self.store_url or os.path.join(self.db_dir, shard.id.replace("/", "_") + ".db")
        return ColumnarCountStore(shard, url)

    def source_schema(self, journal: str) -> pa.Schema:
        return WORD_SCHEMA

    def consume_batch(
        self, shard: Shard, store: Store, journal: str, batch: pa.Table, pub: Publisher
    ) -> None:
        assert isinstance(store, ColumnarCountStore)
        words = batch.column("word").combine_chunks()
        if words.null_count:
            at = batch.filter(pc.is_null(words)).column("_begin")[0].as_py()
            raise ValidationError(f'journal {journal!r}: the message at offset {at} has no string "word"')
        encoded = pc.dictionary_encode(words)
        idx = _int64(encoded.indices)
        pos = store.positions(encoded.dictionary)
        sizes = np.bincount(idx, minlength=len(pos))
        # Each row's rank among the table's rows of its word, in row order.
        order = np.argsort(idx, kind="stable")
        starts = np.cumsum(sizes) - sizes
        rank = np.empty(len(idx), np.int64)
        rank[order] = np.arange(len(idx), dtype=np.int64) - np.repeat(starts, sizes)
        before = store.vcounts[pos]
        running = before[idx] + rank + 1
        store.vcounts[pos] = before + sizes
        store.vchanged[pos] = True
        store.tables.append(pa.Table.from_arrays([words, int_array(running)], names=["word", "count"]))
        store.pending += len(idx)
        if store.pending >= OUTPUT_BATCH:
            self._publish(store, pub)

    def _publish(self, store: ColumnarCountStore, pub: Publisher) -> None:
        if store.tables:
            table = store.tables[0] if len(store.tables) == 1 else pa.concat_tables(store.tables)
            pub.publish_uncommitted_table(self.output, table)
            store.tables, store.pending = [], 0

    def finalize_txn(self, shard: Shard, store: Store, pub: Publisher) -> None:
        assert isinstance(store, ColumnarCountStore)
        self._publish(store, pub)
        store.executemany(
            "INSERT INTO counts (word, count) VALUES (?, ?) ON CONFLICT (word) DO UPDATE SET count = excluded.count",
            store.changed_rows(),
        )
