"""`%gazette` by IPython's conventions: help made from the command definitions (`--help`,
`COMMAND --help`, `%gazette?`), cells that run the magics as a notebook does, DataFrame results,
and `current_cluster()` / `current_client()` for code in the notebook."""

from __future__ import annotations

import pandas as pd
import pytest

import gazette.notebook as gnb
from gazette.notebook import NotebookError
from gazette.notebook.magics import COMMANDS


def test_help_lists_every_command(shell, capsys) -> None:
    assert shell.run_line_magic("gazette", "--help") is None
    out = capsys.readouterr().out
    assert out.startswith("Usage: %gazette COMMAND ")
    for command in COMMANDS:
        assert f"\n  {command} " in out, command
    assert "Notebook-only commands:\n  up " in out


def test_command_help_shows_its_arguments(shell, capsys) -> None:
    assert shell.run_line_magic("gazette", "read --help") is None
    out = capsys.readouterr().out
    assert out.startswith("Usage: %gazette read [OPTIONS] [journal]")
    for option in (
        "-l, --selector",
        "--offset",
        "--tail",
        "--last N",
        "--committed",
        "-b, --block",
        "--timeout",
    ):
        assert option in out, option
    shell.run_cell("%%gazette append --help\nnot appended")
    assert capsys.readouterr().out.startswith("Usage: %gazette append ")


def test_question_mark_shows_a_docstring_with_every_commands_usage(shell, capsys) -> None:
    doc = shell.find_line_magic("gazette").__doc__
    assert shell.find_cell_magic("gazette").__doc__ == doc
    for command in COMMANDS:
        assert f"\n  %gazette {command}" in doc, command
    assert "%gazette read [OPTIONS] [journal]" in doc
    assert "current_cluster()" in doc and "UsageError" in doc
    capsys.readouterr()
    assert shell.run_cell("%gazette?").success
    assert "%gazette connect [OPTIONS] {BROKER}" in capsys.readouterr().out


def test_cell_magic_appends_the_body_as_one_append(shell, magics, journal) -> None:
    result = shell.run_cell(f'%%gazette append {journal}\n{{"n": 1}}\n{{"n": 2}}\n')
    assert result.success, result.error_in_exec
    table = result.result
    assert table.column("begin") == [0] and table.column("end") == [18]
    assert magics.client.read_all(journal) == b'{"n": 1}\n{"n": 2}\n'


def test_list_results_are_dataframes_with_a_sensible_text_view(magics, journal) -> None:
    magics.run(f"append {journal} -d 'a line'")
    journals = magics.run(f"journals -l name={journal}")
    assert isinstance(journals, pd.DataFrame)
    assert list(journals.columns) == ["journal", "replication", "primary", "members", "labels"]
    assert journals.loc[0, "journal"] == journal
    text = repr(journals).splitlines()
    assert text[0].split() == ["journal", "replication", "primary", "members", "labels"]  # no index
    assert journal in text[1]
    fragments = magics.run(f"fragments {journal}")
    assert isinstance(fragments, pd.DataFrame) and fragments["end"].tolist() == [7]
    empty = magics.run("journals -l name=tests/notebook/no-such-journal")
    assert empty.empty and repr(empty).endswith("(no rows)")
    status = magics.run("status")
    assert repr(status).splitlines()[0] == status.title
    html = status._repr_html_()
    assert 'class="dataframe gazette-table"' in html and f"<caption>{status.title}</caption>" in html
    derived = journals[journals["replication"] > 0]  # pandas operations give plain DataFrames
    assert type(derived) is pd.DataFrame and derived["journal"].tolist() == [journal]


def test_current_cluster_and_client_are_the_magics(magics, monkeypatch) -> None:
    assert gnb.current_cluster() is magics.cluster
    assert gnb.current_client() is magics.client
    monkeypatch.setattr(magics, "cluster", None)
    with pytest.raises(NotebookError, match="run `%gazette up` first"):
        gnb.current_cluster()
    with pytest.raises(NotebookError, match="no cluster"):
        gnb.current_client()


def test_current_cluster_after_connect_points_to_current_client(magics, monkeypatch) -> None:
    connected = magics.cluster.client()
    monkeypatch.setattr(magics, "cluster", None)
    monkeypatch.setattr(magics, "connected", connected)
    with pytest.raises(NotebookError, match="use gazette.notebook.current_client"):
        gnb.current_cluster()
    assert gnb.current_client() is connected


def test_current_cluster_without_the_magics_says_how_to_load_them(monkeypatch) -> None:
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    with pytest.raises(NotebookError, match="%load_ext gazette"):
        gnb.current_cluster()
