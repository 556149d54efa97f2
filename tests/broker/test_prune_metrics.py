"""Retention pruning (`gazette journals prune`, reference 2.5) and the broker's Prometheus metrics
(reference 10.1), against an in-process broker with a file:// store.

Prune decisions take an explicit `now`, so no outcome depends on the wall clock.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gazette.client.prune import prune_journals
from gazette.fragment.fragment import Fragment
from gazette.local.cluster import LocalCluster

HOUR_S = 3600.0


def _store_dir(cluster: LocalCluster) -> Path:
    assert cluster.store.startswith("file://")
    return Path(cluster.store[len("file://") :])


def _file_of(cluster: LocalCluster, f: Fragment) -> Path:
    return _store_dir(cluster) / f.content_path


def _persist(client, journal: str, chunks: list[bytes]) -> Fragment:
    for chunk in chunks:
        client.append(journal, chunk)
    frag = client.flush(journal)
    assert frag is not None and frag.backing_store and frag.mod_time
    return frag


def _key(f: Fragment) -> tuple[str, int, int]:
    return (f.journal, f.begin, f.end)


# --- prune ---------------------------------------------------------------------------------------------
def test_prune_removes_persisted_fragments_at_least_retention_old(cluster: LocalCluster, client) -> None:
    journal = "prune/retained/one"
    client.apply_journals([cluster.journal_spec(journal, retention="1h")])
    _persist(client, journal, [b"a" * 10, b"b" * 10])
    _persist(client, journal, [b"c" * 7])
    client.append(journal, b"still spooled\n")
    listed = client.list_fragments(journal)
    persisted = [f for f in listed if f.backing_store]
    spooled = [f for f in listed if not f.backing_store]
    assert min(f.begin for f in persisted) == 0 and max(f.end for f in persisted) == 27
    assert [(f.begin, f.end) for f in spooled] == [(27, 41)]
    files = {_key(f): _file_of(cluster, f) for f in persisted}
    assert all(p.is_file() for p in files.values())
    newest = max(f.mod_time for f in persisted)

    # A second short of retention for the newest fragment: it stays, dry run or not.
    young = newest + HOUR_S - 1
    would = prune_journals(client, f"name={journal}", dry_run=True, now=young)
    assert {_key(f) for f in would} == {_key(f) for f in persisted if young - f.mod_time >= HOUR_S}
    assert all(f.mod_time != newest for f in would)

    # Old enough: a dry run names every persisted fragment and removes nothing.
    now = newest + HOUR_S  # now - mod_time >= retention: the boundary itself prunes
    would = prune_journals(client, f"name={journal}", dry_run=True, now=now)
    assert sorted(map(_key, would)) == sorted(map(_key, persisted))
    assert all(p.is_file() for p in files.values())
    assert client.read_all(journal) == b"a" * 10 + b"b" * 10 + b"c" * 7 + b"still spooled\n"

    # The real thing deletes exactly those files; the spooled fragment is never touched.
    removed = prune_journals(client, f"name={journal}", now=now)
    assert sorted(map(_key, removed)) == sorted(map(_key, persisted))
    assert not any(p.exists() for p in files.values())
    assert all(_key(f) not in map(_key, removed) for f in spooled)
    assert b"".join(c.content for c in client.read(journal, 27)) == b"still spooled\n"


def test_prune_decides_each_fragment_by_its_own_age(cluster: LocalCluster, client) -> None:
    journal = "prune/ages/one"
    client.apply_journals([cluster.journal_spec(journal, retention="1h")])
    for n in (3, 4, 5):
        _persist(client, journal, [b"x" * n])
    persisted = client.list_fragments(journal)
    assert len(persisted) == 3 and all(f.backing_store for f in persisted)
    oldest = min(f.mod_time for f in persisted)
    now = oldest + HOUR_S  # only fragments persisted in the oldest second are old enough
    expected = {_key(f) for f in persisted if now - f.mod_time >= HOUR_S}
    assert expected  # at least the oldest
    removed = prune_journals(client, f"name={journal}", now=now)
    assert {_key(f) for f in removed} == expected
    for f in persisted:
        assert _file_of(cluster, f).exists() == (_key(f) not in expected)


@pytest.mark.parametrize("retention", [0, -1])
def test_retention_zero_or_negative_never_prunes(cluster: LocalCluster, client, retention: float) -> None:
    journal = "prune/forever/one"
    client.apply_journals([cluster.journal_spec(journal, retention=retention)])
    frag = _persist(client, journal, [b"keep me\n"])
    far_future = frag.mod_time + 1000 * 365 * 24 * HOUR_S
    assert prune_journals(client, f"name={journal}", now=far_future) == []
    assert prune_journals(client, "", dry_run=True, now=far_future) == []
    assert _file_of(cluster, frag).is_file()
    assert client.read_all(journal) == b"keep me\n"


def test_prune_only_touches_journals_matching_the_selector(cluster: LocalCluster, client) -> None:
    a, b = "prune/select/a", "prune/select/b"
    client.apply_journals([cluster.journal_spec(a, retention="1h"), cluster.journal_spec(b, retention="1h")])
    fa, fb = _persist(client, a, [b"aaa\n"]), _persist(client, b, [b"bbb\n"])
    now = max(fa.mod_time, fb.mod_time) + HOUR_S
    removed = prune_journals(client, f"name={a}", now=now)
    assert [_key(f) for f in removed] == [_key(fa)]
    assert not _file_of(cluster, fa).exists() and _file_of(cluster, fb).is_file()


# --- metrics ------------------------------------------------------------------------------------------
def _samples(cluster: LocalCluster) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(cluster.brokers[0].metrics, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_spool_commit_metrics_count_appends(cluster: LocalCluster, client) -> None:
    journal = "metrics/commits/one"
    client.apply_journals([cluster.journal_spec(journal)])
    before = _samples(cluster)
    assert _value(before, "gazette_spool_commits_total") == 0
    sizes = [5, 17, 1, 300, 42]
    for n in sizes:
        client.append(journal, b"m" * n)
    client.append(journal, b"")  # an empty append commits no bytes and is not a spool commit

    after = _samples(cluster)
    assert _value(after, "gazette_spool_commits_total") == len(sizes)
    assert _value(after, "gazette_spool_commit_bytes_total") == sum(sizes)
    assert _value(after, "gazette_write_head", journal=journal) == sum(sizes)
    assert _value(after, "gazette_spool_rollbacks_total") == 0


def test_rpc_counters_use_the_reference_names(cluster: LocalCluster, client) -> None:
    journal = "metrics/rpcs/one"
    client.apply_journals([cluster.journal_spec(journal)])
    cluster.wait_for_routes([journal])  # else the first append may be answered "no primary" and retried
    appends = 4
    for i in range(appends):
        client.append(journal, b"rpc %d\n" % i)
    with urllib.request.urlopen(cluster.brokers[0].metrics, timeout=10) as resp:
        lines = resp.read().decode().splitlines()
    # Counters under Gazette's exact names (no "_total" added), as Gazette's own brokers expose them.
    assert "# TYPE gazette_journal_server_started_totals counter" in lines
    assert "# TYPE gazette_journal_server_completed_totals counter" in lines
    assert f'gazette_journal_server_started_totals{{operation="Append"}} {float(appends)}' in lines
    assert (
        f'gazette_journal_server_completed_totals{{operation="Append",status="OK"}} {float(appends)}' in lines
    )


def test_spool_persisted_metric_counts_flushes(cluster: LocalCluster, client) -> None:
    journal = "metrics/persisted/one"
    client.apply_journals([cluster.journal_spec(journal)])
    for i in range(2):
        client.append(journal, b"flush %d\n" % i)
        assert client.flush(journal) is not None
    samples = _samples(cluster)
    assert _value(samples, "gazette_spool_persisted_total") == 2
    assert _value(samples, "gazette_spool_completed_total") == 2
