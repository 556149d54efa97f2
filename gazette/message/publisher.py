"""Publisher: stamps messages with UUIDs and appends them through an AppendService
(docs/semantics.md#publisher).

The UUID is built *after* the append's place in the journal is fixed (under the service's lock), so
one producer's clocks increase in journal order (Gazette issue 259). Uncommitted messages leave an
ACK intent per journal. The invariant to keep: an ACK lands after every message it acknowledges, or
readers drop those messages as already acknowledged. `commit()` (and `transaction()`) keep it by
flushing first and appending the ACKs themselves; `build_ack_intents()` is the low-level path for
callers that store intents durably first (consumers), and refuses while messages are unflushed.
A rollback appends an ACK whose clock is just below the transaction's first message on the journal
(the Sequencer's ACK_ROLLBACK), so readers drop what was appended. Not thread-safe across
publish_uncommitted/build_ack_intents/commit. Per message, a plain journal name costs one dict
lookup, and JSON frames are spliced from orjson's output with the UUID's text (no UUID object, no
copy of the message).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid as _uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from gazette.client.aio import AppendResult, AsyncClient
from gazette.client.append_service import AppendFuture, AsyncAppendService, ClientBinding, wrap_futures
from gazette.client.sync import Client
from gazette.client.timeouts import USE_CLIENT_DEFAULT, Timeout, resolve_timeout
from gazette.message.framing import Framing, framing_for
from gazette.message.framing.json_lines import JSONFraming
from gazette.message.mapping import CONTENT_TYPE_LABEL
from gazette.message.uuid import CLOCK_TICK, PRODUCER_ID_BYTES, Clock, Flags, UUIDText, new_producer_id
from gazette.protocol.errors import ConfigurationError, GazetteError, StateError, ValidationError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.status import Status

log = logging.getLogger(__name__)

# A publisher that owns its clock moves it up to wall time at most this often (it never goes back).
CLOCK_UPDATE_INTERVAL_S = 0.1
CONTENT_TYPE_LOOKUP_TIMEOUT_S = 30.0

MappingLike = str | Callable[[Any], tuple[str, str]]
FrameFn = Callable[..., bytes]  # (framing, message, flags) -> the frame; runs under the append lock

_UUID = _uuid.UUID
_new_object = object.__new__
_set_attr = object.__setattr__
_SAFE_UNKNOWN = _uuid.SafeUUID.unknown
_OUTSIDE_TXN = int(Flags.OUTSIDE_TXN)
_CONTINUE_TXN = int(Flags.CONTINUE_TXN)
_ACK_TXN = int(Flags.ACK_TXN)


def _uuid_from_int(value: int) -> _uuid.UUID:
    # uuid.UUID(int=...) re-checks what `Publisher.uuid` built bit by bit; filling the slots directly
    # makes the same object at ~40% of the cost (0.2 vs 0.5 us, on the per-message path).
    u = _new_object(_UUID)
    _set_attr(u, "int", value)
    _set_attr(u, "is_safe", _SAFE_UNKNOWN)
    return u


class Publisher:
    """Publishes messages to journals chosen by a mapping (or named directly).

    `client` is a sync `Client` or an `AsyncClient` (then create the publisher on the client's loop,
    or pass `loop=`). Publishing never waits for I/O: it returns the `AppendFuture` of the batch the
    message joined. Wait with `flush()` from plain code or `await publisher.service.flush()` on the
    loop. Transactions: `publish_uncommitted(...)` then `commit()`, or `with publisher.transaction():`
    (commit on exit, rollback on an exception). Blocking calls take `timeout=` seconds, the client's
    default unless given. A publisher with an external `clock` never updates it; its own clock
    follows wall time.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        producer_id: bytes | None = None,
        clock: Clock | None = None,
        *,
        service: AsyncAppendService | None = None,
        framings: Mapping[str, Framing] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`producer_id`: 6 bytes (default: fresh random ones with the multicast bit, as Gazette's);
        reuse one only for the same logical producer, never for two at once (ValueError if not 6
        bytes). `clock`: an external Clock the caller advances (a consumer shard's), else one of its
        own following wall time. `service`: an AsyncAppendService to share (default: its own, closed
        by `close`). `framings`: framings by content type, overriding the registered ones. `loop`:
        the event loop of an AsyncClient when the publisher is not created on it."""
        self._binding = ClientBinding.of(client, loop)
        if producer_id is None:
            producer_id = new_producer_id()
        elif not isinstance(producer_id, bytes | bytearray) or len(producer_id) != PRODUCER_ID_BYTES:
            raise ValidationError(f"producer_id {producer_id!r} is not {PRODUCER_ID_BYTES} bytes")
        self.producer_id = bytes(producer_id)
        self._own_clock = clock is None
        self.clock = Clock.now() if clock is None else clock
        self._next_clock_update = time.monotonic() + CLOCK_UPDATE_INTERVAL_S
        self._own_service = service is None
        self.service = service if service is not None else AsyncAppendService(client, loop=self._binding.loop)
        self._producer_bits = int.from_bytes(self.producer_id, "big")
        self._uuid_texts = UUIDText(self.producer_id)
        self._uuid_text = self._uuid_texts.text
        self._framings: dict[str, Framing] = dict(framings or {})
        self._content_types: dict[str, str] = {}  # journal name -> content type, for plain names
        self._routes: dict[str, tuple[Framing, FrameFn]] = {}  # plain journal name -> framing, frame fn
        # journal -> (framing, a message like its ACK, the clock of its transaction's rollback ACK)
        self._intents: dict[str, tuple[Framing, Any, int]] = {}
        self._in_transaction = False

    def __repr__(self) -> str:
        return f"Publisher(producer_id={self.producer_id.hex()}, clock={self.clock.value})"

    # --- publishing ------------------------------------------------------------------------------
    def publish_committed(self, mapping: MappingLike, message: Any) -> AppendFuture:
        """Publishes `message` as self-committing (OUTSIDE_TXN)."""
        if type(mapping) is str and (route := self._routes.get(mapping)) is not None:
            journal = mapping
            framing, frame = route
        else:
            journal, framing, frame = self._route(mapping, message)
        if self._own_clock:
            self._update_clock()
        return self.service.append_with(journal, frame, framing, message, _OUTSIDE_TXN)

    def publish_uncommitted(self, mapping: MappingLike, message: Any) -> AppendFuture:
        """Publishes `message` as pending (CONTINUE_TXN): readers deliver it only once an ACK of
        this producer lands after it (`commit()`), and drop it if a rollback ACK does. Records an
        ACK intent for its journal, noting the first message's clock (for a rollback)."""
        if type(mapping) is str and (route := self._routes.get(mapping)) is not None:
            journal = mapping
            framing, frame = route
        else:
            journal, framing, frame = self._route(mapping, message)
        if self._own_clock:
            self._update_clock()
        if journal in self._intents:
            return self.service.append_with(journal, frame, framing, message, _CONTINUE_TXN)
        first: list[int] = []
        fut = self.service.append_with(journal, self._frame_first, framing, message, first)
        # An ACK with the clock just below the first message's rolls the span back (ACK_ROLLBACK):
        # every earlier commit of this producer in the journal had a smaller clock still.
        self._intents[journal] = (framing, message, first[0] - 1)
        return fut

    def publish_uncommitted_batch(self, journal: str, messages: Sequence[Any]) -> AppendFuture | None:
        """`publish_uncommitted(journal, m)` of each of `messages` in order, all to the one journal
        named, framed together under one hold of the append order: the same frames (consecutive
        clock ticks), less Python per message. None when `messages` is empty."""
        if type(journal) is not str:
            raise TypeError(f"publish_uncommitted_batch takes a journal name, not {journal!r}")
        if not messages:
            return None
        route = self._routes.get(journal)
        framing = route[0] if route is not None else self._route(journal, messages[0])[1]
        if self._own_clock:
            self._update_clock()
        first: list[int] = []
        fut = self.service.append_with(journal, self._frame_batch, framing, messages, first)
        if journal not in self._intents:
            self._intents[journal] = (framing, messages[0], first[0] - 1)  # as publish_uncommitted's
        return fut

    def publish_uncommitted_table(self, journal: str, table: Any) -> AppendFuture | None:
        """`publish_uncommitted_batch` of the rows of a `pyarrow.Table` as messages (each row an
        object of its columns), framed from the Arrow columns when the journal's framing is JSON
        lines (gazette.message.columnar.encode_json_lines: the same messages and UUIDs, built
        column-wise), else from the rows as dicts. None when the table is empty. Needs pyarrow."""
        if type(journal) is not str:
            raise TypeError(f"publish_uncommitted_table takes a journal name, not {journal!r}")
        if not table.num_rows:
            return None
        route = self._routes.get(journal)
        framing = route[0] if route is not None else self._route(journal, {})[1]
        if not isinstance(framing, JSONFraming) or framing.uuid_pointer.split("/")[1] in table.column_names:
            return self.publish_uncommitted_batch(journal, table.to_pylist())
        if self._own_clock:
            self._update_clock()
        first: list[int] = []
        fut = self.service.append_with(journal, self._frame_table, framing, table, first)
        if journal not in self._intents:
            self._intents[journal] = (framing, table.slice(0, 1).to_pylist()[0], first[0] - 1)
        return fut

    def _frame_table(self, framing: JSONFraming, table: Any, first: list[int]) -> bytes:
        """CONTINUE_TXN frames of the table's rows with consecutive clock ticks (see `_frame_batch`)."""
        from gazette.message.columnar import encode_json_lines

        n = table.num_rows
        clock = self.clock.tick_many(n)
        first.append(clock)
        return encode_json_lines(table, framing.uuid_pointer, self._uuid_texts.runs(clock, n, _CONTINUE_TXN))

    def build_ack_intents(self, *, after_messages: bool = False) -> list[tuple[str, bytes]]:
        """A framed ACK_TXN message per journal published to uncommitted since the last call, each
        with a fresh clock tick; clears the pending set. Low level: `commit()` does it all safely.

        An ACK must land after every message it acknowledges: readers drop messages that come after
        their producer's ACK as already acknowledged. So this refuses (GazetteError, intents kept)
        while messages to one of the journals are not appended yet: flush first, or use `commit()`.
        `after_messages=True` vouches that each intent will be appended after its messages anyway,
        e.g. through this publisher's own append service (which keeps each journal's order) once the
        caller stored the intents durably, as the consumer's transaction loop does.
        """
        if not after_messages:
            unflushed = [j for j in self._intents if self.service.pending_of(j)]
            if unflushed:
                more = f" and {len(unflushed) - 3} more" if len(unflushed) > 3 else ""
                raise StateError(
                    f"build_ack_intents: messages published uncommitted to {', '.join(unflushed[:3])}{more} "
                    "are not appended yet, and an ACK landing before them would make readers drop them: "
                    "flush first, or use publisher.commit()",
                )
        intents, self._intents = self._intents, {}
        out: list[tuple[str, bytes]] = []
        for journal, (framing, like, _) in intents.items():
            u = self.uuid(self.clock.tick(), _ACK_TXN)
            out.append((journal, framing.encode_ack(u, like)))
        return out

    # --- transactions ----------------------------------------------------------------------------
    def commit(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> dict[str, AppendResult]:
        """Commits what was published uncommitted: flushes every pending message, then appends each
        journal's ACK (after the messages it acknowledges, so readers deliver them all).

        Returns per journal the result of the append that carried its ACK (its `end` is at or after
        the ACK: a shard's `read_through`). `timeout` (the client's default unless given) bounds each
        wait: for the next message batch to finish (as `flush`), then for the ACKs. A failure or
        CallTimeout while flushing keeps the intents (commit again, or `rollback()`); a CallTimeout
        while the ACKs append leaves them queued, so the transaction commits once they land. On the
        client's loop: `await publisher.acommit()`.
        """
        result: dict[str, AppendResult] = self._binding.run(self.acommit(timeout), what="Publisher.commit")
        return result

    async def acommit(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> dict[str, AppendResult]:
        """`commit()` on the client's event loop."""
        seconds = resolve_timeout(timeout, self._binding.aio.timeout)
        # Every message first: if any fails, no ACK is written and nothing of the transaction commits.
        await self.service.flush(timeout=seconds)
        intents = self.build_ack_intents(after_messages=True)  # the service keeps each journal's order
        futures = {journal: self.service.append(journal, ack) for journal, ack in intents}
        if futures:
            await self._await_acks("commit: ACK appends to", futures, seconds)
        return {journal: f.result() for journal, f in futures.items()}

    def rollback(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> list[str]:
        """Rolls back what was published uncommitted since the last commit: writes no ACK for it,
        and appends per journal a rollback ACK (its clock just below the transaction's first message
        there) so that readers drop whatever of it was appended. Returns those journals.

        Messages already handed to the append service are still appended (a batch cannot be
        recalled); the rollback ACK lands after them. If a rollback ACK cannot be appended within
        `timeout` seconds (the client's default unless given), this publisher takes a new producer id,
        so that none of its later ACKs can commit the abandoned messages, and raises.
        """
        journals: list[str] = self._binding.run(self.arollback(timeout), what="Publisher.rollback")
        return journals

    async def arollback(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> list[str]:
        """`rollback()` on the client's event loop."""
        seconds = resolve_timeout(timeout, self._binding.aio.timeout)
        intents, self._intents = self._intents, {}
        futures: dict[str, AppendFuture] = {}
        try:
            for journal, (framing, like, clock) in intents.items():
                futures[journal] = self.service.append(
                    journal, framing.encode_ack(self.uuid(clock, _ACK_TXN), like)
                )
            if futures:
                await self._await_acks("rollback: ACK appends to", futures, seconds)
        except BaseException as exc:
            abandoned = self.producer_id.hex()
            self._new_producer()
            log.warning(
                "rollback of producer %s could not append its ACKs to %s (%s); continuing as producer %s, "
                "so that the rolled-back messages are never acknowledged",
                abandoned, ", ".join(intents), exc, self.producer_id.hex(),
            )  # fmt: skip
            if isinstance(exc, GazetteError):
                exc.add_note(
                    f"the publisher continues as a new producer ({self.producer_id.hex()}): the rolled-back "
                    f"messages of producer {abandoned} are never acknowledged"
                )
            raise
        return list(intents)

    @contextlib.contextmanager
    def transaction(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> Iterator[Publisher]:
        """`with publisher.transaction(): publisher.publish_uncommitted(...)`: commits on a normal exit
        (`commit()`); on an exception writes nothing further, rolls back what was appended
        (`rollback()`: readers drop it) and re-raises. A failure to flush the messages at exit rolls
        back too. `timeout` bounds the commit's waits, or the rollback's. Refuses to start while uncommitted
        messages from before it are open (commit or roll them back first) and does not nest."""
        self._begin_transaction()
        try:
            try:
                yield self
            except BaseException as exc:
                try:
                    self.rollback(timeout)
                except Exception as failure:
                    exc.add_note(f"rolling the transaction back failed too: {failure}")
                raise
            self._binding.run(self._finish_transaction(timeout), what="leaving Publisher.transaction()")
        finally:
            self._in_transaction = False

    @contextlib.asynccontextmanager
    async def atransaction(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> AsyncIterator[Publisher]:
        """`transaction()` on the client's event loop: `async with publisher.atransaction(): ...`."""
        self._begin_transaction()
        try:
            try:
                yield self
            except BaseException as exc:
                try:
                    await self.arollback(timeout)
                except Exception as failure:
                    exc.add_note(f"rolling the transaction back failed too: {failure}")
                raise
            await self._finish_transaction(timeout)
        finally:
            self._in_transaction = False

    def _begin_transaction(self) -> None:
        if self._in_transaction:
            raise StateError("Publisher.transaction(): a transaction is already open (they do not nest)")
        if self._intents:
            raise StateError(
                "Publisher.transaction(): messages published uncommitted before it, to "
                f"{', '.join(self._intents)}, are still open: commit() or rollback() them first",
            )
        self._in_transaction = True

    async def _finish_transaction(self, timeout: Timeout) -> None:
        """A transaction's normal exit: its messages flushed, then its ACKs (`acommit`); messages
        that cannot be flushed are rolled back instead (nothing commits)."""
        try:
            await self.service.flush(timeout=resolve_timeout(timeout, self._binding.aio.timeout))
        except BaseException as exc:
            try:
                await self.arollback(timeout)
            except Exception as failure:
                exc.add_note(f"rolling the transaction back failed too: {failure}")
            raise
        await self.acommit(timeout)

    async def _await_acks(self, what: str, futures: dict[str, AppendFuture], seconds: float | None) -> None:
        """Waits for ACK appends; raises the first failure, or after `seconds` a CallTimeout naming
        the journals still pending (their ACKs stay queued)."""
        _, not_done = await asyncio.wait(wrap_futures(futures.values()), timeout=seconds)
        if not_done:
            raise self.service.timeout_error(what, list(futures.items()), seconds)
        for f in futures.values():
            exc = f.exception()
            if exc is not None:
                raise exc

    def _new_producer(self) -> None:
        """Continues as a new producer (a random id): the old one's open spans are never acknowledged."""
        self.producer_id = new_producer_id()
        self._producer_bits = int.from_bytes(self.producer_id, "big")
        self._uuid_texts = UUIDText(self.producer_id)
        self._uuid_text = self._uuid_texts.text

    def uuid(self, clock: int, flags: int) -> _uuid.UUID:
        """This producer's UUID for (clock, flags): the layout of `build_uuid`, built quickly."""
        ts = clock >> 4
        value = (
            (ts & 0xFFFFFFFF) << 96
            | ((ts >> 32) & 0xFFFF) << 80
            | (((ts >> 48) & 0x0FFF) | 0x1000) << 64
            | (0x8000 | (clock & 0xF) << 10 | flags) << 48
            | self._producer_bits
        )
        return _uuid_from_int(value)

    def _frame_first(self, framing: Framing, message: Any, first: list[int]) -> bytes:
        """Frames a transaction's first CONTINUE_TXN message to a journal, noting its clock in `first`."""
        clock = self.clock.tick()
        first.append(clock)
        if isinstance(framing, JSONFraming):
            return framing.encode_uuid_text(message, self._uuid_text(clock, _CONTINUE_TXN))
        return framing.encode(message, self.uuid(clock, _CONTINUE_TXN))

    def _frame(self, framing: Framing, message: Any, flags: int) -> bytes:
        """Runs with the journal's order fixed: tick, stamp, encode (docs/semantics.md#publisher)."""
        return framing.encode(message, self.uuid(self.clock.tick(), flags))

    def _frame_batch(self, framing: Framing, messages: Sequence[Any], first: list[int]) -> bytes:
        """CONTINUE_TXN frames of `messages` with consecutive clock ticks, noting the first in `first`."""
        clock = self.clock.tick_many(len(messages))
        first.append(clock)
        if isinstance(framing, JSONFraming):
            return framing.encode_uuid_runs(
                messages, self._uuid_texts.runs(clock, len(messages), _CONTINUE_TXN)
            )
        ticks = range(clock, clock + len(messages) * CLOCK_TICK, CLOCK_TICK)
        return b"".join(
            [framing.encode(m, self.uuid(c, _CONTINUE_TXN)) for m, c in zip(messages, ticks, strict=True)]
        )

    def _frame_json(self, framing: JSONFraming, message: Any, flags: int) -> bytes:
        """`_frame` for a JSONFraming: the same bytes, stamped with the UUID's text."""
        return framing.encode_uuid_text(message, self._uuid_text(self.clock.tick(), flags))

    def _update_clock(self) -> None:
        now = time.monotonic()
        if now >= self._next_clock_update:
            self._next_clock_update = now + CLOCK_UPDATE_INTERVAL_S
            self.clock.update_to_now()

    # --- journals and framings -------------------------------------------------------------------
    def _route(self, mapping: MappingLike, message: Any) -> tuple[str, Framing, FrameFn]:
        """The journal of `message`, its framing and the function framing it. A plain journal name's
        route is remembered (publish_* look it up before calling this)."""
        if type(mapping) is str:
            journal = mapping
            content_type = self._content_types.get(journal)
            if content_type is None:
                content_type = self._lookup_content_type(journal)
        elif callable(mapping):
            journal, content_type = mapping(message)
        else:
            raise TypeError(f"{mapping!r} is neither a journal name nor a mapping (a callable of a message)")
        framing = self._framings.get(content_type)
        if framing is None:
            framing = self._framing_of(journal, content_type)
        frame = self._frame_json if isinstance(framing, JSONFraming) else self._frame
        if journal is mapping:
            self._routes[journal] = (framing, frame)
        return journal, framing, frame

    def _framing_of(self, journal: str, content_type: str) -> Framing:
        """The framing of `content_type`: the one given to the constructor, else the registry's."""
        framing = self._framings.get(content_type)
        if framing is None:
            if not content_type:
                raise ConfigurationError(
                    f'journal {journal} has no "{CONTENT_TYPE_LABEL}" label, so messages cannot be framed for it',
                )
            framing = self._framings[content_type] = framing_for(content_type)
        return framing

    def _lookup_content_type(self, journal: str) -> str:
        if self._binding.on_loop():
            raise StateError(
                f"the content type of journal {journal} is not known yet, and looking it up would block the "
                f"event loop: `await publisher.prepare({journal!r})` first",
            )
        return self._binding.run(
            self.prepare(journal, timeout=CONTENT_TYPE_LOOKUP_TIMEOUT_S),
            what="looking up a journal's content type",
        )[journal]

    async def prepare(self, *journals: str, timeout: Timeout = USE_CLIENT_DEFAULT) -> dict[str, str]:
        """Looks up (once) the content types of journals published to by name; returns them. Each
        lookup is bounded by `timeout` seconds (the client's default unless given)."""
        out: dict[str, str] = {}
        for journal in journals:
            content_type = self._content_types.get(journal)
            if content_type is None:
                # Patient, as the appends that follow: a publisher rides through broker restarts.
                listing = await self._binding.aio.list_journals(
                    LabelSelector(include=[("name", journal)]), patient=True, timeout=timeout
                )
                if not listing:
                    raise GazetteError(
                        Status.JOURNAL_NOT_FOUND, f"cannot publish to journal {journal}: it does not exist"
                    )
                content_type = listing[0].spec.labels.value_of(CONTENT_TYPE_LABEL) or ""
                self._framing_of(journal, content_type)  # fail early on a journal without a framing
                self._content_types[journal] = content_type
            out[journal] = content_type
        return out

    # --- waiting and closing ---------------------------------------------------------------------
    def flush(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """Blocks until everything published so far is appended; raises the first failure, or
        CallTimeout once no batch finished for `timeout` seconds (the client's default unless given),
        naming the journals still pending, the broker and the last status (their batches stay queued
        and retried). It commits nothing: see `commit()`. (On the client's loop:
        `await publisher.service.flush()`.)"""
        self.service.wait(timeout)

    def close(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """Drains and stops the publisher's own append service (blocking; see `aclose`): waits for
        what is buffered, and once no batch finished for `timeout` seconds (the client's default
        unless given) drops the rest and raises CallTimeout. Uncommitted messages stay uncommitted."""
        if self._own_service:
            seconds = resolve_timeout(timeout, self._binding.aio.timeout)
            self._binding.run(self.service.close(seconds), what="Publisher.close")

    async def aclose(self, timeout: Timeout = USE_CLIENT_DEFAULT) -> None:
        """`close()` on the client's event loop."""
        if self._own_service:
            await self.service.close(resolve_timeout(timeout, self._binding.aio.timeout))

    def __enter__(self) -> Publisher:
        """The publisher itself; leaving the `with` block closes it (see `close`)."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Drains and closes the publisher's own append service (`close`), even after an exception;
        uncommitted messages stay uncommitted."""
        self.close()
