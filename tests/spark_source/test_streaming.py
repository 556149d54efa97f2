"""The gazette streaming source through Spark: availableNow runs with maxBytesPerTrigger into a
parquet sink, and a driver killed with SIGKILL mid-batch and restarted, over journals appended and
flushed by a real broker between batches: the sink holds the committed set exactly."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from fio_journals import FRAMING, envelopes_of, persist_journal, random_journal

from fragments_io.committed import committed_reference
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, new_producer_id
from gazette.protocol.codec import Codec

DRIVER = pathlib.Path(__file__).with_name("stream_driver.py")
RUN_TIMEOUT_S = 240.0
SCHEMA = "p INT, i INT, word STRING, n INT"


@pytest.fixture(autouse=True)
def _quiet_sequencer(caplog):
    caplog.set_level(logging.CRITICAL, logger="gazette.message.sequencer")


def _sink_rows(spark, out):
    """(journal, begin) of the rows the file sink committed (its _spark_metadata log decides)."""
    return sorted(
        (r.journal, r.begin) for r in spark.read.parquet(str(out)).select("journal", "begin").collect()
    )


def _available_now(spark, store, out, checkpoint, **options):
    reader = spark.readStream.format("gazette").option("store", store).option("schema", SCHEMA)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(RUN_TIMEOUT_S), "the availableNow run did not finish"
    assert query.exception() is None
    return [p for p in query.recentProgress if p.numInputRows]


def test_available_now_with_max_bytes_per_trigger(spark, tmp_path):
    store = f"file://{tmp_path}/store/"
    frames = {f"av/{k}": random_journal(40 + k, 90, 3) for k in range(2)}
    half = {j: len(f) * 2 // 3 for j, f in frames.items()}
    for j, f in frames.items():
        persist_journal(store, j, f[: half[j]], (Codec.GZIP, Codec.ZSTANDARD), frames_per_fragment=15)
    out, ck = tmp_path / "out", tmp_path / "ck"
    batches = _available_now(spark, store, out, ck, journals="av/", maxBytesPerTrigger=4000)
    assert len(batches) >= 3  # the limit split the run into micro-batches

    def committed(upto):
        rows = []
        for j, f in frames.items():
            envs = list(envelopes_of(j, f[: upto[j]]))
            rows += [(j, e.begin) for e in committed_reference(envs)]
        return sorted(rows)

    assert _sink_rows(spark, out) == committed(half)
    # The rest, persisted at other fragment boundaries (offsets continue): the next run adds
    # exactly the newly committed messages, including transactions opened in the first part.
    for j, f in frames.items():
        rest = f[half[j] :]
        begin = len(b"".join(f[: half[j]]))
        from fio_journals import persist_fragment

        for k in range(0, len(rest), 20):
            content = b"".join(rest[k : k + 20])
            persist_fragment(store, j, begin, content, Codec.SNAPPY)
            begin += len(content)
    _available_now(spark, store, out, ck, journals="av/")
    assert _sink_rows(spark, out) == committed({j: len(f) for j, f in frames.items()})


def _descendants(pid):
    """Every live process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid):
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _driver(config, wait=True):
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    if not wait:
        return proc
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


class _Producer:
    """Framed JSON messages of one producer: self-committed ones and transactions."""

    def __init__(self, name):
        self.pid = new_producer_id()
        self.clock = 1 << 61
        self.name = name
        self.sent = []

    def msg(self, flag, **body):
        self.clock += CLOCK_TICK
        frame = FRAMING.encode({"word": self.name, **body}, build_uuid(self.pid, self.clock, flag))
        self.sent.append(frame)
        return frame

    def ack(self, clock=None):
        if clock is None:
            self.clock += CLOCK_TICK
        return FRAMING.encode_ack(build_uuid(self.pid, self.clock if clock is None else clock, Flags.ACK_TXN))


def test_driver_killed_mid_batch_restarts_exactly_once(spark, etcd, etcd_root, tmp_path):
    """Appends and flushes through a broker between runs; a transaction's CONTINUEs land in the first
    run and its ACK in the batch during which the driver is killed (SIGKILL of its process group,
    JVM included) after the batch was planned; the restarted query replays that batch."""
    from gazette.local.cluster import LocalCluster
    from gazette.message.reader import ReadCommitted

    store = f"file://{tmp_path}/store/"
    out, ck = tmp_path / "out", tmp_path / "ck"
    base = {"store": store, "out": str(out), "checkpoint": str(ck), "schema": SCHEMA}
    names = ["kill/a", "kill/b"]
    with LocalCluster(
        brokers=1, store=store, etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "d")
    ) as c:
        client = c.client()
        client.apply_journals(
            [
                c.journal_spec(n, labels={"content-type": "application/x-ndjson"}, compression="zstandard")
                for n in names
            ]
        )
        c.wait_for_routes(names)

        def append(journal, frames):
            client.append(journal, b"".join(frames))
            client.flush(journal)

        a, b, t = _Producer("a"), _Producer("b"), _Producer("t")
        # Run 1 (several batches): plain messages, a duplicate, and transaction t left open.
        for k in range(4):
            append("kill/a", [a.msg(Flags.OUTSIDE_TXN, n=k * 10 + i) for i in range(5)])
            append("kill/b", [b.msg(Flags.CONTINUE_TXN, n=k * 10 + i) for i in range(4)] + [b.ack()])
        append("kill/a", [t.msg(Flags.CONTINUE_TXN, n=i) for i in range(3)] + [a.sent[-1]])
        append("kill/a", [t.msg(Flags.CONTINUE_TXN, n=3 + i) for i in range(3)])
        first = _driver({**base, "options": {"maxBytesPerTrigger": 900}})
        assert first["batches"] >= 3

        # Run 2: t's ACK (and a rolled-back span) arrive; the driver dies during the batch.
        rolled = t.clock
        append("kill/a", [t.ack(), a.msg(Flags.OUTSIDE_TXN, n=100)])
        append("kill/a", [t.msg(Flags.CONTINUE_TXN, n=200), t.ack(clock=rolled + CLOCK_TICK)])
        append("kill/b", [b.msg(Flags.OUTSIDE_TXN, n=101), b.sent[0]])
        marker = tmp_path / "planned"
        proc = _driver({**base, "block": str(marker)}, wait=False)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the blocked batch never started"
            time.sleep(0.1)
        tree = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        planned = max(int(p.name) for p in (ck / "offsets").iterdir() if p.name.isdigit())
        assert not (ck / "commits" / str(planned)).exists()  # planned, not committed
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in tree):
            assert time.monotonic() < deadline, (
                f"left running after the kill: {[p for p in tree if _alive(p)]}"
            )
            time.sleep(0.1)

        # Run 3 replays the planned batch; then more data and a new journal, and run 4.
        third = _driver(base)
        assert third["batches"] >= 1
        assert (ck / "commits" / str(planned)).exists()
        client.apply_journals(
            [c.journal_spec("kill/c", labels={"content-type": "application/x-ndjson"}, compression="gzip")]
        )
        c.wait_for_routes(["kill/c"])
        names.append("kill/c")
        append("kill/c", [a.msg(Flags.OUTSIDE_TXN, n=300 + i) for i in range(3)])
        append("kill/a", [t.msg(Flags.CONTINUE_TXN, n=400), t.ack()])
        _driver({**base, "options": {"maxBytesPerTrigger": 400}})

        want = sorted((n, e.begin) for n in names for e in ReadCommitted(client, n, skip_acks=True))
    got = _sink_rows(spark, out)
    assert len(got) == len(set(got)), "a message was written twice"
    assert got == want
    t_rows = spark.read.parquet(str(out)).where("word = 't'").select("n").collect()
    assert sorted(r.n for r in t_rows) == [0, 1, 2, 3, 4, 5, 400]  # n=200 was rolled back
