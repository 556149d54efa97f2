"""Application: what a consumer application implements (docs/semantics.md#consumer-applications).

Every method runs on its shard's worker thread (one per shard, so a shard's calls never overlap and
may block, e.g. on SQL); never on the event loop. `consume_message` sees every read-committed
envelope of the shard's sources, ACKs included (`env.is_ack`: ignore them). An exception from any
method fails the shard (status FAILED, with the error stored in its assignment).

`BatchApplication` is the columnar alternative (gazette.consumer.columnar): it receives each read
chunk's committed messages as one Arrow table instead of one envelope at a time.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gazette.message.envelope import Envelope
from gazette.message.publisher import Publisher

if TYPE_CHECKING:
    import pyarrow as pa

    from gazette.consumer.shard import Shard
    from gazette.consumer.store import Store


class DeferToNextTransaction(Exception):
    """Raise from `consume_message` to end the current transaction before this envelope: it is
    delivered again, first, in the next transaction (Gazette's ErrDeferToNextTransaction;
    docs/semantics.md#consumer-applications). Raising it on a transaction's first envelope fails the shard (it
    would never progress)."""


class Application:
    """Subclass and implement `new_store`, `consume_message` and (usually) `finalize_txn`."""

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        """The shard's Store. `recorder` is the shard's recovery-log Recorder when its ShardSpec has
        a recovery_log_prefix (build a JSONFileStore on it), else None."""
        raise NotImplementedError(f"{type(self).__name__}.new_store is not implemented")

    def new_message(self, spec: Any) -> Any:
        """Unused by the JSON, CSV and fixed framings, which build their own messages; kept for API parity."""
        return None

    def source_framing_options(self, journal: str) -> Mapping[str, Any] | None:
        """Options of the framing that decodes source `journal` (as `ReadUncommitted(framing_options=)`),
        None for the defaults of its content type. Where a Go application's message type puts the UUID
        elsewhere, say so here: e.g. `{"uuid_pointer": "/UUID"}` for Gazette's examples, whose
        messages keep it at the top level. Called once per source when a transaction loop starts."""
        return None

    def consume_message(self, shard: Shard, store: Store, env: Envelope, pub: Publisher) -> None:
        """Applies one committed envelope to the store's transaction; may publish (uncommitted), or
        raise DeferToNextTransaction to leave it for the next transaction."""
        raise NotImplementedError(f"{type(self).__name__}.consume_message is not implemented")

    def consume_messages(
        self, shard: Shard, store: Store, envelopes: Sequence[Envelope], pub: Publisher
    ) -> int | None:
        """Applies committed envelopes, in order, to the store's transaction: one committed span of a
        source journal (its ACK last), as the Sequencer released it. Returns None once it consumed
        them all, or how many it consumed, leaving `envelopes[n:]` for the next transaction (what
        DeferToNextTransaction from `consume_message` does). The default calls `consume_message`
        on each; override it to handle a span at once (one query for its keys, say)."""
        consume = self.consume_message
        for i, env in enumerate(envelopes):
            try:
                consume(shard, store, env, pub)
            except DeferToNextTransaction:
                return i
        return None

    def finalize_txn(self, shard: Shard, store: Store, pub: Publisher) -> None:
        """Flushes in-memory state into the store's transaction and publishes what remains."""

    def begin_txn(self, shard: Shard, store: Store) -> None:
        """Called before the first message of each transaction."""

    def finished_txn(self, shard: Shard, store: Store, commit: concurrent.futures.Future) -> None:
        """Called once a transaction has started committing; `commit` resolves when it has."""


class BatchApplication(Application):
    """An application consuming committed messages a table at a time (the columnar path, which needs
    pyarrow; gazette.consumer.columnar). Each source must hold JSON lines.

    Per read chunk of a source journal, the committed messages it releases (as the Sequencer would,
    decided with gazette.message.decide) come to `consume_batch` as one `pyarrow.Table`: META's
    columns (`_begin`, `_end`, `_producer`, `_clock`, `_flags`; gazette.message.columnar), then the
    fields of `source_schema(journal)`, rows in journal order, ACKs left out. The checkpoint after it
    is the Sequencer's, so a shard can move between this path and the per-message one. A chunk whose
    JSON cannot be decoded against the schema fails the shard, naming the journal and offsets.
    """

    #: True if `consume_batch` may return 0 to defer a whole table to the next transaction (each
    #: chunk then costs a snapshot of the sequencer state); False makes returning 0 an error.
    defers = False

    def source_schema(self, journal: str) -> pa.Schema:
        """The message fields to decode from `journal` (members not named are ignored, missing
        ones are null). Called once per source when a transaction loop starts."""
        raise NotImplementedError(f"{type(self).__name__}.source_schema is not implemented")

    def consume_batch(
        self, shard: Shard, store: Store, journal: str, batch: pa.Table, pub: Publisher
    ) -> int | None:
        """Applies a table of committed messages of `journal` to the store's transaction; may publish
        (uncommitted). Returns None once it consumed them all, or 0 (with `defers`) to leave the
        whole table for the next transaction; not on a transaction's first table."""
        raise NotImplementedError(f"{type(self).__name__}.consume_batch is not implemented")

    def consume_message(self, shard: Shard, store: Store, env: Envelope, pub: Publisher) -> None:
        raise NotImplementedError(f"{type(self).__name__} consumes tables (consume_batch), not envelopes")
