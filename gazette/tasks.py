"""Task ownership helpers shared by every layer (standard library only): whoever starts a task
cancels and awaits it in one place, without swallowing a cancellation of its own caller."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

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


async def first_of(awaitable: Awaitable[T], event: asyncio.Event | None) -> tuple[bool, T | None]:
    """Awaits `awaitable` unless `event` is set first: (True, its result) or (False, None)."""
    get = asyncio.ensure_future(awaitable)
    if event is None:
        return True, await get
    wait = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({get, wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        wait.cancel()
        if not get.done():
            get.cancel()
    if get.done() and not get.cancelled():
        return True, get.result()
    return False, None
