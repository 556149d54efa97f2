"""register() checks the Python that Spark's workers will run before registering the source: a
session whose workers run an interpreter without pyarrow (a virtualenv that is not activated) fails
at once with the interpreter and the fix named, not at the first query inside a worker.

Most cases use a stand-in session (no JVM) whose conf names a tiny interpreter script."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import fragments_io
from fragments_io import WorkerPythonError


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Registry:
    def __init__(self) -> None:
        self.registered: list[type] = []

    def register(self, source: type) -> None:
        self.registered.append(source)


class _Session:
    """What register() touches of a session without a SparkContext (as with Spark Connect)."""

    def __init__(self, **conf: str) -> None:
        self.conf = _Conf({"spark.master": "local[2]", **conf})
        self.dataSource = _Registry()


def _script(tmp_path: pathlib.Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def without_site_packages(tmp_path) -> str:
    """This Python, isolated from site-packages (so without pyarrow) and from the working directory."""
    return _script(tmp_path, "bare-python", f'exec "{sys.executable}" -I -S "$@"')


def test_an_interpreter_without_pyarrow_is_named_with_the_fix(without_site_packages) -> None:
    session = _Session(**{"spark.pyspark.python": without_site_packages})
    with pytest.raises(WorkerPythonError) as info:
        fragments_io.register(session)
    message = str(info.value)
    assert f"run {without_site_packages} (the session's spark.pyspark.python)" in message
    assert "cannot import pyarrow, pandas, numpy, gazette" in message
    assert "No module named 'pyarrow'" in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message and "fragments_io.spark_session()" in message
    assert "\n" not in message
    assert session.dataSource.registered == []  # nothing was registered


@pytest.mark.skipif(
    not os.access("/usr/bin/python3", os.X_OK)
    or subprocess.run(["/usr/bin/python3", "-c", "import pyarrow"], capture_output=True).returncode == 0,
    # Not an install step (tests/needs.py): the case needs a system Python that lacks pyarrow, and one
    # that has it (or none at all) is as legitimate under CI as anywhere.
    reason="needs a /usr/bin/python3 without pyarrow (this machine's has pyarrow, or there is none)",
)
def test_the_system_python_without_pyarrow_fails(monkeypatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    with pytest.raises(
        WorkerPythonError, match=r"run /usr/bin/python3 \(PYSPARK_PYTHON\), which cannot import"
    ):
        fragments_io.register(_Session())


def test_python3_from_path_is_the_default(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = _script(bin_dir, "python3", f'exec "{sys.executable}" -I -S "$@"')
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(WorkerPythonError, match=f"run python3 \\(Spark's default, that is {python3}\\)"):
        fragments_io.register(_Session())


def test_a_python_that_can_import_the_source_registers(tmp_path) -> None:
    python = _script(tmp_path, "venv-python", f'exec "{sys.executable}" "$@"')
    session = _Session(**{"spark.pyspark.python": python})
    fragments_io.register(session)
    assert [cls.name() for cls in session.dataSource.registered] == ["gazette"]
    assert session.conf.get(fragments_io.PUSHDOWN_CONF) == "true"


def test_a_missing_interpreter_and_another_version_are_refused(tmp_path) -> None:
    with pytest.raises(WorkerPythonError, match="run no-such-python-3 .*not an executable file or on PATH"):
        fragments_io.register(_Session(**{"spark.pyspark.python": "no-such-python-3"}))
    old = _script(tmp_path, "python2.7", "echo 2.7")
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    with pytest.raises(WorkerPythonError, match=f"which is Python 2.7; this driver is Python {driver}"):
        fragments_io.register(_Session(**{"spark.pyspark.python": old}))
    broken = _script(tmp_path, "broken", "echo 'cannot start' >&2; exit 3")
    with pytest.raises(WorkerPythonError, match=r"fails to run a check \(cannot start\)"):
        fragments_io.register(_Session(**{"spark.pyspark.python": broken}))


def test_workers_on_other_machines_are_not_checked_here(without_site_packages) -> None:
    session = _Session(
        **{"spark.master": "spark://elsewhere:7077", "spark.pyspark.python": without_site_packages}
    )
    fragments_io.register(session)
    assert len(session.dataSource.registered) == 1


def test_the_real_session_passes_and_its_context_decides(spark, without_site_packages, monkeypatch) -> None:
    assert spark.sparkContext.pythonExec == sys.executable  # spark_session() set PYSPARK_PYTHON
    fragments_io.register(spark)
    # A session started with another PYSPARK_PYTHON keeps it: its SparkContext's choice is checked.
    monkeypatch.setattr(spark.sparkContext, "pythonExec", without_site_packages)
    with pytest.raises(WorkerPythonError, match="PYSPARK_PYTHON when the session started"):
        fragments_io.register(spark)
