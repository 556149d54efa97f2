"""The word counts of bench/wordcount_group.py, able to stop mid-transaction at a known point.

Kafka Streams' peer (bench/kafka_streams, `bench.pause.after.records`) blocks its victim's stream
thread after a known number of count updates and says so, and the bench SIGKILLs it then, so that
where the kill lands is not left to timing. These subclasses of the example's WordCount and
ColumnarWordCount do the same in a `gazette consumer run` process: the first member process to have
counted `pause_after` words (over all its shards) creates PAUSED_FILE in `marker_dir` (exclusively:
one process in the group pauses, once; its restarted incarnation and the other members do not) with
its pid, then blocks every shard worker of its process, mid-transaction, until it is killed
(bounded by PAUSE_LIMIT_S). Each process also records, per shard, when it was first asked to
consume (FIRST_PREFIX files): the start of a shard killed in its first transaction, which Inspect
of its next primary no longer knows. The counting itself is the example's, unchanged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from gazette.consumer import Shard
from gazette.consumer.store import Store
from gazette.examples.wordcount import WordCount
from gazette.examples.wordcount_columnar import ColumnarWordCount
from gazette.message import Envelope, Publisher
from gazette.message.uuid import Flags

PAUSED_FILE = "paused.json"
FIRST_PREFIX = "first-"
PAUSE_LIMIT_S = 300.0  # a paused process is killed within a poll; this only bounds a lost bench
_ACK_TXN = int(Flags.ACK_TXN)

# Per process (a member's shards share its application object, and these).
_lock = threading.Lock()
_words = [0]
_first_seen: set[str] = set()
_paused = threading.Event()


class PausingMixin:
    """Counts the words each consume call took; pauses the process at `pause_after` (None: never)."""

    marker_dir: str
    pause_after: int | None

    def _began(self, shard: Shard) -> None:
        if shard.id in _first_seen:
            return
        now = time.time()
        with _lock:
            if shard.id in _first_seen:
                return
            _first_seen.add(shard.id)
        path = os.path.join(self.marker_dir, f"{FIRST_PREFIX}{shard.id}-{os.getpid()}")
        with open(path, "w") as f:
            f.write(repr(now))

    def _counted(self, words: int) -> None:
        pause = False
        with _lock:
            _words[0] += words
            if self.pause_after is not None and not _paused.is_set() and _words[0] >= self.pause_after:
                pause = _claim_pause(self.marker_dir, _words[0])
                if pause:
                    _paused.set()
        if _paused.is_set():
            _paused_forever()


def _claim_pause(marker_dir: str, counted: int) -> bool:
    """Creates PAUSED_FILE unless a process of the group did already; whether this one did."""
    try:
        fd = os.open(os.path.join(marker_dir, PAUSED_FILE), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "counted": counted, "at": time.time()}, f)
    return True


def _paused_forever() -> None:
    """Blocks the calling shard worker until the process is killed (at most PAUSE_LIMIT_S)."""
    time.sleep(PAUSE_LIMIT_S)
    raise RuntimeError(f"paused for the bench's SIGKILL, which did not come within {PAUSE_LIMIT_S:.0f} s")


def read_pause(marker_dir: str) -> dict[str, Any] | None:
    """What the paused process wrote (pid, words counted, when), or None while none has paused."""
    try:
        with open(os.path.join(marker_dir, PAUSED_FILE)) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return json.loads(text) if text.endswith("}") else None  # else: being written


def first_consumes(marker_dir: str) -> dict[str, float]:
    """Per shard, the earliest time a process was first asked to consume it."""
    out: dict[str, float] = {}
    for name in os.listdir(marker_dir):
        if name.startswith(FIRST_PREFIX):
            shard = name[len(FIRST_PREFIX) :].rsplit("-", 1)[0]
            with open(os.path.join(marker_dir, name)) as f:
                text = f.read()
            if text:
                out[shard] = min(out.get(shard, float("inf")), float(text))
    return out


class PausingWordCount(PausingMixin, WordCount):
    """WordCount (per message) that pauses its process at `pause_after` words (see the module)."""

    def __init__(self, db_dir: str, output: str, marker_dir: str, pause_after: int | None) -> None:
        super().__init__(db_dir, output)
        self.marker_dir, self.pause_after = marker_dir, pause_after

    def consume_messages(
        self, shard: Shard, store: Store, envelopes: Sequence[Envelope], pub: Publisher
    ) -> None:
        self._began(shard)
        super().consume_messages(shard, store, envelopes, pub)
        self._counted(sum(1 for env in envelopes if env.flags != _ACK_TXN))


class PausingColumnarWordCount(PausingMixin, ColumnarWordCount):
    """ColumnarWordCount that pauses its process at `pause_after` words (see the module)."""

    def __init__(self, db_dir: str, output: str, marker_dir: str, pause_after: int | None) -> None:
        super().__init__(db_dir, output)
        self.marker_dir, self.pause_after = marker_dir, pause_after

    def consume_batch(
        self, shard: Shard, store: Store, journal: str, batch: pa.Table, pub: Publisher
    ) -> None:
        self._began(shard)
        super().consume_batch(shard, store, journal, batch, pub)
        self._counted(batch.num_rows)
