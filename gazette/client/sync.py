"""The sync facade: `gazette.connect()` returns a `Client` whose methods are plain functions.

Each call forwards to the `AsyncClient` living on the process's background loop thread, so it
works alike in scripts and inside Jupyter (whose loop is already running).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from gazette.auth.tls import TLSConfig
from gazette.auth.tokens import KeyedAuth
from gazette.client.aio import AppendResult, AsyncClient, JournalInfo, ReadChunk
from gazette.client.loop import LoopThread, default_loop
from gazette.client.timeouts import DEFAULT_TIMEOUT_S, USE_CLIENT_DEFAULT, Timeout
from gazette.fragment.fragment import Fragment
from gazette.protocol.errors import ConfigurationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec, SpecChange


class Client:
    """The sync journal client: the `AsyncClient`'s calls as plain functions.

    `timeout` (seconds, None: no bound) is every call's default `timeout=`, except blocking reads,
    which wait as long as asked unless given one; a call that runs out raises `gazette.CallTimeout`
    naming the journal, the broker and the last status, rather than hanging its caller.
    """

    def __init__(
        self,
        broker: str = "http://127.0.0.1:8080",
        etcd: str | None = None,
        loop: LoopThread | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        auth_keys: KeyedAuth | str | None = None,
        tls: TLSConfig | None = None,
        keepalive: float | None = None,
    ) -> None:
        """A client of the brokers at `broker` (one endpoint, or several comma-separated that calls
        move between when one is UNAVAILABLE), running its AsyncClient on `loop` (default: the
        process's shared background loop thread). `etcd` is kept for the tools that need the
        cluster's etcd; `timeout`, `auth_keys`, `tls` and `keepalive` are as for `gazette.connect`
        (ValueError for a bad `timeout` or `keepalive`). Channels open lazily: an unreachable broker fails the first call, not this."""
        self._loop = loop or default_loop()

        async def make() -> AsyncClient:
            return AsyncClient(
                broker, etcd, timeout=timeout, auth_keys=auth_keys, tls=tls, keepalive=keepalive
            )

        self.aio: AsyncClient = self._loop.run(make())
        self.broker = broker
        self.etcd = etcd
        self._shards: Callable[[], Any] | None = None

    @property
    def timeout(self) -> float | None:
        """The default timeout of this client's calls, in seconds (None: no bound)."""
        return self.aio.timeout

    def close(self) -> None:
        """Closes the client's gRPC channels (on its loop thread); calls made afterwards fail. A
        `with Client(...)` block closes it on exit."""
        self._loop.run(self.aio.close())

    def __enter__(self) -> Client:
        """The client itself; leaving the `with` block closes it."""
        return self

    def __exit__(self, *exc) -> None:
        """Closes the client (see `close`); exceptions propagate."""
        self.close()

    def apply_journals(
        self, changes: Iterable[JournalSpec | SpecChange], *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> int:
        """Creates, updates or deletes journals atomically (see `AsyncClient.apply_journals`)."""
        return self._loop.run(self.aio.apply_journals(list(changes), timeout=timeout))

    def delete_journals(self, names: Iterable[str], *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """Deletes the named journals in one etcd transaction (all or none) and returns its revision.
        Persisted fragments stay in their stores (brokers never delete them). Raises GazetteError with
        the broker's status on failure, CallTimeout after `timeout` seconds (the client's default
        unless given)."""
        return self._loop.run(self.aio.delete_journals(list(names), timeout=timeout))

    def list_journals(
        self, selector: str | LabelSelector | None = None, *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> list[JournalInfo]:
        """Journals matching `selector`, as (spec, route, mod_revision)."""
        return self._loop.run(self.aio.list_journals(selector, timeout=timeout))

    def append(
        self,
        journal: str,
        data: bytes | Sequence[bytes],
        *,
        check_registers: str | LabelSelector | None = None,
        union_registers: LabelSet | dict[str, str] | None = None,
        subtract_registers: LabelSet | dict[str, str] | None = None,
        offset: int | None = None,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> AppendResult:
        """Appends `data` atomically; retries a route in flux for at most `timeout` seconds, then
        raises CallTimeout (see `AsyncClient.append`)."""
        return self._loop.run(
            self.aio.append(
                journal,
                data,
                check_registers=check_registers,
                union_registers=union_registers,
                subtract_registers=subtract_registers,
                offset=offset,
                timeout=timeout,
            )
        )

    def reset_head(self, journal: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """Re-syncs `journal`'s replication pipeline at its indexed write head and returns that head
        (a byte offset; docs/semantics.md#reset-head). For a journal whose appends fail with
        INDEX_HAS_GREATER_OFFSET after R or more brokers lost their spools; an append that moved the
        head first is benign. Its steps share one `timeout` in seconds (CallTimeout)."""
        return self._loop.run(self.aio.reset_head(journal, timeout=timeout))

    def read(
        self,
        journal: str,
        offset: int = 0,
        *,
        block: bool = False,
        end_offset: int | None = None,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> Iterator[ReadChunk]:
        """Committed content from `offset`. `timeout` bounds each wait for the next chunk: the
        client's default for a non-blocking read, no bound for a blocking one unless given."""
        return self._loop.iterate(
            self.aio.read(journal, offset, block=block, end_offset=end_offset, timeout=timeout)
        )

    def read_all(
        self,
        journal: str,
        offset: int = 0,
        end_offset: int | None = None,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> bytes:
        """The committed content of `journal` from byte `offset` to the write head (or `end_offset`),
        held in memory as one value: for small journals, tests and notebooks; iterate `read` for big
        ones. `timeout` bounds each wait for the next chunk, in seconds (CallTimeout); a failing status
        (JOURNAL_NOT_FOUND, NOT_ALLOWED, ...) raises GazetteError."""
        return self._loop.run(self.aio.read_all(journal, offset, end_offset, timeout=timeout))

    def read_head(self, journal: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> int:
        """The journal's write head: the byte offset the next append will start at (a metadata-only
        read at offset -1). GazetteError on a failing status; CallTimeout after `timeout` seconds."""
        return self._loop.run(self.aio.read_head(journal, timeout=timeout))

    def list_fragments(
        self,
        journal: str,
        *,
        begin_mod_time: int = 0,
        end_mod_time: int = 0,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[Fragment]:
        """The journal's fragments as a broker's index holds them (docs/semantics.md#coverset-and-index):
        persisted ones and those still spooled, in offset order. `begin_mod_time` (inclusive) and
        `end_mod_time` (exclusive) are unix seconds of persistence, 0 for no bound; an end bound leaves
        out unpersisted fragments. CallTimeout after `timeout` seconds for all pages together."""
        return self._loop.run(
            self.aio.list_fragments(
                journal, begin_mod_time=begin_mod_time, end_mod_time=end_mod_time, timeout=timeout
            )
        )

    def fragments_with_urls(
        self,
        journal: str,
        begin_mod_time: int = 0,
        end_mod_time: int = 0,
        signature_ttl_s: float = 0.0,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> list[tuple[Fragment, str]]:
        """As `list_fragments`, each fragment with a signed GET URL valid `signature_ttl_s` seconds
        ("" for fragments not persisted yet): for batch jobs that fetch fragments straight from the
        store. CallTimeout after `timeout` seconds for all pages together."""
        return self._loop.run(
            self.aio.fragments_with_urls(
                journal, begin_mod_time, end_mod_time, signature_ttl_s, timeout=timeout
            )
        )

    def flush(self, journal: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> Fragment | None:
        """Rolls the journal's spool and waits until it is persisted (None: nothing to persist)."""
        return self._loop.run(self.aio.flush(journal, timeout=timeout))

    # --- shards: answered by a consumer application's Shard service ------------------------------
    def use_shards(self, shard_client: Any) -> None:
        """Lets this journal client answer `stat_shard`/`inspect_shard`/`list_shards` (and feed
        `CheckpointView(client, shard)`) through `shard_client`: a consumer ShardClient, or a callable
        returning one when asked. LocalCluster's client does this with its newest consumer group."""
        self._shards = shard_client if callable(shard_client) else (lambda: shard_client)

    def shard_client(self) -> Any:
        """The ShardClient given to `use_shards` (a clear error when none was)."""
        if self._shards is None:
            raise ConfigurationError(
                "this client knows no consumer application: call client.use_shards(ShardClient(etcd=..., "
                "root=...)), or use the ShardClient of a running group (group.client())",
            )
        return self._shards()

    def stat_shard(
        self,
        shard: str,
        read_through: Mapping[str, int] | None = None,
        *,
        timeout: Timeout = USE_CLIENT_DEFAULT,
    ) -> Any:
        """Read-your-writes: waits until the shard has read through `read_through` (ShardStat), for
        at most `timeout` seconds (the ShardClient's default unless given)."""
        return self.shard_client().stat_shard(shard, read_through, timeout=timeout)

    def inspect_shard(self, shard: str, *, timeout: Timeout = USE_CLIENT_DEFAULT) -> Any:
        """The shard primary's last checkpoint, sequencer state and transaction timings (ShardInspection)."""
        return self.shard_client().inspect(shard, timeout=timeout)

    def list_shards(
        self, selector: str | LabelSelector | None = None, *, timeout: Timeout = USE_CLIENT_DEFAULT
    ) -> list[Any]:
        """The shards of the consumer application given to `use_shards` whose labels (and meta-label
        `id`) match `selector`, each with its route and replica statuses (ShardInfo). Raises
        GazetteError when no shard client was given, ShardTimeoutError after `timeout` seconds."""
        return list(self.shard_client().list_shards(selector, timeout=timeout))


def connect(
    etcd: str | None = None,
    broker: str = "http://127.0.0.1:8080",
    *,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    auth_keys: KeyedAuth | str | None = None,
    tls: TLSConfig | None = None,
    keepalive: float | None = None,
) -> Client:
    """A sync client for an existing cluster, through the broker at `broker`. `timeout` is its
    calls' default bound in seconds (None: none): see `Client`. `auth_keys` (Gazette's --auth-keys:
    base64 keys, the first signs) signs every call; `tls` (a gazette.auth.TLSConfig) is the CA and
    client certificate for https:// brokers. `keepalive` (seconds; None: off) pings gazette-py
    brokers that often so calls leave a connection a partition cut within twice that (see
    `AsyncClient`; not for Gazette's Go brokers, which refuse frequent pings)."""
    return Client(broker, etcd, timeout=timeout, auth_keys=auth_keys, tls=tls, keepalive=keepalive)
