"""A mixed cluster: real Gazette brokers and gazette-py brokers under one etcd root, serving the same
R=3 journals, with the fault suite's writers (every attempt tracked) appending through either kind.

Four brokers, two of each kind, so every R=3 route holds both kinds and a primary of either kind
replicates to the other. Each round SIGKILLs a journal's primary in the middle of appends and restarts
it, until a primary of each kind has been killed (a new primary of either kind takes over). Then:
every acknowledged append is read back whole at the offsets its response gave and nowhere else
(the fault suite's oracle); every fragment any route member lists, and every fragment persisted to
the store by either kind, holds exactly the journal's bytes of its [begin, end).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.request

import grpc
import pytest
from faults.harness import (
    LEASE_TTL_S,
    ZONES,
    create_journal,
    log_tails,
    route_of,
    running_endpoints,
    say,
    wait_for,
    wait_for_full_route,
)
from faults.workload import Workload, read_journal, verify
from interop.conftest import gazctl_for

import gazette
from gazette.broker.resolver import decode_value
from gazette.client.loop import default_loop
from gazette.fragment.content import list_fragments, open_fragment
from gazette.keyspace import layout
from gazette.local import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol.endpoints import grpc_target
from gazette.protocol.errors import GazetteError

KINDS = ["gazette-py", "gazette", "gazette-py", "gazette"]
JOURNALS = ["interop/mixed/part-000", "interop/mixed/part-001"]
MAX_ROUNDS = 4  # rounds SIGKILL primaries until one of each kind was killed while primary
LIST_TIMEOUT_S = 10.0


@pytest.fixture
def mixed_cluster(gazette_bin, tmp_path):
    cluster = LocalCluster(
        brokers=len(KINDS), mode="subprocess", broker_kinds=KINDS, zones=ZONES, lease_ttl_s=LEASE_TTL_S,
        data_dir=str(tmp_path / "cluster"), exit_drain_s=30.0, log_level="INFO",
    ).start()  # fmt: skip
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def workloads():
    started: list[Workload] = []

    def make(journal, endpoints, **kw) -> Workload:
        started.append(Workload(journal, endpoints, **kw))
        return started[-1].start()

    yield make
    for w in started:
        w.close()


def _member_fragments(endpoint: str, journal: str) -> list[pb.Fragment] | None:
    """The fragments one broker itself lists for `journal` (do_not_proxy), None if it will not answer."""
    with grpc.insecure_channel(grpc_target(endpoint)) as ch:
        req = pb.FragmentsRequest(journal=journal, do_not_proxy=True, page_limit=1000)
        try:
            resp = pb_grpc.JournalStub(ch).ListFragments(req, timeout=LIST_TIMEOUT_S)
        except grpc.RpcError:
            return None
    return [f.spec for f in resp.fragments] if resp.status == pb.OK else None


def _sum_hex(s: pb.SHA1Sum) -> str:
    return (s.part1.to_bytes(8, "big") + s.part2.to_bytes(8, "big") + s.part3.to_bytes(4, "big")).hex()


def test_mixed_cluster_keeps_every_acknowledged_append_through_sigkills_of_either_kind(
    mixed_cluster: LocalCluster, workloads
) -> None:
    cluster = mixed_cluster
    report: list[str] = []
    kinds = {h.index: h.kind for h in cluster.brokers}
    try:
        for journal in JOURNALS:
            create_journal(cluster, journal)
            members, primary = wait_for_full_route(cluster, journal)
            assert {kinds[m] for m in members} == {"gazette", "gazette-py"}, f"{journal}'s route {members}"
            say(
                report,
                f"{journal}: route {[(m, kinds[m]) for m in members]}, primary {primary} ({kinds[primary]})",
            )
        endpoints = running_endpoints(cluster)
        works = {j: workloads(j, endpoints, writers=2, seed=i) for i, j in enumerate(JOURNALS)}
        for journal, work in works.items():
            wait_for(f"progress on {journal}", lambda w=work: w.acks_after(0) >= 20)

        killed: set[str] = set()  # kinds of broker SIGKILLed while primary
        for round_no in range(1, MAX_ROUNDS + 1):
            # A journal whose primary is of a kind not yet killed as primary, else the first journal.
            routes = {j: route_of(cluster, j) for j in JOURNALS}
            journal = next((j for j, (_, p) in routes.items() if kinds[p] not in killed), JOURNALS[0])
            members, victim = routes[journal]
            work = works[journal]
            t_kill, before = work.busy_moment()
            cluster.kill_broker(victim)
            killed.add(kinds[victim])
            say(
                report,
                f"round {round_no}: SIGKILL of broker {victim} ({kinds[victim]}), primary of {journal}, "
                f"with {len(before)} appends in flight",
            )
            wait_for(
                "the in-flight appends to end",
                lambda w=work, b=before, t=t_kill: len(w.ended_after(b, t)) == len(b),
                120,
            )
            cluster.restart_broker(victim)
            t_up = time.monotonic()
            for j in JOURNALS:
                wait_for_full_route(cluster, j, deadline_s=120)
            for j, w in works.items():
                wait_for(
                    f"an acknowledgement on {j} after the restart",
                    lambda w=w, t=t_up: w.acks_after(t) > 0,
                    120,
                )
            say(
                report,
                f"round {round_no}: writers of {journal} unavailable {work.unavailability(t_kill):.2f} s",
            )
            if killed == set(KINDS):
                break
        assert killed == set(KINDS), f"in {MAX_ROUNDS} rounds only {killed} brokers were primary when killed"

        for journal, work in works.items():
            work.stop_writers()
            content = work.run(read_journal(work._channels, endpoints(), journal, 180.0))
            verdict = verify(content, work.attempts, None)
            verdict.assert_ok()
            assert verdict.records > 0
            say(
                report,
                f"{journal}: {len(content)} bytes, {verdict.records} records, outcomes {work.outcomes()}",
            )

            members, _ = wait_for_full_route(cluster, journal)
            for m in members:
                listed = wait_for(
                    f"broker {m}'s fragments of {journal}",
                    lambda m=m, j=journal: _member_fragments(cluster.brokers[m].endpoint, j),
                    60,
                )
                for f in listed:
                    if f.end > len(content):
                        continue  # a spool past what the writers were acknowledged (e.g. still open)
                    want = hashlib.sha1(content[f.begin : f.end]).hexdigest()
                    assert _sum_hex(f.sum) == want, (
                        f"broker {m} ({kinds[m]}) lists [{f.begin}, {f.end}) of {journal} with another SHA1"
                    )
            persisted = default_loop().run(list_fragments(cluster.store, journal))
            for f in persisted:
                data = b"".join(open_fragment(f))  # verifies its length and SHA1 against its name
                assert data == content[f.begin : f.end], f"persisted {f} differs from the journal"
            say(
                report,
                f"{journal}: {len(persisted)} persisted fragments match, "
                f"{len(members)} members' listings match",
            )
    except BaseException:
        print("\n".join(report))
        print(log_tails(cluster))
        raise


IDLE_S = 15.0  # Gazette's broker answered our 2 s pings with GOAWAY after about three of them


def test_idle_replication_between_the_kinds_keeps_its_connections(gazette_bin, tmp_path) -> None:
    """Our brokers ping their peers every 2 s (a SIGSTOPped peer must not hold a spool for ever), but
    Gazette's Go brokers keep gRPC's default enforcement: pings more often than every 5 minutes on a
    connection they send nothing on are answered with GOAWAY too_many_pings, which ended our primary's
    idle Replicate streams to them, so the next append through either kind failed in replication. Our
    brokers announce a gazette_py.BrokerImplementation after their BrokerSpec and ping only peers that do:
    after a pause long enough for several pings, appends of R=2 journals (each route one broker of
    each kind) through our broker succeed, and neither broker logged a GOAWAY or a failed replication."""
    with LocalCluster(
        brokers=2, mode="subprocess", broker_kinds=["gazette-py", "gazette"], data_dir=str(tmp_path / "c"),
        log_level="INFO",
    ) as cluster:  # fmt: skip
        # Through our broker: it dials the Go broker whichever kind is primary (its pipeline, or a
        # proxied append), so a ping too many would reach a Go server.
        client = gazette.connect(broker=cluster.brokers[0].endpoint)
        names = [f"interop/idle/part-{i:03d}" for i in range(4)]
        client.apply_journals([cluster.journal_spec(n, replication=2) for n in names])
        cluster.wait_for_routes()
        for n in names:
            client.append(n, b"before the pause\n")
        time.sleep(IDLE_S)  # not a timing assertion: the time for the pings a Go broker refuses
        for n in names:
            client.append(n, b"after the pause\n")
        client.close()
        announced = {pb.BrokerSpec.FromString(v).process_spec.endpoint: gpy.BrokerImplementation.FromString(v).implementation
                     for _k, v in _etcd_range(cluster.etcd_endpoint, layout.members_prefix(cluster.root))}  # fmt: skip
        expected = {h.endpoint: "gazette-py" if h.kind == "gazette-py" else "" for h in cluster.brokers}
        logs = {h.suffix: open(h.log_path, errors="replace").read() for h in cluster.brokers}
    assert cluster.brokers[0].kind == "gazette-py" and announced == expected  # what each kind announces
    for suffix, text in logs.items():
        assert "too_many_pings" not in text and "failed in replication" not in text, (suffix, text[-3000:])


def test_flush_says_which_broker_lacks_it(gazette_bin, tmp_path) -> None:
    """Flush is gazette-py's own RPC: it works where the journal's primary is ours, and otherwise fails
    with one line naming the RPC and the broker, whether a Gazette broker was dialed or ours proxied."""
    with LocalCluster(
        brokers=2, mode="subprocess", broker_kinds=["gazette", "gazette-py"], data_dir=str(tmp_path / "c")
    ) as cluster:
        names = [f"interop/flush/part-{i:03d}" for i in range(6)]
        cluster.client().apply_journals([cluster.journal_spec(n, replication=1) for n in names])
        cluster.wait_for_routes()
        kind_of = {h.suffix: h.kind for h in cluster.brokers}
        primaries: dict[str, list[str]] = {"gazette": [], "gazette-py": []}
        for info in cluster.client().list_journals():
            _, suffix = info.route.members[info.route.primary]
            primaries[kind_of[suffix]].append(info.spec.name)
        assert primaries["gazette"] and primaries["gazette-py"], f"6 journals all on one kind: {primaries}"
        gazette_primary, py_primary = primaries["gazette"][0], primaries["gazette-py"][0]
        gazette_ep, py_ep = cluster.broker_endpoints
        with gazette.connect(broker=py_ep) as via_ours, gazette.connect(broker=gazette_ep) as via_gazette:
            via_ours.append(py_primary, b"x\n")
            assert via_ours.flush(py_primary) is not None  # our primary persisted it
            via_ours.append(gazette_primary, b"y\n")
            with pytest.raises(GazetteError) as proxied:
                via_ours.flush(gazette_primary)
            assert "/gazette_py.Flusher/Flush is not implemented" in str(proxied.value)
            assert f"the primary of {gazette_primary} at {gazette_ep} is not a gazette-py broker" in str(
                proxied.value
            )
            with pytest.raises(GazetteError) as direct:
                via_gazette.flush(py_primary)
            assert "/gazette_py.Flusher/Flush is not implemented" in str(direct.value)
            assert "gazette_py.Flusher" in direct.value.message  # Gazette's own words name the service


def _etcd_range(endpoint: str, prefix: str) -> list[tuple[str, bytes]]:
    raw = prefix.encode()
    body = json.dumps({"key": base64.b64encode(raw).decode(),
                       "range_end": base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()})  # fmt: skip
    req = urllib.request.Request(f"{endpoint}/v3/kv/range", data=body.encode(), method="POST")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as resp:
        kvs = json.loads(resp.read()).get("kvs", [])
    return [(base64.b64decode(kv["key"]).decode(), base64.b64decode(kv.get("value", ""))) for kv in kvs]


def test_etcd_values_written_by_gazette_brokers_decode_as_ours(
    gazette_cluster: LocalCluster, gazctl_bin, tmp_path
) -> None:
    """Every key a real Gazette cluster wrote under its root (members, a spec gazctl applied,
    the allocator's assignments) is read by our KeySpace decoder to the same facts."""
    cluster = gazette_cluster
    journal = "interop/etcd/part-000"
    spec_yaml = tmp_path / "j.yaml"
    spec_yaml.write_text(f"name: {journal}\nreplication: 2\nlabels: [{{name: tier, value: gold}}]\n"
                         f"fragment: {{length: 4096, compression_codec: GZIP, stores: ['{cluster.store}'], "
                         "refresh_interval: 10s}\n")  # fmt: skip
    gazctl_for(gazctl_bin, cluster, str(tmp_path))("journals", "apply", "--specs", str(spec_yaml))
    cluster.wait_for_routes([journal])
    decode = decode_value(cluster.root)
    members, assignments, specs = {}, [], {}
    for key, value in _etcd_range(cluster.etcd_endpoint, cluster.root + "/"):
        decoded = decode(key, value)
        if key.startswith(layout.members_prefix(cluster.root)):
            members[key.rsplit("/", 1)[1]] = decoded
        elif key.startswith(layout.assign_prefix(cluster.root)):
            assignments.append((layout.parse_assignment_key(cluster.root, key), decoded))
        else:
            specs[decoded.name] = decoded
    assert {f"{h.zone}#{h.suffix}": h.endpoint for h in cluster.brokers} == {
        k: m.process_spec.endpoint for k, m in members.items()
    }
    spec = specs[journal]
    assert (spec.replication, spec.labels.value_of("tier"), spec.fragment_length, spec.compression.name) == (
        2,
        "gold",
        4096,
        "GZIP",
    )
    mine = [(k, r) for k, r in assignments if k.item == journal]
    assert len(mine) == 2 and sorted(k.slot for k, _ in mine) == [0, 1]
    for _key, route in mine:  # each assignment's value is the route the primary announced
        assert [m.suffix for m in route.members] == sorted(k.suffix for k, _ in mine)


@pytest.mark.parametrize(
    ("kinds", "leader", "reader", "served"),
    [
        # Ours leads: it never serves the commit; a Gazette replica serves what it committed.
        (
            ["gazette-py", "gazette", "gazette-py", "gazette"],
            "gazette-py",
            "gazette",
            {"leader": b"", "reader": True},
        ),
        # Gazette's leads (its brokers started first, its allocator places the primaries): it serves
        # the commit, and so does our replica, asking its head.
        (
            ["gazette", "gazette-py", "gazette", "gazette-py"],
            "gazette",
            "gazette-py",
            {"leader": True, "reader": True},
        ),
    ],
    ids=["gazette-py-primary", "gazette-primary"],
)
def test_dirty_reads_remain_where_gazette_serves_or_leads(
    gazette_bin, tmp_path, kinds, leader, reader, served
) -> None:
    """docs/semantics.md#no-dirty-reads in a mixed cluster. An append is committed by a journal's
    primary and one replica while the third member is paused (so it is never acknowledged by all),
    and each is read directly (do_not_proxy) meanwhile. Where ours is primary, it serves none of it; a
    Gazette replica serves what it committed. Where Gazette's is primary, it serves it, and so does our
    replica: the Gazette primary's write head, which our replica asks for, is its commit head."""
    names = [f"interop/dirty/part-{i:03d}" for i in range(8)]
    content = b"committed by the primary and one replica, the third paused\n"
    with LocalCluster(
        brokers=len(kinds),
        mode="subprocess",
        broker_kinds=kinds,
        zones=ZONES,
        lease_ttl_s=30,
        data_dir=str(tmp_path / "c"),
        log_level="INFO",
    ) as cluster:  # fmt: skip (a long lease: the paused member keeps it)
        client = cluster.client()
        client.apply_journals([cluster.journal_spec(n, replication=3, compression="none") for n in names])
        cluster.wait_for_routes(names)
        routes = {n: wait_for_full_route(cluster, n) for n in names}
        journal, primary, other, paused = next(
            (
                (n, p, r, next(m for m in members if m not in (p, r)))
                for n, (members, p) in routes.items()
                for r in members
                if kinds[p] == leader and r != p and kinds[r] == reader
            ),
            (None, -1, -1, -1),
        )
        assert journal is not None, f"no journal has a {leader} primary and a {reader} replica: {routes}"

        def read_at(i: int, offset: int) -> bytes:
            with grpc.insecure_channel(grpc_target(cluster.brokers[i].endpoint)) as chan:
                out = b""
                req = pb.ReadRequest(journal=journal, offset=offset, block=False, do_not_proxy=True)
                for resp in pb_grpc.JournalStub(chan).Read(req, timeout=10):
                    out += resp.content
                return out

        def requests():
            yield pb.AppendRequest(journal=journal, do_not_proxy=True)
            yield pb.AppendRequest(content=content)
            yield pb.AppendRequest()

        client.append(journal, b"warm\n")  # the pipeline is built while every member answers
        head = client.read_head(journal)
        chan = grpc.insecure_channel(grpc_target(cluster.brokers[primary].endpoint))
        cluster.pause_broker(paused)
        try:
            pending = pb_grpc.JournalStub(chan).Append.future(requests(), timeout=60)
            seen = {}
            for role, i in (("reader", other), ("leader", primary)):  # those expected to serve it, waited for
                if served[role] is True:
                    seen[role] = wait_for(
                        f"the {kinds[i]} {role} to serve the commit", lambda i=i: read_at(i, head)
                    )
                else:
                    seen[role] = read_at(i, head)
            assert not pending.done(), "the append ended while a member was paused"
        finally:
            cluster.resume_broker(paused)
        assert pending.result(60).status == pb.OK
        chan.close()
        assert seen == {role: content if want is True else want for role, want in served.items()}
