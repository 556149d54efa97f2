"""Real Gazette processes beside gazette-py: where the `gazette` and `gazctl` binaries are, which
version they are, and the command line and readiness of a Gazette broker joining an etcd root.

gazette-py speaks Gazette's broker protocol and etcd layout, so a LocalCluster can run real Gazette
brokers next to its own (`LocalCluster(broker_kinds=[...])`): journals then get routes spanning both
kinds. The binaries are built by `make peers` from the Go module proxy into `build/peers/bin`
(the version pinned in tests/interop/gopeers/go.mod); `GAZETTE_PEERS_BIN` names another directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import grpc

from gazette.auth.tls import TLSConfig, sync_channel
from gazette.auth.tokens import Capability, KeyedAuth
from gazette.client.timeouts import CallTimeout
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.errors import ConfigurationError, PeerError

PEERS_BIN_ENV = "GAZETTE_PEERS_BIN"
# The checkout's build/peers/bin (an editable install, the tests, the bench).
DEFAULT_PEERS_BIN = Path(__file__).resolve().parents[2] / "build" / "peers" / "bin"
READY_POLL_S = 0.1
READY_RPC_TIMEOUT_S = 2.0
HOW_TO_BUILD = "run `make peers` in the gazette-py checkout (it needs Go >= 1.25 on PATH)"


def peers_bin() -> Path:
    """The directory holding the peer binaries."""
    return Path(os.environ.get(PEERS_BIN_ENV) or DEFAULT_PEERS_BIN)


def find_peer(name: str) -> str:
    """The path of real Gazette's `name` ("gazette" or "gazctl"): in the peers directory, else on PATH.
    Raises GazetteError saying how to build it when it is nowhere."""
    candidate = peers_bin() / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    # Our own CLI is also called `gazette`: only a Go binary (one that knows `serve`) will do.
    if found and name == "gazette" and not _is_go_gazette(found):
        found = None
    if found:
        return found
    raise ConfigurationError(f"real Gazette's `{name}` is not built ({candidate} is missing): {HOW_TO_BUILD}")


def _is_go_gazette(path: str) -> bool:
    try:
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "print-config" in (out.stdout + out.stderr)


def peer_version() -> str:
    """The Gazette module version the peer binaries were built from (as `make peers` recorded it)."""
    version_file = peers_bin() / "VERSION"
    try:
        return version_file.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def broker_command(
    binary: str,
    *,
    etcd: str,
    root: str,
    zone: str,
    suffix: str,
    host: str,
    port: int,
    lease_ttl_s: int,
    max_replication: int,
    log_level: str = "warn",
    auth_keys: str | None = None,
    server_tls: TLSConfig | None = None,
    peer_tls: TLSConfig | None = None,
) -> list[str]:
    """`gazette serve` joining `root` in `etcd` as member (zone, suffix) at http://host:port (https://
    with `server_tls`).

    `--broker.file-root=/` makes its file:// stores mean the same absolute paths as ours, so both
    kinds of broker read and write one directory for a `file:///dir/` store. `auth_keys` is its
    `--broker.auth-keys`; `server_tls` and `peer_tls` its `--broker.server-*` and `--broker.peer-*`
    files (Gazette reads the peer ones only when it serves TLS)."""
    cmd = [
        binary, "serve",
        f"--broker.zone={zone}", f"--broker.id={suffix}", f"--broker.host={host}", f"--broker.port={port}",
        "--broker.file-root=/", f"--broker.max-replication={max_replication}", "--broker.watch-delay=10ms",
        f"--etcd.address={etcd}", f"--etcd.prefix={root}", f"--etcd.lease={lease_ttl_s}s",
        f"--log.level={log_level}", "--log.format=text",
    ]  # fmt: skip
    if auth_keys:
        cmd.append(f"--broker.auth-keys={auth_keys}")
    for prefix, tls in (("server", server_tls), ("peer", peer_tls)):
        if tls is None:
            continue
        for flag, value in (
            ("cert-file", tls.cert_file),
            ("cert-key-file", tls.key_file),
            ("ca-file", tls.ca_file),
        ):
            if value:
                cmd.append(f"--broker.{prefix}-{flag}={value}")
    return cmd


def wait_ready(
    proc: subprocess.Popen,
    endpoint: str,
    timeout: float,
    log_path: str = "",
    *,
    auth_keys: str | None = None,
    tls: TLSConfig | None = None,
) -> None:
    """Returns once the broker at `endpoint` answers a List (it has joined and loaded its KeySpace);
    raises GazetteError naming the log if it exits or does not answer within `timeout` seconds.
    `auth_keys` sign that List, `tls` is the client's TLS for an https:// endpoint."""
    auth = KeyedAuth.coerce(auth_keys)
    metadata = auth.metadata(Capability.LIST) if auth is not None else None
    deadline = time.monotonic() + timeout
    last = ""
    with sync_channel(endpoint, tls) as channel:
        stub = pb_grpc.JournalStub(channel)
        while True:
            if proc.poll() is not None:
                raise PeerError(f"Gazette broker at {endpoint} exited with {proc.returncode}; see {log_path}")
            try:
                for resp in stub.List(pb.ListRequest(), timeout=READY_RPC_TIMEOUT_S, metadata=metadata):
                    if resp.status == pb.OK:
                        return
                    last = pb.Status.Name(resp.status)
            except grpc.RpcError as exc:
                last = f"{exc.code().name}: {exc.details()}"
            if time.monotonic() > deadline:
                raise CallTimeout(
                    f"Gazette broker at {endpoint} did not answer List within {timeout:.0f} s "
                    f"(last: {last}); see {log_path}"
                )
            time.sleep(READY_POLL_S)
