"""The `%gazette` line magic and `%%gazette` cell magic: start a LocalCluster bound to the kernel
(`up`/`down`/`status`) or attach to a running cluster (`connect BROKER[,BROKER] [--etcd URL]`, e.g.
real Gazette brokers), then `journals`, `apply`, `append`, `publish`, `read`, `fragments`, `flush`,
`shards` and `stat` from a cell.

Results are `Table`s (HTML in notebooks, plain text elsewhere); errors print as one readable line.
`read --block` prints lines as they arrive (the read runs on the client's loop thread, so it works
while the kernel's own loop runs) until `--timeout` seconds pass or the cell is interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import dataclasses
import html
import queue
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson
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
STAT_TIMEOUT_S = 30.0
ROUTE_TIMEOUT_S = 60.0  # how long `apply` on a connected cluster waits for new journals' primaries
ROUTE_POLL_S = 0.05
BLOCK_POLL_S = 0.1  # a blocking read's printer wakes this often, so Ctrl-C (an interrupt) is seen


class NotebookError(ValueError):
    """A `%gazette` command was malformed or cannot run in the current state."""


class Table:
    """Rows under named columns; renders as an HTML table in notebooks and as text elsewhere."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> None:
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]
        self.title = title

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in self.rows
        )
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f'<table class="gazette-table">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def __repr__(self) -> str:
        cells = [self.columns] + [[str(v) for v in r] for r in self.rows]
        widths = [max(len(str(row[i])) for row in cells) for i in range(len(self.columns))]
        lines = [
            "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
        ]
        if self.title:
            lines.insert(0, self.title)
        return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise NotebookError(f"%gazette {self.prog.split()[-1]}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:  # type: ignore[override]
        raise NotebookError(message or f"%gazette {self.prog}: exited")


def _parser(command: str) -> _Parser:
    p = _Parser(prog=f"gazette {command}", add_help=False)
    if command == "up":
        p.add_argument("--brokers", type=int, default=1)
        p.add_argument("--mode", choices=("inprocess", "subprocess"), default="inprocess")
        p.add_argument("--store", default=None)
    elif command == "connect":
        p.add_argument("broker")
        p.add_argument("--etcd", default=None)
    elif command == "journals":
        p.add_argument("selector", nargs="?", default=None)
    elif command == "append":
        p.add_argument("journal")
        p.add_argument("text", nargs="?", default=None)
    elif command == "read":
        p.add_argument("journal")
        p.add_argument("--offset", type=int, default=0)
        p.add_argument("--tail", type=int, default=None)
        p.add_argument("--committed", action="store_true")
        p.add_argument("--block", action="store_true")
        p.add_argument("--timeout", type=float, default=None)
    elif command in ("fragments", "flush"):
        p.add_argument("journal")
    elif command == "shards":
        p.add_argument("selector", nargs="?", default=None)
        p.add_argument("--root", default=None)
    elif command == "stat":
        p.add_argument("shard")
        p.add_argument("--root", default=None)
    elif command == "publish":
        p.add_argument("journal")
        p.add_argument("json", nargs="?", default=None)
    return p


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
        try:
            return self.run(line, cell)
        except (GazetteError, NotebookError, ValueError, OSError) as err:
            print(f"gazette: {err}", file=sys.stderr)
            return None

    def run(self, line: str, cell: str | None = None) -> Any:
        """Runs one command and returns its result; raises instead of printing (for code and tests)."""
        try:
            words = shlex.split(line)
        except ValueError as err:
            raise NotebookError(f"%gazette {line!r}: {err}") from None
        if not words:
            raise NotebookError(f"%gazette needs a command, one of {', '.join(COMMANDS)}")
        command, args = words[0], words[1:]
        if command not in COMMANDS:
            raise NotebookError(
                f'%gazette command "{command}" is not known (expected one of {", ".join(COMMANDS)})'
            )
        ns = _parser(command).parse_args(args)
        method = getattr(self, f"_cmd_{command}")
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
        return Table(["endpoint", "state"], rows, title=title)

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
        return Table(["broker", "endpoint", "zone", "state"], rows, title=title)

    def _cmd_journals(self, ns: argparse.Namespace, cell: str | None) -> Table:
        rows = []
        for info in self.client.list_journals(ns.selector):
            route = info.route
            primary = route.primary_id[1] if route.primary_id is not None else "-"
            members = ",".join(suffix for _zone, suffix in route.members)
            rows.append([info.spec.name, info.spec.replication, primary, members, _labels(info.spec)])
        return Table(["journal", "replication", "primary", "members", "labels"], rows)

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
        return Table(["journal", "change"], rows)

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
        return Table(["journal", "begin", "end", "sha1"], [[res.journal, res.begin, res.end, res.sha1]])

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
        return Table(["journal", "messages", "end"], [[ns.journal, len(messages), max(ends, default=0)]])

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
            return Table(["offset", "uuid", "message"], rows)
        data = self.client.read_all(ns.journal, ns.offset)
        rows, at = [], ns.offset
        for line in data.splitlines(keepends=True):
            rows.append([at, line.decode(errors="replace").rstrip("\n")])
            at += len(line)
        if ns.tail is not None:
            rows = rows[-ns.tail :]
        return Table(["offset", "content"], rows)

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
            [f.begin, f.end, f.codec.name, f.store_url or "(spooled)", f.mod_time, f.sha1]
            for f in self.client.list_fragments(ns.journal)
        ]
        return Table(["begin", "end", "codec", "store", "mod_time", "sha1"], rows)

    def _cmd_shards(self, ns: argparse.Namespace, cell: str | None) -> Table:
        rows = []
        for info in self.shard_client(ns.root).list_shards(ns.selector):
            replicas = " ".join(f"{r.suffix}:{r.status.code.name}" for r in info.replicas)
            rows.append([info.spec.id, ",".join(s.journal for s in info.spec.sources), replicas or "-"])
        return Table(["shard", "sources", "replicas"], rows)

    def _cmd_stat(self, ns: argparse.Namespace, cell: str | None) -> Table:
        stat = self.shard_client(ns.root).stat_shard(ns.shard, timeout=STAT_TIMEOUT_S)
        rows = [[j, o, stat.publish_at.get(j, "")] for j, o in sorted(stat.read_through.items())]
        return Table(
            ["journal", "read through", "publish at"], rows, title=f"{stat.shard} at {stat.member[1]}"
        )

    def _cmd_flush(self, ns: argparse.Namespace, cell: str | None) -> Table:
        frag = self.client.flush(ns.journal)
        rows = [] if frag is None else [[frag.begin, frag.end, frag.store_url]]
        return Table(["begin", "end", "store"], rows)


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


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext gazette.notebook`: registers the `%gazette` / `%%gazette` magics."""
    ipython.register_magics(GazetteMagics(ipython))
