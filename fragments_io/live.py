"""Live reads: the committed bytes past a journal's persisted fragments, read through brokers.

With option `broker` (or `live=true` and `etcd`, whose registered brokers are used) planning asks
the brokers for each journal's write head. Brokers serve readers only bytes every replica
acknowledged (gazette/broker/read.py), so everything below the head is committed. The offsets the
persisted fragments do not cover, from the journal's first fragment (0 if none is persisted) up to
the head, become LiveRanges: bounded reads of [begin, end) by the Read RPC that executors run in
place of fragment reads. A range is offsets, not a fragment: whoever persists those bytes meanwhile,
the read returns the same bytes, so a replanned micro-batch is deterministic.

A LiveRange looks like a Fragment to the planner, decoder and shaper (journal, begin, end, length,
mod_time, backing_store, content_path); its mod_time is the planning time (the bytes persist at or
after it). A read that cannot finish (a broker down past option brokerTimeout, or the stream ending
early) raises FragmentsIOError, so Spark fails and retries the task: partial data is never returned
as complete. A read that jumps forward (the range was lost: pruned before it was read) is data loss,
as for fragments (option failOnDataLoss).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fragments_io.errors import FragmentsIOError, OptionError, data_loss
from fragments_io.options import ReadOptions

if TYPE_CHECKING:
    from fragments_io.discovery import Discovery

# Bytes read through a broker are handed to the decoder in pieces of about this size.
PIECE_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class LiveRange:
    """Committed bytes [begin, end) of `journal` that no persisted fragment held at planning, read
    through the brokers `brokers` (comma-separated URLs)."""

    journal: str
    begin: int
    end: int
    brokers: str
    mod_time: int = 0  # unix seconds of planning: the bytes persist at or after it

    @property
    def length(self) -> int:
        return self.end - self.begin

    @property
    def backing_store(self) -> str:
        return ""

    @property
    def content_path(self) -> str:
        """What a decoder's error calls it (decode.object_name)."""
        return f"{self.journal} [{self.begin}, {self.end}) read through broker(s) {self.brokers}"


def gaps(journal: str, covered: Sequence[Any], head: int, brokers: str, now: int) -> tuple[LiveRange, ...]:
    """The LiveRanges of [first, head) that `covered` (a cover's fragments, sorted) leaves out; first
    is the first fragment's begin, 0 when there is none."""
    out: list[LiveRange] = []
    pos = covered[0].begin if covered else 0
    for f in covered:
        if f.begin >= head:
            break
        if f.begin > pos:
            out.append(LiveRange(journal, pos, f.begin, brokers, now))
        pos = max(pos, f.end)
    if pos < head:
        out.append(LiveRange(journal, pos, head, brokers, now))
    return tuple(out)


# -- the brokers (driver) --------------------------------------------------------------------------


def brokers_of(opts: ReadOptions) -> str:
    """The broker URLs of a live read: option broker, else those registered under etcdRoot/members/."""
    if opts.broker:
        return opts.broker
    assert opts.etcd, "parse_options requires broker or etcd for live reads"
    from fragments_io.discovery import _get_prefix, _run_coroutine
    from gazette.protocol import broker_pb2 as pb

    endpoints = []
    for key, raw in _run_coroutine(_get_prefix(opts.etcd, f"{opts.etcd_root}/members/")):
        try:
            endpoint = pb.BrokerSpec.FromString(raw).process_spec.endpoint
        except Exception:
            raise OptionError(f"option live: etcd key {key} is not a broker's BrokerSpec") from None
        if endpoint:
            endpoints.append(endpoint)
    if not endpoints:
        raise OptionError(
            f"option live=true: no broker is registered under {opts.etcd_root}/members/ in etcd {opts.etcd} "
            "(give option broker, or check option etcdRoot)"
        )
    return ",".join(sorted(endpoints))


def survey(
    opts: ReadOptions, brokers: str, names: Iterable[str], selector: str | None
) -> tuple[dict[str, int], dict[str, Any]]:
    """Each journal's write head (journals the brokers do not know are left out) and, with
    `selector`, the JournalSpecs of the journals the brokers list for it. Through this process's
    client of `brokers` (kept: a streaming query plans every trigger)."""
    from gazette.protocol.errors import GazetteError
    from gazette.protocol.status import Status

    client = _client(brokers, opts.broker_timeout_s)
    try:
        specs: dict[str, Any] = {}
        if selector is not None:
            specs = {info.spec.name: info.spec for info in client.list_journals(selector)}
        heads: dict[str, int] = {}
        for name in sorted(set(names) | set(specs)):
            try:
                heads[name] = client.read_head(name)
            except GazetteError as e:
                if e.status != Status.JOURNAL_NOT_FOUND:
                    raise
                # deleted since it was persisted: its persisted fragments are all there is
        return heads, specs
    except GazetteError as e:
        raise FragmentsIOError(
            f"live read: asking broker(s) {brokers} for the journals' write heads failed: {e}"
        ) from e


def with_heads(found: Discovery, opts: ReadOptions) -> Discovery:
    """`found` with each journal's LiveRanges up to its write head, plus (store mode) the journals
    the brokers list that have nothing persisted yet. The store is listed before the heads are
    read, so every persisted fragment ends at or below its journal's head."""
    from fragments_io.discovery import Discovery, JournalSource
    from fragments_io.planning import cover

    brokers = brokers_of(opts)
    selector = selector_of(opts.journals) if opts.store else None
    by_name = {j.name: j for j in found.journals}
    heads, specs = survey(opts, brokers, by_name, selector)
    now = now_s()
    out = []
    for name in sorted(set(by_name) | set(specs)):
        j = by_name.get(name) or JournalSource(name, opts.framing or "json", ())
        head = heads.get(name)
        live = gaps(name, cover(j.fragments), head, brokers, now) if head else ()
        out.append(dataclasses.replace(j, live=live))
    return Discovery(tuple(out), found.foreign)


def selector_of(journals: str) -> str:
    """The List selector of option journals in store mode (a name, a prefix ending in "/", or "")."""
    if not journals:
        return ""
    return f"prefix={journals}" if journals.endswith("/") else f"name={journals}"


def now_s() -> int:
    return int(time.time())


# -- reading (executors) ---------------------------------------------------------------------------

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _client(brokers: str, timeout: float) -> Any:
    """One sync client per broker list and timeout in this process (Spark reuses Python workers)."""
    key = f"{brokers}|{timeout}"
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            from gazette.client.sync import Client

            client = _clients[key] = Client(brokers, timeout=timeout)
        return client


def read_range(r: LiveRange, opts: ReadOptions) -> Iterator[tuple[LiveRange, bytes]]:
    """The bytes of `r` in contiguous pieces (each a LiveRange of what it holds), read through the
    brokers. Raises FragmentsIOError when the read cannot reach `r.end` (a broker down for longer
    than option brokerTimeout, the stream ending early); a jump past lost bytes is data loss."""
    from gazette.protocol.errors import GazetteError

    where = f"journal {r.journal}: reading offsets [{r.begin}, {r.end}) through broker(s) {r.brokers}"
    pos = start = r.begin
    parts: list[bytes] = []
    size = 0
    try:
        chunks = _client(r.brokers, opts.broker_timeout_s).read(
            r.journal, r.begin, block=True, end_offset=r.end, timeout=opts.broker_timeout_s
        )
        for chunk in chunks:
            if chunk.offset != pos:
                if chunk.offset < pos:
                    raise FragmentsIOError(f"{where}: content came at offset {chunk.offset}, expected {pos}")
                if parts:
                    yield dataclasses.replace(r, begin=start, end=pos), b"".join(parts)
                    parts, size = [], 0
                data_loss(opts.fail_on_data_loss, r.journal, pos, chunk.offset, "that a live read needs")
                pos = start = chunk.offset
            content = chunk.content[: r.end - pos]
            parts.append(content)
            size += len(content)
            pos += len(content)
            if size >= PIECE_BYTES:
                yield dataclasses.replace(r, begin=start, end=pos), b"".join(parts)
                parts, size, start = [], 0, pos
            if pos >= r.end:
                break
    except GazetteError as e:
        raise FragmentsIOError(f"{where} failed at offset {pos} (Spark retries the task): {e}") from e
    if pos < r.end:
        raise FragmentsIOError(
            f"{where}: the read ended at offset {pos}, before {r.end} (Spark retries the task)"
        )
    if parts:
        yield dataclasses.replace(r, begin=start, end=pos), b"".join(parts)


def iter_contents(items: Iterable[Any], opts: ReadOptions) -> Iterator[tuple[Any, bytes]]:
    """decode.iter_contents over fragments and LiveRanges: each one's (or each piece's) bytes."""
    from fragments_io.decode import read_content

    for item in items:
        if isinstance(item, LiveRange):
            yield from read_range(item, opts)
        else:
            content = read_content(item, opts.ignore_corrupt_fragments)
            if content is not None:
                yield item, content
