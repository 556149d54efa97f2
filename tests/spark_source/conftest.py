"""Fixtures for fragments_io: one session SparkSession (local[2], 2 shuffle partitions, filter
pushdown on). Journal builders live in fio_journals.py next to this file.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)  # fio_journals, the journal builders shared by these tests


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
