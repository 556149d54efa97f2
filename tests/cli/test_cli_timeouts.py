"""`--timeout` of the journals and shards commands reaches their clients: against addresses where
nothing answers, each command ends within its timeout with one error line naming the operation,
the address and the last status (instead of retrying for ever)."""

from __future__ import annotations

import cli_run
import pytest
from cli_run import one_error_line

from gazette.cli.shards import client_timeout
from gazette.client.timeouts import DEFAULT_TIMEOUT_S

DEAD = "http://127.0.0.1:9"  # nothing listens there


def test_timeout_option_values() -> None:
    assert client_timeout(None) == DEFAULT_TIMEOUT_S
    assert client_timeout(0) is None  # 0: no bound
    assert client_timeout(2.5) == 2.5


@pytest.mark.parametrize(
    "args, expected",
    [
        (["journals", "append", "cli/timeouts/j", "-d", "x"], "append to cli/timeouts/j timed out after 1 s"),
        (["journals", "read", "cli/timeouts/j", "--block"], "read of cli/timeouts/j timed out after 1 s"),
        (["journals", "list"], "listing of journals timed out after 1 s"),
        (
            ["journals", "fragments", "cli/timeouts/j"],
            "listing of fragments of cli/timeouts/j timed out after 1 s",
        ),
    ],
)
def test_journals_commands_pass_the_timeout(args: list[str], expected: str) -> None:
    line = one_error_line(cli_run.gazette(*args, "--broker", DEAD, "--timeout", "1"))
    # A listing tries each broker once and may fail at once, naming the address either way.
    if args[1] == "list":
        assert DEAD.removeprefix("http://") in line
        return
    assert expected in line and f"(broker {DEAD}, last status UNAVAILABLE" in line


@pytest.mark.parametrize(
    "args, expected",
    [
        (["shards", "stat", "shard-1"], "stat of shard shard-1 timed out after 1 s"),
        (["shards", "list"], "listing of shards timed out after 1 s"),
        (["shards", "inspect", "shard-1"], "inspect of shard shard-1 timed out after 1 s"),
    ],
)
def test_shards_commands_pass_the_timeout(args: list[str], expected: str) -> None:
    line = one_error_line(cli_run.gazette(*args, "--consumer", DEAD, "--timeout", "1"))
    assert expected in line and f"(consumer {DEAD}, last status UNAVAILABLE" in line


def test_a_bad_timeout_is_one_line() -> None:
    line = one_error_line(cli_run.gazette("journals", "list", "--broker", DEAD, "--timeout", "-3"))
    assert "timeout -3.0 is not a positive number of seconds" in line
