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

A speculative duplicate attempt (spark.speculation on, Workers under two names of 127.0.0.1 so that
Spark sees two hosts): the same held first attempt of partition 0 makes Spark launch a speculative
copy on the other executor; the copy is committed, Spark kills the original once the stage has
finished, and ReadCommitted equals the input rows exactly once although the journal holds partition
0's rows from both attempts' producers, only the copy's acknowledged.

Each test breaks (or reconfigures) its cluster, so it starts a cluster of its own rather than sharing
the session's `spark_cluster` (whose tests count on its executors).
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
from gazette.message.reader import ReadCommitted, ReadUncommitted
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


# --- a speculative duplicate attempt ---------------------------------------------------------------
# Spark's own speculation: partition 0's first attempt holds mid-write (the same task fault), the
# other partitions finish on the other executor, and Spark launches a speculative copy of partition 0
# there. Spark never runs a speculative copy on a host already running an attempt of that task, so
# the Workers get host names of their own, both 127.0.0.1 ("127.0.0.1", "localhost"): two hosts to Spark.
SPEC_HOSTS = ["127.0.0.1", "localhost"]
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",  # 2 of the 4 tasks done
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "100ms",
    # Spark 3.4+ also asks a slow task to be "inefficient" (a low rate of records read); a held task
    # read its input already, so only the run time decides here.
    "spark.speculation.efficiency.enabled": "false",
}
ORIGINAL_END_WAIT_S = 60.0  # for the killed original to show in the status store, and its worker to go


def _attempts_of(driver, partition: int) -> dict[int, dict]:
    """{attempt number: the status store's record} of `partition`'s tasks in the latest job."""
    attempts = driver.run("last_job_attempts")["value"]
    return {a["attempt"]: a for a in attempts if a["partition"] == partition}


def _wait_for_end(driver, partition: int, attempt: int, pid: int) -> dict:
    """That attempt's record once it is no longer RUNNING and its Python worker `pid` is gone (or a
    zombie); fails after ORIGINAL_END_WAIT_S."""
    deadline = time.monotonic() + ORIGINAL_END_WAIT_S
    while True:
        record = _attempts_of(driver, partition).get(attempt)
        if record is not None and record["status"] != "RUNNING" and not _alive(pid):
            return record
        if time.monotonic() > deadline:
            pytest.fail(f"attempt {attempt} of partition {partition} did not end: {record}, pid {pid} alive")
        time.sleep(1.0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_speculative_duplicate_attempt_is_written_once(make_spark_cluster, make_local_cluster, tmp_path):
    """Partition 0's first attempt publishes its first batch and holds, on one executor; the other
    executor runs the three other tasks, then Spark's speculation launches attempt 1 of partition 0
    there, which writes all of the partition's rows and is committed (the output commit coordinator
    lets it). The job ends once every partition has succeeded, while the original still holds, and
    Spark kills the original (the stage finished). ReadCommitted of the output equals the input rows
    exactly once; the raw journal holds partition 0's rows from two producers, only one acknowledged."""
    hold = tmp_path / "held.json"
    fault = {TASK_FAULT_ENV: f"hold-after-rows:{BATCH_ROWS}:{HELD_PARTITION}", TASK_HOLD_ENV: str(hold)}
    spark = make_spark_cluster(executor_env=fault, conf=SPECULATION, worker_hosts=SPEC_HOSTS)
    brokers = make_local_cluster(1)
    client = make_journals(brokers, [JOURNAL])
    driver = spark.driver
    assert len(driver.ready["executors"]) == 2, driver.ready

    args = {"broker": brokers.broker_endpoints[0], "journal": JOURNAL, "rows": ROWS}
    driver.submit("range_to_gazette", partitions=PARTITIONS, batch_rows=BATCH_ROWS, **args)
    try:
        held = _wait_for_hold(hold, driver)
        assert (held["partition"], held["attempt"]) == (HELD_PARTITION, 0), held
        executor, chain = executor_above(held["pid"])
        assert executor is not None, f"no executor JVM above the held task's Python worker: {chain}"
        held_executor = executor_id(executor)
        # The original stays held throughout: the job can only end through a speculative copy.
        reply = driver.result("range_to_gazette", timeout=JOB_WAIT_S)
        original = _wait_for_end(driver, HELD_PARTITION, 0, held["pid"])
    finally:
        hold.unlink(missing_ok=True)  # a held task still alive (the test failed) goes on
    assert reply["value"] == {"partitions": PARTITIONS}, reply

    attempts = _attempts_of(driver, HELD_PARTITION)
    assert set(attempts) == {0, 1}, attempts
    copy = attempts[1]
    # The copy was a speculative task on the other executor (the other host) and succeeded; the
    # original, on the held executor, was killed while held (its Python worker is gone).
    assert copy["speculative"] and copy["status"] == "SUCCESS", attempts
    assert copy["executor"] != held_executor and copy["host"] != attempts[0]["host"], attempts
    assert attempts[0]["executor"] == held_executor and not attempts[0]["speculative"], attempts
    assert original["status"] == "KILLED", original

    assert ids(committed(client, JOURNAL)) == Counter(range(ROWS))
    part = range(ROWS // PARTITIONS)  # partition 0's ids
    original_producer = bytes.fromhex(held["producer"])
    winners = {e.producer for e in ReadCommitted(client, JOURNAL, skip_acks=True) if e.message["id"] in part}
    assert len(winners) == 1 and original_producer not in winners, winners
    (winner,) = winners
    # Both attempts published partition 0's rows: the copy all of them, acknowledged; the original
    # its first batch, never acknowledged (nor rolled back: killed).
    won, won_acks = _of_producer(client, winner)
    assert won == list(part) and won_acks == 1
    assert _of_producer(client, original_producer) == (list(range(held["rows"])), 0)
    assert _data_messages(client) == ROWS + held["rows"]
    print(
        f"speculation: original on executor {held_executor} ({attempts[0]['host']}) {original['status']} "
        f"({original['error']!r}); speculative copy on executor {copy['executor']} ({copy['host']}) committed"
    )
