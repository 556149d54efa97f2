"""Journals for fragments_io tests: framed JSON messages of interleaved producers (duplicates,
rollbacks, restarts, messages without UUIDs) persisted as real fragments, and the envelopes
gazette's own Decoder reads from the same bytes (the reference for every comparison).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

import orjson

from gazette.fragment.content import persist_blocking
from gazette.fragment.fragment import Fragment
from gazette.message.framing import FramingError, JSONFraming
from gazette.message.uuid import CLOCK_TICK, Flags, build_uuid, clock_from_unix_ns, new_producer_id
from gazette.protocol.codec import Codec

FRAMING = JSONFraming()
BASE_CLOCK = clock_from_unix_ns(1_700_000_000 * 10**9)


def random_journal(seed: int, events: int = 120, producers: int = 3) -> list[bytes]:
    """Framed JSON messages of interleaved producers: self-committed messages, transactions
    (committed, rolled back by an ACK at the last ACK's clock), duplicate appends, producer
    restarts that re-send their last frames, and messages without a UUID."""
    rng = random.Random(seed)
    pids = [new_producer_id() for _ in range(producers)]
    clocks = [BASE_CLOCK + i * 1000 for i in range(producers)]
    acked = list(clocks)
    frames: list[bytes] = []
    sent: list[list[bytes]] = [[] for _ in range(producers)]
    for i in range(events):
        p = rng.randrange(producers)
        kind = rng.choices(
            ["outside", "continue", "ack", "rollback", "dup", "restart", "nouuid"], [4, 6, 2, 1, 1, 1, 1]
        )[0]
        body = {"p": p, "i": i, "word": rng.choice(["alpha", "beta", "gamma"]), "n": rng.randint(0, 99)}
        if kind == "nouuid":
            frames.append(orjson.dumps(body) + b"\n")
            continue
        if kind == "dup" and frames:
            frames.append(rng.choice(frames))
            continue
        if kind == "restart" and sent[p]:
            frames.extend(sent[p][-rng.randint(1, 3) :])
            continue
        if kind in ("dup", "restart"):
            kind = "outside"  # nothing to repeat yet
        if kind == "rollback":
            frame = FRAMING.encode_ack(build_uuid(pids[p], acked[p], Flags.ACK_TXN))
        else:
            clocks[p] += CLOCK_TICK
            flag = {"outside": Flags.OUTSIDE_TXN, "continue": Flags.CONTINUE_TXN, "ack": Flags.ACK_TXN}[kind]
            uuid = build_uuid(pids[p], clocks[p], flag)
            frame = FRAMING.encode_ack(uuid) if kind == "ack" else FRAMING.encode(body, uuid)
            if kind in ("ack", "outside"):
                acked[p] = clocks[p]
        frames.append(frame)
        sent[p].append(frame)
    # Always end with an ACK per producer so most transactions commit.
    for p in range(producers):
        clocks[p] += CLOCK_TICK
        frames.append(FRAMING.encode_ack(build_uuid(pids[p], clocks[p], Flags.ACK_TXN)))
    return frames


def persist_journal(
    store_url: str,
    journal: str,
    frames: list[bytes],
    codecs: tuple[Codec, ...] = (Codec.NONE,),
    frames_per_fragment: int = 25,
    postfix: str = "",
) -> list[Fragment]:
    """Writes `frames` as fragments of about `frames_per_fragment` frames each, cycling codecs."""
    out = []
    offset = 0
    for k, i in enumerate(range(0, len(frames), frames_per_fragment)):
        content = b"".join(frames[i : i + frames_per_fragment])
        out.append(persist_fragment(store_url, journal, offset, content, codecs[k % len(codecs)], postfix))
        offset += len(content)
    return out


def persist_fragment(
    store_url: str, journal: str, begin: int, content: bytes, codec: Codec = Codec.NONE, postfix: str = ""
) -> Fragment:
    frag = Fragment(journal, begin, begin + len(content), hashlib.sha1(content).digest(), codec)
    return persist_blocking(frag, lambda: iter([content]), store_url, postfix)


def envelopes_of(journal: str, frames: list[bytes]) -> Iterator:
    """The envelopes ReadUncommitted decodes from the journal's bytes (bad frames skipped)."""
    decoder = FRAMING.decoder(journal, 0)
    data = b"".join(frames)
    while True:
        try:
            yield from decoder.feed(data)
            break
        except FramingError as e:
            yield from e.envelopes
            data = b""
    decoder.close()
