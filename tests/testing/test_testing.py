"""gazette.testing: bounded waits return the check's value or fail naming what they waited for, the
fixture plugin starts a real etcd and LocalClusters that serve appends and reads (and stops them),
and a missing moto says how to install it. No outcome depends on how long anything took: failures
use timeout=0 (exactly one check) and successes count checks, not seconds."""

from __future__ import annotations

import base64
import json
import socket
import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from gazette.keyspace.etcd import EmbeddedEtcd
from gazette.local import LocalCluster
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status
from gazette.testing import WaitTimeout, async_wait_for, delete_prefix, wait_for
from gazette.testing import s3 as testing_s3

pytest_plugins = ["pytester"]

POLL_S = 0.001


def answers(*outcomes: object) -> Callable[[], object]:
    """A check that returns (or raises) each outcome in turn, then keeps returning the last one."""
    it: Iterator[object] = iter(outcomes)
    last: list[object] = [None]

    def check() -> object:
        last[0] = next(it, last[0])
        if isinstance(last[0], BaseException):
            raise last[0]
        return last[0]

    return check


# --- wait_for -------------------------------------------------------------------------------------
def test_wait_for_returns_the_first_truthy_value_and_retries_transient_errors() -> None:
    check = answers(
        0, GazetteError(Status.NO_JOURNAL_PRIMARY_BROKER, "no primary yet"), OSError("refused"), "ok"
    )
    assert wait_for("the answer", check, poll=POLL_S) == "ok"


def test_wait_for_fails_after_its_bound_naming_what_and_the_last_value() -> None:
    with pytest.raises(WaitTimeout) as info:
        wait_for("the write head to reach 42", answers(0), timeout=0)
    err = info.value
    assert isinstance(err, AssertionError)
    assert (err.what, err.checks, err.last, err.error) == ("the write head to reach 42", 1, 0, None)
    assert str(err) == "timed out after 0 s waiting for the write head to reach 42 (1 checks; last value 0)"


def test_wait_for_names_the_last_transient_error() -> None:
    with pytest.raises(
        WaitTimeout, match=r"waiting for a route \(1 checks; last error OSError\('refused'\)\)$"
    ):
        wait_for("a route", answers(OSError("refused")), timeout=0)
    with pytest.raises(WaitTimeout) as info:
        wait_for("a route", answers(None, OSError("refused")), timeout=0.02, poll=POLL_S)
    assert info.value.checks >= 2 and info.value.last is None and isinstance(info.value.error, OSError)
    assert "last value None; last error OSError('refused')" in str(info.value)


def test_wait_for_lets_other_errors_through_at_once() -> None:
    with pytest.raises(ValueError, match="a bug"):
        wait_for("anything", answers(ValueError("a bug"), "never reached"), poll=POLL_S)
    with pytest.raises(GazetteError):
        wait_for("anything", answers(GazetteError(Status.OK, "no"), "ok"), poll=POLL_S, retry=())


def test_wait_for_refuses_an_async_check_and_bad_bounds() -> None:
    async def check() -> bool:
        return True

    with pytest.raises(TypeError, match="async_wait_for"):
        wait_for("an async check", check)
    with pytest.raises(ValueError, match="timeout >= 0 and poll > 0"):
        wait_for("x", answers(1), timeout=-1)
    with pytest.raises(ValueError, match="timeout >= 0 and poll > 0"):
        wait_for("x", answers(1), poll=0)


async def test_async_wait_for_takes_plain_and_async_checks() -> None:
    assert await async_wait_for("plain", answers(0, OSError("refused"), 3), poll=POLL_S) == 3
    sync_check = answers(False, "done")

    async def check() -> object:
        return sync_check()

    assert await async_wait_for("async", check, poll=POLL_S) == "done"
    with pytest.raises(WaitTimeout, match=r"waiting for the shard \(1 checks; last value False\)$"):
        await async_wait_for("the shard", answers(False), timeout=0)


# --- etcd roots --------------------------------------------------------------------------------------
def _etcd_call(endpoint: str, op: str, body: dict[str, str]) -> dict:
    request = urllib.request.Request(f"{endpoint}/v3/kv/{op}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as resp:
        return json.loads(resp.read())


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_etcd_root_is_fresh_and_delete_prefix_removes_only_its_keys(
    etcd: EmbeddedEtcd, etcd_root: str
) -> None:
    assert etcd.pid is not None and etcd_root.startswith("/gazette-test/")
    for key in (f"{etcd_root}/a", f"{etcd_root}/b/c", f"{etcd_root}x/kept"):
        _etcd_call(etcd.endpoint, "put", {"key": _b64(key), "value": _b64("v")})
    delete_prefix(etcd.endpoint, etcd_root + "/")
    left = _etcd_call(etcd.endpoint, "range", {"key": _b64(etcd_root), "range_end": _b64(etcd_root + "y")})
    assert [base64.b64decode(kv["key"]).decode() for kv in left.get("kvs", [])] == [f"{etcd_root}x/kept"]
    delete_prefix(etcd.endpoint, etcd_root + "x/")


# --- make_local_cluster ------------------------------------------------------------------------------
def test_make_local_cluster_serves_an_append_and_a_read(
    make_local_cluster: Callable[..., LocalCluster], etcd: EmbeddedEtcd, etcd_root: str
) -> None:
    cluster = make_local_cluster()
    assert cluster.etcd_endpoint == etcd.endpoint and cluster.root == f"{etcd_root}/cluster-0/brokers"
    client = cluster.client()
    client.apply_journals([cluster.journal_spec("testing/hello")])
    cluster.wait_for_routes(["testing/hello"])
    res = client.append("testing/hello", b"hello\n")
    assert (res.begin, res.end) == (0, 6)
    assert wait_for("the append to be readable", lambda: client.read_all("testing/hello") == b"hello\n")
    own = make_local_cluster(etcd=None)  # an etcd of its own, for tests that restart or pause it
    assert own.etcd_endpoint != etcd.endpoint and own.embedded_etcd.pid is not None


def test_the_plugin_works_in_a_users_conftest_and_stops_its_clusters(pytester: pytest.Pytester) -> None:
    """As a user's suite loads it: a test makes a cluster through the plugin; once that test is
    over, its broker no longer listens."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest('pytest_plugins = ["gazette.testing.fixtures"]\n')
    endpoints = pytester.path / "endpoints.txt"
    pytester.makepyfile(
        textwrap.dedent(
            f"""
            def test_app(make_local_cluster, etcd_root):
                cluster = make_local_cluster()
                client = cluster.client()
                client.apply_journals([cluster.journal_spec("app/events")])
                cluster.wait_for_routes(["app/events"])
                client.append("app/events", b"x\\n")
                assert client.read_all("app/events") == b"x\\n"
                open({str(endpoints)!r}, "w").write(" ".join(cluster.broker_endpoints))
            """
        )
    )
    result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    for endpoint in endpoints.read_text().split():
        url = urlsplit(endpoint)
        with (
            pytest.raises(ConnectionRefusedError),
            socket.create_connection((url.hostname, url.port), timeout=5),
        ):
            pass


# --- S3 ------------------------------------------------------------------------------------------------
def test_s3_store_url_names_a_fresh_bucket_on_moto(
    moto_server: str, s3_bucket: str, s3_store_url: str
) -> None:
    import boto3

    assert s3_store_url == f"s3://{s3_bucket}/prefix/?endpoint={moto_server}&region=us-east-1"
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    assert s3.list_objects_v2(Bucket=s3_bucket)["KeyCount"] == 0


def test_a_missing_moto_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = testing_s3.importlib.util.find_spec
    monkeypatch.setattr(
        testing_s3.importlib.util, "find_spec", lambda name: None if name == "moto" else real(name)
    )
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'gazette-py\[dev\]'"):
        testing_s3.MotoServer().start()


def test_no_production_module_imports_the_testing_layer() -> None:
    """gazette.testing (waits, fixtures, the zombie entry point) is imported by tests, notebooks and
    itself, never by the library's other modules."""
    import ast
    import pathlib

    import gazette

    root = pathlib.Path(gazette.__file__).parent
    importers = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(root / "testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "gazette.testing" or n.startswith("gazette.testing.") for n in names):
                importers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert importers == []
