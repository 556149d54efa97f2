"""SQLStore: application tables and the shard checkpoint in one SQL transaction, fenced (reference 7.6).

Table `gazette_checkpoints(shard_fqn TEXT PRIMARY KEY, fence INTEGER, checkpoint BLOB)` holds each
shard's checkpoint as ConsumerCheckpoint JSON. Restoring bumps the fence; a commit updates the
checkpoint only where the fence is still the one it restored, so a deposed primary (a zombie) fails
with FencingError and its transaction rolls back. sqlite3 for now; the connection is used only from
the shard's worker thread (where the Application's methods run).
"""

from __future__ import annotations

import concurrent.futures
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from gazette.consumer.store import ConsumerCheckpoint, FencingError, Store, wait_all
from gazette.protocol.errors import ValidationError

SQLITE_BUSY_TIMEOUT_S = 60.0  # a new primary waits this long for a deposed one's open transaction
_CREATE = (
    "CREATE TABLE IF NOT EXISTS gazette_checkpoints "
    "(shard_fqn TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, checkpoint BLOB NOT NULL)"
)


def _sqlite_path(url: str) -> str:
    if url.startswith("sqlite:///"):
        return url[len("sqlite://") :]
    if url in ("sqlite://:memory:", ":memory:"):
        return ":memory:"
    if "://" in url:
        raise ValidationError(
            f'SQLStore URL "{url}" is not supported (expected sqlite:///absolute/path.db or a file path; '
            "PostgreSQL is not implemented yet)"
        )
    return url


class SQLStore(Store):
    """An SQL database holding application tables and the shard checkpoint, committed together.

    Application code writes with `execute`/`executemany` (or on `transaction()`'s connection) during
    `consume_message` and `finalize_txn`; the transaction loop commits those writes with the checkpoint.
    """

    def __init__(self, shard: Any, url: str) -> None:
        self.shard_fqn: str = shard.fqn
        self.url = url
        self.conn = sqlite3.connect(
            _sqlite_path(url), timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        self.conn.execute(_CREATE)
        self.fence: int | None = None

    # ---- application access

    def transaction(self) -> sqlite3.Connection:
        """The connection, inside this shard transaction's SQL transaction (begun on first use)."""
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN")
        return self.conn

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        return self.transaction().execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        return self.transaction().executemany(sql, rows)

    # ---- Store

    def restore_checkpoint(self, shard: Any) -> ConsumerCheckpoint:
        conn = self.conn
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "UPDATE gazette_checkpoints SET fence = fence + 1 WHERE shard_fqn = ?", (self.shard_fqn,)
            )
            row = conn.execute(
                "SELECT fence, checkpoint FROM gazette_checkpoints WHERE shard_fqn = ?", (self.shard_fqn,)
            ).fetchone()
            if row is None:
                checkpoint = ConsumerCheckpoint()
                conn.execute(
                    "INSERT INTO gazette_checkpoints (shard_fqn, fence, checkpoint) VALUES (?, 1, ?)",
                    (self.shard_fqn, checkpoint.to_json()),
                )
                fence = 1
            else:
                fence, raw = row
                checkpoint = ConsumerCheckpoint.from_json(raw)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.fence = int(fence)
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
            updated = conn.execute(
                "UPDATE gazette_checkpoints SET checkpoint = ? WHERE shard_fqn = ? AND fence = ?",
                (checkpoint.to_json(), self.shard_fqn, self.fence),
            ).rowcount
            if updated != 1:
                raise FencingError(
                    f"commit of shard {self.shard_fqn} refused: the checkpoint fence is no longer {self.fence} "
                    "(it was updated by a new primary)"
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def destroy(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        finally:
            self.conn.close()
