"""LocalCluster: embedded etcd plus N brokers, in this process or as subprocesses, with faults.

Subprocess brokers run `gazette broker serve`, bind port 0 and report it on stdout; they share
the owner's process-death fate (a new process group plus the parent-death signal), so a SIGKILL of
the owner leaves nothing behind. In-process brokers live on the facade's loop thread; signals
(kill, pause) need subprocesses and raise a clear error there.

`broker_kinds` mixes in real Gazette brokers (`gazette serve`, built by `make peers`): always
subprocesses, under the same etcd root, so journal routes span both kinds of broker. Keepalive
follows the peer: the cluster's clients and consumer members ping brokers only where every broker
they dial is a gazette-py one (Gazette's Go servers answer frequent pings with GOAWAY too_many_pings).

Security is off by default (plaintext on loopback). `auth_keys` makes every broker and consumer
verify Gazette's signed bearer tokens and every client sign them; `tls=True` makes a throwaway CA
(`gazette.auth.certs`) and serves everything over mutual TLS (https:// endpoints).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from gazette import tunables
from gazette.auth.cluster import ClusterSecurity
from gazette.auth.tokens import KeyedAuth
from gazette.broker.broker import DEFAULT_ROOT, Broker
from gazette.client.loop import default_loop
from gazette.client.sync import Client
from gazette.client.timeouts import CallTimeout
from gazette.keyspace.etcd import EmbeddedEtcd
from gazette.keyspace.procutil import free_port, read_ready_line, spawn, terminate, terminate_all
from gazette.local import gazette_peer
from gazette.protocol.endpoints import PEER_KEEPALIVE_S
from gazette.protocol.errors import ConfigurationError, GazetteError, PeerError, StateError, ValidationError
from gazette.protocol.spec import JournalSpec
from gazette.tasks import dump_tasks

log = logging.getLogger(__name__)

MODES = ("inprocess", "subprocess")
# gazette-py's own broker, and real Gazette's (a Go binary from `make peers`).
BROKER_KINDS = ("gazette-py", "gazette")
BROKER_START_TIMEOUT_S = 60.0
PAUSE_TIMEOUT_S = 10.0
# A gracefully stopping broker, once its exit drain (exit_drain_s) is over, has this long at most to
# persist its spools and exit before it is killed.
STOP_GRACE_S = 15.0
CLIENT_CLOSE_TIMEOUT_S = 10.0
# How long a closing cluster of only Gazette brokers waits for them after SIGTERM before SIGKILL.
GAZETTE_CLOSE_GRACE_S = 3.0


@dataclasses.dataclass
class _BrokerHandle:
    index: int
    zone: str
    suffix: str
    kind: str = "gazette-py"
    endpoint: str = ""
    metrics: str = ""
    broker: Broker | None = None  # in-process
    proc: subprocess.Popen | None = None  # subprocess
    log_path: str = ""
    paused: bool = False  # SIGSTOPped by pause_broker

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.broker is not None


class LocalCluster:
    """A throwaway cluster on this machine. Its embedded etcd runs without fsync (`etcd_fsync=False`):
    nothing is lost when processes die, only if the machine itself crashes, and a busy disk cannot
    stall lease refreshes. Pass `etcd_fsync=True` for an etcd that flushes every write."""

    def __init__(
        self,
        brokers: int = 1,
        mode: str = "inprocess",
        store: str | None = None,
        zones: tuple[str, ...] | list[str] = ("local",),
        *,
        root: str = DEFAULT_ROOT,
        lease_ttl_s: int = 5,
        data_dir: str | None = None,
        etcd: str | None = None,
        max_replication: int = tunables.BROKER_MAX_REPLICATION,
        exit_drain_s: float = tunables.LOCAL_EXIT_DRAIN_S,
        log_level: str = "WARNING",
        etcd_fsync: bool = False,
        broker_kinds: tuple[str, ...] | list[str] | None = None,
        auth_keys: str | None = None,
        tls: bool = False,
    ) -> None:
        """Describes the cluster; `start()` (or `with`) runs it. `brokers` (≥ 1) spread over `zones`
        round-robin; `mode` "inprocess" (brokers on this process's loop thread) or "subprocess" (one
        process each, for kill/pause faults); `store` is the fragment store URL (default: a `file://`
        directory under `data_dir`, itself a fresh temp dir removed on close unless given); `etcd`
        uses an existing etcd instead of the embedded one; `lease_ttl_s` (seconds) bounds how long a
        dead broker holds its journals; `broker_kinds` may name "gazette" (Gazette's Go binary) per
        broker; `auth_keys` and `tls` secure every broker. Bad arguments raise ValidationError (a GazetteError)."""
        if mode not in MODES:
            raise ValidationError(
                f'LocalCluster mode "{mode}" is not known (expected "inprocess" or "subprocess")'
            )
        if brokers < 1:
            raise ValidationError(f"LocalCluster needs at least one broker (got {brokers})")
        if not zones:
            raise ValidationError("LocalCluster needs at least one zone")
        kinds = tuple(broker_kinds) if broker_kinds is not None else ("gazette-py",) * brokers
        if len(kinds) != brokers or any(k not in BROKER_KINDS for k in kinds):
            raise ValidationError(
                f"LocalCluster broker_kinds {list(kinds)} must name one of {list(BROKER_KINDS)} per broker "
                f"({brokers} brokers)"
            )
        self._kinds = kinds
        self.mode = mode
        self.root = root
        self.zones = tuple(zones)
        self.lease_ttl_s = lease_ttl_s
        self.max_replication = max_replication
        self.exit_drain_s = exit_drain_s
        self.log_level = log_level
        self._own_data_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="gazette-local-")
        os.makedirs(self.data_dir, exist_ok=True)
        self.security = ClusterSecurity(auth_keys=auth_keys or None)
        if tls:
            from gazette.auth.certs import make_local_ca  # needs `cryptography`: imported only when asked

            ca = make_local_ca(os.path.join(self.data_dir, "tls"))
            self.security = dataclasses.replace(self.security, server_tls=ca.server, client_tls=ca.client)
        if auth_keys:
            KeyedAuth(auth_keys)  # refuse bad keys here, not in each broker's log
        self.store = store or f"file://{os.path.join(os.path.abspath(self.data_dir), 'fragments')}/"
        if self.store.startswith("file://"):
            os.makedirs(self.store[len("file://") :].split("?")[0], exist_ok=True)
        self._external_etcd = etcd
        self._etcd_fsync = etcd_fsync
        self._etcd: EmbeddedEtcd | None = None
        self._n_brokers = brokers
        self.brokers: list[_BrokerHandle] = []
        self._loop = default_loop()
        self._client: Client | None = None
        self._view_clients: dict[str, Client] = {}  # per broker endpoint: wait_for_routes asks each
        self._consumer_groups: list[Any] = []  # ConsumerGroups of run_consumer, closed before brokers
        self._started = False

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        """Starts etcd (unless external) and the brokers, each bound to 127.0.0.1 on a free port;
        returns self. Idempotent. If any part fails to start, what did start is stopped and the
        error propagates."""
        if self._started:
            return self
        self._started = True
        try:
            if self._external_etcd:
                self.etcd_endpoint = self._external_etcd
            else:
                self._etcd = EmbeddedEtcd(
                    data_dir=os.path.join(self.data_dir, "etcd"), fsync=self._etcd_fsync
                ).start()
                self.etcd_endpoint = self._etcd.endpoint
            for kind in self._kinds:
                self.add_broker(kind=kind)
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> LocalCluster:
        """Starts the cluster (see `start`); leaving the `with` block closes it."""
        return self.start()

    def __exit__(self, *exc) -> None:
        """Stops everything the cluster started (see `close`); exceptions propagate."""
        self.close()

    def close(self) -> None:
        """Stops everything this cluster started (consumers, then brokers gracefully), then etcd."""
        for group in self._consumer_groups:
            try:
                group.close()
            except Exception:
                pass
        self._consumer_groups.clear()
        for client in [self._client, *self._view_clients.values()]:
            if client is not None:
                try:  # bounded: a stuck channel must not keep the brokers and etcd running
                    self._loop.run(client.aio.close(), timeout=CLIENT_CLOSE_TIMEOUT_S)
                except Exception:
                    pass
        self._client = None
        self._view_clients.clear()
        # All at once: each sees the others exiting too and stops without waiting to drain. One
        # deadline for all of them: a broker stuck in its graceful stop is killed, and says so.
        procs = {h.proc: h for h in self.brokers if h.proc is not None and h.proc.poll() is None}
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        # A Gazette broker that sees every member exiting keeps its journals (there is nowhere to move
        # them) and waits to be killed, as in a whole-cluster shutdown under an orchestrator.
        terminate_all([p for p, h in procs.items() if h.kind == "gazette"], GAZETTE_CLOSE_GRACE_S)
        procs = {p: h for p, h in procs.items() if p.poll() is None and h.kind != "gazette"}
        inprocess = [h.broker.stop(graceful=True) for h in self.brokers if h.broker is not None]
        if inprocess:
            self._loop.run(_stop_all(inprocess, self.exit_drain_s + STOP_GRACE_S))
        for proc in terminate_all(list(procs), self.exit_drain_s + STOP_GRACE_S):
            h = procs[proc]
            log.warning(
                "broker %s did not stop within %.0f s of SIGTERM and was killed; its log ends with:\n%s",
                h.suffix,
                self.exit_drain_s + STOP_GRACE_S,
                _tail(h.log_path),
            )
        for h in self.brokers:
            h.broker = None
            if h.proc is not None and h.proc.stdout is not None:
                h.proc.stdout.close()
        if self._etcd is not None:
            self._etcd.stop()
            self._etcd = None
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # --- brokers ---------------------------------------------------------------------------------
    def add_broker(self, zone: str | None = None, kind: str = "gazette-py") -> int:
        """Starts one more broker (`kind` "gazette-py", or "gazette" for real Gazette) and returns its index."""
        if kind not in BROKER_KINDS:
            raise ValidationError(f'broker kind "{kind}" is not known (expected one of {list(BROKER_KINDS)})')
        i = len(self.brokers)
        h = _BrokerHandle(
            index=i, zone=zone or self.zones[i % len(self.zones)], suffix=f"broker-{i}", kind=kind
        )
        self.brokers.append(h)
        self._start_handle(h)
        return i

    def _start_handle(self, h: _BrokerHandle) -> None:
        # A restarted broker keeps its address: clients and routes still point at it.
        self._forget_view_client(h.endpoint)
        port = int(h.endpoint.rsplit(":", 1)[1]) if h.endpoint else 0
        if h.kind == "gazette":
            self._start_gazette(h, port)
            return
        spool_dir = os.path.join(self.data_dir, "spool", h.suffix)
        os.makedirs(spool_dir, exist_ok=True)
        if self.mode == "inprocess":
            broker = Broker(
                self.etcd_endpoint,
                root=self.root,
                zone=h.zone,
                suffix=h.suffix,
                port=port,
                lease_ttl_s=self.lease_ttl_s,
                max_replication=self.max_replication,
                spool_dir=spool_dir,
                watch_apply_delay_s=0.01,
                exit_drain_s=self.exit_drain_s,
                auth_keys=self.security.auth_keys,
                server_tls=self.security.server_tls,
                peer_tls=self.security.client_tls,
            )
            self._loop.run(broker.start(), timeout=BROKER_START_TIMEOUT_S)
            h.broker, h.endpoint, h.metrics = broker, broker.endpoint, broker.metrics_endpoint
            return
        h.log_path = os.path.join(self.data_dir, f"{h.suffix}.log")
        cmd = [
            sys.executable, "-m", "gazette.cli.main", "broker", "serve",
            "--etcd", self.etcd_endpoint, "--root", self.root, "--zone", h.zone, "--suffix", h.suffix,
            "--port", str(port), "--lease-ttl", str(self.lease_ttl_s), "--max-replication", str(self.max_replication),
            "--exit-drain", str(self.exit_drain_s),
            "--spool-dir", spool_dir, "--log-level", self.log_level, *self.security.server_args(),
        ]  # fmt: skip
        env = {**os.environ, **self.security.env("BROKER_AUTH_KEYS")} if self.security.auth_keys else None
        with open(h.log_path, "ab") as log_file:
            # procutil.spawn: no Python runs in the forked child (a preexec_fn can crash it while
            # gRPC threads are busy), and the broker dies with this process.
            h.proc = spawn(cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, env=env)
        ready = read_ready_line(h.proc, BROKER_START_TIMEOUT_S)
        if ready is None:
            terminate(h.proc)
            raise ConfigurationError(
                f"broker {h.suffix} did not start; its log ends with:\n{_tail(h.log_path)}"
            )
        h.endpoint, h.metrics = ready["endpoint"], ready["metrics"]

    def _start_gazette(self, h: _BrokerHandle, port: int) -> None:
        binary = gazette_peer.find_peer("gazette")
        port = port or free_port()
        scheme = "https" if self.security.server_tls is not None else "http"
        h.endpoint = f"{scheme}://127.0.0.1:{port}"
        h.log_path = os.path.join(self.data_dir, f"{h.suffix}.log")
        cmd = gazette_peer.broker_command(
            binary, etcd=self.etcd_endpoint, root=self.root, zone=h.zone, suffix=h.suffix, host="127.0.0.1",
            port=port, lease_ttl_s=self.lease_ttl_s, max_replication=self.max_replication,
            log_level="debug" if self.log_level == "DEBUG" else "info", auth_keys=self.security.auth_keys,
            server_tls=self.security.server_tls, peer_tls=self.security.client_tls,
        )  # fmt: skip
        with open(h.log_path, "ab") as log_file:
            h.proc = spawn(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            gazette_peer.wait_ready(
                h.proc, h.endpoint, BROKER_START_TIMEOUT_S, h.log_path,
                auth_keys=self.security.auth_keys, tls=self.security.client_tls,
            )  # fmt: skip
        except GazetteError:
            terminate(h.proc)
            raise ConfigurationError(
                f"Gazette broker {h.suffix} did not start; its log ends with:\n{_tail(h.log_path)}"
            ) from None

    def _stop_handle(self, h: _BrokerHandle, graceful: bool) -> None:
        h.paused = False
        self._forget_view_client(h.endpoint)
        if h.broker is not None:
            self._loop.run(h.broker.stop(graceful=graceful))
            h.broker = None
        if h.proc is not None and h.proc.poll() is None:
            if graceful:
                terminate(h.proc, timeout=self.exit_drain_s + STOP_GRACE_S)
            else:
                h.proc.kill()
                h.proc.wait()
        if h.proc is not None and h.proc.stdout is not None:
            h.proc.stdout.close()

    def _handle(self, i: int) -> _BrokerHandle:
        if not 0 <= i < len(self.brokers):
            raise ValidationError(f"no broker {i} (the cluster has brokers 0..{len(self.brokers) - 1})")
        return self.brokers[i]

    def _need_subprocess(self, what: str, kind: str = "broker", handle: _BrokerHandle | None = None) -> None:
        if self.mode != "subprocess" and (handle is None or handle.proc is None):
            raise ConfigurationError(
                f'{what} sends a signal to a {kind} process, which needs LocalCluster(mode="subprocess")'
            )

    def stop_broker(self, i: int) -> None:
        """Graceful stop (SIGTERM for subprocesses): the broker rolls and persists its spools."""
        self._stop_handle(self._handle(i), graceful=True)

    def kill_broker(self, i: int) -> None:
        """SIGKILL: unpersisted spool content of that broker is lost unless replicated elsewhere."""
        self._need_subprocess("kill_broker", handle=self._handle(i))
        self._stop_handle(self._handle(i), graceful=False)

    def pause_broker(self, i: int) -> None:
        """SIGSTOP, returning once the broker is stopped (the signal itself acts asynchronously)."""
        self._need_subprocess("pause_broker", handle=self._handle(i))
        proc = self._handle(i).proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        self._handle(i).paused = True
        _wait_stopped(proc.pid)

    def resume_broker(self, i: int) -> None:
        """SIGCONT to paused broker `i` (subprocess mode only): it resumes where it stopped, and may
        find that its lease expired meanwhile and its journals moved."""
        self._need_subprocess("resume_broker", handle=self._handle(i))
        proc = self._handle(i).proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGCONT)
        self._handle(i).paused = False

    def restart_broker(self, i: int) -> None:
        """Starts broker `i` again under its old zone and suffix (stopping it gracefully first if running)."""
        h = self._handle(i)
        if h.running:
            self._stop_handle(h, graceful=True)
        self._start_handle(h)

    # --- conveniences ----------------------------------------------------------------------------
    @property
    def broker_endpoints(self) -> list[str]:
        """The gRPC endpoint (URL) of each broker, in start order; a stopped one keeps its last."""
        return [h.endpoint for h in self.brokers]

    @property
    def embedded_etcd(self) -> EmbeddedEtcd:
        """The etcd this cluster started, for etcd faults (`restart`, `pause`, `resume`)."""
        if self._etcd is None:
            raise StateError(
                "this LocalCluster has no embedded etcd (it was given etcd=... or is not started)"
            )
        return self._etcd

    def run_consumer(
        self, app: Any, shards: Any = (), processes: int = 1, *, root: str | None = None, **options: Any
    ) -> Any:
        """Applies `shards` (ShardSpecs) and starts `processes` members of the consumer application
        `app` under `root` (default `<parent of the broker root>/consumers/<app class>`): in this
        process, or as `gazette consumer run` subprocesses when the cluster's mode is "subprocess"
        (then `app` must be picklable by cloudpickle; the error says how to fix it otherwise).
        Returns its `gazette.consumer.ConsumerGroup` (stop/kill/restart members, list shards, and
        `client()`, a ShardClient: `group.client().stat_shard(...)`). Options go to ConsumerGroup
        (e.g. hooks= in-process only, shard_limit=, mode=); members are stopped with the cluster.

        A member that exits by itself (paused past its lease, it ends itself as Gazette's members
        do; or it crashed) is logged as a warning naming it and why it exited (from its log's
        tail), and restarted, once per exit; `restart_exited=False` only reports it (an error).
        `group.exits` lists such exits, `group.restarts` and `consumer_restarts` count restarts."""
        from gazette.consumer.runner import ConsumerGroup  # local is above consumer; imported on use

        if root is None:
            root = f"{self.root.rsplit('/', 1)[0]}/consumers/{type(app).__name__}"
        options.setdefault("lease_ttl_s", self.lease_ttl_s)
        options.setdefault("zones", self.zones)
        options.setdefault("mode", self.mode)
        options.setdefault("log_level", self.log_level)
        options.setdefault(
            "data_dir", os.path.join(self.data_dir, "consumers", root.strip("/").replace("/", "_"))
        )
        options.setdefault("security", self.security)
        options.setdefault("broker_keepalive", self._keepalive(self.brokers))
        group = ConsumerGroup(
            app,
            etcd=self.etcd_endpoint,
            broker=self._failover_endpoints(),
            root=root,
            processes=processes,
            loop=self._loop,
            **options,
        )
        self._consumer_groups.append(group)
        try:
            return group.start(shards)
        except BaseException:
            group.close()
            self._consumer_groups.remove(group)
            raise

    @property
    def consumer_restarts(self) -> int:
        """Consumer members restarted after exiting by themselves, over every run_consumer group."""
        return sum(group.restarts for group in self._consumer_groups)

    def _consumer_group(self, group: Any) -> Any:
        if group is not None:
            return group
        if len(self._consumer_groups) != 1:
            raise StateError(
                f"this cluster runs {len(self._consumer_groups)} consumer applications: "
                "name one with group= (what run_consumer returned)",
            )
        return self._consumer_groups[0]

    def kill_consumer(self, i: int, group: Any = None) -> None:
        """A crash of consumer member `i` (of `group`, default the only one run_consumer started):
        SIGKILL of its process ("subprocess" mode), or an abrupt in-process stop; either way nothing
        drains and its shards move once its lease expires. `group.restart(i)` starts it anew."""
        self._consumer_group(group).kill(i)

    def pause_consumer(self, i: int, group: Any = None) -> None:
        """SIGSTOP of consumer member `i`, returning once it is stopped (needs mode="subprocess")."""
        self._need_subprocess("pause_consumer", "consumer")
        pid = self._consumer_group(group).pid(i)
        os.kill(pid, signal.SIGSTOP)
        _wait_stopped(pid)

    def resume_consumer(self, i: int, group: Any = None) -> None:
        """SIGCONT of a paused consumer member `i` (needs mode="subprocess")."""
        self._need_subprocess("resume_consumer", "consumer")
        os.kill(self._consumer_group(group).pid(i), signal.SIGCONT)

    def dump_tasks(self) -> list[str]:
        """Asks each running subprocess broker and consumer to write every asyncio task's stack to
        its log (SIGUSR2): what a cluster that seems stuck waits on. Returns the logs to read."""
        logs = []
        for h in self.brokers:
            # Not a Gazette broker: SIGUSR2 would end a Go process (its log has Go's own diagnostics).
            if h.pid is not None and h.running and h.kind != "gazette":
                os.kill(h.pid, signal.SIGUSR2)
                logs.append(h.log_path)
        for group in self._consumer_groups:
            for m in group.members:
                if m.proc is not None and m.proc.poll() is None:
                    os.kill(m.proc.pid, signal.SIGUSR2)
                    logs.append(m.log_path)
        return logs

    def shard_client(self) -> Any:
        """The ShardClient of the newest consumer application `run_consumer` started."""
        if not self._consumer_groups:
            raise StateError(
                "no consumer application runs in this cluster: start one with cluster.run_consumer(...)"
            )
        return self._consumer_groups[-1].client()

    def client(self) -> Client:
        """A sync client through the running brokers, failing over between them (shared; closed
        with the cluster). It answers shard calls too (`client.stat_shard(...)`,
        `CheckpointView(client, shard)`) through the newest consumer application's ShardClient."""
        if self._client is None:
            self._client = Client(
                self._failover_endpoints(), self.etcd_endpoint, loop=self._loop,
                auth_keys=self.security.auth_keys, tls=self.security.client_tls, keepalive=self._keepalive(self.brokers),
            )  # fmt: skip
            self._client.use_shards(self.shard_client)
        return self._client

    @staticmethod
    def _keepalive(brokers: list[_BrokerHandle]) -> float | None:
        """The ping interval of a client or consumer member dialing `brokers`: PEER_KEEPALIVE_S when
        all are gazette-py brokers, whose servers take pings that often; None (no pings) when one is
        Gazette's, whose Go server keeps gRPC's default enforcement (no pings more often than every
        5 minutes) and answers them with GOAWAY ENHANCE_YOUR_CALM "too_many_pings", which gRPC logs
        as an error and which ends the connection's calls."""
        return PEER_KEEPALIVE_S if all(h.kind != "gazette" for h in brokers) else None

    def _failover_endpoints(self) -> str:
        """Every broker's endpoint, running ones first: what clients and consumers dial, moving to
        the next one when a broker is gone."""
        ordered = sorted(self.brokers, key=lambda h: not h.running)
        return ",".join(h.endpoint for h in ordered if h.endpoint)

    def journal_spec(self, name: str, **fields: Any) -> JournalSpec:
        """A JournalSpec persisting to this cluster's store (fields override the defaults)."""
        fields.setdefault("stores", [self.store])
        return JournalSpec(name=name, **fields)

    def wait_for_routes(self, journals: list[str] | None = None, timeout: float = 60.0) -> None:
        """Waits until each journal (all, by default) has a primary and its desired replication in
        the view of every running broker not paused: each answers from its own etcd watch, which may
        trail the others', and one that does not hold a journal yet answers JOURNAL_NOT_FOUND
        (Gazette's brokers too). After it, appends stop being answered with NO_JOURNAL_PRIMARY_BROKER
        and retried, through any broker."""
        deadline = time.monotonic() + timeout
        views = [
            self._view_client(h.endpoint) for h in self.brokers if h.running and not h.paused and h.endpoint
        ]
        wanted = (
            set(journals) if journals is not None else {i.spec.name for i in self.client().list_journals()}
        )
        for client in views or [self.client()]:
            while True:
                unreachable: PeerError | None = None
                try:
                    infos = {i.spec.name: i for i in client.list_journals() if i.spec.name in wanted}
                except PeerError as exc:  # a broker still starting: not ready yet
                    infos, unreachable = {}, exc
                pending = [
                    name for name in sorted(wanted)
                    if (i := infos.get(name)) is None or i.route.primary < 0
                    or len(i.route.members) != min(i.spec.replication, self.max_replication)
                ]  # fmt: skip
                if not pending:
                    break
                if time.monotonic() > deadline:
                    why = f" ({unreachable})" if unreachable is not None else ""
                    raise CallTimeout(
                        f"journals {pending[:5]} have no full route in the view of broker {client.aio.broker}"
                        f"{why} after {timeout:.0f} s"
                    )
                time.sleep(0.05)

    def _view_client(self, endpoint: str) -> Client:
        """A client of the one broker at `endpoint` (kept until the broker stops or the cluster closes)."""
        client = self._view_clients.get(endpoint)
        if client is None:
            dialed = [h for h in self.brokers if h.endpoint == endpoint]
            client = self._view_clients[endpoint] = Client(
                endpoint, self.etcd_endpoint, loop=self._loop,
                auth_keys=self.security.auth_keys, tls=self.security.client_tls, keepalive=self._keepalive(dialed),
            )  # fmt: skip
        return client

    def _forget_view_client(self, endpoint: str) -> None:
        """Closes the view client of a broker that stops or restarts: its channel would wait out a
        reconnect backoff once the broker is back on the same address."""
        client = self._view_clients.pop(endpoint, None)
        if client is not None:
            try:
                self._loop.run(client.aio.close(), timeout=CLIENT_CLOSE_TIMEOUT_S)
            except Exception:
                pass

    def flush_fragments(self) -> list:
        """Rolls every journal's spool and waits until persisted; returns the persisted fragments."""
        client = self.client()
        out = []
        for info in client.list_journals():
            frag = client.flush(info.spec.name)
            if frag is not None:
                out.append(frag)
        return out


def _tail(path: str, n: int = 2000) -> str:
    """The last `n` characters of a log file ("" when there is none)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


async def _stop_all(stops: list, timeout: float) -> None:
    """Runs in-process broker stops together for up to `timeout` s; one still running then is logged
    with every task's stack (what it waits on) and cancelled, so closing a cluster never hangs."""
    tasks = [asyncio.ensure_future(c) for c in stops]
    _done, late = await asyncio.wait(tasks, timeout=timeout)
    if late:
        stacks = io.StringIO()
        dump_tasks(stacks)
        log.warning(
            "%d in-process broker(s) did not stop within %.0f s; cancelling. Tasks:\n%s",
            len(late),
            timeout,
            stacks.getvalue(),
        )
        for t in late:
            t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _wait_stopped(pid: int, timeout: float = PAUSE_TIMEOUT_S) -> None:
    """Waits until /proc shows `pid` stopped (or gone); returns at once where there is no /proc."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("T", "t", "Z", "X"):
            return
        if time.monotonic() > deadline:
            raise CallTimeout(f"process {pid} did not stop within {timeout:.0f}s of SIGSTOP (state {state})")
        time.sleep(0.001)
