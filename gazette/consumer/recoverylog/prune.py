"""Hint-based pruning of recovery logs (`gazette shards prune`, docs/semantics.md#retention-and-pruning,
#recovery-logs).

A player reads a recovery log from the first hinted segment onward, so persisted fragments ending
at or before the lowest offset that any stored hints (primary and backups) still need can go.
Logs whose hints are all absent, or list no live files (playback from offset 0), keep everything.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gazette.client.prune import remove_fragments
from gazette.consumer.recoverylog.hints import (
    FSMHints,
    ShardHints,
    backup_hints_key,
    fetch_hints,
    primary_hints_key,
)
from gazette.consumer.recoverylog.ops import RecoveryLogError
from gazette.consumer.recoverylog.recovery import recovery_log_of
from gazette.fragment.fragment import Fragment

if TYPE_CHECKING:
    import aetcd

    from gazette.client.aio import AsyncClient
    from gazette.consumer.spec import ShardSpec


@dataclasses.dataclass(frozen=True)
class NeededOffset:
    """The lowest offset of `log` that stored hints need (None: the whole log may be read), the etcd
    key of the hints needing it, and why nothing can be pruned when `offset` is None or 0."""

    log: str
    offset: int | None
    hints_key: str = ""
    reason: str = ""


def stored_hints(hints: ShardHints, hint_prefix: str, shard_id: str) -> list[tuple[str, FSMHints]]:
    """The (etcd key, hints) of a shard's stored hints: the primary's first, then backups newest first."""
    keyed = [(primary_hints_key(hint_prefix, shard_id), hints.primary)]
    keyed += [(backup_hints_key(hint_prefix, shard_id, n), h) for n, h in enumerate(hints.backups)]
    return [(key, h) for key, h in keyed if h is not None]


def needed_offset(log: str, keyed_hints: Iterable[tuple[str, FSMHints]]) -> NeededOffset:
    """The lowest offset of `log` that any of the hints needs (see NeededOffset)."""
    keyed = list(keyed_hints)
    if not keyed:
        return NeededOffset(log, None, reason="no hints are stored, so playback reads the log from its start")
    lowest: tuple[int, str] | None = None
    for key, hints in keyed:
        if hints.log != log:
            raise RecoveryLogError(f'hints at etcd key "{key}" are of log {hints.log!r}, not {log!r}')
        _, segments = hints.live_log_segments()
        if not segments:
            return NeededOffset(
                log, 0, key, f'hints at "{key}" list no live files, so playback of them reads from offset 0'
            )
        first = segments[0].first_offset
        if lowest is None or first < lowest[0]:
            lowest = (first, key)
    assert lowest is not None
    return NeededOffset(log, lowest[0], lowest[1])


def prunable_fragments(fragments: Iterable[Fragment], needed: NeededOffset) -> list[Fragment]:
    """The persisted fragments of the log ending at or before the needed offset (none if it is None)."""
    if needed.offset is None:
        return []
    return [
        f for f in fragments
        if f.journal == needed.log and f.backing_store and f.mod_time and f.end <= needed.offset
    ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LogPrune:
    """The outcome of pruning one shard's recovery log: what was (or, in a dry run, would be) removed
    and how many listed fragments were kept."""

    shard: str
    needed: NeededOffset
    removed: tuple[Fragment, ...]
    kept: tuple[Fragment, ...]
    dry_run: bool

    @property
    def log(self) -> str:
        return self.needed.log


async def prune_recovery_log(
    client: AsyncClient, etcd: aetcd.Client, spec: ShardSpec, *, dry_run: bool = False
) -> LogPrune:
    """Removes the persisted fragments of `spec`'s recovery log that no stored hints need (reads the
    hints, lists the log's fragments through the brokers, deletes from the fragment stores)."""
    if not spec.recovery_log_prefix:
        raise RecoveryLogError(
            f'shard "{spec.id}" has no recovery_log_prefix, so it has no recovery log to prune'
        )
    log = recovery_log_of(spec.recovery_log_prefix, spec.id)
    hints = await fetch_hints(etcd, spec.hint_prefix, spec.id, spec.hint_backups)
    needed = needed_offset(log, stored_hints(hints, spec.hint_prefix, spec.id))
    fragments = await client.list_fragments(log) if needed.offset is not None else []
    prunable = prunable_fragments(fragments, needed)
    removed = await asyncio.to_thread(remove_fragments, prunable, dry_run=dry_run)
    kept = tuple(f for f in fragments if f not in removed)
    return LogPrune(spec.id, needed, tuple(removed), kept, dry_run)
