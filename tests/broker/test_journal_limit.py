"""`gazette broker serve --broker.limit N` (Gazette's flag; also `--limit`, env BROKER_LIMIT): the
broker announces N as its journal limit and the allocator gives it no more journals than that.
How the allocator places items under limits is tested in tests/allocator/test_scenarios.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gazette import tunables
from gazette.broker.broker import Broker
from gazette.client.sync import Client
from gazette.keyspace.procutil import read_ready_line, spawn, terminate
from gazette.protocol.spec import JournalSpec
from gazette.testing import wait_for

START_TIMEOUT_S = 60
LIMIT = 2
JOURNALS = 4
SETTLE_S = 1.5  # the allocator had its chance to over-assign (it converges in well under this)


def test_a_broker_holds_at_most_its_limit_of_journals(etcd, etcd_root, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GAZETTE_", "LOG_", "BROKER_"))}
    proc = spawn(
        [sys.executable, "-m", "gazette.cli.main", "broker", "serve", "--etcd", etcd.endpoint,
         "--root", etcd_root, "--port", "0", "--exit-drain", "1", "--spool-dir", str(tmp_path),
         "--broker.limit", str(LIMIT)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True,
    )  # fmt: skip
    try:
        ready = read_ready_line(proc, START_TIMEOUT_S)
        assert ready is not None, proc.stderr.read() if proc.poll() is not None else "no ready line"
        with Client(ready["endpoint"]) as client:
            names = [f"limit/part-{i:03d}" for i in range(JOURNALS)]
            client.apply_journals([JournalSpec(name=n, replication=1) for n in names])

            def routed() -> list[str]:
                return [i.spec.name for i in client.list_journals("prefix=limit/") if i.route.members]

            wait_for(f"{LIMIT} journals assigned", lambda: len(routed()) >= LIMIT)
            time.sleep(SETTLE_S)
            assert len(routed()) == LIMIT, routed()
    finally:
        terminate(proc)


def test_the_default_limit_is_gazettes() -> None:
    assert tunables.BROKER_JOURNAL_LIMIT == 1024
    assert Broker("http://127.0.0.1:1")._broker_spec().journal_limit == tunables.BROKER_JOURNAL_LIMIT
