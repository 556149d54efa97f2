"""Issue scenario 2: SIGKILL the primary in the middle of a streaming append. The client learns an
error (or a success), and readers never see part of that append: its bytes are all there, once and
whole, or none of them are (and since its commit message was never sent, none of them are).
"""

from __future__ import annotations

import time

from faults.harness import (
    create_journal,
    log_tails,
    route_of,
    running_endpoints,
    spool_file_sizes,
    wait_for,
    wait_for_full_route,
)
from faults.workload import ACKED, read_journal, record, verify

JOURNAL = "faults/kill/mid-append"
PART_BYTES = 64 * 1024
PARTS = 16
HOLD_AT = 12  # the stream pauses after 12 of its 16 content messages: 768 KiB sent, no commit
SPOOLED_AT_REPLICAS = 512 * 1024


def test_sigkill_primary_mid_streaming_append_is_all_or_nothing(make_cluster, workloads) -> None:
    cluster = make_cluster(brokers=3)
    create_journal(cluster, JOURNAL)
    endpoints = running_endpoints(cluster)
    work = workloads(JOURNAL, endpoints, writers=1, seed=2)
    report = []
    try:
        wait_for("the writer's progress", lambda: work.acks_after(0) >= 20)
        members, primary = route_of(cluster, JOURNAL)
        replicas = [m for m in members if m != primary]
        parts = [record("s", 0, 0, i, PARTS, PART_BYTES - 32) for i in range(PARTS)]
        held, done = work.held_append(cluster.brokers[primary].endpoint, "s", 0, parts, HOLD_AT)
        assert held.holding.wait(30), "the streaming append never got to its pause"

        def spooled_everywhere() -> bool:
            # The primary forwards content to its peers before spooling it: once both replicas'
            # spool files hold most of what was sent, the append is truly in the middle of replicating.
            return all(
                max(spool_file_sizes(cluster.brokers[r].pid), default=0) >= SPOOLED_AT_REPLICAS
                for r in replicas
            )

        wait_for("the replicas to spool the streamed content", spooled_everywhere)
        before = work.inflight_keys()
        t_kill = time.monotonic()
        cluster.kill_broker(primary)
        held.release()
        done.result(timeout=60)
        a = held.attempt
        assert a.outcome != ACKED, f"an append whose commit was never sent was acknowledged: {a}"
        report.append(f"streaming append to the killed primary ended {a.outcome}: {a.detail}")
        assert before, "no background append was in flight when the primary was killed"

        cluster.restart_broker(primary)
        t_up = time.monotonic()
        wait_for_full_route(cluster, JOURNAL)
        wait_for("an acknowledgement after the restart", lambda: work.acks_after(t_up) > 0)
        landed = work.ended_after(before | {a.key}, t_kill)
        assert landed, "the SIGKILL landed with no append in flight"
        report.append(
            f"writer unavailable {work.unavailability(t_kill):.2f} s across the SIGKILL of the primary"
        )

        work.stop_writers()
        content = work.run(read_journal(work._channels, endpoints(), JOURNAL, 180.0))
        wait_for("the reader to reach the write head", lambda: len(work.read_bytes) >= len(content), 60)
        verdict = verify(content, work.attempts, bytes(work.read_bytes))
        verdict.assert_ok()
        assert b"\ns:" not in b"\n" + content, "bytes of the uncommitted streaming append are readable"
        report.append(f"journal {len(content)} bytes, {verdict.records} records, outcomes {work.outcomes()}")
        print("\n".join(report))
    except BaseException:
        print("\n".join(report))
        print(log_tails(cluster))
        raise
