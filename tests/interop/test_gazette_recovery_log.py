"""gazette-py's player plays a recovery log Gazette's own recorder wrote.

Gazette's stream-sum summer (build/peers/bin/stream-sum-summer, `make peers`) keeps its sums in a
RocksDB store recorded to a recovery log by Gazette's Recorder through RocksDB's hooked Env: many
files created, appended, renamed and deleted, and RocksDB's /IDENTITY recorded as a property. One
summer runs against gazette-py brokers; Gazette's chunker feeds it (and verifies its sums); the
summer is restarted once, so it plays its own log back, hands it off (a no-op fencing the log) and
stores hints with live files. Then, the summer idle: `gazette shards recover` (gazette-py's Player,
from the stored hints) and `gazctl shards recover` (Gazette's Player, same hints through GetHints)
must rebuild identical directories from the same unchanged log.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml
from cli_run import gazette, ok
from interop.conftest import gazctl_for, require_peer

from gazette.consumer.recoverylog import OpDecoder
from gazette.keyspace.procutil import free_port, spawn
from gazette.local import LocalCluster
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG
from gazette.testing import wait_for

ROOT = "/gazette/consumers/gorecovery"
HINTS = "/gazette/hints/gorecovery"
PREFIX = "examples/stream-sum"  # the example's names (its sums journal is a Go constant)
CHUNKS_JOURNAL = f"{PREFIX}/chunks/part-000"
SHARD = "chunks-part-000"
RECOVERY_LOG = f"{PREFIX}/recovery-logs/{SHARD}"
WAIT_S = 90.0


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


class _Summer:
    def __init__(self, binary: str, cluster: LocalCluster, workdir: Path) -> None:
        self.binary, self.cluster, self.workdir = binary, cluster, workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        tmp = self.workdir / "summer-tmp"  # its RocksDB directory (played back, then recorded)
        tmp.mkdir(exist_ok=True)
        cmd = [
            self.binary, "serve", "--consumer.zone=local", "--consumer.id=gorecovery-0",
            "--consumer.host=127.0.0.1", f"--consumer.port={self.port}", "--consumer.watch-delay=10ms",
            f"--broker.address={self.cluster.broker_endpoints[0]}", "--broker.file-root=/",
            f"--etcd.address={self.cluster.etcd_endpoint}", f"--etcd.prefix={ROOT}", "--etcd.lease=5s",
            "--log.level=info", "--log.format=text",
        ]  # fmt: skip
        with open(self.workdir / "summer.log", "ab") as log:
            self.proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              cwd=str(self.workdir), env=dict(os.environ, TMPDIR=str(tmp)))  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_our_player_plays_gazettes_rocksdb_recovery_log(tmp_path) -> None:
    summer_bin = require_peer("stream-sum-summer")
    chunker_bin = require_peer("stream-sum-chunker")
    gazctl_bin = require_peer("gazctl")
    with LocalCluster(brokers=1, mode="subprocess", data_dir=str(tmp_path / "cluster")) as cluster:
        gz = gazctl_for(gazctl_bin, cluster, str(tmp_path))
        client = cluster.client()
        ndjson = "application/x-ndjson"
        client.apply_journals([
            cluster.journal_spec(CHUNKS_JOURNAL, replication=1,
                                 labels={"app.gazette.dev/message-type": "stream_sum.Chunk", "content-type": ndjson}),
            cluster.journal_spec(f"{PREFIX}/sums", replication=1,
                                 labels={"app.gazette.dev/message-type": "stream_sum.Sum", "content-type": ndjson}),
            cluster.journal_spec(RECOVERY_LOG, replication=1, labels={"content-type": CONTENT_TYPE_RECOVERY_LOG}),
        ])  # fmt: skip
        cluster.wait_for_routes(timeout=WAIT_S)
        summer = _Summer(summer_bin, cluster, tmp_path)

        def shard_code() -> str | None:
            proc = gz(
                "shards",
                "list",
                "-o",
                "json",
                f"--consumer.address={summer.endpoint}",
                check=False,
                timeout=20,
            )
            if proc.returncode != 0:
                return None
            shards = json.loads(proc.stdout).get("shards", [])
            return (shards[0].get("status") or [{}])[0].get("code", "IDLE") if shards else ""

        def chunker_round(n: int) -> None:
            cmd = [
                chunker_bin, "run", "--chunker.workers=1", "--chunker.streams=4", "--chunker.chunks=10",
                f"--broker.address={cluster.broker_endpoints[0]}", "--log.level=info", "--log.format=text",
            ]  # fmt: skip
            with open(tmp_path / f"chunker-{n}.log", "wb") as log:
                proc = spawn(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(tmp_path)
                )
                try:
                    assert proc.wait(timeout=WAIT_S) == 0, (tmp_path / f"chunker-{n}.log").read_text()[-3000:]
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()

        try:
            summer.start()
            wait_for("the summer to answer gazctl", lambda: shard_code() is not None, WAIT_S)
            shardspace = {
                "common": {"recovery_log_prefix": f"{PREFIX}/recovery-logs", "hint_prefix": HINTS,
                           "hint_backups": 2, "max_txn_duration": "1s"},
                "shards": [{"id": SHARD, "sources": [{"journal": CHUNKS_JOURNAL}],
                            "labels": [{"name": "store", "value": "rocksdb"}]}],
            }  # fmt: skip
            (tmp_path / "shards.yaml").write_text(yaml.safe_dump(shardspace))
            gz(
                "shards",
                "apply",
                f"--specs={tmp_path / 'shards.yaml'}",
                f"--consumer.address={summer.endpoint}",
            )
            wait_for("the shard's primary", lambda: shard_code() == "PRIMARY", WAIT_S)
            chunker_round(0)
            # A restart: the summer plays its log back and stores the recovered hints (live files).
            summer.stop()
            summer.start()
            wait_for("the shard's primary again", lambda: shard_code() == "PRIMARY", WAIT_S)
            chunker_round(1)

            head = client.read_head(RECOVERY_LOG)
            env = {"GAZETTE_ETCD": cluster.etcd_endpoint, "GAZETTE_CONSUMER_ROOT": ROOT,
                   "GAZETTE_BROKER": cluster.broker_endpoints[0]}  # fmt: skip
            ours = tmp_path / "ours"
            doc = json.loads(
                ok(gazette("shards", "recover", "--shard", SHARD, "--dir", str(ours), "-o", "json", env=env))
            )
            theirs = tmp_path / "theirs"
            gz(
                "shards",
                "recover",
                f"--id={SHARD}",
                f"--dir={theirs}",
                f"--consumer.address={summer.endpoint}",
            )
            assert client.read_head(RECOVERY_LOG) == head  # the idle summer recorded nothing meanwhile
        finally:
            summer.stop()

        # Gazette's recorder wrote protobuf RecordedOps (none in gazette-py's earlier JSON), incl. a property.
        records = OpDecoder(RECOVERY_LOG, 0).feed(client.read_all(RECOVERY_LOG))
        kinds = {r.op.kind for r in records}
        assert (
            not any(r.legacy for r in records) and {"create", "write", "link", "unlink", "property"} <= kinds
        )
        # Ours played from the hints the summer stored on its recovery (with RocksDB's IDENTITY property).
        assert doc["hints_key"] == f"{HINTS}/{SHARD}.backup.0" and doc["start_offset"] > 0, doc
        recovered = _tree(ours)
        assert {"IDENTITY", "CURRENT"} <= recovered.keys() and any(
            p.startswith("MANIFEST-") for p in recovered
        )
        assert recovered == _tree(theirs)
        assert doc["files"] == [{"path": p, "bytes": len(c)} for p, c in recovered.items()]
