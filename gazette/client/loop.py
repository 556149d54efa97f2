"""A background asyncio loop thread: how the sync facade runs the async core from plain code and
from Jupyter (whose own loop is already running). grpc.aio objects are bound to the loop that made
them, so every object the facade creates lives on this one loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "gazette-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the loop thread and waits for its result (re-raising its exception)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop thread (use await instead)")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drives an async iterator living on the loop from a synchronous for-loop."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await anext(agen)
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                ok, item = self.run(step())
                if not ok:
                    return
                yield item  # type: ignore[misc]
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and not self.loop.is_closed():
                try:
                    self.run(aclose(), timeout=10)
                except Exception:
                    pass

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)


_default: LoopThread | None = None
_default_lock = threading.Lock()


def default_loop() -> LoopThread:
    """The process-wide facade loop, started on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LoopThread()
        return _default
