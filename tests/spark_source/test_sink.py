"""The `gazette` sink in the session's Spark (local[2]): rows become committed messages exactly,
routing agrees with the Python mappings, framings by content type, and bad input fails early."""

from __future__ import annotations

from collections import Counter

import pytest
from sink_checks import committed, ids, make_journals


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
    df = (
        spark.range(300)
        .selectExpr(
            "id",
            "concat('w', id % 7) AS word",
            "timestamp_seconds(1700000000 + id) AS ts",
            "DATE'2024-02-29' AS d",
        )
        .repartition(3)
    )
    _write(df, broker=broker, journal="sink/one")
    got = committed(client, "sink/one")
    assert ids(got) == Counter(range(300))
    assert all(m["word"] == f"w{m['id'] % 7}" for m in got)
    first = next(m for m in got if m["id"] == 0)
    assert (first["ts"], first["d"]) == ("2023-11-14T22:13:20.000000Z", "2024-02-29")  # RFC 3339, UTC


def test_fnv1a32_array_equals_the_mappings_hash():
    import pyarrow as pa

    from fragments_io.sink_encode import fnv1a32_array
    from gazette.message.mapping import fnv1a32

    values = [b"", b"a", b"key-17", "ünïcode".encode(), bytes(range(256)), b"x" * 40]
    arr = pa.array(values, pa.binary()).slice(1)  # an offset into the buffers too
    assert fnv1a32_array(arr).tolist() == [fnv1a32(v) for v in values[1:]]


@pytest.mark.parametrize("mapping", ["modulo", "rendezvous"])
def test_keyed_rows_go_where_the_python_publishers_mapping_sends_them(spark, cluster, mapping):
    from gazette.message.mapping import ModuloMapping, RendezvousMapping

    names = [f"sink/keyed-{mapping}-{i}" for i in range(3)]
    client = make_journals(cluster, names, app=f"keyed-{mapping}")
    df = spark.range(240).selectExpr("id", "concat('k', id % 60) AS k").repartition(2)
    _write(df, broker=cluster.broker_endpoints[0], journals=f"app=keyed-{mapping}", key="k", mapping=mapping)
    cls = ModuloMapping if mapping == "modulo" else RendezvousMapping
    python_mapping = cls(client, f"app=keyed-{mapping}", key=lambda m: m["k"])
    try:
        python_mapping.wait_for_journals(lambda listed: len(listed) == 3, timeout=30)
        got = {n: committed(client, n) for n in names}
        assert sum(len(v) for v in got.values()) == 240
        assert all(len(v) for v in got.values())  # 60 keys reach every journal
        for name, messages in got.items():
            assert {python_mapping(m)[0] for m in messages} == {name}
    finally:
        python_mapping.close()


def test_value_column_is_the_whole_message_and_csv_journals_get_rows(spark, cluster):
    client = make_journals(cluster, ["sink/values"])
    make_journals(cluster, ["sink/csv"], content_type="text/csv")
    broker = cluster.broker_endpoints[0]
    values = spark.createDataFrame([('{"a": 1, "b": [1, 2]}',), ('{"a": 2}',)], "value STRING")
    _write(values, broker=broker, journal="sink/values")
    assert sorted(committed(client, "sink/values"), key=lambda m: m["a"]) == [{"a": 1, "b": [1, 2]}, {"a": 2}]
    rows = spark.createDataFrame([(1, "one, with comma"), (2, None)], "id INT, word STRING")
    _write(rows, broker=broker, journal="sink/csv")
    assert sorted(m[1:] for m in committed(client, "sink/csv")) == [["1", "one, with comma"], ["2", ""]]


def test_bad_input_fails_naming_what_was_wrong(spark, cluster):
    make_journals(cluster, ["sink/good"])
    make_journals(cluster, ["sink/fixed"], content_type="application/x-protobuf-fixed")
    broker = cluster.broker_endpoints[0]
    df = spark.range(3).selectExpr("id")
    with pytest.raises(Exception, match="journal sink/missing does not exist"):
        _write(df, broker=broker, journal="sink/missing")
    with pytest.raises(Exception, match="journal sink/fixed has content type 'application/x-protobuf-fixed'"):
        _write(df, broker=broker, journal="sink/fixed")
    with pytest.raises(Exception, match="unknown option 'topic'.*journal"):
        _write(df, broker=broker, topic="sink/good")
    bad = spark.createDataFrame([('{"ok": 1}',), ("[1, 2]",)], "value STRING").coalesce(1)
    with pytest.raises(
        Exception, match=r"row 1: column 'value' holds '\[1, 2\]', which is not the text of a JSON"
    ):
        _write(bad, broker=broker, journal="sink/good")
    assert committed(cluster.client(), "sink/good") == []  # the failed write committed nothing
