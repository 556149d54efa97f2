"""bench/report.py's pure parts: ratios to limits and peers, notes of unmeasured figures, the
README rewrite. No benchmark runs here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench.figures import Figure, Target  # noqa: E402
from bench.report import (  # noqa: E402
    README_END,
    README_START,
    ReportError,
    Row,
    convert,
    markdown_table,
    rows_of,
    update_readme,
)


def by_key(*figures: Figure) -> dict[str, Figure]:
    return {f.key: f for f in figures}


def test_rate_ratio_is_the_median_of_per_run_ratios() -> None:
    figures = by_key(
        Figure("raw", "Limit: raw", "MB/s", True, samples=[100.0, 200.0, 300.0]),
        Figure(
            "ours", "Ours", "MB/s", True, "raw", Target("ratio", 0.4, "≥ 0.4"), samples=[50.0, 50.0, 150.0]
        ),
    )
    limit, ours = rows_of(figures)
    assert (limit.role, ours.role) == ("limit", "ours")
    assert ours.value == 50.0 and ours.limit_value == 200.0
    assert ours.ratio == pytest.approx(0.5)  # per run 0.5, 0.25, 0.5 (the medians' ratio would be 0.25)
    assert ours.met is True
    assert ours.cells()[3:5] == ("200", "0.50")
    assert ours.cells()[7] == "≥ 0.4 ✓"
    assert limit.cells()[3] == "limit"


def test_latency_ratio_is_limit_over_ours() -> None:
    figures = by_key(
        Figure("rtt", "Limit: rtt", "ms", False, samples=[1.0, 2.0]),
        Figure("lat", "Latency", "ms", False, "rtt", Target("value", 1.5, "≤ 1.5 ms"), samples=[2.0, 2.0]),
    )
    row = rows_of(figures)[1]
    assert row.ratio == pytest.approx(0.75)
    assert row.met is False
    assert row.cells()[7] == "≤ 1.5 ms ✗"


def test_peer_ratio_converts_the_peers_unit_into_ours() -> None:
    figures = by_key(
        Figure("pub", "Publish", "k msg/s", True, samples=[250.0, 300.0, 350.0]),
        Figure("nats", "Peer: publish", "msg/s", True, samples=[20_000.0, 10_000.0, 30_000.0]),
    )
    ours, peer = rows_of(figures, {"pub": "nats"})
    assert ours.peer_value == pytest.approx(20.0)
    assert ours.peer_ratio == pytest.approx(15.0)  # medians: 300 / 20
    assert ours.cells()[5:7] == ("20.00", "15.00")
    assert peer.role == "peer" and peer.cells()[3] == "" and peer.cells()[5] == "peer"


def test_unmeasured_figures_carry_their_note_into_our_rows() -> None:
    note = "nats-server not installed"
    figures = by_key(
        Figure("read", "ReadCommitted", "k msg/s", True, samples=[200.0]),
        Figure("consume", "Peer: consume", "k msg/s", True),
        Figure("sync", "Peer: sync publish", "k msg/s", True),
    )
    ours, consume, sync = rows_of(figures, {"read": "consume"}, {"consume": note, "sync": note}, ["sync"])
    assert ours.peer_value is None and ours.peer_ratio is None and ours.peer_note == note
    assert ours.cells()[5] == note
    assert consume.value is None and consume.cells()[2] == note
    assert sync.role == "peer"  # named a peer figure though no figure of ours points at it


def test_pairs_with_a_missing_figure_are_dropped() -> None:
    figures = by_key(Figure("read", "ReadCommitted", "k msg/s", True, samples=[200.0]))
    (row,) = rows_of(figures, {"read": "absent", "cons_e2e": "read"})
    assert row.peer_value is None and row.peer_note is None and row.peer_ratio is None


def test_a_limit_that_was_not_measured_is_an_error() -> None:
    figures = by_key(Figure("ours", "Ours", "MB/s", True, "raw", samples=[1.0]))
    with pytest.raises(ReportError, match="'ours' names limit 'raw'"):
        Row.of(figures["ours"], figures)


def test_convert_refuses_different_quantities() -> None:
    assert convert(2.0, "M msg/s", "k msg/s") == pytest.approx(2000.0)
    with pytest.raises(ReportError, match="'MB/s' with one in 'k msg/s'"):
        convert(1.0, "MB/s", "k msg/s")


def test_markdown_escapes_pipes() -> None:
    figures = by_key(Figure("x", "a | b", "ms", False, samples=[1.0]))
    assert "| a \\| b | ms |" in markdown_table(rows_of(figures))[2]


ENV = {
    "date": "2026-01-01T00:00:00+00:00",
    "machine": {"platform": "Linux", "cpu_count": 2, "load_average_1_5_15": [1.0, 1.0, 1.0]},
    "versions": {"python": "3.11", "grpcio": "1", "protobuf": "2", "gazette": "0.1", "commit": "abc",
                 "nats-server": "nats-server: v2.9.10", "nats-py": None},
}  # fmt: skip


def test_update_readme_rewrites_only_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# bench\n\nbefore\n{README_START}\nold table\n{README_END}\nafter\n")
    rows = rows_of(by_key(Figure("x", "X", "MB/s", True, samples=[1234.5])))
    update_readme(readme, rows, ENV, {"name": "quick"})
    text = readme.read_text()
    assert text.startswith("# bench\n\nbefore\n" + README_START)
    assert text.endswith(README_END + "\nafter\n")
    assert "old table" not in text
    assert "| X | MB/s | 1,234 | limit |" in text
    assert "nats-server: v2.9.10" in text and "nats-py" not in text


def test_update_readme_without_markers_names_the_file(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# bench\n")
    with pytest.raises(ReportError, match="README.md has no"):
        update_readme(readme, [], ENV, {"name": "full"})


def test_parts_that_cannot_run_or_fail_leave_notes_and_the_rest_still_runs() -> None:
    import importlib
    import io

    from rich.console import Console

    from bench import nats_peer, runner

    suite_module = importlib.import_module("bench.__main__")
    Part = suite_module.Part

    def unmeasured(key: str) -> dict[str, Figure]:
        return by_key(Figure(key, key.title(), "k msg/s", True))

    def no_server(settings: runner.Settings, log: object) -> dict[str, Figure]:
        raise nats_peer.NatsUnavailable(nats_peer.NOT_INSTALLED)

    def broken(settings: runner.Settings, log: object) -> dict[str, Figure]:
        raise RuntimeError("journal bench/x vanished")

    def works(settings: runner.Settings, log: object) -> dict[str, Figure]:
        figures = unmeasured("ok")
        figures["ok"].samples.append(5.0)
        return figures

    suite = [
        Part("peer", lambda: unmeasured("peer"), no_server),
        Part("bad", lambda: unmeasured("bad"), broken),
        Part("skip", lambda: unmeasured("skip"), None, "skipped: --quick"),
        Part("good", lambda: unmeasured("never"), works),
    ]
    console = Console(file=io.StringIO(), width=200)
    figures, notes, status = suite_module.run_parts(suite, runner.QUICK, console)
    assert list(figures) == ["peer", "bad", "skip", "ok"]
    assert notes == {
        "peer": "nats-server not installed",
        "bad": "failed: RuntimeError: journal bench/x vanished",
        "skip": "skipped: --quick",
    }
    assert [status[p]["status"] for p in ("peer", "bad", "skip", "good")] == [
        "skipped",
        "failed",
        "skipped",
        "ok",
    ]
    assert "journal bench/x vanished" in console.file.getvalue()  # the traceback is printed
