"""ConsumerGroup: N members of one consumer application, driven from plain (sync) code.

What `LocalCluster.run_consumer` returns: it applies the shard specs and starts `processes` members,
in this process (Consumers on the facade's loop thread) or as `gazette consumer run` subprocesses
(mode "subprocess": the application travels as cloudpickle bytes), and stops (gracefully or as a
crash), restarts, adds or signals members. `client()` is a ShardClient of the group's Shard services.

A member that exits by itself (a process paused past its lease ends itself, as Gazette's members do;
or one that crashed) is reported by a watcher thread, naming the member and why it exited (the
`gazette consumer run` exit line from its log), and restarted once per exit unless
`restart_exited=False`. `exits` lists those exits; `restarts` counts the restarts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

from gazette import tunables
from gazette.auth.cluster import ClusterSecurity
from gazette.client.loop import LoopThread, default_loop
from gazette.consumer.application import Application
from gazette.consumer.client import ShardClient
from gazette.consumer.consumer import Consumer, ShardInfo, apply_shards, list_shards
from gazette.consumer.serve import EXIT_LINE_PREFIX, LEASE_LOST_EXIT_CODE, pickle_application
from gazette.consumer.spec import ShardSpec
from gazette.consumer.status import ReplicaCode
from gazette.consumer.transaction import Hooks
from gazette.keyspace.etcd import connect
from gazette.keyspace.procutil import read_ready_line, spawn, terminate, terminate_all
from gazette.protocol.endpoints import PEER_KEEPALIVE_S, check_keepalive
from gazette.protocol.errors import ConfigurationError, StateError, ValidationError

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.2  # how often the watcher looks for members that exited by themselves
MODES = ("inprocess", "subprocess")
# What `python -m` runs for a subprocess member, with `gazette consumer run`'s arguments: the CLI, or
# a module wrapping it (gazette.testing.zombie, which the fencing tests run).
DEFAULT_ENTRY_MODULE = "gazette.cli.main"


@dataclasses.dataclass
class _Member:
    """Member `index`: an in-process Consumer or a subprocess, while it runs."""

    index: int
    zone: str
    suffix: str = ""
    endpoint: str = ""
    metrics: str = ""  # its /metrics URL
    consumer: Consumer | None = None
    proc: subprocess.Popen | None = None
    log_path: str = ""
    stopped: bool = True  # by the group (stop, kill, close) or not started: an exit to leave alone
    restarts: int = 0  # times the watcher restarted it after it exited by itself

    @property
    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.consumer is not None


@dataclasses.dataclass(frozen=True)
class MemberExit:
    """A member that exited by itself: its index and suffix then, exit status (None in-process),
    why (its exit line, or what its log or lease says), its log, and whether it was restarted."""

    index: int
    suffix: str
    returncode: int | None
    reason: str
    log_path: str
    restarted: bool


class ConsumerGroup:
    """Members `0..processes-1` of one consumer application under `root`.

    In mode "subprocess" each member runs `python -m <entry_module> consumer run ...`: the CLI
    (gazette.cli.main) unless `entry_module` names a module wrapping it."""

    def __init__(
        self,
        app: Application,
        *,
        etcd: str,
        broker: str,
        root: str,
        processes: int = 1,
        loop: LoopThread | None = None,
        lease_ttl_s: int = 5,
        shard_limit: int = 1024,
        zones: tuple[str, ...] = ("local",),
        hooks: Hooks | None = None,
        exit_drain_s: float = tunables.LOCAL_EXIT_DRAIN_S,
        mode: str = "inprocess",
        data_dir: str | None = None,
        log_level: str = "WARNING",
        restart_exited: bool = True,
        security: ClusterSecurity | None = None,
        broker_keepalive: float | None = None,
        entry_module: str = DEFAULT_ENTRY_MODULE,
    ) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ValidationError(f"run_consumer needs processes >= 1 (got {processes!r})")
        if not isinstance(app, Application):
            raise ValidationError(f"{app!r} is not an instance of gazette.consumer.Application")
        if mode not in MODES:
            raise ValidationError(f'consumer mode "{mode}" is not known (expected one of {MODES})')
        if mode == "subprocess" and hooks is not None and hooks != Hooks():
            raise ConfigurationError(
                "test hooks (Hooks) run in the consumer's own process: they need mode='inprocess' "
                "(subprocess members are crashed with kill_consumer instead)",
            )
        if mode != "subprocess" and entry_module != DEFAULT_ENTRY_MODULE:
            raise ConfigurationError(
                f"entry_module={entry_module!r} is the module a member process runs: it needs mode='subprocess'"
            )
        self.app = app
        self.etcd = etcd
        self.broker = broker
        self.root = root
        self.lease_ttl_s = lease_ttl_s
        self.shard_limit = shard_limit
        self.zones = zones
        self.hooks = hooks or Hooks()
        self.exit_drain_s = exit_drain_s
        self.mode = mode
        self.entry_module = entry_module
        self.log_level = log_level
        # Auth keys and TLS of the whole cluster: members verify and sign with them, as the group's client.
        self.security = security or ClusterSecurity()
        self.broker_keepalive = check_keepalive(broker_keepalive)  # members' pings to brokers (Consumer)
        self._loop = loop or default_loop()
        self._n = processes
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="gazette-consumers-")
        self._app_file = ""
        if mode == "subprocess":
            data = pickle_application(app)  # fails here, with how to fix it, if it cannot travel
            os.makedirs(self.data_dir, exist_ok=True)
            fd, self._app_file = tempfile.mkstemp(
                prefix=f"{type(app).__name__}-", suffix=".pkl", dir=self.data_dir
            )
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        self.members: list[_Member] = []
        self._client: ShardClient | None = None
        self.restart_exited = restart_exited
        self.exits: list[MemberExit] = []  # members that exited by themselves, in order
        self.restarts = 0  # of those, how many the watcher restarted
        self._lock = threading.RLock()  # member changes: the caller's and the watcher's
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def consumers(self) -> list[Consumer | None]:
        """The in-process Consumer of each member (None: stopped, or a subprocess)."""
        return [m.consumer for m in self.members]

    # ---- shards

    def apply(self, shards: Iterable[ShardSpec], deletes: Iterable[str] = ()) -> int:
        """Writes shard specs (and deletes shard ids) straight to etcd; returns the revision. (The
        Shard service's apply, `client().apply_shards`, also checks the journals they name.)"""
        specs, gone = list(shards), list(deletes)

        async def run() -> int:
            client = connect(self.etcd)
            try:
                return await apply_shards(client, self.root, specs, gone)
            finally:
                await client.close()

        return self._loop.run(run(), timeout=tunables.CONSUMER_START_TIMEOUT_S)

    def list_shards(self) -> list[ShardInfo]:
        async def run() -> list[ShardInfo]:
            client = connect(self.etcd)
            try:
                return await list_shards(client, self.root)
            finally:
                await client.close()

        return self._loop.run(run(), timeout=tunables.CONSUMER_START_TIMEOUT_S)

    def client(self) -> ShardClient:
        """A ShardClient of this group's members (found through etcd; shared, closed with the group):
        `group.client().stat_shard("count-000", read_through={journal: end})`."""
        if self._client is None:
            self._client = ShardClient(
                etcd=self.etcd, root=self.root, loop=self._loop,
                auth_keys=self.security.auth_keys, tls=self.security.client_tls, keepalive=PEER_KEEPALIVE_S,
            )  # fmt: skip
        return self._client

    def wait_for(
        self, predicate: Callable[[list[ShardInfo]], bool], timeout: float = 60.0, what: str = ""
    ) -> list[ShardInfo]:
        """Polls `list_shards()` until `predicate` holds; raises TimeoutError with the last listing."""
        deadline = time.monotonic() + timeout
        while True:
            shards = self.list_shards()
            if predicate(shards):
                return shards
            if time.monotonic() > deadline:
                listing = {s.spec.id: [(r.suffix, r.slot, str(r.status)) for r in s.replicas] for s in shards}
                raise TimeoutError(f"waited {timeout:.0f} s for {what or predicate!r}; shards: {listing}")
            time.sleep(tunables.LOCAL_POLL_INTERVAL_S)

    def wait_for_primaries(self, timeout: float = 60.0) -> list[ShardInfo]:
        """Waits until every enabled shard has a PRIMARY replica."""

        def ready(shards: list[ShardInfo]) -> bool:
            return all(
                s.spec.disable or (s.primary is not None and s.primary.status.code == ReplicaCode.PRIMARY)
                for s in shards
            )

        return self.wait_for(ready, timeout, "every shard to have a PRIMARY")

    # ---- members

    def start(self, shards: Iterable[ShardSpec] = ()) -> ConsumerGroup:
        specs = list(shards)
        if specs:
            self.apply(specs)
        for _ in range(self._n):
            self.add()
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._watch, daemon=True, name=f"consumer-group {self.root}"
            )
            self._watcher.start()
        return self

    def add(self) -> int:
        """Starts one more member; returns its index."""
        with self._lock:
            i = len(self.members)
            self.members.append(_Member(i, self.zones[i % len(self.zones)]))
            self.restart(i)
            return i

    def restart(self, i: int) -> None:
        """Starts member `i` anew (a new suffix: a crashed member's lease may still hold the old one)."""
        with self._lock:
            self._restart(i)

    def _restart(self, i: int) -> None:
        m = self._member(i)
        if m.running:
            self.stop(i)
        elif m.proc is not None and m.proc.stdout is not None:
            m.proc.stdout.close()  # it exited by itself
        m.suffix = f"consumer-{i}-{time.monotonic_ns() % 1_000_000_000:09d}"
        if self.mode == "inprocess":
            consumer = Consumer(
                self.app, self.etcd, self.broker, root=self.root, zone=m.zone, suffix=m.suffix,
                shard_limit=self.shard_limit, lease_ttl_s=self.lease_ttl_s, hooks=self.hooks,
                exit_drain_s=self.exit_drain_s, auth_keys=self.security.auth_keys,
                server_tls=self.security.server_tls, peer_tls=self.security.client_tls,
                broker_auth_keys=self.security.auth_keys, broker_tls=self.security.client_tls,
                broker_keepalive=self.broker_keepalive,
            )  # fmt: skip
            self._loop.run(_started(consumer), timeout=tunables.CONSUMER_START_TIMEOUT_S)
            m.consumer, m.endpoint, m.metrics = consumer, consumer.endpoint, consumer.metrics_endpoint
        else:
            self._spawn(m)
        m.stopped = False

    # ---- members that exit by themselves

    def _watch(self) -> None:
        """The watcher thread: reports each member that exited by itself, and restarts it once."""
        while not self._closed.wait(WATCH_INTERVAL_S):
            for i in range(len(self.members)):
                with self._lock:
                    if self._closed.is_set():
                        return
                    self._check_exited(i)

    def _check_exited(self, i: int) -> None:
        m = self.members[i]
        if m.stopped:
            return
        if m.proc is not None:
            returncode = m.proc.poll()
            if returncode is None:
                return
            reason = _exit_reason(returncode, m.log_path)
        elif m.consumer is not None and m.consumer.stopped.is_set():
            returncode = None
            lost = m.consumer.session.lost_reason
            reason = f"its etcd lease was lost ({lost})" if lost is not None else "it stopped by itself"
        else:
            return
        m.stopped = True  # reported (and restarted) once per exit
        suffix, log_path = m.suffix, m.log_path
        name = f"consumer member {i} ({m.zone}#{suffix}) of {self.root}"
        restarted = False
        if not self.restart_exited:
            log.error("%s exited by itself: %s; not restarted (restart_exited=False)", name, reason)
        else:
            log.warning("%s exited by itself: %s; restarting it", name, reason)
            try:
                self._restart(i)
            except Exception as exc:
                log.error("%s could not be restarted: %s", name, exc)
            else:
                restarted = True
                m.restarts += 1
                self.restarts += 1
                log.warning("consumer member %d restarted as %s#%s", i, m.zone, m.suffix)
        self.exits.append(MemberExit(i, suffix, returncode, reason, log_path, restarted))

    def _spawn(self, m: _Member) -> None:
        m.log_path = os.path.join(self.data_dir, f"{m.suffix}.log")
        cmd = [
            sys.executable, "-m", self.entry_module, "consumer", "run", "--app-pickle", self._app_file,
            "--etcd", self.etcd, "--broker", self.broker, "--root", self.root, "--zone", m.zone,
            "--suffix", m.suffix, "--port", "0", "--shard-limit", str(self.shard_limit),
            "--lease-ttl", str(self.lease_ttl_s), "--exit-drain", str(self.exit_drain_s),
            "--log-level", self.log_level, *self.security.server_args(),
        ]  # fmt: skip
        if self.broker_keepalive is not None:
            cmd += ["--broker-keepalive", str(self.broker_keepalive)]
        tls = self.security.client_tls
        for flag, value in (("--broker-cert-file", tls and tls.cert_file),
                            ("--broker-cert-key-file", tls and tls.key_file),
                            ("--broker-trusted-ca-file", tls and tls.ca_file)):  # fmt: skip
            if value:
                cmd += [flag, value]
        # The child imports what this process can: the application's modules travel by reference.
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)
        env = {
            **os.environ,
            "PYTHONPATH": path,
            **self.security.env("CONSUMER_AUTH_KEYS", "BROKER_AUTH_KEYS"),
        }
        with open(m.log_path, "ab") as log_file:
            m.proc = spawn(cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, env=env)
        ready = read_ready_line(m.proc, tunables.CONSUMER_START_TIMEOUT_S)
        if ready is None:
            terminate(m.proc)
            with open(m.log_path, errors="replace") as f:
                tail = f.read()[-2000:]
            raise ConfigurationError(f"consumer {m.suffix} did not start; its log ends with:\n{tail}")
        m.endpoint, m.metrics = ready["endpoint"], ready.get("metrics", "")

    def stop(self, i: int, graceful: bool = True) -> None:
        """Stops member `i`: gracefully (its shards move first; SIGTERM for a subprocess), or as a crash
        (`graceful=False`: SIGKILL for a subprocess; its lease expires after `lease_ttl_s`)."""
        with self._lock:
            self._stop(i, graceful)

    def _stop(self, i: int, graceful: bool) -> None:
        m = self._member(i)
        m.stopped = True
        consumer, m.consumer = m.consumer, None
        if consumer is not None:
            self._loop.run(consumer.stop(graceful=graceful), timeout=tunables.CONSUMER_STOP_TIMEOUT_S)
        proc = m.proc
        if proc is not None:
            if proc.poll() is None:
                if graceful:
                    terminate(proc, timeout=tunables.CONSUMER_STOP_TIMEOUT_S)
                else:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def kill(self, i: int) -> None:
        """A crash of member `i`: nothing drains, its lease expires after `lease_ttl_s`."""
        self.stop(i, graceful=False)

    def pid(self, i: int) -> int:
        """The process id of subprocess member `i` (for signals such as SIGSTOP)."""
        m = self._member(i)
        if m.proc is None or m.proc.poll() is not None:
            what = "runs in this process" if self.mode == "inprocess" else "is not running"
            raise StateError(f"consumer {i} {what}: it has no process of its own to signal")
        return int(m.proc.pid)

    def endpoint(self, i: int) -> str:
        """Where member `i` serves the Shard service."""
        return self._member(i).endpoint

    def metrics(self, i: int) -> str:
        """The URL of member `i`'s Prometheus metrics (http://host:port/metrics)."""
        return self._member(i).metrics

    def close(self) -> None:
        """Stops every member at once (so none waits to hand its shards to another exiting one)."""
        self._closed.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()  # it may be restarting a member: let it finish, then stop that one too
        with self._lock:
            self._close()

    def _close(self) -> None:
        for m in self.members:
            m.stopped = True
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None
        consumers = [m.consumer for m in self.members if m.consumer is not None]
        procs = [m.proc for m in self.members if m.proc is not None and m.proc.poll() is None]
        for m in self.members:
            m.consumer = None
        for proc in procs:
            _signal_stop(proc)
        if consumers:
            self._loop.run(_stop_all(consumers), timeout=tunables.CONSUMER_STOP_TIMEOUT_S)
        for proc in terminate_all(procs, tunables.CONSUMER_STOP_TIMEOUT_S):
            log.warning(
                "consumer pid %d did not stop within %.0f s and was killed",
                proc.pid,
                tunables.CONSUMER_STOP_TIMEOUT_S,
            )
        for m in self.members:
            if m.proc is not None and m.proc.stdout is not None:
                m.proc.stdout.close()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _member(self, i: int) -> _Member:
        if not 0 <= i < len(self.members):
            raise ValidationError(f"no consumer {i} (the group has members 0..{len(self.members) - 1})")
        return self.members[i]

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exit_reason(returncode: int, log_path: str) -> str:
    """Why a member process exited: its `gazette consumer run` exit line, else its status and the
    last lines of its log."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - 8000))
            tail = f.read().decode(errors="replace")
    except OSError:
        tail = ""
    for line in reversed(tail.splitlines()):
        if line.startswith("{"):  # --log-format json: the exit line is the "msg" of a JSON object
            try:
                line = str(json.loads(line).get("msg", ""))
            except (ValueError, AttributeError):
                continue
        if line.startswith(EXIT_LINE_PREFIX):
            return line[len(EXIT_LINE_PREFIX) :].split(": ", 1)[-1] + f" (exit status {returncode})"
    if returncode < 0:
        try:
            status = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            status = f"killed by signal {-returncode}"
    elif returncode == LEASE_LOST_EXIT_CODE:
        status = f"exit status {returncode} (its etcd lease was lost)"
    else:
        status = f"exit status {returncode}"
    last = [line for line in tail.splitlines() if line.strip()][-3:]
    return status + (f"; its log ends with: {' | '.join(last)}" if last else "")


def _signal_stop(proc: subprocess.Popen) -> None:
    """Sends SIGTERM (and SIGCONT, for a paused one) without waiting: members exit together."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
    except ProcessLookupError:
        pass


async def _started(consumer: Consumer) -> Consumer:
    return await consumer.start()


async def _stop_all(consumers: list[Consumer]) -> None:
    await asyncio.gather(*(c.stop(graceful=True) for c in consumers), return_exceptions=True)
