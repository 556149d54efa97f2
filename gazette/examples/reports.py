"""Batch reports: a consumer whose transactions each write a report blob and publish its address.

The document's PDF example (issue 18), exactly once. Events `{"n": i}` are published to
`examples/reports/events`; each transaction of shard `reports-000` writes a JSON report of the events
it consumed (their numbers, their sum, and when it was made: two attempts at one batch never write the
same bytes) as a side effect at `reports/<shard>/<id>.json` of the reports store, and publishes
`{"shard", "events", "report": {kind, url, store, path, sha1, size}}` to `examples/reports/index`.
Its SQLStore (or, with a recovery log, JSONFileStore) counts reports and events. `verify` reads the
index read-committed, fetches every report, checks its SHA-1 and that each event is in exactly one
committed report; `leftovers` lists what the reports store holds beyond them.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from gazette.client.sync import Client
from gazette.consumer import (
    Application,
    ConsumerGroup,
    JSONFileStore,
    Shard,
    ShardSpec,
    SideEffectRecord,
    SideEffects,
    SQLStore,
    read_side_effect,
)
from gazette.consumer.side_effects import PENDING_PREFIX, PHASES
from gazette.consumer.store import Store
from gazette.fragment.stores import get_store
from gazette.message import Envelope, Publisher, ReadCommitted
from gazette.protocol.spec import JournalSpec
from gazette.protocol.validate import CONTENT_TYPE_RECOVERY_LOG

log = logging.getLogger(__name__)

EVENTS_JOURNAL = "examples/reports/events"
INDEX_JOURNAL = "examples/reports/index"
RECOVERY_PREFIX = "examples/reports/recovery"
SHARD_ID = "reports-000"
REPORT_PATH = "reports/{shard}/{id}.json"  # {id} makes it unique per attempt (required)
REPORTS_PREFIX = "reports/"
JSON_LABELS = {"content-type": "application/x-ndjson"}
# A test hook, read by `stop_at_phase` in the consumer's process: "<phase>:<flag file>", or
# "@<control file>" whose content, read at each phase, is that (`stop_next_at` writes it).
STOP_AT_ENV = "GAZETTE_EXAMPLE_REPORTS_STOP_AT"


def journals(store: str | None = None, recovery_logs: bool = False) -> list[JournalSpec]:
    """The events and index journals (and the recovery log when `recovery_logs`), persisted to `store`."""
    stores = [store] if store else []
    specs = [JournalSpec(name=j, labels=JSON_LABELS, stores=stores) for j in (EVENTS_JOURNAL, INDEX_JOURNAL)]
    if recovery_logs:
        labels = {"content-type": CONTENT_TYPE_RECOVERY_LOG}
        specs.append(JournalSpec(name=f"{RECOVERY_PREFIX}/{SHARD_ID}", labels=labels, stores=stores))
    return specs


def shard(max_txn_duration: str = "200ms", hot_standbys: int = 0, hint_prefix: str = "") -> ShardSpec:
    """The one shard; with a `hint_prefix` (an etcd path) it records to a recovery log (JSONFileStore)."""
    return ShardSpec(
        SHARD_ID, [EVENTS_JOURNAL], max_txn_duration=max_txn_duration, hot_standbys=hot_standbys,
        recovery_log_prefix=RECOVERY_PREFIX if hint_prefix else "", hint_prefix=hint_prefix,
    )  # fmt: skip


def stop_at_phase(phase: str, records: Sequence[SideEffectRecord]) -> None:
    """Logs each phase (INFO), and is a test hook: when STOP_AT_ENV is "<phase>:<flag file>", the first
    process to reach `phase` creates the flag file holding its pid and stops itself (SIGSTOP) for the
    test to kill; later ones go on. When it is "@<control file>", that file (absent: no stop) holds
    "<phase>:<flag file>", so a running test chooses where the next process stops (`stop_next_at`).
    Only for consumers in processes of their own."""
    log.info("side-effect phase %s: %s", phase, [r.id for r in records])
    setting = os.environ.get(STOP_AT_ENV, "")
    if setting.startswith("@"):
        try:
            with open(setting[1:]) as f:
                setting = f.read().strip()
        except FileNotFoundError:
            return
    want, _, flag = setting.partition(":")
    if phase != want or not flag:
        return
    try:
        fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    log.warning("TEST HOOK: stopping at side-effect phase %s (%s)", phase, [r.id for r in records])
    # Directed at this thread, the stop takes it before kill() returns: sent to the process, another
    # thread may take the signal and this one run on (up to a scheduler tick, longer under load) past
    # the phase, e.g. into the transaction's first SQL write, holding sqlite's write lock while stopped.
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def stop_next_at(control: str, phase: str, flag: str) -> str:
    """Arms the "@<control file>" form of STOP_AT_ENV: the next consumer process to reach `phase`
    stops itself there and writes its pid to `flag` (which must not exist yet). Returns `flag`."""
    if phase not in PHASES:
        raise ValueError(f"side-effect phase {phase!r} is not one of {PHASES}")
    tmp = f"{control}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{phase}:{flag}\n")
    os.replace(tmp, control)  # a process reading it sees the old setting or the new one, whole
    return flag


def stopped_pid(flag: str, timeout: float = 90.0) -> int:
    """The pid a process stopped by `stop_at_phase` wrote to `flag`, once it is stopped (Linux)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(flag) as f:
                pid = int(f.read().strip() or 0)
            if pid:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                        return pid
        except (FileNotFoundError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no consumer process stopped itself ({flag}) within {timeout:.0f} s")
        time.sleep(0.02)


class ReportStore(SQLStore):
    """The shard's sqlite database with `report_totals(shard, reports, events)`."""

    def __init__(self, shard: Shard, url: str, side_effects: SideEffects) -> None:
        super().__init__(shard, url, side_effects=side_effects)
        self.setup_schema(
            "CREATE TABLE IF NOT EXISTS report_totals "
            "(shard TEXT PRIMARY KEY NOT NULL, reports INTEGER NOT NULL, events INTEGER NOT NULL)"
        )


class BatchReports(Application):
    """Writes one report per transaction to `reports_store` (a file:// or s3:// URL) as a side
    effect, and indexes it in `output`. State in `<db_dir>/<shard>.db`, or a JSONFileStore when the
    shard has a recovery log. `cleanup_interval_s` is how often fenced-out attempts' staged reports
    are looked for."""

    def __init__(
        self,
        reports_store: str,
        db_dir: str = "",
        output: str = INDEX_JOURNAL,
        cleanup_interval_s: float = 60.0,
    ) -> None:
        self.reports_store = reports_store
        self.db_dir = db_dir
        self.output = output
        self.cleanup_interval_s = cleanup_interval_s
        self._batches: dict[str, list[int]] = {}  # shard id -> the open transaction's events

    def new_store(self, shard: Shard, recorder: Any) -> Store:
        effects = SideEffects(
            [self.reports_store], cleanup_interval_s=self.cleanup_interval_s, on_phase=stop_at_phase
        )
        if recorder is not None:
            return JSONFileStore(recorder, {"reports": 0, "events": 0}, side_effects=effects)
        db = os.path.join(self.db_dir, shard.id.replace("/", "_") + ".db")
        return ReportStore(shard, db, effects)

    def begin_txn(self, shard: Shard, store: Store) -> None:
        self._batches[shard.id] = []

    def consume_message(self, shard: Shard, store: Store, env: Envelope, pub: Publisher) -> None:
        if not env.is_ack:
            self._batches[shard.id].append(int(env.message["n"]))

    def finalize_txn(self, shard: Shard, store: Store, pub: Publisher) -> None:
        batch = self._batches.pop(shard.id, [])
        if not batch:
            return
        assert store.side_effects is not None
        # Register first (the location is unique to this attempt), then prepare (staged, invisible),
        # then refer to it: the message commits with the registration, and the report is published
        # before the message's ACK.
        effect = store.side_effects.register("report", REPORT_PATH)
        report = {
            "shard": shard.id,
            "id": effect.id,
            "events": batch,
            "sum": sum(batch),
            "made_at": time.time(),
        }
        effect.prepare(orjson.dumps(report))
        pub.publish_uncommitted(
            self.output, {"shard": shard.id, "events": len(batch), "report": effect.reference()}
        )
        if isinstance(store, JSONFileStore):
            store.state["reports"] += 1
            store.state["events"] += len(batch)
        else:
            assert isinstance(store, SQLStore)
            store.execute(
                "INSERT INTO report_totals (shard, reports, events) VALUES (?, 1, ?) ON CONFLICT (shard) DO UPDATE "
                "SET reports = report_totals.reports + 1, events = report_totals.events + excluded.events",
                (shard.id, len(batch)),
            )


def publish_events(client: Client, numbers: Iterable[int]) -> int:
    """Publishes `{"n": i}` committed for each number; returns the events journal's head."""
    pub = Publisher(client)
    try:
        for n in numbers:
            pub.publish_committed(EVENTS_JOURNAL, {"n": n})
        pub.flush()
    finally:
        pub.close()
    return client.read_head(EVENTS_JOURNAL)


def read_index(client: Client) -> list[dict[str, Any]]:
    """Every committed index message, in order (non-blocking)."""
    return [dict(e.message) for e in ReadCommitted(client, INDEX_JOURNAL, skip_acks=True)]


class VerificationError(AssertionError):
    """A committed report is missing, differs from its SHA-1, or an event is in none or two of them."""


def verify(client: Client, expected: Iterable[int]) -> list[dict[str, Any]]:
    """Checks the committed index against `expected` event numbers: every referenced report exists
    and matches its SHA-1, and every event is in exactly one committed report. Returns the index."""
    want = set(expected)
    index = read_index(client)
    seen: dict[int, str] = {}
    for msg in index:
        ref = msg["report"]
        try:
            report = orjson.loads(read_side_effect(ref))
        except Exception as exc:
            raise VerificationError(f"committed report {ref['url']} cannot be read back: {exc}") from exc
        if len(report["events"]) != msg["events"]:
            raise VerificationError(
                f"report {ref['url']} holds {len(report['events'])} events, its message says {msg['events']}"
            )
        for n in report["events"]:
            if n in seen:
                raise VerificationError(f"event {n} is in two committed reports: {seen[n]} and {ref['url']}")
            seen[n] = ref["url"]
    if set(seen) != want:
        missing, extra = sorted(want - set(seen)), sorted(set(seen) - want)
        raise VerificationError(
            f"committed reports miss events {missing[:10]} and hold unknown ones {extra[:10]}"
        )
    return index


def leftovers(client: Client, reports_store: str) -> dict[str, list[str]]:
    """What the reports store holds beyond the committed reports: "staged" objects (under
    `.pending/`) and "unreferenced" final reports no committed message refers to."""
    store = get_store(reports_store)
    referenced = {m["report"]["path"] for m in read_index(client)}
    finals = [REPORTS_PREFIX + e.path for e in store.list(REPORTS_PREFIX)]
    return {
        "staged": [PENDING_PREFIX + e.path for e in store.list(PENDING_PREFIX)],
        "unreferenced": [p for p in finals if p not in referenced],
    }


def run(
    cluster: Any,
    events: int = 200,
    *,
    reports_store: str | None = None,
    work_dir: str | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Publishes `events` events in two halves, runs the batch-report consumer until every event is
    in a committed report, verifies them and returns {"reports": n, "events": n, "store": url}. The
    shard's database (and, by default, the reports' file:// store) go under `work_dir` (default: a
    new temporary directory)."""
    client = cluster.client()
    client.apply_journals(journals(store=getattr(cluster, "store", None)))
    cluster.wait_for_routes()
    if work_dir is None:
        work = tempfile.mkdtemp(prefix="batch-reports-")
    else:
        work = os.path.abspath(work_dir)
        os.makedirs(work, exist_ok=True)
    reports_store = reports_store or f"file://{work}/reports/"
    group: ConsumerGroup = cluster.run_consumer(BatchReports(reports_store, work), [shard()])
    numbers = list(range(events))
    publish_events(client, numbers[: events // 2])
    publish_events(client, numbers[events // 2 :])
    deadline = time.monotonic() + timeout
    while sum(m["events"] for m in read_index(client)) < events:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the batch-report consumer did not report {events} events within {timeout:.0f} s"
            )
        time.sleep(0.05)
    index = verify(client, numbers)
    group.wait_for_primaries()
    return {"reports": len(index), "events": events, "store": reports_store}
