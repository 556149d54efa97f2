"""A Spark standalone cluster on loopback, started from PySpark's own `spark-class`: one Master and
N Workers, each a JVM of its own, for tests that run fragments_io on executors that are not the
driver (test_standalone_cluster.py). Not local[*]: executors are JVMs the Workers launch, with Python
workers of their own.

The daemons get a clean environment (no PYTHONPATH, PYSPARK_PYTHON or AWS settings) so that an
application's executors learn the Python to run, where the package is and the store's credentials
only from the application's own configuration, as on a real cluster. Each daemon is the leader of a
new process group (its executors and their Python workers are in it); `stop()` ends every group it
started, SIGTERM then SIGKILL, and a failed `start()` stops what it had started before raising.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 120.0  # a JVM daemon takes about 10 s to start on a busy 2-core machine
STOP_TIMEOUT_S = 15.0
POLL_S = 0.2
DAEMON_MEMORY = "256m"  # heap of the Master and Worker JVMs themselves (Spark's default is 1g)
# Short-lived JVMs doing little work start faster with one JIT tier and the serial collector.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"  # a Worker's child JVM
# Set by the user's shell or the test session and not meant for the daemons (see the module doc).
_SCRUBBED_PREFIXES = ("AWS_", "PYSPARK_", "SPARK_")
_SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StandaloneError(RuntimeError):
    """A daemon did not start, exited, or the workers did not register in time (with its log's tail)."""


def spark_home() -> Path:
    """PySpark's package directory, which is a SPARK_HOME: bin/spark-class and jars/ are in it."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError as exc:
        return f"(no log: {exc})"


def proc_stat(pid: int) -> tuple[str, int]:
    """(command name, parent pid) from /proc/PID/stat (the name may hold spaces and parentheses)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    name = text[text.index("(") + 1 : text.rindex(")")]
    return name, int(text[text.rindex(")") + 2 :].split()[1])


def proc_cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace").split("\0")


def executor_above(pid: int) -> tuple[int | None, list[int]]:
    """The executor JVM running `pid` (the nearest ancestor, or `pid` itself, running EXECUTOR_CLASS;
    None if there is none) and the pids walked up to it."""
    chain: list[int] = []
    while pid > 1 and len(chain) < 16:
        chain.append(pid)
        if EXECUTOR_CLASS in proc_cmdline(pid):
            return pid, chain
        pid = proc_stat(pid)[1]
    return None, chain


def executor_id(pid: int) -> str:
    """The executor id an executor JVM was launched with (its --executor-id)."""
    args = proc_cmdline(pid)
    return args[args.index("--executor-id") + 1]


def _resolves_to_loopback(host: str) -> bool:
    try:
        return socket.gethostbyname(host) == "127.0.0.1"
    except OSError:
        return False


class SparkStandalone:
    """`workers` Workers of `cores` cores and `memory` each, under one Master, all bound to 127.0.0.1;
    `worker_hosts` gives each Worker a host name of its own that resolves to 127.0.0.1 (e.g.
    "127.0.0.1" and "localhost"): Spark then sees distinct hosts, as it must for speculation (it never
    runs a task's speculative copy on a host that runs an attempt of it already).

    `master_url` (spark://127.0.0.1:PORT) and `web_url` (the Master's UI, whose /json lists the
    workers) are set by `start()`; `worker_pids` are the Worker JVMs' pids (an executor's parent).
    """

    def __init__(
        self,
        workdir: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        worker_hosts: list[str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workers = workers
        self.worker_hosts = list(worker_hosts) if worker_hosts else ["127.0.0.1"] * workers
        if len(self.worker_hosts) != workers or not all(_resolves_to_loopback(h) for h in self.worker_hosts):
            raise ValueError(f"worker_hosts must be {workers} names of 127.0.0.1, got {worker_hosts}")
        self.cores = cores
        self.memory = memory
        self.master_url = ""
        self.web_url = ""
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self._deadline = 0.0

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for name, p, _ in self._procs if name.startswith("worker")]

    def _env(self, host: str = "127.0.0.1") -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _SCRUBBED and not any(k.startswith(p) for p in _SCRUBBED_PREFIXES)
        }
        conf = self.workdir / "conf"  # empty: no spark-defaults.conf or spark-env.sh from elsewhere
        conf.mkdir(parents=True, exist_ok=True)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(conf),
            SPARK_LOCAL_IP="127.0.0.1",  # what every daemon binds; `host` is only the name it gives
            SPARK_LOCAL_HOSTNAME=host,
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
            # The Master's REST submission server would bind the fixed port 6066.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )
        return env

    def _launch(self, name: str, args: list[str], host: str = "127.0.0.1") -> subprocess.Popen[bytes]:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(host),
                cwd=self.workdir,
                start_new_session=True,  # its own process group: its executors are stopped with it
            )
        self._procs.append((name, proc, log))
        return proc

    def _check_alive(self) -> None:
        for name, proc, log in self._procs:
            if proc.poll() is not None:
                raise StandaloneError(
                    f"Spark {name} exited with {proc.returncode}; its log ends:\n{_tail(log)}"
                )

    def _wait_for_log(self, name: str, pattern: re.Pattern[str], deadline: float) -> str:
        log = next(log for n, _, log in self._procs if n == name)
        while True:
            found = pattern.search(log.read_text(errors="replace"))
            if found:
                return found.group(1)
            self._check_alive()
            if time.monotonic() > deadline:
                raise StandaloneError(
                    f"Spark {name} did not log {pattern.pattern!r} within {START_TIMEOUT_S:.0f} s; "
                    f"its log ends:\n{_tail(log)}"
                )
            time.sleep(POLL_S)

    def master_state(self) -> dict:
        """The Master's own view (its UI's /json): workers, their state, cores and applications."""
        with _NO_PROXY.open(self.web_url + "/json", timeout=5) as resp:
            return json.loads(resp.read())

    def start(self, wait: bool = True) -> SparkStandalone:
        """Starts the Master, then the Workers; with `wait`, returns once the Master lists every
        Worker ALIVE (else call `wait_for_workers()`, e.g. after starting a driver meanwhile).
        StandaloneError, with the failing daemon's log, after START_TIMEOUT_S."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._deadline = time.monotonic() + START_TIMEOUT_S
        try:
            self._launch("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"])
            self.master_url = self._wait_for_log("master", _MASTER_URL, self._deadline)
            self.web_url = f"http://127.0.0.1:{self._wait_for_log('master', _MASTER_UI, self._deadline)}"
            for i, host in enumerate(self.worker_hosts):
                work = self.workdir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                args = ["--host", host, "--port", "0", "--webui-port", "0", "--cores", str(self.cores)]
                args += ["--memory", self.memory, "--work-dir", str(work), self.master_url]
                self._launch(f"worker-{i}", [WORKER_CLASS, *args], host)
            if wait:
                self.wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_workers(self) -> None:
        """Returns once the Master lists every Worker ALIVE (StandaloneError, with the daemons'
        logs, START_TIMEOUT_S after `start()` began)."""
        self._wait_for_workers(self._deadline)

    def _wait_for_workers(self, deadline: float) -> None:
        state: dict = {}
        while True:
            self._check_alive()
            try:
                state = self.master_state()
            except (OSError, ValueError):
                state = {}
            alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
            if len(alive) == self.workers:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}:\n{_tail(log, 1500)}" for n, _, log in self._procs)
                raise StandaloneError(
                    f"{len(alive)} of {self.workers} Spark workers registered with {self.master_url} within "
                    f"{START_TIMEOUT_S:.0f} s (master state: {state}); logs:\n{logs}"
                )
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Ends every process group started here (Workers first, then the Master): SIGTERM, then
        SIGKILL for what is left after STOP_TIMEOUT_S. Idempotent."""
        for _, proc, _ in reversed(self._procs):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for _, proc, _ in reversed(self._procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # the daemon, or executors and workers it left behind
            proc.wait()
        self._procs.clear()

    def __enter__(self) -> SparkStandalone:
        return self if self._procs else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signals the process group `proc` leads (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
