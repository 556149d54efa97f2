"""KeySpace: a decoded in-memory mirror of the etcd keys under one root, kept current by a watch.

Imports only aetcd (its raw gRPC stubs, for response headers and whole watch responses). The invariant
(docs/semantics.md#revisions-and-the-keyspace): `revision` is the greatest ModRevision of any change applied
under the root, a delete included, never the etcd cluster revision, so revisions are comparable across
processes on one root.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aetcd
import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from gazette.tasks import cancel_and_wait

log = logging.getLogger(__name__)

LOAD_PAGE_KEYS = 1000
RANGE_TIMEOUT_S = 10.0
# Retry delays of a failed watch or load, by consecutive failure: quick at first (a restarted etcd is
# back within a second), then at most one attempt a second.
WATCH_RETRY_BACKOFF_S = (0.0, 0.05, 0.25, 0.5, 1.0)
# Rebuilding the sorted key list is cheaper than this many single insertions or removals.
_RESORT_THRESHOLD = 64
# Watches end with an error instead of hanging when the member loses its raft leader.
_REQUIRE_LEADER = (("hasleader", "true"),)
_PUT = rpc.Event.EventType.Value("PUT")


@dataclass(slots=True)
class KeyValue:
    """One mirrored key: its value as decoded, and etcd's revisions and lease."""

    key: str
    decoded: Any
    create_revision: int
    mod_revision: int
    lease: int


class _Compacted(Exception):
    pass


class _ClusterChanged(Exception):
    pass


class KeySpace:
    """Mirror of `<root>/...`: `load` ranges it once, `start` also watches it until `stop`.

    A watch batch is applied in one step (no await inside), then observers run, then waiters wake, so
    observers and readers never see a half-applied batch. Undecodable values are logged and absent.
    """

    def __init__(
        self,
        client: aetcd.Client,
        root: str,
        decode: Callable[[str, bytes], Any],
        watch_apply_delay_s: float = 0.03,
    ) -> None:
        if not root.startswith("/") or root == "/" or posixpath.normpath(root) != root:
            raise ValueError(
                f'key space root "{root}" is not a clean absolute path (like "/gazette/cluster")'
            )
        self.client = client
        self.root = root
        self.watch_apply_delay_s = watch_apply_delay_s
        self.revision = 0
        self.cluster_id = 0
        self.member_id = 0
        self.raft_term = 0
        self._decode = decode
        # Keys under root+"/" only: a root "/a" must not mirror "/ab/...".
        self._prefix = (root + "/").encode()
        self._kvs: dict[str, KeyValue] = {}
        self._keys: list[str] = []  # sorted keys of _kvs
        self._observers: list[Callable[[], None]] = []
        self._changed = asyncio.Event()
        self._loaded = False
        self._next_revision = 0  # the watch resumes here: everything before it has been received
        self._failures = 0  # consecutive failed watch attempts
        self._task: asyncio.Task[None] | None = None
        self._withheld: list[Any] | None = None  # watch responses held back (a test hook)

    def hold(self) -> None:
        """Test hook: stop applying watch updates (they are kept, in order, until `release`), so
        this process keeps acting on a stale view, as a partitioned or stalled member would."""
        if self._withheld is None:
            self._withheld = []

    def release(self) -> None:
        """Applies what `hold` kept back and resumes applying updates."""
        withheld, self._withheld = self._withheld, None
        if withheld:
            self._apply(withheld)

    # ---- reading

    def get(self, key: str) -> KeyValue | None:
        return self._kvs.get(key)

    def prefixed(self, prefix: str) -> list[KeyValue]:
        """Every KeyValue whose key starts with `prefix`, in key order."""
        keys, out = self._keys, []
        for i in range(bisect.bisect_left(keys, prefix), len(keys)):
            if not keys[i].startswith(prefix):
                break
            out.append(self._kvs[keys[i]])
        return out

    def __len__(self) -> int:
        return len(self._kvs)

    def add_observer(self, fn: Callable[[], None]) -> None:
        """`fn()` runs after each load and each applied batch, before waiters wake; it must not block."""
        self._observers.append(fn)

    async def wait_for_revision(self, revision: int, timeout: float | None = None) -> None:
        """Returns once `self.revision >= revision`; raises TimeoutError (asyncio's) after `timeout` s.

        `revision` should be that of a change under the root (a transaction's header revision, or the
        header revision of another KeySpace of this root): a bare cluster revision, bumped by a write
        elsewhere, is only reached once a later change under the root is observed.
        """
        if self.revision >= revision:
            return
        async with asyncio.timeout(timeout):
            while self.revision < revision:
                await self._changed.wait()

    async def wait_for_change(self) -> None:
        """Returns after the next load or applied watch batch."""
        await self._changed.wait()

    # ---- lifecycle

    async def load(self) -> None:
        """Ranges the root at one revision and replaces the mirror with it."""
        if self._task is not None:
            raise RuntimeError(f'key space "{self.root}" is being watched; load() would race the watch')
        await self._initial_load()

    async def start(self) -> None:
        """Loads (unless `load` already ran) and watches from the loaded revision + 1 in an owned task."""
        if self._task is not None:
            raise RuntimeError(f'key space "{self.root}" is already started')
        if not self._loaded:
            await self._initial_load()
        self._task = asyncio.create_task(self._run(), name=f"keyspace watch {self.root}")

    async def stop(self) -> None:
        """Cancels the watch task and waits for it to end. Idempotent."""
        task, self._task = self._task, None
        await cancel_and_wait(task)

    # ---- load

    async def _initial_load(self) -> None:
        try:
            await self._load(keep_revision=True)
        except grpc.aio.AioRpcError as exc:
            raise aetcd.ClientError(
                f'loading key space "{self.root}" from etcd failed: {_describe(exc)}'
            ) from exc

    async def _load(self, keep_revision: bool) -> None:
        await self.client.connect()
        kvs: list[Any] = []
        start, end = self._prefix, prefix_range_end(self._prefix)
        at_revision, header = 0, None
        while True:
            resp = await self.client.kvstub.Range(
                rpc.RangeRequest(key=start, range_end=end, limit=LOAD_PAGE_KEYS, revision=at_revision),
                timeout=RANGE_TIMEOUT_S,
                metadata=self.client.metadata,
            )
            if header is None:
                header = resp.header
                at_revision = header.revision
            kvs.extend(resp.kvs)
            if not resp.more or not resp.kvs:
                break
            start = resp.kvs[-1].key + b"\x00"
        assert header is not None

        mirror: dict[str, KeyValue] = {}
        keys: list[str] = []
        max_mod = 0
        for raw_kv in kvs:  # already in key order
            max_mod = max(max_mod, raw_kv.mod_revision)
            key = self._decode_key(raw_kv.key)
            kv = None if key is None else self._decode_kv(key, raw_kv)
            if kv is not None:
                mirror[kv.key] = kv
                keys.append(kv.key)

        self._kvs, self._keys = mirror, keys
        self.revision = max(self.revision, max_mod) if keep_revision else max_mod
        self.cluster_id, self.member_id, self.raft_term = (
            header.cluster_id,
            header.member_id,
            header.raft_term,
        )
        self._next_revision = header.revision + 1
        self._loaded = True
        self._notify()

    def _decode_kv(self, key: str, raw_kv: Any) -> KeyValue | None:
        try:
            decoded = self._decode(key, raw_kv.value)
        except Exception as exc:
            log.warning('key space %s: skipping key "%s": its value does not decode: %s', self.root, key, exc)
            return None
        return KeyValue(key, decoded, raw_kv.create_revision, raw_kv.mod_revision, raw_kv.lease)

    def _decode_key(self, raw_key: bytes) -> str | None:
        try:
            return raw_key.decode()
        except UnicodeDecodeError:
            log.warning("key space %s: skipping key %r: it is not UTF-8", self.root, raw_key)
            return None

    # ---- watch

    async def _run(self) -> None:
        reload: bool | None = None  # None: no reload; else whether the revision must not regress
        while True:
            try:
                if reload is not None:
                    await self._load(keep_revision=reload)
                    reload = None
                await self._watch()
            except _Compacted as exc:
                log.warning("key space %s: %s; re-loading", self.root, exc)
                reload = True
            except _ClusterChanged as exc:
                log.error("key space %s: %s; re-loading, revisions restart", self.root, exc)
                reload = False
            except Exception as exc:  # etcd down, restarting or paused: retry, never give up
                level = logging.WARNING if self._failures == 0 else logging.DEBUG
                log.log(
                    level,
                    "key space %s: watch failed (attempt %d, will retry): %s",
                    self.root,
                    self._failures + 1,
                    _describe(exc),
                )
            await asyncio.sleep(WATCH_RETRY_BACKOFF_S[min(self._failures, len(WATCH_RETRY_BACKOFF_S) - 1)])
            self._failures += 1

    async def _watch(self) -> None:
        """One watch stream from `_next_revision`; raises when the stream ends."""
        await self.client.connect()
        call = rpc.WatchStub(self.client.channel).Watch(
            metadata=(self.client.metadata or ()) + _REQUIRE_LEADER
        )
        loop = asyncio.get_running_loop()
        pending: list[Any] = []
        apply_at = 0.0
        read: asyncio.Future[Any] | None = None
        try:
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=self._prefix,
                        range_end=prefix_range_end(self._prefix),
                        start_revision=self._next_revision,
                        progress_notify=True,
                    )
                )
            )
            while True:
                if read is None:
                    read = asyncio.ensure_future(call.read())
                timeout = max(0.0, apply_at - loop.time()) if pending else None
                done, _ = await asyncio.wait((read,), timeout=timeout)
                if not done:
                    self._apply(pending)
                    pending = []
                    continue
                resp, read = read.result(), None
                if resp is grpc.aio.EOF:
                    raise RuntimeError("etcd closed the watch stream")
                self._check_response(resp)
                if self._failures:
                    log.info(
                        "key space %s: watch resumed after %d failed attempts", self.root, self._failures
                    )
                    self._failures = 0
                if resp.events:
                    # Events are whole revisions even when etcd splits a catch-up into several
                    # responses, whose header then runs ahead: resume after the last event.
                    self._next_revision = resp.events[-1].kv.mod_revision + 1
                    if not pending:
                        apply_at = loop.time() + self.watch_apply_delay_s
                    pending.append(resp)
                elif not resp.created:
                    # A progress notification: nothing under the root changed up to its revision.
                    self._next_revision = max(self._next_revision, resp.header.revision + 1)
        finally:
            if read is not None:
                read.cancel()
            call.cancel()
            if read is not None:
                await asyncio.wait((read,))
                if not read.cancelled():
                    read.exception()  # retrieved, so it is not reported as never retrieved
            if pending:
                self._apply(pending)

    def _check_response(self, resp: Any) -> None:
        if resp.compact_revision:
            raise _Compacted(
                f"watch revision {self._next_revision} was compacted (etcd keeps "
                f"revisions from {resp.compact_revision})"
            )
        if resp.canceled:
            raise RuntimeError(f"etcd canceled the watch: {resp.cancel_reason or 'no reason given'}")
        cluster_id = resp.header.cluster_id
        if self.cluster_id and cluster_id and cluster_id != self.cluster_id:
            raise _ClusterChanged(f"etcd cluster id changed from {self.cluster_id} to {cluster_id}")

    def _apply(self, responses: list[Any]) -> None:
        """Applies watch responses in order, then notifies; no await, so the batch is atomic."""
        if self._withheld is not None:
            self._withheld.extend(responses)
            return
        kvs, keys = self._kvs, self._keys
        revision = self.revision
        added: list[str] = []
        removed: set[str] = set()
        for resp in responses:
            for event in resp.events:
                raw_kv = event.kv
                revision = max(revision, raw_kv.mod_revision)
                key = self._decode_key(raw_kv.key)
                if key is None:
                    continue
                kv = self._decode_kv(key, raw_kv) if event.type == _PUT else None
                if kv is None:
                    # A delete, or a value that no longer decodes: either way the key is absent.
                    if kvs.pop(key, None) is not None:
                        removed.add(key)
                else:
                    if kvs.get(key) is None:
                        added.append(key)
                    kvs[key] = kv
        if added or removed:
            # A key may be added and removed (or the reverse) within one batch; trust `kvs`.
            if len(added) + len(removed) > _RESORT_THRESHOLD:
                self._keys = sorted(kvs)
            else:
                for key in removed:
                    i = bisect.bisect_left(keys, key)
                    if i < len(keys) and keys[i] == key:
                        del keys[i]
                for key in added:
                    i = bisect.bisect_left(keys, key)
                    if (i == len(keys) or keys[i] != key) and key in kvs:
                        keys.insert(i, key)
        header = responses[-1].header
        self.member_id, self.raft_term = header.member_id, header.raft_term
        self.cluster_id = header.cluster_id or self.cluster_id
        self.revision = revision
        self._notify()

    def _notify(self) -> None:
        for fn in list(self._observers):
            try:
                fn()
            except Exception:
                log.exception("key space %s: observer %r failed", self.root, fn)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, rpc.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"
