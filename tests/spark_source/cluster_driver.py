"""A Spark driver on a standalone cluster, in its own process, serving jobs to the test process
(test_standalone_cluster.py; the suite's own session is local[2] and a process holds one SparkContext).

`python cluster_driver.py CONFIG_JSON` starts `fragments_io.spark_session(master, **conf)`, waits
until `executors` executors have registered, then answers requests: one JSON line on stdin,
{"job": NAME, "args": {...}}, runs `cluster_jobs.JOBS[NAME](spark, **args)` and writes one JSON line,
{"value": ..., "tasks": {executor id: tasks it ran for this job}} or {"error": traceback}, to the
original stdout (anything else printed goes to stderr). The first line it writes is {"ready": ...}
with the driver's pids and executor ids. EOF on stdin stops the session and the process. `RemoteDriver` is the test process's side
(`run`, or `submit` then `result` to act on the cluster while a job runs).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

EXECUTORS_TIMEOUT_S = 120.0
LISTENER_DRAIN_MS = 30_000
READY_TIMEOUT_S = 300.0  # the driver's JVM, then the executors' JVMs, on a busy 2-core machine
JOB_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0


class DriverError(RuntimeError):
    """The driver failed to start, a job raised, or no reply came in time (with the driver's log)."""


class RemoteDriver:
    """The test's handle on a cluster_driver.py process: `start()` returns once its executors are
    registered (`ready` then holds the driver's pids and executor ids); `run(job, **args)` returns
    the job's reply; `stop()` ends the session (EOF on its stdin), killing it after STOP_TIMEOUT_S."""

    def __init__(self, config: dict[str, Any], env: dict[str, str], log: Path) -> None:
        self.config, self.env, self.log = config, env, log
        self.ready: dict[str, Any] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()

    def start(self) -> RemoteDriver:
        with open(self.log, "wb") as err:
            self._proc = subprocess.Popen(
                [sys.executable, __file__, json.dumps(self.config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self.env,
                cwd=self.log.parent,
                text=True,
                start_new_session=True,
            )
        threading.Thread(target=self._pump, args=(self._proc.stdout,), daemon=True).start()
        try:
            self.ready = self._reply(READY_TIMEOUT_S, "to start")["ready"]
        except BaseException:
            self.stop()
            raise
        return self

    def _pump(self, stdout: Any) -> None:
        for line in stdout:
            self._replies.put(line)
        self._replies.put(None)

    def _reply(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise DriverError(
                f"the Spark driver did not reply {what} within {timeout:.0f} s; {self._tail()}"
            ) from None
        if line is None:
            raise DriverError(f"the Spark driver exited before replying {what}; {self._tail()}")
        return json.loads(line)

    def _tail(self) -> str:
        try:
            return "its log ends:\n" + self.log.read_text(errors="replace")[-4000:]
        except OSError as exc:
            return f"no log ({exc})"

    def run(self, name: str, timeout: float = JOB_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """Runs job `name` of cluster_jobs.JOBS; {"value": ..., "tasks": {executor: tasks}}."""
        self.submit(name, **args)
        return self.result(name, timeout)

    def submit(self, name: str, **args: Any) -> None:
        """Starts job `name` and returns at once (a test acts on the cluster while it runs); collect
        its reply with `result(name)` before the next job."""
        assert self._proc is not None and self._proc.stdin is not None, "start() first"
        self._proc.stdin.write(json.dumps({"job": name, "args": args}) + "\n")
        self._proc.stdin.flush()

    def result(self, name: str, timeout: float = JOB_TIMEOUT_S) -> dict[str, Any]:
        """The reply of the job submitted last (DriverError if it raised or after `timeout`)."""
        reply = self._reply(timeout, f"to job {name}")
        if "error" in reply:
            raise DriverError(f"job {name} failed in the Spark driver:\n{reply['error']}")
        return reply

    def replied(self) -> bool:
        """Whether a reply is waiting (the job submitted last has ended), without taking it."""
        return not self._replies.empty()

    def stop(self) -> None:
        """Ends the driver: EOF (it stops its session), then SIGKILL of its group after the timeout,
        and of its JVM (in a session of its own) if that outlives it. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        jvm = self.ready.get("jvm_pid")
        if jvm is not None:
            _kill_if_alive(jvm)


def _kill_if_alive(pid: int) -> None:
    """SIGKILLs `pid` (the driver's JVM) unless it exits by itself within STOP_TIMEOUT_S: it exits
    when the driver's Python, its parent, is gone."""

    def driver_jvm() -> bool:  # and not another process that got its pid since
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return b"org.apache.spark.deploy.SparkSubmit" in f.read()
        except OSError:
            return False

    deadline = time.monotonic() + STOP_TIMEOUT_S
    while driver_jvm():
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.1)


def executor_tasks(spark) -> dict[str, int]:
    """Tasks each executor has run so far, from the driver's status store (the driver excluded)."""
    sc = spark.sparkContext._jsc.sc()
    sc.listenerBus().waitUntilEmpty(LISTENER_DRAIN_MS)  # task-end events reach the store asynchronously
    summaries = sc.statusStore().executorList(True)
    out = {}
    for i in range(summaries.size()):
        s = summaries.apply(i)
        if s.id() != "driver":
            out[s.id()] = int(s.totalTasks())
    return out


def wait_for_executors(spark, count: int) -> list[str]:
    """The ids of the registered executors once there are `count` (RuntimeError after the timeout)."""
    deadline = time.monotonic() + EXECUTORS_TIMEOUT_S
    while True:
        ids = sorted(executor_tasks(spark))
        if len(ids) >= count:
            return ids
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(ids)} of {count} executors registered within {EXECUTORS_TIMEOUT_S:.0f} s"
            )
        time.sleep(0.2)


def main() -> None:
    config = json.loads(sys.argv[1])
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # py4j, Spark and jobs print to stderr; only replies reach the test
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    logging.getLogger("gazette.message.sequencer").setLevel(logging.CRITICAL)
    import cluster_jobs

    import fragments_io

    spark = fragments_io.spark_session(config["master"], "fragments_io-standalone", **config["conf"])
    try:
        spark.sparkContext.setLogLevel("WARN")
        executors = wait_for_executors(spark, config["executors"])
        gateway = spark.sparkContext._gateway.proc  # type: ignore[attr-defined]
        ready = {"python_pid": os.getpid(), "jvm_pid": gateway.pid, "executors": executors}
        replies.write(json.dumps({"ready": ready}) + "\n")
        for line in sys.stdin:
            request = json.loads(line)
            before = executor_tasks(spark)
            try:
                value = cluster_jobs.JOBS[request["job"]](spark, **request.get("args", {}))
                after = executor_tasks(spark)
                tasks = {e: n - before.get(e, 0) for e, n in after.items()}
                reply = {"value": value, "tasks": tasks}
            except Exception:
                reply = {"error": traceback.format_exc()}
            replies.write(json.dumps(reply) + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
