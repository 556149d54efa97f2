"""`gazette shards ...` and `gazette consumer run` against a real broker, etcd and consumers: shardspace
YAML apply, list in every format and back, stat, unassign, inspect; bad input ends with exit code 1
and one line naming the problem. Each command runs as `python -m gazette.cli.main` in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from cli_run import gazette, ok, one_error_line

from gazette.cli.shards import load_shards_yaml
from gazette.consumer import ReplicaCode, ShardSpec
from gazette.examples import wordcount
from gazette.keyspace.procutil import spawn, terminate
from gazette.protocol.spec import JournalSpec

SPECS = textwrap.dedent(
    """\
    common:
      max_txn_duration: 50ms
      hot_standbys: 1
      labels: {app: count}
    shards:
      - id: count-000
        sources: [examples/words/part-000]
      - id: count-001
        sources: [{journal: examples/words/part-001, min_offset: 0}]
        labels: {tier: b}
    """
)


def test_shards_commands_round_trip(cluster, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals([*wordcount.journals(2), JournalSpec(name="tests/cli/plain", replication=1)])
    cluster.wait_for_routes()
    db_dir = str(tmp_path / "db")
    os.makedirs(db_dir)
    group = cluster.run_consumer(wordcount.WordCount(db_dir), [], processes=2)
    env = {"GAZETTE_ETCD": cluster.etcd_endpoint, "GAZETTE_CONSUMER_ROOT": group.root}

    assert "applied 2 change(s)" in ok(gazette("shards", "apply", env=env, input=SPECS))
    group.wait_for(
        lambda shards: (
            len(shards) == 2
            and all(
                [r.status.code for r in s.replicas] == [ReplicaCode.PRIMARY, ReplicaCode.STANDBY]
                for s in shards
            )
        ),
        60,
        "both shards placed",
    )

    # YAML lists what was applied, with revisions, in the format apply reads.
    listed = ok(gazette("shards", "list", "-o", "yaml", env=env))
    changes = load_shards_yaml(listed)
    assert [c.upsert for c in changes] == [
        ShardSpec("count-000", ["examples/words/part-000"], max_txn_duration="50ms", hot_standbys=1, labels={"app": "count"}),
        ShardSpec(
            "count-001", ["examples/words/part-001"], max_txn_duration="50ms", hot_standbys=1,
            labels={"app": "count", "tier": "b"},
        ),
    ]  # fmt: skip
    assert all(c.expect_mod_revision > 0 for c in changes)
    ok(gazette("shards", "apply", env=env, input=listed))  # compare-and-swap on the listed revisions
    stale = one_error_line(gazette("shards", "apply", env=env, input=listed))  # those moved on
    assert "ETCD_TRANSACTION_FAILED" in stale and "mod revision did not match" in stale

    # gazctl's form: labels as name/value lists (the single label store=rocksdb), batches of one.
    def relabel(text: str) -> str:
        assert "  - name: app\n    value: count\n" in text  # hoisted to common, as gazctl lists it
        return text.replace("name: app\n    value: count", "name: store\n    value: rocksdb")

    stale_yaml = relabel(listed)
    ok(
        gazette(
            "shards",
            "apply",
            "--max-txn-size",
            "1",
            env=env,
            input=relabel(ok(gazette("shards", "list", "-o", "yaml", env=env))),
        )
    )
    assert all(
        s.spec.labels.value_of("store") == "rocksdb" and s.spec.labels.value_of("app") is None
        for s in group.list_shards()
    )
    assert "ETCD_TRANSACTION_FAILED" in one_error_line(gazette("shards", "apply", env=env, input=stale_yaml))

    # edit: the listed YAML opened in $EDITOR (a script here), what it saves applied.
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys\np = sys.argv[1]\ntext = open(p).read()\n"
        "open(p, 'w').write(text.replace('max_txn_duration: 50ms', 'max_txn_duration: 70ms'))\n"
    )
    edit_env = {**env, "EDITOR": f"{sys.executable} {editor}"}
    assert "applied 1 change(s)" in ok(gazette("shards", "edit", "-l", "id=count-001", env=edit_env))
    specs = {s.spec.id: s.spec for s in group.list_shards()}
    assert specs["count-001"].max_txn_duration == 0.07 and specs["count-000"].max_txn_duration == 0.05
    assert "Cancelled; nothing to do." in ok(
        gazette("shards", "edit", "-l", "id=count-001", env={**env, "EDITOR": "true"})
    )
    assert "no shards match" in one_error_line(gazette("shards", "edit", "-l", "id=nope-000", env=edit_env))

    rows = json.loads(ok(gazette("shards", "list", "-o", "json", "-l", "tier=b", env=env)))
    assert [r["id"] for r in rows] == ["count-001"]
    assert [(r["slot"], r["status"]) for r in rows[0]["replicas"]] == [(0, "PRIMARY"), (1, "STANDBY")]
    assert all(r["endpoint"].startswith("http://127.0.0.1:") for r in rows[0]["replicas"])
    table = ok(gazette("shards", "list", env=env))
    assert "count-000" in table and "PRIMARY" in table and "examples/words/part-000" in table

    # Stat through one member's address, waiting for the words just published.
    heads = wordcount.publish_words(client, [f"w{i}" for i in range(20)], 2)
    j0 = wordcount.words_journal(0)
    assert heads[j0] > 0
    primary = next(r for r in rows[0]["replicas"] if r["slot"] == 0)
    stat = json.loads(
        ok(
            gazette(
                "shards", "stat", "count-000", "-r", f"{j0}={heads[j0]}", "-o", "json", "--timeout", "60",
                "--consumer", primary["endpoint"],
            )
        )
    )  # fmt: skip
    assert stat["shard"] == "count-000" and stat["read_through"][j0] >= heads[j0]
    inspected = json.loads(ok(gazette("shards", "inspect", "count-000", env=env)))
    assert inspected["read_through"] == inspected["checkpoint"]["sequencer"]["offsets"]
    assert inspected["transactions_completed"] == len(inspected["transactions"]) > 0

    assert "would unassign count-001" in ok(
        gazette("shards", "unassign", "-l", "tier=b", "--dry-run", env=env)
    )
    assert "0 shard(s) unassigned" in ok(gazette("shards", "unassign", "count-000", "--failed", env=env))

    # Deletion by YAML needs a revision.
    deleted = "shards:\n  - {id: count-001, delete: true, revision: -1}\n"
    ok(gazette("shards", "apply", env=env, input=deleted))
    assert [r["id"] for r in json.loads(ok(gazette("shards", "list", "-o", "json", env=env)))] == [
        "count-000"
    ]

    # Bad input: one line naming the problem.
    bad_source = "shards:\n  - {id: plain-000, sources: [tests/cli/plain], max_txn_duration: 1s}\n"
    assert "has no content-type label" in one_error_line(
        gazette("shards", "apply", env=env, input=bad_source)
    )
    assert "not valid YAML" in one_error_line(gazette("shards", "apply", env=env, input="shards: [a: b: c]"))
    bad_spec = "shards:\n  - {id: x, max_txn_duration: 1s}\n"
    assert 'shard id "x"' in one_error_line(gazette("shards", "apply", env=env, input=bad_spec))
    assert "common" in one_error_line(
        gazette("shards", "apply", env=env, input="common: {id: a}\nshards: []\n")
    )
    assert "no consumer to ask" in one_error_line(gazette("shards", "list"))
    assert "journal=offset" in one_error_line(gazette("shards", "stat", "count-000", "-r", "nope", env=env))
    assert "SHARD_NOT_FOUND" in one_error_line(gazette("shards", "stat", "nope-000", env=env))


def test_consumer_run_serves_until_sigterm(cluster, tmp_path) -> None:
    client = cluster.client()
    client.apply_journals(wordcount.journals(1))
    cluster.wait_for_routes()
    root = f"{cluster.root.rsplit('/', 1)[0]}/consumers/cli-run"
    args = [
        sys.executable, "-m", "gazette.cli.main", "consumer", "run", "gazette.examples.wordcount:WordCount",
        "--app-args", json.dumps({"db_dir": str(tmp_path)}), "--etcd", cluster.etcd_endpoint,
        "--broker", cluster.broker_endpoints[0], "--root", root, "--port", "0", "--lease-ttl", "3",
        "--exit-drain", "1",
    ]  # fmt: skip
    proc = spawn(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["root"] == root and ready["pid"] == proc.pid and ready["endpoint"].startswith("http://")
        env = {"GAZETTE_CONSUMER": ready["endpoint"]}
        ok(
            gazette(
                "shards",
                "apply",
                env=env,
                input="shards:\n  - {id: count-000, sources: [examples/words/part-000], max_txn_duration: 50ms}\n",
            )
        )
        heads = wordcount.publish_words(client, ["x", "y", "x"], 1)
        journal, head = next(iter(heads.items()))
        ok(gazette("shards", "stat", "count-000", "-r", f"{journal}={head}", "--timeout", "60", env=env))
        assert wordcount.store_counts(str(tmp_path)) == {"x": 2, "y": 1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        terminate(proc)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    bad = gazette("consumer", "run", "no_such_module:App", "--etcd", cluster.etcd_endpoint, "--root", root)
    assert "no_such_module cannot be imported" in one_error_line(bad)
    not_app = gazette(
        "consumer", "run", "gazette.examples.wordcount:words_journal", "--etcd", "x", "--root", "/r"
    )
    assert "is not an instance of gazette.consumer.Application" in one_error_line(not_app)
