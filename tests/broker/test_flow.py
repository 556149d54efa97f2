"""Append flow control (gazette/broker/flow.py) on an injected clock: the token bucket's burst, bank,
carry-over between appends, delayed chunks, invalidation and minimum-rate policing. No sleeping."""

from __future__ import annotations

import asyncio

import pytest

from gazette.broker import flow
from gazette.broker.flow import BANK_FACTOR, AppendFlowControl, FlowControlUnderflow, effective_max_rate


class FakeClock:
    def __init__(self, ms: int = 12345) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


@pytest.fixture(autouse=True)
def min_rate(monkeypatch):
    monkeypatch.setattr(flow, "MIN_APPEND_BYTES_PER_S", 1000)  # one byte per millisecond
    monkeypatch.setattr(flow, "MAX_APPEND_BYTES_PER_S", 0)


def _fc(rate: int = 10_000) -> tuple[AppendFlowControl, FakeClock]:
    clock = FakeClock()
    fc = AppendFlowControl(clock)
    fc.reset(rate)
    return fc, clock


def test_burst_then_chunks_wait_for_credit_and_policing_underflows():
    fc, clock = _fc()  # 10 bytes per millisecond
    assert (fc.max_rate, fc.balance, fc.min_rate, fc.spent, fc.charge) == (10_000, 10_000, 1000, 1000, 0)

    fc.on_chunk(10_000 - 20)  # within the one-second burst: proceeds
    assert (fc.balance, fc.spent, fc.charge) == (20, 1000, 0)
    fc.on_chunk(40)  # 20 short: waits
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 20)
    clock.advance(1)
    assert not fc.tick()
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 10)
    # A long wait for credit (a late tick): the charge is paid from what accrued, and no underflow.
    clock.advance(100_000)
    assert not fc.tick()
    assert (fc.balance, fc.spent, fc.charge) == (10_000 * BANK_FACTOR - 10, 10, 0)
    fc.on_chunk(40)  # the bank covers it
    assert (fc.balance, fc.spent, fc.charge) == (10_000 * BANK_FACTOR - 50, 50, 0)
    clock.advance(51)  # the client sends nothing for longer than `spent` allows
    assert fc.tick()
    assert (fc.balance, fc.spent, fc.charge) == (10_000 * BANK_FACTOR, 0, 0)
    assert (fc.total_chunks, fc.delayed_chunks) == (3, 1)


def test_a_chunk_bigger_than_the_balance_proceeds_once_enough_accrued():
    fc, clock = _fc(rate=1000)  # the same as the minimum rate
    fc.on_chunk(1000 * 11)
    for i in range(10):
        assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 1000 * (10 - i))
        clock.advance(1000)
        assert not fc.tick()
    assert (fc.balance, fc.spent, fc.charge) == (0, 1000, 0)
    assert (fc.total_chunks, fc.delayed_chunks) == (1, 1)


def test_the_balance_carries_over_to_the_next_append():
    fc, clock = _fc()
    fc.on_chunk(5000)
    clock.advance(100)
    assert not fc.tick()
    assert (fc.balance, fc.spent) == (6000, 900)
    fc.on_chunk(5000)
    assert (fc.balance, fc.spent, fc.charge, fc.total_chunks, fc.delayed_chunks) == (1000, 1000, 0, 2, 0)
    clock.advance(150)
    fc.reset(10_000)  # the next append, 150 ms later: its balance accrued meanwhile; no fresh burst
    assert (fc.balance, fc.spent, fc.total_chunks) == (2500, 1000, 0)
    clock.advance(3600_000)  # idle for an hour: the bank caps what accrues
    fc.reset(10_000)
    assert fc.balance == 10_000 * BANK_FACTOR


def test_invalidation_lifts_the_max_rate_for_the_rest_of_the_append():
    fc, _ = _fc()
    fc.invalidate()
    fc.on_chunk(100_000)
    assert (fc.max_rate, fc.charge, fc.delayed_chunks) == (0, 0, 0)

    fc, _ = _fc()
    fc.on_chunk(100_000)
    assert fc.charge == 90_000
    fc.invalidate()  # a waiting chunk proceeds at once
    assert (fc.balance, fc.charge, fc.delayed_chunks) == (0, 0, 1)


def test_unlimited_journal_never_waits():
    fc, clock = _fc(rate=0)
    for _ in range(5):
        fc.on_chunk(1 << 30)
        assert fc.charge == 0
        clock.advance(1)
        assert not fc.tick()
    assert (fc.balance, fc.delayed_chunks, fc.total_chunks) == (0, 0, 5)


def test_small_rates_accrue_through_short_ticks():
    fc, clock = _fc(rate=10)  # 10 bytes/s: half a byte per 50 ms tick
    fc.on_chunk(10)  # the burst
    fc.on_chunk(3)
    for _ in range(5):
        clock.advance(50)
        fc.tick(police=False)
    assert fc.charge == 1  # 2.5 bytes accrued over 250 ms, two whole bytes paid
    clock.advance(50)
    fc.tick(police=False)
    assert fc.charge == 0


def test_unpoliced_time_does_not_drain_spent_and_min_rate_zero_disables_policing(monkeypatch):
    fc, clock = _fc()
    clock.advance(10_000)
    assert not fc.tick(police=False)  # the broker's own time (forwarding, or withholding a chunk)
    assert fc.spent == 1000
    monkeypatch.setattr(flow, "MIN_APPEND_BYTES_PER_S", 0)
    fc.reset(10_000)
    clock.advance(10_000)
    assert not fc.tick()
    assert fc.spent == 0


def test_a_clock_going_back_waits_for_it_to_catch_up():
    fc, clock = _fc()
    fc.on_chunk(10_010)
    clock.advance(-500)
    assert not fc.tick()
    assert fc.charge == 10
    clock.advance(501)
    assert not fc.tick()
    assert fc.charge == 0


def test_broker_wide_rate_lowers_a_journal_rate(monkeypatch):
    assert effective_max_rate(500, 100) == 100
    assert effective_max_rate(50, 100) == 50
    assert effective_max_rate(500, 0) == 500
    assert effective_max_rate(0, 100) == 0  # as Gazette: an unlimited journal stays unlimited
    monkeypatch.setattr(flow, "MAX_APPEND_BYTES_PER_S", 2000)
    fc, _ = _fc(rate=10_000)
    assert (fc.max_rate, fc.balance) == (2000, 2000)


async def _chunks(*sizes: int, then_stall: asyncio.Event | None = None):
    for n in sizes:
        yield b"x" * n
    if then_stall is not None:
        await then_stall.wait()


def test_admit_yields_every_chunk_and_counts_them():
    fc = AppendFlowControl()

    async def run() -> list[int]:
        return [len(c) async for c in fc.admit(_chunks(3, 0, 5), len, journal_rate=0)]

    assert asyncio.run(run()) == [3, 0, 5]
    assert (fc.total_chunks, fc.delayed_chunks) == (3, 0)


def test_admit_aborts_a_client_that_stalls(monkeypatch):
    monkeypatch.setattr(flow, "MIN_APPEND_BYTES_PER_S", 10_000)  # 10 KB of slack: a 1 s deadline
    fc = AppendFlowControl()
    got: list[int] = []

    async def run() -> None:
        stall = asyncio.Event()  # never set: the client sends one chunk, then nothing
        async for c in fc.admit(_chunks(7, then_stall=stall), len, journal_rate=0):
            got.append(len(c))

    with pytest.raises(FlowControlUnderflow, match="minimum append rate of 10000 bytes/s"):
        asyncio.run(run())
    assert got == [7]
