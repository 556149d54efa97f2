"""A broker whose etcd lease is lost announces again under a new lease, even when that new lease is
lost too before its member key is put (found by the chaos scheduler: an etcd pause, then the broker
cut off from etcd while its renewal still waited for its old member key to expire; the renewal task
ended with LeaseLost and the broker stayed up, unannounced, holding no journal, for good)."""

from __future__ import annotations

import gazette.member as member_module
from gazette.allocator.announce import LeaseLost
from gazette.broker.broker import Broker
from gazette.client.loop import default_loop
from gazette.client.sync import Client
from gazette.protocol.spec import JournalSpec
from gazette.testing import wait_for


def test_a_renewal_whose_new_lease_is_lost_before_announcing_tries_again(
    etcd, etcd_root, tmp_path, monkeypatch
) -> None:
    loop = default_loop()
    real_announce = member_module.announce
    calls: list[int] = []

    async def announce(client, key, value, session, **kw):
        calls.append(session.lease_id)
        if len(calls) == 2:  # the renewal's first try: its new lease is lost meanwhile
            raise LeaseLost(f"lease {session.lease_id:x} could not be refreshed within its TTL (test)")
        return await real_announce(client, key, value, session, **kw)

    monkeypatch.setattr(member_module, "announce", announce)
    broker = Broker(etcd.endpoint, root=etcd_root, spool_dir=str(tmp_path), lease_ttl_s=3)
    loop.run(broker.start(), timeout=60)
    try:
        journal = "renewal/part-000"
        with Client(broker.endpoint) as client:
            client.apply_journals([JournalSpec(name=journal, replication=1)])
            wait_for("a first append", lambda: client.append(journal, b"before\n", timeout=5), 30)

            async def lose_lease() -> None:
                broker._on_lease_lost(LeaseLost("lost by the test"))

            loop.run(lose_lease())
            wait_for("the broker to announce again", lambda: len(calls) >= 3 and broker._renewing is None, 60)
            assert len({*calls}) == 3  # the first lease, the lost new one, and another
            res = wait_for(
                "an append after the renewal", lambda: client.append(journal, b"after\n", timeout=5), 60
            )
            assert res.end > res.begin
    finally:
        loop.run(broker.stop(graceful=False), timeout=60)
