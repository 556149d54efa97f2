"""Fixtures for fragments_io: one session SparkSession (local[2], 2 shuffle partitions, filter
pushdown on). Journal builders live in fio_journals.py next to this file.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

# tests/ is on sys.path (pythonpath) and this directory is named like the package: put the
# repository root first so `import fragments_io` finds the package, not this test directory.
_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)  # fio_journals, the journal builders shared by these tests
_stale = sys.modules.get("fragments_io")
if _stale is not None and getattr(_stale, "__file__", None) is None:
    del sys.modules["fragments_io"]


@pytest.fixture(scope="session")
def spark(aws_dummy_credentials):
    import fragments_io

    session = fragments_io.spark_session(
        "local[2]",
        "fragments_io-tests",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.python.filterPushdown.enabled": "true",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "1g",
        },
    )
    yield session
    session.stop()
