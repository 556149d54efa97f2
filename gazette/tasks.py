"""Task ownership helpers shared by every layer (standard library only): whoever starts a task
cancels and awaits it in one place, without swallowing a cancellation of its own caller."""

from __future__ import annotations

import asyncio


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
