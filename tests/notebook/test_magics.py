"""`%gazette` magics in a real IPython shell against a cluster started by `%gazette up`."""

from __future__ import annotations

import orjson
import pytest

from gazette.message import Publisher
from gazette.notebook import NotebookError, Table


def test_status_lists_running_brokers(magics) -> None:
    status = magics.run("status")
    assert isinstance(status, Table)
    assert status.column("state") == ["running"]
    assert magics.cluster.etcd_endpoint in repr(status)


def test_journals_shows_routes_and_labels(magics, journal) -> None:
    table = magics.run(f"journals name={journal}")
    assert table.column("journal") == [journal]
    assert table.column("primary") == ["broker-0"]
    assert "content-type=application/x-ndjson" in table.column("labels")[0]
    assert "<table" in table._repr_html_() and journal in table._repr_html_()


def test_line_and_cell_append_then_read_with_tail(shell, magics, journal) -> None:
    first = shell.run_line_magic("gazette", f"append {journal} 'one line'")
    assert (first.column("begin"), first.column("end")) == ([0], [9])
    cell = shell.run_cell_magic("gazette", f"append {journal}", "two\nthree")
    assert cell.column("begin") == [9]  # the whole body is one append
    assert cell.column("end") == [19]
    every = magics.run(f"read {journal}")
    assert every.column("content") == ["one line", "two", "three"]
    assert every.column("offset") == [0, 9, 13]
    assert magics.run(f"read {journal} --tail 1").column("content") == ["three"]
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
    magics.run(f"append {journal} x")
    before = magics.run(f"fragments {journal}")
    assert before.column("store") == ["(spooled)"]
    flushed = magics.run(f"flush {journal}")
    assert flushed.column("end") == [2]
    after = magics.run(f"fragments {journal}")
    assert after.column("store") == [magics.cluster.store]


@pytest.mark.parametrize(
    "line, needle",
    [
        ("", "needs a command"),
        ("bogus", 'command "bogus" is not known'),
        ("read", "the following arguments are required: journal"),
        ("read tests/x --offset -3", "--offset -3: must be >= 0"),
        ("read tests/x --tail 0", "--tail 0: must be >= 1"),
        ("up", "already up"),
        ("up --mode threads", "invalid choice"),
        ("append 'unclosed", "No closing quotation"),
        ("append tests/notebook/none", "TEXT"),
        ("shards", "no consumers"),
        ("stat", "the following arguments are required: shard"),
    ],
)
def test_bad_commands_raise_named_errors(magics, line, needle) -> None:
    with pytest.raises(NotebookError, match=None) as info:
        magics.run(line)
    assert needle in str(info.value)


def test_errors_print_one_line_without_traceback(shell, magics, capsys) -> None:
    assert shell.run_line_magic("gazette", "read tests/notebook/missing-journal") is None
    err = capsys.readouterr().err
    assert err.startswith("gazette: ")
    assert "JOURNAL_NOT_FOUND" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cell_append_refuses_a_text_argument(shell, magics, journal, capsys) -> None:
    assert shell.run_cell_magic("gazette", f"append {journal} extra", "body") is None
    assert "cell body" in capsys.readouterr().err


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
    listed = magics.run("journals prefix=tests/notebook/applied/")
    assert listed.column("primary") == ["broker-0", "broker-0"]
    magics.run("append tests/notebook/applied/a z")
    assert magics.run("flush tests/notebook/applied/a").column("store") == [magics.cluster.store]
    with pytest.raises(NotebookError, match="YAML in the cell body"):
        magics.run("apply")
