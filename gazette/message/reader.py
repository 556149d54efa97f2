"""Message iterators over one journal: ReadUncommitted decodes every frame, ReadCommitted adds a
Sequencer so each committed message is delivered exactly once (docs/semantics.md#read-iterators). Imports the
client.

One async core reads and decodes a whole read chunk at a time, yielding lists of Envelopes: `for`
over a sync Client flattens them on the caller's thread (one loop-thread hop per chunk), `async for`
over an AsyncClient on the loop. ReadCommitted sequences where the caller iterates, so its
`checkpoint()` is exact between any two envelopes.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any

from gazette.client.aio import AsyncClient
from gazette.client.sync import Client
from gazette.message.checkpoint import Checkpoint
from gazette.message.envelope import Envelope
from gazette.message.framing import Decoder, Framing, FramingError, content_types, framing_for
from gazette.message.mapping import CONTENT_TYPE_LABEL
from gazette.message.sequencer import RING_SIZE_DEFAULT, Sequencer
from gazette.message.sequencing import adrive, drive
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.selector import LabelSelector
from gazette.protocol.spec import JournalSpec
from gazette.protocol.status import Status
from gazette.protocol.validate import validate_journal_name

__all__ = ["ReadCommitted", "ReadUncommitted"]

log = logging.getLogger(__name__)


def _check_client(client: object) -> None:
    if not isinstance(client, Client | AsyncClient):
        raise TypeError(f"{client!r} is neither a gazette Client nor an AsyncClient")


def replay_reader(
    client: Client | AsyncClient,
    journal: str,
    begin: int,
    end: int,
    framing: Framing | None,
    *,
    strict: bool = False,
) -> ReadUncommitted:
    """The read of a Sequencer's `replay_range()` (ACK_COMMIT_REPLAY): every message of [begin, end).

    It blocks, as the reference's replay reader does: a broker can answer OFFSET_NOT_YET_AVAILABLE
    inside a committed range (a primary whose spool missed a range that a replica holds until it
    persists it), and a read that stopped there would hand the Sequencer a short replay, whose
    missing messages the ACK then commits unseen: lost."""
    return ReadUncommitted(client, journal, begin, block=True, end_offset=end, framing=framing, strict=strict)


class ReadUncommitted:
    """Every message of `journal` from `offset` (-1: the write head), uncommitted ones included.

    On first use it lists the journal and builds the framing of its `content-type` label with
    `framing_options` (or uses `framing=` as given). Envelopes carry exact [begin, end) offsets.
    `block=False` stops at the write head (or at `end_offset`); `block=True` tails the journal.

    Offset jumps (content before the read's offset is gone) restart decoding at the new offset and
    are logged. A frame that cannot be decoded (a garbage line, an invalid UUID, a truncated frame
    at the end of a non-blocking read) is logged as a warning naming the journal and its offsets
    and skipped; with `strict=True` it raises FramingError instead, after the frames before it.

    Iterate with `for` over a sync `Client`, or `async for` over an `AsyncClient`.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        journal: str,
        offset: int = 0,
        *,
        block: bool = False,
        end_offset: int | None = None,
        framing_options: Mapping[str, Any] | None = None,
        framing: Framing | None = None,
        strict: bool = False,
    ) -> None:
        _check_client(client)
        validate_journal_name(journal, allow_meta=True)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
            raise ValidationError(f"read offset {offset!r} of journal {journal!r} is not an offset >= -1")
        if end_offset is not None and (
            isinstance(end_offset, bool) or not isinstance(end_offset, int) or end_offset < max(offset, 0)
        ):
            raise ValidationError(
                f"end_offset {end_offset!r} of journal {journal!r} is not None or an offset >= offset {offset}"
            )
        if framing is not None and framing_options:
            raise ValidationError("pass framing= or framing_options=, not both")
        self.client = client
        self.journal = journal
        self.offset = offset
        self.block = block
        self.end_offset = end_offset
        self.strict = strict
        self.framing = framing
        self.spec: JournalSpec | None = None  # the listed spec, once looked up
        self.write_head = 0  # the journal's write head as the read's last metadata response gave it
        self._framing_options = dict(framing_options or {})
        self._sync: Iterator[Envelope] | None = None
        self._async: AsyncIterator[Envelope] | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.journal!r}, offset={self.offset}, block={self.block}, "
            f"end_offset={self.end_offset})"
        )

    # -- the async core ---------------------------------------------------------------------------

    @property
    def _aio(self) -> AsyncClient:
        return self.client.aio if isinstance(self.client, Client) else self.client

    async def resolve_framing(self) -> Framing:
        """The framing of the journal's `content-type` label (listing the journal once)."""
        if self.framing is not None:
            return self.framing
        name = self.journal.partition(";")[0]
        listing = await self._aio.list_journals(LabelSelector(include=[("name", name)]), patient=True)
        if not listing:
            raise GazetteError(
                Status.JOURNAL_NOT_FOUND, f"cannot read messages of journal {name}: it does not exist"
            )
        self.spec = listing[0].spec
        content_type = self.spec.labels.value_of(CONTENT_TYPE_LABEL)
        if not content_type:
            raise FramingError(
                f'journal {name!r} has no "{CONTENT_TYPE_LABEL}" label, so its messages cannot be '
                "decoded: label it (e.g. application/x-ndjson) or pass framing=",
                journal=name,
            )
        if content_type not in content_types():
            raise FramingError(
                f'journal {name!r} has label {CONTENT_TYPE_LABEL}="{content_type}", which has no '
                f"registered framing (known: {', '.join(content_types())})",
                journal=name,
            )
        self.framing = framing_for(content_type, **self._framing_options)
        return self.framing

    async def batches(self) -> AsyncIterator[list[Envelope]]:
        """The async core: lists of envelopes, one per read chunk that completed a frame."""
        framing = await self.resolve_framing()
        journal = self.journal
        decoder: Decoder | None = None
        expect = self.offset
        async for chunk in self._aio.read(journal, self.offset, block=self.block, end_offset=self.end_offset):
            if decoder is None or chunk.offset != expect:
                self._log_jump(decoder, expect, chunk.offset)
                decoder = framing.decoder(journal, chunk.offset)
            content = chunk.content
            expect = chunk.offset + len(content)
            self.write_head = max(self.write_head, chunk.write_head)
            envs, err = self._feed(decoder, content)
            if envs:
                yield envs
            if err is not None:
                raise err
        if decoder is not None:
            err = self._close(decoder)
            if err is not None:
                raise err

    def _feed(self, decoder: Decoder, data: bytes) -> tuple[list[Envelope], FramingError | None]:
        """Decodes `data`, skipping bad frames; in strict mode stops at the first, returning it."""
        try:
            envs = decoder.feed(data)
        except FramingError as first:
            envs = first.envelopes
            err: FramingError | None = first
            while err is not None:
                if self.strict:
                    return envs, err
                self._log_bad_frame(err)
                try:
                    envs += decoder.feed(b"")
                    err = None
                except FramingError as more:
                    envs += more.envelopes
                    err = more
        if self.strict and decoder.skipped:
            return envs, self._garbage_error(decoder)
        return envs, None

    def _close(self, decoder: Decoder) -> FramingError | None:
        """At the end of a bounded read: a frame cut off at the end is bad (docs/semantics.md#framings)."""
        try:
            decoder.close()
        except FramingError as err:
            if self.strict:
                return err
            self._log_bad_frame(err)
        if self.strict and decoder.skipped:
            return self._garbage_error(decoder)
        return None

    def _garbage_error(self, decoder: Decoder) -> FramingError:
        begin, end = decoder.skipped[0]
        return FramingError(
            f"journal {self.journal!r} holds {end - begin} bytes of garbage at [{begin}, {end}) "
            "between frames (strict read)",
            journal=self.journal,
            begin=begin,
            end=end,
        )

    def _log_bad_frame(self, err: FramingError) -> None:
        log.warning(
            "journal %s: skipping the undecodable bytes [%s, %s) and reading on: %s",
            self.journal, err.begin, err.end, err,
        )  # fmt: skip

    def _log_jump(self, decoder: Decoder | None, expect: int, offset: int) -> None:
        if decoder is None:
            if expect not in (-1, offset):
                log.warning(
                    "journal %s: read from offset %d starts at %d (content before it is gone)",
                    self.journal, expect, offset,
                )  # fmt: skip
            return
        lost = f"; {decoder.buffered} bytes of an incomplete frame at {decoder.offset} are dropped"
        log.warning(
            "journal %s: read jumped from offset %d to %d (that content is gone), decoding restarts there%s",
            self.journal, expect, offset, lost if decoder.buffered else "",
        )  # fmt: skip

    # -- iteration ----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Envelope]:
        if self._sync is None:
            self._sync = self._iterate()
        return self._sync

    def __next__(self) -> Envelope:
        return next(iter(self))

    def _iterate(self) -> Iterator[Envelope]:
        if not isinstance(self.client, Client):
            raise TypeError(
                f"{type(self).__name__} over an AsyncClient is an async iterator: use `async for`"
            )
        batches = self.client._loop.iterate(self.batches())
        try:
            for batch in batches:
                yield from batch
        finally:
            batches.close()  # type: ignore[attr-defined]  # a generator: ends the read's RPC

    def __aiter__(self) -> AsyncIterator[Envelope]:
        if self._async is None:
            self._async = self._aiterate()
        return self._async

    async def __anext__(self) -> Envelope:
        return await anext(self.__aiter__())

    async def _aiterate(self) -> AsyncIterator[Envelope]:
        if not isinstance(self.client, AsyncClient):
            raise TypeError(
                f"{type(self).__name__} over a sync Client is a plain iterator: use `for` "
                "(or pass client.aio from code running on the client's loop)"
            )
        async for batch in self.batches():
            for env in batch:
                yield env

    def close(self) -> None:
        """Ends a sync iteration (and its read RPC); a blocking reader should be closed when done."""
        if self._sync is not None:
            self._sync.close()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async.aclose()  # type: ignore[attr-defined]

    def __enter__(self) -> ReadUncommitted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> ReadUncommitted:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class ReadCommitted(ReadUncommitted):
    """The committed messages of `journal`, each exactly once, in journal order per producer.

    ReadUncommitted plus a Sequencer (docs/semantics.md#read-iterators): committed sequences are delivered
    from the sequencer's ring of `ring_size` envelopes, or replayed with a bounded read of the journal when
    the ring no longer holds their start. ACK messages end each transaction and are delivered with
    `env.is_ack` (applications ignore them); `skip_acks=True` leaves them out.

    `checkpoint()` may be called between any two envelopes: every envelope already returned counts
    as processed, so a ReadCommitted built with `checkpoint=` (a Checkpoint or its dict form) resumes
    with the next one. Reading then starts at the checkpoint's read-through offset of the journal,
    which may lie before what was delivered (an open transaction); `offset` is used only for a
    journal the checkpoint does not name; -1 (the write head) is resolved when iteration starts.
    `sequencer` is the live Sequencer (for notebooks). Not thread-safe.
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        journal: str,
        offset: int = 0,
        *,
        block: bool = False,
        end_offset: int | None = None,
        framing_options: Mapping[str, Any] | None = None,
        framing: Framing | None = None,
        strict: bool = False,
        checkpoint: Checkpoint | Mapping[str, Any] | None = None,
        ring_size: int = RING_SIZE_DEFAULT,
        skip_acks: bool = False,
    ) -> None:
        if checkpoint is not None:
            if not isinstance(checkpoint, Checkpoint):
                checkpoint = Checkpoint.from_dict(checkpoint)
            offset = checkpoint.offsets.get(journal, offset)
            self._restore = (dict(checkpoint.offsets), list(checkpoint.producers))
        else:
            self._restore = ({}, [])
        if isinstance(offset, int) and offset >= 0:
            self._restore[0].setdefault(journal, offset)
        self._ring_size = ring_size
        self.sequencer = Sequencer(*self._restore, ring_size=ring_size)
        super().__init__(
            client,
            journal,
            offset,
            block=block,
            end_offset=end_offset,
            framing_options=framing_options,
            framing=framing,
            strict=strict,
        )
        self.skip_acks = skip_acks
        self.replays = 0  # committed sequences read back from the journal (ring too small)

    def _start_at(self, head: int) -> None:
        """Reading from the write head (offset -1): the head found when iteration starts is the
        journal's read-through offset from then on (so a checkpoint taken at once resumes there)."""
        offsets, states = self._restore
        self.sequencer = Sequencer({**offsets, self.journal: head}, states, ring_size=self._ring_size)
        self.offset = head

    def checkpoint(self, prune_horizon: int | None = None) -> Checkpoint:
        """Where to resume: every envelope returned so far counts as processed (see Sequencer.checkpoint)."""
        return self.sequencer.checkpoint(prune_horizon)

    def _replay_reader(self, journal: str, begin: int, end: int) -> ReadUncommitted:
        """The read of the sequencer's `replay_range()` (journal, begin, end)."""
        self.replays += 1
        log.debug("journal %s: replaying [%d, %d) for a sequence no longer in the ring", journal, begin, end)
        return replay_reader(self.client, journal, begin, end, self.framing, strict=self.strict)

    def _replay(self, journal: str, begin: int, end: int) -> Iterator[Envelope]:
        return iter(self._replay_reader(journal, begin, end))

    async def _areplay(self, journal: str, begin: int, end: int) -> list[Envelope]:
        return [e async for e in self._replay_reader(journal, begin, end)]

    # Both iterations are gazette.message.sequencing's driver; the sync one streams a replay through
    # the loop thread, the async one (whose step() cannot await) reads the replay range into a list
    # first. Each envelope is yielded only after the following step() (hold=True), which marks it
    # processed.

    def _iterate(self) -> Iterator[Envelope]:
        if not isinstance(self.client, Client):
            raise TypeError(
                f"{type(self).__name__} over an AsyncClient is an async iterator: use `async for`"
            )
        if self.offset == -1:
            self._start_at(self.client.read_head(self.journal))
        batches = self.client._loop.iterate(self.batches())
        envelopes = itertools.chain.from_iterable(batches)
        try:
            yield from drive(self.sequencer, envelopes, self._replay, skip_acks=self.skip_acks, hold=True)
        finally:
            batches.close()  # type: ignore[attr-defined]

    async def _aiterate(self) -> AsyncIterator[Envelope]:
        if not isinstance(self.client, AsyncClient):
            raise TypeError(
                f"{type(self).__name__} over a sync Client is a plain iterator: use `for` "
                "(or pass client.aio from code running on the client's loop)"
            )
        if self.offset == -1:
            self._start_at(await self.client.read_head(self.journal))
        driven = adrive(self.sequencer, self.batches(), self._areplay, skip_acks=self.skip_acks, hold=True)
        async for env in driven:
            yield env
