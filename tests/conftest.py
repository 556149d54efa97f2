"""Shared fixtures: gazette.testing's plugin (one real etcd per session, a unique key root per test,
LocalClusters, moto's S3), the test-only S3 fixtures of fixtures_s3.py, and an etcd client.

`etcd` (session) is an EmbeddedEtcd; tests that stop, restart or pause etcd start their own instead.
`etcd_root` yields a fresh root like "/gazette-test/<hex>" and deletes every key under it afterwards.
The pytest header prints the version output of each service and peer the suite runs (tests/needs.py,
which also turns a missing one into a skip, or into a failure under CI).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import aetcd
import hypothesis
import pytest

from gazette.keyspace.etcd import EmbeddedEtcd, connect

pytest_plugins = ["gazette.testing.fixtures", "fixtures_s3"]

# Hypothesis profiles, chosen by GAZETTE_HYPOTHESIS_PROFILE: "ci" (default) is reproducible and
# bounded; "soak" (make soak) explores many more examples. Tests' own @settings still win.
hypothesis.settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None)
hypothesis.settings.register_profile("soak", max_examples=5000, deadline=None)
hypothesis.settings.load_profile(os.environ.get("GAZETTE_HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header(config) -> list[str]:
    """The version output of each service and Gazette peer the suite runs, or how to install it
    (tests/needs.py), and whether CI is set (a missing one then fails instead of skipping)."""
    import needs

    return needs.report_lines()


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


@pytest.fixture
async def etcd_client(etcd: EmbeddedEtcd) -> AsyncIterator[aetcd.Client]:
    client = connect(etcd.endpoint)
    try:
        yield client
    finally:
        await client.close()
