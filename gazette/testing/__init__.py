"""Helpers for testing applications built on gazette-py, and for gazette-py's own tests.

Waits bounded by a deadline (`wait_for`, `async_wait_for`) instead of sleeps; fresh etcd roots
(`unique_root`, `delete_prefix`); moto's S3 server (`MotoServer`); and a pytest plugin of fixtures
(`gazette.testing.fixtures`: a real etcd, a root per test, LocalClusters, S3) that imports pytest.
A top layer like `local`: it may import every layer; production code never imports it.
"""

from gazette.testing.etcd import delete_prefix, unique_root
from gazette.testing.s3 import MotoServer, make_bucket, start_moto_server
from gazette.testing.wait import TRANSIENT_ERRORS, WaitTimeout, async_wait_for, wait_for

__all__ = [
    "TRANSIENT_ERRORS",
    "MotoServer",
    "WaitTimeout",
    "async_wait_for",
    "delete_prefix",
    "make_bucket",
    "start_moto_server",
    "unique_root",
    "wait_for",
]
