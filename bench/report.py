"""Turns measured figures into rows, then prints them (rich), saves them (results.json) and
rewrites the results table between the markers of bench/README.md.

A row sets one of our figures beside its limit (ratio: median of per-run ratios) and its peer (NATS
JetStream or real Gazette; ratio of the medians, the peer's runs being separate ones). Both ratios are written so
that higher is better for us. A figure that could not be measured has no samples and a note saying why.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import google.protobuf
import grpc
from rich.console import Console
from rich.table import Table

from bench.figures import Figure

README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"
COLUMNS = (
    "Figure",
    "Unit",
    "Value",
    "Limit (same run)",
    "Ratio",
    "Peer (same run)",
    "Ratio to peer",
    "Target",
)
LEFT_COLUMNS = (0, 1, 7)
# Units of one quantity at different scales: a peer's figure is converted into ours before the ratio.
UNIT_SCALES = {"msg/s": ("msg/s", 1.0), "k msg/s": ("msg/s", 1e3), "M msg/s": ("msg/s", 1e6)}


class ReportError(ValueError):
    """Figures that cannot be put in one table (an unknown limit or peer, units that do not compare)."""


def convert(value: float, unit: str, to_unit: str) -> float:
    """`value` in `unit` expressed in `to_unit`; ReportError if they measure different things."""
    if unit == to_unit:
        return value
    src, dst = UNIT_SCALES.get(unit), UNIT_SCALES.get(to_unit)
    if src is None or dst is None or src[0] != dst[0]:
        raise ReportError(f"cannot compare a figure in {unit!r} with one in {to_unit!r}")
    return value * src[1] / dst[1]


@dataclasses.dataclass(frozen=True)
class Row:
    figure: Figure
    role: str  # "ours", "limit" or "peer"
    value: float | None  # None: not measured (see note)
    limit_value: float | None
    ratio: float | None  # median of per-run ratios to the limit; higher is better for us
    peer_value: float | None  # in our figure's unit
    peer_ratio: float | None  # ours / peer for rates, peer / ours for latencies
    met: bool | None
    note: str | None  # why there is no value
    peer_note: str | None  # why there is no peer figure (its own note)

    @classmethod
    def of(
        cls,
        figure: Figure,
        figures: Mapping[str, Figure],
        peer_key: str | None = None,
        notes: Mapping[str, str] | None = None,
        peer_keys: frozenset[str] = frozenset(),
    ) -> Row:
        notes = notes or {}
        value = figure.value if figure.samples else None
        note = None if figure.samples else notes.get(figure.key, "not measured")
        limit = _lookup(figures, figure.limit, figure, "limit")
        ratio = None
        if value is not None and limit is not None and limit.samples:
            if len(limit.samples) == len(figure.samples):
                ratio = statistics.median(figure.ratios(limit))
            else:  # limits measured in other runs than ours: compare the medians
                ratio = _ratio(figure.rate, value, limit.value)
        peer = _lookup(figures, peer_key, figure, "peer")
        peer_value = peer_ratio = None
        peer_note = None
        if peer is not None:
            if peer.samples:
                peer_value = convert(peer.value, peer.unit, figure.unit)
                peer_ratio = None if value is None else _ratio(figure.rate, value, peer_value)
            else:
                peer_note = notes.get(peer.key, "not measured")
        met = figure.target.met(value, ratio) if figure.target and value is not None else None
        role = "peer" if figure.key in peer_keys else "limit" if figure.is_limit else "ours"
        return cls(
            figure, role, value, limit.value if limit and limit.samples else None, ratio,
            peer_value, peer_ratio, met, note, peer_note,
        )  # fmt: skip

    def cells(self) -> tuple[str, ...]:
        f = self.figure
        target = ""
        if f.target and self.met is not None:
            target = f"{f.target.text} {'✓' if self.met else '✗'}"
        elif f.target:
            target = f.target.text
        limit_cell = (
            "limit"
            if self.role == "limit"
            else ""
            if self.role == "peer"
            else _number(self.limit_value, f.unit)
        )
        peer_cell = "peer" if self.role == "peer" else self.peer_note or _number(self.peer_value, f.unit)
        return (
            f.name,
            f.unit,
            self.note if self.value is None and self.note else _number(self.value, f.unit),
            limit_cell,
            _ratio_text(self.ratio),
            peer_cell,
            _ratio_text(self.peer_ratio),
            target,
        )


def _lookup(figures: Mapping[str, Figure], key: str | None, of: Figure, what: str) -> Figure | None:
    if key is None:
        return None
    if key not in figures:
        raise ReportError(f"figure {of.key!r} names {what} {key!r}, which is not among the figures measured")
    return figures[key]


def _ratio(rate: bool, ours: float, theirs: float) -> float | None:
    if ours <= 0 or theirs <= 0:
        return None
    return ours / theirs if rate else theirs / ours


def _ratio_text(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}"


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "MB/s" or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.2f}"


def rows_of(
    figures: Mapping[str, Figure],
    peers: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    peer_figures: Iterable[str] = (),
) -> list[Row]:
    """One row per figure, in order. `peers` maps our figure keys to their peer's (pairs whose figures
    are both present); `peer_figures` names the peer's figures (with or without a figure of ours)."""
    peers = {k: v for k, v in (peers or {}).items() if k in figures and v in figures}
    peer_keys = frozenset(peers.values()) | frozenset(peer_figures)
    return [Row.of(f, figures, peers.get(f.key), notes, peer_keys) for f in figures.values()]


def print_table(rows: list[Row], title: str, console: Console) -> None:
    table = Table(title=title)
    for i, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if i in LEFT_COLUMNS else "right", no_wrap=i == 0)
    for row in rows:
        table.add_row(*row.cells(), style="dim" if row.role != "ours" else None)
    console.print(table)


def environment(extra_versions: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The machine, the versions under test (and of the peers) and the date."""
    return {
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "load_average_1_5_15": list(os.getloadavg()),
        },
        "versions": {
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
            "protobuf": google.protobuf.__version__,
            "gazette": importlib.metadata.version("gazette-py"),
            "commit": _git_commit(),
            **(extra_versions or {}),
        },
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    """The checkout's commit, marked "-dirty" with uncommitted changes; None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def results_json(
    rows: list[Row], env: dict[str, Any], settings: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        **env,
        "settings": settings,
        "figures": [
            {
                "key": r.figure.key,
                "figure": r.figure.name,
                "role": r.role,
                "unit": r.figure.unit,
                "value": r.value,
                "samples": r.figure.samples,
                "note": r.note,
                "limit": r.figure.limit,
                "limit_value": r.limit_value,
                "ratio": r.ratio,
                "peer_value": r.peer_value,
                "peer_ratio": r.peer_ratio,
                "peer_note": r.peer_note,
                "target": r.figure.target.text if r.figure.target else None,
                "target_met": r.met,
            }
            for r in rows
        ],
        **extra,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def markdown_table(rows: list[Row]) -> list[str]:
    def escape(cell: str) -> str:
        return cell.replace("|", "\\|")

    return [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(":--" if i in LEFT_COLUMNS else "--:" for i in range(len(COLUMNS))) + "|",
        *("| " + " | ".join(escape(c) for c in r.cells()) + " |" for r in rows),
    ]


def _load_text(start: list[float] | None, end: list[float] | None) -> str:
    """ " (load average 9.1 at the start, 6.2 at the end)": other work on the machine skews figures."""
    parts = [f"{v[0]:.1f} at the {when}" for v, when in ((start, "start"), (end, "end")) if v]
    return f" (load average {', '.join(parts)})" if parts else ""


def update_readme(path: Path, rows: list[Row], env: dict[str, Any], settings: dict[str, Any]) -> None:
    """Replaces the text between the results markers of `path` with a table of `rows`."""
    text = path.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ReportError(f"{path} has no {README_START} ... {README_END} section to rewrite")
    m, v = env["machine"], env["versions"]
    names = ("nats-server", "nats-py", "Gazette (Go)", "Kafka", "Kafka Streams", "confluent-kafka", "pyspark")
    peers = ", ".join(f"{k} {v[k]}" for k in names if v.get(k))
    load, load_start = m.get("load_average_1_5_15"), m.get("load_average_at_start")
    lines = [
        README_START,
        f"Measured {env['date']} (`{settings['name']}`, each figure the median of its runs) on "
        f"{m['platform']}, {m['cpu_count']} CPUs"
        + _load_text(load_start, load)
        + f"; Python {v['python']}, grpcio {v['grpcio']}, protobuf {v['protobuf']}, "
        f"gazette-py {v['gazette']} ({v['commit'] or 'no git'})" + (f"; {peers}" if peers else "") + ".",
        "",
        *markdown_table(rows),
        "",
    ]
    path.write_text(text[:start] + "\n".join(lines) + text[end:])
