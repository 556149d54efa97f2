"""`--log-format json|text|color` (and Gazette's `--log.format`, `--log.level`): the formatters, and
`gazette broker serve` / `gazette consumer run` processes logging one JSON object per line."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import pytest

from gazette.keyspace.procutil import read_ready_line, spawn, terminate
from gazette.logsetup import JSONFormatter, TextFormatter, parse_level

START_TIMEOUT_S = 60


def _record(msg: str, *args: object, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gazette.test", level, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_json_lines_carry_level_time_message_and_structured_fields() -> None:
    doc = json.loads(JSONFormatter().format(_record("read %s", "started", journal="a/b", offset=7)))
    assert doc["level"] == "info" and doc["msg"] == "read started" and doc["logger"] == "gazette.test"
    assert doc["journal"] == "a/b" and doc["offset"] == 7
    assert doc["time"][:4].isdigit() and doc["time"][10] == "T" and doc["time"][-3] == ":"  # RFC 3339
    assert json.loads(JSONFormatter().format(_record("x", level=logging.WARNING)))["level"] == "warning"
    assert json.loads(JSONFormatter().format(_record("x", level=logging.CRITICAL)))["level"] == "fatal"
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed")
        record.exc_info = sys.exc_info()
    doc = json.loads(JSONFormatter().format(record))
    assert "ValueError: boom" in doc["error"]
    assert "\n" not in JSONFormatter().format(record)  # one object per line, traceback included


def test_text_lines_end_with_structured_fields() -> None:
    text = TextFormatter().format(_record("read started", journal="a/b", note="two words"))
    assert text.endswith(' gazette.test INFO read started journal=a/b note="two words"')
    colored = TextFormatter(color=True).format(_record("hi", level=logging.ERROR))
    assert "\x1b[31mERROR\x1b[0m hi" in colored


def test_levels_take_gazettes_names_and_pythons() -> None:
    assert parse_level("warn") == parse_level("WARNING") == logging.WARNING
    assert parse_level("trace") == logging.DEBUG and parse_level("fatal") == logging.CRITICAL
    with pytest.raises(ValueError, match='log level "loud" is not one of'):
        parse_level("loud")


def _json_lines(stderr: str) -> list[dict]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    docs = [json.loads(line) for line in lines]  # every line is one JSON object
    for doc in docs:
        assert {"level", "msg", "time"} <= set(doc), doc
    return docs


def _run_until_ready(args: list[str]) -> tuple[dict, str]:
    """Starts `gazette ARGS`, waits for its ready line, stops it with SIGTERM; (ready, its stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GAZETTE_", "LOG_"))}
    proc = spawn(
        [sys.executable, "-m", "gazette.cli.main", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True,
    )  # fmt: skip
    try:
        ready = read_ready_line(proc, START_TIMEOUT_S)
        assert ready is not None, proc.stderr.read() if proc.poll() is not None else "no ready line"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=START_TIMEOUT_S)
        assert proc.returncode == 0, err
        return ready, err
    finally:
        terminate(proc)


def test_broker_serve_logs_json_with_the_global_flag(etcd, etcd_root, tmp_path) -> None:
    _, err = _run_until_ready(
        ["--log-format", "json", "--log-level", "info", "broker", "serve", "--etcd", etcd.endpoint,
         "--root", f"{etcd_root}/brokers", "--port", "0", "--exit-drain", "5", "--spool-dir", str(tmp_path)]
    )  # fmt: skip
    docs = _json_lines(err)
    assert any("serving at" in d["msg"] and d["level"] == "info" for d in docs), err


def test_consumer_run_logs_json_with_gazettes_spelling(etcd, etcd_root, tmp_path) -> None:
    root = f"{etcd_root}/consumers/logs"
    _, err = _run_until_ready(
        ["consumer", "run", "gazette.examples.wordcount:WordCount", "--app-args", json.dumps({"db_dir": str(tmp_path)}),
         "--etcd", etcd.endpoint, "--broker", "http://127.0.0.1:1", "--root", root, "--exit-drain", "5",
         "--log.format", "json", "--log.level", "info"]
    )  # fmt: skip
    docs = _json_lines(err)
    assert any("started under" in d["msg"] for d in docs), err
    last = docs[-1]  # the member's exit line, for supervisors, is a JSON object too
    assert last["msg"].startswith("gazette consumer run: member ") and last["status"] == 0, last
