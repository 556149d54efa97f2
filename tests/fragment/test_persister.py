"""Persister: primary/replica scheduling, exists short-circuit, retries against a store that is down,
drain on stop and loud give-up, against the file store and moto's S3 server."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from gazette.fragment.content import list_fragments, open_fragment, persist
from gazette.fragment.fragment import Codec, Fragment
from gazette.fragment.persister import Persister
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status
from gazette.testing import async_wait_for

DEADLINE_S = 30.0
POLL_S = 0.02


class SpoolFile:
    def __init__(self, begin: int, data: bytes) -> None:
        self.begin = begin
        self.data = data
        self.reads = 0

    def reader(self, begin: int, end: int) -> Iterator[bytes]:
        self.reads += 1
        view = self.data[begin - self.begin : end - self.begin]
        for i in range(0, len(view), 64 * 1024):
            yield view[i : i + 64 * 1024]


@dataclasses.dataclass
class Completed:
    fragment: Fragment
    file: SpoolFile
    first_append_time: float = 0.0
    registers: Any = None


def completed(journal: str, begin: int, data: bytes, codec: Codec = Codec.SNAPPY) -> Completed:
    frag = Fragment(journal, begin, begin + len(data), hashlib.sha1(data).digest(), codec)
    return Completed(frag, SpoolFile(begin, data), first_append_time=time.time())


@dataclasses.dataclass
class Spec:
    stores: Sequence[str]
    postfix: str = ""

    def render_postfix(self, completed: Any) -> str:
        return self.postfix


def specs(mapping: dict[str, Spec | None]) -> Callable[[str], Spec | None]:
    return lambda journal: mapping.get(journal)


@pytest.fixture
async def persister() -> Any:
    p = Persister(replica_delay_s=600.0, retry_s=0.1)
    await p.start()
    yield p
    await p.stop(drain=False)


async def test_primary_persists_at_once(persister: Persister, file_store_url: str) -> None:
    c = completed("p/one", 100, os.urandom(10_000) + b"x" * 100_000)
    got: list[Fragment] = []
    persister.submit(
        c,
        spec_lookup=specs({"p/one": Spec([file_store_url], "day=1")}),
        primary=True,
        on_persisted=got.append,
    )
    assert persister.pending == 1
    # No flush here: it would expedite any item. A primary one persists on its own, at once (the
    # fixture's replica delay is 600 s, far beyond the deadline).
    await async_wait_for(
        "the primary fragment to persist", lambda: persister.pending == 0, DEADLINE_S, POLL_S
    )
    assert len(got) == 1
    persisted = got[0]
    assert persister.pending == 0
    assert persisted.backing_store == file_store_url and persisted.path_postfix == "day=1"
    assert await list_fragments(file_store_url, "p/one") == [persisted]
    assert b"".join(open_fragment(persisted)) == c.file.data
    assert await persister.flush(c.fragment) == persisted  # a late flush still answers


@pytest.fixture
async def one_thread_persister() -> Any:
    p = Persister(replica_delay_s=600.0, retry_s=0.1, max_concurrency=1)
    await p.start()
    yield p
    await p.stop(drain=False)


async def test_replica_waits_then_flush_or_primary_hurries_it(
    one_thread_persister: Persister, file_store_url: str
) -> None:
    persister = one_thread_persister
    lookup = specs({"r/j": Spec([file_store_url])})
    a, b = completed("r/j", 0, b"a" * 1000), completed("r/j", 1000, b"b" * 1000)
    c = completed("r/j", 2000, b"c" * 1000)
    got: list[Fragment] = []
    persister.submit(a, spec_lookup=lookup, primary=False, on_persisted=got.append)
    persister.submit(b, spec_lookup=lookup, primary=False, on_persisted=got.append)
    # A primary fragment of the same journal, submitted after the replicas, persists at once. Had the
    # replicas been attempted at once too, they would have been queued to the single upload thread
    # ahead of it, so by the time it is persisted they would be in the store.
    persister.submit(c, spec_lookup=lookup, primary=True, on_persisted=got.append)
    await async_wait_for("the primary fragment to persist", lambda: bool(got), DEADLINE_S, POLL_S)
    assert [f.begin for f in got] == [2000]
    assert persister.pending == 2
    assert a.file.reads == 0 and b.file.reads == 0  # not even attempted
    assert await list_fragments(file_store_url, "r/j") == got

    assert (await persister.flush(a.fragment)).begin == 0
    persister.submit(
        b, spec_lookup=lookup, primary=True, on_persisted=got.append
    )  # now this broker is primary
    await async_wait_for("b to persist", lambda: persister.pending == 0, DEADLINE_S, POLL_S)
    # b's callbacks from both submissions
    assert sorted(f.begin for f in got) == [0, 1000, 1000, 2000]
    assert len(await list_fragments(file_store_url, "r/j")) == 3


async def test_max_concurrency_bounds_the_uploads_running_at_once(file_store_url: str) -> None:
    lock = threading.Lock()
    running = peak = 0

    class SlowFile(SpoolFile):
        def reader(self, begin: int, end: int) -> Iterator[bytes]:
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            try:
                time.sleep(0.1)
                yield from super().reader(begin, end)
            finally:
                with lock:
                    running -= 1

    p = Persister(max_concurrency=2)
    await p.start()
    try:
        cs = [completed("c/j", i * 100, os.urandom(100)) for i in range(6)]
        for c in cs:
            c.file = SlowFile(c.fragment.begin, c.file.data)
            p.submit(
                c,
                spec_lookup=specs({"c/j": Spec([file_store_url])}),
                primary=True,
                on_persisted=lambda f: None,
            )
        await async_wait_for("every fragment to persist", lambda: p.pending == 0, DEADLINE_S, POLL_S)
        assert peak == 2  # the pool has max_concurrency threads: two at once, never more
        assert len(await list_fragments(file_store_url, "c/j")) == 6
    finally:
        await p.stop(drain=False)


async def test_existing_object_short_circuits(persister: Persister, s3_store_url: str) -> None:
    c = completed("e/j", 0, b"already there\n" * 100, Codec.GZIP)
    uploaded = await persist(c.fragment, lambda: c.file.reader(0, c.fragment.end), s3_store_url, "")
    reads = c.file.reads
    persister.submit(
        c, spec_lookup=specs({"e/j": Spec([s3_store_url])}), primary=True, on_persisted=lambda f: None
    )
    assert await persister.flush(c.fragment) == uploaded
    assert c.file.reads == reads  # the spool file was not read again


async def test_deleted_journal_and_journal_without_stores(persister: Persister, file_store_url: str) -> None:
    gone, bare = completed("gone/j", 0, b"x"), completed("bare/j", 0, b"y")
    got: list[Fragment] = []
    lookup = specs({"bare/j": Spec([])})
    persister.submit(gone, spec_lookup=lookup, primary=True, on_persisted=got.append)
    persister.submit(bare, spec_lookup=lookup, primary=True, on_persisted=got.append)
    with pytest.raises(GazetteError) as err:
        await persister.flush(gone.fragment)
    assert err.value.status == Status.JOURNAL_NOT_FOUND
    assert await persister.flush(bare.fragment) == bare.fragment  # nothing to persist to
    assert got == [] and persister.pending == 0


async def test_retries_while_store_is_down_then_catches_up(
    dedicated_moto: Callable[[], Any], caplog: pytest.LogCaptureFixture
) -> None:
    # A private S3 server that goes away, then comes back on the same port (with a new, empty bucket).
    server = dedicated_moto()
    url = f"s3://down-bucket/frags/?endpoint={server.endpoint}&region=us-east-1"
    p = Persister(retry_s=0.2)
    await p.start()
    try:
        server.stop()
        cs = [completed("down/j", i * 5000, os.urandom(5000), Codec.ZSTANDARD) for i in range(3)]
        got: list[Fragment] = []
        with caplog.at_level(logging.WARNING, logger="gazette.fragment.persister"):
            for c in cs:
                p.submit(c, spec_lookup=specs({"down/j": Spec([url])}), primary=True, on_persisted=got.append)
            await async_wait_for(
                "a second failed attempt",
                lambda: any("attempt 2" in r.getMessage() for r in caplog.records),
                DEADLINE_S,
                POLL_S,
            )
        assert p.pending == 3 and got == []
        failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert any(cs[0].fragment.content_name in m for m in failures)

        server.start()
        server.make_bucket("down-bucket")
        persisted = [await p.flush(c.fragment) for c in cs]
        assert sorted(got, key=lambda f: f.begin) == persisted
        assert await list_fragments(url, "down/j") == persisted
        assert b"".join(open_fragment(persisted[1])) == cs[1].file.data
    finally:
        await p.stop(drain=False)


async def test_stop_drains_everything_queued(file_store_url: str) -> None:
    p = Persister(replica_delay_s=3600.0, max_concurrency=2)
    await p.start()
    cs = [completed("drain/j", i * 100, os.urandom(100)) for i in range(10)]
    got: list[Fragment] = []
    for c in cs:
        p.submit(
            c, spec_lookup=specs({"drain/j": Spec([file_store_url])}), primary=False, on_persisted=got.append
        )
    assert p.pending == 10
    await p.stop(drain=True)
    assert p.pending == 0
    assert sorted(f.begin for f in got) == [c.fragment.begin for c in cs]
    assert len(await list_fragments(file_store_url, "drain/j")) == 10
    with pytest.raises(GazetteError, match="stopped"):
        p.submit(cs[0], spec_lookup=specs({}), primary=True, on_persisted=lambda f: None)


async def test_stop_gives_up_loudly_after_drain_timeout(
    closed_endpoint: str, aws_dummy_credentials: None, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"s3://nowhere/p/?endpoint={closed_endpoint}&region=us-east-1"
    p = Persister(retry_s=0.1, drain_timeout_s=1.0)
    await p.start()
    c = completed("lost/j", 0, b"precious")
    p.submit(c, spec_lookup=specs({"lost/j": Spec([dead])}), primary=False, on_persisted=lambda f: None)
    waiter = asyncio.ensure_future(p.flush(c.fragment))
    with caplog.at_level(logging.ERROR, logger="gazette.fragment.persister"):
        await p.stop(drain=True)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(c.fragment.content_name in m and "NOT persisted" in m for m in errors)
    with pytest.raises(GazetteError, match="NOT persisted"):
        await waiter


async def test_a_stop_cancelled_mid_drain_still_halts_the_persister(
    closed_endpoint: str, aws_dummy_credentials: None
) -> None:
    """A caller's bound that cancels a draining stop (LocalCluster's, a broker stop's) must not leave the
    scheduler retrying for good: the persister halts and the fragment's waiters are failed."""
    dead = f"s3://nowhere/p/?endpoint={closed_endpoint}&region=us-east-1"
    p = Persister(retry_s=0.1, drain_timeout_s=3600.0)
    await p.start()
    c = completed("cancelled/j", 0, b"precious")
    p.submit(c, spec_lookup=specs({"cancelled/j": Spec([dead])}), primary=False, on_persisted=lambda f: None)
    waiter = asyncio.ensure_future(p.flush(c.fragment))
    stopping = asyncio.ensure_future(p.stop(drain=True))
    await async_wait_for("the drain to start", lambda: p._stopping, DEADLINE_S, POLL_S)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert p._scheduler is not None and p._scheduler.done() and p.pending == 0
    with pytest.raises(GazetteError, match="NOT persisted"):
        await waiter
