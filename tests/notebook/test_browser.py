"""Notebooks in a real browser: JupyterLab on loopback, Debian's Chromium driven by Playwright.

The quickstart: every cell run from the Run menu and the keyboard, and DOM checks that the widgets
rendered and that the journal view's write head moved when the flush cell appended. 06-operations: run
from the Run menu, its matplotlib charts checked decoded as PNG images and its fragment timeline drawn.
05-streaming-to-delta is run once, by test_notebook_delta.py, which opens the executed notebook here
(`render_executed`) and checks its outputs rendered, rather than spend Spark's minutes on a second run.

Screenshots of each stage go to build/screenshots/. Skips when /usr/bin/chromium is absent, saying how to
install it; under CI that fails instead (tests/needs.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from needs import CHROMIUM, CHROMIUM_STEP, missing

REPO = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "01-quickstart.ipynb"
SCREENSHOT_DIR = REPO / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 15.0
KERNEL_IDLE_TIMEOUT_S = 60.0
CELLS_TIMEOUT_S = 90.0
UI_TIMEOUT_MS = 30_000
VIEWPORT = {"width": 1280, "height": 900}
MAX_SCREENSHOT_HEIGHT_PX = 12_000
FAILED_SCREENSHOT = "01-quickstart-failed.png"

# Cells located by how their source starts, so edits elsewhere in the notebook do not move the stages.
FLUSH_CELL = 'committed.publish_committed("examples/words/part-000", {"word": "after"})'
CLEANUP_CELL = "for p in (committed, acked, dangling):"
DOWN_CELL = "%gazette down"
MAGIC_ERROR_PREFIX = "gazette: "  # how a failed %gazette command reports on stderr (no traceback)

# JupyterLab user settings: no news/update toasts (they fetch from the web) and every cell attached
# to the DOM (the default windowing leaves off-screen cells unrendered).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


@pytest.fixture(autouse=True)
def chromium() -> None:
    """Every test here drives Debian's Chromium: without it they skip, or fail under CI."""
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is absent (Debian's chromium, which Playwright drives here)", CHROMIUM_STEP)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class LabServer:
    """A `jupyter lab` subprocess serving `root_dir` on 127.0.0.1 with a token."""

    proc: subprocess.Popen[bytes]
    port: int
    token: str
    root_dir: pathlib.Path
    log_path: pathlib.Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.base_url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
        with opener.open(request, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def dump_kernel_stacks(self) -> None:
        """SIGABRT to this server's kernels: with PYTHONFAULTHANDLER set, each writes the Python stack of
        every thread to its stderr (this log) before it dies. For a failure's report: what was stuck."""
        for pid in _children(self.proc.pid):
            try:
                cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"ipykernel" in cmdline:
                    os.kill(pid, signal.SIGABRT)
            except OSError:
                continue
        time.sleep(1.0)  # the dump is written synchronously; give the log a moment to receive it

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")  # answers only once the server and its auth are up
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"jupyter lab not answering /api after {SERVER_START_TIMEOUT_S}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Shuts the kernels down through the REST API (so their clusters stop), then the server."""
        if self.proc.poll() is None:
            try:
                for kernel in self.api("GET", "/api/kernels"):
                    self.api("DELETE", f"/api/kernels/{kernel['id']}")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # the server is going anyway; its own shutdown stops the kernels it started
            self.proc.terminate()
        try:
            self.proc.wait(SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(SERVER_STOP_TIMEOUT_S)


def _children(pid: int) -> list[int]:
    """The ids of `pid`'s child processes (from /proc)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def lab(tmp_path: pathlib.Path) -> Iterator[LabServer]:
    """JupyterLab on a copy of the quickstart notebook, its config/data/runtime dirs all under tmp."""
    with serve_lab(tmp_path, [NOTEBOOK]) as server:
        yield server


@contextlib.contextmanager
def serve_lab(tmp_path: pathlib.Path, notebooks: list[pathlib.Path]) -> Iterator[LabServer]:
    """JupyterLab on copies of `notebooks` (in tmp_path/notebooks), its config/data/runtime dirs all
    under tmp_path; stopped, with its kernels, on exit."""
    root_dir = tmp_path / "notebooks"
    root_dir.mkdir(parents=True)
    for notebook in notebooks:
        shutil.copy(notebook, root_dir / notebook.name)
    config_dir = tmp_path / "jupyter-config"
    for name, settings in LAB_SETTINGS.items():
        path = config_dir / "lab" / "user-settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
    env.update(
        JUPYTER_CONFIG_DIR=str(config_dir),
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"),
        JUPYTER_PLATFORM_DIRS="0",
        IPYTHONDIR=str(tmp_path / "ipython"),
        PYTHONFAULTHANDLER="1",  # a kernel sent SIGABRT writes every thread's stack to the log
    )
    port, token = _free_port(), secrets.token_hex(16)
    log_path = tmp_path / "jupyter-lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab",
                "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
                f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
                "--LabApp.news_url=",
            ],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    server = LabServer(proc, port, token, root_dir, log_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(tmp_path: pathlib.Path) -> Iterator[Any]:
    """A Chromium page from a fresh user-data dir."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            user_data_dir=str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,  # type: ignore[arg-type]
        )
        try:
            context.set_default_timeout(UI_TIMEOUT_MS)
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


# One poll of the notebook: each cell's source start, prompt and output text, and the error outputs.
_CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')).map(cell => ({
  code: cell.classList.contains('jp-CodeCell'),
  source: (cell.querySelector('.cm-content')?.innerText ?? '').trim(),
  prompt: (cell.querySelector('.jp-InputArea-prompt')?.innerText ?? '').trim(),
  errors: Array.from(cell.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')).map(e => e.innerText),
  output: Array.from(cell.querySelectorAll('.jp-OutputArea-output')).map(e => e.innerText).join('\\n'),
}))"""


def _cells(page: Any) -> list[dict[str, Any]]:
    return list(page.evaluate(_CELLS_JS))


def _index(cells: list[dict[str, Any]], source_start: str) -> int:
    for i, cell in enumerate(cells):
        if cell["source"].startswith(source_start):
            return i
    raise AssertionError(f"no cell starting with {source_start!r} in the notebook")


def _wait_executed(
    page: Any, stop: int, start: int = 0, timeout_s: float = CELLS_TIMEOUT_S
) -> list[dict[str, Any]]:
    """Waits until every code cell in [start, stop) shows an execution count (not `[*]` nor empty);
    fails at once, with the text, when any cell shows a traceback or a %gazette error."""
    deadline = time.monotonic() + timeout_s
    while True:
        cells = _cells(page)
        for cell in cells:
            failed = [e for e in cell["errors"] if "Traceback" in e or e.startswith(MAGIC_ERROR_PREFIX)]
            assert not failed, f"cell {cell['source'][:60]!r} failed:\n{failed[0]}"
        pending = [
            f"{c['prompt']} {c['source'][:60]}"
            for c in cells[start:stop]
            if c["code"] and not re.fullmatch(r"\[\d+\]:", c["prompt"])
        ]
        if not pending:
            return cells
        if time.monotonic() > deadline:
            raise AssertionError(f"cells not executed after {timeout_s}s ([*] running): {pending}")
        page.wait_for_timeout(250)


def _select(page: Any, index: int) -> None:
    """Makes cell `index` the active one in command mode (a click on its input prompt)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-prompt").click()
    page.wait_for_function(
        "i => document.querySelectorAll('.jp-Notebook .jp-Cell')[i].classList.contains('jp-mod-active')",
        arg=index,
    )


def _run_menu(page: Any, item: str) -> None:
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item", has_text=item).first.click()


def _labelled_value(page: Any, view_css: str, label: str) -> str:
    """The value shown by the `label` text/number widget inside the view with class `view_css`."""
    row = page.locator(f"{view_css} .widget-inline-hbox", has=page.locator(".widget-label", has_text=label))
    return str(row.locator("input").input_value())


_SCROLLER = ".jp-NotebookPanel .jp-WindowedPanel-outer"  # the notebook's own scrolling box


def _screenshot(page: Any, name: str) -> pathlib.Path:
    """A full-notebook screenshot: the viewport grows to the notebook's height first (JupyterLab
    scrolls inside its own panel, so a plain full-page shot shows one screen)."""
    height = page.evaluate(
        f"() => {{ const s = document.querySelector('{_SCROLLER}');"
        " return s.scrollHeight + (window.innerHeight - s.clientHeight); }"
    )
    page.set_viewport_size({"width": VIEWPORT["width"], "height": min(int(height), MAX_SCREENSHOT_HEIGHT_PX)})
    page.evaluate(f"() => document.querySelector('{_SCROLLER}').scrollTo(0, 0)")
    page.wait_for_timeout(300)  # one layout pass for the resized panel; the shot is not asserted on
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / name
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(VIEWPORT)  # type: ignore[arg-type]
    return path


@pytest.mark.timeout(180)
def test_quickstart_in_jupyterlab(lab: LabServer, page: Any) -> None:
    """All cells run in three stages, since the notebook's cleanup cell closes the widgets (their views
    leave the DOM): above the flush cell, then through the checks, then the cleanup and `down`."""
    (SCREENSHOT_DIR / FAILED_SCREENSHOT).unlink(missing_ok=True)
    try:
        page.goto(f"{lab.base_url}/lab/tree/{NOTEBOOK.name}?token={lab.token}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for()
        page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=KERNEL_IDLE_TIMEOUT_S * 1000)
        file_browser_tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
        if file_browser_tab.count():
            file_browser_tab.click()  # folds the file browser: the notebook gets the width of the screenshots
        cells = _cells(page)
        flush, cleanup, down = (_index(cells, s) for s in (FLUSH_CELL, CLEANUP_CELL, DOWN_CELL))
        assert all(c["prompt"] in ("[ ]:", "") for c in cells), "the copied notebook has executed cells"

        # Stage 1: every cell above the flush, from Run > Run All Above Selected Cell.
        _select(page, flush)
        _run_menu(page, "Run All Above Selected Cell")
        cells = _wait_executed(page, flush)
        notebook = page.locator(".jp-Notebook")
        for css in (
            ".gazette-sequencer-view table.gazette-producers",
            ".gazette-sequencer-view .widget-hprogress",
            ".gazette-checkpoint-view table.gazette-offsets",
            ".gazette-cluster-view table.gazette-journals",
            ".gazette-journal-view svg.gazette-timeline rect",
            ".gazette-journal-view table.gazette-fragments",
            ".jp-OutputArea-output table.gazette-table",  # %gazette journals
        ):
            assert notebook.locator(css).count() >= 1, f"{css} did not render"
        assert notebook.locator(".gazette-view").count() == 4
        cluster_rows = notebook.locator(".gazette-cluster-view table.gazette-journals tbody tr")
        assert cluster_rows.count() == 2
        words_row = cluster_rows.filter(has_text="examples/words/part-000").locator("td").all_inner_texts()
        assert words_row[1] != "-", f"no primary shown: {words_row}"
        head_before = int(_labelled_value(page, ".gazette-journal-view", "write head"))
        assert head_before == int(words_row[3]) > 0, (head_before, words_row)
        assert _labelled_value(page, ".gazette-cluster-view", "journals") == "2"
        committed = cells[_index(cells, "uncommitted_words =")]["output"]
        assert "committed:   ['hello', 'world', 'acked', 'by-commit']" in committed, committed
        _screenshot(page, "01-quickstart-1-widgets.png")

        # Stage 2: the flush cell and those below it up to the cleanup, one by one with Shift+Enter.
        for i in range(flush, cleanup):
            _select(page, i)
            page.keyboard.press("Shift+Enter")
            cells = _wait_executed(page, i + 1, start=i)
        view = notebook.locator(".gazette-journal-view")
        printed = re.search(r"write head (\d+) -> (\d+)", cells[flush]["output"])
        assert printed, cells[flush]["output"]
        assert int(printed[1]) == head_before
        head_after = int(_labelled_value(page, ".gazette-journal-view", "write head"))
        assert head_after == int(printed[2]) > head_before  # the browser's widget followed the kernel's model
        fills = view.locator("svg.gazette-timeline rect").evaluate_all(
            "rs => rs.map(r => r.getAttribute('fill'))"
        )
        assert fills and set(fills) == {"#4a90d9"}, f"timeline not all persisted after the flush: {fills}"
        assert "(spooled)" not in view.locator("table.gazette-fragments").inner_text()
        assert "QUICKSTART OK" in "\n".join(c["output"] for c in cells[:cleanup])
        _screenshot(page, "01-quickstart-2-flushed.png")

        # Stage 3: the rest, from Run > Run Selected Cell and All Below; the views close, the cluster stops.
        _select(page, cleanup)
        _run_menu(page, "Run Selected Cell and All Below")
        cells = _wait_executed(page, len(cells))
        assert "cluster stopped" in cells[down]["output"], cells[down]["output"]
        page.wait_for_function("() => document.querySelectorAll('.jp-Notebook .gazette-view').length === 0")
        _screenshot(page, "01-quickstart-3-done.png")
    except BaseException:
        with contextlib.suppress(Exception):
            _screenshot(page, FAILED_SCREENSHOT)  # what the browser showed when the test failed
        lab.dump_kernel_stacks()
        print(f"jupyter lab log (tail):\n{lab.log_tail(200)}")  # the kernel's stderr lands there too
        raise


OPERATIONS = REPO / "notebooks" / "06-operations.ipynb"
OPERATIONS_CELLS_TIMEOUT_S = 150.0  # the notebook's kill and restart take ~50 s alone; the browser adds to it
CHART_CELL = "t = [s[0] for s in samples]"
OPERATIONS_CLEANUP_CELL = "journal_view.close()"


def _open_notebook(page: Any, lab: LabServer, name: str) -> list[dict[str, Any]]:
    """Opens notebooks/`name` in JupyterLab once its kernel is idle, the file browser folded; its cells."""
    page.goto(f"{lab.base_url}/lab/tree/{name}?token={lab.token}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=KERNEL_IDLE_TIMEOUT_S * 1000)
    file_browser_tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if file_browser_tab.count():
        file_browser_tab.click()
    return _cells(page)


def _images(page: Any, index: int) -> list[dict[str, Any]]:
    """The images cell `index` shows in its outputs: their decoded size and the start of their source."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    return list(
        cell.locator(".jp-OutputArea-output img").evaluate_all(
            "is => is.map(i => ({complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,"
            " src: i.getAttribute('src').slice(0, 22)}))"
        )
    )


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_operations_notebook_charts_render_in_jupyterlab(tmp_path: pathlib.Path, page: Any) -> None:
    """06-operations run from the Run menu in two stages: through the checks (the charts render as
    decoded PNG images, the journal view's fragment timeline as SVG, the checks pass), then the
    cleanup and `down`."""
    failed = "06-operations-failed.png"
    (SCREENSHOT_DIR / failed).unlink(missing_ok=True)
    with serve_lab(tmp_path, [OPERATIONS]) as lab:
        try:
            cells = _open_notebook(page, lab, OPERATIONS.name)
            chart, cleanup, down = (
                _index(cells, s) for s in (CHART_CELL, OPERATIONS_CLEANUP_CELL, DOWN_CELL)
            )
            assert all(c["prompt"] in ("[ ]:", "") for c in cells), "the copied notebook has executed cells"

            _select(page, cleanup)
            _run_menu(page, "Run All Above Selected Cell")
            cells = _wait_executed(page, cleanup, timeout_s=OPERATIONS_CELLS_TIMEOUT_S)
            page.wait_for_function(
                "i => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')[i]"
                ".querySelectorAll('.jp-OutputArea-output img')).some(img => img.complete && img.naturalWidth > 0)",
                arg=chart,
            )
            (image,) = _images(page, chart)
            assert (
                image["src"] == "data:image/png;base64," and image["width"] >= 600 and image["height"] >= 300
            )
            assert not [i for k, c in enumerate(cells) if k != chart for i in _images(page, k)], (
                "charts elsewhere"
            )
            notebook = page.locator(".jp-Notebook")
            assert notebook.locator(".gazette-journal-view svg.gazette-timeline rect").count() >= 1
            fills = notebook.locator(".gazette-journal-view svg.gazette-timeline rect").evaluate_all(
                "rs => rs.map(r => r.getAttribute('fill'))"
            )
            assert set(fills) == {"#4a90d9"}, f"timeline not all persisted after the flush: {fills}"
            checks = "\n".join(c["output"] for c in cells[:cleanup])
            assert re.search(r"kill marked: \['(\S+) killed', '\1 restarted'\]", checks), checks
            assert "final lag: 0 bytes" in checks and "OPERATIONS OK" in checks
            _screenshot(page, "06-operations-1-charts.png")

            _select(page, cleanup)
            _run_menu(page, "Run Selected Cell and All Below")
            cells = _wait_executed(page, len(cells))
            assert "cluster stopped" in cells[down]["output"], cells[down]["output"]
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .gazette-view').length === 0"
            )
        except BaseException:
            with contextlib.suppress(Exception):
                _screenshot(page, failed)
            lab.dump_kernel_stacks()
            print(f"jupyter lab log (tail):\n{lab.log_tail(200)}")
            raise


def render_executed(tmp_path: pathlib.Path, notebook: pathlib.Path, selectors: list[str]) -> dict[str, Any]:
    """Opens the already executed `notebook` in JupyterLab in Chromium without running it, and answers
    what rendered: each cell's output text (`cells`), the count of each of `selectors` in the notebook
    (`found`), and the error outputs (`errors`). A screenshot goes to build/screenshots/<stem>-rendered.png.
    For notebooks too slow to run twice (05 runs Spark): their test executes them, this checks the result."""
    from playwright.sync_api import sync_playwright

    with serve_lab(tmp_path, [notebook]) as lab, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            user_data_dir=str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport=VIEWPORT,  # type: ignore[arg-type]
        )  # fmt: skip
        try:
            context.set_default_timeout(UI_TIMEOUT_MS)
            page = context.pages[0] if context.pages else context.new_page()
            cells = _open_notebook(page, lab, notebook.name)
            page.locator(".jp-Notebook .jp-OutputArea-output").first.wait_for()
            found = {css: page.locator(f".jp-Notebook {css}").count() for css in selectors}
            errors = page.locator(
                '.jp-Notebook .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]'
            )
            _screenshot(page, f"{notebook.stem}-rendered.png")
            return {"cells": cells, "found": found, "errors": errors.all_inner_texts()}
        finally:
            context.close()
