"""Offline recovery (`gazette shards recover`, docs/semantics.md#shard-commands): a shard's recovery log
played into a local directory, to inspect its store without a running consumer.

Playback uses the shard's stored hints (the primary's, else the newest backup) and stops at the
log's write head without a hand-off, so it never fences the shard's live primary. The directory must
be new or empty: playback owns what is in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import TYPE_CHECKING

from gazette.consumer.recoverylog.hints import fetch_hints
from gazette.consumer.recoverylog.ops import RecoveryLogError
from gazette.consumer.recoverylog.player import Player
from gazette.consumer.recoverylog.prune import stored_hints
from gazette.consumer.recoverylog.recovery import recovery_log_of

if TYPE_CHECKING:
    import aetcd

    from gazette.client.aio import AsyncClient
    from gazette.consumer.spec import ShardSpec

PLAYBACK_TIMEOUT_S = 300.0  # an offline playback reading longer than this is given up on


@dataclasses.dataclass(frozen=True)
class RecoveredDirectory:
    """What `recover_directory` restored: files (relative path, size in bytes) under `directory`,
    the hints it used ("" if none were stored) and the log range it read."""

    shard: str
    log: str
    directory: str
    hints_key: str
    start_offset: int
    end_offset: int
    applied: int
    skipped: int
    files: tuple[tuple[str, int], ...]


def check_empty_directory(directory: str) -> None:
    """Raises RecoveryLogError unless `directory` is absent or an empty directory."""
    if not os.path.lexists(directory):
        return
    if not os.path.isdir(directory):
        raise RecoveryLogError(f'recover into "{directory}": it exists and is not a directory')
    entries = sorted(os.listdir(directory))
    if entries:
        raise RecoveryLogError(
            f'recover into "{directory}": the directory is not empty ({len(entries)} entries, e.g. '
            f"{entries[0]!r}); give a new or empty directory"
        )


def _files(directory: str) -> tuple[tuple[str, int], ...]:
    out = []
    for parent, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            out.append((os.path.relpath(path, directory), os.path.getsize(path)))
    return tuple(sorted(out))


async def recover_directory(
    client: AsyncClient,
    etcd: aetcd.Client,
    spec: ShardSpec,
    directory: str,
    *,
    timeout: float = PLAYBACK_TIMEOUT_S,
) -> RecoveredDirectory:
    """Plays `spec`'s recovery log into `directory` (new or empty) from its stored hints through the
    log's current write head; raises RecoveryLogError for a shard without a log or a bad directory."""
    if not spec.recovery_log_prefix:
        raise RecoveryLogError(f'shard "{spec.id}" has no recovery_log_prefix, so there is no log to recover')
    check_empty_directory(directory)
    log = recovery_log_of(spec.recovery_log_prefix, spec.id)
    hints = await fetch_hints(etcd, spec.hint_prefix, spec.id, spec.hint_backups)
    keyed = stored_hints(hints, spec.hint_prefix, spec.id)
    hints_key, picked = keyed[0] if keyed else ("", None)
    await asyncio.to_thread(os.makedirs, directory, exist_ok=True)
    player = Player(client, log, directory, picked)
    play = asyncio.create_task(player.play(), name=f"recover {log}")
    player.finish_at_head()
    try:
        async with asyncio.timeout(timeout):
            await asyncio.shield(play)
    except TimeoutError:
        raise RecoveryLogError(
            f"playback of {log} did not reach its write head within {timeout:.0f} s (at offset {player.offset})"
        ) from None
    finally:
        if not play.done():
            play.cancel()
            await asyncio.gather(play, return_exceptions=True)
    return RecoveredDirectory(
        spec.id, log, os.path.abspath(directory), hints_key, player.start_offset or 0, player.offset,
        player.applied, player.skipped, await asyncio.to_thread(_files, directory),
    )  # fmt: skip
