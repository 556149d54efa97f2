"""Task ownership helpers shared by every layer (standard library only): whoever starts a task
cancels and awaits it in one place, without swallowing a cancellation of its own caller."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancels `task` and waits for it to end; our own cancellation of it ends here, while a
    cancellation of the caller propagates."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def first_of(
    awaitable: Awaitable[T],
    event: asyncio.Event | None,
    timeout: float | None = None,
    *,
    give_back: Callable[[Any], object] | None = None,
) -> tuple[bool, T | None]:
    """Awaits `awaitable` unless `event` is set first (or `timeout` seconds pass): (True, its
    result) or (False, None).

    `give_back`: where the awaitable takes something that must not be lost (a queue slot's only
    pipeline or spool), the result that completed just as the caller was cancelled is handed to
    it (e.g. `slot.put_nowait`) instead of being dropped with the cancellation."""
    get = asyncio.ensure_future(awaitable)
    if event is None and timeout is None and give_back is None:
        return True, await get
    waits: set[asyncio.Future] = {get}
    if event is not None:
        waits.add(asyncio.ensure_future(event.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        if give_back is not None and get.done() and not get.cancelled() and get.exception() is None:
            give_back(get.result())
        raise
    finally:
        for w in waits - {get}:
            w.cancel()
        if not get.done():
            get.cancel()
    if get.done() and not get.cancelled():
        return True, get.result()
    return False, None


def dump_tasks(out=None) -> None:
    """Writes every task of the running loop with the stack it is suspended at (to stderr by
    default): what a process waits on when it seems stuck. Servers call it on SIGUSR2."""
    out = out or sys.stderr
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    print(f"--- {len(tasks)} asyncio tasks", file=out)
    for task in tasks:
        print(f"task {task.get_name()}: {task.get_coro()!r}", file=out)
        try:
            task.print_stack(limit=12, file=out)
        except Exception as exc:  # e.g. a Cython coroutine (gRPC's) has frames without line numbers
            print(f"  (no stack: {exc!r})", file=out)
    out.flush()


class TaskGroup:
    """The background tasks one owner starts and must not outlive (a broker's pipeline shutdowns and
    replica stops, a consumer's shard stops): `spawn` starts one, `stop` waits for all of them for a
    bounded time, then cancels and names the ones still running, so a peer that never answers cannot
    keep its owner from stopping."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro, name: str) -> asyncio.Task:  # type: ignore[no-untyped-def]
        """Starts `coro` as a task of this group, named `name` (the name a late stop reports)."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def stop(self, timeout_s: float) -> list[str]:
        """Waits up to `timeout_s` for every task of the group (also those spawned meanwhile), then
        cancels the rest; returns the names of the cancelled ones (empty when all ended). The task
        calling it is never waited for (after a lease loss, a stop may itself be a task of the group)."""
        me = asyncio.current_task()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        cancelled: list[str] = []
        while pending := [t for t in self._tasks if t is not me]:
            _done, late = await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
            if late and loop.time() >= deadline:
                cancelled += sorted(t.get_name() for t in late)
                for t in late:
                    t.cancel()
                await asyncio.gather(*late, return_exceptions=True)
        return cancelled
