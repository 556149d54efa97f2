"""The `%gazette` line magic and `%%gazette` cell magic: start a LocalCluster bound to the kernel
(`up`/`down`/`status`) or attach to a running cluster (`connect BROKER[,BROKER] [--etcd URL]`, e.g.
real Gazette brokers), then `journals`, `apply`, `append`, `read`, `fragments`, `flush`, `shards` and
`stat` (the `gazette` CLI's commands) and `publish` from a cell. `current_cluster()` /
`current_client()` hand them to code.

One grammar, not two: a command the CLI has is parsed by the CLI's own click command (from
`gazette.cli`, `SHARED` names which), so it takes exactly the CLI's arguments and options, with their
meanings, defaults and help; it runs on the notebook's cluster unless its line names another
(`--broker`, `--consumer`, ...). The few options a notebook adds have names the CLI does not use
(`MAGIC_OPTIONS`), and the notebook-only commands (`MAGIC_COMMANDS`) are small click commands here.

By IPython's conventions: results are `Table`s (pandas DataFrames with a title); a failed command
raises `UsageError`, one line naming what was wrong, so the cell fails; `%gazette --help` and
`%gazette COMMAND --help` print help made from those command definitions, which also make the
docstring `%gazette?` shows. `read --block` prints lines as they arrive (the read runs on the
client's loop thread, so it works while the kernel's own loop runs) until `--timeout` seconds pass
without new content, or an interrupt.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import dataclasses
import html
import importlib
import queue
import shlex
import threading
import time
from collections.abc import Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pandas as pd
import typer
import yaml
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from gazette.cli.main import app as cli_app
from gazette.cli.shards import client_timeout
from gazette.client.sync import Client
from gazette.client.timeouts import USE_CLIENT_DEFAULT, CallTimeout, Timeout
from gazette.local.cluster import LocalCluster
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import load_specs_yaml

# click as typer carries it (newer typers vendor their own copy): the classes typer's commands use.
_click: Any = importlib.import_module(typer.BadParameter.__module__.rpartition(".")[0])

# The commands the CLI has: the magic's name -> the CLI's command path (`gazette journals list`).
SHARED: dict[str, tuple[str, str]] = {
    "journals": ("journals", "list"),
    "apply": ("journals", "apply"),
    "append": ("journals", "append"),
    "read": ("journals", "read"),
    "fragments": ("journals", "fragments"),
    "flush": ("journals", "flush"),
    "shards": ("shards", "list"),
    "stat": ("shards", "stat"),
}
COMMANDS = (
    "up",
    "connect",
    "down",
    "status",
    "journals",
    "apply",
    "append",
    "read",
    "fragments",
    "publish",
    "flush",
    "shards",
    "stat",
)
CELL_COMMANDS = ("append", "apply", "publish")  # the commands that take a `%%gazette` cell body
# Errors of the user's input or of the cluster, shown as one UsageError line; others are bugs and
# keep their traceback.
USER_ERRORS = (GazetteError, ValueError, OSError, yaml.YAMLError)
ROUTE_TIMEOUT_S = 60.0  # how long `apply` on a connected cluster waits for new journals' primaries
ROUTE_POLL_S = 0.05
BLOCK_POLL_S = 0.1  # a blocking read's printer wakes this often, so Ctrl-C (an interrupt) is seen
# The options that point a shared command at another cluster than the notebook's, when given.
JOURNAL_CONNECTION = ("broker", "etcd", "auth_keys", "cert_file", "cert_key_file", "trusted_ca_file")
SHARD_CONNECTION = ("consumer", "etcd", "root", "auth_keys", "cert_file", "cert_key_file", "trusted_ca_file")


class NotebookError(UsageError, ValueError):
    """A `%gazette` command was malformed or cannot run in the current state. A `UsageError`: the
    magic re-raises it as one, which IPython shows as its one line, without a traceback."""


class Table(pd.DataFrame):
    """A command's result: a pandas DataFrame whose `title` (for example the cluster's etcd and
    store) heads its HTML and text views; `column(name)` is that column as a list. Derived frames
    (`table[...]`, `table.head()`) are plain DataFrames."""

    _metadata = ["title"]
    title: str = ""

    def column(self, name: str) -> list[Any]:
        return self[name].tolist()  # type: ignore[no-any-return]

    def _repr_html_(self) -> str:  # type: ignore[override]
        table = self.to_html(
            index=False,
            classes="gazette-table",
            border=0,
            max_rows=pd.get_option("display.max_rows"),
            max_cols=pd.get_option("display.max_columns"),
        )
        if not self.title:
            return table
        head, rest = table.split(">", 1)  # after the opening <table ...> tag
        return f"{head}>\n  <caption>{html.escape(self.title)}</caption>{rest}"

    def __repr__(self) -> str:
        if self.empty:
            text = "  ".join(str(c) for c in self.columns) + "\n(no rows)"
        else:
            text = self.to_string(
                index=False,
                max_rows=pd.get_option("display.max_rows"),
                min_rows=pd.get_option("display.min_rows"),
                max_colwidth=pd.get_option("display.max_colwidth"),
            )
        return f"{self.title}\n{text}" if self.title else text


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> Table:
    table = Table([list(r) for r in rows], columns=list(columns))
    table.title = title
    return table


# --- the grammar ------------------------------------------------------------------------------------
_INTRO = """\
A Gazette cluster from a notebook: `%gazette up` starts a LocalCluster bound to this kernel (or
`%gazette connect BROKER` attaches to a running one); the other commands work on that cluster.
`%%gazette append|apply|publish ...` takes its data from the cell body. Results are pandas
DataFrames; a failed command raises UsageError with one line, so the cell fails. In code, use
gazette.notebook.current_cluster() and current_client()."""

_SHARED_NOTE = """\
The commands of the `gazette` CLI take exactly its arguments and options (their help is the CLI's;
`%gazette journals list ...` and `%gazette shards stat ...` are spelled as in the CLI too) and run on
this notebook's cluster unless the line names another (--broker, --consumer, --etcd with --root).
Options that write files or other formats (-o json|yaml, read's -o FILE and --offsets) are the
CLI's: run `!gazette ...` for them."""


NOTEBOOK_ONLY = "(notebook only: not in the gazette CLI)"
# The notebook's own grammar, read from these signatures by typer as the CLI's is: the commands the
# CLI has not, and the options a notebook adds to a shared command (under names the CLI does not
# use). The magic parses with them and runs its `_cmd_*` methods; these functions are never called.
notebook_app = typer.Typer(add_completion=False)


class _Mode(StrEnum):
    inprocess = "inprocess"
    subprocess = "subprocess"


@notebook_app.command(
    "up",
    help="Start a LocalCluster bound to this kernel; `down` or the kernel's exit stops it (notebook "
    "only: not in the gazette CLI, whose `gazette local up` serves a terminal).",
)
def _up(
    brokers: int = typer.Option(1, "--brokers", metavar="N", help="How many brokers."),
    mode: _Mode = typer.Option(_Mode.inprocess, "--mode", help="Brokers in this process or in subprocesses."),
    store: str | None = typer.Option(
        None, "--store", metavar="URL", help="Fragment store (default: file:// under a temp dir)."
    ),
) -> None:
    pass


@notebook_app.command(
    "connect",
    help="Attach to a running cluster (for example real Gazette brokers): later commands use it. The "
    f"brokers must answer a listing, so a wrong address fails here; `down` detaches {NOTEBOOK_ONLY}.",
)
def _connect(
    broker: str = typer.Argument(
        ..., metavar="BROKER", help="Broker endpoints, BROKER[,BROKER...]: tried in turn."
    ),
    etcd: str | None = typer.Option(
        None, "--etcd", metavar="URL", help="Its etcd, for `shards/stat --root`."
    ),
) -> None:
    pass


@notebook_app.command(
    "down", help=f"Stop the cluster started by `up`, or detach from the cluster of `connect` {NOTEBOOK_ONLY}."
)
def _down() -> None:
    pass


@notebook_app.command("status", help=f"The cluster's brokers, or the endpoints connected to {NOTEBOOK_ONLY}.")
def _status() -> None:
    pass


@notebook_app.command(
    "publish",
    help="Publish committed JSON messages to a journal: one message as JSON, or one per line of the "
    f"cell body {NOTEBOOK_ONLY}.",
)
def _publish(
    journal: str = typer.Argument(..., help="Journal name."),
    json: str | None = typer.Argument(None, metavar="JSON", help="The line magic's message."),
) -> None:
    pass


@notebook_app.command("read-options")  # not a command: the options `read` adds
def _read_options(
    last: int | None = typer.Option(
        None, "--last", metavar="N", help=f"Only the last N rows {NOTEBOOK_ONLY}."
    ),
    committed: bool = typer.Option(
        False, "--committed", help=f"Committed messages only, without ACKs {NOTEBOOK_ONLY}."
    ),
) -> None:
    pass


_CLI: Any = typer.main.get_command(cli_app)  # the `gazette` command's click group
_NOTEBOOK: Any = typer.main.get_command(notebook_app)
MAGIC_COMMANDS: dict[str, Any] = {
    n: _NOTEBOOK.commands[n] for n in ("up", "connect", "down", "status", "publish")
}
# Options a notebook adds to shared commands.
MAGIC_OPTIONS: dict[str, list[Any]] = {"read": _NOTEBOOK.commands["read-options"].params}


def _build_commands() -> dict[str, Any]:
    """Every command's click command: the CLI's own for shared ones (with the notebook's extra
    options, if any, on a copy), the notebook's for the others."""
    commands: dict[str, Any] = {}
    for name in COMMANDS:
        if name not in SHARED:
            commands[name] = MAGIC_COMMANDS[name]
            continue
        group, sub = SHARED[name]
        command = _CLI.commands[group].commands[sub]
        extra = MAGIC_OPTIONS.get(name, [])
        if extra:
            clash = {o for p in extra for o in p.opts} & {o for p in command.params for o in p.opts}
            assert not clash, f"notebook options {clash} of {name} are the CLI's"
            command = copy.copy(command)
            command.params = [*command.params, *extra]
        commands[name] = command
    return commands


_COMMANDS = _build_commands()


# What a shared command does in a notebook, beyond the CLI's help.
NOTEBOOK_NOTES = {
    "journals": "Returns a DataFrame: journal, replication, primary, members, labels.",
    "apply": "The YAML comes from the cell body (%%gazette apply) or --specs FILE; specs naming no "
    "store get the store of the cluster `up` started; waits until upserted journals have a primary.",
    "append": "The data comes from the cell body (%%gazette append JOURNAL) or -d TEXT, each with a "
    "final newline added when missing, or from -i FILE. Returns a DataFrame: journal, begin, end, sha1.",
    "read": "Returns a DataFrame of the lines read to the write head (offset, content; with -l the "
    "journal first); --block prints them as they arrive instead, until --timeout seconds pass "
    "without new content, or an interrupt.",
    "fragments": "Returns a DataFrame: begin, end, codec, store, mod_time, sha1 (and url with --url-ttl).",
    "flush": "Returns a DataFrame of the persisted fragments: journal, begin, end, store.",
    "shards": "Without --consumer or --root, the shards of the newest consumer application "
    "cluster.run_consumer(...) started. Returns a DataFrame: shard, sources, replicas, ...",
    "stat": "Without --consumer or --root, a shard of the newest consumer application "
    "cluster.run_consumer(...) started. Returns a DataFrame: journal, read through, publish at.",
}


def _help(name: str) -> str:
    """`%gazette NAME --help`: the command's help as click formats it (plain text, not rich's boxes),
    and for a shared command what the notebook does with it."""
    command = _COMMANDS[name]
    ctx = command.make_context(f"%gazette {name}", [], resilient_parsing=True)
    formatter = ctx.make_formatter()
    _click.Command.format_help(command, ctx, formatter)
    if name in SHARED:
        with formatter.section("In a notebook"):
            formatter.write_text(
                f"`gazette {' '.join(SHARED[name])}` of the CLI, run on this notebook's cluster "
                f"unless the line names another. {NOTEBOOK_NOTES[name]}"
            )
    return formatter.getvalue()


def _usage(name: str) -> str:
    command = _COMMANDS[name]
    ctx = command.make_context(f"%gazette {name}", [], resilient_parsing=True)
    pieces = command.collect_usage_pieces(ctx)
    return " ".join([f"%gazette {name}", *pieces])


def _overview() -> str:
    """`%gazette --help`: every command with its one-line summary."""
    width = max(len(n) for n in COMMANDS)

    def line(name: str) -> str:
        summary = _COMMANDS[name].get_short_help_str(limit=80)
        where = f"(gazette {' '.join(SHARED[name])}) " if name in SHARED else ""
        return f"  {name:<{width}}  {where}{summary}"

    return "\n".join(
        [
            "Usage: %gazette COMMAND [ARGS]...   (%%gazette COMMAND [ARGS]... with a cell body)",
            "",
            _INTRO,
            "",
            _SHARED_NOTE,
            "",
            "Commands of the gazette CLI:",
            *(line(n) for n in COMMANDS if n in SHARED),
            "",
            "Notebook-only commands:",
            *(line(n) for n in COMMANDS if n not in SHARED),
            "",
            "`%gazette COMMAND --help` shows one command's arguments and options.",
        ]
    )


def _magic_doc() -> str:
    """`%gazette?`: the same words as `--help`, with every command's usage."""
    lines = [
        "%gazette COMMAND [ARGS]  /  %%gazette COMMAND [ARGS] + cell body",
        "",
        _INTRO,
        "",
        _SHARED_NOTE,
        "",
        "Commands:",
    ]
    for name in COMMANDS:
        lines += [f"  {_usage(name)}", f"      {_COMMANDS[name].get_short_help_str(limit=100)}"]
    lines += ["", "`%gazette --help` and `%gazette COMMAND --help` print the commands' help."]
    return "\n".join(lines)


# The spellings of earlier magics that the CLI's grammar does not take, and what it takes instead.
EXTRA_ARGUMENT_HINTS = {
    "journals": "a selector goes with -l, e.g. -l prefix=examples/",
    "shards": "a selector goes with -l, e.g. -l id=count-000",
    "append": "the data goes with -d TEXT, or in a %%gazette cell body",
    "read": "--tail is a flag, start at the write head; the last N rows are --last N",
}


class _Args(SimpleNamespace):
    """A command's parsed arguments (`ctx.params`), with `given`: the names set on its line."""

    given: frozenset[str]
    command: Any

    def opt(self, *names: str) -> str:
        """How the line spells the parameters `names` (e.g. "-o/--output")."""
        params = {p.name: p for p in self.command.params}
        return ", ".join("/".join(params[n].opts) for n in names)


def parse(name: str, args: Sequence[str]) -> _Args | None:
    """`args` parsed by command `name`'s definition (None: `--help` was asked, and printed); a bad
    line is a NotebookError naming what was wrong, as click says it."""
    command = _COMMANDS[name]
    if "--help" in args:
        print(_help(name))
        return None
    try:
        ctx = command.make_context(f"%gazette {name}", list(args))
    except _click.exceptions.ClickException as err:
        message = " ".join(err.format_message().replace("Value error, ", "").split())  # as the CLI's
        if message.startswith("Got unexpected extra argument") and name in EXTRA_ARGUMENT_HINTS:
            message += f" ({EXTRA_ARGUMENT_HINTS[name]})"
        raise NotebookError(f"%gazette {name}: {message}") from None
    commandline = _click.core.ParameterSource.COMMANDLINE
    given = frozenset(p.name for p in command.params if ctx.get_parameter_source(p.name) == commandline)
    return _Args(**ctx.params, given=given, command=command)


def _call_timeout(seconds: float | None) -> Timeout:
    """A shared command's `--timeout` for one call: not given, the client's default; 0, no bound."""
    return USE_CLIENT_DEFAULT if seconds is None else client_timeout(seconds)


def _cli_only(name: str, ns: _Args, *names: str, why: str) -> None:
    """Refuses CLI options the notebook does not do, naming them and the CLI command that does."""
    used = [n for n in names if n in ns.given]
    if used:
        raise NotebookError(
            f"%gazette {name}: {ns.opt(*used)} {why}: run `!gazette {' '.join(SHARED[name])} ...` for it"
        )


def _table_output(name: str, ns: _Args) -> None:
    if ns.output != "table":
        raise NotebookError(
            f"%gazette {name}: -o {ns.output} is the CLI's (the magic returns a DataFrame: use its "
            f"to_json() or to_csv()): run `!gazette {' '.join(SHARED[name])} -o {ns.output} ...` for it"
        )


@magics_class
class GazetteMagics(Magics):
    """`%gazette COMMAND ...`; the cluster started by `up` is stopped by `down` or at kernel exit."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.cluster: LocalCluster | None = None
        self._client: Client | None = None
        self.connected: Client | None = None  # the client of `%gazette connect`

    # --- entry point ------------------------------------------------------------------------------
    @line_cell_magic
    def gazette(self, line: str, cell: str | None = None) -> Any:
        # The docstring `%gazette?` shows is made from the command definitions (_magic_doc).
        try:
            return self.run(line, cell)
        except NotebookError as err:  # IPython shows exactly UsageError (not subclasses) as one line
            raise UsageError(str(err)) from None
        except USER_ERRORS as err:
            raise UsageError(_one_line(line, err)) from None

    def run(self, line: str, cell: str | None = None) -> Any:
        """Runs one command and returns its result (None after printing a help text); raises the
        command's own errors, NotebookError or the client's (for code and tests)."""
        try:
            words = shlex.split(line)
        except ValueError as err:
            raise NotebookError(f"%gazette {line!r}: {err}") from None
        if not words:
            raise NotebookError(
                f"%gazette needs a command, one of {', '.join(COMMANDS)} (see %gazette --help)"
            )
        if words[0] in ("--help", "-h", "help"):
            print(_overview())
            return None
        name, args = _command_of(words)
        ns = parse(name, args)
        if ns is None:
            return None
        if cell is not None and cell.strip() and name not in CELL_COMMANDS:
            raise NotebookError(f"%%gazette {name} takes no cell body (only {', '.join(CELL_COMMANDS)} do)")
        method = getattr(self, f"_cmd_{name}")
        return method(ns, cell)

    # --- state ------------------------------------------------------------------------------------
    @property
    def client(self) -> Client:
        if self._client is not None:
            return self._client
        if self.connected is not None:
            return self.connected
        if self.cluster is None:
            raise NotebookError(
                "no cluster: run `%gazette up` or `%gazette connect BROKER` first (or set magics.client)"
            )
        return self.cluster.client()

    @client.setter
    def client(self, value: Client | None) -> None:
        self._client = value

    def shard_client(self, root: str | None = None) -> Any:
        """A ShardClient of the consumers under `root` (in the cluster's etcd), or else of the
        newest consumer group the cluster started with `run_consumer`."""
        from gazette.consumer.client import ShardClient

        if root is not None:
            return ShardClient(etcd=self._etcd(), root=root)
        if self.cluster is None or not getattr(self.cluster, "_consumer_groups", None):
            raise NotebookError("no consumers: start them with cluster.run_consumer(...) or pass --root ROOT")
        return self.cluster.shard_client()

    def _etcd(self) -> str:
        """The etcd of the cluster started or connected to."""
        etcd = self.cluster.etcd_endpoint if self.cluster is not None else None
        if etcd is None and self.connected is not None:
            etcd = self.connected.etcd
        if etcd is None:
            raise NotebookError("no cluster: run `%gazette up` or `%gazette connect BROKER --etcd URL` first")
        return etcd

    @contextlib.contextmanager
    def _journal_client(self, ns: _Args) -> Iterator[Client]:
        """The notebook's client, or (when the line names a cluster: --broker, --etcd, --auth-keys,
        the TLS files) a client of that one, as the CLI makes it, closed after the command."""
        if not ns.given & set(JOURNAL_CONNECTION):
            yield self.client
            return
        from gazette.auth.tls import TLSConfig

        tls = TLSConfig.of(ns.cert_file, ns.cert_key_file, ns.trusted_ca_file)
        with Client(
            ns.broker, ns.etcd, timeout=client_timeout(ns.timeout), auth_keys=ns.auth_keys, tls=tls
        ) as client:
            yield client

    @contextlib.contextmanager
    def _shards_client(self, name: str, ns: _Args) -> Iterator[Any]:
        """The shard client a shard command's line names (--consumer; --root, in --etcd or the
        cluster's), else the newest consumer group's of this cluster."""
        from gazette.auth.tls import TLSConfig
        from gazette.consumer.client import ShardClient

        if not ns.given & set(SHARD_CONNECTION):
            yield self.shard_client()
            return
        if "consumer" in ns.given and "root" in ns.given:
            raise NotebookError(f"%gazette {name}: --consumer or --root, not both")
        if "etcd" in ns.given and "root" not in ns.given:
            raise NotebookError(f"%gazette {name}: --etcd goes with --root (the consumers' etcd root)")
        tls = TLSConfig.of(ns.cert_file, ns.cert_key_file, ns.trusted_ca_file)
        timeout = client_timeout(ns.timeout)
        if "consumer" in ns.given:
            client = ShardClient(ns.consumer, timeout=timeout, auth_keys=ns.auth_keys, tls=tls)
        elif "root" in ns.given:
            etcd = ns.etcd if "etcd" in ns.given else self._etcd()
            client = ShardClient(etcd=etcd, root=ns.root, timeout=timeout, auth_keys=ns.auth_keys, tls=tls)
        else:
            raise NotebookError(
                f"%gazette {name}: {ns.opt(*sorted(ns.given & set(SHARD_CONNECTION)))} needs "
                "--consumer URL or --root ROOT: which consumers to ask"
            )
        with client:
            yield client

    def _shutdown(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.close()

    # --- notebook-only commands ---------------------------------------------------------------------
    def _cmd_up(self, ns: _Args, cell: str | None) -> Table:
        if self.cluster is not None:
            raise NotebookError("a cluster is already up: run `%gazette down` first")
        if self.connected is not None:
            raise NotebookError(f"connected to {self.connected.broker}: run `%gazette down` first")
        if ns.brokers < 1:
            raise NotebookError(f"%gazette up --brokers {ns.brokers}: needs at least 1 broker")
        self.cluster = LocalCluster(brokers=ns.brokers, mode=str(ns.mode), store=ns.store).start()
        _at_exit(self._shutdown)
        return self._cmd_status(ns, cell)

    def _cmd_connect(self, ns: _Args, cell: str | None) -> Table:
        """Later commands use a client of the running cluster at BROKER (several comma-separated
        endpoints fail over in turn); `--etcd` lets `shards/stat --root` find its consumers.
        The brokers must answer a listing first, so a wrong address fails here."""
        if self.cluster is not None:
            raise NotebookError("a cluster is up here: run `%gazette down` before connecting elsewhere")
        client = Client(ns.broker, ns.etcd)
        try:
            journals = client.list_journals()
        except BaseException:
            client.close()
            raise
        self._disconnect()
        self.connected = client
        return self._connection_table(len(journals))

    def _disconnect(self) -> None:
        if self.connected is not None:
            client, self.connected = self.connected, None
            client.close()

    def _connection_table(self, journals: int | None = None) -> Table:
        assert self.connected is not None
        rows = [[endpoint, "connected"] for endpoint in self.connected.aio.endpoints]  # in failover order
        title = f"etcd {self.connected.etcd or '(not given)'}"
        if journals is not None:
            title += f", {journals} journal(s)"
        return _table(["endpoint", "state"], rows, title=title)

    def _cmd_down(self, ns: _Args, cell: str | None) -> str:
        if self.cluster is None and self.connected is not None:
            broker = self.connected.broker
            self._disconnect()
            return f"disconnected from {broker}"
        if self.cluster is None:
            raise NotebookError("no cluster is up")
        self._shutdown()
        return "cluster stopped"

    def _cmd_status(self, ns: _Args, cell: str | None) -> Table:
        if self.cluster is None and self.connected is not None:
            return self._connection_table()
        if self.cluster is None:
            raise NotebookError("no cluster is up: run `%gazette up`")
        rows = [
            [h.index, h.endpoint, h.zone, "running" if h.running else "stopped"] for h in self.cluster.brokers
        ]
        title = f"etcd {self.cluster.etcd_endpoint}, store {self.cluster.store}"
        return _table(["broker", "endpoint", "zone", "state"], rows, title=title)

    def _cmd_publish(self, ns: _Args, cell: str | None) -> Table:
        from gazette.message.publisher import Publisher

        if cell is not None and ns.json is not None:
            raise NotebookError(
                "%%gazette publish takes its messages from the cell body, not a JSON argument"
            )
        text = cell if cell is not None else ns.json
        if text is None:
            raise NotebookError(
                "%gazette publish JOURNAL JSON (or %%gazette publish JOURNAL, one JSON per line)"
            )
        messages = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                messages.append(orjson.loads(line))
            except orjson.JSONDecodeError as err:
                raise NotebookError(f"%gazette publish: {line!r} is not JSON ({err})") from None
        with Publisher(self.client) as pub:
            futures = [pub.publish_committed(ns.journal, m) for m in messages]
            pub.flush()
        ends = [f.result().end for f in futures]
        return _table(["journal", "messages", "end"], [[ns.journal, len(messages), max(ends, default=0)]])

    # --- the CLI's commands (`gazette journals ...`, `gazette shards ...`) ------------------------------
    def _cmd_journals(self, ns: _Args, cell: str | None) -> Table:
        _table_output("journals", ns)
        with self._journal_client(ns) as client:
            infos = client.list_journals(ns.selector or None, timeout=_call_timeout(ns.timeout))
        rows = []
        for info in infos:
            route = info.route
            primary = route.primary_id[1] if route.primary_id is not None else "-"
            members = ",".join(suffix for _zone, suffix in route.members)
            rows.append([info.spec.name, info.spec.replication, primary, members, _labels(info.spec)])
        return _table(["journal", "replication", "primary", "members", "labels"], rows)

    def _cmd_apply(self, ns: _Args, cell: str | None) -> Table:
        """`%%gazette apply` with gazctl-style YAML in the cell (or `--specs FILE`); specs naming no
        store persist to the cluster's store when the cluster was started here. Waits for the
        upserted journals' routes (on this notebook's cluster)."""
        from_file = str(ns.specs) != "-"
        if from_file and cell is not None and cell.strip():
            raise NotebookError("%%gazette apply takes its YAML from the cell body or --specs FILE, not both")
        text = Path(ns.specs).read_text() if from_file else cell
        if not text or not text.strip():
            raise NotebookError("%%gazette apply needs journal specs YAML in the cell body (or --specs FILE)")
        changes = load_specs_yaml(text)
        here = not ns.given & set(JOURNAL_CONNECTION)
        if here and self.cluster is not None:
            changes = [
                dataclasses.replace(ch, spec=dataclasses.replace(ch.spec, stores=(self.cluster.store,)))
                if not ch.delete and not ch.spec.stores
                else ch
                for ch in changes
            ]
        for ch in changes:
            if not ch.delete:
                ch.spec.validate()
        rows = [[ch.spec.name, "delete" if ch.delete else "upsert"] for ch in changes]
        if ns.dry_run:
            return _table(["journal", "change"], rows, title="dry run: nothing applied")
        upserted = [ch.spec.name for ch in changes if not ch.delete]
        with self._journal_client(ns) as client:
            client.apply_journals(changes, timeout=_call_timeout(ns.timeout))
            if here and self.cluster is not None and upserted:
                self.cluster.wait_for_routes(upserted)
            elif here and upserted and self.connected is not None and self._client is None:
                _wait_for_primaries(self.connected, upserted)
        return _table(["journal", "change"], rows)

    def _cmd_append(self, ns: _Args, cell: str | None) -> Table:
        """Appends the cell body, `-d TEXT` (each with a final newline added when missing) or the
        bytes of `-i FILE`: to JOURNAL in one append, or with `-l` as the CLI maps records."""
        from gazette.cli.journal_io import plan_appends

        if bool(ns.journal) == bool(ns.selector):
            raise NotebookError("%gazette append takes a journal or a selector (-l), exactly one of the two")
        if ns.journal and (ns.framing != "none" or ns.mapping != "random" or ns.b64):
            raise NotebookError(
                "%gazette append: --framing, --mapping and --base64 go with a selector (-l), not a journal name"
            )
        sources = [
            what
            for what, present in (
                ("the cell body", cell is not None),
                ("-d/--data", ns.data is not None),
                ("-i/--input", ns.input_file != "-"),
            )
            if present
        ]
        if len(sources) > 1:
            raise NotebookError(
                f"%gazette append takes its data from one of the cell body, -d/--data and -i/--input, "
                f"not {' and '.join(sources)}"
            )
        if not sources:
            raise NotebookError(
                "%gazette append JOURNAL -d TEXT (or -i FILE, or %%gazette append JOURNAL with a cell body)"
            )
        if ns.input_file != "-":
            data = Path(ns.input_file).read_bytes()
        else:
            data = (cell if cell is not None else ns.data).encode()
            if not data.endswith(b"\n"):
                data += b"\n"
        timeout = _call_timeout(ns.timeout)
        with self._journal_client(ns) as client:
            if ns.journal:
                plan = {ns.journal: [data]}
            else:
                plan = plan_appends(client, ns.selector, data, ns.framing, ns.mapping, ns.b64)
            rows = []
            for name, records in plan.items():
                res = client.append(name, records, timeout=timeout)
                rows.append([res.journal, res.begin, res.end, res.sha1])
        return _table(["journal", "begin", "end", "sha1"], rows)

    def _cmd_read(self, ns: _Args, cell: str | None) -> Table | str:
        """Rows of a journal's lines (or, with --committed, its committed messages) from --offset
        (--tail: the write head) to the head or --end-offset; with -l, of every selected journal
        (fully suspended ones skipped). --block prints lines as they arrive instead."""
        files: list[str] = [n for n in ("offsets_in", "offsets_out") if n in ns.given]
        if ns.output != "-":
            files.insert(0, "output")
        _cli_only("read", ns, *files, why="reads or writes files")
        if bool(ns.journal) == bool(ns.selector):
            raise NotebookError("%gazette read takes a journal or a selector (-l), exactly one of the two")
        if ns.offset < -1:
            raise NotebookError(f"%gazette read --offset {ns.offset}: must be >= 0 (or -1: the write head)")
        if ns.last is not None and ns.last < 1:
            raise NotebookError(f"%gazette read --last {ns.last}: must be >= 1")
        if ns.block:
            if ns.committed or ns.last is not None or ns.selector:
                raise NotebookError(
                    "%gazette read --block prints one journal's raw lines: it takes no --committed, --last or -l"
                )
            return self._read_blocking(ns)
        from gazette.protocol.spec import SuspendLevel

        timeout = _call_timeout(ns.timeout)
        start = -1 if ns.tail else ns.offset
        rows: list[list[Any]] = []
        with self._journal_client(ns) as client:
            if ns.journal:
                names = [ns.journal]
            else:
                infos = client.list_journals(ns.selector, timeout=timeout)
                names = [i.spec.name for i in infos if i.spec.suspend_level != SuspendLevel.FULL]
            for name in names:
                if start < 0:  # a read from the write head finds nothing committed yet
                    continue
                if ns.committed:
                    found = self._read_committed(client, name, start, ns)
                else:
                    found = _lines(client.read_all(name, start, ns.end_offset, timeout=timeout), start)
                rows += [[name, *row] if ns.selector else row for row in found]
        if ns.last is not None:
            rows = rows[-ns.last :]
        columns = ["offset", "uuid", "message"] if ns.committed else ["offset", "content"]
        return _table(["journal", *columns] if ns.selector else columns, rows)

    @staticmethod
    def _read_committed(client: Client, journal: str, start: int, ns: _Args) -> list[list[Any]]:
        from gazette.message.reader import ReadCommitted

        rows = []
        with ReadCommitted(client, journal, start, end_offset=ns.end_offset, skip_acks=True) as reader:
            for env in reader:
                rows.append([env.begin, str(env.uuid), orjson.dumps(_strip_meta(env.message)).decode()])
                if ns.last is not None:
                    rows = rows[-ns.last :]
        return rows

    def _read_blocking(self, ns: _Args) -> str:
        """Prints each line of `ns.journal` from its start as it is appended, until `--timeout`
        seconds pass without new content (never without one), --end-offset or an interrupt;
        returns a one-line summary."""
        chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        done = object()
        idle = []
        with self._journal_client(ns) as client:

            async def pump() -> None:
                try:
                    async for chunk in client.aio.read(
                        ns.journal,
                        -1 if ns.tail else ns.offset,
                        block=True,
                        end_offset=ns.end_offset,
                        timeout=_call_timeout(ns.timeout),
                    ):
                        chunks.put(chunk)
                except CallTimeout as err:
                    if getattr(err, "last_status", None) is None:  # no content came for --timeout s
                        idle.append(err)
                    else:
                        chunks.put(err)
                except Exception as err:  # handed to the printer, which raises it in the cell
                    chunks.put(err)
                finally:
                    chunks.put(done)

            future = asyncio.run_coroutine_threadsafe(pump(), _loop_of(client))
            started, printed = time.monotonic(), _Printed(-1 if ns.tail else ns.offset)
            how = "reached the end offset"
            try:
                printed.drain(chunks, done)  # a function: an interrupt anywhere in its loop lands here
                if idle:
                    how = f"no new content for {ns.timeout:g} s"
            except KeyboardInterrupt:
                how = f"interrupted after {time.monotonic() - started:.1f} s"
            finally:
                future.cancel()
        printed.finish()
        span = f"from offset {printed.begin} to {printed.at}" if printed.at >= 0 else "from the write head"
        return f"{ns.journal}: {printed.lines} line(s) {span}; {how}"

    def _cmd_fragments(self, ns: _Args, cell: str | None) -> Table:
        _table_output("fragments", ns)
        timeout = _call_timeout(ns.timeout)
        with self._journal_client(ns) as client:
            listed = client.fragments_with_urls(ns.journal, ns.from_, ns.to, ns.url_ttl, timeout=timeout)
        columns = ["begin", "end", "codec", "store", "mod_time", "sha1"] + (["url"] if ns.url_ttl else [])
        rows = [
            [f.begin, f.end, f.codec.name, f.store_url or "(spooled)", _mod_time(f.mod_time), f.sha1]
            + ([url] if ns.url_ttl else [])
            for f, url in listed
        ]
        return _table(columns, rows)

    def _cmd_flush(self, ns: _Args, cell: str | None) -> Table:
        if ns.journal and ns.selector:
            raise NotebookError("%gazette flush takes a journal or a selector (-l), not both")
        timeout = _call_timeout(ns.timeout)
        rows = []
        with self._journal_client(ns) as client:
            if ns.journal:
                names = [ns.journal]
            else:
                names = [i.spec.name for i in client.list_journals(ns.selector or None, timeout=timeout)]
            for name in names:
                frag = client.flush(name, timeout=timeout)
                if frag is not None:
                    rows.append([name, frag.begin, frag.end, frag.store_url])
        return _table(["journal", "begin", "end", "store"], rows)

    def _cmd_shards(self, ns: _Args, cell: str | None) -> Table:
        from gazette.cli.shards import shard_lags

        _table_output("shards", ns)
        with self._shards_client("shards", ns) as shards:
            infos = shards.list_shards(ns.selector or None, timeout=_call_timeout(ns.timeout))
            lags = {}
            if ns.lag:
                broker = ns.broker if "broker" in ns.given else ",".join(self.client.aio.endpoints)
                lags = shard_lags(shards, infos, broker)
        columns = ["shard", "sources", "replicas"] + (["rf"] if ns.rf else [])
        columns += [f"label {n}" for n in ns.label_columns]
        columns += (["lag"] + (["source lag"] if ns.verbose else [])) if ns.lag else []
        rows = []
        for info in infos:
            replicas = " ".join(f"{r.suffix}:{r.status.code.name}" for r in info.replicas)
            row = [info.spec.id, ",".join(s.journal for s in info.spec.sources), replicas or "-"]
            if ns.rf:
                row.append(0 if info.spec.disable else 1 + info.spec.hot_standbys)
            row += [",".join(info.spec.labels.values_of(n)) or "<none>" for n in ns.label_columns]
            if ns.lag:
                lagged = lags.get(info.spec.id)
                row.append("" if lagged is None else sum(lagged.values()))
                if ns.verbose:
                    row.append(", ".join(f"{j}={n}" for j, n in (lagged or {}).items()))
            rows.append(row)
        return _table(columns, rows)

    def _cmd_stat(self, ns: _Args, cell: str | None) -> Table:
        from gazette.cli.shards import _offsets as read_through_offsets  # the CLI's -r parser

        _table_output("stat", ns)
        offsets = read_through_offsets(ns.read_through)
        with self._shards_client("stat", ns) as shards:
            stat = shards.stat_shard(ns.shard, offsets or None, timeout=_call_timeout(ns.timeout))
        rows = [[j, o, stat.publish_at.get(j, "")] for j, o in sorted(stat.read_through.items())]
        return _table(
            ["journal", "read through", "publish at"], rows, title=f"{stat.shard} at {stat.member[1]}"
        )


def _command_of(words: list[str]) -> tuple[str, list[str]]:
    """The magic's command and its arguments; the CLI's spelling (`journals list`, `shards stat`)
    names the same command."""
    first = words[0]
    if first in ("journals", "shards") and len(words) > 1 and not words[1].startswith("-"):
        for name, path in SHARED.items():
            if path == (first, words[1]):
                return name, words[2:]
        group = _CLI.commands[first]
        if words[1] in group.commands:
            raise NotebookError(
                f"%gazette {first} {words[1]} is the CLI's only: run `!gazette {first} {words[1]} ...`"
            )
    if first not in COMMANDS:
        raise NotebookError(
            f'%gazette command "{first}" is not known (expected one of {", ".join(COMMANDS)})'
        )
    return first, words[1:]


def _lines(data: bytes, start: int) -> list[list[Any]]:
    """`data` read from offset `start` as rows of (offset, line without its newline)."""
    rows, at = [], start
    for line in data.splitlines(keepends=True):
        rows.append([at, line.decode(errors="replace").rstrip("\n")])
        at += len(line)
    return rows


@dataclasses.dataclass
class _Printed:
    """A blocking read's printer: whole lines as they arrive, each after its offset."""

    at: int  # the offset of the next line (-1 until the first chunk of a read from the write head)
    lines: int = 0
    partial: bytes = b""
    begin: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.begin = self.at

    def drain(self, chunks: queue.SimpleQueue[Any], done: object) -> None:
        """Prints chunks until `done` (raising an exception put in its place)."""
        while True:
            try:
                item = chunks.get(timeout=BLOCK_POLL_S)
            except queue.Empty:
                item = None
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            if item is not None:
                if self.at < 0:
                    self.at = self.begin = item.offset
                *complete, self.partial = (self.partial + item.content).split(b"\n")
                for line in complete:
                    print(f"{self.at}\t{line.decode(errors='replace')}", flush=True)
                    self.at += len(line) + 1
                    self.lines += 1

    def finish(self) -> None:
        if self.partial:
            print(f"{self.at}\t{self.partial.decode(errors='replace')} (partial line)", flush=True)


def _wait_for_primaries(client: Client, names: list[str]) -> None:
    """Waits until the broker lists each journal with a primary, so that appends find it (a broker
    that has not yet seen a new journal answers JOURNAL_NOT_FOUND)."""
    deadline = time.monotonic() + ROUTE_TIMEOUT_S
    while True:
        routed = {i.spec.name for i in client.list_journals() if i.route.primary >= 0}
        missing = [n for n in names if n not in routed]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise NotebookError(f"journals {missing[:5]} have no primary after {ROUTE_TIMEOUT_S:.0f} s")
        time.sleep(ROUTE_POLL_S)


def _labels(spec: Any) -> str:
    labels = getattr(spec, "labels", None)
    return "" if labels is None else ",".join(f"{k}={v}" for k, v in labels)


def _mod_time(unix_s: int) -> pd.Timestamp | None:
    """A fragment's persistence time (None while it is only spooled: Gazette's mod_time 0)."""
    return pd.Timestamp(unix_s, unit="s", tz="UTC") if unix_s else None


def _one_line(line: str, err: BaseException) -> str:
    """`err` as the one line of a UsageError, naming the command and the error's class."""
    text = " ".join(part.strip() for part in str(err).splitlines() if part.strip()) or repr(err)
    command = line.split(None, 1)[0] if line.strip() else ""
    return f"%gazette {command}: {type(err).__name__}: {text}"


def _strip_meta(message: Any) -> Any:
    if isinstance(message, dict) and "_meta" in message:
        return {k: v for k, v in message.items() if k != "_meta"}
    return message


def _loop_of(client: Any) -> asyncio.AbstractEventLoop:
    """The event loop a sync Client's async core lives on (its LoopThread's)."""
    from gazette.client.loop import default_loop

    loop_thread = getattr(client, "_loop", None) or default_loop()
    return loop_thread.loop  # type: ignore[no-any-return]


def _at_exit(fn: Any) -> None:
    """Runs `fn` at interpreter exit before thread pools refuse work (in-process brokers need them):
    threading's exit hooks run before atexit's, last registered first."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(fn)
    else:
        atexit.register(fn)


def _loaded() -> GazetteMagics:
    """The magics registered in the running IPython kernel."""
    from IPython import get_ipython

    shell = get_ipython()
    magics = None if shell is None else shell.magics_manager.registry.get(GazetteMagics.__name__)
    if magics is None:
        raise NotebookError("the %gazette magics are not loaded here: run `%load_ext gazette` first")
    return magics  # type: ignore[no-any-return]


def current_cluster() -> LocalCluster:
    """The LocalCluster that `%gazette up` started in this kernel, for code in the notebook's cells
    (`cluster.client()`, `cluster.journal_spec(...)`, `cluster.run_consumer(...)`). Raises
    NotebookError when none is up (after `%gazette connect`, use `current_client()`)."""
    magics = _loaded()
    if magics.cluster is None:
        if magics.connected is not None:
            raise NotebookError(
                f"no LocalCluster here: `%gazette connect` attached to {magics.connected.broker}; "
                "use gazette.notebook.current_client()"
            )
        raise NotebookError("no LocalCluster here: run `%gazette up` first")
    return magics.cluster


def current_client() -> Client:
    """The client the `%gazette` commands use: the `up` cluster's or the `connect`ed one's."""
    return _loaded().client


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext gazette.notebook`: registers the `%gazette` / `%%gazette` magics."""
    ipython.register_magics(GazetteMagics(ipython))


GazetteMagics.gazette.__doc__ = _magic_doc()
