"""The main job never breaks unnoticed: `gazette demo --small` runs end to end in a temp dir (faults,
exactly-once counts, side effects exactly once, Spark SQL over the persisted fragments); a forced
mismatch exits non-zero with MISMATCH, and without Java the demo says so in one line and still
checks everything else."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from needs import import_or_missing

from gazette.cli import demo

DEMO_TIMEOUT_S = 300.0


def _demo_cmd(data_dir: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "gazette.cli.main", "demo", "--small", "--data-dir", str(data_dir), *flags]


def _java_available() -> bool:
    import fragments_io

    try:
        fragments_io.check_java()
    except fragments_io.JavaNotFoundError:
        return False
    return True


def test_demo_small_end_to_end(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo-data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAZETTE_DEMO_TEST_")}
    proc = subprocess.run(
        _demo_cmd(data_dir),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "MISMATCH" not in out and "FAILED" not in out
    assert f"consumer counts equal the corpus: {demo.SMALL.words} words" in out
    assert "examples/word-counts: each word's committed counts run 1..n exactly once" in out
    assert "broker kill landed while work remained: broker-" in out
    assert "consumer kill landed while work remained: consumer-" in out
    assert "rolled back: " in out  # aborted transactions were published, and counted by no one
    reported = (
        "committed report files, each matching its message's SHA-1, nothing staged or unreferenced left"
    )
    assert f"side effects: {demo.REPORT_EVENTS} events in " in out and reported in out
    if _java_available():
        assert "Spark SQL counts over the persisted fragments equal the consumer's" in out
    else:
        assert demo.JAVA_MISSING in out
    assert "open the notebooks: make lab" in out
    assert out.rstrip().endswith("demo ok: every check passed")
    # What the report says lives under the data dir does: fragments of each journal, shard stores.
    words = data_dir / "fragments" / "examples" / "words"
    assert sorted(p.name for p in words.iterdir()) == [f"part-{i:03d}" for i in range(demo.PARTITIONS)]
    assert all(any(p.iterdir()) for p in words.iterdir())
    assert sorted(p.name for p in (data_dir / "wordcount").glob("*.db")) == [
        f"count-{i:03d}.db" for i in range(demo.PARTITIONS)
    ]
    assert any((data_dir / "reports" / "reports").rglob("*.json"))  # the published report files


def _lines(stream) -> queue.Queue[str | None]:  # type: ignore[no-untyped-def]
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def test_forced_mismatch_without_java_exits_non_zero_and_keep_leaves_the_cluster_up(tmp_path: Path) -> None:
    env = {
        **os.environ,
        demo.TEST_DROP_WORD_ENV: "1",
        demo.TEST_NO_JAVA_ENV: "1",
    }
    proc = subprocess.Popen(
        _demo_cmd(tmp_path / "demo-data", "--keep"),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = _lines(proc.stdout)
        out: list[str] = []
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        while not any(line.startswith("cluster left up:") for line in out):
            remaining = deadline - time.monotonic()
            assert remaining > 0, "".join(out)[-4000:]
            line = lines.get(timeout=remaining)
            assert line is not None, "the demo exited before leaving the cluster up:\n" + "".join(out)[-4000:]
            out.append(line)
        text = "".join(out)
        assert "FAILED" not in text, text[-4000:]
        assert demo.JAVA_MISSING in text, text[-4000:]
        assert "Spark SQL counts" not in text
        assert "MISMATCH consumer counts differ from the corpus" in text
        assert "demo ok" not in text
        # --keep: the printed endpoints serve the demo's journals.
        keep_line = out[-1]
        exports = dict(kv.split("=", 1) for kv in keep_line.split("export ", 1)[1].split(";")[0].split())
        listing = subprocess.run(
            [sys.executable, "-m", "gazette.cli.main", "journals", "list", "-o", "json"],
            env={**os.environ, **exports},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        names = {j["spec"]["name"] if "spec" in j else j["name"] for j in json.loads(listing.stdout)}
        assert {f"examples/words/part-{i:03d}" for i in range(demo.PARTITIONS)} <= names
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the cluster stops, the exit code tells the mismatch
        assert proc.wait(timeout=120) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_spark_is_skipped_in_one_line_where_java_is_missing(tmp_path: Path, monkeypatch) -> None:
    import_or_missing("fragments_io")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv(demo.TEST_NO_JAVA_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no `java` anywhere
    with pytest.raises(demo.SparkUnavailable) as exc:
        demo.spark_word_counts(f"file://{tmp_path}/")
    assert str(exc.value) == demo.JAVA_MISSING
    assert "\n" not in str(exc.value)
