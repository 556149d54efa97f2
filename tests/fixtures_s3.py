"""Test-only S3 fixtures (a pytest plugin loaded by tests/conftest.py), beside those of
gazette.testing.fixtures (`aws_dummy_credentials`, `moto_server`, `s3_bucket`, `s3_store_url`).

`dedicated_moto()` starts a private moto server a test may stop and restart (same port, empty
state); `closed_endpoint` is a port nothing listens on; `file_store_url` a fresh file:// store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gazette.keyspace.procutil import free_port
from gazette.testing.s3 import MotoServer, start_moto_server


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


@pytest.fixture
def file_store_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    root = tmp_path / "store"
    root.mkdir()
    return f"file://{root}/"
