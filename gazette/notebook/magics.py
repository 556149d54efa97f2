"""The `%gazette` line magic and `%%gazette` cell magic: start a LocalCluster bound to the kernel
(`up`/`down`/`status`) or attach to a running cluster (`connect BROKER[,BROKER] [--etcd URL]`, e.g.
real Gazette brokers), then `journals`, `apply`, `append`, `publish`, `read`, `fragments`, `flush`,
`shards` and `stat` from a cell. `current_cluster()` / `current_client()` hand them to code.

By IPython's conventions: results are `Table`s (pandas DataFrames with a title); a failed command
raises `UsageError`, one line naming what was wrong, so the cell fails; `%gazette --help` and
`%gazette COMMAND --help` print help made from the argument definitions below, which also make the
docstring `%gazette?` shows. `read --block` prints lines as they arrive (the read runs on the
client's loop thread, so it works while the kernel's own loop runs) until `--timeout` or an interrupt.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import dataclasses
import html
import queue
import shlex
import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pandas as pd
import yaml
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import load_specs_yaml

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
STAT_TIMEOUT_S = 30.0
ROUTE_TIMEOUT_S = 60.0  # how long `apply` on a connected cluster waits for new journals' primaries
ROUTE_POLL_S = 0.05
BLOCK_POLL_S = 0.1  # a blocking read's printer wakes this often, so Ctrl-C (an interrupt) is seen


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


class _HelpShown(Exception):
    """argparse printed a help text and asked to exit."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise NotebookError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:  # type: ignore[override]
        if status == 0:
            raise _HelpShown
        raise NotebookError(f"{self.prog}: {(message or 'failed').strip()}")


# Help strings are %-formatted by argparse: a literal percent sign is written %%.
_INTRO = """\
A Gazette cluster from a notebook: `%gazette up` starts a LocalCluster bound to this kernel (or
`%gazette connect BROKER` attaches to a running one); the other commands work on that cluster.
`%%gazette append|apply|publish ...` takes its data from the cell body. Results are pandas
DataFrames; a failed command raises UsageError with one line, so the cell fails. In code, use
gazette.notebook.current_cluster() and current_client()."""


def _build_parser() -> tuple[_Parser, dict[str, _Parser]]:
    """The `%gazette` parser and its commands' parsers (the help and the docstring come from them)."""
    top = _Parser(
        prog="%gazette",
        description=_INTRO,
        epilog="`%gazette COMMAND --help` shows one command's arguments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)

    def command(name: str, summary: str, details: str = "") -> _Parser:
        return commands.add_parser(  # type: ignore[no-any-return]
            name, help=summary, description=f"{summary}. {details}".strip()
        )

    p = command("up", "start a LocalCluster bound to this kernel", "`down` or the kernel's exit stops it.")
    p.add_argument("--brokers", type=int, default=1, metavar="N", help="how many brokers (default 1)")
    p.add_argument(
        "--mode",
        choices=("inprocess", "subprocess"),
        default="inprocess",
        help="brokers in this process or in subprocesses (default inprocess)",
    )
    p.add_argument(
        "--store", default=None, metavar="URL", help="fragment store (default: file:// under a temp dir)"
    )
    p = command(
        "connect",
        "attach to a running cluster (for example real Gazette brokers)",
        "The brokers must answer a listing, so a wrong address fails here; `down` detaches.",
    )
    p.add_argument("broker", help="BROKER[,BROKER...]: broker endpoints, tried in turn")
    p.add_argument("--etcd", default=None, metavar="URL", help="its etcd, for `shards/stat --root`")
    command("down", "stop the cluster started by `up`, or detach from the cluster of `connect`")
    command("status", "the cluster's brokers (or the endpoints connected to)")
    p = command("journals", "list journals with their routes and labels")
    p.add_argument("selector", nargs="?", default=None, help="label selector, e.g. prefix=examples/")
    p = command(
        "apply",
        "upsert or delete the journals of gazctl-style YAML in the cell body",
        "Cell magic only; waits until upserted journals have a primary.",
    )
    p = command(
        "append",
        "append TEXT, or the cell body (one atomic append), to a journal",
        "A final newline is added when missing.",
    )
    p.add_argument("journal")
    p.add_argument("text", nargs="?", default=None, help="the line magic's data")
    p = command("read", "read a journal's lines (or, with --committed, its committed messages)")
    p.add_argument("journal")
    p.add_argument(
        "--offset", type=int, default=0, metavar="N", help="the byte offset to start at (default 0)"
    )
    p.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N rows")
    p.add_argument("--committed", action="store_true", help="committed messages only, without ACKs")
    p.add_argument("--block", action="store_true", help="print lines as they arrive, until --timeout")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="how long --block waits")
    p = command("fragments", "list a journal's fragments, spooled and persisted")
    p.add_argument("journal")
    p = command(
        "publish",
        "publish committed JSON messages to a journal",
        "One message as JSON, or one per line of the cell body.",
    )
    p.add_argument("journal")
    p.add_argument("json", nargs="?", default=None, help="the line magic's message")
    p = command("flush", "roll a journal's spool and wait until its fragment is persisted")
    p.add_argument("journal")
    p = command("shards", "list consumer shards and their replicas' status")
    p.add_argument("selector", nargs="?", default=None, help="label selector")
    p.add_argument("--root", default=None, help="the consumers' etcd root (default: this kernel's consumers)")
    p = command("stat", "a shard's read-through offsets")
    p.add_argument("shard")
    p.add_argument("--root", default=None, help="the consumers' etcd root (default: this kernel's consumers)")
    return top, dict(commands.choices)  # type: ignore[arg-type]


_PARSER, _COMMAND_PARSERS = _build_parser()
assert tuple(_COMMAND_PARSERS) == COMMANDS


def _magic_doc() -> str:
    """`%gazette?`: the same words as `--help`, with every command's usage."""
    lines = [
        "%gazette COMMAND [ARGS]  /  %%gazette COMMAND [ARGS] + cell body",
        "",
        _INTRO,
        "",
        "Commands:",
    ]
    for parser in _COMMAND_PARSERS.values():
        usage = " ".join(parser.format_usage().split()).removeprefix("usage: ").replace(" [-h]", "")
        lines += [f"  {usage}", f"      {parser.description}"]
    lines += ["", "`%gazette --help` and `%gazette COMMAND --help` print argparse's help."]
    return "\n".join(lines)


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
        # The docstring `%gazette?` shows is made from the argument definitions (_magic_doc).
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
        command = words[0]
        if not command.startswith("-") and command not in COMMANDS:
            raise NotebookError(
                f'%gazette command "{command}" is not known (expected one of {", ".join(COMMANDS)})'
            )
        try:
            ns = _PARSER.parse_args(words)
        except _HelpShown:
            return None
        if cell is not None and cell.strip() and ns.command not in CELL_COMMANDS:
            raise NotebookError(
                f"%%gazette {ns.command} takes no cell body (only {', '.join(CELL_COMMANDS)} do)"
            )
        method = getattr(self, f"_cmd_{ns.command}")
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
        """A ShardClient of the consumers under `root`, or else of the newest consumer group the
        cluster started with `run_consumer`."""
        from gazette.consumer.client import ShardClient

        if root is not None:
            etcd = self.cluster.etcd_endpoint if self.cluster is not None else None
            if etcd is None and self.connected is not None:
                etcd = self.connected.etcd
            if etcd is None:
                raise NotebookError(
                    "no cluster: run `%gazette up` or `%gazette connect BROKER --etcd URL` first"
                )
            return ShardClient(etcd=etcd, root=root)
        if self.cluster is None or not getattr(self.cluster, "_consumer_groups", None):
            raise NotebookError("no consumers: start them with cluster.run_consumer(...) or pass --root ROOT")
        return self.cluster.shard_client()

    def _shutdown(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.close()

    # --- commands ---------------------------------------------------------------------------------
    def _cmd_up(self, ns: argparse.Namespace, cell: str | None) -> Table:
        if self.cluster is not None:
            raise NotebookError("a cluster is already up: run `%gazette down` first")
        if self.connected is not None:
            raise NotebookError(f"connected to {self.connected.broker}: run `%gazette down` first")
        if ns.brokers < 1:
            raise NotebookError(f"%gazette up --brokers {ns.brokers}: needs at least 1 broker")
        self.cluster = LocalCluster(brokers=ns.brokers, mode=ns.mode, store=ns.store).start()
        _at_exit(self._shutdown)
        return self._cmd_status(ns, cell)

    def _cmd_connect(self, ns: argparse.Namespace, cell: str | None) -> Table:
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

    def _cmd_down(self, ns: argparse.Namespace, cell: str | None) -> str:
        if self.cluster is None and self.connected is not None:
            broker = self.connected.broker
            self._disconnect()
            return f"disconnected from {broker}"
        if self.cluster is None:
            raise NotebookError("no cluster is up")
        self._shutdown()
        return "cluster stopped"

    def _cmd_status(self, ns: argparse.Namespace, cell: str | None) -> Table:
        if self.cluster is None and self.connected is not None:
            return self._connection_table()
        if self.cluster is None:
            raise NotebookError("no cluster is up: run `%gazette up`")
        rows = [
            [h.index, h.endpoint, h.zone, "running" if h.running else "stopped"] for h in self.cluster.brokers
        ]
        title = f"etcd {self.cluster.etcd_endpoint}, store {self.cluster.store}"
        return _table(["broker", "endpoint", "zone", "state"], rows, title=title)

    def _cmd_journals(self, ns: argparse.Namespace, cell: str | None) -> Table:
        rows = []
        for info in self.client.list_journals(ns.selector):
            route = info.route
            primary = route.primary_id[1] if route.primary_id is not None else "-"
            members = ",".join(suffix for _zone, suffix in route.members)
            rows.append([info.spec.name, info.spec.replication, primary, members, _labels(info.spec)])
        return _table(["journal", "replication", "primary", "members", "labels"], rows)

    def _cmd_apply(self, ns: argparse.Namespace, cell: str | None) -> Table:
        """`%%gazette apply` with gazctl-style YAML in the cell; specs naming no store persist to the
        cluster's store when the cluster was started here. Waits for the upserted journals' routes."""
        if not cell or not cell.strip():
            raise NotebookError("%%gazette apply needs journal specs YAML in the cell body")
        changes = load_specs_yaml(cell)
        if self.cluster is not None:
            changes = [
                dataclasses.replace(ch, spec=dataclasses.replace(ch.spec, stores=(self.cluster.store,)))
                if not ch.delete and not ch.spec.stores
                else ch
                for ch in changes
            ]
        self.client.apply_journals(changes)
        upserted = [ch.spec.name for ch in changes if not ch.delete]
        if self.cluster is not None and upserted:
            self.cluster.wait_for_routes(upserted)
        elif upserted and self.connected is not None and self._client is None:
            _wait_for_primaries(self.connected, upserted)
        rows = [[ch.spec.name, "delete" if ch.delete else "upsert"] for ch in changes]
        return _table(["journal", "change"], rows)

    def _cmd_append(self, ns: argparse.Namespace, cell: str | None) -> Table:
        if cell is not None and ns.text is not None:
            raise NotebookError("%%gazette append takes its data from the cell body, not a TEXT argument")
        text = cell if cell is not None else ns.text
        if text is None:
            raise NotebookError("%gazette append JOURNAL TEXT (or %%gazette append JOURNAL with a cell body)")
        data = text.encode()
        if not data.endswith(b"\n"):
            data += b"\n"
        res = self.client.append(ns.journal, data)
        return _table(["journal", "begin", "end", "sha1"], [[res.journal, res.begin, res.end, res.sha1]])

    def _cmd_publish(self, ns: argparse.Namespace, cell: str | None) -> Table:
        from gazette.message.publisher import Publisher

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

    def _cmd_read(self, ns: argparse.Namespace, cell: str | None) -> Table | str:
        if ns.offset < 0:
            raise NotebookError(f"%gazette read --offset {ns.offset}: must be >= 0")
        if ns.tail is not None and ns.tail < 1:
            raise NotebookError(f"%gazette read --tail {ns.tail}: must be >= 1")
        if ns.timeout is not None and not ns.block:
            raise NotebookError("%gazette read --timeout: only a blocking read (--block) has a timeout")
        if ns.block:
            return self._read_blocking(ns)
        rows: list[list[Any]]
        if ns.committed:
            from gazette.message.reader import ReadCommitted

            rows = []
            with ReadCommitted(self.client, ns.journal, ns.offset, skip_acks=True) as reader:
                for env in reader:
                    rows.append([env.begin, str(env.uuid), orjson.dumps(_strip_meta(env.message)).decode()])
                    if ns.tail is not None:
                        rows = rows[-ns.tail :]
            return _table(["offset", "uuid", "message"], rows)
        data = self.client.read_all(ns.journal, ns.offset)
        rows, at = [], ns.offset
        for line in data.splitlines(keepends=True):
            rows.append([at, line.decode(errors="replace").rstrip("\n")])
            at += len(line)
        if ns.tail is not None:
            rows = rows[-ns.tail :]
        return _table(["offset", "content"], rows)

    def _read_blocking(self, ns: argparse.Namespace) -> str:
        """Prints each line of `ns.journal` from `ns.offset` as it is appended, until `ns.timeout`
        seconds pass (forever without one) or an interrupt; returns a one-line summary."""
        if ns.timeout is not None and ns.timeout <= 0:
            raise NotebookError(f"%gazette read --timeout {ns.timeout:g}: must be > 0 seconds")
        if ns.committed or ns.tail is not None:
            raise NotebookError(
                "%gazette read --block prints raw lines: it takes --offset, not --committed or --tail"
            )
        client = self.client
        chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        done = object()

        async def pump() -> None:
            try:
                async with asyncio.timeout(ns.timeout):
                    async for chunk in client.aio.read(ns.journal, ns.offset, block=True):
                        chunks.put(chunk)
            except TimeoutError:
                pass
            except Exception as err:  # handed to the printer, which raises it in the cell
                chunks.put(err)
            finally:
                chunks.put(done)

        future = asyncio.run_coroutine_threadsafe(pump(), _loop_of(client))
        started, printed = time.monotonic(), _Printed(ns.offset)
        how = f"stopped after {ns.timeout:g} s" if ns.timeout is not None else "stopped"
        try:
            printed.drain(chunks, done)  # a function: an interrupt anywhere in its loop lands here
        except KeyboardInterrupt:
            how = f"interrupted after {time.monotonic() - started:.1f} s"
        finally:
            future.cancel()
        printed.finish()
        lines, at = printed.lines, printed.at
        return f"{ns.journal}: {lines} line(s) from offset {ns.offset} to {at}; {how}"

    def _cmd_fragments(self, ns: argparse.Namespace, cell: str | None) -> Table:
        rows = [
            [f.begin, f.end, f.codec.name, f.store_url or "(spooled)", _mod_time(f.mod_time), f.sha1]
            for f in self.client.list_fragments(ns.journal)
        ]
        return _table(["begin", "end", "codec", "store", "mod_time", "sha1"], rows)

    def _cmd_shards(self, ns: argparse.Namespace, cell: str | None) -> Table:
        rows = []
        for info in self.shard_client(ns.root).list_shards(ns.selector):
            replicas = " ".join(f"{r.suffix}:{r.status.code.name}" for r in info.replicas)
            rows.append([info.spec.id, ",".join(s.journal for s in info.spec.sources), replicas or "-"])
        return _table(["shard", "sources", "replicas"], rows)

    def _cmd_stat(self, ns: argparse.Namespace, cell: str | None) -> Table:
        stat = self.shard_client(ns.root).stat_shard(ns.shard, timeout=STAT_TIMEOUT_S)
        rows = [[j, o, stat.publish_at.get(j, "")] for j, o in sorted(stat.read_through.items())]
        return _table(
            ["journal", "read through", "publish at"], rows, title=f"{stat.shard} at {stat.member[1]}"
        )

    def _cmd_flush(self, ns: argparse.Namespace, cell: str | None) -> Table:
        frag = self.client.flush(ns.journal)
        rows = [] if frag is None else [[frag.begin, frag.end, frag.store_url]]
        return _table(["begin", "end", "store"], rows)


@dataclasses.dataclass
class _Printed:
    """A blocking read's printer: whole lines as they arrive, each after its offset."""

    at: int  # the offset of the next line
    lines: int = 0
    partial: bytes = b""

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
