"""What `gazette journals read|append|suspend` do with a label selector, as gazctl's commands do.

* read: the selected journals (fully suspended ones skipped) are read concurrently and their content
  multiplexed into one output in whole chunks; starting offsets come from --offsets (a JSON object of
  journal to offset), else the write head (--tail) or the given offset; --offsets-out records where
  each read ended, written atomically (and, when it is the --offsets file, the input is kept as
  `<path>.previous`), also after Ctrl-C.
* append: the whole input atomically to one journal of the selector (picked at random), or with
  --framing lines|fixed, record by record through a mapping (random, modulo and rendezvous hash a
  partition key that precedes each record; direct names the journal). The input is parsed and every
  record mapped before anything is appended, so bad input appends nothing.
* suspend: an empty append asking each selected journal to suspend (SUSPEND_IF_FLUSHED, --force
  SUSPEND_NOW); a journal already suspended counts as done.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import sys
from typing import IO, TYPE_CHECKING, Any

from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.status import Status

if TYPE_CHECKING:
    from gazette.client.aio import AsyncClient
    from gazette.client.sync import Client

FRAMINGS = ("none", "lines", "fixed")
MAPPINGS = ("random", "modulo", "rendezvous", "direct")
FIXED_MAGIC = b"\x66\x33\x93\x36"
FIXED_HEADER_BYTES = 8  # magic + little-endian uint32 length


# ---- read


def load_offsets(path: str | None, moving_to: str | None) -> dict[str, int]:
    """The --offsets file (it must exist), moved to `<path>.previous` when it is also --offsets-out."""
    if path is None:
        return {}
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise ValidationError(f"--offsets {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValidationError(f"--offsets {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= -1
        for k, v in doc.items()
    ):
        raise ValidationError(f"--offsets {path} is not a JSON object of journal names to offsets (>= -1)")
    if moving_to is not None and os.path.abspath(moving_to) == os.path.abspath(path):
        os.replace(path, path + ".previous")
    return dict(doc)


def save_offsets(path: str, offsets: dict[str, int]) -> None:
    """Writes `offsets` to `path` atomically (a temporary, fsynced, then renamed over it)."""
    temp = path + ".temp"
    with open(temp, "w") as f:
        json.dump(dict(sorted(offsets.items())), f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


async def read_journals(
    aio: AsyncClient,
    starts: dict[str, int],
    out: IO[bytes],
    offsets: dict[str, int],
    *,
    block: bool,
    end_offset: int | None,
    timeout: Any,
) -> None:
    """Reads each journal of `starts` from its offset into `out`, concurrently, updating `offsets`
    (where each read is) as chunks are written. The first failure cancels the other reads."""

    async def pump(journal: str) -> None:
        async for chunk in aio.read(
            journal, starts[journal], block=block, end_offset=end_offset, timeout=timeout
        ):
            out.write(chunk.content)
            out.flush()
            offsets[journal] = chunk.offset + len(chunk.content)
        if offsets.get(journal, -1) < 0:  # nothing read from the write head: the head is where it ended
            offsets[journal] = await aio.read_head(journal)

    tasks = [asyncio.ensure_future(pump(j)) for j in starts]
    if not tasks:
        return
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---- append


def split_records(data: bytes, framing: str) -> list[bytes]:
    """`data` as its records, delimiters kept (a line with its newline, a fixed frame with its header)."""
    records: list[bytes] = []
    pos = 0
    if framing == "lines":
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl == -1:
                raise ValidationError(
                    f"the input ends with a partial line at byte {pos} (no newline): nothing appended"
                )
            records.append(data[pos : nl + 1])
            pos = nl + 1
        return records
    while pos < len(data):
        header = data[pos : pos + FIXED_HEADER_BYTES]
        if len(header) < FIXED_HEADER_BYTES or header[:4] != FIXED_MAGIC:
            raise ValidationError(f"the input has no fixed-framing header at byte {pos}: nothing appended")
        end = pos + FIXED_HEADER_BYTES + int.from_bytes(header[4:], "little")
        if end > len(data):
            raise ValidationError(
                f"the fixed frame at byte {pos} is cut short by the end of input: nothing appended"
            )
        records.append(data[pos:end])
        pos = end
    return records


def _key_of(record: bytes, framing: str, b64: bool) -> bytes:
    """A partition key record (its delimiter off; --base64 decoded)."""
    if framing == "fixed":
        return record[FIXED_HEADER_BYTES:]
    key = record.rstrip(b"\r\n")
    if b64:
        try:
            return base64.b64decode(key, validate=True)
        except binascii.Error:
            raise ValidationError(
                f"partition key {key.decode(errors='replace')!r} is not base64: nothing appended"
            ) from None
    return key


def plan_appends(
    client: Client, selector: str, data: bytes, framing: str, mapping: str, b64: bool
) -> dict[str, list[bytes]]:
    """Each journal's records, in input order, as gazctl's `journals append` maps them."""
    from gazette.message.mapping import ModuloMapping, RandomMapping, RendezvousMapping

    if framing not in FRAMINGS:
        raise ValidationError(f'--framing "{framing}" is not one of {", ".join(FRAMINGS)}')
    if mapping not in MAPPINGS:
        raise ValidationError(f'--mapping "{mapping}" is not one of {", ".join(MAPPINGS)}')
    if framing == "none" and mapping != "random":
        raise ValidationError(
            "--framing none (the whole input as one append) goes with --mapping random only"
        )
    if b64 and (framing != "lines" or mapping == "random"):
        raise ValidationError("--base64 needs --framing lines and a --mapping other than random")
    names = [i.spec.name for i in client.list_journals(selector)]
    if not names:
        raise ValidationError(f'no journals match selector "{selector}": nothing appended')
    if framing == "none":
        import random

        return {random.choice(names): [data]}
    records = split_records(data, framing)
    keyed = mapping != "random"
    if keyed and len(records) % 2:
        raise ValidationError(
            f"--mapping {mapping} reads a partition key before each record, and the input's last key has no "
            "record: nothing appended"
        )
    pairs = (
        [(_key_of(records[i], framing, b64), records[i + 1]) for i in range(0, len(records), 2)]
        if keyed
        else [(b"", r) for r in records]
    )
    plan: dict[str, list[bytes]] = {}
    if mapping == "direct":
        known = set(names)
        for key, record in pairs:
            journal = key.decode(errors="replace")
            if journal not in known:
                raise ValidationError(
                    f'journal "{journal}" is not a journal of selector "{selector}": nothing appended'
                )
            plan.setdefault(journal, []).append(record)
        return plan

    def partition_key(pair: tuple[bytes, bytes]) -> bytes:
        return pair[0]

    watched: RandomMapping | ModuloMapping | RendezvousMapping
    if mapping == "modulo":
        watched = ModuloMapping(client, selector, key=partition_key)
    elif mapping == "rendezvous":
        watched = RendezvousMapping(client, selector, key=partition_key)
    else:
        watched = RandomMapping(client, selector)
    try:
        watched.wait_for_journals(lambda listed: bool(listed), timeout=client.timeout)
        for pair in pairs:
            journal, _ = watched(pair)
            plan.setdefault(journal, []).append(pair[1])
    finally:
        watched.close()
    return plan


# ---- suspend


async def suspend_journals(aio: AsyncClient, names: list[str], force: bool) -> None:
    """Asks each journal to suspend, concurrently; an answer SUSPENDED (it already is) is success."""
    from gazette.protocol import broker_pb2 as pb

    mode = pb.AppendRequest.SUSPEND_NOW if force else pb.AppendRequest.SUSPEND_IF_FLUSHED

    async def one(journal: str) -> None:
        try:
            await aio.append(journal, b"", suspend=mode)
        except GazetteError as exc:
            if exc.status != Status.SUSPENDED:
                raise GazetteError(
                    exc.status, f"failed to suspend journal {journal}: {exc.message}"
                ) from None

    await asyncio.gather(*(one(j) for j in names))


def stdout_or(path: str) -> IO[bytes]:
    """The binary stdout for "-", else `path` opened for writing (created or truncated)."""
    return sys.stdout.buffer if path == "-" else open(path, "wb")
