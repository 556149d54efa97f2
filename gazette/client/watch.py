"""JournalWatch: the current listing of a label selector, kept by the broker's List watch (3.3).

A watch stream sends a snapshot (chunks, then an empty message) whenever the selected journals
change; the watch swaps in each complete snapshot as one immutable tuple, so readers on any thread
see either the old listing or the new one, never a half. Broken streams resume where they left off,
for as long as the watch runs; waiting on it is bounded (CallTimeout naming the broker and the last
error) when a timeout is given, and the first snapshot is always waited for with one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from gazette import tunables
from gazette.auth.tokens import Capability
from gazette.client.aio import AsyncClient, JournalInfo, Route
from gazette.client.append_service import ClientBinding
from gazette.client.sync import Client
from gazette.client.timeouts import CallTrace
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import GazetteError, PeerError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import Status

log = logging.getLogger(__name__)

WATCH_READY_TIMEOUT_S = 30.0
# gRPC codes after which re-opening the watch cannot help.
_FATAL_GRPC_CODES = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED,
                     grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED)  # fmt: skip

Snapshot = tuple[JournalInfo, ...]


class JournalWatch:
    """Watches the journals `selector` lists; `snapshot` is the latest complete listing.

    Starts at construction. From a thread other than the client's loop (a sync `Client`, a
    notebook) the constructor waits for the first snapshot, for at most `ready_timeout_s` (then
    CallTimeout); on the loop, `await watch.ready()`.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        selector: str | LabelSelector | None,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        ready_timeout_s: float = WATCH_READY_TIMEOUT_S,
    ) -> None:
        self._binding = ClientBinding.of(client, loop)
        self.selector = LabelSelector.coerce(selector)
        self.snapshot: Snapshot | None = None
        self.revision = 0  # etcd revision of the snapshot's header
        self.error: GazetteError | None = None
        self._trace = CallTrace(
            "watch of journals", f"matching {str(self.selector)!r}" if str(self.selector) else ""
        )
        self._cond = asyncio.Condition()
        self._task: asyncio.Task | None = None
        if self._binding.on_loop():
            self._start()
        else:
            try:
                self._binding.run(self._start_and_wait(ready_timeout_s), what="starting a journal watch")
            except BaseException:
                self.close()  # nobody else holds this watch: stop its task
                raise

    def __repr__(self) -> str:
        n = "?" if self.snapshot is None else len(self.snapshot)
        return f"JournalWatch({str(self.selector)!r}, journals={n}, revision={self.revision})"

    # --- waiting ---------------------------------------------------------------------------------
    async def ready(self, timeout: float | None = WATCH_READY_TIMEOUT_S) -> Snapshot:
        """The first snapshot, waiting for it if need be (for at most `timeout` seconds)."""
        return await self.wait_for(lambda s: True, timeout)

    async def wait_for(self, predicate: Callable[[Snapshot], bool], timeout: float | None = None) -> Snapshot:
        """Waits until a snapshot satisfies `predicate` and returns it; CallTimeout (a TimeoutError)
        after `timeout` seconds, naming the broker and the last error or status the watch saw."""

        def satisfied() -> bool:
            return self.error is not None or (self.snapshot is not None and predicate(self.snapshot))

        async with self._cond:
            try:
                async with asyncio.timeout(timeout) as bound:
                    await self._cond.wait_for(satisfied)
            except TimeoutError:
                if not bound.expired():
                    raise
                if self.snapshot is not None and not self._trace.detail:
                    self._trace.detail = f"{len(self.snapshot)} journals listed, none satisfying the wait"
                raise self._trace.timeout_error(timeout) from None
        if self.error is not None:
            raise self.error
        assert self.snapshot is not None
        return self.snapshot

    def wait_until(self, predicate: Callable[[Snapshot], bool], timeout: float | None = None) -> Snapshot:
        """`wait_for` for threads other than the client's loop."""
        return self._binding.run(self.wait_for(predicate, timeout), what="JournalWatch.wait_until")

    # --- lifecycle -------------------------------------------------------------------------------
    def _start(self) -> None:
        self._task = self._binding.loop.create_task(self._run(), name=f"journal-watch {self.selector}")

    async def _start_and_wait(self, timeout: float | None) -> None:
        self._start()
        await self.ready(timeout)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def close(self) -> None:
        """`stop()` for threads other than the client's loop."""
        if self._task is not None and not self._binding.loop.is_closed():
            self._binding.run(self.stop(), what="JournalWatch.close")

    # --- the watch -------------------------------------------------------------------------------
    async def _run(self) -> None:
        attempt = 0
        resume: pb.Header | None = None
        while True:
            req = pb.ListRequest(selector=self.selector.to_proto(), watch=True)
            if resume is not None:
                req.watch_resume.CopyFrom(resume)
            stub = self._binding.aio.stub
            call = stub.List(req, metadata=self._binding.aio.call_metadata(Capability.LIST, selector=self.selector))
            self._trace.endpoint = self._binding.aio.endpoint
            building: list[JournalInfo] = []
            header: pb.Header | None = None
            try:
                async for resp in call:
                    # Only a snapshot's first message has a header with an etcd revision (never 0):
                    # Gazette's Header is non-nullable, so its other messages carry an empty one.
                    if resp.header.etcd.revision or resp.status != Status.OK:  # a snapshot's first message
                        if resp.status != Status.OK:
                            raise GazetteError(Status(resp.status), f"listing {self.selector} failed")
                        header, building = resp.header, []
                    elif not resp.journals:  # the empty message ending a snapshot
                        if header is not None:
                            await self._publish(tuple(building), header)
                            resume, attempt = header, 0
                            self._trace.saw(Status.OK)
                        continue
                    building.extend(_journal_info(j) for j in resp.journals)
            except grpc.aio.AioRpcError as exc:
                if exc.code() in _FATAL_GRPC_CODES:
                    await self._fail(
                        PeerError(f"watch of {self.selector}: {exc.code().name}: {exc.details()}",
                                  grpc_code=exc.code().name)
                    )  # fmt: skip
                    return
                self._trace.saw_rpc_error(exc)
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    self._binding.aio.failover(stub)  # re-open at the next broker, if there is one
                if attempt % 10 == 0:
                    log.warning("watch of %s broke, re-opening: %s", self.selector, exc.details())
            except GazetteError as exc:
                await self._fail(exc)
                return
            except Exception as exc:  # e.g. the client's channel was closed under the watch
                await self._fail(PeerError(f"watch of {self.selector} failed: {exc!r}"))
                return
            finally:
                call.cancel()
            await asyncio.sleep(tunables.CLIENT_RETRY_BACKOFF_S[min(attempt, len(tunables.CLIENT_RETRY_BACKOFF_S) - 1)])
            attempt += 1

    async def _publish(self, snapshot: Snapshot, header: pb.Header) -> None:
        async with self._cond:
            self.snapshot = snapshot
            self.revision = header.etcd.revision
            self._cond.notify_all()

    async def _fail(self, error: GazetteError) -> None:
        log.warning("watch of %s stopped: %s", self.selector, error)
        async with self._cond:
            self.error = error
            self._cond.notify_all()


def _journal_info(j: pb.ListResponse.Journal) -> JournalInfo:
    return JournalInfo(JournalSpec.from_proto(j.spec), Route.from_proto(j.route), j.mod_revision)
