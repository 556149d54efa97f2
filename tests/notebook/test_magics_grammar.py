"""One grammar, not two: the `%gazette` commands the `gazette` CLI also has are parsed by the CLI's
own commands (same options, same meanings, same help), and the notebook's additions are named apart."""

from __future__ import annotations

import threading
import time

import pytest
import typer
from IPython.core.error import UsageError

from gazette.cli.main import app
from gazette.notebook import NotebookError
from gazette.notebook.magics import _COMMANDS, COMMANDS, MAGIC_COMMANDS, MAGIC_OPTIONS, SHARED

APPEND_DELAY_S = 1.0  # a helper appends this long after a blocking read from the write head began


def _cli(name: str):
    group, sub = SHARED[name]
    return typer.main.get_command(app).commands[group].commands[sub]


def _options(command) -> dict[str, bool]:
    """Each option's spellings -> whether it takes a value (flags do not)."""
    return {
        "/".join(sorted(p.opts + p.secondary_opts)): not p.is_flag
        for p in command.params
        if p.param_type_name == "option"
    }


def _arguments(command) -> list[tuple[str, bool, int]]:
    return [(p.name, p.required, p.nargs) for p in command.params if p.param_type_name == "argument"]


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_command_is_shared_or_notebook_only() -> None:
    assert set(SHARED) | set(MAGIC_COMMANDS) == set(COMMANDS) and not set(SHARED) & set(MAGIC_COMMANDS)
    assert set(MAGIC_OPTIONS) <= set(SHARED)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_commands_take_the_clis_options(name: str) -> None:
    cli, magic = _cli(name), _COMMANDS[name]
    added = {"/".join(sorted(p.opts)) for p in MAGIC_OPTIONS.get(name, [])}
    magic_options = _options(magic)
    assert {k: v for k, v in magic_options.items() if k not in added} == _options(cli)
    spellings = {o for p in cli.params for o in p.opts + p.secondary_opts}
    assert not {o for p in MAGIC_OPTIONS.get(name, []) for o in p.opts} & spellings  # named apart
    assert _arguments(magic) == _arguments(cli)
    cli_defaults = {p.name: p.default for p in cli.params}
    assert {p.name: p.default for p in magic.params if p.name in cli_defaults} == cli_defaults


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_command_help_is_the_clis(shell, name: str, capsys) -> None:
    cli = _cli(name)
    for spelling in (name, " ".join(SHARED[name])):  # `%gazette read` and `%gazette journals read`
        capsys.readouterr()
        assert shell.run_line_magic("gazette", f"{spelling} --help") is None
        out = _words(capsys.readouterr().out)
        assert out.startswith(f"Usage: %gazette {name} [OPTIONS]")
        assert _words(cli.help) in out
        for param in cli.params:
            for opt in param.opts if param.param_type_name == "option" else ():
                assert opt in out, (name, opt)
            if getattr(param, "help", None):
                assert _words(param.help) in out, (name, param.name)
        assert f"`gazette {' '.join(SHARED[name])}` of the CLI" in out


def test_notebook_only_commands_say_so(shell, capsys) -> None:
    for name in MAGIC_COMMANDS:
        shell.run_line_magic("gazette", f"{name} --help")
        assert "notebook only" in _words(capsys.readouterr().out), name
    shell.run_line_magic("gazette", "read --help")
    out = _words(capsys.readouterr().out)
    assert "--last N Only the last N rows (notebook only: not in the gazette CLI)." in out


def test_journals_selects_with_l(magics, journal) -> None:
    assert magics.run(f"journals -l name={journal}").column("journal") == [journal]
    assert magics.run(f"journals --selector name={journal}").column("journal") == [journal]
    assert magics.run(f"journals list -l name={journal}").column("journal") == [journal]  # the CLI's words
    with pytest.raises(NotebookError, match=r"unexpected extra argument\(s\) \(name="):
        magics.run(f"journals name={journal}")  # the selector is an option, as in the CLI


def test_append_and_read_select_with_l(magics, journal) -> None:
    appended = magics.run(f"append -l name={journal} -d 'by selector'")
    assert appended.column("journal") == [journal] and appended.column("end") == [12]
    magics.run(f"append {journal} -d second")
    table = magics.run(f"read -l name={journal}")
    assert list(table.columns) == ["journal", "offset", "content"]
    assert table.column("content") == ["by selector", "second"]
    assert table.column("journal") == [journal, journal]
    assert magics.run(f"read -l name={journal} --last 1").column("offset") == [12]
    with pytest.raises(NotebookError, match=r"a journal or a selector \(-l\), exactly one"):
        magics.run(f"read {journal} -l name={journal}")


def test_append_takes_lines_records_with_l_and_files_with_i(magics, journal, tmp_path) -> None:
    magics.run(f"append -l name={journal} -f lines -d 'one\ntwo'")
    assert magics.client.read_all(journal) == b"one\ntwo\n"
    (tmp_path / "in").write_bytes(b"three")
    assert magics.run(f"append {journal} -i {tmp_path / 'in'}").column("end") == [13]  # bytes as they are
    with pytest.raises(NotebookError, match="go with a selector"):
        magics.run(f"append {journal} -f lines -d x")


def test_tail_starts_at_the_write_head(magics, journal, capsys) -> None:
    magics.run(f"append {journal} -d old")
    assert magics.run(f"read {journal} --tail").empty  # the CLI's --tail: a flag, the write head
    assert magics.run(f"read {journal} --offset -1").empty  # the same, as the CLI spells it
    appender = threading.Timer(APPEND_DELAY_S, lambda: magics.client.append(journal, b"new\n"))
    appender.start()
    capsys.readouterr()
    summary = magics.run(f"read {journal} --tail --block --timeout {3 * APPEND_DELAY_S:g}")
    appender.join()
    assert capsys.readouterr().out.splitlines() == ["4\tnew"]  # not the old line
    assert summary.startswith(f"{journal}: 1 line(s) from offset 4 to 8; no new content for ")


def test_read_timeout_is_the_clis(magics, journal) -> None:
    started = time.monotonic()
    summary = magics.run(f"read {journal} --block --timeout 0.5")
    assert summary == f"{journal}: 0 line(s) from offset 0 to 0; no new content for 0.5 s"
    summary = magics.run(f"read {journal} --tail --block --timeout 0.5")
    assert summary == f"{journal}: 0 line(s) from the write head; no new content for 0.5 s"
    assert time.monotonic() - started < 30
    magics.run(f"append {journal} -d x")
    assert magics.run(f"read {journal} --timeout 5").column("content") == ["x"]  # a bound on each call


def test_a_line_naming_a_broker_uses_it(magics, journal) -> None:
    endpoint = magics.cluster.broker_endpoints[0]
    assert magics.run(f"journals -l name={journal} --broker {endpoint}").column("journal") == [journal]
    with pytest.raises(Exception, match="127.0.0.1:9"):
        magics.run("journals --broker http://127.0.0.1:9 --timeout 1")


def test_flush_takes_a_journal_or_a_selector(magics, journal) -> None:
    magics.run(f"append {journal} -d x")
    assert magics.run(f"flush -l name={journal}").column("journal") == [journal]
    magics.run(f"append {journal} -d y")
    assert magics.run(f"flush {journal}").column("begin") == [2]


def test_click_errors_fail_the_cell_with_one_usage_line(shell, magics, capsys) -> None:
    for line, needle in [
        ("read tests/x --bogus", "%gazette read: No such option: --bogus"),
        ("read tests/x --offset", "%gazette read: Option '--offset' requires an argument."),
        ("journals -o xml", "%gazette journals: Invalid value for '-o' / '--output'"),
    ]:
        capsys.readouterr()
        result = shell.run_cell(f"%gazette {line}")
        assert type(result.error_in_exec) is UsageError
        err = capsys.readouterr().err
        assert err.startswith(f"UsageError: {needle}") and err.count("\n") == 1, err
