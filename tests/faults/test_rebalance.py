"""Issue scenario 5: under load, a broker joins and another exits gracefully (SIGTERM: it announces
it is exiting and waits for the allocator to move its journals away). Journals settle on full,
consistent routes (every assignment advertises the synced route), and no client append fails: each
writer is the AsyncClient, with its own retries, and gives up at the first append that raises.
"""

from __future__ import annotations

import time

from faults.harness import (
    create_journal,
    log_tails,
    route_consistent,
    route_of,
    say,
    wait_for,
)
from faults.workload import FAILED, read_journal, verify

# Four R=3 journals on three brokers: 12 replicas, 4 a broker. A fourth broker's fair share is 3,
# so the allocator moves replicas to it; the exiting broker's go to the other three.
JOURNALS = tuple(f"faults/rebalance/{i}" for i in range(4))
STAYS, EXITS = 0, 1  # clients talk to broker 0 (their service address); broker 1 exits


def test_join_and_graceful_exit_under_load_fail_no_append(make_cluster, workloads) -> None:
    cluster = make_cluster(brokers=3)
    for j in JOURNALS:
        create_journal(cluster, j)
    stays = cluster.brokers[STAYS].endpoint
    works = [
        workloads(j, lambda: [stays], writers=1, seed=6 + i, client=True) for i, j in enumerate(JOURNALS)
    ]
    report: list[str] = []

    def settled(exclude: set[int]) -> bool:
        for j in JOURNALS:
            members, primary = route_of(cluster, j)
            if primary < 0 or len(members) != 3 or set(members) & exclude or not route_consistent(cluster, j):
                return False
        return True

    try:
        wait_for("the writers' progress", lambda: all(w.acks_after(0) >= 20 for w in works))
        t_join, before = works[0].busy_moment()
        before |= set().union(*(w.inflight_keys() for w in works[1:]))
        joined = cluster.add_broker()
        wait_for(
            "the new broker to take a share of the journals",
            lambda: sum(joined in route_of(cluster, j)[0] for j in JOURNALS) >= 2 and settled(set()),
        )
        t_exit = time.monotonic()
        say(report, f"broker-{joined} joined; routes settled in {t_exit - t_join:.1f} s")
        cluster.stop_broker(EXITS)  # returns once the broker process exited
        t_gone = time.monotonic()
        wait_for("routes without the exited broker", lambda: settled({EXITS}))
        t_settled = time.monotonic()
        say(
            report,
            f"broker-{EXITS} exited gracefully in {t_gone - t_exit:.1f} s; routes settled {t_settled - t_gone:.1f} s later",
        )
        for w in works:
            # A client append that failed ends its writer: that is reported below, not waited out here.
            wait_for(
                "acknowledgements after the exit",
                lambda w=w: w.acks_after(t_settled) >= 5 or FAILED in w.outcomes(),
            )
        wait_for(
            "the appends in flight at the join to end",
            lambda: any(w.ended_after(before, t_join) for w in works),
        )
        for j, w in zip(JOURNALS, works, strict=True):
            failed = [a for a in w.attempts if a.outcome == FAILED]
            assert not failed, f"client appends to {j} failed: {[(a.key, a.detail) for a in failed[:3]]}"
            say(
                report,
                f"{j}: longest wait for an acknowledgement {w.longest_gap(t_join, t_exit):.2f} s across the join, "
                f"{w.longest_gap(t_exit, t_settled):.2f} s across the graceful exit",
            )
        for j, w in zip(JOURNALS, works, strict=True):
            w.stop_writers()
            members, _ = route_of(cluster, j)
            content = w.run(
                read_journal(w._channels, [cluster.brokers[m].endpoint for m in members], j, 180.0)
            )
            wait_for(
                "the reader to reach the write head", lambda w=w, n=len(content): len(w.read_bytes) >= n, 60
            )
            verdict = verify(content, w.attempts, bytes(w.read_bytes), retried_inside=True)
            say(
                report,
                f"{j}: {len(content)} bytes, {verdict.records} records, {verdict.duplicates} duplicates, outcomes {w.outcomes()}",
            )
            verdict.assert_ok()
    except BaseException:
        print(log_tails(cluster))
        raise
