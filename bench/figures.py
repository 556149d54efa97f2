"""The figures of this release, their limits and targets, and how a set of runs reduces to one row.

Each figure keeps one sample per run. Its value is the median of the samples; its ratio is the median
of per-run ratios to the limit measured in the same run, written so that higher is better for us
(ours / limit for rates, limit / ours for latencies).
"""

from __future__ import annotations

import dataclasses
import statistics


class PeerUnavailable(RuntimeError):
    """A peer cannot run here (not installed or built, or would not start); the reason is the message.
    `python -m bench` skips that peer's part with this note instead of failing."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A goal from the issue: on the ratio (`ratio >= bound`) or on the value (`value <= bound`)."""

    on: str  # "ratio" or "value"
    bound: float
    text: str

    def met(self, value: float, ratio: float | None) -> bool | None:
        if self.on == "ratio":
            return None if ratio is None else ratio >= self.bound
        return value <= self.bound


@dataclasses.dataclass
class Figure:
    key: str
    name: str
    unit: str
    rate: bool  # True: higher is better (MB/s); False: lower is better (ms)
    limit: str | None = None  # key of the limit figure measured in the same runs
    target: Target | None = None
    samples: list[float] = dataclasses.field(default_factory=list)

    @property
    def is_limit(self) -> bool:
        return self.limit is None

    @property
    def value(self) -> float:
        return statistics.median(self.samples)

    def ratios(self, limit: Figure) -> list[float]:
        pairs = zip(self.samples, limit.samples, strict=True)
        return [ours / peer if self.rate else peer / ours for ours, peer in pairs]


APPEND_TARGET = Target("ratio", 0.60, "≥ 0.60 of raw")
LATENCY_TARGET = Target("value", 2.0, "≤ 2 ms")


def journal_broker_figures() -> dict[str, Figure]:
    """The figures of the journal-broker issue, in table order."""
    figures = [
        Figure("raw_stream", "Limit: raw gRPC loopback stream, 1 MiB messages", "MB/s", True),
        Figure("append_seq", "Append 1 MiB, sequential", "MB/s", True, "raw_stream", APPEND_TARGET),
        Figure(
            "append_x4", "Append 1 MiB, 4 appenders on 4 journals", "MB/s", True, "raw_stream", APPEND_TARGET
        ),
        Figure("read_spool", "Read from the spool", "MB/s", True, "raw_stream"),
        Figure("read_store", "Read from the file store (after flush)", "MB/s", True, "raw_stream"),
        Figure("raw_unary_p50", "Limit: raw gRPC unary round trip p50", "ms", False),
        Figure("raw_unary_p99", "Limit: raw gRPC unary round trip p99", "ms", False),
        Figure(
            "small_append_p50", "Append 100 B p50, sequential", "ms", False, "raw_unary_p50", LATENCY_TARGET
        ),
        Figure("small_append_p99", "Append 100 B p99, sequential", "ms", False, "raw_unary_p99"),
        Figure("disk_fsync", "Limit: disk sequential write + fsync", "MB/s", True),
    ]
    return {f.key: f for f in figures}


def percentile(samples: list[float], pct: int) -> float:
    """The `pct`-th percentile of `samples` (linear interpolation between closest ranks)."""
    return statistics.quantiles(samples, n=100, method="inclusive")[pct - 1]
