"""Cluster-side helpers of the fault suite: waits on conditions with deadlines, routes as a live
broker lists them (a paused broker is never asked), R=3 journals, and what a broker has spooled.

Every List carries a deadline, so a SIGSTOPped broker cannot hang a test; routes are read through
the brokers, as clients see them, not from etcd.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable

import grpc

from gazette import testing
from gazette.keyspace import layout
from gazette.local.cluster import LocalCluster
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import broker_pb2_grpc as pb_grpc
from gazette.protocol.endpoints import grpc_target
from gazette.protocol.selector import LabelSelector

LEASE_TTL_S = 5
ZONES = ("zone-a", "zone-b")
DEADLINE_S = 60.0
REPLICATION = 3
LIST_TIMEOUT_S = 5.0


def wait_for(what: str, check: Callable[[], object], timeout: float = DEADLINE_S, poll: float = 0.05):
    """gazette.testing.wait_for with the fault suite's longer bound (DEADLINE_S): clusters recover
    from faults within their lease TTLs, several times over."""
    return testing.wait_for(what, check, timeout, poll)


def say(report: list[str], line: str) -> None:
    """Adds a line to a test's report and prints it at once (soak rounds show progress as they go)."""
    report.append(line)
    print(line, flush=True)


def running_endpoints(cluster: LocalCluster, paused: set[int] | None = None) -> Callable[[], list[str]]:
    """The endpoints of the cluster's running brokers, less those in `paused` (a set the test
    updates as it pauses and resumes brokers); all of them when none is left."""

    def endpoints() -> list[str]:
        live = [h.endpoint for h in cluster.brokers if h.running and h.index not in (paused or ())]
        return live or [h.endpoint for h in cluster.brokers]

    return endpoints


def create_journal(cluster: LocalCluster, name: str, replication: int = REPLICATION) -> None:
    """An R=3 journal whose fragments roll every 256 KiB (so persisting runs under the faults) and
    whose index refreshes every second (so a persisted fragment is soon readable everywhere)."""
    cluster.client().apply_journals(
        [
            cluster.journal_spec(
                name,
                replication=replication,
                fragment_length=256 * 1024,
                compression="none",
                refresh_interval="1s",
            )
        ]
    )
    wait_for_full_route(cluster, name)


_channels: dict[str, grpc.Channel] = {}


def _list(endpoint: str, journal: str) -> pb.Route | None:
    ch = _channels.get(endpoint)
    if ch is None:
        ch = _channels[endpoint] = grpc.insecure_channel(grpc_target(endpoint))
    req = pb.ListRequest(selector=LabelSelector.parse(f"name={journal}").to_proto())
    for resp in pb_grpc.JournalStub(ch).List(req, timeout=LIST_TIMEOUT_S):
        for j in resp.journals:
            if j.spec.name == journal:
                return j.route
    return None


def route_of(cluster: LocalCluster, journal: str, paused: set[int] | None = None) -> tuple[list[int], int]:
    """(broker indices of the journal's route members, index of its primary or -1), as a running,
    unpaused broker lists it (each List has a deadline: a paused broker never answers)."""
    errors = []
    for h in cluster.brokers:
        if not h.running or h.index in (paused or ()):
            continue
        try:
            route = _list(h.endpoint, journal)
        except grpc.RpcError as exc:
            errors.append(f"{h.suffix}: {exc.code().name}")
            continue
        if route is None:
            raise AssertionError(f"{h.suffix} lists no journal {journal}")
        by_suffix = {b.suffix: b.index for b in cluster.brokers}
        members = [by_suffix[m.suffix] for m in route.members]
        return members, members[route.primary] if route.primary >= 0 else -1
    raise AssertionError(f"no broker listed {journal}: {errors}")


def wait_for_full_route(
    cluster: LocalCluster, journal: str, paused: set[int] | None = None, deadline_s: float = DEADLINE_S
) -> tuple[list[int], int]:
    """Waits until the journal has a primary and REPLICATION members, none of them paused."""

    def full():
        members, primary = route_of(cluster, journal, paused)
        ok = primary >= 0 and len(members) == REPLICATION and not set(members) & (paused or set())
        return (members, primary) if ok else None

    return wait_for(f"a full route of {journal}", full, deadline_s)


def route_consistent(cluster: LocalCluster, journal: str) -> bool:
    """Whether every assignment of the journal holds the route its assignment keys make (reference
    12, item 2: the primary advertised the synced route), read from etcd's JSON gateway."""
    prefix = layout.item_assign_prefix(cluster.root, journal)
    raw = prefix.encode()
    body = json.dumps(
        {
            "key": base64.b64encode(raw).decode(),
            "range_end": base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode(),
        }
    )
    request = urllib.request.Request(
        f"{cluster.etcd_endpoint}/v3/kv/range", data=body.encode(), method="POST"
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as resp:
        kvs = json.loads(resp.read()).get("kvs", [])
    if not kvs:
        return False
    keys = [layout.parse_assignment_key(cluster.root, base64.b64decode(kv["key"]).decode()) for kv in kvs]
    members = [(k.zone, k.suffix) for k in keys]
    primary = next((i for i, k in enumerate(keys) if k.slot == 0), -1)
    for kv in kvs:
        route = pb.Route.FromString(base64.b64decode(kv.get("value", "")))
        if [(m.zone, m.suffix) for m in route.members] != members or route.primary != primary:
            return False
    return True


TASK_DUMP_MARK = "asyncio tasks"  # the header line gazette.tasks.dump_tasks writes
TASK_DUMP_LINES = 400


def log_tails(cluster: LocalCluster, lines: int = 40) -> str:
    """The end of each broker's log, then what each running broker's tasks wait on (SIGUSR2 asks
    it to write them to its log): the report of a failed fault test."""
    asked = {}
    for h in cluster.brokers:
        if (
            h.pid is not None
            and h.running
            and h.kind != "gazette"
            and h.log_path
            and os.path.exists(h.log_path)
        ):
            asked[h.index] = os.path.getsize(h.log_path)
            os.kill(h.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 5.0
    out = []
    for h in cluster.brokers:
        if not (h.log_path and os.path.exists(h.log_path)):
            continue
        text = ""
        while True:
            with open(h.log_path, errors="replace") as f:
                text = f.read()
            if (
                h.index not in asked
                or TASK_DUMP_MARK in text[asked[h.index] :]
                or time.monotonic() > deadline
            ):
                break
            time.sleep(0.1)  # a diagnostic on the failure path: the broker writes its dump soon
        logged, dump = (text[: asked[h.index]], text[asked[h.index] :]) if h.index in asked else (text, "")
        out.append(f"--- {h.suffix} ({h.log_path})\n" + "\n".join(logged.splitlines()[-lines:]))
        if dump:
            out.append(f"--- {h.suffix} tasks\n" + "\n".join(dump.splitlines()[:TASK_DUMP_LINES]))
    return "\n".join(out)


def spool_file_sizes(pid: int) -> list[int]:
    """Sizes of the (unlinked) spool files process `pid` holds open: how much a replica has spooled."""
    sizes = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if "gazette-spool-" in os.readlink(f"{fd_dir}/{fd}"):
                sizes.append(os.stat(f"{fd_dir}/{fd}").st_size)
        except OSError:
            continue  # closed meanwhile
    return sizes
