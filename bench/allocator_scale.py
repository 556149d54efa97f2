"""The allocator at scale: Gazette's simulated rolling deploy, run by our allocator and by Gazette's Go
allocator against one etcd in the same run (issue 26, item 5).

The scenario is that of Gazette's allocator/benchmark_test.go, sized by n members (a multiple of 10):
a leader member (item limit 1) that is never rolled, n/2 members of limit 1500 in two zones (three in
five in zone-a) and 200*n items of replication 3. Each time the leader is idle, a driver first marks
every fresh assignment "consistent" (standing in for replicas that have synced); when none is left to
mark it takes one step: n/10 new members of limit 1205 join ("up"), or n/10 old ones are marked
exiting ("down"), alternating, up first or down first, until all n/2 old members are replaced; then
the leader marks itself exiting and the run ends once it holds nothing.

Measured per allocator, size and mode:
* seconds to converge: from the allocator's start to its exit, less the driver's own time (marking and
  stepping, which the allocator waits for: Go runs it as Allocate's TestHook, ours between rounds);
* assignment changes: counted the same way for both from etcd's history between the run's first and
  last revision: assignment keys created (adds), deleted (removes), and deleted-and-recreated at
  another slot in one transaction (moves: promotions and packing), changes = adds + removes + moves.

Gazette's side is bench/allocator-go (its own go.mod requiring go.gazette.dev/core at the version the
interop peers pin), built with `go build` from the Go module proxy on first use. Each run has its own
key space root, so one etcd serves them all.

`python -m bench.allocator_scale [--members 10 100 ...] [--modes up-first down-first] [--ours-only]`
prints a table of both allocators' figures, ours / Gazette's, and how each grows with size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aetcd
from aetcd import rpc
from aetcd.utils import prefix_range_end

from bench.figures import Figure, PeerUnavailable
from gazette.allocator import Allocator
from gazette.allocator.state import AllocatorAdapter
from gazette.keyspace import layout
from gazette.keyspace.etcd import EmbeddedEtcd, connect, txn
from gazette.keyspace.keyspace import KeySpace

HERE = Path(__file__).resolve().parent
GO_MODULE = HERE / "allocator-go"
GO_STEP = (
    "install Go >= 1.25 (e.g. apt-get install golang-go); bench/allocator-go builds from the Go module proxy"
)

ITEMS_PER_MEMBER = 200
ITEM_REPLICATION = 3
OLD_LIMIT = 1500
NEW_LIMIT = 1205  # less than the old members', but just enough
LEADER_LIMIT = 1
CONSISTENT = "consistent"
MODES = ("up-first", "down-first")
BATCH_OPS = 128  # etcd's default --max-txn-ops
IDLE_POLL_S = 0.005
GO_BUILD_TIMEOUT_S = 600.0
# Replaying a run's history takes Python about as long per event as etcd took to apply it: bounded by
# the run's own timeout (at 500 members, a few million events), never less than this.
HISTORY_MIN_TIMEOUT_S = 120.0
HISTORY_MESSAGE_BYTES = 256 << 20
END_SENTINEL = "~bench-end"  # put under the assignments prefix after a run: where the history stops

Log = Callable[[str], None]


class GoUnavailable(PeerUnavailable):
    """Go is not installed, or Gazette's allocator harness would not build; the message says why."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Which sizes (members; items are 200 per member) and modes to run, each run's bound, and the
    largest size ours runs at (above it only Gazette's runs: ours would take too long)."""

    name: str
    members: tuple[int, ...]
    modes: tuple[str, ...] = MODES
    timeout_s: float = 900.0
    items_per_member: int = ITEMS_PER_MEMBER  # Gazette's 200; fewer only for smoke tests
    ours_max_members: int | None = None  # None: ours runs at every size

    def __post_init__(self) -> None:
        bad = [n for n in self.members if n <= 0 or n % 10]
        if bad or not self.members:
            raise ValueError(
                f"members must be positive multiples of 10 (the deploy cycles n/10 at a time), not {bad or '()'}"
            )
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ValueError(f"modes must be among {', '.join(MODES)}, not {unknown or '()'}")
        if self.items_per_member <= 0:
            raise ValueError(f"items per member must be positive, not {self.items_per_member}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout must be positive, not {self.timeout_s}")

    def ours_runs_at(self, members: int) -> bool:
        return self.ours_max_members is None or members <= self.ours_max_members


# Our allocator solves with networkx's network simplex in pure Python, in networks of 100 items: a
# deploy at 10 members (2,000 items) takes it about 15 s where Gazette's takes 4, at 100 members about
# 5 minutes where Gazette's takes 20 s (see README). The suite runs 10 members; `python -m
# bench.allocator_scale --members 100 500` runs larger sizes. --quick skips this part.
FULL = Settings("full", members=(10,))


@dataclasses.dataclass
class Run:
    """One allocator's run of the scenario at one size and mode."""

    allocator: str  # "ours" or "gazette"
    members: int
    items: int
    mode: str
    seconds: float  # to converge: the allocator's whole run less the driver's time
    driver_seconds: float
    steps: int
    start_revision: int
    end_revision: int
    adds: int = 0
    removes: int = 0
    moves: int = 0

    @property
    def changes(self) -> int:
        return self.adds + self.removes + self.moves


# ---- the scenario, shared by the driver of ours (Go's harness has its own copy of these rules)


def member_id(i: int) -> tuple[str, str]:
    """The i-th rolled member: three in five in zone-a (the larger zone), the rest in zone-b."""
    return ("zone-a" if i % 5 in (0, 2, 4) else "zone-b", f"m{i:05d}")


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode(root: str) -> Callable[[str, bytes], Any]:
    """The KeySpace decoder: members and items are JSON ({"R": limit or replication, "E": exiting});
    an assignment's value is its text ("" until marked "consistent")."""
    assign = layout.assign_prefix(root)

    def decode_value(key: str, value: bytes) -> Any:
        if key.startswith(assign):
            return value.decode()
        decoded = json.loads(value)
        if not isinstance(decoded, dict) or not isinstance(decoded.get("R"), int):
            raise ValueError(f'expected {{"R": <int>, ...}}, got {value!r}')
        return decoded

    return decode_value


ADAPTER = AllocatorAdapter(
    item_replication=lambda v: v["R"],
    member_limit=lambda v: v["R"],
    member_exiting=lambda v: bool(v.get("E")),
    is_consistent=lambda _item, a, _all: a.value == CONSISTENT,
)


async def _put_guarded(client: aetcd.Client, puts: Sequence[tuple[str, bytes, rpc.Compare]]) -> int:
    """Puts in transactions of at most BATCH_OPS, each guarded by its compares; how many succeeded."""
    applied = 0
    for start in range(0, len(puts), BATCH_OPS):
        batch = puts[start : start + BATCH_OPS]
        request = rpc.TxnRequest(
            compare=[c for _, _, c in batch],
            success=[rpc.RequestOp(request_put=rpc.PutRequest(key=k.encode(), value=v)) for k, v, _ in batch],
        )
        applied += bool((await txn(client, request)).succeeded)
    return applied


async def _revisions(client: aetcd.Client, key: str) -> tuple[int, int]:
    """`key`'s ModRevision (0 when absent) and etcd's current revision."""
    await client.connect()
    resp = await client.kvstub.Range(rpc.RangeRequest(key=key.encode()), timeout=10, metadata=client.metadata)
    return (resp.kvs[0].mod_revision if resp.kvs else 0), resp.header.revision


def _version_is(key: str, result: Any, version: int) -> rpc.Compare:
    return rpc.Compare(key=key.encode(), result=result, target=rpc.Compare.VERSION, version=version)


def _absent(key: str) -> rpc.Compare:
    return _version_is(key, rpc.Compare.EQUAL, 0)


def _present(key: str) -> rpc.Compare:
    return _version_is(key, rpc.Compare.GREATER, 0)


class Driver:
    """The scenario's steps for one run of ours: what Gazette's benchmark does in Allocate's TestHook."""

    def __init__(self, client: aetcd.Client, root: str, members: int, items: int, down_first: bool) -> None:
        self.client, self.root = client, root
        self.block, self.half = members // 10, members // 2
        self.items = items
        self.down_first = down_first
        self.next_block, self.next_down = 0, down_first
        self.leaving = False
        self.steps = 0
        self.seconds = 0.0
        self.leader_key = layout.member_key(root, "zone-a", "leader")

    def _member_key(self, i: int) -> str:
        return layout.member_key(self.root, *member_id(i))

    async def populate(self) -> int:
        """Writes the leader, the old members and the items; the revision of the leader's key."""
        await _put_guarded(
            self.client, [(self.leader_key, _json({"R": LEADER_LIMIT}), _absent(self.leader_key))]
        )
        leader_revision, _ = await _revisions(self.client, self.leader_key)
        puts = [(k, _json({"R": OLD_LIMIT}), _absent(k)) for k in map(self._member_key, range(self.half))]
        items = (layout.item_key(self.root, f"i{i:05d}") for i in range(self.items))
        puts += [(k, _json({"R": ITEM_REPLICATION}), _absent(k)) for k in items]
        await _put_guarded(self.client, puts)
        return leader_revision

    async def on_idle(self, ks: KeySpace) -> None:
        """Marks fresh assignments consistent; if there were none, takes the next step of the deploy."""
        began = time.monotonic()
        try:
            fresh = [kv for kv in ks.prefixed(layout.assign_prefix(self.root)) if kv.decoded == ""]
            marks = [
                (
                    kv.key,
                    CONSISTENT.encode(),
                    rpc.Compare(
                        key=kv.key.encode(),
                        result=rpc.Compare.EQUAL,
                        target=rpc.Compare.MOD,
                        mod_revision=kv.mod_revision,
                    ),
                )
                for kv in fresh
            ]
            if await _put_guarded(self.client, marks) or self.leaving:
                return
            begin, end = self.block * self.next_block, self.block * (self.next_block + 1)
            if begin == self.half:  # every old member is replaced: the leader leaves
                self.leaving = True
                step = [(self.leader_key, _json({"R": LEADER_LIMIT, "E": True}), _present(self.leader_key))]
            elif self.next_down:
                keys = map(self._member_key, range(begin, end))
                step = [(k, _json({"R": OLD_LIMIT, "E": True}), _present(k)) for k in keys]
            else:
                keys = map(self._member_key, range(self.half + begin, self.half + end))
                step = [(k, _json({"R": NEW_LIMIT}), _absent(k)) for k in keys]
            await _put_guarded(self.client, step)
            self.steps += 1
            if not self.leaving:
                self.next_down = not self.next_down
                if self.next_down == self.down_first:
                    self.next_block += 1
        finally:
            self.seconds += time.monotonic() - began


async def run_ours(
    endpoint: str,
    root: str,
    members: int,
    mode: str,
    timeout_s: float,
    items_per_member: int = ITEMS_PER_MEMBER,
) -> Run:
    """Our allocator (one leader, as Gazette's benchmark runs one Allocate) through the scenario."""
    client = connect(endpoint)
    driver = Driver(client, root, members, items_per_member * members, mode == "down-first")
    ks: KeySpace | None = None
    alloc: Allocator | None = None
    try:
        leader_revision = await driver.populate()
        ks = KeySpace(client, root, decode(root))
        await ks.load()
        start_revision = ks.revision
        began = time.monotonic()
        await ks.start()
        alloc = Allocator(client, ks, driver.leader_key, ADAPTER, min_revision=leader_revision)
        alloc.start()
        exited = asyncio.ensure_future(alloc.wait_exited())
        try:
            async with asyncio.timeout(timeout_s):
                while not exited.done():
                    # Idle: the leader found nothing to do at the revision the KeySpace still shows.
                    if alloc.idle_revision and alloc.idle_revision >= ks.revision:
                        await driver.on_idle(ks)
                        with contextlib.suppress(TimeoutError):
                            await ks.wait_for_revision(ks.revision + 1, timeout=IDLE_POLL_S * 20)
                        continue
                    await asyncio.wait({exited}, timeout=IDLE_POLL_S)
        except TimeoutError:
            raise TimeoutError(
                f"our allocator did not finish {members} members {mode} within {timeout_s:.0f} s "
                f"(after {driver.steps} steps)"
            ) from None
        finally:
            exited.cancel()
        exited.result()
        elapsed = time.monotonic() - began
        _, end = await _revisions(client, driver.leader_key)
        return Run(
            "ours", members, driver.items, mode, elapsed - driver.seconds, driver.seconds, driver.steps,
            start_revision, end,
        )  # fmt: skip
    finally:
        if alloc is not None:
            await alloc.stop()
        if ks is not None:
            await ks.stop()
        await client.close()


# ---- Gazette's side


def gazette_version() -> str | None:
    """The go.gazette.dev/core version bench/allocator-go requires ("v0.103.0"), from its go.mod."""
    for line in (GO_MODULE / "go.mod").read_text().splitlines():
        fields = line.split()
        if fields[:2] == ["require", "go.gazette.dev/core"] or fields[:1] == ["go.gazette.dev/core"]:
            return fields[-1]
    return None


def build_gazette_harness(out_dir: Path, log: Log = lambda _: None) -> Path:
    """Builds bench/allocator-go into `out_dir`; GoUnavailable when Go is missing or it fails."""
    go = shutil.which("go")
    if go is None:
        raise GoUnavailable(f"Go is not installed, so Gazette's allocator cannot run: {GO_STEP}")
    binary = out_dir / "allocbench"
    log(f"building Gazette's allocator harness ({GO_MODULE.relative_to(HERE.parent)})")
    env = os.environ | {"GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    try:
        done = subprocess.run(
            [go, "build", "-o", str(binary), "."],
            cwd=GO_MODULE, env=env, capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise GoUnavailable(f"building bench/allocator-go took over {GO_BUILD_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise GoUnavailable(f"building bench/allocator-go failed: {done.stderr.strip()[-2000:]}")
    return binary


def run_gazette(
    binary: Path,
    endpoint: str,
    root: str,
    members: int,
    mode: str,
    timeout_s: float,
    items_per_member: int = ITEMS_PER_MEMBER,
) -> Run:
    """Gazette's allocator through the scenario (the harness prints one JSON line)."""
    argv = [
        str(binary),
        "-etcd",
        endpoint,
        "-root",
        root,
        "-members",
        str(members),
        "-items-per-member",
        str(items_per_member),
        f"-timeout={timeout_s:.0f}s",
    ]
    if mode == "down-first":
        argv.append("-down-first")
    with tempfile.TemporaryFile() as stderr:  # Gazette logs every solve: kept off our pipes
        try:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=stderr, timeout=timeout_s + 30, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(
                f"Gazette's allocator did not finish {members} members {mode} in {timeout_s:.0f} s"
            ) from exc
        if done.returncode != 0:
            stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - 2000))
            raise RuntimeError(
                f"Gazette's allocator harness failed ({done.returncode}): {stderr.read().decode(errors='replace')}"
            )
    out = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return Run(
        "gazette", members, out["items"], mode, out["seconds"] - out["driver_seconds"], out["driver_seconds"], out["steps"],
        out["start_revision"], out["end_revision"],
    )  # fmt: skip


# ---- counting changes from etcd's history


async def count_changes(endpoint: str, root: str, run: Run, timeout_s: float = HISTORY_MIN_TIMEOUT_S) -> Run:
    """Fills run's adds, removes and moves from etcd's history of `root`'s assignment keys after its
    start revision (a sentinel put marks where that history ends)."""
    prefix = layout.assign_prefix(root)
    sentinel = prefix + END_SENTINEL
    where = urlsplit(endpoint)
    # etcd replays a large transaction's events in one watch response: past gRPC's default 4 MiB.
    options = {"grpc.max_receive_message_length": HISTORY_MESSAGE_BYTES, "grpc.enable_http_proxy": 0}
    client = aetcd.Client(host=where.hostname or "127.0.0.1", port=where.port or 2379, options=options)
    try:
        await client.connect()
        request = rpc.TxnRequest(success=[rpc.RequestOp(request_put=rpc.PutRequest(key=sentinel.encode()))])
        end = (await txn(client, request)).header.revision
        call = rpc.WatchStub(client.channel).Watch(metadata=client.metadata)
        by_revision: dict[int, tuple[list[tuple[str, ...]], list[tuple[str, ...]]]] = {}
        async with asyncio.timeout(max(timeout_s, HISTORY_MIN_TIMEOUT_S)):
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=prefix.encode(), range_end=prefix_range_end(prefix.encode()),
                        start_revision=run.start_revision + 1,
                    )
                )
            )  # fmt: skip
            done = False
            while not done:
                resp = await call.read()
                if resp is None or resp.canceled or resp.compact_revision:
                    raise RuntimeError(f"etcd's history of {prefix} is not available: {resp}")
                for event in resp.events:
                    key = event.kv.key.decode()
                    if event.kv.mod_revision >= end:
                        done = True
                        break
                    if key == sentinel:
                        continue
                    item, zone, suffix, _slot = key[len(prefix) :].split(layout.SEP)
                    creates, deletes = by_revision.setdefault(event.kv.mod_revision, ([], []))
                    if event.type == rpc.Event.DELETE:
                        deletes.append((item, zone, suffix))
                    elif event.kv.version == 1:
                        creates.append((item, zone, suffix))
        call.cancel()
        adds = removes = moves = 0
        for creates, deletes in by_revision.values():
            moved = len(set(creates) & set(deletes))
            moves += moved
            adds += len(creates) - moved
            removes += len(deletes) - moved
        return dataclasses.replace(run, adds=adds, removes=removes, moves=moves)
    finally:
        await client.close()


# ---- one measurement over sizes and modes


def measure(settings: Settings, log: Log, *, gazette: bool = True, ours: bool = True) -> list[Run]:
    """Every size and mode of `settings`, ours then Gazette's for each, against one embedded etcd.
    GoUnavailable (before anything runs) when Gazette's side is asked for but cannot be built."""
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="allocbench-") as tmp:
        binary = build_gazette_harness(Path(tmp), log) if gazette else None
        with EmbeddedEtcd(fsync=False) as etcd:
            _measure_all(settings, etcd.endpoint, binary, ours, runs, log)
    return runs


def _measure_all(
    settings: Settings, endpoint: str, binary: Path | None, ours: bool, runs: list[Run], log: Log
) -> None:
    """Appends to `runs` each size and mode, ours then Gazette's (if `binary`)."""
    for members in settings.members:
        for mode in settings.modes:
            if ours and settings.ours_runs_at(members):
                runs.append(_measure_one(endpoint, None, members, mode, settings, log))
            if binary is not None:
                runs.append(_measure_one(endpoint, binary, members, mode, settings, log))


def _measure_one(
    endpoint: str, binary: Path | None, members: int, mode: str, settings: Settings, log: Log
) -> Run:
    """One run, ours (`binary` None) or Gazette's, in a root of its own; its changes counted."""
    side = "ours" if binary is None else "gazette"
    root = f"/bench/alloc/{side}-{members}-{mode}"
    per_member, timeout_s = settings.items_per_member, settings.timeout_s
    log(f"allocator scale: {side}, {members} members, {per_member * members} items, {mode}")
    if binary is None:
        run = asyncio.run(run_ours(endpoint, root, members, mode, timeout_s, per_member))
    else:
        run = run_gazette(binary, endpoint, root, members, mode, timeout_s, per_member)
    run = asyncio.run(count_changes(endpoint, root, run, timeout_s))
    log(
        f"  {run.seconds:.2f} s to converge (+{run.driver_seconds:.2f} s driving), {run.changes} changes "
        f"({run.adds} adds, {run.removes} removes, {run.moves} moves), {run.steps} steps"
    )
    return run


# ---- figures for python -m bench


def _key(kind: str, members: int, mode: str, gazette: bool = False) -> str:
    return f"{'gz_' if gazette else ''}alloc_{kind}_{members}_{mode.split('-')[0]}"


def scale_figures(settings: Settings) -> dict[str, Figure]:
    """Ours and Gazette's figures, per size and mode, in table order (ours first, its peer after)."""
    figures = []
    for members in settings.members:
        for mode in settings.modes:
            what = f"{members} members, {settings.items_per_member * members} items, {mode} deploy"
            for kind, name, unit in (
                ("s", "time to converge", "s"),
                ("changes", "assignment changes", "changes"),
            ):
                # Gazette's figure is also our limit: ratio and peer ratio are both Gazette's / ours.
                gz = _key(kind, members, mode, True)
                figures.append(
                    Figure(_key(kind, members, mode), f"Allocator {name}, {what}", unit, False, gz)
                )
                figures.append(
                    Figure(
                        _key(kind, members, mode, True),
                        f"Peer: Gazette allocator {name}, {what}",
                        unit,
                        False,
                    )
                )
    return {f.key: f for f in figures}


def peer_of(settings: Settings) -> dict[str, str]:
    """Our figure keys -> Gazette's doing the same run."""
    return {k: f"gz_{k}" for k in scale_figures(settings) if not k.startswith("gz_")}


def peer_keys(settings: Settings) -> list[str]:
    return [k for k in scale_figures(settings) if k.startswith("gz_")]


def figures_of(settings: Settings, runs: Iterable[Run]) -> dict[str, Figure]:
    figures = scale_figures(settings)
    for run in runs:
        gz = run.allocator == "gazette"
        figures[_key("s", run.members, run.mode, gz)].samples.append(run.seconds)
        figures[_key("changes", run.members, run.mode, gz)].samples.append(float(run.changes))
    return figures


def run_part(settings: Settings, log: Log) -> dict[str, Figure]:
    return figures_of(settings, measure(settings, log))


# ---- the command line


def growth(runs: Sequence[Run], allocator: str, mode: str, attr: str) -> list[str]:
    """Per consecutive size measured: how `attr` grew, as "x<factor> for x<size factor>"."""
    mine = sorted((r for r in runs if r.allocator == allocator and r.mode == mode), key=lambda r: r.members)
    out = []
    for a, b in zip(mine, mine[1:], strict=False):
        va, vb = getattr(a, attr), getattr(b, attr)
        out.append(f"{a.members}->{b.members}: x{vb / va:.1f}" if va else f"{a.members}->{b.members}: -")
    return out


def _ratio(ours: Run | None, gz: Run | None, attr: str) -> str:
    if ours is None or gz is None or not getattr(gz, attr):
        return "-"
    return f"{getattr(ours, attr) / getattr(gz, attr):.2f}"


def _cell(run: Run | None, attr: str, fmt: str) -> str:
    return "-".rjust(len(format(0, fmt))) if run is None else format(getattr(run, attr), fmt)


def table(runs: Sequence[Run], settings: Settings | None = None) -> str:
    """Both allocators side by side per size and mode, with ours / Gazette's; a size ours skipped
    (over `settings.ours_max_members`) says so in its row."""
    lines = [
        f"{'members':>7} {'items':>7} {'mode':<10} {'ours s':>9} {'Gazette s':>9} {'ours/Gz':>7} "
        f"{'ours chg':>9} {'Gazette chg':>11} {'ours/Gz':>7}"
    ]
    by = {(r.allocator, r.members, r.mode): r for r in runs}
    sizes = sorted({(r.members, r.items, r.mode) for r in runs}, key=lambda s: (s[0], MODES.index(s[2])))
    for members, items, mode in sizes:
        ours, gz = by.get(("ours", members, mode)), by.get(("gazette", members, mode))
        note = ""
        if ours is None and settings is not None and not settings.ours_runs_at(members):
            note = f"  ours not run: over --ours-max {settings.ours_max_members} members"
        lines.append(
            f"{members:>7} {items:>7} {mode:<10} {_cell(ours, 'seconds', '9.2f')} "
            f"{_cell(gz, 'seconds', '9.2f')} {_ratio(ours, gz, 'seconds'):>7} {_cell(ours, 'changes', '9d')} "
            f"{_cell(gz, 'changes', '11d')} {_ratio(ours, gz, 'changes'):>7}{note}"
        )
    for allocator in ("ours", "gazette"):
        for mode in MODES:
            for attr, what in (("seconds", "time"), ("changes", "changes")):
                g = growth(runs, allocator, mode, attr)
                if g:
                    lines.append(f"growth of {allocator} {what}, {mode}: {', '.join(g)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.allocator_scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--members", type=int, nargs="+", default=list(FULL.members), help="sizes (multiples of 10)"
    )
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--timeout", type=float, default=FULL.timeout_s, help="seconds each run may take")
    parser.add_argument(
        "--ours-max", type=int, help="run ours only up to this many members (Gazette's at every size)"
    )
    parser.add_argument("--ours-only", action="store_true", help="skip Gazette's allocator (no Go needed)")
    parser.add_argument("--gazette-only", action="store_true", help="skip ours")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON lines instead of a table")
    args = parser.parse_args(argv)
    try:
        settings = Settings(
            "cli",
            tuple(args.members),
            tuple(args.modes),
            timeout_s=args.timeout,
            ours_max_members=args.ours_max,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.ours_only and args.gazette_only:
        parser.error("--ours-only and --gazette-only leave nothing to run")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    load = os.getloadavg()[0]
    runs = measure(settings, log, gazette=not args.ours_only, ours=not args.gazette_only)
    if args.json:
        for run in runs:
            print(json.dumps(dataclasses.asdict(run) | {"changes": run.changes}))
        return
    print(f"allocator scale (load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)")
    print(table(runs, settings))


if __name__ == "__main__":
    main()
