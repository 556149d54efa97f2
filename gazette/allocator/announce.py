"""Member sessions (docs/semantics.md#member-sessions): an etcd lease kept alive, and the member key announced
under it.

`Session` owns the lease and its keep-alive task and reports the lease's loss (callbacks and
`wait_lost`). `announce` puts the member key under the lease, or waits for a predecessor's key (a
crashed process's lease must expire first). `Announcement.update`/`set_exiting` CAS the value on its
ModRevision, keeping the lease. Values are opaque bytes here; the KeySpace decoder gives them meaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aetcd
from aetcd import rpc

from gazette import tunables
from gazette.keyspace.etcd import txn
from gazette.tasks import cancel_and_wait

log = logging.getLogger(__name__)

ANNOUNCE_RETRY_S = 10.0
# A lease is refreshed three times per TTL, so one or two lost refreshes do not lose it.
KEEP_ALIVE_PER_TTL = 3


class LeaseLost(Exception):
    """The session's lease expired, was revoked, or could not be refreshed within its TTL."""


class AnnouncementConflict(Exception):
    """The member key changed or vanished behind the announcement's back (its CAS failed)."""


class Session:
    """An etcd lease of `ttl_s` seconds (as granted) and the task that keeps it alive.

    Create with `await Session.grant(client, ttl_s)`; `close()` stops the keep-alive and revokes the
    lease (so every key under it, the member key and its assignments, goes at once).
    """

    def __init__(self, client: aetcd.Client, lease_id: int, ttl_s: int) -> None:
        self.client = client
        self.lease_id = lease_id
        self.ttl_s = ttl_s
        self.lost_reason: LeaseLost | None = None
        self._lost = asyncio.Event()
        self._callbacks: list[Callable[[LeaseLost], None]] = []
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def grant(cls, client: aetcd.Client, ttl_s: int = tunables.LEASE_TTL_S) -> Session:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
            raise ValueError(f"lease TTL {ttl_s!r} is not a whole number of seconds >= 1")
        lease = await client.lease(ttl_s)
        session = cls(client, int(lease.id), int(lease.ttl))
        session._task = asyncio.create_task(session._keep_alive(), name=f"lease keep-alive {lease.id:x}")
        return session

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def add_lost_callback(self, fn: Callable[[LeaseLost], None]) -> None:
        """`fn(reason)` runs once when the lease is lost (at once if it already is); not on close()."""
        if self.lost_reason is not None:
            fn(self.lost_reason)
        else:
            self._callbacks.append(fn)

    def remove_lost_callback(self, fn: Callable[[LeaseLost], None]) -> None:
        """`fn` no longer runs when the lease is lost (a no-op if it was not added, or already ran)."""
        if fn in self._callbacks:
            self._callbacks.remove(fn)

    async def wait_lost(self) -> LeaseLost:
        """Returns (not raises) the reason once the lease is lost."""
        await self._lost.wait()
        assert self.lost_reason is not None
        return self.lost_reason

    async def close(self, revoke: bool = True) -> None:
        """Stops the keep-alive and, unless the lease is already lost, revokes it. Idempotent."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if revoke and task is not None and not self.lost:
            try:
                await self.client.revoke_lease(self.lease_id)
            except Exception as exc:  # etcd unreachable: the lease expires by itself within its TTL
                log.warning("could not revoke lease %x: %s", self.lease_id, exc)

    async def _keep_alive(self) -> None:
        loop = asyncio.get_running_loop()
        expires_at = loop.time() + self.ttl_s
        interval = self.ttl_s / KEEP_ALIVE_PER_TTL
        while True:
            await asyncio.sleep(max(0.0, min(interval, expires_at - loop.time())))
            sent_at = loop.time()
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancel that races the
                # inner call's completion, and then this loop would outlive Session.close.
                async with asyncio.timeout(interval):
                    reply = await self.client.refresh_lease(self.lease_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd unreachable or slow: retry until the lease must be gone
                if loop.time() >= expires_at:
                    self._set_lost(f"lease {self.lease_id:x} could not be refreshed within its TTL: {exc!r}")
                    return
                log.warning("refreshing lease %x failed (will retry): %r", self.lease_id, exc)
                continue
            if reply is None or reply.TTL <= 0:
                self._set_lost(f"lease {self.lease_id:x} expired or was revoked")
                return
            expires_at = sent_at + reply.TTL

    def declare_lost(self, reason: str) -> None:
        """The owner learned another way that the lease is gone (its key vanished): stop the
        keep-alive and report the loss as if the keep-alive had found it."""
        if self.lost_reason is None:
            if self._task is not None:
                self._task.cancel()
            self._set_lost(reason)

    def _set_lost(self, reason: str) -> None:
        log.error("%s", reason)
        self.lost_reason = LeaseLost(reason)
        self._lost.set()
        for fn in self._callbacks:
            try:
                fn(self.lost_reason)
            except Exception:
                log.exception("lease-lost callback %r failed", fn)
        self._callbacks.clear()


class Announcement:
    """A member key announced under a session's lease; its value changes only by CAS."""

    def __init__(
        self,
        client: aetcd.Client,
        key: str,
        value: bytes,
        revision: int,
        mark_exiting: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.value = value
        self.revision = revision  # the key's ModRevision as we last wrote or found it
        self.mark_exiting = mark_exiting

    async def update(self, value: bytes) -> int:
        """Writes `value` if the key is unchanged since our last write (its lease kept); returns the
        new revision. Raises AnnouncementConflict if it changed or vanished."""
        key = self.key.encode()
        resp = await txn(
            self.client,
            rpc.TxnRequest(
                compare=[
                    rpc.Compare(
                        key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, mod_revision=self.revision
                    )
                ],
                success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, ignore_lease=True))],
            ),
        )
        if not resp.succeeded:
            raise AnnouncementConflict(
                f'member key "{self.key}" was modified or deleted externally '
                f"(expected mod revision {self.revision})"
            )
        self.value, self.revision = value, int(resp.header.revision)
        return self.revision

    async def set_exiting(self) -> int:
        """Marks the member exiting (5.2): its load moves away and its allocator reports the exit."""
        if self.mark_exiting is None:
            raise ValueError(f'announcement of "{self.key}" was made without a mark_exiting function')
        return await self.update(self.mark_exiting(self.value))


async def announce(
    client: aetcd.Client,
    key: str,
    value: bytes,
    session: Session,
    *,
    retry_interval_s: float = ANNOUNCE_RETRY_S,
    mark_exiting: Callable[[bytes], bytes] | None = None,
) -> Announcement:
    """Puts `key` = `value` under the session's lease once the key does not exist.

    A key already under our lease counts as announced (an earlier attempt's reply was lost). A key
    under another lease is retried every `retry_interval_s` until that lease expires; LeaseLost is
    raised if our own lease is lost meanwhile.
    """
    raw_key = key.encode()
    while True:
        if session.lost_reason is not None:
            raise session.lost_reason
        try:
            resp = await txn(
                client,
                rpc.TxnRequest(
                    compare=[
                        rpc.Compare(
                            key=raw_key, result=rpc.Compare.EQUAL, target=rpc.Compare.VERSION, version=0
                        )
                    ],
                    success=[
                        rpc.RequestOp(
                            request_put=rpc.PutRequest(key=raw_key, value=value, lease=session.lease_id)
                        )
                    ],
                    failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=raw_key))],
                ),
            )
        except Exception as exc:
            log.warning('announcing member key "%s" failed (will retry): %r', key, exc)
        else:
            if resp.succeeded:
                return Announcement(client, key, value, int(resp.header.revision), mark_exiting)
            kvs = resp.responses[0].response_range.kvs
            if kvs and kvs[0].lease == session.lease_id:
                return Announcement(client, key, bytes(kvs[0].value), int(kvs[0].mod_revision), mark_exiting)
            holder = f"{kvs[0].lease:x}" if kvs else "?"
            log.warning(
                'member key "%s" exists under lease %s, not ours (%x): a previous process\'s lease must '
                "expire first; retrying in %.1f s",
                key,
                holder,
                session.lease_id,
                retry_interval_s,
            )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(retry_interval_s):
                await session.wait_lost()
