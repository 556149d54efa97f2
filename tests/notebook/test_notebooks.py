"""The example notebooks run end to end in a real kernel (nbclient) and their check cells pass.

Each notebook starts its own cluster (`%gazette up`) and ends with assertion cells, so a failing cell
fails its test. Kernels talk over IPC sockets in the test's tmp dir: no TCP port can be taken between
jupyter_client choosing it and the kernel binding it.
"""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient
from traitlets.config import Config

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_S = 90
STARTUP_TIMEOUT_S = 60
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _execute(
    name: str, tmp_path: pathlib.Path, cell_timeout_s: float = CELL_TIMEOUT_S
) -> nbformat.NotebookNode:
    """Runs every cell of notebooks/`name` in a fresh python3 kernel started in notebooks/;
    raises CellExecutionError on the first failing cell."""
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    transport = Config({"KernelManager": {"transport": "ipc", "ip": str(tmp_path / "kernel")}})
    NotebookClient(
        nb,
        timeout=cell_timeout_s,
        startup_timeout=STARTUP_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
        config=transport,
    ).execute()
    return nb


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


def _widgets(nb: nbformat.NotebookNode) -> list[dict]:
    return [
        o["data"][WIDGET_MIME]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if WIDGET_MIME in o.get("data", {})
    ]


def _assert_clean(nb: nbformat.NotebookNode) -> None:
    """No error output and no traceback anywhere (a background thread's would only print one)."""
    errors = [
        (c.source, o)
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors, errors
    for source, text in _texts(nb).items():
        assert "Traceback" not in text, (source, text)


def _cell_text(texts: dict[str, str], prefix: str) -> str:
    return next(t for s, t in texts.items() if s.startswith(prefix))


@pytest.mark.timeout(240)
def test_quickstart_runs_and_checks_pass(tmp_path) -> None:
    nb = _execute("01-quickstart.ipynb", tmp_path)
    texts = _texts(nb)
    assert "QUICKSTART OK" in "".join(texts.values())
    up = _cell_text(texts, "%gazette up")
    assert up.count("running") >= 3
    journals = _cell_text(texts, "%gazette journals")
    assert "examples/words/part-000" in journals and "gazette-table" in journals
    committed = _cell_text(texts, "%gazette read examples/words/part-000 --committed")
    assert '"word":"acked"' in committed and "never-committed" not in committed
    assert len(_widgets(nb)) >= 4
    assert _cell_text(texts, "%gazette down").strip("'\n ") == "cluster stopped"
    _assert_clean(nb)


# (notebook, texts its outputs must show (the check cell's last line first), widgets it displays at
# least, per-cell timeout); each with its own test timeout.
EXAMPLES = [
    pytest.param(
        "02-exactly-once.ipynb",
        ("EXACTLY-ONCE OK", "FencingError", ":FAILED"),
        3,
        120,
        marks=pytest.mark.timeout(300),
        id="02-exactly-once",
    ),
    pytest.param(
        "03-spark-sql-over-fragments.ipynb",
        ("SPARK OK", "apple"),
        1,
        180,
        marks=pytest.mark.timeout(360),
        id="03-spark-sql",
    ),
    pytest.param("04-faults.ipynb", ("FAULTS OK",), 3, 120, marks=pytest.mark.timeout(300), id="04-faults"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "shown", "widgets", "cell_timeout_s"), EXAMPLES)
def test_example_notebook_runs_and_checks_pass(
    tmp_path, name: str, shown: tuple[str, ...], widgets: int, cell_timeout_s: float
) -> None:
    nb = _execute(name, tmp_path, cell_timeout_s)
    texts = _texts(nb)
    everything = "".join(texts.values())
    for text in shown:
        assert text in everything, f"{name}: no output shows {text!r}"
    assert len(_widgets(nb)) >= widgets
    assert _cell_text(texts, "%gazette down").strip("'\n ") == "cluster stopped"
    _assert_clean(nb)
