"""Retention pruning (`gazette journals prune`, docs/semantics.md#retention-and-pruning): deletes persisted
fragments whose age is at least their journal's retention. Journals with retention <= 0 are kept forever (the
guard Gazette's CLI lacks). Removed objects leave the brokers' indices at their next refresh.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from gazette.client.sync import Client
from gazette.fragment.fragment import Fragment
from gazette.fragment.stores import get_store


def remove_fragments(fragments: Iterable[Fragment], *, dry_run: bool = False) -> list[Fragment]:
    """Deletes each persisted fragment from its backing store (spooled-only ones are passed over);
    returns those removed (or, with `dry_run`, those that would be). Blocks: call from a thread."""
    removed: list[Fragment] = []
    for frag in fragments:
        if not frag.backing_store or not frag.mod_time:
            continue  # still only spooled
        if not dry_run:
            get_store(frag.backing_store).remove(frag.content_path)
        removed.append(frag)
    return removed


def prune_journals(
    client: Client, selector: str = "", *, dry_run: bool = False, now: float | None = None
) -> list[Fragment]:
    now = time.time() if now is None else now
    removed: list[Fragment] = []
    for info in client.list_journals(selector):
        retention = info.spec.retention
        if retention <= 0:
            continue
        expired = (f for f in client.list_fragments(info.spec.name) if now - f.mod_time >= retention)
        removed += remove_fragments(expired, dry_run=dry_run)
    return removed
