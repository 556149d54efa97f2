"""The peer: NATS JetStream doing our message benchmark's work, in messages per second.

Starts Debian's `nats-server -js` on 127.0.0.1 (a random port, its store in a temp directory) as a
child that dies with us, then with nats-py publishes 100-byte JSON messages (the bytes our Publisher
appends) with a `Nats-Msg-Id` header (deduplication on), awaiting each publish ack or pipelining
them (publish_async, like our Publisher), and consumes them with a pull consumer, explicit acks.
`python -m bench.nats_peer [--quick]` runs it alone; `python -m bench` puts it beside our figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.figures import Figure, PeerUnavailable
from bench.messages import MESSAGE_BYTES, UNIT, make_messages
from gazette.keyspace.procutil import spawn, terminate
from gazette.message import build_uuid
from gazette.message.framing import JSONFraming
from gazette.message.uuid import Clock, new_producer_id

SERVER_NAMES = ("nats-server", "/usr/sbin/nats-server")  # PATH first, then where Debian puts it
NOT_INSTALLED = "nats-server not installed"
READY_TIMEOUT_S = 15.0
ACKS_TIMEOUT_S = 30.0
FETCH_BATCH = 1000  # messages per pull request
FETCH_TIMEOUT_S = 5.0
MAX_ACK_PENDING = 20_000  # so acks in flight never stall the pull consumer
ASYNC_MAX_PENDING = 4000  # nats-py's default publish_async window
DUPLICATE_WINDOW_S = 120.0  # JetStream's default deduplication window


class NatsUnavailable(PeerUnavailable):
    """The peer cannot run here (no nats-server, or it would not start); the reason is the message."""


@dataclasses.dataclass(frozen=True)
class Settings:
    name: str
    runs: int
    messages: int  # per run, for the pipelined publish and the consume
    sync_messages: int  # per run, for the publish awaiting each ack (one round trip per message)


QUICK = Settings("quick", runs=3, messages=30_000, sync_messages=3_000)
FULL = Settings("full", runs=5, messages=100_000, sync_messages=10_000)


# Our figure -> the peer's figure doing the same work (bench/messages.py, bench/consumer.py).
PEER_OF = {
    "msg_publish": "nats_publish_async",  # our Publisher pipelines appends, as publish_async does acks
    "msg_read_committed": "nats_consume",
    "cons_e2e": "nats_consume",  # end to end adds the store's commit and our ACKs to the reading
}


def peer_figures() -> dict[str, Figure]:
    """The peer's figures, in table order; each a peer of one of ours (not a limit)."""
    figures = [
        Figure("nats_publish_sync", "Peer: NATS JetStream publish, dedup, each ack awaited", UNIT, True),
        Figure("nats_publish_async", "Peer: NATS JetStream publish, dedup, acks pipelined", UNIT, True),
        Figure("nats_consume", "Peer: NATS JetStream pull consume, explicit acks", UNIT, True),
    ]
    return {f.key: f for f in figures}


def server_binary() -> str | None:
    """The nats-server executable, or None when it is not installed."""
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
    text = out.stdout.strip() or out.stderr.strip()
    return text.removeprefix("nats-server: ")  # "nats-server: v2.9.10"


@contextlib.contextmanager
def nats_server(binary: str) -> Iterator[str]:
    """Runs `binary -js` on 127.0.0.1 with a random port and a temp store; yields its URL."""
    with tempfile.TemporaryDirectory(prefix="bench-nats-") as tmp:
        log_path = Path(tmp) / "server.log"
        with log_path.open("wb") as log_file:
            proc = spawn(
                [binary, "-js", "-a", "127.0.0.1", "-p", "-1", "-sd", str(Path(tmp) / "store"),
                 "--ports_file_dir", tmp],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            yield _wait_ready(proc, Path(tmp), log_path)
        finally:
            terminate(proc)


def _wait_ready(proc: subprocess.Popen[Any], directory: Path, log_path: Path) -> str:
    """nats-server writes its client URL to <dir>/nats-server_<pid>.ports once listening."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for path in directory.glob(f"*_{proc.pid}.ports"):
            with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
                return str(json.loads(path.read_text())["nats"][0])
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-400:]
            raise NatsUnavailable(f"nats-server exited with status {proc.returncode}: {tail.strip()}")
        time.sleep(0.05)
    raise NatsUnavailable(f"nats-server wrote no ports file in {directory} within {READY_TIMEOUT_S:.0f} s")


# --- the work ------------------------------------------------------------------------------------


def _stamped(messages: list[dict[str, Any]]) -> Iterator[tuple[bytes, str]]:
    """Each message framed as our Publisher frames it (100 B with its UUID) and its UUID as the
    message id; done while timed, as our Publisher encodes while timed."""
    framing, pid, clock = JSONFraming(), new_producer_id(), Clock.now()
    for m in messages:
        uuid = build_uuid(pid, clock.tick(), 0)
        yield framing.encode(m, uuid), str(uuid)


async def publish_sync(js: Any, subject: str, messages: list[dict[str, Any]]) -> float:
    """Publishes one message at a time, awaiting each ack: msgs/s."""
    start = time.perf_counter()
    for data, msg_id in _stamped(messages):
        await js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
    return len(messages) / (time.perf_counter() - start)


async def publish_async(js: Any, subject: str, messages: list[dict[str, Any]]) -> float:
    """Publishes with up to ASYNC_MAX_PENDING acks outstanding, then awaits them all: msgs/s."""
    start = time.perf_counter()
    futures = [
        await js.publish_async(subject, data, headers={"Nats-Msg-Id": msg_id})
        for data, msg_id in _stamped(messages)
    ]
    acks = await asyncio.gather(*futures)
    elapsed = time.perf_counter() - start
    duplicates = sum(1 for a in acks if a.duplicate)
    if duplicates:
        raise RuntimeError(f"JetStream took {duplicates} of {len(acks)} distinct message ids for duplicates")
    return len(messages) / elapsed


async def consume(js: Any, stream: str, subject: str, expected: int) -> float:
    """Pulls `expected` messages in batches, parses and acks each; flushes the acks: msgs/s."""
    import nats.js.api as api

    config = api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, max_ack_pending=MAX_ACK_PENDING)
    sub = await js.pull_subscribe(subject, durable=f"{stream}-reader", stream=stream, config=config)
    count = 0
    start = time.perf_counter()
    while count < expected:
        for msg in await sub.fetch(min(FETCH_BATCH, expected - count), timeout=FETCH_TIMEOUT_S):
            orjson.loads(msg.data)
            await msg.ack()
            count += 1
    await js._nc.flush()  # every ack has reached the server
    elapsed = time.perf_counter() - start
    await _wait_acked(js, stream, f"{stream}-reader", expected)
    await sub.unsubscribe()
    return count / elapsed


async def _wait_acked(js: Any, stream: str, durable: str, expected: int) -> None:
    deadline = time.monotonic() + ACKS_TIMEOUT_S
    while True:
        info = await js.consumer_info(stream, durable)
        if info.ack_floor.stream_seq >= expected and not info.num_ack_pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{stream}: ack floor {info.ack_floor.stream_seq} of {expected}, "
                f"{info.num_ack_pending} pending, {ACKS_TIMEOUT_S:.0f} s after the last ack"
            )
        await asyncio.sleep(0.05)


async def _check_dedup(js: Any, stream: str, subject: str, data: bytes, msg_id: str, expected: int) -> None:
    """Re-publishes one message id: JetStream must call it a duplicate and keep `expected` messages."""
    ack = await js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
    state = (await js.stream_info(stream)).state
    if not ack.duplicate or state.messages != expected:
        raise RuntimeError(
            f"{stream}: a re-published id was {'' if ack.duplicate else 'not '}seen as a duplicate "
            f"and the stream holds {state.messages} messages (expected {expected})"
        )


async def _stream(js: Any, name: str) -> str:
    import nats.js.api as api

    subject = f"{name.lower()}.msgs"
    await js.add_stream(
        api.StreamConfig(
            name=name, subjects=[subject], storage=api.StorageType.FILE, duplicate_window=DUPLICATE_WINDOW_S
        )
    )
    return subject


async def _measure(url: str, settings: Settings, log: Callable[[str], None]) -> dict[str, list[float]]:
    import nats

    messages = make_messages(settings.messages)
    samples: dict[str, list[float]] = {key: [] for key in peer_figures()}
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream(publish_async_max_pending=ASYNC_MAX_PENDING)
        warm = await _stream(js, "WARM")  # connects, creates the async reply subscription
        await publish_async(js, warm, messages[:1000])
        await publish_sync(js, warm, messages[:100])
        for i in range(settings.runs):
            log(f"nats run {i + 1}/{settings.runs}")
            sync_subject = await _stream(js, f"SYNC{i}")
            run = {
                "nats_publish_sync": await publish_sync(js, sync_subject, messages[: settings.sync_messages])
            }
            name = f"ASYNC{i}"
            subject = await _stream(js, name)
            run["nats_publish_async"] = await publish_async(js, subject, messages)
            data, msg_id = next(_stamped(messages[:1]))
            await js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})  # untimed: one more id
            await _check_dedup(js, name, subject, data, msg_id, settings.messages + 1)
            run["nats_consume"] = await consume(js, name, subject, settings.messages + 1)
            for stream in (f"SYNC{i}", name):  # frees the store between runs
                await js.delete_stream(stream)
            for key, value in run.items():
                samples[key].append(value / 1000)
            log("  " + ", ".join(f"{k} {v / 1000:.4g}k" for k, v in run.items()))
    finally:
        await nc.close()
    return samples


def run(settings: Settings, log: Callable[[str], None]) -> dict[str, Figure]:
    """Measures the peer's figures `settings.runs` times; NatsUnavailable when it cannot run."""
    binary = server_binary()
    if binary is None:
        raise NatsUnavailable(NOT_INSTALLED)
    try:
        import nats  # noqa: F401
    except ImportError as exc:
        raise NatsUnavailable(f"nats-py not installed ({exc})") from exc
    log(f"peer: {server_version(binary)} ({binary}), {MESSAGE_BYTES} B messages")
    figures = peer_figures()
    with nats_server(binary) as url:
        for key, values in asyncio.run(_measure(url, settings, log)).items():
            figures[key].samples.extend(values)
    return figures


def settings_for(name: str, runs: int | None = None) -> Settings:
    """QUICK or FULL by `name` ("quick" or "full"), with `runs` if given."""
    base = QUICK if name == QUICK.name else FULL
    return base if runs is None else dataclasses.replace(base, runs=runs)


def main() -> None:
    from rich.console import Console

    from bench import report

    parser = argparse.ArgumentParser(prog="python -m bench.nats_peer", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and smaller runs")
    parser.add_argument("--runs", type=int, help="override the number of runs")
    args = parser.parse_args()
    if args.runs is not None and args.runs < 1:
        parser.error(f"--runs {args.runs} must be at least 1")
    settings = settings_for("quick" if args.quick else "full", args.runs)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 140)  # piped or captured: don't squeeze the table
    figures = run(settings, log=console.log)
    report.print_table(report.rows_of(figures), f"NATS JetStream peer ({settings.name})", console)


if __name__ == "__main__":
    main()
