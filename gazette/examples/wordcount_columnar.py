"""Word count on the columnar path: the same counts, store and outputs as `WordCount`, a table at a
time (gazette.consumer.BatchApplication; needs pyarrow).

Per table of committed words: the words are dictionary-encoded, the counts of the new ones read with
one query per LOAD_BATCH words, each row's running count computed with numpy (the count before the
table plus its rank among the table's rows of the same word), and the output messages framed from
those columns (`Publisher.publish_uncommitted_table`). `finalize_txn` writes the changed counts with
one executemany, as `WordCount` does. The exactly-once oracle is WordCount's: each word's published
counts are 1..n once, and the store holds the corpus's counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gazette.consumer import BatchApplication, Shard
from gazette.consumer.store import Store
from gazette.examples.wordcount import OUTPUT_BATCH, CountStore, WordCount
from gazette.message import Publisher
from gazette.protocol.errors import ValidationError

WORD_SCHEMA = pa.schema([pa.field("word", pa.string())])


class ColumnarCountStore(CountStore):
    """CountStore whose pending outputs are tables of (word, count) columns."""

    def __init__(self, shard: Shard, url: str) -> None:
        super().__init__(shard, url)
        self.tables: list[pa.Table] = []
        self.pending = 0  # rows in `tables`


class ColumnarWordCount(BatchApplication, WordCount):
    """WordCount consuming a table of words at a time (see the module)."""

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        url = self.store_url or self._db_path(shard)
        return ColumnarCountStore(shard, url)

    def _db_path(self, shard: Shard) -> str:
        import os

        return os.path.join(self.db_dir, shard.id.replace("/", "_") + ".db")

    def source_schema(self, journal: str) -> pa.Schema:
        return WORD_SCHEMA

    def consume_batch(
        self, shard: Shard, store: Store, journal: str, batch: pa.Table, pub: Publisher
    ) -> None:
        assert isinstance(store, ColumnarCountStore)
        words = batch.column("word")
        if words.null_count:
            at = batch.filter(pc.is_null(words)).column("_begin")[0].as_py()
            raise ValidationError(f'journal {journal!r}: the message at offset {at} has no string "word"')
        encoded = pc.dictionary_encode(
            words.combine_chunks() if isinstance(words, pa.ChunkedArray) else words
        )
        uniq = encoded.dictionary.to_pylist()
        idx = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)
        counts = store.counts
        missing = [w for w in uniq if w not in counts]
        if missing:
            store.load(missing)
        before = np.fromiter((counts[w] for w in uniq), np.int64, len(uniq))
        sizes = np.bincount(idx, minlength=len(uniq))
        # Each row's rank among the table's rows of its word, in row order.
        order = np.argsort(idx, kind="stable")
        starts = np.cumsum(sizes) - sizes
        rank = np.empty(len(idx), np.int64)
        rank[order] = np.arange(len(idx), dtype=np.int64) - np.repeat(starts, sizes)
        running = before[idx] + rank + 1
        counts.update(zip(uniq, (before + sizes).tolist(), strict=True))
        store.changed.update(uniq)
        store.tables.append(pa.table({"word": words, "count": pa.array(running, pa.int64())}))
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
        super().finalize_txn(shard, store, pub)
