"""Notebook 05 (Structured Streaming into Delta through real delta-spark) runs end to end in a real
kernel like the other example notebooks (test_notebooks.py's runner): a driver SIGKILLed after its
Delta writes and before Spark's checkpoint, restarted from that checkpoint, and both tables equal to
what ReadCommitted reads. Without Delta's jars it skips naming `make delta-jars`; under CI it fails.

The executed notebook is then opened in JupyterLab in Chromium (test_browser.py's server) and its outputs
checked rendered there: running 05 a second time in the browser would add its 2-3 minutes of Spark.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
import warnings

import nbformat
import pytest
from needs import CHROMIUM_STEP, DELTA_JARS_STEP, missing, under_ci

from fragments_io.delta import DeltaJarsNotFoundError, delta_jars

NOTEBOOK = "05-streaming-to-delta.ipynb"
CELL_TIMEOUT_S = 240


def _runner(name: str = "test_notebooks.py"):
    """test_notebooks.py as a module (its _execute, _texts, _cell_text, _assert_clean), or `name`."""
    path = pathlib.Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"notebook_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (test_browser's LabServer) look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(2 * CELL_TIMEOUT_S + 120)
def test_streaming_to_delta_notebook_survives_a_driver_kill(tmp_path) -> None:
    try:
        delta_jars()
    except DeltaJarsNotFoundError as e:
        missing(str(e), DELTA_JARS_STEP)
    run = _runner()
    nb = run._execute(NOTEBOOK, tmp_path, CELL_TIMEOUT_S)
    texts = run._texts(nb)
    # The kill: after batch 0's Delta writes, before Spark's checkpoint recorded the batch.
    killed = run._cell_text(texts, "driver = start_driver(1")
    assert "driver killed (signal 9)" in killed and "checkpoint has batches []" in killed
    # The restart replayed batch 0 (Delta had it: nothing written) and went on.
    replay = re.search(
        r"^\d+\s+2\s+0\s+\d+\s+False\s+False$", run._cell_text(texts, "stop_publishing.set()"), re.M
    )
    assert replay, run._cell_text(texts, "stop_publishing.set()")
    history = run._cell_text(texts, "readings = DeltaTable(")
    assert "Delta-Lake/4.4.0" in history and "MERGE" in history
    # The final comparison with ReadCommitted.
    checks = run._cell_text(texts, "committed = sorted(")
    counts = re.search(r"^(\d+) committed readings; Delta readings: (\d+); batches: (\d+)$", checks, re.M)
    assert counts and counts[1] == counts[2] and int(counts[1]) > 0 and int(counts[3]) >= 2, checks
    assert checks.rstrip().endswith("DELTA STREAM OK")
    assert run._cell_text(texts, "%gazette down").strip("'\n ") == "cluster stopped"
    run._assert_clean(nb)
    _check_rendered_in_the_browser(tmp_path, nb)


def _check_rendered_in_the_browser(tmp_path: pathlib.Path, nb) -> None:
    """The executed notebook's outputs in JupyterLab: its DataFrames as HTML tables, the checks' last
    line, no error output."""
    browser = _runner("test_browser.py")
    if not browser.CHROMIUM.exists():
        if under_ci():
            missing(f"{browser.CHROMIUM} is absent: notebook 05's outputs go unchecked", CHROMIUM_STEP)
        warnings.warn(
            f"{browser.CHROMIUM} is absent: notebook 05's outputs were not checked in a browser", stacklevel=1
        )
        return
    executed = tmp_path / "executed" / NOTEBOOK
    executed.parent.mkdir()
    nbformat.write(nb, executed)
    shown = browser.render_executed(tmp_path / "lab", executed, ["table.dataframe", ".jp-OutputArea-output"])
    tables = sum(
        1
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "dataframe" in str(o.get("data", {}).get("text/html", ""))
    )
    assert tables >= 2 and shown["found"]["table.dataframe"] == tables, (tables, shown["found"])
    assert not shown["errors"], shown["errors"]
    checks = next(c["output"] for c in shown["cells"] if c["source"].startswith("committed = sorted("))
    assert checks.rstrip().endswith("DELTA STREAM OK"), checks
