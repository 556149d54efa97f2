"""ConsumerGroup: N in-process consumers of one application, driven from plain (sync) code.

What `LocalCluster.run_consumer` returns: it applies the shard specs, starts `processes` Consumer
members on the facade's loop thread, and stops (gracefully or as a crash), restarts or adds members.
Subprocess members are not implemented yet; every member here shares this process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from gazette.client.loop import LoopThread, default_loop
from gazette.consumer.application import Application
from gazette.consumer.consumer import Consumer, ShardInfo, apply_shards, list_shards
from gazette.consumer.spec import ShardSpec
from gazette.consumer.status import ReplicaCode
from gazette.consumer.transaction import Hooks
from gazette.keyspace.etcd import connect
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.05


class ConsumerGroup:
    """Members `0..processes-1` of one consumer application, each a `Consumer` on `loop`."""

    def __init__(
        self,
        app: Application,
        *,
        etcd: str,
        broker: str,
        root: str,
        processes: int = 1,
        loop: LoopThread | None = None,
        lease_ttl_s: int = 5,
        shard_limit: int = 1024,
        zones: tuple[str, ...] = ("local",),
        hooks: Hooks | None = None,
        exit_drain_s: float = 15.0,
    ) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise GazetteError(Status.OK, f"run_consumer needs processes >= 1 (got {processes!r})")
        if not isinstance(app, Application):
            raise GazetteError(Status.OK, f"{app!r} is not an instance of gazette.consumer.Application")
        self.app = app
        self.etcd = etcd
        self.broker = broker
        self.root = root
        self.lease_ttl_s = lease_ttl_s
        self.shard_limit = shard_limit
        self.zones = zones
        self.hooks = hooks or Hooks()
        self.exit_drain_s = exit_drain_s
        self._loop = loop or default_loop()
        self._n = processes
        self.consumers: list[Consumer | None] = []

    # ---- shards

    def apply(self, shards: Iterable[ShardSpec], deletes: Iterable[str] = ()) -> int:
        """Writes shard specs (and deletes shard ids); returns the etcd revision."""
        specs, gone = list(shards), list(deletes)

        async def run() -> int:
            client = connect(self.etcd)
            try:
                return await apply_shards(client, self.root, specs, gone)
            finally:
                await client.close()

        return self._loop.run(run(), timeout=START_TIMEOUT_S)

    def list_shards(self) -> list[ShardInfo]:
        async def run() -> list[ShardInfo]:
            client = connect(self.etcd)
            try:
                return await list_shards(client, self.root)
            finally:
                await client.close()

        return self._loop.run(run(), timeout=START_TIMEOUT_S)

    def wait_for(
        self, predicate: Callable[[list[ShardInfo]], bool], timeout: float = 60.0, what: str = ""
    ) -> list[ShardInfo]:
        """Polls `list_shards()` until `predicate` holds; raises TimeoutError with the last listing."""
        deadline = time.monotonic() + timeout
        while True:
            shards = self.list_shards()
            if predicate(shards):
                return shards
            if time.monotonic() > deadline:
                listing = {s.spec.id: [(r.suffix, r.slot, str(r.status)) for r in s.replicas] for s in shards}
                raise TimeoutError(f"waited {timeout:.0f} s for {what or predicate!r}; shards: {listing}")
            time.sleep(POLL_INTERVAL_S)

    def wait_for_primaries(self, timeout: float = 60.0) -> list[ShardInfo]:
        """Waits until every enabled shard has a PRIMARY replica."""

        def ready(shards: list[ShardInfo]) -> bool:
            return all(
                s.spec.disable or (s.primary is not None and s.primary.status.code == ReplicaCode.PRIMARY)
                for s in shards
            )

        return self.wait_for(ready, timeout, "every shard to have a PRIMARY")

    # ---- members

    def start(self, shards: Iterable[ShardSpec] = ()) -> ConsumerGroup:
        specs = list(shards)
        if specs:
            self.apply(specs)
        for _ in range(self._n):
            self.add()
        return self

    def add(self) -> int:
        """Starts one more member; returns its index."""
        i = len(self.consumers)
        self.consumers.append(None)
        self.restart(i)
        return i

    def restart(self, i: int) -> None:
        """Starts member `i` anew (a new suffix: a crashed member's lease may still hold the old one)."""
        self._index(i)
        if self.consumers[i] is not None:
            self.stop(i)
        consumer = Consumer(
            self.app, self.etcd, self.broker, root=self.root, zone=self.zones[i % len(self.zones)],
            suffix=f"consumer-{i}-{time.monotonic_ns() % 1_000_000_000:09d}", shard_limit=self.shard_limit,
            lease_ttl_s=self.lease_ttl_s, hooks=self.hooks, exit_drain_s=self.exit_drain_s,
        )  # fmt: skip
        self._loop.run(_started(consumer), timeout=START_TIMEOUT_S)
        self.consumers[i] = consumer

    def stop(self, i: int, graceful: bool = True) -> None:
        """Stops member `i`: gracefully (its shards move first), or as a crash (`graceful=False`)."""
        self._index(i)
        consumer, self.consumers[i] = self.consumers[i], None
        if consumer is not None:
            self._loop.run(consumer.stop(graceful=graceful), timeout=STOP_TIMEOUT_S)

    def kill(self, i: int) -> None:
        """A crash of member `i`: nothing drains, its lease expires after `lease_ttl_s`."""
        self.stop(i, graceful=False)

    def close(self) -> None:
        """Stops every member at once (so none waits to hand its shards to another exiting one)."""
        consumers = [c for c in self.consumers if c is not None]
        self.consumers = [None] * len(self.consumers)
        if consumers:
            self._loop.run(_stop_all(consumers), timeout=STOP_TIMEOUT_S)

    def _index(self, i: int) -> None:
        if not 0 <= i < len(self.consumers):
            raise GazetteError(
                Status.OK, f"no consumer {i} (the group has members 0..{len(self.consumers) - 1})"
            )

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _started(consumer: Consumer) -> Consumer:
    return await consumer.start()


async def _stop_all(consumers: list[Consumer]) -> None:
    await asyncio.gather(*(c.stop(graceful=True) for c in consumers), return_exceptions=True)
