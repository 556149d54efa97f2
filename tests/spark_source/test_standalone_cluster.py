"""fragments_io on a real Spark standalone cluster, not local[*]: a Master and two Workers started
from PySpark's own spark-class, one executor per Worker in a JVM of its own with Python workers of
its own, a driver in another process (conftest.py's `spark_cluster`, one per session). Journals are
written through a real broker (LocalCluster) that persists them to an s3:// store on moto's server;
batch reads, streaming reads across a restart from a checkpoint, read_committed's two plans, Delta
writes from the executors, the gazette sink (batch and streaming, journal to journal) and live reads
through the broker must all equal ReadCommitted over the broker.

A further case is a job in cluster_jobs.py and a test here that compares `spark_cluster.run(...)`
with `journals.committed_rows()` or `journals.committed_messages(journal)`.
"""

from __future__ import annotations

import logging
import os
import pathlib
import sys
import uuid

import pytest
from fio_journals import random_journal

import fragments_io
from gazette.message.reader import ReadCommitted
from gazette.testing.s3 import make_bucket, s3_store_url

JOURNALS = ("sc/words/a", "sc/words/b")
SCHEMA = "p INT, i INT, word STRING, n INT"
FIELDS = ["i", "word"]
# Journals are a few kB: a smaller partition budget puts each in a partition of its own, so both
# executors read (a whole journal is never split across partitions for a committed read).
SPLIT_BYTES = "1024"
CHUNK_FRAMES = 20  # frames per append; each append is flushed, so a journal has several fragments

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


class Journals:
    """Journals on a LocalCluster persisting to `store` (s3://, moto) and what ReadCommitted reads."""

    def __init__(self, cluster, store: str, moto: str, bucket: str, etcd: str, root: str) -> None:
        self.cluster, self.store, self.moto, self.bucket = cluster, store, moto, bucket
        self.etcd, self.root = etcd, root  # the brokers' etcd and root: etcd mode finds the journals there
        self.client = cluster.client()
        self._seed = 0

    def append(self, events: int = 80) -> None:
        """Appends random producers' messages (transactions, rollbacks, duplicates, messages without
        a UUID) to every journal, CHUNK_FRAMES at a time, each chunk flushed to the store."""
        for journal in JOURNALS:
            self._seed += 1
            frames = random_journal(self._seed, events, 3)
            for i in range(0, len(frames), CHUNK_FRAMES):
                self.client.append(journal, b"".join(frames[i : i + CHUNK_FRAMES]))
                self.client.flush(journal)

    def committed_rows(self, fields: list[str] = FIELDS, journals=JOURNALS) -> dict[str, list[list]]:
        """{journal: [[begin, *fields] ...]} of what ReadCommitted over the broker reads."""
        out = {}
        for journal in journals:
            envs = ReadCommitted(self.client, journal, skip_acks=True)
            out[journal] = sorted([e.begin, *(e.message.get(f) for f in fields)] for e in envs)
        return out

    def committed_messages(self, journal: str) -> list[dict]:
        """The messages ReadCommitted delivers from `journal`, without their UUIDs (`_meta`)."""
        out = []
        for env in ReadCommitted(self.client, journal, skip_acks=True):
            out.append({k: v for k, v in env.message.items() if k != "_meta"})
        return out

    def make_journal(self, name: str) -> str:
        spec = self.cluster.journal_spec(name, labels={"content-type": "application/x-ndjson"})
        self.client.apply_journals([spec])
        self.cluster.wait_for_routes([name])
        return name

    @property
    def broker(self) -> str:
        return ",".join(self.cluster.broker_endpoints)


@pytest.fixture(scope="module")
def journals(etcd, module_etcd_root, moto_server, tmp_path_factory):
    from gazette.local.cluster import LocalCluster

    bucket = f"sc-{uuid.uuid4().hex[:12]}"
    make_bucket(moto_server, bucket)
    store = s3_store_url(moto_server, bucket, "gazette/")
    data = tmp_path_factory.mktemp("sc-broker")
    with LocalCluster(
        brokers=1, store=store, etcd=etcd.endpoint, root=module_etcd_root, data_dir=str(data)
    ) as c:
        client = c.client()
        labels = {"content-type": "application/x-ndjson", "app": "sc"}
        specs = [
            c.journal_spec(j, labels=labels, compression=codec)
            for j, codec in zip(JOURNALS, ("zstandard", "gzip"), strict=True)
        ]
        client.apply_journals(specs)
        c.wait_for_routes(list(JOURNALS))
        out = Journals(c, store, moto_server, bucket, etcd.endpoint, module_etcd_root)
        out.append()
        yield out


def test_executors_are_jvms_of_their_own_with_python_workers_of_their_own(spark_cluster):
    """Every task ran in a Python worker under an executor JVM that a Worker launched: two executors,
    neither the driver's JVM, neither Python worker the driver's, all running this interpreter and
    importing fragments_io from this checkout (only the application's configuration said so)."""
    ready = spark_cluster.driver.ready
    reply = spark_cluster.run("identities", partitions=4)
    tasks = reply["value"]
    assert len(tasks) == 4 and all(t["executor_pid"] is not None for t in tasks), tasks
    executors = {t["executor_id"]: t["executor_pid"] for t in tasks}
    assert sorted(executors) == sorted(ready["executors"]) and len(executors) == 2
    assert len(set(executors.values())) == 2 and ready["jvm_pid"] not in executors.values()
    assert {t["executor_parent"] for t in tasks} == set(spark_cluster.daemons.worker_pids)
    workers = {t["pid"] for t in tasks}
    assert ready["python_pid"] not in workers and os.getpid() not in workers
    assert {t["python"] for t in tasks} == {sys.executable}
    here = str(pathlib.Path(fragments_io.__file__).resolve())
    assert {str(pathlib.Path(t["package"]).resolve()) for t in tasks} == {here}
    assert all(n >= 1 for n in reply["tasks"].values()) and sum(reply["tasks"].values()) == 4


def test_batch_read_from_s3_on_both_executors(spark_cluster, journals):
    """spark.read.format("gazette") over the s3:// store, in store mode and in etcd mode: the rows of
    ReadCommitted over the broker, read by tasks on both executors."""
    want = journals.committed_rows()
    assert all(want.values())
    store = spark_cluster.run(
        "batch_read",
        fields=FIELDS,
        store=journals.store,
        journals="sc/words/",
        schema=SCHEMA,
        maxPartitionBytes=SPLIT_BYTES,
    )
    assert store["value"]["rows"] == want
    assert store["value"]["partitions"] >= 2 and sorted(store["tasks"]) == sorted(
        spark_cluster.driver.ready["executors"]
    )
    assert all(n >= 1 for n in store["tasks"].values()), store["tasks"]
    etcd = spark_cluster.run(
        "batch_read",
        fields=FIELDS,
        etcd=journals.etcd,
        etcdRoot=journals.root,
        journals="app=sc",
        schema=SCHEMA,
    )
    assert etcd["value"]["rows"] == want


def test_read_committed_by_fragment(spark_cluster, journals):
    """read_committed's fragment-parallel plan: decisions per producer shuffled between the executors
    and joined back (its by-journal plan is the source's own committed read, as in the batch test)."""
    reply = spark_cluster.run(
        "read_committed",
        fields=FIELDS,
        by_fragment=True,
        store=journals.store,
        journals="sc/words/",
        maxPartitionBytes=SPLIT_BYTES,
    )
    assert reply["value"]["rows"] == journals.committed_rows()
    assert all(n >= 1 for n in reply["tasks"].values()), reply["tasks"]


def test_stream_restarts_from_its_checkpoint(spark_cluster, journals, tmp_path):
    """A readStream into parquet with a checkpoint, run to the end (availableNow), then again after
    more appends: the sink holds ReadCommitted's rows once each, and the second run read only the
    new ones."""
    args = {
        "out": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "fields": FIELDS,
        "store": journals.store,
        "journals": "sc/words/",
        "schema": SCHEMA,
    }
    first = spark_cluster.run("stream_to_parquet", **args)["value"]
    before = journals.committed_rows()
    assert first["rows"] == before
    journals.append(events=40)
    after = journals.committed_rows()
    added = sum(map(len, after.values())) - sum(map(len, before.values()))
    assert added > 0
    second = spark_cluster.run("stream_to_parquet", **args)["value"]
    assert second["rows"] == after and second["read_this_run"] == added


def test_delta_written_by_the_executors_to_s3_once(spark_cluster, journals):
    """fragments_io.to_delta through deltalake: both executors write a Parquet file to S3 (moto),
    the driver commits them once; the same version again writes nothing."""
    from deltalake import DeltaTable

    options = {
        "AWS_ENDPOINT_URL": journals.moto,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    path = f"s3://{journals.bucket}/delta/words"
    want = journals.committed_rows(fields=[])
    reply = spark_cluster.run(
        "committed_to_delta",
        path=path,
        app_id="sc",
        version=0,
        storage_options=options,
        store=journals.store,
        journals="sc/words/",
        schema=SCHEMA,
        maxPartitionBytes=SPLIT_BYTES,
    )
    assert reply["value"] == {"first": True, "again": False}
    assert all(n >= 1 for n in reply["tasks"].values()), reply["tasks"]
    table = DeltaTable(path, storage_options=options)
    assert table.transaction_version("sc") == 0 and len(table.file_uris()) == 2  # a file per partition
    got = {}
    for row in table.to_pyarrow_table().to_pylist():
        got.setdefault(row["journal"], []).append([row["begin"]])
    assert {j: sorted(v) for j, v in got.items()} == want


def _as_messages(rows: dict[str, list[list]]) -> list[tuple]:
    """committed_rows() as sorted (journal, begin, *FIELDS) tuples: what the sink publishes per row."""
    return sorted((journal, *row) for journal, rs in rows.items() for row in rs)


def _published(messages: list[dict]) -> list[tuple]:
    return sorted((m["journal"], m["begin"], *(m[f] for f in FIELDS)) for m in messages)


def test_sink_publishes_a_batch_read_once_from_both_executors(spark_cluster, journals):
    """Journal to journal on the cluster: the executors read the store and publish through the
    broker; the target journal's committed messages are the source's committed rows, once each."""
    target = journals.make_journal("sc/out/batch")
    reply = spark_cluster.run(
        "gazette_to_gazette",
        broker=journals.broker,
        journal=target,
        fields=FIELDS,
        store=journals.store,
        journals="sc/words/",
        schema=SCHEMA,
        maxPartitionBytes=SPLIT_BYTES,
    )
    assert reply["value"]["partitions"] >= 2 and all(n >= 1 for n in reply["tasks"].values()), reply
    assert _published(journals.committed_messages(target)) == _as_messages(journals.committed_rows())


def test_sink_stream_restarts_from_its_checkpoint_exactly_once(spark_cluster, journals, tmp_path):
    """A gazette-to-gazette stream run to the end, then again from its checkpoint after more
    appends: the target holds every committed source row once."""
    target = journals.make_journal("sc/out/stream")
    args = {
        "broker": journals.broker,
        "journal": target,
        "checkpoint": str(tmp_path / "checkpoint"),
        "fields": FIELDS,
        "store": journals.store,
        "journals": "sc/words/",
        "schema": SCHEMA,
    }
    first = spark_cluster.run("stream_gazette_to_gazette", **args)["value"]
    assert _published(journals.committed_messages(target)) == _as_messages(journals.committed_rows())
    journals.append(events=30)
    second = spark_cluster.run("stream_gazette_to_gazette", **args)["value"]
    want = _as_messages(journals.committed_rows())
    assert _published(journals.committed_messages(target)) == want
    assert first["read_this_run"] + second["read_this_run"] == len(want) and second["read_this_run"] > 0


def test_live_read_through_the_broker_sees_unflushed_messages(spark_cluster, journals):
    """A journal flushed half-way: with option broker the executors read the rest through the
    broker, and the rows equal ReadCommitted; the store alone holds only part of them."""
    name = journals.make_journal("sc/live/a")
    frames = random_journal(99, 80, 3)
    for i in range(0, len(frames), CHUNK_FRAMES):
        journals.client.append(name, b"".join(frames[i : i + CHUNK_FRAMES]))
        if i == 0:
            journals.client.flush(name)
    want = journals.committed_rows(journals=[name])
    common = {"fields": FIELDS, "store": journals.store, "journals": "sc/live/", "schema": SCHEMA}
    live = spark_cluster.run("batch_read", broker=journals.broker, **common)["value"]["rows"]
    assert live == want and want[name]
    stored = spark_cluster.run("batch_read", **common)["value"]["rows"].get(name, [])
    assert {tuple(r) for r in stored} < {tuple(r) for r in live[name]}
