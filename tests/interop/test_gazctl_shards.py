"""Real gazctl (Gazette v0.103.0) `shards` subcommands against gazette-py consumers.

gazette-py consumers serve Gazette's consumer.Shard service and keep Gazette's key space, so gazctl
manages them as it would Gazette's own. Each test checks what gazctl did through gazette-py's
ShardClient or CLI, and what gazette-py did through gazctl's output: list (yaml, json, table with
-p/-r/--rf/-L, --lag through Stat), apply (gazctl's shardspace YAML: common, labels as name/value
lists, `;meta` sources, revisions, deletes), unassign (--dry-run, --failed), edit ($EDITOR) and
prune --dry-run (GetHints). The consumers run in this process (two members) on three gazette-py
broker subprocesses. gazctl has no `shards stat`; its --lag is a Stat of each shard.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import gazette, ok
from interop.conftest import Gazctl, gazctl_for

from gazette.cli.shards import dump_shards_yaml, load_shards_yaml
from gazette.consumer import (
    Application,
    MemoryStore,
    ReplicaCode,
    Shard,
    ShardChange,
    ShardInfo,
    ShardSpec,
)
from gazette.consumer.json_store import JSONFileStore, decode_state_file
from gazette.message import Envelope, Publisher
from gazette.protocol.labels import LabelSet
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG
from gazette.testing import wait_for

WAIT_S = 60.0
SOURCES = ["gzshards/in/part-000", "gzshards/in/part-001"]
HOLD_SOURCE = "gzshards/hold/part-000"  # the lag test's, with a message holding its transaction
FAIL_SOURCE = "gzshards/fail/part-000"  # the unassign test's, with a message failing its shard
RECOVERY_PREFIX = "gzshards/recovery"
NDJSON = {"content-type": "application/x-ndjson"}


class Counter(Application):
    """Counts messages per shard, in a JSONFileStore when the shard has a recovery log (else in
    memory). A message {"hold": true} blocks its transaction until `gate` is set; {"fail": true}
    fails the shard, once per shard."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.holding = threading.Event()
        self.failed: set[str] = set()

    def new_store(self, shard: Shard, recorder: Any) -> Any:
        return JSONFileStore(recorder, {"n": 0}) if recorder is not None else MemoryStore()

    def consume_message(self, shard: Shard, store: Any, env: Envelope, pub: Publisher) -> None:
        if env.is_ack:
            return
        if env.message.get("hold"):
            self.holding.set()
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
        if env.message.get("fail") and shard.id not in self.failed:
            self.failed.add(shard.id)
            raise ValueError("asked to fail")
        state = store.state
        state["n"] = state.get("n", 0) + 1


@pytest.fixture(scope="module")
def gz(gazctl_bin, py_cluster, tmp_path_factory) -> Gazctl:
    return gazctl_for(gazctl_bin, py_cluster, str(tmp_path_factory.mktemp("gazctl-shards")))


@pytest.fixture(scope="module")
def client(py_cluster):
    return py_cluster.client()


@pytest.fixture(scope="module")
def app() -> Counter:
    return Counter()


@pytest.fixture(scope="module")
def group(py_cluster, client, app):
    """Two in-process members of one consumer application under a root of this module's own."""
    journals = [*SOURCES, HOLD_SOURCE, FAIL_SOURCE]
    client.apply_journals([py_cluster.journal_spec(j, replication=1, labels=NDJSON) for j in journals])
    py_cluster.wait_for_routes(journals)
    root = f"{py_cluster.root.rsplit('/', 1)[0]}/consumers/gazctl-shards"
    return py_cluster.run_consumer(app, [], processes=2, mode="inprocess", root=root)


@pytest.fixture
def shards(group):
    return group.client()


def _shards(gz: Gazctl, group, *args: str, member: int = 0, check: bool = True):
    """`gazctl shards ARGS` asking member `member`'s Shard service."""
    return gz("shards", *args, f"--consumer.address={group.endpoint(member)}", check=check)


def _env(py_cluster, group) -> dict[str, str]:
    return {
        "GAZETTE_ETCD": py_cluster.etcd_endpoint,
        "GAZETTE_CONSUMER_ROOT": group.root,
        "GAZETTE_BROKER": py_cluster.broker_endpoints[0],
    }


def _table(text: str) -> list[list[str]]:
    """The rows of a gazctl table (its header first), cells stripped."""
    return [
        [c.strip() for c in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def _log_records(stderr: str, msg: str) -> list[dict[str, str]]:
    """The fields of gazctl's (logrus) log lines whose message starts with `msg`."""
    return [
        {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}
        for line in stderr.splitlines()
        if f'msg="{msg}' in line
    ]


def _placed(ids: list[str], codes: list[ReplicaCode]):
    def check(infos: list[ShardInfo]) -> bool:
        by_id = {i.spec.id: i for i in infos}
        return all(i in by_id and [r.status.code for r in by_id[i].replicas] == codes for i in ids)

    return check


def _publish(client, journal: str, messages: list[dict[str, Any]]) -> int:
    pub = Publisher(client)
    try:
        for m in messages:
            pub.publish_committed(journal, m)
        pub.flush()
    finally:
        pub.close()
    return client.read_head(journal)


# --- list ------------------------------------------------------------------------------------------


def test_list_prints_what_our_client_lists(gz, group, shards, py_cluster) -> None:
    """YAML (hoisted shardspace, byte-identical in content to ours), JSON (Gazette's ListResponse:
    spec, revisions, route, statuses) and the table with -p -r --rf -L."""
    specs = [
        ShardSpec(
            "gzl-000", [SOURCES[0], f"{SOURCES[1]};derived"], max_txn_duration="50ms", hot_standbys=1,
            labels={"test": "list", "team": "a"},
        ),
        ShardSpec(
            "gzl-001", [{"journal": SOURCES[1], "min_offset": 10}], max_txn_duration="1.5s",
            min_txn_duration="10ms", labels={"test": "list", "team": "b"}, disable_wait_for_ack=True,
        ),
    ]  # fmt: skip
    shards.apply_shards(specs)
    group.wait_for(_placed(["gzl-000"], [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]), WAIT_S, "gzl-000 placed")
    infos = group.wait_for(_placed(["gzl-001"], [ReplicaCode.PRIMARY]), WAIT_S, "gzl-001 placed")
    ours = {i.spec.id: i for i in shards.list_shards("test=list")}
    assert [i.spec for i in ours.values()] == specs and len(infos) >= 2

    listed = _shards(gz, group, "list", "-l", "test=list", "-o", "yaml").stdout
    ours_yaml = ok(gazette("shards", "list", "-l", "test=list", "-o", "yaml", env=_env(py_cluster, group)))
    assert (
        yaml.safe_load(listed)
        == yaml.safe_load(ours_yaml)
        == yaml.safe_load(dump_shards_yaml(list(ours.values())))
    )
    assert yaml.safe_load(listed)["common"] == {
        "labels": [{"name": "test", "value": "list"}]
    }  # the one field both share
    changes = load_shards_yaml(listed)
    assert [(c.upsert, c.expect_mod_revision) for c in changes] == [
        (i.spec, i.mod_revision) for i in ours.values()
    ]

    doc = json.loads(_shards(gz, group, "list", "-l", "test=list", "-o", "json").stdout)
    assert doc["status"] == "OK" and int(doc["header"]["etcd"]["revision"]) > 0
    for shard in doc["shards"]:
        info = ours[shard["spec"]["id"]]
        assert int(shard["mod_revision"]) == info.mod_revision
        assert int(shard["create_revision"]) == info.create_revision
        spec = shard["spec"]
        assert [(s["journal"], int(s["min_offset"])) for s in spec["sources"]] == [
            (s.journal, s.min_offset) for s in info.spec.sources
        ]
        assert LabelSet((lbl["name"], lbl["value"]) for lbl in spec["labels"]["labels"]) == info.spec.labels
        assert float(spec["max_txn_duration"].rstrip("s")) == info.spec.max_txn_duration
        route = shard["route"]
        members = [(m["zone"], m["suffix"]) for m in route["members"]]
        assert members == sorted(members)  # Gazette's route order
        primary = members[route["primary"]]
        assert primary == (info.primary.zone, info.primary.suffix)
        by_member = dict(zip(members, (s["code"] for s in shard["status"]), strict=True))
        assert by_member == {(r.zone, r.suffix): r.status.code.name for r in info.replicas}
        assert dict(zip(members, route["endpoints"], strict=True)) == {
            (r.zone, r.suffix): r.endpoint for r in info.replicas
        }

    header, *rows = _table(
        _shards(gz, group, "list", "-l", "test=list", "-p", "-r", "--rf", "-L", "team").stdout
    )
    assert header == ["ID", "STATUS", "RF", "PRIMARY", "REPLICAS", "TEAM"]
    expected = []
    for info in ours.values():
        standbys = [f"{r.suffix}:{r.status.code.name}" for r in info.replicas if r.slot != 0]
        expected.append(
            [info.spec.id, "PRIMARY", str(1 + info.spec.hot_standbys), f"{info.primary.suffix}:PRIMARY",
             ",".join(standbys), info.spec.labels.value_of("team")]
        )  # fmt: skip
    assert rows == expected


# --- apply -----------------------------------------------------------------------------------------

GAZCTL_SPECS = f"""
common:
  max_txn_duration: 100ms
  labels:
  - name: store
    value: rocksdb
  - name: test
    value: apply
shards:
- id: gza-000
  comment: written by gazctl
  sources:
  - journal: {SOURCES[0]}
  - journal: {SOURCES[0]};again
  hot_standbys: 1
- id: gza-001
  sources:
  - journal: {SOURCES[1]}
    min_offset: 7
  labels:
  - name: tier
    value: gold
  disable: true
"""


def test_apply_takes_gazctls_shardspace(gz, group, shards, py_cluster, tmp_path) -> None:
    path = tmp_path / "shards.yaml"
    path.write_text(GAZCTL_SPECS)
    _shards(gz, group, "apply", f"--specs={path}")
    listed = {i.spec.id: i for i in shards.list_shards("test=apply")}
    assert [i.spec for i in listed.values()] == [
        ShardSpec(
            "gza-000", [SOURCES[0], f"{SOURCES[0]};again"], max_txn_duration="100ms", hot_standbys=1,
            labels={"store": "rocksdb", "test": "apply"},
        ),
        ShardSpec(
            "gza-001", [{"journal": SOURCES[1], "min_offset": 7}], max_txn_duration="100ms", disable=True,
            labels={"store": "rocksdb", "test": "apply", "tier": "gold"},
        ),
    ]  # fmt: skip
    # Ours reads the same file to the same specs.
    assert [c.upsert for c in load_shards_yaml(GAZCTL_SPECS)] == [i.spec for i in listed.values()]

    # Revision 0 (omitted): the shard must not exist, so applying it again fails the whole apply.
    again = _shards(gz, group, "apply", f"--specs={path}", check=False)
    assert again.returncode != 0 and "ETCD_TRANSACTION_FAILED" in again.stderr
    # Our listing, edited, applied by gazctl on its revisions; then stale for our CLI.
    env = _env(py_cluster, group)
    ours = ok(gazette("shards", "list", "-l", "test=apply", "-o", "yaml", env=env))
    path.write_text(ours.replace("max_txn_duration: 100ms", "max_txn_duration: 200ms"))
    _shards(gz, group, "apply", f"--specs={path}", "--max-txn-size=1")
    assert {i.spec.max_txn_duration for i in shards.list_shards("test=apply")} == {0.2}
    stale = gazette("shards", "apply", env=env, input=ours)
    assert stale.returncode == 1 and "ETCD_TRANSACTION_FAILED" in stale.stderr.decode()

    # Gazctl's deletes: revision -1 ignores the revision.
    path.write_text("shards:\n- id: gza-001\n  delete: true\n  revision: -1\n")
    _shards(gz, group, "apply", f"--specs={path}")
    assert [i.spec.id for i in shards.list_shards("test=apply")] == ["gza-000"]
    # A source journal that does not exist: gazctl refuses before applying (as gazette-py does).
    path.write_text(
        "shards:\n- id: gza-002\n  max_txn_duration: 1s\n  sources:\n  - journal: gzshards/none\n"
    )
    refused = _shards(gz, group, "apply", f"--specs={path}", check=False)
    assert refused.returncode != 0 and "named journal does not exist (gzshards/none)" in refused.stderr
    assert "does not exist" in gazette("shards", "apply", env=env, input=path.read_text()).stderr.decode()


# --- lag (Stat) ------------------------------------------------------------------------------------


def test_list_lag_is_head_minus_stats_read_through(gz, group, shards, client, app, py_cluster) -> None:
    spec = ShardSpec("gzlag-000", [HOLD_SOURCE], max_txn_duration="50ms", labels={"test": "lag"})
    shards.apply_shards([spec])
    group.wait_for(_placed([spec.id], [ReplicaCode.PRIMARY]), WAIT_S, "gzlag-000 placed")
    head = _publish(client, HOLD_SOURCE, [{"i": i} for i in range(10)])
    stat = shards.stat_shard(spec.id, {HOLD_SOURCE: head}, timeout=WAIT_S)
    assert stat.read_through[HOLD_SOURCE] >= head
    header, row = _table(_shards(gz, group, "list", "-l", "test=lag", "--lag").stdout)
    assert header == ["ID", "STATUS", "LAG"] and row == [spec.id, "PRIMARY", f"{HOLD_SOURCE}:0"]

    # A transaction held open: Stat's read-through stays where it was, so the lag is what arrived since.
    app.gate.clear()
    app.holding.clear()
    try:
        held = _publish(client, HOLD_SOURCE, [{"hold": True}] + [{"i": i} for i in range(5)])
        assert app.holding.wait(WAIT_S)
        read_through = shards.stat_shard(spec.id, timeout=WAIT_S).read_through[HOLD_SOURCE]
        (_, row) = _table(_shards(gz, group, "list", "-l", "test=lag", "--lag").stdout)
        assert row[2] == f"{HOLD_SOURCE}:{held - read_through}" and held > read_through
        (ours,) = json.loads(
            ok(
                gazette(
                    "shards", "list", "-l", "test=lag", "--lag", "-o", "json", env=_env(py_cluster, group)
                )
            )
        )
        assert ours["source_lag"] == {HOLD_SOURCE: held - read_through}
    finally:
        app.gate.set()
    shards.stat_shard(spec.id, {HOLD_SOURCE: held}, timeout=WAIT_S)
    (_, row) = _table(_shards(gz, group, "list", "-l", "test=lag", "--lag").stdout)
    assert row[2] == f"{HOLD_SOURCE}:0"


# --- unassign --------------------------------------------------------------------------------------


def test_unassign_moves_primaries_and_clears_failures(gz, group, shards, client) -> None:
    spec = ShardSpec(
        "gzu-000", [FAIL_SOURCE], max_txn_duration="50ms", hot_standbys=1, labels={"test": "unassign"}
    )
    shards.apply_shards([spec])
    (info,) = [
        i
        for i in group.wait_for(
            _placed([spec.id], [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]), WAIT_S, "placed"
        )
        if i.spec.id == spec.id
    ]
    old, standby = info.replicas

    dry = _shards(gz, group, "unassign", "-l", "id=gzu-000", "--dry-run", "--log.level=info")
    assert [
        r["msg"].split("id=")[1].split(".")[0] for r in _log_records(dry.stderr, "Successfully unassigned")
    ] == [spec.id]
    assert shards.unassign(spec.id, dry_run=True) == [spec.id]
    failed_only = _shards(gz, group, "unassign", "-l", "id=gzu-000", "--failed", "--log.level=info")
    assert not _log_records(failed_only.stderr, "Successfully unassigned")  # nothing FAILED
    assert [r.suffix for r in shards.list_shards("id=gzu-000")[0].replicas] == [old.suffix, standby.suffix]

    _shards(gz, group, "unassign", "-l", "id=gzu-000")
    group.wait_for(
        lambda infos: (
            [(r.suffix, r.status.code) for i in infos if i.spec.id == spec.id for r in i.replicas][:1]
            == [(standby.suffix, ReplicaCode.PRIMARY)]
        ),
        WAIT_S,
        "the standby to become primary",
    )

    # A FAILED primary: gazctl lists it FAILED, and unassign --failed places the shard again.
    _publish(client, FAIL_SOURCE, [{"fail": True}])
    group.wait_for(
        lambda infos: any(
            i.spec.id == spec.id and i.primary and i.primary.status.code == ReplicaCode.FAILED for i in infos
        ),
        WAIT_S,
        "the primary to fail",
    )
    (_, row) = _table(_shards(gz, group, "list", "-l", "id=gzu-000", "-p").stdout)
    assert row[1] == "FAILED" and row[2].endswith(":FAILED")
    _shards(gz, group, "unassign", "-l", "id=gzu-000", "--failed")
    group.wait_for(
        lambda infos: any(
            i.spec.id == spec.id and i.primary and i.primary.status.code == ReplicaCode.PRIMARY for i in infos
        ),
        WAIT_S,
        "a new primary",
    )
    head = client.read_head(FAIL_SOURCE)
    assert shards.stat_shard(spec.id, {FAIL_SOURCE: head}, timeout=WAIT_S).read_through[FAIL_SOURCE] >= head


# --- edit ------------------------------------------------------------------------------------------


def test_edit_shows_our_listing_and_applies_the_edit(gz, group, shards, tmp_path, monkeypatch) -> None:
    spec = ShardSpec("gze-000", [SOURCES[0]], max_txn_duration="50ms", labels={"test": "edit"})
    shards.apply_shards([spec])
    before = shards.list_shards("test=edit")
    shown = tmp_path / "shown.yaml"
    editor = tmp_path / "editor.sh"
    # Edits once (a reopened file after a failed apply stays as it is, so gazctl gives up), and
    # keeps labels sorted, as gazctl requires of YAML it applies.
    editor.write_text(
        f'#!/bin/sh\n[ -e {shown} ] && exit 0\ncp "$1" {shown}\n'
        'sed -i -e "s/max_txn_duration: 50ms/max_txn_duration: 75ms/" '
        '-e "s/^  - name: test$/  - name: edited\\n    value: by-gazctl\\n  - name: test/" "$1"\n'
    )
    editor.chmod(0o755)
    monkeypatch.delenv("GAZ_EDITOR", raising=False)
    monkeypatch.setenv("EDITOR", str(editor))

    gz("shards", "edit", "-l", "test=edit", f"--consumer.address={group.endpoint(1)}", input="")
    body = "\n".join(line for line in shown.read_text().splitlines() if not line.startswith("#"))
    assert yaml.safe_load(body) == yaml.safe_load(dump_shards_yaml(before))
    (after,) = shards.list_shards("test=edit")
    assert after.spec == ShardSpec(
        "gze-000", [SOURCES[0]], max_txn_duration="75ms", labels={"test": "edit", "edited": "by-gazctl"}
    )
    assert after.mod_revision > before[0].mod_revision


# --- prune (GetHints) ------------------------------------------------------------------------------


def test_prune_dry_run_reads_our_hints(gz, group, shards, client, py_cluster) -> None:
    """gazctl's prune reads each shard's hints through our GetHints and lists the log's fragments
    through our brokers: the persisted fragments overlapping no hinted segment would go. Ours prunes
    below the lowest hinted offset only, so what ours would remove gazctl would too."""
    shard_id = "gzp-000"
    log = f"{RECOVERY_PREFIX}/{shard_id}"
    client.apply_journals(
        [py_cluster.journal_spec(log, replication=1, labels={"content-type": CONTENT_TYPE_RECOVERY_LOG})]
    )
    py_cluster.wait_for_routes([log])
    spec = ShardSpec(
        shard_id, [SOURCES[1]], max_txn_duration="50ms", hot_standbys=1, labels={"test": "prune"},
        recovery_log_prefix=RECOVERY_PREFIX, hint_prefix=f"{group.root}/hints", hint_backups=1,
    )  # fmt: skip
    shards.apply_shards([spec])
    group.wait_for(_placed([shard_id], [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]), WAIT_S, "gzp-000 placed")
    for batch in range(3):
        head = _publish(client, SOURCES[1], [{"b": batch, "i": i} for i in range(20)])
        shards.stat_shard(shard_id, {SOURCES[1]: head}, timeout=WAIT_S)
        assert client.flush(log) is not None
    # A hand-off: the new primary recovers from the log and stores verified hints as backup 0.
    assert shards.unassign(shard_id) == [shard_id]
    hints = wait_for(
        "backup hints with live files",
        lambda: (h := shards.get_hints(shard_id)).backups[0] is not None and h.backups[0].live_nodes and h,
        WAIT_S,
    )
    # gazctl prunes only with every hint of every shard present: write the primary's (Apply's primary_hints).
    shards.apply_shards([ShardChange(upsert=spec, expect_mod_revision=-1, primary_hints=hints.backups[0])])
    assert shards.get_hints(shard_id).primary == hints.backups[0]

    proc = _shards(gz, group, "prune", "-l", "test=prune", "--dry-run", "--log.level=debug")
    assert _log_records(proc.stderr, "checking fragments of journal")[0]["journal"] == log
    theirs = {(int(r["begin"]), int(r["end"])) for r in _log_records(proc.stderr, "pruning fragment")}
    out = ok(gazette("shards", "prune", "--shard", shard_id, "--dry-run", env=_env(py_cluster, group)))
    ours = {(int(b), int(e)) for b, e in re.findall(r"would remove \[(\d+), (\d+)\)", out)}
    assert ours and ours <= theirs
    _, segments = hints.backups[0].live_log_segments()
    for begin, end in theirs:  # none overlaps a hinted segment (the last one is open-ended)
        assert all(
            end <= s.first_offset or (s is not segments[-1] and s.last_offset <= begin) for s in segments
        )
    persisted = [f for f in client.list_fragments(log) if f.backing_store]
    assert {(f.begin, f.end) for f in persisted} >= theirs  # a dry run: all still there


def _tree(directory) -> dict[str, bytes]:
    """Every file under `directory` by its relative path, with its content."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_recover_plays_our_recovery_log(gz, group, shards, client, py_cluster, tmp_path) -> None:
    """Gazette's player (gazctl shards recover) plays the recovery log gazette-py's recorder wrote, from
    the start and from the hints our primary stored (GetHints), into the files of the live store."""
    shard_id = "gzr-000"
    log = f"{RECOVERY_PREFIX}/{shard_id}"
    client.apply_journals(
        [py_cluster.journal_spec(log, replication=1, labels={"content-type": CONTENT_TYPE_RECOVERY_LOG})]
    )
    py_cluster.wait_for_routes([log])
    spec = ShardSpec(
        shard_id, [SOURCES[0]], max_txn_duration="50ms", labels={"test": "recover"},
        recovery_log_prefix=RECOVERY_PREFIX, hint_prefix=f"{group.root}/hints",
    )  # fmt: skip
    shards.apply_shards([spec])
    group.wait_for(_placed([shard_id], [ReplicaCode.PRIMARY]), WAIT_S, "gzr-000 placed")
    for batch in range(3):  # several transactions: state.json rewritten (truncating create, rename) each time
        head = _publish(client, SOURCES[0], [{"b": batch, "i": i} for i in range(5)])
        shards.stat_shard(shard_id, {SOURCES[0]: head}, timeout=WAIT_S)
    (primary,) = [c.shards[shard_id] for c in group.consumers if c and shard_id in c.shards]
    assert primary.recorder is not None and primary.recovery is not None
    primary.recorder.barrier().result(timeout=WAIT_S)  # what the store wrote is in the log
    live = _tree(Path(primary.recovery.directory))
    assert set(live) == {"state.json"} and decode_state_file(live["state.json"]).state == {"n": 15}

    directory = tmp_path / "recovered"
    proc = _shards(gz, group, "recover", f"--id={shard_id}", f"--dir={directory}", "--log.level=info")
    (done,) = _log_records(proc.stderr, "completed playback")
    assert int(done["files"]) == 1
    assert _tree(directory) == live
    # Ours plays the same log to the same files.
    env = _env(py_cluster, group)
    ok(gazette("shards", "recover", "--shard", shard_id, "--dir", str(tmp_path / "ours"), env=env))
    assert _tree(tmp_path / "ours") == live

    # From our recorder's hints (stored as the primary's, read by gazctl through GetHints): Gazette's
    # player seeks past the earlier rewrites of state.json to the hinted segment, and plays the rest.
    hints = primary.recorder.build_hints().result(timeout=WAIT_S)
    (segment,) = hints.live_nodes[0].segments
    assert segment.first_offset > 0
    shards.apply_shards([ShardChange(upsert=spec, expect_mod_revision=-1, primary_hints=hints)])
    assert shards.get_hints(shard_id).primary == hints
    hinted = tmp_path / "hinted"
    proc = _shards(gz, group, "recover", f"--id={shard_id}", f"--dir={hinted}", "--log.level=debug")
    (seek,) = _log_records(proc.stderr, "seeking to next hinted segment")
    assert int(seek["offset"]) == segment.first_offset and int(seek["firstSeqNo"]) == segment.first_seq_no
    assert _tree(hinted) == live
