"""S3 fixtures for every test (a pytest plugin loaded by tests/conftest.py): moto's standalone S3 server as a real subprocess over HTTP.

`moto_server` (session) yields an endpoint URL; `dedicated_moto()` starts a private server a test may
stop and restart (same port, empty state). `s3_store_url` makes a fresh bucket and returns its URL.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest

MOTO_START_TIMEOUT_S = 30.0


class MotoServer:
    """One `python -m moto.server` process on a loopback port; restartable on the same port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + MOTO_START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server on port {self.port} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1):
                    return self
            except urllib.error.HTTPError:
                return self  # it answered HTTP
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"moto server on port {self.port} did not answer within {MOTO_START_TIMEOUT_S}s"
                    ) from None
                time.sleep(0.05)

    def make_bucket(self, bucket: str) -> None:
        make_bucket(self.endpoint, bucket)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto_server(port: int | None = None) -> MotoServer:
    """Starts a moto server (retrying on a port race when the port was picked here)."""
    for _ in range(3):
        server = MotoServer(port)
        try:
            return server.start()
        except RuntimeError:
            if port is not None:
                raise
    raise RuntimeError("could not start a moto server")


@pytest.fixture(scope="session")
def aws_dummy_credentials() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
    mp.delenv("AWS_PROFILE", raising=False)
    mp.delenv("AWS_SESSION_TOKEN", raising=False)
    mp.setenv("AWS_CONFIG_FILE", os.devnull)
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def moto_server(aws_dummy_credentials: None) -> Iterator[str]:
    """Endpoint URL (http://127.0.0.1:PORT) of a moto S3 server shared by the session."""
    server = start_moto_server()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
def dedicated_moto(aws_dummy_credentials: None) -> Iterator[Callable[[], MotoServer]]:
    """A factory of private moto servers, each stopped at the end of the test."""
    servers: list[MotoServer] = []

    def start() -> MotoServer:
        servers.append(start_moto_server())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def closed_endpoint() -> str:
    """An http endpoint on a loopback port nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"


def make_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)


@pytest.fixture
def s3_bucket(moto_server: str) -> str:
    """A fresh, empty bucket on the session's moto server."""
    bucket = f"b-{uuid.uuid4().hex[:16]}"
    make_bucket(moto_server, bucket)
    return bucket


@pytest.fixture
def s3_store_url(moto_server: str, s3_bucket: str) -> str:
    """A store URL (with a key prefix) on a fresh bucket of the session's moto server."""
    return f"s3://{s3_bucket}/prefix/?endpoint={moto_server}&region=us-east-1"


@pytest.fixture
def file_store_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    root = tmp_path / "store"
    root.mkdir()
    return f"file://{root}/"
