"""gazette-py's consumer tooling and Gazette's Go consumers and message package, both ways (issue 14).

Against Go consumers (two members of Gazette's stream-sum summer, `make peers`, on three gazette-py
brokers; its four shards, RocksDB and SQLite stores with a hot standby each, applied with our
`gazette shards apply`): our ShardClient, our `gazette shards` CLI and the notebook's CheckpointView
and SequencerView. List shows each shard PRIMARY on one Go member and STANDBY on the other, with
their endpoints (asked at an endpoint, or at the members they announce in etcd); chunks we publish
(Gazette's Chunk JSON, UUID at /UUID) are summed by them, Stat's read-through reaches the chunk
journals' heads and the sums equal our CRC-64; GetHints returns their recovery-log hints; the views
render a Go shard's checkpoint from Stat; our Inspect, which a Go consumer does not serve, fails at
once saying so. Our Unassign hands a shard to its standby, which restores the same read-through
from the RocksDB it played back and stores the hints it recovered from, and `gazette shards
recover` plays that Go recovery log into RocksDB's files.

Go publishers feeding a gazette-py consumer, and Gazette's reader reading that consumer's output
(interop-messages, tests/interop/streamsum/messages, on Gazette's message package): Go's
PublishCommitted and PublishUncommitted transactions, committed, rolled back (the last ACK
re-appended, as a recovering Gazette consumer does) and left open, feed our word count, which counts
exactly the committed words; its consumer process is killed once mid-transaction, after its
uncommitted counts landed, so its output holds rolled-back messages too. Gazette's ReadCommittedIter
(a small ring, so it reads long sequences back through our brokers) then reads exactly what
gazette-py's ReadCommitted reads: the committed counts, each (word, count) once, ACKs at the same
offsets.

Both sides keep the message UUID where the other looks for it: a gazette-py consumer reads its
sources with the default JSON framing (UUID at /_meta/uuid), so the Go messages here keep theirs
there; Go's own examples use /UUID, which our readers and publishers take as the framing option
uuid_pointer="/UUID" (GO_JSON), as for the summer's chunks and sums.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from interop.conftest import require_peer
from interop.test_stream_sum import (
    CHUNK_JOURNALS,
    GO_JSON,
    NDJSON,
    RECOVERY_LOGS,
    ROOT,
    SHARDS,
    SUMS,
    Summer,
    _apply_journals,
    _shards_yaml,
    crc64_update,
)
from needs import VENV_STEP, import_or_missing

from gazette.consumer.client import ShardClient
from gazette.consumer.status import ReplicaCode
from gazette.consumer.store import ConsumerCheckpoint
from gazette.examples import wordcount
from gazette.local import LocalCluster
from gazette.message import Publisher, ReadCommitted, ReadUncommitted
from gazette.message.framing import JSONFraming
from gazette.protocol.errors import GazetteError
from gazette.testing import wait_for

WAIT_S = 60.0
STREAMS, CHUNKS = 8, 5  # streams we publish to the summer, of CHUNKS chunks and an empty last one
WORD_PARTITIONS = 2
# The Go publisher's two runs (interop-messages publish): committed messages outside transactions,
# then one transaction per plan letter (C committed, R rolled back, O left open) of PER_TXN messages
# to each words journal.
RUN_1 = {"outside": 6, "plan": "CRC", "per_txn": 3}
RUN_2 = {"outside": 0, "plan": "CRCO", "per_txn": 2}
GO_RUN_TIMEOUT_S = 60


# --- the Go consumer ---------------------------------------------------------------------------------


def _gazette_cli(*args: str, input: str = "") -> subprocess.CompletedProcess:
    """Our `gazette` command (python -m gazette.cli.main), without the caller's GAZETTE_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAZETTE_")}
    return subprocess.run(
        [sys.executable, "-m", "gazette.cli.main", *args],
        input=input, capture_output=True, text=True, env=env, timeout=GO_RUN_TIMEOUT_S,
    )  # fmt: skip


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"gazette {' '.join(proc.args[3:])} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def _serving(client: ShardClient, summers: list[Summer]) -> bool:
    """Every shard has a PRIMARY and a STANDBY, one on each summer."""
    try:
        infos = client.list_shards(timeout=10)
    except GazetteError:
        return False
    return sorted(i.spec.id for i in infos) == SHARDS and all(
        sorted(r.status.code.name for r in i.replicas) == ["PRIMARY", "STANDBY"]
        and {r.suffix for r in i.replicas} == {s.id for s in summers}
        for i in infos
    )


def _list_answers(client: ShardClient) -> bool:
    try:
        client.list_shards(timeout=5)
    except GazetteError:
        return False
    return True


@pytest.fixture(scope="module")
def summer_bin() -> str:
    return require_peer("stream-sum-summer")


@pytest.fixture(scope="module")
def messages_bin() -> str:
    return require_peer("interop-messages")


@pytest.fixture(scope="module")
def summers(
    summer_bin: str, py_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Summer]]:
    """Two Gazette stream-sum summers (gosum-0, gosum-1) on the cluster, its four shards (RocksDB and
    SQLite stores, one hot standby each) applied by our `gazette shards apply` to a Go member, each
    with its PRIMARY on one summer and its STANDBY on the other. (The binary is looked up first: a
    missing one skips before any cluster starts.)"""
    binary = summer_bin
    workdir = tmp_path_factory.mktemp("go-summers")
    _apply_journals(py_cluster)
    group = [Summer(k, binary, py_cluster, workdir) for k in range(2)]
    try:
        for s in group:
            s.start()
        with ShardClient([s.endpoint for s in group], timeout=10) as client:
            for s in group:
                with ShardClient(s.endpoint, timeout=10) as one:
                    wait_for(f"{s.id} to serve List", lambda one=one: _list_answers(one), WAIT_S)
            out = _ok(_gazette_cli("shards", "apply", "--consumer", group[0].endpoint, input=_shards_yaml()))
            assert f"applied {len(SHARDS)} change(s)" in out, out
            wait_for("each shard's primary and hot standby", lambda: _serving(client, group), WAIT_S)
        yield group
    except BaseException:
        for s in group:
            print(f"--- {s.id} log tail ---\n{s.log_text()[-3000:]}")
        raise
    finally:
        for s in group:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()


def _publish_chunks(cluster: LocalCluster) -> dict[bytes, int]:
    """STREAMS streams of Gazette's stream_sum.Chunk (UUID at /UUID), stream k all to chunk journal
    k mod 4 as Gazette's chunker maps them by stream; returns each stream's CRC-64."""
    client = cluster.client()
    pub = Publisher(client, framings={NDJSON: JSONFraming(uuid_pointer=GO_JSON["uuid_pointer"])})
    sums: dict[bytes, int] = {}
    try:
        for k in range(STREAMS):
            sid = os.urandom(16)
            journal = CHUNK_JOURNALS[k % len(CHUNK_JOURNALS)]
            value = 0
            for seq in range(1, CHUNKS + 2):
                data = os.urandom(16 + seq) if seq <= CHUNKS else b""  # the empty chunk ends the stream
                value = crc64_update(value, data)
                chunk = {"ID": list(sid), "SeqNo": seq, "Data": base64.b64encode(data).decode()}
                pub.publish_committed(journal, chunk)
            sums[sid] = value
        pub.flush()
    finally:
        pub.close()
    return sums


@pytest.fixture(scope="module")
def summed(py_cluster: LocalCluster, summers: list[Summer]) -> dict[str, Any]:
    """Our chunks, published once the summers serve: each stream's CRC-64 and the chunk journals'
    heads after them."""
    sums = _publish_chunks(py_cluster)
    client = py_cluster.client()
    return {"sums": sums, "heads": {j: client.read_head(j) for j in CHUNK_JOURNALS}}


def _by_id(summers: list[Summer]) -> dict[str, Summer]:
    return {s.id: s for s in summers}


def _caught_up_summers(client: ShardClient, heads: dict[str, int]) -> None:
    for n, shard in enumerate(SHARDS):
        client.stat_shard(shard, {CHUNK_JOURNALS[n]: heads[CHUNK_JOURNALS[n]]})


def test_shard_client_lists_stats_and_hints_the_go_summers(
    summers: list[Summer], summed: dict[str, Any], py_cluster: LocalCluster
) -> None:
    heads: dict[str, int] = summed["heads"]
    members = _by_id(summers)
    with ShardClient(summers[1].endpoint, timeout=WAIT_S) as client:
        # List: Gazette's route and statuses, each Go member's own endpoint.
        infos = {i.spec.id: i for i in client.list_shards()}
        assert sorted(infos) == SHARDS
        for n, shard in enumerate(SHARDS):
            info = infos[shard]
            primary = info.primary
            assert primary is not None and primary.status.code == ReplicaCode.PRIMARY, info
            assert primary.zone == "local" and primary.endpoint == members[primary.suffix].endpoint, info
            (standby,) = [r for r in info.replicas if r is not primary]
            assert standby.status.code == ReplicaCode.STANDBY and standby.suffix != primary.suffix, info
            assert standby.endpoint == members[standby.suffix].endpoint, info
            assert [s.journal for s in info.spec.sources] == [CHUNK_JOURNALS[n]]
            assert info.spec.recovery_log == RECOVERY_LOGS[n]
            assert info.spec.labels.values_of("store") == [("rocksdb", "sqlite")[n % 2]]
            assert (info.spec.hot_standbys, info.spec.hint_backups) == (1, 2)
            assert info.mod_revision > 0
        # Selectors on the meta-label id, evaluated by the Go member.
        assert [i.spec.id for i in client.list_shards(f"id={SHARDS[1]}")] == [SHARDS[1]]

        # Stat, read-your-writes (the member asked proxies to the primary): returns once each
        # shard's committed transactions read through the heads of our chunks; the sums of those
        # transactions were ACKed within publish_at.
        for n, shard in enumerate(SHARDS):
            journal = CHUNK_JOURNALS[n]
            stat = client.stat_shard(shard, {journal: heads[journal]})
            assert stat.read_through == {journal: heads[journal]}, stat
            assert stat.member == ("local", infos[shard].primary.suffix), stat  # type: ignore[union-attr]
            assert set(stat.publish_at) == {SUMS}, stat
            assert 0 < stat.publish_at[SUMS] <= py_cluster.client().read_head(SUMS)
        # A journal that is not a source is ignored, as Gazette does.
        far = client.stat_shard(SHARDS[0], {SUMS: 1 << 40}, timeout=10)
        assert far.read_through == {CHUNK_JOURNALS[0]: heads[CHUNK_JOURNALS[0]]}

        # GetHints: the summers' recovery-log hints. Gazette stores a primary's recovered hints as
        # backup 0 when it starts, its recorded ones as the primary hints only every 5 minutes.
        for n, shard in enumerate(SHARDS):
            hints = client.get_hints(shard)
            assert len(hints.backups) == 2, hints  # the shardspace's hint_backups
            found = [h for h in (hints.primary, *hints.backups) if h is not None]
            assert found and all(h.log == RECOVERY_LOGS[n] for h in found), hints
            picked = hints.pick()
            assert picked is not None and picked.log == RECOVERY_LOGS[n]

        # Inspect is gazette-py's own service: the Go member answers UNIMPLEMENTED, at once.
        t = time.monotonic()
        with pytest.raises(GazetteError) as exc:
            client.inspect(SHARDS[0], timeout=30)
        assert time.monotonic() - t < 5, "Inspect of a Go consumer should fail at once, not wait"
        message = str(exc.value)
        assert "not a gazette-py consumer" in message and summers[1].endpoint in message, message
        assert "gazette_py.Shards/Inspect" in message and "Stat" in message, message
        assert exc.value.context.get("grpc_code") == "UNIMPLEMENTED"

    # The members Go consumers announce in etcd (Gazette's ConsumerSpec) are found there too.
    with ShardClient(etcd=py_cluster.etcd_endpoint, root=ROOT, timeout=WAIT_S) as by_etcd:
        assert sorted(i.spec.id for i in by_etcd.list_shards()) == SHARDS

    # What the Go summers computed from our chunks: one committed sum per stream, our CRC-64.
    found_sums: dict[bytes, list[dict]] = defaultdict(list)
    for env in ReadCommitted(py_cluster.client(), SUMS, framing_options=GO_JSON, skip_acks=True):
        found_sums[bytes(env.message["ID"])].append(env.message)
    assert found_sums.keys() == summed["sums"].keys()
    for sid, value in summed["sums"].items():
        assert [(s["SeqNo"], s["Value"]) for s in found_sums[sid]] == [(CHUNKS + 1, value)], sid.hex()


def test_gazette_shards_cli_against_the_go_summers(
    summers: list[Summer], summed: dict[str, Any], py_cluster: LocalCluster
) -> None:
    heads: dict[str, int] = summed["heads"]
    members = _by_id(summers)
    consumer = summers[0].endpoint
    with ShardClient(consumer, timeout=WAIT_S) as client:  # caught up first: lags are then 0
        _caught_up_summers(client, heads)

    rows = json.loads(_ok(_gazette_cli("shards", "list", "--consumer", consumer, "--lag", "-o", "json",
                                       "--broker", py_cluster.broker_endpoints[0])))  # fmt: skip
    assert [r["id"] for r in rows] == SHARDS
    for n, r in enumerate(rows):
        primary = r["primary"].removeprefix("local#")
        assert r["status"] == "PRIMARY" and primary in members, r
        (standby,) = set(members) - {primary}
        assert r["replicas"] == [
            {"zone": "local", "suffix": primary, "slot": 0, "status": "PRIMARY", "errors": [],
             "endpoint": members[primary].endpoint},
            {"zone": "local", "suffix": standby, "slot": 1, "status": "STANDBY", "errors": [],
             "endpoint": members[standby].endpoint},
        ], r  # fmt: skip
        assert r["sources"] == CHUNK_JOURNALS[n]
        assert (r["lag"], r["source_lag"]) == (0, {CHUNK_JOURNALS[n]: 0}), r

    table = _ok(_gazette_cli("shards", "list", "--consumer", consumer, "-L", "store"))
    for shard in SHARDS:
        assert shard in table
    assert "rocksdb" in table and "sqlite" in table and "STANDBY" in table, table

    # gazctl's shardspace back out of the Go member, with the revisions its etcd holds.
    listed = _ok(_gazette_cli("shards", "list", "--consumer", consumer, "-o", "yaml"))
    assert "recovery_log_prefix: examples/stream-sum/recovery-logs" in listed and "revision:" in listed, (
        listed
    )

    journal = CHUNK_JOURNALS[2]
    stat = json.loads(_ok(_gazette_cli("shards", "stat", SHARDS[2], "--consumer", consumer, "-o", "json",
                                       "--read-through", f"{journal}={heads[journal]}")))  # fmt: skip
    assert stat["shard"] == SHARDS[2] and stat["primary"] == rows[2]["primary"]
    assert stat["read_through"] == {journal: heads[journal]} and list(stat["publish_at"]) == [SUMS]

    dry = _ok(_gazette_cli("shards", "unassign", SHARDS[0], "--dry-run", "--consumer", consumer))
    assert f"would unassign {SHARDS[0]}" in dry, dry

    proc = _gazette_cli("shards", "inspect", SHARDS[0], "--consumer", consumer, "--timeout", "30")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not a gazette-py consumer" in lines[0], (
        lines
    )


def test_views_render_the_go_shards_checkpoint(summers: list[Summer], summed: dict[str, Any]) -> None:
    import_or_missing("ipywidgets", f"{VENV_STEP}: ipywidgets is in the notebook extra")
    from gazette.notebook.widgets import CheckpointView, SequencerView

    heads: dict[str, int] = summed["heads"]
    shard, journal = SHARDS[1], CHUNK_JOURNALS[1]
    with ShardClient(summers[0].endpoint, timeout=WAIT_S) as client:
        client.stat_shard(shard, {journal: heads[journal]})
        # Inspect itself is refused by a Go member, at once and saying why ...
        with pytest.raises(GazetteError, match="not a gazette-py consumer"):
            client.inspect(shard)
        # ... so the views show what Gazette's Stat tells: the checkpoint's read-through offsets.
        view = CheckpointView(client, shard)
        assert view.offsets == {journal: heads[journal]}
        assert view.producers == [] and view.ack_intents == []
        assert f"<td>{journal}</td>" in view.body.value and f"<td>{heads[journal]}</td>" in view.body.value, (
            view.body.value
        )
        assert view.status.value.startswith("1 journals, 0 producers (a Gazette consumer"), view.status.value
        assert client.get_hints(shard).pick().log == RECOVERY_LOGS[1]

        seq = SequencerView(client, shard)
        assert seq.state["offsets"] == {journal: heads[journal]} and seq.state["producers"] == []
        assert seq.status.value == f"offsets {{'{journal}': {heads[journal]}}}"
        assert seq.pending.value == 0

        view.start(0.05)  # auto-refresh keeps rendering from Stat
        refreshed = view.refreshes
        wait_for(
            "two more refreshes", lambda: view.refreshes >= refreshed + 2 or view.last_error is not None, 30
        )
        view.close()
        assert view.last_error is None and view.offsets == {journal: heads[journal]}


def test_unassign_hands_a_go_shard_to_its_standby_and_we_play_its_recovery_log(
    summers: list[Summer], summed: dict[str, Any], py_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Our Unassign removes a Go shard's primary: Gazette's allocator promotes the standby, which
    restores the checkpoint from the RocksDB it played from the recovery log (Stat: the same
    read-through) and stores the hints it recovered from (GetHints: live files of the Go log).
    `gazette shards recover` plays that log into a directory from those hints: RocksDB's files."""
    heads: dict[str, int] = summed["heads"]
    shard, journal, log = SHARDS[0], CHUNK_JOURNALS[0], RECOVERY_LOGS[0]  # the RocksDB store
    with ShardClient([s.endpoint for s in summers], timeout=WAIT_S) as client:
        _caught_up_summers(client, heads)
        (before,) = client.list_shards(f"id={shard}")
        old = before.primary
        assert old is not None
        standby = next(r.suffix for r in before.replicas if r is not old)
        assert client.unassign(shard) == [shard]

        def handed_off() -> bool:
            (info,) = client.list_shards(f"id={shard}")
            p = info.primary
            return p is not None and p.suffix == standby and p.status.code == ReplicaCode.PRIMARY

        wait_for(f"{shard}'s standby on {standby} to become its primary", handed_off, WAIT_S)
        stat = client.stat_shard(shard, {journal: heads[journal]})
        assert stat.member == ("local", standby) and stat.read_through == {journal: heads[journal]}
        hints = client.get_hints(shard)
        recovered = hints.backups[0]
        assert recovered is not None and recovered.log == log and recovered.live_nodes, hints

    out = _ok(_gazette_cli("shards", "recover", "--shard", shard, "--dir", str(tmp_path / "rocks"), "-o", "json",
                           "--etcd", py_cluster.etcd_endpoint, "--root", ROOT,
                           "--broker", py_cluster.broker_endpoints[0]))  # fmt: skip
    got = json.loads(out)
    files = {f["path"]: f["bytes"] for f in got["files"]}
    assert got["log"] == log and got["applied"] > 0, got
    assert "CURRENT" in files and any(p.startswith("MANIFEST-") for p in files), files
    assert (tmp_path / "rocks" / "CURRENT").read_text().startswith("MANIFEST-")


# --- Go publishers, our consumer, Gazette's reader ---------------------------------------------------


def _go_messages(*args: str, cluster: LocalCluster) -> list[dict[str, Any]]:
    binary = require_peer("interop-messages")
    cmd = [binary, *args, f"--broker.address={cluster.broker_endpoints[0]}", "--log.level=warn"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=GO_RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines()]


class CrashOnceStore(wordcount.CountStore):
    """Word count's store, whose process dies once (`arm` exists, `crashed` does not) in the store
    commit of a transaction that published counts, after those uncommitted counts were appended."""

    def __init__(self, shard: Any, url: str, arm: str, crashed: str) -> None:
        super().__init__(shard, url)
        self.arm, self.crashed = arm, crashed

    def start_commit(self, shard: Any, checkpoint: ConsumerCheckpoint, wait_for: Any) -> Any:
        wait_for = list(wait_for)
        if checkpoint.ack_intents and os.path.exists(self.arm):
            try:
                os.close(os.open(self.crashed, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                concurrent.futures.wait(wait_for, timeout=30)
                os._exit(17)
        return super().start_commit(shard, checkpoint, wait_for)


class CrashOnceWordCount(wordcount.WordCount):
    def __init__(self, db_dir: str, arm: str, crashed: str) -> None:
        super().__init__(db_dir)
        self.arm, self.crashed = arm, crashed

    def new_store(self, shard: Any, recorder: Any) -> CrashOnceStore:
        return CrashOnceStore(shard, os.path.join(self.db_dir, f"{shard.id}.db"), self.arm, self.crashed)


def _publish_args(run: dict[str, Any]) -> list[str]:
    return [f"--outside={run['outside']}", f"--plan={run['plan']}", f"--per-txn={run['per_txn']}"]


def _caught_up(group: Any, client: Any) -> dict[str, int]:
    """Waits until every word-count shard completed a transaction through its source's head."""
    heads = {
        wordcount.words_journal(i): client.read_head(wordcount.words_journal(i))
        for i in range(WORD_PARTITIONS)
    }
    with group.client() as shards:
        for i, spec in enumerate(wordcount.shards(WORD_PARTITIONS)):
            journal = wordcount.words_journal(i)
            assert (
                shards.stat_shard(spec.id, {journal: heads[journal]}, timeout=WAIT_S).read_through[journal]
                >= heads[journal]
            )
    return heads


def _envelopes(envs: Any) -> list[tuple[int, int, str, bool, str | None, int | None]]:
    return [
        (e.begin, e.end, str(e.uuid), e.is_ack, e.message.get("word"), e.message.get("count")) for e in envs
    ]


def _go_envelopes(lines: list[dict[str, Any]]) -> list[tuple[int, int, str, bool, str | None, int | None]]:
    return [(r["begin"], r["end"], r["uuid"], r["ack"], r.get("word"), r.get("count")) for r in lines]


def test_go_publishers_feed_our_word_count_and_gazettes_reader_reads_its_output(
    messages_bin: str, py_cluster: LocalCluster, tmp_path: Path
) -> None:
    client = py_cluster.client()
    client.apply_journals(wordcount.journals(WORD_PARTITIONS, store=py_cluster.store))
    py_cluster.wait_for_routes()
    db_dir, arm, crashed = tmp_path / "db", tmp_path / "arm", tmp_path / "crashed"
    db_dir.mkdir()
    app = CrashOnceWordCount(str(db_dir), str(arm), str(crashed))
    group = py_cluster.run_consumer(app, wordcount.shards(WORD_PARTITIONS, max_txn_duration="200ms"))
    journals = [f"--journal={wordcount.words_journal(i)}" for i in range(WORD_PARTITIONS)]

    # Run 1: committed messages outside transactions, then a committed transaction, a rolled-back
    # one and another committed one, from Go's Publisher.
    published = _go_messages("publish", *journals, *_publish_args(RUN_1), cluster=py_cluster)
    _caught_up(group, client)
    assert wordcount.store_counts(str(db_dir))
    # Run 2 (a new Go producer): the consumer's process dies in its next store commit, after its
    # uncommitted counts landed; restarted, it rolls them back and counts again. The last Go
    # transaction stays open: never acknowledged.
    arm.touch()
    published += _go_messages("publish", *journals, *_publish_args(RUN_2), cluster=py_cluster)
    _caught_up(group, client)
    assert crashed.exists(), "the consumer never reached the store commit that kills it"
    wait_for("the killed consumer process restarted", lambda: group.restarts >= 1, WAIT_S)

    # The Go side's account of what it published.
    messages = [p for p in published if p["kind"] in ("outside", "txn")]
    kinds = Counter((p["kind"], p["committed"]) for p in published)
    runs = (RUN_1, RUN_2)
    txns = {c: sum(r["plan"].count(c) * r["per_txn"] * WORD_PARTITIONS for r in runs) for c in "CRO"}
    assert kinds == {
        ("outside", True): RUN_1["outside"] + RUN_2["outside"],
        ("txn", True): txns["C"],
        ("txn", False): txns["R"] + txns["O"],
        ("ack", True): sum(r["plan"].count("C") for r in runs) * WORD_PARTITIONS,
        ("rollback-ack", False): sum(r["plan"].count("R") for r in runs) * WORD_PARTITIONS,
    }, kinds
    expected = Counter(p["word"] for p in messages if p["committed"])
    assert sum(expected.values()) == kinds[("outside", True)] + txns["C"]

    # gazette-py's read-committed reader of Go's journals: exactly the committed messages.
    read: Counter[str] = Counter()
    uncommitted = 0
    for i in range(WORD_PARTITIONS):
        journal = wordcount.words_journal(i)
        read.update(e.message["word"] for e in ReadCommitted(client, journal, skip_acks=True))
        uncommitted += sum(1 for e in ReadUncommitted(client, journal) if not e.is_ack)
    assert read == expected
    assert uncommitted == len(messages) > sum(expected.values())

    # Our consumer counted exactly the committed words: its stores, and its committed output, where
    # each word's counts run 1..n exactly once.
    assert wordcount.store_counts(str(db_dir)) == dict(expected)
    counts: dict[str, list[int]] = defaultdict(list)
    for word, n in wordcount.read_counts(client):
        counts[word].append(n)
    assert {w: sorted(ns) for w, ns in counts.items()} == {
        w: list(range(1, n + 1)) for w, n in expected.items()
    }

    # Its output holds rolled-back counts (the killed transaction's), which no committed reader sees.
    head = client.read_head(wordcount.COUNTS_JOURNAL)
    ours_all = _envelopes(ReadUncommitted(client, wordcount.COUNTS_JOURNAL))
    ours = _envelopes(ReadCommitted(client, wordcount.COUNTS_JOURNAL))
    assert sum(1 for e in ours_all if not e[3]) > sum(1 for e in ours if not e[3]) == sum(expected.values())
    # The restarted shards appended their recovered checkpoints' ACK intents again: ACKs whose UUID is
    # already in the journal, which roll the killed transaction's counts back.
    assert max(Counter(e[2] for e in ours_all if e[3]).values()) >= 2

    # Gazette's ReadCommittedIter (ring of 4: longer committed sequences are read back from our
    # brokers) reads just what ours reads, ACKs at the same offsets; its uncommitted reader too.
    small = ReadCommitted(client, wordcount.COUNTS_JOURNAL, ring_size=4)
    assert _envelopes(small) == ours and small.replays > 0  # sequences longer than the ring: read back
    theirs = _go_envelopes(_go_messages("read", f"--journal={wordcount.COUNTS_JOURNAL}", f"--end={head}", "--ring=4",
                                        cluster=py_cluster))  # fmt: skip
    assert theirs == ours
    theirs_all = _go_envelopes(_go_messages("read", f"--journal={wordcount.COUNTS_JOURNAL}", f"--end={head}",
                                            "--uncommitted", cluster=py_cluster))  # fmt: skip
    assert theirs_all == ours_all
    committed = [(e[4], e[5]) for e in theirs if not e[3]]
    assert len(committed) == len(set(committed)) == sum(expected.values())
