"""Recovery logs on a real broker and etcd: record and play back, dead branches, the author fence
against a zombie recorder, a tailing standby's hand-off, and playback from stored hints."""

from __future__ import annotations

import asyncio
import os

import pytest
from consumer.recoverylog_legacy import legacy_records

from gazette.client.aio import AsyncClient
from gazette.client.append_service import AsyncAppendService
from gazette.consumer.recoverylog import (
    AUTHOR_REGISTER,
    FSM,
    FSMHints,
    OpDecoder,
    Player,
    Property,
    RecordedOp,
    Recorder,
    RecoveryLogError,
    author_fence,
    backup_hints_key,
    fetch_hints,
    new_author,
    primary_hints_key,
    rotate_backup_hints,
    store_primary_hints,
)
from gazette.consumer.store import FencingError
from gazette.message.framing.fixed import MAGIC
from gazette.protocol.labels import LabelSet
from gazette.protocol.status import Status
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG

WAIT_S = 30.0
LOG = "tests/recovery/shard-000"


def _create_log(cluster, name: str = LOG, content_type: str = CONTENT_TYPE_RECOVERY_LOG) -> None:
    cluster.client().apply_journals(
        [cluster.journal_spec(name, replication=1, labels={"content-type": content_type})]
    )
    cluster.wait_for_routes([name])


async def _play(
    aio: AsyncClient, directory, hints: FSMHints | None = None, author: int = 0, log: str = LOG
) -> Player:
    """A completed playback of `log` into `directory`: finished at the head, or handed off to `author`."""
    player = Player(aio, log, str(directory), hints)
    task = asyncio.create_task(player.play())
    if author:
        player.inject_handoff(author)
    else:
        player.finish_at_head()
    await asyncio.wait_for(task, WAIT_S)
    return player


async def _recorder(aio: AsyncClient, directory, hints: FSMHints | None = None) -> Recorder:
    """Plays LOG back into `directory` and takes it over, as a new primary does."""
    author = new_author()
    player = await _play(aio, directory, hints, author)
    assert player.author == author
    return Recorder(AsyncAppendService(aio), player.fsm, author, str(directory), player.write_head)


def _tree(directory) -> dict[str, bytes]:
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


async def _done(future) -> object:
    return await asyncio.wait_for(asyncio.wrap_future(future), WAIT_S)


def _rewrite(rec: Recorder, path: str, data: bytes) -> object:
    """Replaces `path` as JSONFileStore does: write a temporary file, rename it over `path`."""
    with rec.transaction() as txn:
        txn.write_at(txn.create(path + ".tmp"), data, 0)
        txn.rename(path + ".tmp", path)
    return txn.future


async def test_record_and_play_back(cluster, tmp_path) -> None:
    _create_log(cluster)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        rec = await _recorder(aio, tmp_path / "primary")
        assert rec.fsm.next_seq_no == 2  # the hand-off no-op was op 1
        blob = os.urandom(50_000) + MAGIC + b"\x00\x00\x00\x00" + os.urandom(1000)  # frame-like content
        with rec.transaction() as txn:
            a = txn.create("a.txt")
            txn.write_at(a, b"hello world", 0)
            txn.write_at(a, b"HELLO", 0)  # an overwrite in place
            txn.write_at(txn.create("sub/dir/blob.bin"), blob, 0)
        rec.record_write_at(a, b"!", 11)
        rec.record_rename("a.txt", "c.txt")
        rec.record_link("c.txt", "sub/d.txt")
        fnode = rec.record_create("gone.txt")
        rec.record_write_at(fnode, b"soon removed", 0)
        rec.record_remove("gone.txt")
        rec.record_create(tmp_path / "primary" / "sub/dir/blob.bin")  # truncation by absolute path
        rec.record_write_at(rec.fnode_of("sub/dir/blob.bin"), b"short", 3)
        await _done(rec.barrier())

        played = await _play(aio, tmp_path / "copy")
        assert _tree(tmp_path / "copy") == {
            "c.txt": b"HELLO world!",
            "sub/d.txt": b"HELLO world!",
            "sub/dir/blob.bin": b"\x00\x00\x00short",
        }
        assert os.stat(tmp_path / "copy" / "c.txt").st_ino == os.stat(tmp_path / "copy" / "sub/d.txt").st_ino
        assert (played.fsm.next_seq_no, played.fsm.next_checksum) == (
            rec.fsm.next_seq_no,
            rec.fsm.next_checksum,
        )
        assert played.fsm.links == rec.fsm.links
        assert played.start_offset == 0 and played.skipped == 0

        # Bad paths are refused before anything is recorded; the recorder keeps working.
        for bad in ("../escape", "/etc/passwd", ".fnodes/1"):
            with pytest.raises(RecoveryLogError, match="not a file under the recorded directory"):
                rec.record_create(bad)
        with pytest.raises(RecoveryLogError, match="not a recorded file"):
            rec.record_remove("never-created")
        assert rec.error is None
        await _done(rec.record_remove("c.txt"))


async def test_duplicates_are_dead_branches_and_garbage_fails_clearly(cluster, tmp_path) -> None:
    _create_log(cluster)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        rec = await _recorder(aio, tmp_path / "primary")
        for i in range(5):
            _rewrite(rec, "state", b"v%d" % i)
        await _done(rec.barrier())
        # An at-least-once retry appends ops again: their sequence numbers are stale, so they are skipped.
        head = await aio.read_head(LOG)
        await aio.append(LOG, await aio.read_all(LOG, 0, head))
        _rewrite(rec, "state", b"after the duplicates")
        await _done(rec.barrier())
        played = await _play(aio, tmp_path / "copy")
        assert _tree(tmp_path / "copy") == {"state": b"after the duplicates"}
        assert played.skipped > 5

        await aio.append(LOG, b"this is not a record\n")
        with pytest.raises(RecoveryLogError, match="has no record at offset"):
            await _play(aio, tmp_path / "broken")
        assert not os.path.exists(tmp_path / "broken" / ".fnodes")  # nothing left staged


async def test_zombie_recorder_is_fenced(cluster, tmp_path) -> None:
    _create_log(cluster)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        old = await _recorder(aio, tmp_path / "old")
        await _done(_rewrite(old, "state", b"v1 by the old primary"))
        stopped: list[Exception] = []
        old.add_error_callback(stopped.append)

        new = await _recorder(aio, tmp_path / "new")  # the hand-off sets the author register
        assert _tree(tmp_path / "new") == {"state": b"v1 by the old primary"}
        registers = (await aio.append(LOG, b"")).registers
        assert registers == LabelSet({AUTHOR_REGISTER: author_fence(new.author)})

        # The zombie's next append is refused (REGISTER_MISMATCH, not retried): it stops, fenced.
        future = _rewrite(old, "state", b"ZOMBIE")
        with pytest.raises(FencingError, match="author register is no longer"):
            await _done(old.outcome(future, None))
        assert future.exception().status == Status.REGISTER_MISMATCH
        assert isinstance(old.error, FencingError) and stopped == [old.error]
        with pytest.raises(FencingError):
            old.record_create("more")

        await _done(_rewrite(new, "state", b"v2 by the new primary"))
        assert b"ZOMBIE" not in await aio.read_all(LOG)
        await _play(aio, tmp_path / "third")
        assert _tree(tmp_path / "third") == {"state": b"v2 by the new primary"}


async def test_tailing_standby_hands_off(cluster, tmp_path) -> None:
    _create_log(cluster)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        primary = await _recorder(aio, tmp_path / "primary")
        await _done(_rewrite(primary, "state", b"before the standby"))

        standby = Player(aio, LOG, str(tmp_path / "standby"))
        task = asyncio.create_task(standby.play())
        await asyncio.wait_for(standby.tailing.wait(), WAIT_S)
        for i in range(20):  # recorded while the standby tails the log
            _rewrite(primary, "state", b"while tailing %d" % i)
        end = (await _done(primary.barrier())).end
        async with asyncio.timeout(WAIT_S):
            while standby.offset < end:
                await asyncio.sleep(0.01)
        assert not task.done()

        author = new_author()
        standby.inject_handoff(author)
        await asyncio.wait_for(task, WAIT_S)
        assert _tree(tmp_path / "standby") == {"state": b"while tailing 19"}
        assert standby.fsm.next_seq_no == primary.fsm.next_seq_no + 1  # and its own no-op
        with pytest.raises(FencingError):
            await _done(primary.outcome(_rewrite(primary, "state", b"too late"), None))


async def test_playback_from_hints(cluster, etcd_client, etcd_root, tmp_path) -> None:
    _create_log(cluster)
    prefix = f"{etcd_root}/hints"
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        rec = await _recorder(aio, tmp_path / "primary")
        for i in range(10):
            _rewrite(rec, "state", b"state %d" % i)
        with rec.transaction() as txn:
            txn.write_at(txn.create("static"), b"written once", 0)
        for i in range(10, 20):
            _rewrite(rec, "state", b"state %d" % i)
        hints = await _done(rec.build_hints())
        assert [n.fnode for n in hints.live_nodes] == sorted(rec.fsm.live_nodes)

        assert (await fetch_hints(etcd_client, prefix, "shard-000", 2)).pick() is None
        assert await store_primary_hints(etcd_client, prefix, "shard-000", hints)
        stored = await fetch_hints(etcd_client, prefix, "shard-000", 2)
        assert stored.primary == hints and stored.pick() == hints

        played = await _play(aio, tmp_path / "copy", stored.pick())
        assert _tree(tmp_path / "copy") == {"state": b"state 19", "static": b"written once"}
        assert played.start_offset and played.start_offset > 0  # the first ten rewrites are skipped
        total_ops = rec.fsm.next_seq_no - 1
        assert played.applied < total_ops / 3  # and so are the rewrites between the hinted segments

        # Hints of a recovery rotate into the backups, newest first; the primary's hints win.
        recovered = played.fsm.build_hints()
        assert await rotate_backup_hints(etcd_client, prefix, "shard-000", 2, hints)
        assert await rotate_backup_hints(etcd_client, prefix, "shard-000", 2, recovered)
        stored = await fetch_hints(etcd_client, prefix, "shard-000", 2)
        assert stored.backups == (recovered, hints) and stored.pick() == hints
        await etcd_client.delete(primary_hints_key(prefix, "shard-000").encode())
        assert (await fetch_hints(etcd_client, prefix, "shard-000", 2)).pick() == recovered
        # A guard that no longer holds (an assignment re-created since) writes nothing.
        assert not await rotate_backup_hints(etcd_client, prefix, "shard-000", 2, hints, guard=(LOG, 12345))
        assert (await fetch_hints(etcd_client, prefix, "shard-000", 2)).backups == (recovered, hints)

        # Hints from a recovery play back the same files.
        await _play(aio, tmp_path / "again", recovered)
        assert _tree(tmp_path / "again") == _tree(tmp_path / "copy")


async def test_bad_hints_and_logs_are_refused(cluster, etcd_client, etcd_root, tmp_path) -> None:
    prefix = f"{etcd_root}/hints"
    key = backup_hints_key(prefix, "shard-000", 0)
    # Stored hints may be protobuf, as Gazette's readers accept them.
    await etcd_client.put(key.encode(), FSMHints(LOG).to_proto().SerializeToString())
    assert (await fetch_hints(etcd_client, prefix, "shard-000", 1)).backups == (FSMHints(LOG),)
    for raw, message in (
        (b"\n\x7ftests/recovery", "neither JSON nor a marshaled recoverylog.FSMHints"),
        (b'{"log": ', "not valid JSON"),
        (b'{"log": "tests/recovery/shard-000", "live_nodes": [{"fnode": 3, "segments": []}]}', "fnode 3"),
        (b'{"log": "x/y", "live_nodes": [{"fnode": 1, "segments": [{"author": 0, "first_seq_no": 1}]}]}',
         "author is not in"),
    ):  # fmt: skip
        await etcd_client.put(key.encode(), raw)
        with pytest.raises(RecoveryLogError, match=message):
            await fetch_hints(etcd_client, prefix, "shard-000", 1)

    _create_log(cluster, "tests/recovery/not-a-log", "application/x-ndjson")
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        with pytest.raises(RecoveryLogError, match="does not exist"):
            await _play(aio, tmp_path / "missing")
        with pytest.raises(RecoveryLogError, match="so it is not a recovery log"):
            await _play(aio, tmp_path / "wrong", log="tests/recovery/not-a-log")
        with pytest.raises(RecoveryLogError, match="cannot play back"):
            Player(aio, LOG, str(tmp_path), FSMHints("tests/recovery/other"))


async def test_log_of_the_earlier_json_encoding_plays_and_continues_in_protobuf(cluster, tmp_path) -> None:
    """A log gazette-py wrote before it adopted Gazette's records: playback reads it (its paths as
    Gazette's "/state"), the new recorder continues it in protobuf, chained onto the JSON records'
    checksums, and once every live file is rewritten the hints no longer reach the JSON records."""
    _create_log(cluster)
    fsm, old_author = FSM(FSMHints(LOG)), new_author()
    old = legacy_records(fsm, old_author, [
        (RecordedOp(0, 0, 0), b""),  # the old player's hand-off no-op
        (RecordedOp(0, 0, 0, "create", "static"), b""),
        (RecordedOp(0, 0, 0, "write", fnode=2), b"written once"),
        (RecordedOp(0, 0, 0, "create", "state.tmp"), b""),
        (RecordedOp(0, 0, 0, "write", fnode=4), b"v1"),
        (RecordedOp(0, 0, 0, "link", "state", 4), b""),
        (RecordedOp(0, 0, 0, "unlink", "state.tmp", 4), b""),
    ])  # fmt: skip
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        await aio.append(LOG, old, union_registers={AUTHOR_REGISTER: author_fence(old_author)})
        rec = await _recorder(aio, tmp_path / "upgraded")
        assert _tree(tmp_path / "upgraded") == {"static": b"written once", "state": b"v1"}
        assert rec.fsm.links == {"/static": 2, "/state": 4} and rec.fnode_of("state") == 4
        await _done(_rewrite(rec, "state", b"v2"))  # replaces the JSON-recorded file, not a second one

        records = OpDecoder(LOG, 0).feed(await aio.read_all(LOG))
        assert [r.legacy for r in records] == [True] * 7 + [False] * (len(records) - 7)
        played = await _play(aio, tmp_path / "again")
        assert _tree(tmp_path / "again") == {"static": b"written once", "state": b"v2"}
        assert played.legacy == 7 and (played.fsm.next_seq_no, played.fsm.next_checksum) == (
            rec.fsm.next_seq_no,
            rec.fsm.next_checksum,
        )
        hinted = await _play(aio, tmp_path / "hinted", await _done(rec.build_hints()))
        assert _tree(tmp_path / "hinted") == _tree(tmp_path / "again")
        assert hinted.legacy > 0  # static's hinted records are JSON ones

        _rewrite(rec, "static", b"rewritten")
        hints = await _done(rec.build_hints())
        hinted = await _play(aio, tmp_path / "migrated", hints)
        assert hinted.legacy == 0 and hinted.start_offset is not None and hinted.start_offset >= len(old)
        assert _tree(tmp_path / "migrated") == {"static": b"rewritten", "state": b"v2"}


async def test_property_files(cluster, tmp_path) -> None:
    """A rename onto /IDENTITY (RocksDB's database id) records a property, as Gazette's recorder does:
    its content is kept in the FSM and its hints, and playback writes the file."""
    _create_log(cluster)
    async with AsyncClient(cluster.broker_endpoints[0]) as aio:
        rec = await _recorder(aio, tmp_path / "primary")
        (tmp_path / "primary" / "IDENTITY").write_bytes(b"4f2c-guid\n")  # renamed from ...
        with rec.transaction() as txn:
            txn.write_at(txn.create("id.tmp"), b"4f2c-guid\n", 0)  # ... this file, recorded
            txn.rename("id.tmp", "IDENTITY")
        _rewrite(rec, "state", b"data")
        for bad in (rec.record_create, rec.record_remove):
            with pytest.raises(RecoveryLogError, match="is a property path"):
                bad("IDENTITY")
        hints = await _done(rec.build_hints())
        assert hints.properties == (Property("/IDENTITY", "4f2c-guid\n"),) and rec.fsm.links.keys() == {
            "/state"
        }
        for name, h in (("from-start", None), ("from-hints", hints)):
            played = await _play(aio, tmp_path / name, h)
            assert _tree(tmp_path / name) == {"IDENTITY": b"4f2c-guid\n", "state": b"data"}
            assert played.fsm.properties == {"/IDENTITY": "4f2c-guid\n"}
