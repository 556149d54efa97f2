"""The `gazette` sink in the session's Spark (local[2]): rows become committed messages exactly,
routing agrees with the Python mappings, framings by content type, and bad input fails early."""

from __future__ import annotations

from collections import Counter

import pytest
from sink_checks import committed, ids, make_journals

from fragments_io.errors import SinkJournalError


@pytest.fixture
def cluster(make_local_cluster):
    return make_local_cluster(1)


def _write(df, **options):
    w = df.write.format("gazette").mode("append")
    for k, v in options.items():
        w = w.option(k, str(v))
    w.save()


def test_batch_rows_become_committed_json_messages(spark, cluster):
    client = make_journals(cluster, ["sink/one"])
    broker = cluster.broker_endpoints[0]
    df = spark.range(300).selectExpr("id", "concat('w', id % 7) AS word").repartition(3)
    _write(df, broker=broker, journal="sink/one")
    got = committed(client, "sink/one")
    assert ids(got) == Counter(range(300))
    assert all(m["word"] == f"w{m['id'] % 7}" for m in got)
