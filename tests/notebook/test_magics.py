"""`%gazette` magics in a real IPython shell against a cluster started by `%gazette up`."""

from __future__ import annotations

import _thread
import asyncio
import io
import signal
import sys
import threading
import time

import orjson
import pandas as pd
import pytest
from IPython.core.error import UsageError

from gazette.message import Publisher
from gazette.notebook import NotebookError, Table


def test_status_lists_running_brokers(magics) -> None:
    status = magics.run("status")
    assert isinstance(status, Table) and isinstance(status, pd.DataFrame)
    assert status.column("state") == ["running"]
    assert magics.cluster.etcd_endpoint in repr(status)


def test_journals_shows_routes_and_labels(magics, journal) -> None:
    table = magics.run(f"journals -l name={journal}")
    assert table.column("journal") == [journal]
    assert table.column("primary") == ["broker-0"]
    assert "content-type=application/x-ndjson" in table.column("labels")[0]
    assert "<table" in table._repr_html_() and journal in table._repr_html_()


def test_line_and_cell_append_then_read_with_tail(shell, magics, journal) -> None:
    first = shell.run_line_magic("gazette", f"append {journal} -d 'one line'")
    assert (first.column("begin"), first.column("end")) == ([0], [9])
    cell = shell.run_cell_magic("gazette", f"append {journal}", "two\nthree")
    assert cell.column("begin") == [9]  # the whole body is one append
    assert cell.column("end") == [19]
    every = magics.run(f"read {journal}")
    assert every.column("content") == ["one line", "two", "three"]
    assert every.column("offset") == [0, 9, 13]
    assert magics.run(f"read {journal} --last 1").column("content") == ["three"]
    assert magics.run(f"read {journal} --offset 9").column("content") == ["two", "three"]


def test_read_committed_skips_an_unacknowledged_transaction(magics, journal) -> None:
    client = magics.client
    published = magics.run(f"publish {journal} '{{\"n\": 1}}'")
    assert published.column("messages") == [1]
    pending = Publisher(client)
    pending.publish_uncommitted(journal, {"n": 2})
    pending.flush()
    pending.close()
    raw = magics.run(f"read {journal}").column("content")
    assert len(raw) == 2
    committed = magics.run(f"read {journal} --committed")
    assert [orjson.loads(m) for m in committed.column("message")] == [{"n": 1}]


def test_fragments_and_flush_persist(magics, journal) -> None:
    magics.run(f"append {journal} -d x")
    before = magics.run(f"fragments {journal}")
    assert before.column("store") == ["(spooled)"]
    flushed = magics.run(f"flush {journal}")
    assert flushed.column("end") == [2]
    after = magics.run(f"fragments {journal}")
    assert after.column("store") == [magics.cluster.store]
    assert before.column("mod_time") == [None]  # only spooled: no persistence time yet
    (persisted_at,) = after.column("mod_time")
    assert isinstance(persisted_at, pd.Timestamp) and str(persisted_at.tz) == "UTC"


@pytest.mark.parametrize(
    "line, needle",
    [
        ("", "needs a command"),
        ("bogus", 'command "bogus" is not known'),
        ("read", "takes a journal or a selector (-l), exactly one of the two"),
        ("read tests/x --offset -3", "--offset -3: must be >= 0 (or -1: the write head)"),
        ("read tests/x --last 0", "--last 0: must be >= 1"),
        ("read tests/x --tail 1", "unexpected extra argument(s) (1) (--tail is a flag"),  # the CLI's
        ("read tests/x --offset x", "Invalid value for '--offset'"),
        ("read tests/x -o out.txt", "-o/--output reads or writes files: run `!gazette journals read ...`"),
        ("journals -o json", "-o json is the CLI's"),
        ("journals prefix=x/", "(prefix=x/) (a selector goes with -l"),
        ("journals edit -l prefix=x/", "journals edit is the CLI's only"),
        ("up", "already up"),
        ("up --mode threads", "Invalid value for '--mode'"),
        ("append 'unclosed", "No closing quotation"),
        ("append tests/notebook/none", "-d TEXT"),
        ("append tests/notebook/none 'text'", "(text) (the data goes with -d TEXT"),
        ("shards", "no consumers"),
        ("stat", "Missing argument 'shard'"),
        ("read tests/x --block --committed", "takes no --committed, --last or -l"),
    ],
)
def test_bad_commands_raise_named_errors(shell, magics, line, needle, capsys) -> None:
    with pytest.raises(NotebookError, match=None) as info:
        magics.run(line)
    assert needle in str(info.value)
    failed = _run_failing_cell(shell, f"%gazette {line}", capsys)  # the magic fails its cell
    assert needle in failed


def _run_failing_cell(shell, source: str, capsys) -> str:
    """Runs `source` as a cell that must fail with one UsageError line and no traceback (as IPython
    shows a magic's usage errors); returns that line."""
    capsys.readouterr()
    result = shell.run_cell(source)
    assert not result.success
    assert type(result.error_in_exec) is UsageError  # exactly: IPython tracebacks its subclasses
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.startswith("UsageError: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def test_errors_fail_the_cell_with_one_line(shell, magics, capsys) -> None:
    err = _run_failing_cell(shell, "%gazette read tests/notebook/missing-journal", capsys)
    assert err.startswith("UsageError: %gazette read: GazetteError: JOURNAL_NOT_FOUND")
    with pytest.raises(UsageError, match="JOURNAL_NOT_FOUND"):
        shell.run_line_magic("gazette", "read tests/notebook/missing-journal")


def test_cell_append_refuses_a_text_argument(shell, magics, journal, capsys) -> None:
    assert "cell body" in _run_failing_cell(shell, f"%%gazette append {journal} -d extra\nbody", capsys)


def test_cell_body_is_refused_where_a_command_takes_none(shell, magics, capsys) -> None:
    err = _run_failing_cell(shell, "%%gazette journals\nprefix=x/", capsys)
    assert "%%gazette journals takes no cell body" in err


def test_bad_cell_yaml_fails_the_cell(shell, magics, capsys) -> None:
    err = _run_failing_cell(shell, "%%gazette apply\nname: [unclosed", capsys)
    assert err.startswith("UsageError: %gazette apply: ")


def test_cell_apply_creates_routed_journals_on_the_clusters_store(shell, magics) -> None:
    yaml = """
name: tests/notebook/applied/
replication: 1
labels:
  - name: content-type
    value: application/x-ndjson
children:
  - name: tests/notebook/applied/a
  - name: tests/notebook/applied/b
"""
    table = shell.run_cell_magic("gazette", "apply", yaml)
    assert table.column("journal") == ["tests/notebook/applied/a", "tests/notebook/applied/b"]
    listed = magics.run("journals -l prefix=tests/notebook/applied/")
    assert listed.column("primary") == ["broker-0", "broker-0"]
    magics.run("append tests/notebook/applied/a -d z")
    assert magics.run("flush tests/notebook/applied/a").column("store") == [magics.cluster.store]
    with pytest.raises(NotebookError, match="YAML in the cell body"):
        magics.run("apply")


DEADLINE_S = 30.0
BLOCK_TIMEOUT_S = 3.0


class _Stdout(io.StringIO):
    """Captures printed text and sets `seen` once `needle` was printed (so a helper thread can act
    exactly when a blocking read is under way)."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle = needle
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        n = super().write(text)
        if self.needle in self.getvalue():
            self.seen.set()
        return n


def _when_seen(out: _Stdout, action) -> threading.Thread:
    def run() -> None:
        if out.seen.wait(DEADLINE_S):
            action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_blocking_read_prints_arrivals_until_its_timeout(shell, magics, journal, monkeypatch) -> None:
    asyncio.get_running_loop()  # this test's loop runs in this thread, as a kernel's does under a cell
    client = magics.client
    client.append(journal, b"first\n")
    out = _Stdout("0\tfirst")
    monkeypatch.setattr(sys, "stdout", out)
    helper = _when_seen(out, lambda: client.append(journal, b"second\npart"))  # after the read began
    started = time.monotonic()
    summary = shell.run_line_magic("gazette", f"read {journal} --block --timeout {BLOCK_TIMEOUT_S:g}")
    elapsed = time.monotonic() - started
    helper.join(DEADLINE_S)
    monkeypatch.undo()
    assert out.getvalue().splitlines() == ["0\tfirst", "6\tsecond", "13\tpart (partial line)"]
    # --timeout is the CLI's: the read ends once that long passed without new content.
    assert summary == f"{journal}: 2 line(s) from offset 0 to 13; no new content for {BLOCK_TIMEOUT_S:g} s"
    assert elapsed >= BLOCK_TIMEOUT_S  # it kept waiting at the head until the timeout
    assert client.read_all(journal) == b"first\nsecond\npart"  # the next read is unaffected


def test_blocking_read_stops_cleanly_on_an_interrupt(magics, journal, monkeypatch) -> None:
    magics.client.append(journal, b"a\nb\n")
    out = _Stdout("2\tb")
    monkeypatch.setattr(sys, "stdout", out)
    # Ctrl-C as a kernel delivers it: Python's own SIGINT handler raising KeyboardInterrupt. Whatever
    # handler earlier code left installed (interrupt_main does nothing under SIG_IGN) is put back after.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _when_seen(out, _thread.interrupt_main)  # Ctrl-C once both lines were printed
        # The timeout only bounds a lost interrupt: the read must end by the interrupt, long before.
        summary = magics.run(f"read {journal} --block --offset 0 --timeout {DEADLINE_S:.0f}")
    finally:
        signal.signal(signal.SIGINT, previous)
        monkeypatch.undo()
    assert out.getvalue().splitlines() == ["0\ta", "2\tb"]
    assert summary.startswith(f"{journal}: 2 line(s) from offset 0 to 4; interrupted after ")


def test_blocking_read_errors_fail_the_cell_with_one_line(shell, magics, capsys) -> None:
    err = _run_failing_cell(shell, "%gazette read tests/notebook/missing-journal --block --timeout 5", capsys)
    assert "JOURNAL_NOT_FOUND" in err
