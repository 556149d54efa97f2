"""Fixtures of the interop tests: real Gazette binaries (`make peers`) beside gazette-py.

`gazctl` runs real gazctl against a cluster. `py_cluster` is three gazette-py brokers, `gazette_cluster`
three real Gazette brokers, both subprocesses under one embedded etcd each and module-scoped. Without
the binaries every test here skips saying how to build them, except under CI (CI=true), where a
missing peer is a failure (tests/needs.py): CI always has Go, so a skip there would hide a broken setup.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from needs import PEERS_STEP, STREAM_SUM_STEP, missing

from gazette.local import LocalCluster
from gazette.local.gazette_peer import find_peer, peer_version
from gazette.protocol.errors import GazetteError

GAZCTL_TIMEOUT_S = 60.0


def require_peer(name: str) -> str:
    """The path of peer binary `name`, or a skip (a failure under CI) saying how to build it."""
    try:
        return find_peer(name)
    except GazetteError as exc:
        missing(str(exc), PEERS_STEP if name in ("gazette", "gazctl") else STREAM_SUM_STEP)


def gazette_source() -> Path:
    """The pinned Gazette module's source in the Go module cache (filled by `make peers`): for its
    .proto files and example YAML, read by tests, never copied into the repo."""
    go = shutil.which("go")
    version = peer_version()
    if go is None or version == "unknown":
        missing("Gazette's source is read from the Go module cache: Go or the peers are missing", PEERS_STEP)
    cache = subprocess.run(
        [go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(cache) / f"go.gazette.dev/core@{version}"
    if not path.is_dir():
        pytest.fail(f"{path} is missing although the peers were built from it: run `make peers` again")
    return path


@pytest.fixture(scope="session")
def gazette_bin() -> str:
    return require_peer("gazette")


@pytest.fixture(scope="session")
def gazctl_bin() -> str:
    return require_peer("gazctl")


@dataclass
class Gazctl:
    """Runs real gazctl against one cluster's brokers (BROKER_ADDRESS) and etcd (ETCD_ADDRESS)."""

    binary: str
    broker: str
    etcd: str
    cwd: str

    def __call__(
        self,
        *args: str,
        input: str | bytes | None = None,
        check: bool = True,
        timeout: float = GAZCTL_TIMEOUT_S,
    ) -> subprocess.CompletedProcess:
        env = dict(os.environ, BROKER_ADDRESS=self.broker, ETCD_ADDRESS=self.etcd, BROKER_CACHE_SIZE="0")
        text = not isinstance(input, bytes)
        proc = subprocess.run(
            [self.binary, *args], input=input, capture_output=True, text=text, env=env, cwd=self.cwd,
            timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"gazctl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout!s}\n{proc.stderr!s}"
            )
        return proc

    def popen(self, *args: str) -> subprocess.Popen:
        """A long-running gazctl (e.g. `journals list --watch`), stdout piped as text; the caller ends it."""
        env = dict(os.environ, BROKER_ADDRESS=self.broker, ETCD_ADDRESS=self.etcd)
        return subprocess.Popen(
            [self.binary, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.cwd,
        )


def gazctl_for(binary: str, cluster: LocalCluster, cwd: str, broker: int = 0) -> Gazctl:
    return Gazctl(binary, cluster.broker_endpoints[broker], cluster.etcd_endpoint, cwd)


def start_cluster(kinds: Sequence[str], **kw) -> LocalCluster:
    return LocalCluster(brokers=len(kinds), mode="subprocess", broker_kinds=list(kinds), **kw).start()


@pytest.fixture(scope="module")
def py_cluster() -> Iterator[LocalCluster]:
    """Three gazette-py brokers (subprocesses)."""
    with LocalCluster(brokers=3, mode="subprocess") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def gazette_cluster(gazette_bin: str) -> Iterator[LocalCluster]:
    """Three real Gazette brokers under gazette-py's embedded etcd."""
    cluster = start_cluster(["gazette"] * 3)
    try:
        yield cluster
    finally:
        cluster.close()
