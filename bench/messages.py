"""Message figures: 100-byte JSON messages published through Publisher/AppendService into a
subprocess broker, and read back with ReadUncommitted/ReadCommitted, in messages per second.

Each rate has a limit measured in the same run: orjson.dumps + join of the same messages for
publishing, the JSON framing decoder alone over the same journal bytes for reading, and a target
from the messages issue (200k messages/s). `python -m bench.messages [--quick] [--profile]` runs
them alone (table only; `python -m bench` adds them to results.json and the README table).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import pstats
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from bench import runner
from bench.figures import Figure, Target
from gazette.client.sync import Client
from gazette.local.cluster import LocalCluster
from gazette.message import Publisher, ReadCommitted, ReadUncommitted, build_uuid
from gazette.message.framing import JSONFraming
from gazette.message.uuid import Clock, new_producer_id

MESSAGE_BYTES = 100  # framed size of each message, newline and UUID included
GOAL_MSGS_PER_S = 200_000  # the messages issue: ReadCommitted of 100-byte JSON messages, one process
TXN_MESSAGES = 1000  # uncommitted messages per transaction (then one ACK), like a consumer's
DECODE_CHUNK_BYTES = 256 * 1024  # the broker's read chunk (gazette.tunables.BROKER_READ_CHUNK_BYTES)
LIMIT_REPEATS = 3  # a limit is the best of this many passes (the first one pays for cold allocations)
NDJSON = "application/x-ndjson"
UNIT = "k msg/s"


@dataclasses.dataclass(frozen=True)
class RateTarget(Target):
    """A goal on the value of a rate: met when value >= bound."""

    def met(self, value: float, ratio: float | None) -> bool | None:
        return value >= self.bound


GOAL = RateTarget("value", GOAL_MSGS_PER_S / 1000, "≥ 200k msg/s")


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    runs: int
    messages: int  # per journal and figure


QUICK = Settings("quick", runs=3, messages=100_000)
FULL = Settings("full", runs=5, messages=200_000)


def settings_for(bench: runner.Settings) -> Settings:
    """The message settings matching `python -m bench`'s (quick or full, same number of runs)."""
    base = QUICK if bench.name == QUICK.name else FULL
    return dataclasses.replace(base, runs=bench.runs)


def message_figures() -> dict[str, Figure]:
    figures = [
        Figure("msg_encode", "Limit: orjson.dumps + join of 100 B JSON messages", UNIT, True),
        Figure("msg_publish", "Publish committed, 100 B JSON", UNIT, True, "msg_encode", GOAL),
        Figure(
            "msg_publish_txn",
            f"Publish uncommitted, an ACK per {TXN_MESSAGES}",
            UNIT,
            True,
            "msg_encode",
            GOAL,
        ),
        Figure("msg_decode", "Limit: JSON framing decoder alone", UNIT, True),
        Figure("msg_read_uncommitted", "ReadUncommitted", UNIT, True, "msg_decode", GOAL),
        Figure("msg_read_committed", "ReadCommitted, committed messages", UNIT, True, "msg_decode", GOAL),
        Figure(
            "msg_read_txn", f"ReadCommitted, transactions of {TXN_MESSAGES}", UNIT, True, "msg_decode", GOAL
        ),
        Figure(
            "msg_read_txn_columnar",
            f"Columnar reader (ReadCommittedTables), transactions of {TXN_MESSAGES}",
            UNIT,
            True,
            "msg_decode",
            GOAL,
        ),
    ]
    return {f.key: f for f in figures}


def make_messages(count: int, offset: int = 0) -> list[dict[str, Any]]:
    """`count` dicts that frame (with their UUID) to exactly MESSAGE_BYTES bytes."""
    sample = JSONFraming().encode(
        {"word": "w0000000", "n": 0, "pad": ""}, build_uuid(new_producer_id(), 1, 0)
    )
    pad = "x" * (MESSAGE_BYTES - len(sample))
    return [{"word": f"w{i:07d}", "n": i % 10, "pad": pad} for i in range(offset, offset + count)]


# --- limits ----------------------------------------------------------------------------------------


def encode_limit(messages: list[dict[str, Any]]) -> float:
    """orjson.dumps of the messages with their UUID strings already in place, joined: msgs/s
    (best of LIMIT_REPEATS)."""
    pid, clock = new_producer_id(), Clock.now()
    stamped = [{**m, "_meta": {"uuid": str(build_uuid(pid, clock.tick(), 0))}} for m in messages]
    dumps, option = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    best = float("inf")
    for _ in range(LIMIT_REPEATS):
        start = time.perf_counter()
        data = b"".join([dumps(m, option=option) for m in stamped])
        best = min(best, time.perf_counter() - start)
        if len(data) != MESSAGE_BYTES * len(messages):
            raise RuntimeError(f"encoded {len(data)} bytes, expected {MESSAGE_BYTES} per message")
    return len(messages) / best


def decode_limit(data: bytes, expected: int) -> float:
    """The JSON framing decoder over `data`, fed in read-sized chunks: msgs/s (best of LIMIT_REPEATS)."""
    best = float("inf")
    for _ in range(LIMIT_REPEATS):
        decoder = JSONFraming().decoder("bench/decode", 0)
        count = 0
        start = time.perf_counter()
        for i in range(0, len(data), DECODE_CHUNK_BYTES):
            count += len(decoder.feed(data[i : i + DECODE_CHUNK_BYTES]))
        best = min(best, time.perf_counter() - start)
        if count != expected:
            raise RuntimeError(f"decoded {count} messages, expected {expected}")
    return count / best


# --- our figures -------------------------------------------------------------------------------------


def publish(client: Client, journal: str, messages: list[dict[str, Any]], txn: bool) -> float:
    """Publishes `messages` (uncommitted with an ACK every TXN_MESSAGES when `txn`) and waits until
    all are appended: msgs/s, ACKs not counted."""
    with Publisher(client) as pub:
        client._loop.run(pub.prepare(journal))
        start = time.perf_counter()
        if txn:
            for i in range(0, len(messages), TXN_MESSAGES):
                for m in messages[i : i + TXN_MESSAGES]:
                    pub.publish_uncommitted(journal, m)
                for name, ack in pub.build_ack_intents(
                    after_messages=True
                ):  # the service's order puts them after
                    pub.service.append(name, ack)
        else:
            for m in messages:
                pub.publish_committed(journal, m)
        pub.flush()
        return len(messages) / (time.perf_counter() - start)


def columnar_read_rate(client: Client, journal: str, expected: int) -> float:
    """Rows/s of ReadCommittedTables over `journal` (every field of the messages decoded; ACKs are
    not rows, so `expected` counts the messages alone)."""
    import pyarrow as pa

    from gazette.message.columnar import ReadCommittedTables

    fields = pa.schema([("word", pa.string()), ("n", pa.int64()), ("pad", pa.string())])
    start = time.perf_counter()
    count = sum(t.num_rows for t in ReadCommittedTables(client, journal, fields))
    elapsed = time.perf_counter() - start
    if count != expected:
        raise RuntimeError(f"ReadCommittedTables yielded {count} rows, expected {expected}")
    return count / elapsed


def read_rate(reader: Iterable[Any], expected: int, what: str) -> float:
    start = time.perf_counter()
    count = sum(1 for _ in reader)
    elapsed = time.perf_counter() - start
    if count != expected:
        raise RuntimeError(f"{what} yielded {count} envelopes, expected {expected}")
    return count / elapsed


def run(settings: Settings, log: Callable[[str], None]) -> dict[str, Figure]:
    """Measures every message figure `settings.runs` times in a subprocess broker."""
    figures = message_figures()
    n = settings.messages
    messages = make_messages(n)
    txn_acks = -(-n // TXN_MESSAGES)
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        for i in range(settings.runs):
            log(f"messages run {i + 1}/{settings.runs}")
            plain, txn = _journals(cluster, client, f"bench/msg-{i}")
            samples = {
                "msg_encode": encode_limit(messages),
                "msg_publish": publish(client, plain, messages, txn=False),
                "msg_publish_txn": publish(client, txn, messages, txn=True),
                "msg_decode": decode_limit(client.read_all(plain), n),
                "msg_read_uncommitted": read_rate(ReadUncommitted(client, plain), n, "ReadUncommitted"),
                "msg_read_committed": read_rate(ReadCommitted(client, plain), n, "ReadCommitted"),
                "msg_read_txn": read_rate(ReadCommitted(client, txn), n + txn_acks, "ReadCommitted of txns"),
                "msg_read_txn_columnar": columnar_read_rate(client, txn, n),
            }
            for key, value in samples.items():
                figures[key].samples.append(value / 1000)
            log("  " + ", ".join(f"{k} {v / 1000:.4g}k" for k, v in samples.items()))
    return figures


def _journals(cluster: LocalCluster, client: Client, prefix: str) -> tuple[str, str]:
    names = (f"{prefix}/committed", f"{prefix}/txn")
    apply_journals(cluster, client, names)
    return names


def apply_journals(cluster: LocalCluster, client: Client, names: Iterable[str]) -> None:
    """Creates the bench's message journals: JSON lines, no compression, fragments larger than a run
    writes (no spool roll while a figure is timed)."""
    client.apply_journals(
        cluster.journal_spec(
            name,
            labels={"content-type": NDJSON},
            fragment_length=runner.FRAGMENT_LENGTH,
            compression="none",
            refresh_interval="1s",
        )
        for name in names
    )


# --- profiling ------------------------------------------------------------------------------------


def profile(messages_count: int, top: int) -> str:
    """Publishes `messages_count` messages, then reads them with ReadCommitted, each under cProfile
    on the calling thread and on the client's loop thread (where appends are sent and reads
    decoded); returns the top entries by own time of each thread, per phase."""
    messages = make_messages(messages_count)
    out = io.StringIO()
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        client = cluster.client()
        plain, _ = _journals(cluster, client, "bench/msg-profile")
        phases: list[tuple[str, Callable[[], float]]] = [
            ("publish committed", lambda: publish(client, plain, messages, txn=False)),
            (
                "ReadCommitted",
                lambda: read_rate(ReadCommitted(client, plain), messages_count, "ReadCommitted"),
            ),
        ]
        for phase, measure in phases:
            caller, loop_side = cProfile.Profile(), cProfile.Profile()
            client._loop.loop.call_soon_threadsafe(loop_side.enable)
            caller.enable()
            rate = measure()
            caller.disable()
            client._loop.run(_disable(loop_side))
            print(f"\n##### {phase}: {rate / 1000:.1f}k msg/s under cProfile", file=out)
            for name, prof in (("calling thread", caller), ("loop thread", loop_side)):
                print(f"=== {phase}, {name}: top {top} by own time ===", file=out)
                pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    return out.getvalue()


async def _disable(prof: cProfile.Profile) -> None:
    prof.disable()


def main() -> None:
    from rich.console import Console

    from bench import report

    parser = argparse.ArgumentParser(prog="python -m bench.messages", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK.runs} runs of {QUICK.messages} messages"
    )
    parser.add_argument("--runs", type=int, help="override the number of runs")
    parser.add_argument("--profile", action="store_true", help="instead, profile one publish and read")
    parser.add_argument("--top", type=int, default=10, help="entries per profile listing")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs {args.runs} must be at least 1")
        settings = dataclasses.replace(settings, runs=args.runs)
    if args.profile:
        print(profile(settings.messages, args.top))
        return
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)  # piped or captured: don't wrap the table
    figures = run(settings, log=console.log)
    report.print_table(
        report.rows_of(figures),
        f"gazette-py message bench ({settings.name}, median of {settings.runs} runs)",
        console,
    )
    for f in figures.values():
        if f.target is not None:
            console.log(
                f"{f.name}: {f.value * 1000 / GOAL_MSGS_PER_S:.2f} of the {GOAL_MSGS_PER_S:,} msg/s goal"
            )


if __name__ == "__main__":
    main()
