"""The example notebooks run end to end in a real kernel (nbclient) and their check cells pass."""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_S = 90
STARTUP_TIMEOUT_S = 60


def _texts(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Each code cell's source mapped to its outputs' text (streams and plain results)."""
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for o in cell.outputs:
            parts.append(str(o.get("text", "")))
            parts.append(str(o.get("data", {}).get("text/plain", "")))
            parts.append(str(o.get("data", {}).get("text/html", "")))
        out[cell.source] = "".join(parts)
    return out


@pytest.mark.timeout(240)
def test_quickstart_runs_and_checks_pass() -> None:
    path = NOTEBOOKS_DIR / "01-quickstart.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=STARTUP_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    ).execute()  # raises CellExecutionError on the first failing cell

    texts = _texts(nb)
    assert "QUICKSTART OK" in "".join(texts.values())
    up = next(t for s, t in texts.items() if s.startswith("%gazette up"))
    assert up.count("running") >= 3
    journals = next(t for s, t in texts.items() if s.startswith("%gazette journals"))
    assert "examples/words/part-000" in journals and "gazette-table" in journals
    committed = next(
        t for s, t in texts.items() if s.startswith("%gazette read examples/words/part-000 --committed")
    )
    assert '"word":"acked"' in committed and "never-committed" not in committed
    widgets = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]  # fmt: skip
    assert len(widgets) >= 4
    assert (
        next(t for s, t in texts.items() if s.startswith("%gazette down")).strip("'\n ") == "cluster stopped"
    )
    for source, text in texts.items():
        assert "Traceback" not in text, (source, text)
