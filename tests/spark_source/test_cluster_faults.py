"""Faults of the `gazette` sink on a real Spark standalone cluster, not local[*] (conftest.py's
`make_spark_cluster`: a Master, two one-core Workers, an executor JVM under each, a driver in a
process of its own), writing through a LocalCluster's broker.

An executor JVM SIGKILLed while its task is mid-write: the task of partition 0 (first attempt only)
publishes its first Arrow batch uncommitted, flushes, and holds (the sink's `hold-after-rows` task
fault, set in the executors' environment by the application's configuration); the test sees those
messages in the journal, uncommitted, then SIGKILLs the executor JVM above that task (found through
/proc, a child of a Worker). Spark reruns the lost task on a live executor, the Worker gets a new
executor, the job succeeds, and ReadCommitted of the output equals the input rows exactly once,
although the journal still holds the killed attempt's messages (published, never acknowledged).

The test kills an executor of its cluster, so it starts a cluster of its own rather than sharing the
session's `spark_cluster` (whose tests count on its executors).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest
from sink_checks import committed, ids, make_journals
from standalone import executor_above, executor_id, proc_stat

from fragments_io.sink import TASK_FAULT_ENV, TASK_HOLD_ENV
from gazette.message.reader import ReadUncommitted
from gazette.message.uuid import Flags

JOURNAL = "cf/out"
ROWS, PARTITIONS, BATCH_ROWS = 400, 4, 50  # partition 0 holds ids [0, 100), published 50 at a time
HELD_PARTITION = 0
HOLD_WAIT_S = 180.0  # from the job's submission to the held task's file: executors' Python workers start
JOB_WAIT_S = 240.0
POLL_S = 0.1

pytestmark = pytest.mark.timeout(900)


def _wait_for_hold(path, driver) -> dict:
    """The held task's file (JSON), once written; fails if the job ended first or after HOLD_WAIT_S."""
    deadline = time.monotonic() + HOLD_WAIT_S
    while not path.exists():
        if driver.replied():
            reply = driver.result("range_to_gazette")  # raises with the driver's traceback if it failed
            pytest.fail(f"the job ended without its task holding mid-write: {reply}")
        if time.monotonic() > deadline:
            pytest.fail(f"no sink task held mid-write within {HOLD_WAIT_S:.0f} s ({path} never appeared)")
        time.sleep(POLL_S)
    return json.loads(path.read_text())


def _of_producer(client, producer: bytes) -> tuple[list[int], int]:
    """(ids of the data messages, number of ACKs) that `producer` appended to JOURNAL, read raw."""
    data, acks = [], 0
    for env in ReadUncommitted(client, JOURNAL):
        if env.producer != producer:
            continue
        if env.flags == Flags.ACK_TXN:
            acks += 1
        else:
            data.append(env.message["id"])
    return sorted(data), acks


def _data_messages(client) -> int:
    return sum(1 for e in ReadUncommitted(client, JOURNAL) if e.flags != Flags.ACK_TXN)


def test_executor_jvm_killed_mid_write_reruns_its_task_exactly_once(
    make_spark_cluster, make_local_cluster, tmp_path
):
    hold = tmp_path / "held.json"
    fault = {TASK_FAULT_ENV: f"hold-after-rows:{BATCH_ROWS}:{HELD_PARTITION}", TASK_HOLD_ENV: str(hold)}
    spark = make_spark_cluster(executor_env=fault)
    brokers = make_local_cluster(1)
    client = make_journals(brokers, [JOURNAL])
    driver = spark.driver
    executors = driver.ready["executors"]
    assert len(executors) == 2, executors

    args = {"broker": brokers.broker_endpoints[0], "journal": JOURNAL, "rows": ROWS}
    driver.submit("range_to_gazette", partitions=PARTITIONS, batch_rows=BATCH_ROWS, **args)
    try:
        held = _wait_for_hold(hold, driver)
        assert (held["partition"], held["attempt"]) == (HELD_PARTITION, 0), held
        producer = bytes.fromhex(held["producer"])
        # Mid-write: the held attempt's first batch is in the journal, uncommitted (no ACK, nothing
        # committed yet), and the rest of its partition's rows are not published.
        published, acks = _of_producer(client, producer)
        assert published == list(range(held["rows"])) and 0 < held["rows"] < ROWS // PARTITIONS, held
        assert acks == 0 and committed(client, JOURNAL) == []

        executor, chain = executor_above(held["pid"])
        assert executor is not None, f"no executor JVM above the held task's Python worker: {chain}"
        assert proc_stat(executor)[1] in spark.daemons.worker_pids  # a Worker's child
        killed = executor_id(executor)
        assert killed in executors
        os.kill(executor, signal.SIGKILL)
        reply = driver.result("range_to_gazette", timeout=JOB_WAIT_S)
    finally:
        hold.unlink(missing_ok=True)  # a held task still alive (the test failed before the kill) goes on

    # Every task ran once on the live executors: the lost one was rerun there, as a new attempt.
    assert killed not in reply["tasks"] and sum(reply["tasks"].values()) == PARTITIONS, reply
    assert ids(committed(client, JOURNAL)) == Counter(range(ROWS))
    # The killed attempt's messages stay in the journal, never acknowledged (nor rolled back: its
    # Python worker died with the JVM); every other attempt wrote its rows once.
    assert _of_producer(client, producer) == (list(range(held["rows"])), 0)
    assert _data_messages(client) == ROWS + held["rows"]
    # The Worker whose executor died launched another: the application has two again.
    now = driver.run("active_executors", count=2)["value"]
    assert len(now) == 2 and killed not in now and set(executors) - {killed} <= set(now), now
