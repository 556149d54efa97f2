"""Mappings against a real broker's List watch: FNV-1a vectors, modulo and rendezvous placement as
the hashes say, random spread, following a journal added to the selector, empty listings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gazette.client.aio import AsyncClient
from gazette.local.cluster import LocalCluster
from gazette.message.mapping import (
    EmptyListingError,
    ModuloMapping,
    RandomMapping,
    RendezvousMapping,
    fnv1a32,
    key_bytes,
)
from gazette.protocol.errors import GazetteError

WAIT_S = 60.0
NDJSON = "application/x-ndjson"
SELECTOR = "app.gazette.dev/message-type=Word"
WORDS = [f"word-{i}" for i in range(200)] + ["", "é", "hello", "日本"]


@pytest.fixture
def cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    os.makedirs(tmp_path / "store", exist_ok=True)
    with LocalCluster(brokers=1, mode="inprocess", store=f"file://{tmp_path}/store/", etcd=etcd.endpoint,
                      root=etcd_root, data_dir=str(tmp_path / "data")) as c:  # fmt: skip
        yield c


@pytest.fixture
def client(cluster):
    return cluster.client()


def _word_journal(cluster, name: str, content_type: str = NDJSON):
    return cluster.journal_spec(
        name,
        labels={"app.gazette.dev/message-type": "Word", "content-type": content_type},
        fragment_length=1 << 20,
    )


@pytest.fixture
def words(cluster, client) -> list[str]:
    """Four Word journals (created out of order) plus one journal the selector does not match."""
    names = [f"examples/words/part-{i:03d}" for i in (2, 0, 3, 1)]
    client.apply_journals([_word_journal(cluster, n) for n in names])
    client.apply_journals([cluster.journal_spec("examples/other/x", labels={"content-type": NDJSON})])
    return sorted(names)


def test_fnv1a32_vectors():
    # From the FNV reference test suite (and Go's hash/fnv golden values for FNV-1a 32).
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"ab") == 0x4D2505CA
    assert fnv1a32(b"abc") == 0x1A47E90B
    assert fnv1a32(b"foobar") == 0xBF9CF968


def test_key_bytes():
    assert key_bytes("é") == b"\xc3\xa9"
    assert key_bytes(b"\x00\xff") == b"\x00\xff"
    assert key_bytes(bytearray(b"ab")) == b"ab"
    assert key_bytes(42) == b"42"
    with pytest.raises(TypeError, match="float"):
        key_bytes(1.5)


def test_modulo_and_rendezvous_follow_the_hash(client, words):
    modulo = ModuloMapping(client, SELECTOR, key=lambda m: m["word"])
    rendezvous = RendezvousMapping(client, SELECTOR, key=lambda m: m["word"])
    try:
        assert modulo.journals() == rendezvous.journals() == tuple(words)  # listing order: by name
        for w in WORDS:
            h = fnv1a32(w.encode())
            assert modulo({"word": w}) == (words[h % 4], NDJSON)
            best = max(words, key=lambda name: h ^ fnv1a32(name.encode()))
            assert rendezvous({"word": w}) == (best, NDJSON)
        assert len({modulo({"word": w})[0] for w in WORDS}) == 4
    finally:
        modulo.close()
        rendezvous.close()


def test_random_mapping_spreads(client, words):
    mapping = RandomMapping(client, SELECTOR)
    try:
        picks = [mapping(None) for _ in range(400)]
        assert {j for j, _ in picks} == set(words) and {ct for _, ct in picks} == {NDJSON}
    finally:
        mapping.close()


def test_mappings_follow_a_journal_added_to_the_selector(cluster, client, words):
    modulo = ModuloMapping(client, SELECTOR, key=str)
    rendezvous = RendezvousMapping(client, SELECTOR, key=str)
    try:
        before = {w: rendezvous(w)[0] for w in WORDS}
        added = "examples/words/part-004"
        client.apply_journals([_word_journal(cluster, added, content_type="application/x-protobuf-fixed")])
        for m in (modulo, rendezvous):
            m.wait_for_journals(lambda names: added in names, WAIT_S)
        now = sorted([*words, added])
        assert modulo.journals() == tuple(now)
        for w in WORDS:
            assert modulo(w)[0] == now[fnv1a32(w.encode()) % 5]
            # Rendezvous moves a key only to the new journal.
            assert rendezvous(w)[0] in (before[w], added)
        moved = [w for w in WORDS if rendezvous(w)[0] == added]
        assert moved and rendezvous(moved[0]) == (added, "application/x-protobuf-fixed")

        client.delete_journals([added])
        modulo.wait_for_journals(lambda names: added not in names, WAIT_S)
        assert all(modulo(w)[0] == words[fnv1a32(w.encode()) % 4] for w in WORDS)
    finally:
        modulo.close()
        rendezvous.close()


def test_empty_listing_names_the_selector(client, words):
    mapping = ModuloMapping(client, "app.gazette.dev/message-type=Nothing", key=str)
    try:
        with pytest.raises(EmptyListingError, match="app.gazette.dev/message-type=Nothing"):
            mapping("x")
    finally:
        mapping.close()


def test_bad_selector_is_reported(client):
    with pytest.raises(GazetteError, match="selector|expected"):
        ModuloMapping(client, "a in (", key=str)


async def test_async_mapping_waits_for_its_first_listing(cluster, words):
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        mapping = ModuloMapping(aio, SELECTOR, key=str)
        try:
            with pytest.raises(GazetteError, match="ready"):
                mapping("x")  # the watch has not delivered anything yet
            await mapping.ready()
            assert mapping("hello") == (words[fnv1a32(b"hello") % 4], NDJSON)
        finally:
            await mapping.aclose()
