"""SQLStore: application tables and the shard checkpoint in one SQL transaction, fenced
(docs/semantics.md#consumer-stores).

The checkpoint table is Gazette's SQLStore's, read and written the same way, so one database serves
a Go consumer and this one alike (either can restore what the other committed)::

    CREATE TABLE gazette_checkpoints (
      shard_fqn  TEXT    PRIMARY KEY NOT NULL,
      fence      INTEGER NOT NULL,
      checkpoint BLOB    NOT NULL      -- BYTEA on PostgreSQL
    );

`checkpoint` holds the marshaled `consumer.Checkpoint` protobuf (`ConsumerCheckpoint.to_bytes`; an
empty checkpoint is zero bytes). Restoring bumps the fence, or creates the shard's row at fence 1 with
the empty checkpoint, and reads the checkpoint, in one transaction; a commit updates the checkpoint
only where the fence is still the one it restored, so a deposed primary (a zombie) fails with
FencingError and its transaction rolls back. A checkpoint written by gazette-py before it adopted
Gazette's encoding (ConsumerCheckpoint JSON, whose first byte `{` no Gazette checkpoint begins with)
is migrated by the restore: rewritten as protobuf in the transaction that moves the fence. Anything
else that does not decode is refused with a ValidationError, and the fence is left as it was.

With `side_effects=` (a SideEffects), the registrations of the shard's last committed transaction
live beside it, written in the commit's SQL transaction (rows of earlier commits are replaced) and
read by the restore, whose fence is the side effects' attempt number::

    CREATE TABLE gazette_side_effects (
      shard_fqn TEXT NOT NULL, id TEXT NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL,
      store TEXT NOT NULL, path TEXT NOT NULL, staging TEXT NOT NULL, sha1 TEXT NOT NULL,
      size INTEGER NOT NULL,              -- BIGINT on PostgreSQL, as attempt
      PRIMARY KEY (shard_fqn, id)
    );

One store, two dialects: sqlite3 (a path or sqlite:// URL) and PostgreSQL via psycopg 3
(postgresql:// URL); the connection is used only from the shard's worker thread (where the
Application's methods run).
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from gazette.consumer.side_effects import SideEffectRecord, SideEffects
from gazette.consumer.store import ConsumerCheckpoint, FencingError, Store, wait_all
from gazette.protocol.errors import ConfigurationError, GazetteError, StateError, StoreError, ValidationError

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 60.0  # a new primary waits this long for a deposed one's open transaction
POSTGRES_CONNECT_TIMEOUT_S = 10  # unless the URL sets connect_timeout
POSTGRES_SCHEMA_LOCK_KEY = 0x6761_7A65_7474_65  # pg_advisory_xact_lock key serializing setup_schema
# Gazette restores with UPDATE fence=fence+1, then SELECT fence, checkpoint, then (no row yet) an
# INSERT at fence 1, in one transaction. One upsert does the same, and also when stores race to
# create a shard's row (Gazette's second INSERT fails on the primary key there).
_RESTORE = (  # one statement: bump the fence or insert at fence 1 (docs/semantics.md#consumer-stores)
    "INSERT INTO gazette_checkpoints (shard_fqn, fence, checkpoint) VALUES (?, 1, ?) "
    "ON CONFLICT (shard_fqn) DO UPDATE SET fence = gazette_checkpoints.fence + 1 RETURNING fence, checkpoint"
)
_COMMIT = "UPDATE gazette_checkpoints SET checkpoint = ? WHERE shard_fqn = ? AND fence = ?"  # as Gazette's
_FENCE = "SELECT fence FROM gazette_checkpoints WHERE shard_fqn = ?"
_SIDE_EFFECT_COLUMNS = "id, attempt, kind, store, path, staging, sha1, size"
_SIDE_EFFECTS_DDL = (
    "CREATE TABLE IF NOT EXISTS gazette_side_effects (shard_fqn TEXT NOT NULL, id TEXT NOT NULL, "
    "attempt {int} NOT NULL, kind TEXT NOT NULL, store TEXT NOT NULL, path TEXT NOT NULL, staging TEXT NOT NULL, "
    "sha1 TEXT NOT NULL, size {int} NOT NULL, PRIMARY KEY (shard_fqn, id))"
)
_SELECT_SIDE_EFFECTS = (
    f"SELECT {_SIDE_EFFECT_COLUMNS} FROM gazette_side_effects WHERE shard_fqn = ? ORDER BY id"
)
_DELETE_SIDE_EFFECTS = "DELETE FROM gazette_side_effects WHERE shard_fqn = ?"
_INSERT_SIDE_EFFECT = (
    f"INSERT INTO gazette_side_effects (shard_fqn, {_SIDE_EFFECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

SQLConnection = Any  # sqlite3.Connection or psycopg.Connection: each driver's own API


class SQLCursor(Protocol):
    """What `SQLStore.execute` returns on either dialect (a sqlite3 or a psycopg cursor)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class SQLStoreError(StoreError):
    """The store's database could not be reached (the message names the URL, without its password)."""


def redact_url(url: str) -> str:
    """`url` with any password replaced by ***, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _unsupported(url: str, why: str) -> ValidationError:
    return ValidationError(
        f'SQLStore URL "{redact_url(url)}" is not supported: {why} (expected sqlite:///absolute/path.db, '
        "a file path, or postgresql://user@host:port/database)"
    )


class _SQLiteDialect:
    """sqlite3 in autocommit mode (isolation_level=None): transactions are explicit BEGIN/COMMIT."""

    name = "sqlite"
    checkpoints_ddl = (
        "CREATE TABLE IF NOT EXISTS gazette_checkpoints "
        "(shard_fqn TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, checkpoint BLOB NOT NULL)"
    )
    side_effects_ddl = _SIDE_EFFECTS_DDL.format(int="INTEGER")
    begin_schema = "BEGIN IMMEDIATE"  # the database's write lock serializes schema setup
    schema_lock: str | None = None

    def __init__(self, url: str) -> None:
        if url.startswith("sqlite:///"):
            self.path = url[len("sqlite://") :]
        elif url in ("sqlite://:memory:", ":memory:"):
            self.path = ":memory:"
        elif "://" in url:
            raise _unsupported(url, f"unknown scheme {url.split('://', 1)[0]!r}")
        else:
            self.path = url

    def connect(self) -> SQLConnection:
        conn = sqlite3.connect(
            self.path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        if self.path != ":memory:":
            # WAL: a reader never blocks a writer, so a stalled (SIGSTOPped, zombie) primary that
            # has read in its open transaction cannot block its successor's restore and commits.
            _enable_wal(conn, self.path)
        return conn

    def in_transaction(self, conn: SQLConnection) -> bool:
        return bool(conn.in_transaction)

    def can_rollback(self, conn: SQLConnection) -> bool:
        return bool(conn.in_transaction)

    def statement(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> str:
        return sql  # sqlite3's own paramstyles are the store's

    def executemany(self, conn: SQLConnection, sql: str, rows: list[Any]) -> SQLCursor:
        return conn.executemany(sql, rows)  # type: ignore[no-any-return]


def _enable_wal(conn: sqlite3.Connection, path: str) -> None:
    """Switches the database to WAL, retrying while another connection holds the lock the switch
    needs: sqlite answers "database is locked" at once there, without its busy handler, so stores
    opening one new database together (shards starting at once) would otherwise fail at random."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise SQLStoreError(
                    f"sqlite database {path} stayed locked for {SQLITE_BUSY_TIMEOUT_S:.0f} s while switching "
                    f"it to WAL mode: {exc}"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
            continue
        if str(mode).lower() != "wal":
            raise SQLStoreError(f"sqlite database {path} cannot use WAL mode (journal_mode is {mode})")
        return


# Quoted text, identifiers and comments keep their placeholder-like characters; every % is doubled.
_PG_TOKENS = re.compile(
    r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|--[^\n]*|/\*.*?(?:\*/|\Z)"""
    r"""|\$(?P<tag>(?:[A-Za-z_]\w*)?)\$.*?(?:\$(?P=tag)\$|\Z)"""
    r"""|(?P<qmark>\?)|(?P<percent>%)|(?<![:\w]):(?P<name>[A-Za-z_]\w*)""",
    re.S,
)


class _PostgresDialect:
    """psycopg 3 in autocommit mode, with explicit BEGIN/COMMIT like the sqlite3 dialect. The store's
    `?` and `:name` placeholders become psycopg's `%s` and `%(name)s` (and a literal % becomes %%); SQL
    using jsonb's `?` operators with parameters goes through `transaction()`'s connection instead."""

    name = "postgresql"
    checkpoints_ddl = (
        "CREATE TABLE IF NOT EXISTS gazette_checkpoints "
        "(shard_fqn TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, checkpoint BYTEA NOT NULL)"
    )
    side_effects_ddl = _SIDE_EFFECTS_DDL.format(int="BIGINT")
    begin_schema = "BEGIN"
    # Concurrent CREATE TABLE IF NOT EXISTS of one table can fail on PostgreSQL's catalog: serialize.
    schema_lock: str | None = f"SELECT pg_advisory_xact_lock({POSTGRES_SCHEMA_LOCK_KEY})"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise ConfigurationError(
                f'SQLStore URL "{redact_url(url)}" needs psycopg 3 (pip install "psycopg[binary]")',
            ) from None
        self.psycopg = psycopg
        self.url = url
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise _unsupported(url, f"it is not a valid PostgreSQL URL ({str(exc).strip()})") from None
        if not params.get("dbname"):
            raise _unsupported(url, "a PostgreSQL URL must name its database")
        if not all(p.isdigit() for p in str(params.get("port", "0")).split(",")):
            raise _unsupported(url, f"port {params['port']!r} is not a number")
        self.connect_kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            self.connect_kwargs["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S

    def connect(self) -> SQLConnection:
        try:
            return self.psycopg.connect(self.url, **self.connect_kwargs)
        except self.psycopg.OperationalError as exc:
            detail = str(exc).strip().replace("\n", " ")
            raise SQLStoreError(f'SQLStore could not connect to "{redact_url(self.url)}": {detail}') from None

    def in_transaction(self, conn: SQLConnection) -> bool:
        return bool(conn.info.transaction_status != self.psycopg.pq.TransactionStatus.IDLE)

    def can_rollback(self, conn: SQLConnection) -> bool:
        return not conn.closed and conn.info.transaction_status in (
            self.psycopg.pq.TransactionStatus.INTRANS,
            self.psycopg.pq.TransactionStatus.INERROR,
        )

    def statement(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> str:
        if params is None:
            return sql  # psycopg leaves a statement without parameters as written
        named = isinstance(params, Mapping)

        def rewrite(m: re.Match[str]) -> str:
            if m.group("qmark") is not None:
                return "?" if named else "%s"
            if m.group("percent") is not None:
                return "%%"
            if m.group("name") is not None:
                return f"%({m.group('name')})s" if named else m.group(0)
            return m.group(0).replace("%", "%%")  # psycopg reads % even inside quotes

        return _PG_TOKENS.sub(rewrite, sql)

    def executemany(self, conn: SQLConnection, sql: str, rows: list[Any]) -> SQLCursor:
        cursor = conn.cursor()
        cursor.executemany(self.statement(sql, rows[0] if rows else ()), rows)
        return cursor  # type: ignore[no-any-return]


def _dialect(url: str) -> _SQLiteDialect | _PostgresDialect:
    if url.startswith(("postgresql://", "postgres://")):
        return _PostgresDialect(url)
    return _SQLiteDialect(url)


class SQLStore(Store):
    """An SQL database holding application tables and the shard checkpoint, committed together.

    `url` is a sqlite file (a path or sqlite:///absolute/path.db) or a PostgreSQL database
    (postgresql://user:password@host:port/database). Application code writes with `execute` /
    `executemany` during `consume_message` and `finalize_txn` using sqlite-style placeholders (`?` with
    a sequence, `:name` with a mapping) on both; the transaction loop commits those writes with the
    checkpoint. `transaction()` gives the driver's connection (its own paramstyle) inside the same
    transaction; `setup_schema` runs DDL once, safely against concurrent stores. `side_effects` (a
    SideEffects) keeps the shard's side-effect registrations in `gazette_side_effects`.
    """

    def __init__(self, shard: Any, url: str, *, side_effects: SideEffects | None = None) -> None:
        self.shard_fqn: str = shard.fqn
        self.url = url
        self.dialect = _dialect(url)
        self.conn: SQLConnection = self.dialect.connect()
        self.fence: int | None = None
        self.side_effects = side_effects
        self._stored_side_effects = False  # the shard has rows in gazette_side_effects (to replace)
        try:
            ddl = [self.dialect.checkpoints_ddl]
            if side_effects is not None:
                ddl.append(self.dialect.side_effects_ddl)
            self.setup_schema(*ddl)
        except BaseException:
            self.conn.close()
            raise

    @property
    def dialect_name(self) -> str:
        """The dialect in use: "sqlite" or "postgresql"."""
        return self.dialect.name

    # ---- application access

    def setup_schema(self, *statements: str) -> None:
        """Runs DDL statements (e.g. CREATE TABLE IF NOT EXISTS) in one transaction of their own,
        serialized with other stores' setup on the same database. Call it outside a shard transaction."""
        if self.dialect.in_transaction(self.conn):
            raise StateError(f"SQLStore of shard {self.shard_fqn}: setup_schema inside an open transaction")
        conn = self.conn
        conn.execute(self.dialect.begin_schema)
        try:
            if self.dialect.schema_lock is not None:
                conn.execute(self.dialect.schema_lock)
            for sql in statements:
                conn.execute(sql)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def transaction(self) -> SQLConnection:
        """The connection, inside this shard transaction's SQL transaction (begun on first use)."""
        if not self.dialect.in_transaction(self.conn):
            self.conn.execute("BEGIN")
        return self.conn

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> SQLCursor:
        """Runs `sql` (sqlite-style placeholders) in the shard transaction; returns the cursor."""
        conn = self.transaction()
        try:
            if not params:
                return conn.execute(self.dialect.statement(sql, None))  # type: ignore[no-any-return]
            return conn.execute(self.dialect.statement(sql, params), params)  # type: ignore[no-any-return]
        except Exception as exc:
            self._raise_if_fenced(exc)
            raise

    def executemany(self, sql: str, rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> SQLCursor:
        """Runs `sql` once per row of parameters in the shard transaction."""
        try:
            return self.dialect.executemany(self.transaction(), sql, list(rows))
        except Exception as exc:
            self._raise_if_fenced(exc)
            raise

    # ---- Store

    def restore_checkpoint(self, shard: Any) -> ConsumerCheckpoint:
        """Moves the fence and reads the checkpoint in one transaction (see the module docstring). A
        stored value not in the protobuf form this store writes (gazette-py's earlier JSON, or Gazette's
        own map order) is rewritten in that transaction. Raises ValidationError, rolling back and
        leaving the fence unmoved, for a value that is neither a consumer.Checkpoint nor that JSON."""
        self._rollback()
        conn = self.transaction()
        try:
            # fetchall: sqlite finishes a RETURNING statement only once all its rows are read.
            [(fence, raw)] = self._run(_RESTORE, (self.shard_fqn, ConsumerCheckpoint().to_bytes())).fetchall()
            checkpoint = self._decode(raw, int(fence))
            encoded = checkpoint.to_bytes()
            if raw != encoded:
                self._run(_COMMIT, (encoded, self.shard_fqn, int(fence)))
            effects = self._restore_side_effects() if self.side_effects is not None else []
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        self.fence = int(fence)
        if self.side_effects is not None:
            self._stored_side_effects = bool(effects)
            self.side_effects.bind(shard.id, self.shard_fqn, self.fence, effects)
        return checkpoint

    def _restore_side_effects(self) -> list[SideEffectRecord]:
        """The registrations of the last committed transaction (ValidationError for a bad row)."""
        rows = self._run(_SELECT_SIDE_EFFECTS, (self.shard_fqn,)).fetchall()
        names = _SIDE_EFFECT_COLUMNS.split(", ")
        return [
            SideEffectRecord.from_dict(
                dict(zip(names, row, strict=True)), f"gazette_side_effects row of shard {self.shard_fqn}"
            )
            for row in rows
        ]

    def _decode(self, raw: Any, fence: int) -> ConsumerCheckpoint:
        """The checkpoint of a `gazette_checkpoints.checkpoint` value: protobuf, or gazette-py's
        earlier JSON (which begins with `{`: a Gazette checkpoint begins with field 1 or 2's tag)."""
        where = f"gazette_checkpoints.checkpoint of shard {self.shard_fqn}"
        if isinstance(raw, str):  # sqlite keeps what it was given, TEXT included, in a BLOB column
            raw = raw.encode()
        if not isinstance(raw, bytes | bytearray | memoryview):
            raise ValidationError(f"{where} is {raw!r:.60} ({type(raw).__name__}), expected protobuf bytes")
        raw = bytes(raw)
        if not raw.startswith(b"{"):
            try:
                return ConsumerCheckpoint.from_bytes(raw, where)
            except ValidationError as exc:
                raise ValidationError(f"{exc} (restore refused: the fence stays at {fence - 1})") from None
        try:
            checkpoint = ConsumerCheckpoint.from_json(raw)
        except ValidationError as exc:
            raise ValidationError(
                f"{where} begins with '{{' like gazette-py's earlier JSON checkpoint but is not one ({exc}); "
                f"restore refused: the fence stays at {fence - 1}"
            ) from None
        log.info(
            "shard %s: migrating its checkpoint in gazette_checkpoints from gazette-py's JSON to Gazette's "
            "consumer.Checkpoint protobuf (fence %d)",
            self.shard_fqn,
            fence,
        )
        return checkpoint

    def start_commit(
        self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]
    ) -> concurrent.futures.Future:
        """Blocks until `wait_for` succeeded, then commits (on the worker thread); returns a done future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            self._commit(checkpoint, wait_for)
        except Exception as exc:
            future.set_exception(exc)
        else:
            future.set_result(checkpoint)
        return future

    def _commit(self, checkpoint: ConsumerCheckpoint, wait_for: Iterable[concurrent.futures.Future]) -> None:
        if self.fence is None:
            raise FencingError(f"SQLStore of shard {self.shard_fqn}: commit before restore_checkpoint")
        conn = self.transaction()
        try:
            wait_all(wait_for, f"commit of shard {self.shard_fqn}")
            updated = self._run(_COMMIT, (checkpoint.to_bytes(), self.shard_fqn, self.fence)).rowcount
            if updated != 1:
                raise FencingError(
                    f"commit of shard {self.shard_fqn} refused: the checkpoint fence is no longer {self.fence} "
                    "(it was updated by a new primary)"
                )
            stored = self._commit_side_effects()
            conn.execute("COMMIT")
            self._stored_side_effects = stored
        except FencingError:
            self._rollback()
            raise
        except Exception as exc:
            self._raise_if_fenced(exc)
            if isinstance(exc, GazetteError):
                raise
            # Nothing of the transaction is committed (rolled back above); say where it failed (a full
            # disk is "database or disk is full") so the shard's FAILED status names the database.
            raise SQLStoreError(
                f"commit of shard {self.shard_fqn} to {redact_url(self.url)} failed, nothing of the "
                f"transaction is stored: {type(exc).__name__}: {exc}"
            ) from exc
        except BaseException:
            self._rollback()
            raise

    def _commit_side_effects(self) -> bool:
        """Replaces the shard's registrations with this transaction's (`side_effects.committing`),
        inside the commit; returns whether the shard has rows afterwards."""
        effects = self.side_effects
        if effects is None or (not effects.committing and not self._stored_side_effects):
            return self._stored_side_effects
        self._run(_DELETE_SIDE_EFFECTS, (self.shard_fqn,))
        rows = [
            (self.shard_fqn, r.id, r.attempt, r.kind, r.store, r.path, r.staging, r.sha1, r.size)
            for r in effects.committing
        ]
        if rows:
            self.dialect.executemany(self.conn, _INSERT_SIDE_EFFECT, rows)
        return bool(rows)

    def destroy(self) -> None:
        try:
            if self.side_effects is not None:
                self.side_effects.close()
            self._rollback()
        finally:
            self.conn.close()

    # ---- internals

    def _run(self, sql: str, params: Sequence[Any]) -> SQLCursor:
        return self.conn.execute(self.dialect.statement(sql, params), params)  # type: ignore[no-any-return]

    def _raise_if_fenced(self, exc: Exception) -> None:
        """After a failed statement: rolls back, and if a new primary moved the fence meanwhile
        raises FencingError (the failure is the deposition showing, e.g. sqlite refusing a write
        from a transaction whose snapshot a successor's commit made stale)."""
        self._rollback()
        if self.fence is None:
            return
        try:
            row = self._run(_FENCE, (self.shard_fqn,)).fetchone()
        except Exception:
            return  # the database is unreachable: the original error says more
        finally:
            self._rollback()
        if row is not None and int(row[0]) != self.fence:
            raise FencingError(
                f"shard {self.shard_fqn}: its store's fence is no longer {self.fence} (now {int(row[0])}: a new "
                f"primary took over), so this transaction was refused ({type(exc).__name__}: {exc})"
            ) from exc

    def _rollback(self) -> None:
        if self.dialect.can_rollback(self.conn):
            self.conn.execute("ROLLBACK")
