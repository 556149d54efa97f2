"""Fault tests of the `gazette` sink with real processes: Spark drivers run as subprocesses
(sink_driver.py, local[2,4] so tasks are retried) against a LocalCluster's broker.

- the driver SIGKILLed after recording its ACK intents, between its ACK appends and after them,
  then rerun with the same writeIds: every row once, and the rerun writes no row again;
- in that rerun, a task's Python worker SIGKILLed mid-write and a duplicate attempt that finished
  writing and was dropped (Spark retries both): ReadCommitted holds every row once, although the
  journal holds the attempts' extra messages; the same faults under at-least-once publishing (each
  row committed by a producer per attempt, as Spark's Kafka sink does) duplicate rows;
- a streaming query's driver SIGKILLed between ACK appends, restarted from its checkpoint.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections import Counter

import pytest
from sink_checks import committed, ids, make_journals

import fragments_io
from gazette.message.reader import ReadUncommitted
from gazette.message.uuid import Flags

DRIVER = pathlib.Path(__file__).with_name("sink_driver.py")
ROOT = str(pathlib.Path(fragments_io.__file__).resolve().parent.parent)
DRIVER_TIMEOUT_S = 300.0
# Each test starts 2 to 4 Spark drivers: about a minute on an idle 2-core machine, several on a busy one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def cluster(make_local_cluster):
    return make_local_cluster(1)


def _run(tmp_path, jobs, *, fault=None, task_fault=None):
    """Runs sink_driver.py with `jobs`; returns its exit code (-9: killed by the fault hook)."""
    pid_file = tmp_path / "driver.pids"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAGMENTS_IO_SINK")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYSPARK_PYTHON"] = sys.executable
    if fault:
        env["FRAGMENTS_IO_SINK_FAULT"] = f"{fault}:{pid_file}"
    if task_fault:
        env["FRAGMENTS_IO_SINK_TASK_FAULT"] = task_fault
    spec = {"pid_file": str(pid_file), "jobs": jobs}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
    )
    if proc.returncode not in (0, -9):
        raise AssertionError(
            f"driver exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc.returncode


def _data_messages(client, journal):
    """Messages in the journal, committed or not, ACKs left out."""
    return sum(1 for e in ReadUncommitted(client, journal) if e.flags != Flags.ACK_TXN)


def test_batch_faults_tasks_killed_and_drivers_killed_around_their_ack_appends(cluster, tmp_path):
    """Three drivers SIGKILLed at the three points of a commit, then one rerun that completes their
    writes (same writeIds) and also runs the task faults, with and without ACK ownership."""
    journals = ["faults/routed-a", "faults/routed-b"]
    client = make_journals(cluster, journals, app="sink-faults")
    make_journals(cluster, ["faults/exact", "faults/kafka-style"])
    broker = cluster.broker_endpoints[0]
    checkpoint = str(tmp_path / "intents")

    def job(write_id, start):
        options = {
            "broker": broker,
            "journals": "app=sink-faults",
            "key": "id",
            "writeId": write_id,
            "checkpointLocation": checkpoint,
        }
        return {"kind": "batch", "rows": 200, "start": start, "options": options}

    writes = {
        "after-record": ("w-before", 0),
        "after-first-ack": ("w-during", 1000),
        "after-acks": ("w-after", 2000),
    }
    for fault, (write_id, start) in writes.items():
        assert _run(tmp_path, [job(write_id, start)], fault=fault) == -9, f"the driver survived {fault}"
    before = {j: _data_messages(client, j) for j in journals}
    done_early = Counter(m["id"] for j in journals for m in committed(client, j))
    assert set(range(2000, 2200)) <= set(done_early)  # killed after its ACKs: committed already
    assert not set(range(0, 200)) & set(done_early)  # killed before appending: nothing committed yet
    assert len(set(range(1000, 1200)) & set(done_early)) not in (0, 200)  # killed between two journals' ACKs

    task_jobs = [
        {"kind": "batch", "rows": 400, "options": {"broker": broker, "journal": "faults/exact"}},
        {
            "kind": "kafka-style",
            "rows": 400,
            "broker": broker,
            "journal": "faults/kafka-style",
            "kill_after": 100,
        },
    ]
    # In the rerun, partition 0's first attempt is SIGKILLed after 100 rows; partition 1's first attempt
    # writes all its rows and then fails (as a speculative attempt whose commit Spark refuses).
    rerun = [job(w, s) for w, s in writes.values()] + task_jobs
    assert _run(tmp_path, rerun, task_fault="kill-after-rows:100:0,raise-after-write:0:1") == 0
    got = Counter(m["id"] for j in journals for m in committed(client, j))
    assert got == Counter([*range(0, 200), *range(1000, 1200), *range(2000, 2200)])
    assert {j: _data_messages(client, j) for j in journals} == before  # the rerun wrote no row again

    assert ids(committed(client, "faults/exact")) == Counter(range(400))
    # The failed attempts' messages are in the journal, never delivered: >= 100 + partition 1's rows.
    assert _data_messages(client, "faults/exact") >= 400 + 100 + 1
    at_least_once = ids(committed(client, "faults/kafka-style"))
    assert set(at_least_once) == set(range(400))
    assert sum(at_least_once.values()) - 400 == 100  # the killed attempt's rows, delivered twice


def test_streaming_driver_killed_between_ack_appends_restarts_from_checkpoint(cluster, tmp_path):
    journals = ["faults/stream-a", "faults/stream-b"]
    client = make_journals(cluster, journals, app="sink-stream")
    broker = cluster.broker_endpoints[0]
    inputs = tmp_path / "input"
    inputs.mkdir()
    for f in range(3):
        lines = [json.dumps({"id": f * 100 + i, "word": f"w{i % 7}"}) for i in range(100)]
        (inputs / f"part-{f}.json").write_text("\n".join(lines) + "\n")
    options = {
        "broker": broker,
        "journals": "app=sink-stream",
        "key": "word",
        "checkpointLocation": str(tmp_path / "checkpoint"),
    }
    job = {"kind": "stream", "input": str(inputs), "options": options}
    assert _run(tmp_path, [job], fault="after-first-ack") == -9
    assert _run(tmp_path, [job]) == 0
    got = Counter(m["id"] for j in journals for m in committed(client, j))
    assert got == Counter(range(300))
    # The replayed first micro-batch was written again by new attempts, and never delivered.
    assert sum(_data_messages(client, j) for j in journals) >= 400
