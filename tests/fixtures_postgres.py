"""PostgreSQL fixtures: Debian's server (initdb + postgres) as a real subprocess on a loopback port.

`postgres_server` (session) starts one throw-away cluster (fsync off, TCP only) and stops it by its
pid; `postgres_url` creates a fresh database per test and yields its postgresql:// URL. Both skip,
saying why, when the server binaries or psycopg are missing, and fail under CI (tests/needs.py).
Load with `pytest_plugins`.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest
from needs import POSTGRES_STEP, VENV_STEP, import_or_missing, missing

POSTGRES_START_TIMEOUT_S = 30.0
POSTGRES_STOP_TIMEOUT_S = 30.0
POSTGRES_SUPERUSER = "gazette"
POSTGRES_OS_USER = "postgres"  # the server refuses to run as root; as root we run it as this user


def postgres_bin_dir() -> str | None:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb and postgres, if any."""
    found = [
        d
        for d in glob.glob("/usr/lib/postgresql/*/bin")
        if os.access(os.path.join(d, "initdb"), os.X_OK) and os.access(os.path.join(d, "postgres"), os.X_OK)
    ]
    return max(found, key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0, default=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One initdb'd cluster in a private temporary directory, served by `postgres` on 127.0.0.1."""

    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        self.dir = tempfile.mkdtemp(prefix="gazette-pg-")  # not under pytest's 0700 root-owned tmp
        self.data_dir = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "server.log")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        # As root, the server runs as POSTGRES_OS_USER through setpriv (which execs it, keeping the pid),
        # not subprocess's user=/group=: those make Python fork without vfork and run C code in the
        # child of a process full of gRPC threads, which crashed once (a segfault in the child).
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(POSTGRES_OS_USER)
            except KeyError:
                missing(
                    f"running as root and there is no {POSTGRES_OS_USER!r} OS user to run PostgreSQL as "
                    "(Debian's postgresql package makes it)",
                    POSTGRES_STEP,
                )
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as_user = [
                shutil.which("setpriv") or "setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                "--clear-groups", "--",
            ]  # fmt: skip

    @property
    def admin_url(self) -> str:
        return f"postgresql://{POSTGRES_SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://{POSTGRES_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        initdb = [
            os.path.join(self.bin_dir, "initdb"), "-D", self.data_dir, "--auth=trust",
            f"--username={POSTGRES_SUPERUSER}", "--encoding=UTF8", "--locale=C", "--no-sync",
        ]  # fmt: skip
        done = subprocess.run([*self._as_user, *initdb], capture_output=True, cwd=self.dir, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"initdb -D {self.data_dir} failed ({done.returncode}): {done.stderr.decode()[-2000:]}"
            )
        for _attempt in range(3):  # a picked port may be taken before the server binds it
            self.port = _free_port()
            if self._serve():
                return self
        raise RuntimeError(f"PostgreSQL did not start in 3 attempts; see {self.log_path}")

    def _serve(self) -> bool:
        import psycopg

        command = [
            os.path.join(self.bin_dir, "postgres"), "-D", self.data_dir, "-h", "127.0.0.1", "-p", str(self.port),
            "-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "max_connections=200",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self._as_user, *command],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        deadline = time.monotonic() + POSTGRES_START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                self.proc = None
                return False  # e.g. "could not bind": the caller retries on another port
            try:
                psycopg.connect(self.admin_url, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"PostgreSQL on port {self.port} did not accept connections within "
                        f"{POSTGRES_START_TIMEOUT_S:.0f} s; see {self.log_path}"
                    ) from None
                time.sleep(0.05)

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster's pid), SIGKILL if it does not exit in time."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=POSTGRES_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (skips when it cannot be run here, fails under CI)."""
    import_or_missing("psycopg", f"{VENV_STEP}, psycopg[binary] is in the dev extra")
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        missing("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin", POSTGRES_STEP)
    server = PostgresServer(bin_dir)
    try:
        yield server.start()
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """postgresql://gazette@127.0.0.1:PORT/<fresh database> (trust auth, no password)."""
    return postgres_server.create_database()
