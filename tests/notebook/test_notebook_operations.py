"""Notebook 06 (operations) runs end to end in a real kernel like the other example notebooks
(test_notebooks.py's runner): a publisher and the word-count consumer run while a broker is killed and
restarted; the consumer's Prometheus metrics, sampled over the run, are charted (matplotlib, rendered as
image/png outputs) with the kill and the restart marked, and the lag drains to zero after the restart.
"""

from __future__ import annotations

import base64
import importlib.util
import pathlib
import re

import pytest

NOTEBOOK = "06-operations.ipynb"
CELL_TIMEOUT_S = 90
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _runner():
    """test_notebooks.py as a module (its _execute, _texts, _cell_text, _widgets, _assert_clean)."""
    path = pathlib.Path(__file__).with_name("test_notebooks.py")
    spec = importlib.util.spec_from_file_location("notebook_runner", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pngs(cell) -> list[bytes]:
    return [
        base64.b64decode(o["data"]["image/png"]) for o in cell.outputs if "image/png" in o.get("data", {})
    ]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_operations_notebook_charts_lag_and_throughput_through_a_broker_kill(tmp_path) -> None:
    run = _runner()
    nb = run._execute(NOTEBOOK, tmp_path, CELL_TIMEOUT_S)
    texts = run._texts(nb)
    # The metrics the sampler reads are exported by the consumer.
    families = run._cell_text(texts, "import tempfile")
    for name in ("gazette_shard_transactions", "gazette_shard_read_messages", "gazette_shard_read_lag_bytes"):
        assert f"  {name} True" in families, families
    killed = re.search(
        r"^killed (\S+) at ([\d.]+) s, restarted at ([\d.]+) s; \d+ acknowledged$",
        run._cell_text(texts, "def routes():"),
        re.M,
    )
    assert killed and float(killed[2]) < float(killed[3]), run._cell_text(texts, "def routes():")
    # The chart: one PNG image output, in the cell that draws it.
    chart = next(
        c for c in nb.cells if c.cell_type == "code" and c.source.startswith("t = [s[0] for s in samples]")
    )
    (png,) = _pngs(chart)
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    checks = run._cell_text(texts, "before = [s for s in samples")
    assert f"kill marked: ['{killed[1]} killed', '{killed[1]} restarted']" in checks, checks
    assert re.search(r"^peak lag after the kill: \d+ bytes; final lag: 0 bytes$", checks, re.M), checks
    assert checks.rstrip().endswith("OPERATIONS OK")
    assert len(run._widgets(nb)) >= 1  # the journal view with its fragment timeline
    assert run._cell_text(texts, "%gazette down").strip("'\n ") == "cluster stopped"
    run._assert_clean(nb)
