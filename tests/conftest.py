"""Shared fixtures: one real etcd per test session, a unique key root per test, and an etcd client.

`etcd` (session) is an EmbeddedEtcd; tests that stop, restart or pause etcd start their own instead.
`etcd_root` yields a fresh root like "/gazette-test/<hex>" and deletes every key under it afterwards.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator

import aetcd
import hypothesis
import pytest

from gazette.keyspace.etcd import EmbeddedEtcd, connect

pytest_plugins = ["fixtures_s3"]

# Hypothesis profiles, chosen by GAZETTE_HYPOTHESIS_PROFILE: "ci" (default) is reproducible and
# bounded; "soak" (make soak) explores many more examples. Tests' own @settings still win.
hypothesis.settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None)
hypothesis.settings.register_profile("soak", max_examples=5000, deadline=None)
hypothesis.settings.load_profile(os.environ.get("GAZETTE_HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header(config) -> str:
    """Which real Gazette the interop tests run against (tests/interop, built by `make peers`)."""
    from gazette.local.gazette_peer import find_peer, peer_version
    from gazette.protocol.errors import GazetteError

    try:
        gazette, gazctl = find_peer("gazette"), find_peer("gazctl")
    except GazetteError as exc:
        return f"gazette peers: not built ({exc})"
    return f"gazette peers: Gazette {peer_version()} (gazette {gazette}, gazctl {gazctl})"


@pytest.fixture
def files(tmp_path) -> Iterator:
    """`files(begin)` makes a SpoolFile under tmp_path (closed after the test): for Index tests."""
    from gazette.fragment.spool_file import SpoolFile

    made: list[SpoolFile] = []

    def make(begin: int) -> SpoolFile:
        made.append(SpoolFile(begin, directory=str(tmp_path)))
        return made[-1]

    yield make
    for f in made:
        f.close()


@pytest.fixture(scope="session")
def etcd() -> Iterator[EmbeddedEtcd]:
    # No fsync, as LocalCluster's: a throwaway etcd whose disk flushes would only add latency.
    with EmbeddedEtcd(fsync=False) as server:
        yield server


def _delete_prefix(endpoint: str, prefix: str) -> None:
    # etcd's JSON gateway, so sync and async tests alike can clean up without an event loop.
    raw = prefix.encode()
    end = raw[:-1] + bytes([raw[-1] + 1])  # prefix never ends in 0xff: it is "<root>/"
    body = json.dumps(
        {"key": base64.b64encode(raw).decode(), "range_end": base64.b64encode(end).decode()}
    ).encode()
    request = urllib.request.Request(f"{endpoint}/v3/kv/deleterange", data=body, method="POST")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as resp:
        resp.read()


def _unique_root(etcd: EmbeddedEtcd) -> Iterator[str]:
    root = f"/gazette-test/{uuid.uuid4().hex}"
    yield root
    if etcd.pid is not None:
        _delete_prefix(etcd.endpoint, root + "/")


@pytest.fixture
def etcd_root(etcd: EmbeddedEtcd) -> Iterator[str]:
    yield from _unique_root(etcd)


@pytest.fixture(scope="module")
def module_etcd_root(etcd: EmbeddedEtcd) -> Iterator[str]:
    """As `etcd_root`, shared by a module's tests (for module-scoped clusters)."""
    yield from _unique_root(etcd)


@pytest.fixture
async def etcd_client(etcd: EmbeddedEtcd) -> AsyncIterator[aetcd.Client]:
    client = connect(etcd.endpoint)
    try:
        yield client
    finally:
        await client.close()
