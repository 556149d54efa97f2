from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aetcd
import pytest

from gazette.keyspace import keyspace as keyspace_mod
from gazette.keyspace import procutil
from gazette.keyspace.etcd import EmbeddedEtcd, connect
from gazette.keyspace.keyspace import KeySpace

WAIT_S = 10.0


def decode_json(key: str, raw: bytes) -> Any:
    return json.loads(raw)


def snapshot(ks: KeySpace, prefix: str) -> dict[str, Any]:
    return {kv.key: kv.decoded for kv in ks.prefixed(prefix)}


@pytest.fixture
async def ks(etcd_client: aetcd.Client, etcd_root: str) -> AsyncIterator[KeySpace]:
    space = KeySpace(etcd_client, etcd_root, decode_json, watch_apply_delay_s=0.01)
    yield space
    await space.stop()


async def put(client: aetcd.Client, key: str, value: Any) -> int:
    return int((await client.put(key.encode(), json.dumps(value).encode())).header.revision)


async def test_load_mirrors_only_the_root(ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str) -> None:
    await put(etcd_client, f"{etcd_root}/b", 2)
    await put(etcd_client, f"{etcd_root}/a/x", 1)
    last = await put(etcd_client, f"{etcd_root}/c", {"n": 3})
    await put(etcd_client, f"{etcd_root}-sibling/z", 9)  # shares the root's text, not its keys
    try:
        await ks.load()
        assert [kv.key for kv in ks.prefixed(etcd_root + "/")] == [
            f"{etcd_root}/a/x",
            f"{etcd_root}/b",
            f"{etcd_root}/c",
        ]
        kv = ks.get(f"{etcd_root}/c")
        assert kv is not None and kv.decoded == {"n": 3}
        assert kv.mod_revision == kv.create_revision == last and kv.lease == 0
        assert ks.get(f"{etcd_root}-sibling/z") is None
        assert ks.prefixed(f"{etcd_root}/a") == [ks.get(f"{etcd_root}/a/x")]
        assert ks.prefixed(f"{etcd_root}/zz") == []
        # The header revision is the greatest ModRevision under the root, not the cluster's.
        assert ks.revision == last
        assert ks.cluster_id and ks.member_id and ks.raft_term
    finally:
        await etcd_client.delete_prefix(f"{etcd_root}-sibling/".encode())


async def test_load_pages_through_a_large_root(
    ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyspace_mod, "LOAD_PAGE_KEYS", 3)
    for i in range(10):
        await put(etcd_client, f"{etcd_root}/k{i:02d}", i)
    await ks.load()
    assert snapshot(ks, etcd_root + "/") == {f"{etcd_root}/k{i:02d}": i for i in range(10)}


async def test_watch_applies_puts_and_deletes(
    ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str
) -> None:
    await put(etcd_client, f"{etcd_root}/a", 1)
    await ks.start()
    assert snapshot(ks, etcd_root) == {f"{etcd_root}/a": 1}

    rev = await put(etcd_client, f"{etcd_root}/b", [2])
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert snapshot(ks, etcd_root) == {f"{etcd_root}/a": 1, f"{etcd_root}/b": [2]}

    rev = await put(etcd_client, f"{etcd_root}/a", "one")
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    kv = ks.get(f"{etcd_root}/a")
    assert kv is not None and kv.decoded == "one" and kv.mod_revision == rev and kv.create_revision < rev

    deleted = await etcd_client.delete(f"{etcd_root}/a".encode())
    assert deleted is not None
    await ks.wait_for_revision(deleted.header.revision, timeout=WAIT_S)
    assert snapshot(ks, etcd_root) == {f"{etcd_root}/b": [2]}
    assert ks.revision == deleted.header.revision


async def test_header_revision_rule(ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str) -> None:
    rev = await put(etcd_client, f"{etcd_root}/a", 1)
    await ks.start()
    assert ks.revision == rev
    # A write elsewhere bumps the cluster revision, never ours.
    elsewhere = await put(etcd_client, f"{etcd_root}-elsewhere/x", 0)
    try:
        with pytest.raises(asyncio.TimeoutError):
            await ks.wait_for_revision(elsewhere, timeout=0.3)
        assert ks.revision == rev
        # A delete counts with its own revision, so a waiter on a delete is released.
        deleted_at = (await etcd_client.delete(f"{etcd_root}/a".encode())).header.revision
        await ks.wait_for_revision(deleted_at, timeout=WAIT_S)
        assert ks.revision == deleted_at > elsewhere
        assert ks.get(f"{etcd_root}/a") is None
    finally:
        await etcd_client.delete_prefix(f"{etcd_root}-elsewhere/".encode())


async def test_two_key_spaces_agree_on_revisions(
    etcd: EmbeddedEtcd, etcd_client: aetcd.Client, etcd_root: str
) -> None:
    other_client = connect(etcd.endpoint)
    a = KeySpace(etcd_client, etcd_root, decode_json, watch_apply_delay_s=0.0)
    b = KeySpace(other_client, etcd_root, decode_json)
    try:
        await put(etcd_client, f"{etcd_root}/x", 1)
        await a.start()
        await put(etcd_client, f"{etcd_root}-elsewhere/x", 1)
        await b.start()
        assert a.revision == b.revision  # b loaded later, at a greater cluster revision
        rev = await put(etcd_client, f"{etcd_root}/y", 2)
        await a.wait_for_revision(rev, timeout=WAIT_S)
        assert a.revision == rev
        await b.wait_for_revision(a.revision, timeout=WAIT_S)  # a header revision of a, honoured by b
        assert snapshot(a, etcd_root) == snapshot(b, etcd_root)
    finally:
        await a.stop()
        await b.stop()
        await other_client.close()
        await etcd_client.delete_prefix(f"{etcd_root}-elsewhere/".encode())


async def test_wait_for_revision_times_out(ks: KeySpace) -> None:
    await ks.start()
    with pytest.raises(asyncio.TimeoutError):
        await ks.wait_for_revision(ks.revision + 1, timeout=0.1)
    await ks.wait_for_revision(ks.revision, timeout=0)  # already there: returns at once


async def test_observers_run_before_waiters_wake(
    ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str
) -> None:
    seen: list[tuple[int, int]] = []

    def observer() -> None:
        seen.append((ks.revision, len(ks.prefixed(etcd_root))))

    def broken() -> None:
        raise RuntimeError("observer bug")

    ks.add_observer(broken)  # its failure is logged; later observers and the watch go on
    ks.add_observer(observer)
    await ks.start()
    assert seen == [(0, 0)]  # called after the load
    rev = await put(etcd_client, f"{etcd_root}/a", 1)
    waiter = asyncio.create_task(ks.wait_for_change())
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert seen[-1] == (rev, 1)
    await asyncio.wait_for(waiter, WAIT_S)
    rev = await put(etcd_client, f"{etcd_root}/b", 1)
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert seen[-1] == (rev, 2)


async def test_responses_are_batched(etcd_client: aetcd.Client, etcd_root: str) -> None:
    ks = KeySpace(etcd_client, etcd_root, decode_json, watch_apply_delay_s=0.25)
    batches: list[dict[str, Any]] = []
    ks.add_observer(lambda: batches.append(snapshot(ks, etcd_root)))
    await ks.start()
    try:
        revisions = [await put(etcd_client, f"{etcd_root}/k{i:02d}", i) for i in range(20)]
        await ks.wait_for_revision(revisions[-1], timeout=WAIT_S)
        # One load plus far fewer applications than the 20 separate watch responses.
        assert 2 <= len(batches) < 20
        assert batches[-1] == {f"{etcd_root}/k{i:02d}": i for i in range(20)}
        # Each batch is applied whole: observers never see a key without all keys put before it.
        for state in batches:
            assert list(state) == [f"{etcd_root}/k{i:02d}" for i in range(len(state))]
    finally:
        await ks.stop()


async def test_delete_and_recreate_in_one_batch(etcd_client: aetcd.Client, etcd_root: str) -> None:
    ks = KeySpace(etcd_client, etcd_root, decode_json, watch_apply_delay_s=0.25)
    key = f"{etcd_root}/j"
    first = await put(etcd_client, key, "old")
    await ks.start()
    try:
        await etcd_client.delete(key.encode())
        await put(etcd_client, f"{etcd_root}/gone", 0)
        await etcd_client.delete(f"{etcd_root}/gone".encode())
        rev = await put(etcd_client, key, "new")
        await ks.wait_for_revision(rev, timeout=WAIT_S)
        kv = ks.get(key)
        assert kv is not None and kv.decoded == "new" and kv.create_revision == rev > first
        assert [kv.key for kv in ks.prefixed(etcd_root)] == [key]
    finally:
        await ks.stop()


async def test_decode_errors_are_skipped(
    ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gazette.keyspace")
    await etcd_client.put(f"{etcd_root}/bad".encode(), b"{not json")
    await put(etcd_client, f"{etcd_root}/good", 1)
    await ks.start()
    assert snapshot(ks, etcd_root) == {f"{etcd_root}/good": 1}
    assert f"{etcd_root}/bad" in caplog.text

    # A key whose new value does not decode is absent (not stale); the watch goes on.
    rev = (await etcd_client.put(f"{etcd_root}/good".encode(), b"\xff")).header.revision
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert ks.get(f"{etcd_root}/good") is None and ks.revision == rev
    rev = await put(etcd_client, f"{etcd_root}/bad", "fixed")
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert snapshot(ks, etcd_root) == {f"{etcd_root}/bad": "fixed"}


async def test_compacted_watch_revision_reloads(
    ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str
) -> None:
    await put(etcd_client, f"{etcd_root}/a", 1)
    await put(etcd_client, f"{etcd_root}/b", 1)
    await ks.load()
    loaded = ks.revision
    await etcd_client.delete(f"{etcd_root}/a".encode())
    rev = await put(etcd_client, f"{etcd_root}/c", 3)
    await etcd_client.compact(rev)
    await ks.start()  # watches from the loaded revision + 1, which is compacted
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert loaded < ks.revision == rev
    assert snapshot(ks, etcd_root) == {f"{etcd_root}/b": 1, f"{etcd_root}/c": 3}
    rev = await put(etcd_client, f"{etcd_root}/d", 4)  # and the new watch works
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    assert len(ks) == 3


async def until_reconnected(call: Callable[[], Awaitable[int]]) -> int:
    """Calls fail fast (UNAVAILABLE) until the client's channel has reconnected to a restarted etcd."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        try:
            return await call()
        except aetcd.ConnectionFailedError:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)


async def test_watch_resumes_after_etcd_restart() -> None:
    server = EmbeddedEtcd().start()
    client = connect(server.endpoint)
    ks = KeySpace(client, "/restart", decode_json, watch_apply_delay_s=0.0)
    try:
        await put(client, "/restart/a", 1)
        await ks.start()
        await asyncio.to_thread(server.restart)
        rev = await until_reconnected(lambda: put(client, "/restart/b", 2))
        await client.delete(b"/restart/a")
        rev = await put(client, "/restart/c", 3)
        await ks.wait_for_revision(rev, timeout=WAIT_S)
        assert snapshot(ks, "/restart/") == {"/restart/b": 2, "/restart/c": 3}
    finally:
        await ks.stop()
        await client.close()
        server.stop()


async def test_stop_leaves_no_task_running(ks: KeySpace, etcd_client: aetcd.Client, etcd_root: str) -> None:
    before = asyncio.all_tasks()
    await ks.start()
    rev = await put(etcd_client, f"{etcd_root}/a", 1)
    await ks.wait_for_revision(rev, timeout=WAIT_S)
    (watch,) = [t for t in asyncio.all_tasks() - before if t.get_name().startswith("keyspace watch")]
    await ks.stop()
    await ks.stop()  # idempotent
    assert watch.done()
    # grpc's own bookkeeping task of the cancelled watch call ends once its core reports the status.
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while asyncio.all_tasks() - before:
        assert asyncio.get_running_loop().time() < deadline, asyncio.all_tasks() - before
        await asyncio.sleep(0.01)


async def test_start_without_etcd_raises_a_client_error() -> None:
    client = connect(f"http://127.0.0.1:{procutil.free_port()}")
    ks = KeySpace(client, "/nowhere", decode_json)
    try:
        with pytest.raises(aetcd.ClientError, match="/nowhere"):
            await ks.start()
    finally:
        await ks.stop()
        await client.close()


async def test_misuse_is_refused(ks: KeySpace, etcd_client: aetcd.Client) -> None:
    for bad in ("", "/", "relative", "/trailing/", "/a//b", "/a/../b"):
        with pytest.raises(ValueError, match="root"):
            KeySpace(etcd_client, bad, decode_json)
    await ks.start()
    with pytest.raises(RuntimeError, match="already started"):
        await ks.start()
    with pytest.raises(RuntimeError, match="watched"):
        await ks.load()
