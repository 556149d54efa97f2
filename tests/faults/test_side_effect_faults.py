"""Side effects exactly once (issue 18) with real processes: the batch-report example's consumer
stops itself (SIGSTOP, its STOP_AT_ENV test hook) at each phase boundary and is SIGKILLed there, and a
SIGSTOPped zombie's prepare lands after its successor committed. Then: every committed message's
report exists and matches its SHA-1, each event is in exactly one committed report, nothing an
uncommitted attempt staged remains once cleanup ran, and no committed report was removed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest
from faults.harness import log_tails, wait_for

from gazette.consumer import ReplicaCode, ShardInfo
from gazette.consumer.side_effects import PENDING_PREFIX, PHASES
from gazette.examples import reports
from gazette.fragment.stores import get_store
from gazette.testing.zombie import ENTRY_MODULE as ZOMBIE_ENTRY

CLEANUP_INTERVAL_S = 0.5  # the successors look for fenced-out attempts' staged reports this often
CLEAN = {"staged": [], "unreferenced": []}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _stopped_pid(flag: Path) -> int:
    """The pid the test hook wrote once its process reached the phase, once it is stopped."""
    pid = int(
        wait_for(
            f"a consumer to stop itself ({flag.name})", lambda: flag.exists() and flag.read_text().strip(), 90
        )
    )
    wait_for(f"process {pid} to be stopped", lambda: _state(pid) in ("T", "t"))
    return pid


def _registrations(db: str) -> list[tuple[str, str]]:
    """(id, staging) of the registrations committed in the shard's sqlite database."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'gazette_side_effects'").fetchone():
            return []
        return conn.execute("SELECT id, staging FROM gazette_side_effects").fetchall()
    finally:
        conn.close()


def _objects(store_url: str, prefix: str) -> list[str]:
    return [prefix + e.path for e in get_store(store_url).list(prefix)]


def _reported(client) -> int:
    return sum(m["events"] for m in reports.read_index(client))


@pytest.mark.parametrize("phase", PHASES)
def test_a_sigkill_at_each_phase_boundary(make_cluster, etcd_root, tmp_path, monkeypatch, phase: str) -> None:
    """SIGKILL after register, after prepare, after the commit before publish, after publish before
    the ACKs. What the killed attempt left is checked at the boundary, then a new primary runs: it
    publishes a committed attempt's report (idempotently) before appending its ACKs, and cleans up
    an uncommitted attempt's staged report."""
    flag = tmp_path / f"stopped-at-{phase}"
    monkeypatch.setenv(reports.STOP_AT_ENV, f"{phase}:{flag}")  # inherited by the consumer process
    cluster = make_cluster(brokers=1)
    client = cluster.client()
    client.apply_journals(reports.journals())
    cluster.wait_for_routes()
    store_url = f"file://{tmp_path}/reports/"
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    db = os.path.join(db_dir, f"{reports.SHARD_ID}.db")
    app = reports.BatchReports(store_url, db_dir, cleanup_interval_s=CLEANUP_INTERVAL_S)
    group = cluster.run_consumer(app, [reports.shard()], root=f"{etcd_root}/consumers")
    try:
        group.wait_for_primaries()
        reports.publish_events(client, range(20))
        pid = _stopped_pid(flag)
        assert pid == group.pid(0)

        staged = _objects(store_url, PENDING_PREFIX)
        finals = _objects(store_url, reports.REPORTS_PREFIX)
        registered = _registrations(db)
        assert reports.read_index(client) == []  # nothing is committed before the ACKs
        if phase == "registered":
            assert (staged, finals, registered) == ([], [], [])
        elif phase == "prepared":
            assert len(staged) == 1 and (finals, registered) == ([], [])  # staged: invisible under reports/
        elif phase == "committed":
            assert len(staged) == 1 and finals == [] and [s for _, s in registered] == staged
        else:
            assert staged == [] and len(finals) == 1 and len(registered) == 1
            assert finals[0].endswith(f"/{registered[0][0]}.json")
        killed_ids = {p.rsplit("/", 1)[1].removesuffix(".json") for p in staged + finals}

        group.kill(0)  # SIGKILL of the stopped process
        monkeypatch.delenv(reports.STOP_AT_ENV)
        group.restart(0)
        reports.publish_events(client, range(20, 40))
        wait_for("every event to be reported", lambda: _reported(client) == 40, 120)
        index = reports.verify(client, range(40))  # each report exists, matches its SHA-1; events once
        wait_for("cleanup of uncommitted attempts", lambda: reports.leftovers(client, store_url) == CLEAN, 60)
        committed_ids = {m["report"]["path"].rsplit("/", 1)[1].removesuffix(".json") for m in index}
        if phase in ("committed", "published"):  # its transaction committed: its report is published
            assert killed_ids and killed_ids <= committed_ids
        else:  # never committed: its staged report (if prepared) is gone, and nothing refers to it
            assert not killed_ids & committed_ids
        if phase == "prepared":  # removed by the new primary's cleanup (attempt 1 < its fence 2)
            removed = "removed 1 staged side effect(s) of attempts before 2"
            wait_for(
                "the new primary's cleanup log",
                lambda: removed in Path(group.members[0].log_path).read_text(),
            )
        reports.verify(client, range(40))  # no committed report was removed by cleanup
    except BaseException:
        print(log_tails(cluster))
        raise


def _replicas(shards: list[ShardInfo]) -> dict[str, ReplicaCode]:
    return {r.suffix: r.status.code for s in shards for r in s.replicas}


def _placed(shards: list[ShardInfo]) -> bool:
    return sorted(_replicas(shards).values()) == sorted([ReplicaCode.PRIMARY, ReplicaCode.STANDBY])


@pytest.mark.parametrize("store", ["sql", "json"])
def test_a_zombie_whose_prepare_lands_after_its_successor_committed(
    make_cluster, etcd_root, tmp_path, monkeypatch, store: str
) -> None:
    """The primary stops itself right after registering (before preparing) while holding its etcd
    view (a zombie once resumed); its standby is promoted and commits the batch with its own report.
    Resumed, the zombie prepares (its staged report lands after the successor's commit), and its
    commit is refused by the store's fence; the successor's periodic cleanup removes what it staged."""
    json_store = store == "json"
    flag = tmp_path / "zombie"
    monkeypatch.setenv(reports.STOP_AT_ENV, f"registered:{flag}")
    cluster = make_cluster(brokers=1)
    client = cluster.client()
    client.apply_journals(reports.journals(recovery_logs=json_store))
    cluster.wait_for_routes()
    store_url = f"file://{tmp_path}/reports/"
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    app = reports.BatchReports(store_url, db_dir, cleanup_interval_s=CLEANUP_INTERVAL_S)
    spec = reports.shard(hot_standbys=1, hint_prefix=f"{etcd_root}/hints" if json_store else "")
    # Members run through the zombie entry point: a SIGUSR1 makes one a zombie.
    group = cluster.run_consumer(
        app, [spec], processes=2, root=f"{etcd_root}/consumers", entry_module=ZOMBIE_ENTRY
    )
    try:
        codes = _replicas(group.wait_for(_placed, 120, "a PRIMARY and a STANDBY"))
        primary = next(s for s, c in codes.items() if c == ReplicaCode.PRIMARY)
        successor = next(s for s, c in codes.items() if c == ReplicaCode.STANDBY)
        zombie = int(primary.split("-")[1])  # ConsumerGroup suffixes are consumer-<index>-<nonce>
        zombie_log = group.members[zombie].log_path
        os.kill(group.pid(zombie), signal.SIGUSR1)
        wait_for(
            "the primary to hold its etcd view", lambda: "TEST HOOK: holding" in Path(zombie_log).read_text()
        )

        reports.publish_events(client, range(20))
        assert _stopped_pid(flag) == group.pid(zombie)  # registered, not prepared
        group.wait_for(
            lambda shards: _replicas(shards).get(successor) == ReplicaCode.PRIMARY, 120, "a new PRIMARY"
        )
        wait_for("the successor to report every event", lambda: _reported(client) == 20, 120)
        committed = reports.verify(client, range(20))
        assert _objects(store_url, PENDING_PREFIX) == []  # the zombie has not prepared yet

        cluster.resume_consumer(zombie)
        wait_for(
            "the zombie to prepare, then be refused by the fence",
            lambda: (
                "side-effect phase prepared" in (text := Path(zombie_log).read_text())
                and "FencingError" in text
            ),
            60,
        )
        wait_for(
            "cleanup of the zombie's staged report", lambda: reports.leftovers(client, store_url) == CLEAN, 60
        )
        successor_log = group.members[1 - zombie].log_path
        removed = "removed 1 staged side effect(s) of attempts before"
        wait_for("the successor's cleanup log", lambda: removed in Path(successor_log).read_text())
        assert reports.verify(client, range(20)) == committed  # nothing of the zombie's is committed

        reports.publish_events(client, range(20, 30))  # the successor carries on
        wait_for("every event to be reported", lambda: _reported(client) == 30, 120)
        reports.verify(client, range(30))
        assert reports.leftovers(client, store_url) == CLEAN
    except BaseException:
        print(log_tails(cluster))
        raise
