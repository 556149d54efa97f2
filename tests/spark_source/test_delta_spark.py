"""fragments_io's Delta writes through real delta-spark (Delta 4.4.0 for Spark 4.2, jars cached by
`make delta-jars`): Delta's own txnAppId/txnVersion make a re-run of a version add nothing, MERGE
upserts by key and is skipped on replay by Delta's idempotent-DML settings, and a stream's
foreachBatch lands every committed message once. The session runs in its own process
(delta_spark_checks.py): a JVM's jars are fixed at start and the suite's shared session has none.
Without the jars these tests skip with the command that fetches them; under CI they fail (tests/needs.py).
"""

from __future__ import annotations

import json
import logging
import pathlib
import subprocess
import sys

import pytest
from fio_journals import envelopes_of, persist_journal, random_journal
from needs import DELTA_JARS_STEP, missing

from fragments_io.committed import committed_reference
from fragments_io.delta import DeltaJarsNotFoundError, delta_jars
from gazette.protocol.codec import Codec

CHECKS = pathlib.Path(__file__).with_name("delta_spark_checks.py")
CHECKS_TIMEOUT_S = 420


def _require_jars() -> None:
    try:
        delta_jars()
    except DeltaJarsNotFoundError as e:
        missing(str(e), DELTA_JARS_STEP)


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """What delta_spark_checks.py saw, run once for this module."""
    _require_jars()
    logging.getLogger("gazette.message.sequencer").setLevel(logging.CRITICAL)
    root = tmp_path_factory.mktemp("delta-spark")
    store = f"file://{root}/store/"
    frames = random_journal(91, 160, 3)
    persist_journal(store, "ds/a", frames, (Codec.ZSTANDARD,), frames_per_fragment=20)
    committed = sorted(e.begin for e in committed_reference(envelopes_of("ds/a", frames)))
    proc = subprocess.run(
        [sys.executable, str(CHECKS), str(root / "work"), store],
        capture_output=True,
        text=True,
        timeout=CHECKS_TIMEOUT_S,
        cwd=root,  # Delta's catalog makes a spark-warehouse/ in the working directory
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["committed"] = committed
    return result


@pytest.mark.timeout(CHECKS_TIMEOUT_S + 60)
def test_append_is_delta_spark_and_a_rerun_adds_nothing(observed):
    assert observed["uses_delta_spark"]
    out = observed["append"]
    assert "Delta-Lake/4.4.0" in out["engine"], out["engine"]
    assert out["first"] and not out["rerun"] and out["second"] and not out["older"]
    # Version 0 written once although Delta's writer was called with it again: 10 + 5 rows.
    assert out["rows"] == 15 and out["keys"] == list(range(15))
    assert out["history"] == ["WRITE", "WRITE"] and out["txn"] == 1


@pytest.mark.timeout(CHECKS_TIMEOUT_S + 60)
def test_merge_upserts_by_key_once(observed):
    out = observed["merge"]
    assert out["first"] and out["second"] and not out["replay"]
    want = [(0, "v0"), (1, "v0"), (2, "v0"), (3, "v1"), (4, "v1"), (5, "v1"), (6, "v1")]
    assert [tuple(r) for r in out["table"]] == want
    assert out["history"] == ["WRITE", "MERGE"] and out["txn"] == 1
    assert out["settings_left"] == [None, None]


@pytest.mark.timeout(CHECKS_TIMEOUT_S + 60)
def test_stream_merges_each_committed_message_once(observed):
    out = observed["stream"]
    assert out["finished"] and out["last_batch"] >= 2
    assert out["begins"] == observed["committed"]
    assert out["history"][0] == "WRITE" and set(out["history"][1:]) == {"MERGE"}
