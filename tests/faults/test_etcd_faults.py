"""Issue scenario 4: etcd restarted under load (SIGTERM, same data and ports) and paused (SIGSTOP)
for longer than the brokers' lease TTL. Brokers recover (their KeySpaces follow etcd again: a journal
created afterwards gets a route and takes appends) and no acknowledged append is lost.
Never SIGKILL: etcd 3.5.0-3.5.2 can lose committed data when killed under load.
"""

from __future__ import annotations

import time

from faults.harness import (
    LEASE_TTL_S,
    create_journal,
    log_tails,
    running_endpoints,
    say,
    wait_for,
    wait_for_full_route,
)
from faults.workload import read_journal, verify

from gazette.local.cluster import LocalCluster

PAUSE_S = LEASE_TTL_S + 3  # longer than the lease TTL


def _recovered(
    cluster: LocalCluster, work, journal: str, probe: str, t_back: float, deadline_s: float = 60.0
) -> None:
    """The brokers' KeySpaces follow etcd again (a journal created now gets a full route and takes
    appends) and the writers are acknowledged again."""
    create_journal(cluster, probe)
    wait_for(f"an append to {probe}", lambda: cluster.client().append(probe, b"probe\n"))
    wait_for("acknowledgements after the fault", lambda: work.acks_after(t_back) >= 5, deadline_s)
    wait_for_full_route(cluster, journal)


def _check_journal(work, endpoints, journal: str, report: list[str]) -> None:
    work.stop_writers()
    content = work.run(read_journal(work._channels, endpoints(), journal, 180.0))
    wait_for("the reader to reach the write head", lambda: len(work.read_bytes) >= len(content), 60)
    verdict = verify(content, work.attempts, bytes(work.read_bytes))
    say(report, f"journal {len(content)} bytes, {verdict.records} records, outcomes {work.outcomes()}")
    verdict.assert_ok()


def test_etcd_restart_under_load_loses_nothing_acknowledged(make_cluster, workloads) -> None:
    cluster = make_cluster(brokers=3, own_etcd=True)
    journal = "faults/etcd/restart"
    create_journal(cluster, journal)
    endpoints = running_endpoints(cluster)
    work = workloads(journal, endpoints, writers=2, seed=4)
    report: list[str] = []
    try:
        wait_for("the writers' progress", lambda: work.acks_after(0) >= 20)
        t_fault, before = work.busy_moment()
        cluster.embedded_etcd.restart()  # SIGTERM, then the same ports and data directory
        t_back = time.monotonic()
        _recovered(cluster, work, journal, "faults/etcd/restart-probe", t_back)
        wait_for(
            "the appends in flight at the etcd restart to end", lambda: work.ended_after(before, t_fault)
        )
        say(
            report,
            f"etcd restart ({t_back - t_fault:.1f} s): writers unavailable {work.unavailability(t_fault):.2f} s",
        )
        _check_journal(work, endpoints, journal, report)
    except BaseException:
        print(log_tails(cluster))
        raise


def test_etcd_paused_past_the_lease_ttl_loses_nothing_acknowledged(make_cluster, workloads) -> None:
    cluster = make_cluster(brokers=3, own_etcd=True)
    journal = "faults/etcd/pause"
    create_journal(cluster, journal)
    endpoints = running_endpoints(cluster)
    work = workloads(journal, endpoints, writers=2, seed=5)
    report: list[str] = []
    try:
        wait_for("the writers' progress", lambda: work.acks_after(0) >= 20)
        t_fault, before = work.busy_moment()
        etcd = cluster.embedded_etcd
        etcd.pause()
        try:
            time.sleep(PAUSE_S)  # the fault itself: etcd hung past every lease's TTL
        finally:
            etcd.resume()
        t_back = time.monotonic()
        # Brokers announce again under a new lease and keep their replicated spools; one that
        # exited anyway (it should not) is restarted, as its supervisor would.
        wait_for(
            "each broker to serve or exit",
            lambda: all(h.proc.poll() is not None or h.endpoint for h in cluster.brokers),
        )
        exited = [h.index for h in cluster.brokers if not h.running]
        for i in exited:
            cluster.restart_broker(i)
        assert not exited, f"brokers {exited} exited after losing their lease instead of announcing again"
        say(report, f"etcd paused {t_back - t_fault:.1f} s")
        _recovered(cluster, work, journal, "faults/etcd/pause-probe", t_back, deadline_s=30.0)
        wait_for("the appends in flight at the etcd pause to end", lambda: work.ended_after(before, t_fault))
        say(report, f"writers unavailable {work.unavailability(t_fault):.2f} s")
        _check_journal(work, endpoints, journal, report)
    except BaseException:
        print(log_tails(cluster))
        raise
