"""The example notebooks run end to end in a real kernel (nbclient) and their check cells pass.

Each notebook starts its own cluster (`%gazette up`) and ends with assertion cells, so a failing cell
fails its test. Kernels talk over IPC sockets in the test's tmp dir: no TCP port can be taken between
jupyter_client choosing it and the kernel binding it.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import shutil

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


def _listed(text: str, kind: str) -> list[str]:
    """The paths `show_store` printed as `kind` ("staged" or "published") in a cell's output."""
    return re.findall(rf"^  {kind} +(\S+)$", text, flags=re.M)


def _committed(text: str) -> list[tuple[str, str, str]]:
    """(path, sha1, verdict) of each committed index message `show_index` printed."""
    return re.findall(r"^  committed  (\S+)  sha1 ([0-9a-f]{40})  \d+ events?  (.+)$", text, flags=re.M)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_side_effects_notebook_shows_the_crash_the_zombie_and_their_cleanup(tmp_path) -> None:
    """07-side-effects: the crashed attempt's staged report is listed while it is stopped, then gone after
    the successor's cleanup, and never committed; so is the zombie's, staged after its successor
    committed; every committed report's bytes (read here, from the store the notebook wrote) match the
    SHA-1 its message carries, and Inspect reported each cleanup."""
    nb = _execute("07-side-effects.ipynb", tmp_path, 120)
    texts = _texts(nb)
    everything = "".join(texts.values())
    found = re.search(r"^work dir: (\S+)$", _cell_text(texts, "import hashlib"), flags=re.M)
    assert found, everything[:2000]
    work = pathlib.Path(found.group(1))
    try:
        assert "SIDE EFFECTS OK" in everything
        staged_by = r"\.pending/reports-000-[0-9a-f]{{8}}/{0}/{0}-\d+-[0-9a-f]{{16}}"
        # The crash: staged and invisible while the primary is stopped after prepare; nothing committed.
        before = _cell_text(texts, "crashed = ")
        (crash_staged,) = _listed(before, "staged")
        assert re.fullmatch(staged_by.format(1), crash_staged)
        assert _listed(before, "published") == [] and "committed registrations: []" in before
        assert "(no committed index message)" in before
        # Recovered: the staged report was removed; the committed messages refer to attempt 2's reports.
        after = _cell_text(texts, "cluster.kill_consumer(crashed)")
        assert _listed(after, "staged") == [] and crash_staged not in after
        recovered = _committed(after)
        assert recovered and sorted(_listed(after, "published")) == sorted(p for p, _, _ in recovered)
        assert all(re.fullmatch(r"reports/reports-000/2-\d+-[0-9a-f]{16}\.json", p) for p, _, _ in recovered)
        assert f"committed registrations: ['{recovered[-1][0]}']" in after
        assert re.search(r"attempt 2; 0 committing, 0 committed but unpublished, [1-9]\d* published", after)
        assert "removed 1, pending []" in after
        # The zombie: paused after registering while its successor committed; then its prepare landed.
        paused = _cell_text(texts, "zombie = successor")
        assert _listed(paused, "staged") == [] and len(_listed(paused, "published")) > len(recovered)
        prepared = _cell_text(texts, "scans = inspect(successor)")
        (zombie_staged,) = _listed(prepared, "staged")
        assert re.fullmatch(staged_by.format(2), zombie_staged)
        # Fenced out, never committed, and cleaned up by the successor (attempt 3).
        cleaned = _cell_text(texts, "os.kill(group.pid(zombie), signal.SIGCONT)")
        assert "FencingError" in cleaned
        assert _listed(cleaned, "staged") == [] and zombie_staged not in cleaned
        assert re.search(r"attempt 3; 0 committing, 0 committed but unpublished, [1-9]\d* published", cleaned)
        assert "removed 1, pending []" in cleaned
        committed = _committed(cleaned)
        assert sorted(_listed(cleaned, "published")) == sorted(p for p, _, _ in committed)
        ids = {crash_staged.rsplit("/", 1)[1], zombie_staged.rsplit("/", 1)[1]}
        for path, sha1, verdict in committed:
            assert verdict == "SHA-1 matches" and not any(i in path for i in ids)
            assert hashlib.sha1((work / "reports" / path).read_bytes()).hexdigest() == sha1
        assert not [p for p in (work / "reports").rglob("*") if p.is_file() and ".pending" in p.parts]
        assert len(_widgets(nb)) >= 2
        assert _cell_text(texts, "%gazette down").strip("'\n ") == "cluster stopped"
        _assert_clean(nb)
    finally:
        shutil.rmtree(work, ignore_errors=True)
