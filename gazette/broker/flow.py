"""Append flow control: how fast a journal's primary takes an Append RPC's content from its client.

Owns AppendFlowControl, one per Replica, and the broker-wide rates. Imports nothing of the broker:
the append FSM drives it (`admit`) while it holds the replica's pipeline, so one append at a time
uses it and it needs no lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

# Broker-wide rates, as Gazette's --broker.max-append-rate and --broker.min-append-rate (read when an
# append starts streaming, so a change applies to the next append).
MAX_APPEND_BYTES_PER_S = 0  # lowers every non-zero JournalSpec.max_append_rate; 0: no broker-wide cap
# A client streaming slower than this is aborted; 0: not policed. Gazette's default is 64 KiB/s; ours
# is 0 because a Python process under load pauses for seconds at a time (a notebook kernel, a
# machine running Spark beside it), and a pause of the client or of the broker's own event loop
# would then fail appends that are merely slow. `gazette broker serve --min-append-rate` sets it.
MIN_APPEND_BYTES_PER_S = 0

BURST_MS = 1000  # initial credit, of both the max and the min rate: one second's worth
BANK_FACTOR = 10  # unused credit banks up to this many seconds' worth of max_append_rate
QUANTUM_S = 0.05  # how often a delayed chunk re-checks its credit (Gazette's flow-control quantum)

T = TypeVar("T")
_END: Any = object()


class FlowControlUnderflow(Exception):
    """The client did not sustain the minimum append rate: its append is rolled back."""


def effective_max_rate(journal_rate: int, broker_rate: int | None = None) -> int:
    """The rate an append of a journal with `journal_rate` is held to (bytes/s, 0: unlimited).

    As Gazette's broker: the broker-wide rate (MAX_APPEND_BYTES_PER_S unless given) lowers a
    journal's rate, and does not apply to a journal whose rate is 0 (unlimited), although the
    JournalSpec documentation suggests it would."""
    broker_rate = MAX_APPEND_BYTES_PER_S if broker_rate is None else broker_rate
    if broker_rate and broker_rate < journal_rate:
        return broker_rate
    return journal_rate


class AppendFlowControl:
    """One journal's append flow control. As Gazette's broker (broker/append_flow_control.go) it:

    - throttles: a token bucket of `balance` bytes refilled at `max_rate`, the journal's
      `max_append_rate` (0: unlimited; see `effective_max_rate`). The journal's first append may
      burst one second's worth; unused credit banks up to BANK_FACTOR seconds' worth and carries over
      to later appends. A chunk bigger than the balance waits, as `charge`, until enough credit has
      accrued (a delayed chunk). An append whose resolution is invalidated meanwhile is no longer
      throttled: it is what makes the new route consistent, so it must not be held back.
    - polices: `spent`, the bytes admitted lately (at most one second of `min_rate`), drains at
      MIN_APPEND_BYTES_PER_S while the broker waits for the client's next chunk; a client that lets
      it run dry is aborted (FlowControlUnderflow, the append rolls back), because the pipeline it
      holds is exclusive and contended.

    Differences from Gazette, on purpose: only time spent waiting for the client counts against the
    minimum rate, not time the broker spends forwarding a chunk or withholding one itself (Gazette's
    ticker counts both, so there a journal limited below the minimum rate aborts long appends); a
    minimum rate of 0 disables the policing (Gazette would fail every append at its first tick);
    sub-byte credit carries between ticks (so rates below 20 bytes/s still accrue).

    Times are the integer milliseconds of `clock_ms` (a monotonic clock; injectable for tests);
    `total_chunks` and `delayed_chunks` count the current append's chunks."""

    def __init__(self, clock_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000) -> None:
        self._clock_ms = clock_ms
        self.max_rate = 0
        self.min_rate = 0
        self.balance = 0
        self.spent = 0
        self.charge = 0
        self.last_ms: int | None = None  # None: never used (the first append gets the burst)
        self._carry = 0  # accrued credit below one byte, in thousandths of a byte
        self.total_chunks = 0
        self.delayed_chunks = 0

    # --- the bucket --------------------------------------------------------------------------------
    def reset(self, journal_rate: int) -> None:
        """Starts an append of a journal whose spec says `journal_rate`: the balance carries over
        (plus what accrued since the last append, up to the bank), the minimum-rate slack does not."""
        self.max_rate = effective_max_rate(journal_rate)
        self.min_rate = 0
        self.charge = 0
        if self.last_ms is None:
            self.balance = self.max_rate * BURST_MS // 1000
            self.last_ms = self._clock_ms()
            self._carry = 0
        else:
            self.tick(police=False)
        self.min_rate = max(0, MIN_APPEND_BYTES_PER_S)
        self.spent = self.min_rate * BURST_MS // 1000
        self.total_chunks = self.delayed_chunks = 0

    def tick(self, *, police: bool = True) -> bool:
        """Accrues credit for the time since the last tick and applies it to a waiting chunk; with
        `police`, that time also drains `spent`. True if the client underflowed the minimum rate."""
        now = self._clock_ms()
        assert self.last_ms is not None, "tick before reset"
        if now < self.last_ms:  # an injected clock went back: wait for it to catch up
            return False
        elapsed = now - self.last_ms
        cap = self.max_rate * BANK_FACTOR
        accrued = self.max_rate * elapsed + self._carry
        self.balance += accrued // 1000
        self._carry = accrued % 1000
        if self.balance >= cap:
            self.balance, self._carry = cap, 0
        if police:
            self.spent -= min(self.min_rate * elapsed // 1000, self.spent)
        self.last_ms = now
        self._debit()
        return police and self.min_rate > 0 and self.spent <= 0

    def on_chunk(self, length: int) -> None:
        """A content chunk of `length` bytes arrived: it proceeds once `charge` is back to 0."""
        assert self.charge == 0, "a chunk arrived while the last one still waits for credit"
        self.charge = length
        self._debit()
        if self.charge:
            self.delayed_chunks += 1
        self.total_chunks += 1

    def invalidate(self) -> None:
        """The append's resolution was invalidated: no max rate for the rest of this append."""
        self.max_rate = 0
        self._debit()

    def _debit(self) -> None:
        """Pays what it can of `charge` from `balance` (all of it without a max rate), adding what
        was paid to `spent` (capped at one second of the min rate)."""
        paid = self.charge if self.max_rate == 0 else min(self.balance, self.charge)
        if self.max_rate:
            self.balance -= paid
        self.charge -= paid
        self.spent = min(self.spent + paid, self.min_rate)

    # --- driving an append -------------------------------------------------------------------------
    async def admit(
        self,
        chunks: AsyncIterator[T],
        size: Callable[[T], int],
        *,
        journal_rate: int,
        invalidated: asyncio.Event | None = None,
    ) -> AsyncIterator[T]:
        """`chunks` of one append (each `size(chunk)` bytes), each yielded once the journal's rate
        admits it. Raises FlowControlUnderflow if the client falls below the minimum rate."""
        self.reset(journal_rate)
        pending: asyncio.Task[Any] | None = None
        try:
            while True:
                self._on_invalidated(invalidated)
                self.tick(police=False)  # the broker's own time since the last chunk
                if self.min_rate == 0:
                    chunk = await anext(chunks, _END)
                else:
                    pending = asyncio.ensure_future(anext(chunks, _END))
                    done, _ = await asyncio.wait({pending}, timeout=self.spent / self.min_rate)
                    if not done:
                        # A quantum's grace, as Gazette polices on its ticker: and an event loop that
                        # stalled past the deadline may have the chunk at hand already.
                        done, _ = await asyncio.wait({pending}, timeout=QUANTUM_S)
                    if not done:
                        self.tick()
                        rate = self.min_rate
                        raise FlowControlUnderflow(
                            f"client stream did not sustain the minimum append rate of {rate} bytes/s"
                        )
                    chunk, pending = pending.result(), None
                    self.tick()  # a chunk at hand is no underflow: its bytes refill `spent`
                if chunk is _END:
                    return
                self.on_chunk(size(chunk))
                while self.charge:
                    await asyncio.sleep(QUANTUM_S)
                    self._on_invalidated(invalidated)
                    self.tick(police=False)  # the broker withholds the chunk: not the client's time
                yield chunk
        finally:
            if pending is not None and not pending.done():
                pending.cancel()  # and let the client's stream see it before the append goes on
                await asyncio.wait({pending})

    def _on_invalidated(self, invalidated: asyncio.Event | None) -> None:
        if self.max_rate and invalidated is not None and invalidated.is_set():
            self.invalidate()
