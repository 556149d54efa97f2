"""Issue scenario 1: R=3, writers appending continuously with retries and a reader following; SIGKILL
one broker of the route at a random moment, restart it, repeat. Nothing acknowledged is lost, moved,
torn or reordered, and every other copy of a record comes from an attempt whose outcome the writer
never learned. CI runs 3 rounds; `make soak` runs 50.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from faults.harness import (
    create_journal,
    log_tails,
    route_of,
    running_endpoints,
    say,
    wait_for,
    wait_for_full_route,
)
from faults.workload import read_journal, verify

JOURNAL = "faults/kill/rounds"
READ_BACK_DEADLINE_S = 180.0  # a replica persists a fragment only it holds after its 120 s delay


@pytest.mark.parametrize(
    "rounds",
    [
        pytest.param(3, id="ci"),
        pytest.param(50, id="soak", marks=[pytest.mark.soak, pytest.mark.timeout(3600)]),
    ],
)
def test_sigkill_a_route_member_loses_nothing_acknowledged(make_cluster, workloads, rounds: int) -> None:
    seed = int(os.environ.get("GAZETTE_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    cluster = make_cluster(brokers=3)
    create_journal(cluster, JOURNAL)
    endpoints = running_endpoints(cluster)
    work = workloads(JOURNAL, endpoints, writers=2, seed=seed)
    report = [f"seed {seed}"]
    try:
        for n in range(rounds):
            # Some progress first, a different amount each round, so the kill lands at a random moment.
            t0 = time.monotonic()
            wait_for("the writers' progress", lambda t0=t0, k=rng.randint(5, 60): work.acks_after(t0) >= k)
            members, primary = route_of(cluster, JOURNAL)
            victim = rng.choice(members)
            t_kill, before = work.busy_moment()
            cluster.kill_broker(victim)
            down_s = rng.uniform(0.0, 1.0)
            time.sleep(down_s)  # how long it stays down: part of the randomised fault, not a wait
            cluster.restart_broker(victim)
            t_up = time.monotonic()
            wait_for_full_route(cluster, JOURNAL)
            wait_for("an acknowledgement after the restart", lambda t_up=t_up: work.acks_after(t_up) > 0)
            landed = wait_for(
                f"round {n}: the appends in flight at the SIGKILL of broker {victim} to end",
                lambda before=before, t_kill=t_kill: work.ended_after(before, t_kill),
            )
            role = "primary" if victim == primary else "replica"
            say(
                report,
                f"round {n}: SIGKILL {role} broker-{victim}, down {down_s:.2f} s, "
                f"{len(landed)} appends in flight, writers unavailable {work.unavailability(t_kill):.2f} s",
            )
        work.stop_writers()
        content = work.run(read_journal(work._channels, endpoints(), JOURNAL, READ_BACK_DEADLINE_S))
        wait_for("the reader to reach the write head", lambda: len(work.read_bytes) >= len(content), 60)
        verdict = verify(content, work.attempts, bytes(work.read_bytes))
        report.append(
            f"journal {len(content)} bytes, {verdict.records} records, outcomes {work.outcomes()}, "
            f"ambiguous attempts that landed {verdict.ambiguous_landed}"
        )
        print("\n".join(report))
        verdict.assert_ok()
    except BaseException:
        print("\n".join(report))
        print(log_tails(cluster))
        raise
