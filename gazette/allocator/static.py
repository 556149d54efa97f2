"""StaticAssigner: until the max-flow allocator lands, gives each journal one primary assignment.

Every journal without a live assignment gets slot 0 on the live, non-exiting broker with the fewest
journals, written under that broker's lease (so it vanishes with the broker); assignments of deleted
journals are removed. Resolution reads only the keys, so the allocator replaces this unchanged.
"""

from __future__ import annotations

import asyncio
import logging

import aetcd

from gazette.keyspace import layout
from gazette.keyspace.keyspace import KeySpace
from gazette.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class StaticAssigner:
    def __init__(self, etcd: aetcd.Client, ks: KeySpace) -> None:
        self.etcd = etcd
        self.ks = ks
        self.root = ks.root
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.ks.add_observer(self._wake.set)
        self._wake.set()
        self._task = asyncio.create_task(self._loop(), name="static assigner")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.converge()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd unavailable or a raced txn: the next change retries
                log.warning("static assignment failed: %s", exc)
                await asyncio.sleep(0.5)
                self._wake.set()

    async def converge(self) -> None:
        tx = self.etcd.transactions
        members = {}
        for kv in self.ks.prefixed(layout.members_prefix(self.root)):
            mk = layout.parse_member_key(self.root, kv.key)
            if not kv.decoded.exiting:
                members[(mk.zone, mk.suffix)] = kv
        load = dict.fromkeys(members, 0)
        by_item: dict[str, list[layout.AssignmentKey]] = {}
        for kv in self.ks.prefixed(layout.assign_prefix(self.root)):
            ak = layout.parse_assignment_key(self.root, kv.key)
            by_item.setdefault(ak.item, []).append(ak)
            if (ak.zone, ak.suffix) in load:
                load[(ak.zone, ak.suffix)] += 1
        items_prefix = layout.items_prefix(self.root)
        items = {kv.key[len(items_prefix):] for kv in self.ks.prefixed(items_prefix)}

        for item, keys in by_item.items():
            if item not in items:
                for ak in keys:
                    key = layout.assignment_key(self.root, ak.item, ak.zone, ak.suffix, ak.slot).encode()
                    await self.etcd.delete(key)
        for item in sorted(items):
            if by_item.get(item) or not members:
                continue
            target = min(load, key=lambda m: (load[m], m))
            member_kv = members[target]
            akey = layout.assignment_key(self.root, item, target[0], target[1], 0).encode()
            mkey = member_kv.key.encode()
            ok, _ = await self.etcd.transaction(
                compare=[tx.mod(mkey) == member_kv.mod_revision, tx.create(akey) == 0],
                success=[tx.put(akey, b"", lease=member_kv.lease)],
                failure=[],
            )
            if ok:
                load[target] += 1
