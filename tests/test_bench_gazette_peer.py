"""bench/gazette_peer.py: real Gazette brokers running the bench's workloads with tiny settings (a smoke
test of the code path, not a measurement), the pairing with our figures, and the skip without binaries.

Without the binaries the smoke test skips saying how to build them; under CI it fails (tests/needs.py).
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

import pytest
from needs import PEERS_STEP, missing

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a top-level directory of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import gazette_peer, replication, runner  # noqa: E402
from bench.report import rows_of  # noqa: E402

TINY = runner.Settings("smoke", runs=1, append_mib=4, small_appends=16)


def test_gazette_peer_measures_every_figure_and_pairs_it_with_ours() -> None:
    try:
        gazette_peer.gazette_binary()
    except gazette_peer.GazetteUnavailable as exc:
        missing(str(exc), PEERS_STEP)
    logs: list[str] = []
    figures = gazette_peer.run(TINY, logs.append)
    assert list(figures) == list(gazette_peer.peer_figures())
    for figure in figures.values():
        assert len(figure.samples) == 1 and figure.samples[0] > 0, figure
    assert any("Gazette v" in line for line in logs)

    ours = runner.journal_broker_figures() | replication.replication_figures()
    assert set(gazette_peer.PEER_OF) <= set(ours)  # every peer names a figure of ours that exists
    for key in gazette_peer.PEER_OF:
        ours[key].samples.append(1.0)
    rows = {r.figure.key: r for r in rows_of(ours | figures, gazette_peer.PEER_OF, peer_figures=figures)}
    for key, peer_key in gazette_peer.PEER_OF.items():
        assert rows[key].peer_value == pytest.approx(figures[peer_key].value)
        assert rows[key].peer_ratio is not None and rows[key].peer_ratio > 0
        assert rows[peer_key].role == "peer" and rows[peer_key].cells()[5] == "peer"


def test_without_the_binaries_the_suite_skips_the_part_saying_how_to_build_them(
    monkeypatch, tmp_path
) -> None:
    from rich.console import Console

    monkeypatch.setenv("GAZETTE_PEERS_BIN", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(gazette_peer.GazetteUnavailable, match="run `make peers`"):
        gazette_peer.run(TINY, print)
    assert gazette_peer.version() is None

    suite_module = importlib.import_module("bench.__main__")
    part = suite_module.Part("gazette peer", gazette_peer.peer_figures, gazette_peer.run)
    figures, notes, status = suite_module.run_parts([part], TINY, Console(file=io.StringIO(), width=200))
    assert list(figures) == list(gazette_peer.peer_figures())
    assert status["gazette peer"]["status"] == "skipped"
    assert set(notes) == set(figures) and all(n.startswith(gazette_peer.NOT_BUILT) for n in notes.values())
