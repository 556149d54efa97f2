"""Notebook 08 (a streaming query's per-batch aggregates written back to a journal with the `gazette`
sink) runs end to end in a real kernel like the other example notebooks (test_notebooks.py's runner):
the driver SIGKILLed by the sink's fault hook after recording micro-batch 0's ACK intents and before
appending them, a committed read of the output then empty, the restarted query completing the recorded
write, and `%gazette read --committed` showing each count once, equal to the counts computed in Python.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

NOTEBOOK = "08-spark-writes-exactly-once.ipynb"
CELL_TIMEOUT_S = 360  # a cell runs a whole Spark driver: a minute idle, several on a busy machine


def _runner():
    """test_notebooks.py as a module (its _execute, _texts, _cell_text, _assert_clean)."""
    path = pathlib.Path(__file__).with_name("test_notebooks.py")
    spec = importlib.util.spec_from_file_location(f"notebook_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(3 * CELL_TIMEOUT_S)
def test_sink_notebook_writes_each_aggregate_once_across_a_driver_kill(tmp_path) -> None:
    run = _runner()
    nb = run._execute(NOTEBOOK, tmp_path, CELL_TIMEOUT_S)
    texts = run._texts(nb)
    # The kill: intents of write page-counts-0 recorded, the tasks' counts in the journal, unacknowledged.
    killed = run._cell_text(texts, 'code = run_driver(1, fault="after-record")')
    found = re.search(
        r"driver killed \(signal 9\); intent records: \[(.*)\]; .*unacknowledged: (\d+); batches logged: 0",
        killed,
    )
    assert found and "write-page-counts-0.intents.json" in found[1] and int(found[2]) == 4, killed
    # Before the restart, a committed read of the output holds nothing.
    empty = run._cell_text(texts, "%gazette read examples/page-counts --committed")
    assert '"page"' not in empty and "(no rows)" in empty, empty
    # After it, every count: batch 0's four pages and batch 1's two.
    shown = run._cell_text(texts, "results = %gazette read examples/page-counts --committed")
    assert shown.count('"batch":0') == 2 * 4 and shown.count('"batch":1') == 2 * 2, shown  # text and HTML
    assert '"page":"pricing","clicks":6' in shown and "careers" not in shown, shown
    checks = run._cell_text(texts, "got = Counter(")
    assert "6 committed counts; expected 6; count messages in the journal: 6" in checks, checks
    assert checks.rstrip().endswith("SINK EXACTLY ONCE OK")
    assert run._cell_text(texts, "%gazette down").strip("'\n ") == "cluster stopped"
    run._assert_clean(nb)
