"""Issue scenario 3: SIGSTOP a journal's primary until its lease expires, let the cluster move on
(a new route, appends acknowledged by the new primary), SIGCONT it, and append through it at once,
before its KeySpace catches up: both an append stream opened before the pause and a new one sent
just after SIGCONT fail, and readers of the new route never see a byte of either.
"""

from __future__ import annotations

import time

from faults.harness import (
    LEASE_TTL_S,
    create_journal,
    log_tails,
    route_of,
    running_endpoints,
    wait_for,
    wait_for_full_route,
)
from faults.workload import ACKED, read_journal, record, verify

JOURNAL = "faults/stale/primary"


def test_primary_paused_past_its_lease_cannot_append_after_resuming(make_cluster, workloads) -> None:
    cluster = make_cluster(brokers=4)  # R=3 of 4: the cluster can move on without the paused one
    create_journal(cluster, JOURNAL)
    paused: set[int] = set()
    endpoints = running_endpoints(cluster, paused)
    work = workloads(JOURNAL, endpoints, writers=2, seed=3)
    report = []
    try:
        wait_for("the writers' progress", lambda: work.acks_after(0) >= 20)
        members, old_primary = route_of(cluster, JOURNAL)
        stale = cluster.brokers[old_primary].endpoint
        held_parts = [record("h", 0, 0, i, 3, 200) for i in range(3)]
        held, held_done = work.held_append(stale, "h", 0, held_parts, hold_at=1)
        assert held.holding.wait(30), "the held append never got to its pause"
        before = work.inflight_keys()

        paused.add(old_primary)
        t_pause = time.monotonic()
        cluster.pause_broker(old_primary)
        try:
            # Its lease expires (TTL 5 s) and the allocator gives the journal a route without it.
            wait_for_full_route(cluster, JOURNAL, paused, deadline_s=LEASE_TTL_S * 6)
            t_moved = time.monotonic()
            wait_for("the new primary to acknowledge appends", lambda: work.acks_after(t_moved) >= 5)
        finally:
            cluster.resume_broker(old_primary)
            # At once, before the resumed broker's KeySpace catches up: finish the held stream and
            # send a new append through the same channel, neither allowed to proxy.
            fresh_parts = [record("f", 0, 0, 0, 1, 200)]
            fresh, fresh_done = work.held_append(stale, "f", 0, fresh_parts, hold_at=-1, timeout_s=30)
            held.release()
        t_resume = time.monotonic()
        held_done.result(timeout=150)
        fresh_done.result(timeout=60)
        for a in (held.attempt, fresh.attempt):
            assert a.outcome != ACKED, f"the stale primary acknowledged {a.key} at [{a.begin}, {a.end})"
            report.append(f"append {a.writer} through the resumed old primary: {a.outcome} ({a.detail})")
        assert held.attempt.key in before and held.attempt.ended > t_resume
        assert work.ended_after(before, t_pause), "the pause landed with no append in flight"
        report.append(
            f"writers unavailable {work.unavailability(t_pause):.2f} s across the pause of the primary"
        )

        new_route = [cluster.brokers[m].endpoint for m in route_of(cluster, JOURNAL, paused)[0]]
        work.stop_writers()
        content = work.run(read_journal(work._channels, new_route, JOURNAL, 180.0))
        wait_for("the reader to reach the write head", lambda: len(work.read_bytes) >= len(content), 60)
        for marker in (b"\nh:", b"\nf:"):
            assert marker not in b"\n" + content, f"readers of the new route see {marker!r} records"
        verdict = verify(content, work.attempts, bytes(work.read_bytes))
        verdict.assert_ok()
        report.append(f"journal {len(content)} bytes, {verdict.records} records, outcomes {work.outcomes()}")
        print("\n".join(report))
    except BaseException:
        print("\n".join(report))
        print(log_tails(cluster))
        raise
