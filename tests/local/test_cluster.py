"""LocalCluster: processes die with their owner, in-process mode refuses signals, and broker faults
(graceful stop, SIGKILL, SIGSTOP) in subprocess mode leave persisted content intact.

Every wait polls a condition until a deadline; no outcome depends on how long something took.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import gazette
from gazette.client.loop import default_loop
from gazette.client.timeouts import CallTimeout
from gazette.fragment.codecs import decompress
from gazette.fragment.fragment import Fragment
from gazette.fragment.stores import get_store
from gazette.keyspace import layout
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.endpoints import grpc_target
from gazette.protocol.errors import GazetteError
from gazette.protocol.status import Status
from gazette.testing import wait_for  # bounded by its default 30 s


# --- /proc helpers -----------------------------------------------------------------------------------
def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, starttime) of a live process table entry, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0], int(fields[19])


def _running(pid: int, starttime: int) -> bool:
    """True while `pid` is the same process (same start time) and not a zombie or dead."""
    stat = _proc_stat(pid)
    return stat is not None and stat[2] == starttime and stat[1] not in ("Z", "X")


def _descendants(root_pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _proc_stat(int(entry))) is not None:
            children.setdefault(stat[0], []).append(int(entry))
    out: set[int] = set()
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


# --- etcd helpers ------------------------------------------------------------------------------------
def _etcd_range(endpoint: str, prefix: str) -> dict[str, str]:
    """{key: lease id} under `prefix`, through etcd's JSON gateway."""
    raw = prefix.encode()
    end = raw[:-1] + bytes([raw[-1] + 1])
    body = json.dumps({"key": base64.b64encode(raw).decode(), "range_end": base64.b64encode(end).decode()})
    request = urllib.request.Request(f"{endpoint}/v3/kv/range", data=body.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        kvs = json.loads(resp.read()).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode(): kv.get("lease", "0") for kv in kvs}


def _assigned_under_live_lease(cluster: LocalCluster, journal: str, broker: int) -> bool:
    """The journal's assignment rides on broker `broker`'s current member lease: a SIGKILLed
    predecessor's assignment (under its old lease) has expired and been replaced."""
    h = cluster.brokers[broker]
    member = _etcd_range(cluster.etcd_endpoint, layout.member_key(cluster.root, h.zone, h.suffix))
    assigned = _etcd_range(cluster.etcd_endpoint, layout.item_assign_prefix(cluster.root, journal))
    return bool(member) and bool(assigned) and set(assigned.values()) == set(member.values())


# --- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture
def subprocess_cluster(etcd, etcd_root, tmp_path) -> Iterator[LocalCluster]:
    with LocalCluster(
        brokers=1,
        mode="subprocess",
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
        lease_ttl_s=5,
    ) as cluster:
        yield cluster


def _persisted_content(fragments: list[Fragment]) -> bytes:
    """The journal bytes as the store's files hold them (checked against each fragment's SHA1)."""
    out = bytearray()
    for f in sorted(fragments, key=lambda f: f.begin):
        assert f.begin == len(out), f"fragments leave a gap or overlap at {len(out)}: {fragments}"
        content = decompress(f.codec, get_store(f.backing_store).get(f.content_path))
        assert len(content) == f.length and hashlib.sha1(content).digest() == f.sum, f
        out += content
    return bytes(out)


# --- (a) owner death -----------------------------------------------------------------------------------
OWNER_SCRIPT = """
import json, sys, time
from gazette.local.cluster import LocalCluster
cluster = LocalCluster(brokers=2, mode="subprocess", data_dir=sys.argv[1]).start()
print(json.dumps({"etcd": cluster._etcd.pid, "brokers": [h.pid for h in cluster.brokers]}), flush=True)
time.sleep(600)
"""


def _read_line(proc: subprocess.Popen, deadline_s: float) -> bytes:
    assert proc.stdout is not None
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            return proc.stdout.readline()
        if proc.poll() is not None:
            break
    return b""


def test_sigkill_of_owner_leaves_no_process_behind(tmp_path: Path) -> None:
    stderr_path = tmp_path / "owner.stderr"
    with open(stderr_path, "wb") as stderr:
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER_SCRIPT, str(tmp_path / "data")],
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        line = _read_line(owner, 90.0)
        assert line, f"owner did not report its children; its stderr:\n{stderr_path.read_text()[-3000:]}"
        reported = json.loads(line)
        pids = {reported["etcd"], *reported["brokers"]}
        assert len(pids) == 3 and all(isinstance(p, int) for p in pids), reported
        children = _descendants(owner.pid)
        assert pids <= children, f"reported pids {pids} are not all children of the owner ({children})"
        starttimes = {}
        for pid in children:
            stat = _proc_stat(pid)
            if stat is not None:
                starttimes[pid] = stat[2]
        assert all(_running(p, starttimes[p]) for p in pids), "a child died before the owner was killed"

        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)

        wait_for(
            f"children {sorted(starttimes)} of the SIGKILLed owner to die",
            lambda: not any(_running(p, t) for p, t in starttimes.items()),
        )
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()


def test_brokers_outlive_the_thread_that_started_the_cluster(etcd, etcd_root, tmp_path) -> None:
    # PR_SET_PDEATHSIG fires when the *forking thread* exits: a cluster started from a short-lived
    # thread (an executor worker, a notebook helper) must keep its brokers.
    cluster = LocalCluster(
        brokers=1, mode="subprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data")
    )
    starter = threading.Thread(target=cluster.start)
    starter.start()
    starter.join()
    try:
        assert cluster.brokers and cluster.brokers[0].pid is not None
        client = cluster.client()
        client.apply_journals([cluster.journal_spec("local/thread/one")])
        res = client.append("local/thread/one", b"still here\n")
        assert client.read_all("local/thread/one") == b"still here\n" and res.end == 11
        assert all(h.running for h in cluster.brokers), [h.proc.returncode for h in cluster.brokers if h.proc]
    finally:
        cluster.close()


# --- (b) in-process mode refuses signals ----------------------------------------------------------
def test_inprocess_mode_refuses_signals_with_a_clear_error(etcd, etcd_root, tmp_path) -> None:
    with LocalCluster(
        brokers=1, mode="inprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data")
    ) as cluster:
        for fault in (cluster.kill_broker, cluster.pause_broker, cluster.resume_broker):
            with pytest.raises(GazetteError, match="subprocess") as info:
                fault(0)
            assert fault.__name__ in str(info.value)
        assert cluster.brokers[0].pid is None
        # Refusing left the broker serving.
        client = cluster.client()
        client.apply_journals([cluster.journal_spec("local/inproc/one")])
        client.append("local/inproc/one", b"ok\n")
        assert client.read_all("local/inproc/one") == b"ok\n"


def test_close_gives_up_on_an_inprocess_broker_stop_that_hangs(
    etcd, etcd_root, tmp_path, monkeypatch, caplog
) -> None:
    """Closing never hangs: an in-process broker whose stop does not finish within the cluster's
    deadline is logged with every task's stack (what it waits on) and cancelled."""
    import asyncio

    from gazette.local import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "STOP_GRACE_S", 0.5)
    cluster = LocalCluster(
        brokers=1, mode="inprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data"),
        exit_drain_s=0.5,
    ).start()  # fmt: skip
    broker = cluster.brokers[0].broker
    real_stop = broker.stop

    async def stuck_stop(graceful: bool = True) -> None:
        await real_stop(graceful=graceful)  # really stopped (the test leaves nothing running) ...
        await asyncio.Event().wait()  # ... then waits forever, as a stop stuck on a peer would

    broker.stop = stuck_stop
    with caplog.at_level("WARNING", logger="gazette.local.cluster"):
        cluster.close()
    (warning,) = [r.getMessage() for r in caplog.records if "did not stop within" in r.getMessage()]
    assert "1 in-process broker(s) did not stop within 1 s" in warning
    assert "stuck_stop" in warning  # the stuck task's stack names where it waits


def test_wait_for_routes_waits_for_the_view_of_every_broker(etcd, etcd_root, tmp_path) -> None:
    """Each broker answers from its own etcd view: one that trails the others answers
    JOURNAL_NOT_FOUND for a journal they route. wait_for_routes returns only once every running
    broker holds the route (found by a mixed-cluster test that appended through the other broker)."""
    with LocalCluster(
        brokers=2, mode="inprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data")
    ) as cluster:
        journal = "local/view/lag"
        first, trailing = (h.broker for h in cluster.brokers)
        assert first is not None and trailing is not None
        trailing.ks.hold()  # broker 1 stops applying etcd updates (broker 0, the oldest, allocates)
        cluster.client().apply_journals([cluster.journal_spec(journal, replication=1)])
        with gazette.connect(broker=cluster.broker_endpoints[0]) as via_first:
            wait_for("the route in the first broker's view", lambda: any(
                i.spec.name == journal and i.route.primary >= 0 for i in via_first.list_journals()
            ))  # fmt: skip
        with pytest.raises(
            CallTimeout, match=f"no full route in the view of broker {cluster.broker_endpoints[1]}"
        ):
            cluster.wait_for_routes([journal], timeout=2)
        with gazette.connect(broker=cluster.broker_endpoints[1]) as via_trailing:
            with pytest.raises(GazetteError, match="JOURNAL_NOT_FOUND"):
                via_trailing.append(journal, b"x\n")
            default_loop().run(_release(trailing.ks))
            cluster.wait_for_routes([journal])
            assert via_trailing.append(journal, b"x\n").end == 2


def test_wait_for_routes_asks_a_restarted_broker_again(etcd, etcd_root, tmp_path) -> None:
    """A broker restarted at its address is asked afresh: wait_for_routes returns once it routes the
    journals, rather than failing on the connection its view client had before the kill (found by
    notebook 06, which kills and restarts a broker and then waits for routes)."""
    with LocalCluster(
        brokers=2, mode="subprocess", etcd=etcd.endpoint, root=etcd_root, data_dir=str(tmp_path / "data"),
        lease_ttl_s=5,
    ) as cluster:  # fmt: skip
        journals = [f"local/restart/part-{i}" for i in range(4)]
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(j, replication=1) for j in journals])
        cluster.wait_for_routes(journals)  # asks each broker
        killed, endpoint = cluster.brokers[1].suffix, cluster.broker_endpoints[1]
        # A client that keeps dialing the killed broker's address, as the publishers and consumers of
        # notebook 06 do: gRPC's connection to that address (shared by every channel to it) backs off
        # longer after each refused attempt, and calls fail at once meanwhile.
        stop_dialing = threading.Event()

        def dial() -> None:
            dialer = cluster._view_client(endpoint)  # the channel settings of every cluster client
            while not stop_dialing.wait(0.05):
                try:
                    dialer.list_journals(timeout=5)
                except GazetteError:
                    pass

        cluster.kill_broker(1)
        dialing = threading.Thread(target=dial, daemon=True)
        dialing.start()
        try:
            wait_for("every route without the killed broker", lambda: all(
                i.route.primary >= 0 and killed not in (s for _, s in i.route.members)
                for i in client.list_journals()
            ), 60)  # fmt: skip
            time.sleep(10)  # long enough a dialing for the next reconnect of the address to be seconds away
        finally:
            stop_dialing.set()
            dialing.join(10)
        cluster.restart_broker(1)
        # It asks the restarted broker too, through a new channel, and waits out the address's
        # backoff (a call during it fails at once, UNAVAILABLE, as the dialer's did): it raised that
        # PeerError before.
        cluster.wait_for_routes(journals)
        assert cluster.brokers[1].endpoint == endpoint and endpoint in cluster._view_clients


async def _release(ks) -> None:  # type: ignore[no-untyped-def]
    ks.release()  # on the brokers' loop, where the KeySpace applies its updates


def test_bad_arguments_are_refused(etcd, etcd_root) -> None:
    with pytest.raises(GazetteError, match="mode"):
        LocalCluster(mode="threads")
    with pytest.raises(GazetteError, match="at least one broker"):
        LocalCluster(brokers=0)
    with LocalCluster(brokers=1, mode="inprocess", etcd=etcd.endpoint, root=etcd_root) as cluster:
        with pytest.raises(GazetteError, match="no broker 5"):
            cluster.stop_broker(5)


# --- (c) graceful stop and SIGKILL in subprocess mode ---------------------------------------------
def _reset_head(client, journal: str) -> int:
    """gazctl journals reset-head (reference 4.5): an empty append at the indexed head."""
    head = client.read_head(journal)
    client.append(journal, b"", offset=head)
    return head


def test_graceful_stop_and_restart_keeps_everything(subprocess_cluster: LocalCluster) -> None:
    cluster = subprocess_cluster
    client = cluster.client()
    journal = "local/stop/one"
    client.apply_journals([cluster.journal_spec(journal, compression="gzip")])
    written = b""
    for i in range(20):
        data = f"record {i:03d} ".encode() * (i + 1) + b"\n"
        res = client.append(journal, data)
        assert res.begin == len(written)
        written += data
    pid_before = cluster.brokers[0].pid

    cluster.stop_broker(0)  # SIGTERM: the broker rolls and persists its spools before exiting
    assert not cluster.brokers[0].running
    assert cluster.brokers[0].proc is not None and cluster.brokers[0].proc.returncode == 0
    cluster.restart_broker(0)
    assert cluster.brokers[0].running and cluster.brokers[0].pid != pid_before

    assert wait_for("the journal to be readable again", lambda: client.read_all(journal) == written)
    fragments = client.list_fragments(journal)
    assert fragments and all(f.backing_store == cluster.store for f in fragments), fragments
    assert min(f.begin for f in fragments) == 0 and max(f.end for f in fragments) == len(written)
    assert _persisted_content(fragments) == written  # straight from the store's files

    # Consistency was kept by persisting, not by a synced pipeline: like Gazette, the fresh replica
    # refuses a plain append until reset-head re-syncs it at the indexed head.
    with pytest.raises(GazetteError) as info:
        client.append(journal, b"refused\n")
    assert info.value.status == Status.INDEX_HAS_GREATER_OFFSET
    assert _reset_head(client, journal) == len(written)
    res = client.append(journal, b"after restart\n")
    assert (res.begin, res.end) == (len(written), len(written) + 14)
    assert client.read_all(journal) == written + b"after restart\n"


def test_sigkill_and_restart_keeps_what_was_flushed(subprocess_cluster: LocalCluster) -> None:
    cluster = subprocess_cluster
    client = cluster.client()
    journal = "local/kill/one"
    client.apply_journals([cluster.journal_spec(journal)])
    flushed = b""
    for i in range(5):
        client.append(journal, b"flushed %d\n" % i)
        flushed += b"flushed %d\n" % i
    persisted = client.flush(journal)
    assert persisted is not None and persisted.end == len(flushed) and persisted.backing_store
    client.append(journal, b"only in the spool\n")  # one replica: lost with the process
    pid_before = cluster.brokers[0].pid

    cluster.kill_broker(0)
    assert cluster.brokers[0].proc is not None and cluster.brokers[0].proc.returncode == -signal.SIGKILL
    cluster.restart_broker(0)
    assert cluster.brokers[0].running and cluster.brokers[0].pid != pid_before

    # The killed broker's assignment lives on until its lease expires, and its replacement makes a
    # fresh replica: check once the journal is assigned under the restarted broker's own lease.
    wait_for(
        "the journal's assignment to move to the new lease",
        lambda: _assigned_under_live_lease(cluster, journal, 0),
    )
    assert wait_for(
        "flushed content to be readable after the restart", lambda: client.read_all(journal) == flushed
    )
    fragments = client.list_fragments(journal)
    assert fragments and all(f.backing_store for f in fragments), fragments
    assert _persisted_content(fragments) == flushed

    with pytest.raises(GazetteError) as info:
        client.append(journal, b"refused\n")
    assert info.value.status == Status.INDEX_HAS_GREATER_OFFSET

    def reset_and_append():
        # Retried only if the broker was still swapping replicas (a fresh spool refuses again).
        try:
            assert _reset_head(client, journal) == len(flushed)
            return client.append(journal, b"after kill\n")
        except GazetteError as exc:
            if exc.status != Status.INDEX_HAS_GREATER_OFFSET:
                raise
            return None

    res = wait_for("the restarted broker to accept appends", reset_and_append)
    assert (res.begin, res.end) == (len(flushed), len(flushed) + 11)
    assert client.read_all(journal) == flushed + b"after kill\n"


# --- (d) pause and resume ----------------------------------------------------------------------------
def _read_with_deadline(endpoint: str, journal: str, deadline_s: float) -> bytes:
    with grpc.insecure_channel(grpc_target(endpoint)) as channel:
        stub = pb_grpc.JournalStub(channel)
        out = b""
        for resp in stub.Read(pb.ReadRequest(journal=journal, offset=0, block=False), timeout=deadline_s):
            out += resp.content
        return out


def test_paused_broker_stops_answering_until_resumed(etcd, etcd_root, tmp_path) -> None:
    with LocalCluster(
        brokers=1,
        mode="subprocess",
        etcd=etcd.endpoint,
        root=etcd_root,
        data_dir=str(tmp_path / "data"),
        lease_ttl_s=10,  # longer than the pause: the broker keeps its assignments
    ) as cluster:
        client = cluster.client()
        journal = "local/pause/one"
        client.apply_journals([cluster.journal_spec(journal)])
        client.append(journal, b"before the pause\n")
        endpoint = cluster.broker_endpoints[0]
        assert _read_with_deadline(endpoint, journal, 10.0) == b"before the pause\n"

        cluster.pause_broker(0)
        try:
            assert _proc_stat(cluster.brokers[0].pid)[1] == "T"  # stopped by SIGSTOP
            with pytest.raises(grpc.RpcError) as info:
                _read_with_deadline(endpoint, journal, 1.0)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        finally:
            cluster.resume_broker(0)

        content = wait_for(
            "the resumed broker to answer", lambda: _read_with_deadline(endpoint, journal, 5.0)
        )
        assert content == b"before the pause\n"
        res = client.append(journal, b"after the pause\n")
        assert res.begin == len(b"before the pause\n")
        assert client.read_all(journal) == b"before the pause\nafter the pause\n"


def test_sigusr2_writes_every_task_stack_to_the_broker_log(subprocess_cluster: LocalCluster) -> None:
    """A broker that seems stuck can be asked what each of its tasks waits on, without stopping it."""
    handle = subprocess_cluster.brokers[0]
    assert subprocess_cluster.dump_tasks() == [handle.log_path]  # SIGUSR2 to each process it runs

    def dumped() -> str:
        text = Path(handle.log_path).read_text(errors="replace")
        return text if "asyncio tasks" in text and "task keyspace watch" in text else ""

    text = wait_for("the task dump in the broker's log", dumped)
    assert "Stack for <Task" in text  # each task's suspended frames follow its name
    client = subprocess_cluster.client()  # and the broker goes on serving
    client.apply_journals([subprocess_cluster.journal_spec("local/sigusr2/one")])
    assert client.append("local/sigusr2/one", b"still serving\n").end > 0
