"""Turns measured figures into rows, then prints them (rich), saves them (results.json) and
rewrites the results table between the markers of bench/README.md.
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
from pathlib import Path

import google.protobuf
import grpc
from rich.console import Console
from rich.table import Table

from bench.figures import Figure

README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"
COLUMNS = ("Figure", "Unit", "Value", "Limit (same run)", "Ratio", "Target")


@dataclasses.dataclass(frozen=True)
class Row:
    figure: Figure
    limit_value: float | None
    ratio: float | None  # median of per-run ratios; higher is better for us
    met: bool | None

    @classmethod
    def of(cls, figure: Figure, figures: dict[str, Figure]) -> Row:
        limit = figures[figure.limit] if figure.limit else None
        ratio = statistics.median(figure.ratios(limit)) if limit else None
        met = figure.target.met(figure.value, ratio) if figure.target else None
        return cls(figure, limit.value if limit else None, ratio, met)

    def cells(self) -> tuple[str, ...]:
        f = self.figure
        target = ""
        if f.target:
            target = f"{f.target.text} {'✓' if self.met else '✗'}"
        return (
            f.name,
            f.unit,
            _number(f.value, f.unit),
            "limit" if f.is_limit else _number(self.limit_value, f.unit),
            "" if self.ratio is None else f"{self.ratio:.2f}",
            target,
        )


def rows_of(figures: dict[str, Figure]) -> list[Row]:
    return [Row.of(f, figures) for f in figures.values()]


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if unit == "MB/s" else f"{value:.2f}"


def print_table(rows: list[Row], title: str, console: Console) -> None:
    table = Table(title=title)
    for i, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if i in (0, 1, 5) else "right")
    for row in rows:
        table.add_row(*row.cells(), style="dim" if row.figure.is_limit else None)
    console.print(table)


def environment() -> dict:
    """The machine, the versions under test and the date, for results.json and the README."""
    return {
        "machine": {
            "platform": platform.platform(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
        },
        "versions": {
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
            "protobuf": google.protobuf.__version__,
            "gazette": importlib.metadata.version("gazette-py"),
            "commit": _git_commit(),
        },
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


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


def results_json(rows: list[Row], env: dict, settings: dict) -> dict:
    return {
        **env,
        "settings": settings,
        "figures": [
            {
                "key": r.figure.key,
                "figure": r.figure.name,
                "unit": r.figure.unit,
                "value": r.figure.value,
                "samples": r.figure.samples,
                "limit": r.figure.limit,
                "limit_value": r.limit_value,
                "ratio": r.ratio,
                "target": r.figure.target.text if r.figure.target else None,
                "target_met": r.met,
            }
            for r in rows
        ],
    }


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def update_readme(path: Path, rows: list[Row], env: dict, settings: dict) -> None:
    """Replaces the text between the results markers of `path` with a table of `rows`."""
    text = path.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"{path} has no {README_START} ... {README_END} section to rewrite")
    m, v = env["machine"], env["versions"]
    lines = [
        README_START,
        f"Measured {env['date']} (`{settings['name']}`, median of {settings['runs']} runs) on "
        f"{m['platform']}, {m['cpu_count']} CPUs; Python {v['python']}, grpcio {v['grpcio']}, "
        f"protobuf {v['protobuf']}, gazette-py {v['gazette']} ({v['commit'] or 'no git'}).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(":--" if i in (0, 1, 5) else "--:" for i in range(len(COLUMNS))) + "|",
        *("| " + " | ".join(r.cells()) + " |" for r in rows),
        "",
    ]
    path.write_text(text[:start] + "\n".join(lines) + text[end:])
