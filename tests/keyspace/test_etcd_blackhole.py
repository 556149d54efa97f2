"""An etcd client whose connection a silent partition killed (packets dropped, no reset) finds out
within seconds and reconnects, instead of waiting out gRPC's 60 s ping timeout while its lease
expires: the chaos soak once lost a broker's renewed lease this way after its primary was isolated."""

from __future__ import annotations

import asyncio
import time

import aetcd
from blackhole import BlackHole

from gazette.keyspace.etcd import connect

BOUND_S = 30.0  # keepalive 10 s + ping timeout 5 s + reconnect, with room


def test_a_silently_cut_etcd_connection_is_replaced_within_seconds(etcd) -> None:
    port = int(etcd.endpoint.rsplit(":", 1)[1])

    async def main() -> float:
        hole = BlackHole(port)
        await hole.start()
        client = connect(f"127.0.0.1:{hole.port}", timeout=BOUND_S)
        try:
            await client.put(b"/blackhole-test/key", b"before")
            hole.cut()  # the open connection goes silent; a new one would get through
            started = time.monotonic()
            while (
                True
            ):  # the call on the dead connection fails (UNAVAILABLE, ping timeout); a retry gets through
                try:
                    got = await asyncio.wait_for(client.get(b"/blackhole-test/key"), BOUND_S + 5)
                    break
                except aetcd.ConnectionFailedError:
                    assert time.monotonic() - started < BOUND_S, "the dead connection was not replaced"
            assert got is not None and got.value == b"before"
            return time.monotonic() - started
        finally:
            await client.close()
            await hole.close()

    assert asyncio.run(main()) < BOUND_S
