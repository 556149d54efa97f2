"""Broker semantics that real gazctl relies on, as Gazette v0.103.0 implements them (regressions
found by tests/interop/test_gazctl_journals.py): when SUSPEND_IF_FLUSHED finds a journal idle, and
the inclusive end_mod_time bound of ListFragments."""

from __future__ import annotations

import hashlib
import os
import time

from gazette.fragment.fragment import Codec, Fragment
from gazette.protocol import broker_pb2 as pb
from gazette.protocol.errors import GazetteError
from gazette.protocol.spec import SuspendLevel
from gazette.protocol.status import Status
from gazette.testing import wait_for

J = "examples/semantics/part-000"
SUSPEND = pb.AppendRequest


def _apply(cluster, client, name=J, **fields):
    fields.setdefault("refresh_interval", "1s")
    client.apply_journals([cluster.journal_spec(name, **fields)])
    cluster.wait_for_routes([name])


def _spec(client, name=J):
    (info,) = client.list_journals(f"name={name}")
    return info.spec


def _suspend(client, mode: int, name=J) -> Status:
    """An empty append asking for suspension `mode`, as gazctl journals suspend sends: its status is
    OK (nothing to do) or SUSPENDED (the journal is, perhaps just now, suspended)."""
    try:
        client._loop.run(client.aio.append(name, b"", suspend=mode))
    except GazetteError as exc:
        assert exc.status == Status.SUSPENDED, exc
        return exc.status
    return Status.OK


def _plant_fragment(cluster, journal: str, begin: int, data: bytes, mod_time: float) -> Fragment:
    """Writes a fragment file into the file:// store as another (gone) broker would have, dated mod_time."""
    frag = Fragment(journal, begin, begin + len(data), hashlib.sha1(data).digest(), Codec.NONE)
    path = os.path.join(cluster.store[len("file://") :], frag.content_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.utime(path, (mod_time, mod_time))
    return frag


def test_suspend_if_flushed_leaves_a_journal_persisted_within_its_flush_interval(cluster, client):
    """Gazette takes a journal as in use (its index dirty) while its last fragment was persisted less
    than a flush interval ago (24 h without one): SUSPEND_IF_FLUSHED then changes nothing. It used
    to look only for unpersisted fragments, and suspended a journal just flushed."""
    _apply(cluster, client)
    client.append(J, b"recent\n")
    assert client.flush(J) is not None
    assert _suspend(client, SUSPEND.SUSPEND_IF_FLUSHED) == Status.OK
    assert _spec(client).suspend_level == SuspendLevel.NONE
    assert _suspend(client, SUSPEND.SUSPEND_NOW) == Status.SUSPENDED  # NOW suspends regardless
    spec = _spec(client)
    assert (spec.suspend_level, spec.suspend_offset) == (SuspendLevel.PARTIAL, len(b"recent\n"))


def test_suspend_if_flushed_partially_suspends_a_journal_idle_for_its_flush_interval(cluster, client):
    """A journal whose last fragment was persisted longer than its flush_interval ago is idle."""
    _apply(cluster, client, flush_interval="1h", compression="none")
    frag = _plant_fragment(cluster, J, 0, b"old content\n", time.time() - 2 * 3600)
    wait_for(
        "the planted fragment in the index", lambda: frag.end in [f.end for f in client.list_fragments(J)]
    )
    client.reset_head(J)  # the spool re-syncs at the planted fragment's end
    assert _suspend(client, SUSPEND.SUSPEND_IF_FLUSHED) == Status.SUSPENDED
    spec = _spec(client)
    assert (spec.suspend_level, spec.suspend_offset) == (SuspendLevel.PARTIAL, frag.end)


def test_list_fragments_end_mod_time_is_inclusive(cluster, client):
    """As Gazette's ListFragments: a fragment persisted at exactly end_mod_time is listed (gazctl
    journals fragments --to T); spooled fragments are left out whenever an end is given."""
    _apply(cluster, client)
    client.append(J, b"persisted\n")
    flushed = client.flush(J)
    assert flushed is not None and flushed.mod_time
    client.append(J, b"spooled\n")
    t = flushed.mod_time
    assert client.list_fragments(J, begin_mod_time=t, end_mod_time=t) == [flushed]
    assert client.list_fragments(J, end_mod_time=t - 1) == []
    assert client.list_fragments(J, begin_mod_time=t + 1, end_mod_time=t + 1) == []
