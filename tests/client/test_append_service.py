"""AppendService against a real in-process broker: order and contiguity per journal, batching of
small writes into few RPCs, terminal-error latching, commit barriers, dependencies, and retries
through a broker restart."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator

import pytest

from gazette.client.aio import AsyncClient
from gazette.client.append_service import AppendService, AsyncAppendService, is_terminal
from gazette.client.loop import default_loop
from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.status import Status
from gazette.testing import wait_for

WAIT_S = 60.0


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    store = f"file://{tmp_path}/store/"
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(
        brokers=1,
        mode="inprocess",
        store=store,
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
    ) as c:
        yield c


@pytest.fixture
def client(cluster):
    return cluster.client()


def _create(cluster, client, *names: str) -> None:
    client.apply_journals(
        [cluster.journal_spec(n, fragment_length=1 << 20, refresh_interval="1s") for n in names]
    )


def _primary(client, journal: str) -> tuple[str, str] | None:
    (info,) = client.list_journals(f"name={journal}")
    return info.route.primary_id


def _commits(cluster) -> float:
    broker = cluster.brokers[0].broker
    return broker.metrics.registry.get_sample_value("gazette_spool_commits_total") or 0.0


def _lines(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix} {i:06d}\n".encode() for i in range(n)]


def test_small_writes_land_in_order_in_few_rpcs(cluster, client):
    """Two threads each write 4000 small lines to their own journal and 500 to a shared one: every
    journal holds exactly its bytes in write order, through far fewer Append RPCs than writes."""
    names = ["examples/svc/a", "examples/svc/b", "examples/svc/shared"]
    _create(cluster, client, *names)
    before = _commits(cluster)
    with AppendService(client) as svc:
        futures: dict[str, set] = {n: set() for n in names}
        shared_lines: dict[str, list[bytes]] = {}

        def writer(name: str) -> None:
            own = _lines(name, 4000)
            shared = _lines(f"shared-from-{name}", 500)
            shared_lines[name] = shared
            for i, line in enumerate(own):
                futures[name].add(svc.append(name, line))
                if i % 8 == 0:
                    futures["examples/svc/shared"].add(svc.append("examples/svc/shared", shared[i // 8]))

        threads = [threading.Thread(target=writer, args=(n,)) for n in names[:2]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        svc.flush(WAIT_S)
        results = {n: sorted((f.result().begin, f.result().end) for f in futures[n]) for n in names}

    for name in names[:2]:
        assert client.read_all(name) == b"".join(_lines(name, 4000))
    shared = client.read_all("examples/svc/shared").splitlines(keepends=True)
    for name in names[:2]:
        assert [ln for ln in shared if ln.startswith(f"shared-from-{name} ".encode())] == shared_lines[name]
    assert len(shared) == 1000
    # Batches of a journal are contiguous and cover it exactly: one RPC each, in order.
    for name in names:
        spans = results[name]
        assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    rpcs = sum(len(futures[n]) for n in names)
    assert rpcs < 9000 / 20, f"{rpcs} Append RPCs for 9000 writes"
    assert _commits(cluster) - before == rpcs


async def test_batches_share_futures_and_pending_except(cluster, client):
    """Writes on the loop between two awaits share one batch; pending_except leaves one journal out."""
    _create(cluster, client, "examples/svc/x", "examples/svc/y")
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        svc = AsyncAppendService(aio)
        fx = [svc.append("examples/svc/x", b"x%d\n" % i) for i in range(100)]
        fy = svc.append("examples/svc/y", b"y\n")
        assert len(set(fx)) == 1
        assert svc.pending_except("examples/svc/x") == [fy]
        assert svc.pending_except("examples/svc/y") == [fx[0]]
        assert set(svc.pending()) == {fx[0], fy}
        res = await fx[0]
        assert (res.journal, res.begin, res.end) == (
            "examples/svc/x",
            0,
            sum(len(b"x%d\n" % i) for i in range(100)),
        )
        await svc.flush()
        assert svc.pending() == [] and svc.pending_except("examples/svc/y") == []
        # The next write after a result starts a new batch at the journal's end.
        res2 = await svc.append("examples/svc/x", b"more\n")
        assert res2.begin == res.end
        await svc.close()
        with pytest.raises(GazetteError, match="closed"):
            svc.append("examples/svc/x", b"late\n")


def test_missing_journal_latches_until_cleared(cluster, client):
    _create(cluster, client, "examples/svc/ok")
    with AppendService(client) as svc:
        fut = svc.append("examples/svc/missing", b"lost\n")
        with pytest.raises(GazetteError) as exc:
            fut.result(WAIT_S)
        assert exc.value.status == Status.JOURNAL_NOT_FOUND
        assert svc.error("examples/svc/missing").status == Status.JOURNAL_NOT_FOUND
        with pytest.raises(GazetteError) as exc:
            svc.append("examples/svc/missing", b"again\n")  # fails fast, no RPC
        assert exc.value.status == Status.JOURNAL_NOT_FOUND and "clear_error" in str(exc.value)
        assert svc.append("examples/svc/ok", b"fine\n").result(WAIT_S).end == 5  # others unaffected

        _create(cluster, client, "examples/svc/missing")
        svc.clear_error("examples/svc/missing")
        assert svc.append("examples/svc/missing", b"found\n").result(WAIT_S).begin == 0
    assert client.read_all("examples/svc/missing") == b"found\n"


def test_register_mismatch_fails_queued_batches_and_latches(cluster, client):
    j = "examples/svc/fenced"
    _create(cluster, client, j)
    client.append(j, b"owned\n", union_registers={"owner": "a"})
    with AppendService(client) as svc:
        ok = svc.append(j, b"by a\n", check_registers="owner=a")
        bad = svc.append(j, b"by b\n", check_registers="owner=b")  # other options: a new batch
        after = svc.append(j, b"plain\n")
        assert len({ok, bad, after}) == 3
        assert ok.result(WAIT_S).registers.to_dict() == {"owner": "a"}
        with pytest.raises(GazetteError) as exc:
            bad.result(WAIT_S)
        assert exc.value.status == Status.REGISTER_MISMATCH
        assert exc.value.registers.to_dict() == {"owner": "a"}
        with pytest.raises(GazetteError) as exc:
            after.result(WAIT_S)  # queued behind the failure: fails with it
        assert exc.value.status == Status.REGISTER_MISMATCH
        with pytest.raises(GazetteError):
            svc.append(j, b"x\n")
        svc.clear_error(j)
        res = svc.append(j, b"handover\n", check_registers="owner=a", union_registers={"owner": "b"},
                         subtract_registers={"owner": "a"}).result(WAIT_S)  # fmt: skip
        assert res.registers.to_dict() == {"owner": "b"}
    assert client.read_all(j) == b"owned\nby a\nhandover\n"


def test_start_append_sections_and_dependencies(cluster, client):
    j, k = "examples/svc/sections", "examples/svc/dependent"
    _create(cluster, client, j, k)
    with AppendService(client) as svc:
        with svc.start_append(j) as w:
            w.write(b"one ")
            w.write(b"piece\n")
        with pytest.raises(RuntimeError):
            with svc.start_append(j) as w:
                w.write(b"half a messa")
                raise RuntimeError("encoding failed")
        with svc.start_append(j) as w:
            w.write(b"two\n")
        first = w.future
        assert first.result(WAIT_S).end == len(b"one piece\ntwo\n")

        # A batch waits for its dependencies, and fails (without latching) when one failed.
        doomed = svc.append("examples/svc/nowhere", b"x\n")
        dep_fail = svc.append(k, b"after doomed\n", dependencies=[doomed])
        with pytest.raises(GazetteError, match="dependency"):
            dep_fail.result(WAIT_S)
        assert svc.error(k) is None
        fine = svc.append(k, b"after first\n", dependencies=[first])
        assert fine.result(WAIT_S).begin == 0
        with pytest.raises(ValidationError):
            svc.append("bad//name", b"x")
    assert client.read_all(j) == b"one piece\ntwo\n"


def test_batches_are_bounded(cluster, client):
    j = "examples/svc/bounded"
    _create(cluster, client, j)
    lines = _lines("bounded", 2000)  # 15 bytes each
    with AppendService(client, max_batch_bytes=1500) as svc:
        futures = {svc.append(j, line) for line in lines}
        svc.flush(WAIT_S)
    sizes = [f.result().end - f.result().begin for f in futures]
    assert len(futures) >= len(lines) * 15 // 1515 and max(sizes) <= 1500 + 15
    assert client.read_all(j) == b"".join(lines)


def test_appends_retry_through_a_broker_restart(etcd, etcd_root, tmp_path):
    """A writer keeps appending through a broker that stops and restarts while proxying to the
    journal's primary: every line lands, in order (appends are at-least-once, so a batch whose RPC
    broke after committing may repeat). A restarted *primary* would lose its spool, which with one
    replica is INDEX_HAS_GREATER_OFFSET by design (reference 4.5), so the proxy is restarted."""
    j = "examples/svc/restart"
    with LocalCluster(brokers=2, mode="inprocess", etcd=etcd.endpoint, root=etcd_root,
                      data_dir=str(tmp_path / "data")) as cluster:  # fmt: skip
        _create(cluster, cluster.client(), j)
        primary_id = wait_for(f"{j} to get a primary", lambda: _primary(cluster.client(), j), WAIT_S)
        primary = next(h.index for h in cluster.brokers if (h.zone, h.suffix) == primary_id)
        proxy = 1 - primary
        lines: list[bytes] = []
        with Client(cluster.broker_endpoints[proxy], loop=default_loop()) as client:
            svc = AppendService(client)
            half, restarting, restarted = threading.Event(), threading.Event(), threading.Event()
            during: list[int] = []

            def writer() -> None:
                i, after = 0, 0
                while after < 500:
                    line = b"restart %06d\n" % i
                    svc.append(j, line)
                    lines.append(line)
                    i += 1
                    if i == 1500:
                        svc.flush(WAIT_S)  # these are committed before the restart
                        half.set()
                        assert restarting.wait(WAIT_S)
                    if i > 1500 and i % 10 == 0:
                        time.sleep(0.001)  # keep writing while the broker is down
                    if restarted.is_set():
                        after += 1
                    elif restarting.is_set():
                        during.append(i)

            t = threading.Thread(target=writer)
            t.start()
            assert half.wait(WAIT_S)
            restarting.set()
            cluster.restart_broker(proxy)
            restarted.set()
            t.join(WAIT_S)
            svc.flush(WAIT_S)
            svc.close()
            got = client.read_all(j).splitlines(keepends=True)
    assert len(during) > 10, "the writer should have appended while the broker was down"
    first_seen: list[bytes] = []
    seen: set[bytes] = set()
    for ln in got:
        if ln not in seen:
            seen.add(ln)
            first_seen.append(ln)
    assert first_seen == lines


def test_terminal_classification():
    assert is_terminal(GazetteError(Status.REGISTER_MISMATCH))
    assert is_terminal(GazetteError(Status.JOURNAL_NOT_FOUND))
    assert not is_terminal(GazetteError(Status.NO_JOURNAL_PRIMARY_BROKER))
    assert not is_terminal(GazetteError(Status.OK, "UNAVAILABLE: x", grpc_code="UNAVAILABLE"))
    assert is_terminal(GazetteError(Status.OK, "INVALID_ARGUMENT: x", grpc_code="INVALID_ARGUMENT"))
    assert is_terminal(ValueError("local"))


async def test_async_service_needs_its_loop():
    async with AsyncClient("http://127.0.0.1:1") as aio:
        svc = AsyncAppendService(aio)
        assert svc.loop is asyncio.get_running_loop()
        with pytest.raises(RuntimeError, match="await"):
            svc.wait()
        with pytest.raises(ValueError, match="max_batch_bytes"):
            AsyncAppendService(aio, max_batch_bytes=0)
