"""`gazette demo`: the main job, end to end, checked. Fails loudly (returns False) on any mismatch.

This release: a subprocess LocalCluster (embedded etcd, brokers, a file:// store under the data
dir), JSON journals, words appended in many atomic appends, read back and counted, flushed to the
store, a graceful broker restart, and an independent count straight from the persisted fragment
files, which must equal what was appended.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import time
from collections.abc import Callable
from typing import Any

import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from gazette.fragment.content import open_fragment
from gazette.local.cluster import LocalCluster

WORDS = (
    "gazette journal fragment spool broker append read commit rollback register store etcd route "
    "primary replica sequencer producer clock ack checkpoint shard consumer transaction offset"
).split()
PARTITIONS = 4


def _corpus(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


class _Phases:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.rows: list[tuple[str, float, str]] = []

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        result = fn()
        self.rows.append((name, time.monotonic() - t0, "ok"))
        self.console.print(f"[green]✓[/green] {name} ({time.monotonic() - t0:.2f}s)")
        return result


def run_demo(*, small: bool, keep: bool, data_dir: str, console: Console) -> bool:
    n_words = 2_000 if small else 200_000
    batch = 50 if small else 500
    data_dir = os.path.abspath(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)
    os.makedirs(data_dir)
    store = f"file://{data_dir}/fragments/"
    words = _corpus(n_words)
    expected = collections.Counter(words)
    journals = [f"examples/words/part-{i:03d}" for i in range(PARTITIONS)]
    phases = _Phases(console)
    failures: list[str] = []

    console.print(f"[bold]gazette-py demo[/bold]: {n_words} words over {PARTITIONS} journals, data in {data_dir}")
    cluster = LocalCluster(brokers=1, mode="subprocess", store=store, data_dir=data_dir)
    try:
        phases.run("start etcd and a broker (subprocess)", cluster.start)
        client = cluster.client()

        def apply() -> None:
            client.apply_journals(
                cluster.journal_spec(
                    j,
                    labels={"content-type": "application/x-ndjson", "app.gazette.dev/message-type": "Word"},
                    fragment_length=64 << 10,
                    compression="snappy",
                    refresh_interval="1s",
                )
                for j in journals
            )

        phases.run("create journals", apply)

        def append() -> None:
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task("appending", total=len(words))
                for i in range(0, len(words), batch):
                    chunk = words[i : i + batch]
                    journal = journals[(i // batch) % PARTITIONS]
                    body = b"".join(orjson.dumps({"word": w}) + b"\n" for w in chunk)
                    client.append(journal, body)
                    progress.advance(task, len(chunk))

        phases.run(f"append {n_words} words in atomic batches of {batch}", append)

        def count_from_brokers() -> collections.Counter:
            counts: collections.Counter = collections.Counter()
            for j in journals:
                for line in client.read_all(j).splitlines():
                    counts[orjson.loads(line)["word"]] += 1
            return counts

        got = phases.run("read back through the broker", count_from_brokers)
        if got != expected:
            failures.append("counts read through the broker differ from the corpus")

        persisted = phases.run("flush spools to the store", cluster.flush_fragments)

        def restart() -> None:
            cluster.stop_broker(0)
            cluster.restart_broker(0)

        phases.run("graceful broker restart (SIGTERM persists, start again)", restart)
        got = phases.run("read back after restart", count_from_brokers)
        if got != expected:
            failures.append("counts after the restart differ from the corpus")

        def count_from_store() -> tuple[collections.Counter, int]:
            counts: collections.Counter = collections.Counter()
            n_frags = 0
            for j in journals:
                for frag in client.list_fragments(j):
                    if not frag.backing_store:
                        failures.append(f"fragment [{frag.begin}, {frag.end}) of {j} is not persisted")
                        continue
                    n_frags += 1
                    data = b"".join(open_fragment(frag))
                    for line in data.splitlines():
                        counts[orjson.loads(line)["word"]] += 1
            return counts, n_frags

        store_counts, n_frags = phases.run("count straight from persisted fragment files", count_from_store)
        if store_counts != expected:
            failures.append("counts from the persisted fragments differ from the corpus")

        table = Table(title="word counts (top 8)")
        for col in ("word", "corpus", "broker", "store"):
            table.add_column(col, justify="right" if col != "word" else "left")
        for w, n in expected.most_common(8):
            table.add_row(w, str(n), str(got[w]), str(store_counts[w]))
        console.print(table)
        timing = Table(title="phases")
        timing.add_column("phase")
        timing.add_column("seconds", justify="right")
        for name, secs, _ in phases.rows:
            timing.add_row(name, f"{secs:.2f}")
        console.print(timing)
        console.print(f"persisted fragments: {n_frags} (flush wrote {len(persisted)}) under {store}")
        if keep:
            console.print(
                f"cluster left up: GAZETTE_BROKER={cluster.broker_endpoints[0]} gazette journals list; Ctrl-C stops it"
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        cluster.close()
    if failures:
        for f in failures:
            console.print(f"[red]MISMATCH[/red] {f}")
        return False
    console.print("[bold green]demo ok[/bold green]: every count matches the corpus")
    return True
