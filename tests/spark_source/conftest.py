"""Fixtures for fragments_io: one session SparkSession (local[2], 2 shuffle partitions, filter
pushdown on), and `spark_cluster`, a driver on a Spark standalone cluster (a Master and two Workers,
executors in JVMs of their own) in another process, shared by the session; `make_spark_cluster` starts
one for a single test (which may break it). Journal builders live in fio_journals.py next to this file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

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


# A Spark standalone cluster (a Master and two Workers from PySpark's spark-class) and a driver on it
# in a process of its own, shared by the session: test_standalone_cluster.py.
CLUSTER_WORKERS = 2


@dataclasses.dataclass
class SparkCluster:
    """The standalone daemons and the driver process whose session runs on them."""

    daemons: Any  # standalone.SparkStandalone
    driver: Any  # cluster_driver.RemoteDriver

    def run(self, job: str, **args: Any) -> dict[str, Any]:
        """Runs cluster_jobs.JOBS[job] in the driver: {"value": ..., "tasks": {executor id: tasks}}."""
        return self.driver.run(job, **args)


@contextlib.contextmanager
def running_spark_cluster(
    work: pathlib.Path,
    executor_env: dict[str, str] | None = None,
    conf: dict[str, str] | None = None,
    worker_hosts: list[str] | None = None,
) -> Iterator[SparkCluster]:
    """A SparkCluster in `work`: a driver process (cluster_driver.py) whose session runs on a standalone
    cluster of CLUSTER_WORKERS one-core Workers, one executor on each. Executors learn the Python to run,
    where fragments_io is (this checkout), the S3 credentials and `executor_env` only from the
    application's configuration (the daemons' environment has none of them). `conf` adds to (or
    overrides) the application's configuration; `worker_hosts` gives each Worker a name of 127.0.0.1 of
    its own (standalone.SparkStandalone). Every process is stopped on exit, and when starting fails."""
    from cluster_driver import RemoteDriver
    from needs import KAFKA_JARS_STEP, missing
    from standalone import QUICK_JVM, SparkStandalone

    import fragments_io

    try:
        fragments_io.check_java()
    except fragments_io.JavaNotFoundError as exc:
        missing(f"a Spark standalone cluster needs Java: {exc}", KAFKA_JARS_STEP)
    repo = str(pathlib.Path(fragments_io.__file__).resolve().parents[1])
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}  # the session's dummy ones
    app_conf = {
        "spark.executor.cores": "1",
        "spark.cores.max": str(CLUSTER_WORKERS),
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": QUICK_JVM,
        "spark.executor.extraJavaOptions": QUICK_JVM,
        "spark.executorEnv.PYTHONPATH": os.pathsep.join([repo, _HERE]),  # fragments_io, cluster_jobs
        **{f"spark.executorEnv.{k}": v for k, v in {**aws, **(executor_env or {})}.items()},
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **(conf or {}),
    }
    # The driver's PYSPARK_PYTHON is the Python its executors run (a session started from Python
    # ignores spark.pyspark.python, which only spark-submit reads).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, _HERE]), "PYSPARK_PYTHON": sys.executable}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    cluster = SparkStandalone(work, workers=CLUSTER_WORKERS, cores=1, memory="1g", worker_hosts=worker_hosts)
    with cluster.start(wait=False):  # the driver starts while the Workers register
        config = {"master": cluster.master_url, "conf": app_conf, "executors": CLUSTER_WORKERS}
        driver = RemoteDriver(config, env, work / "driver.log").start()
        try:
            cluster.wait_for_workers()
            yield SparkCluster(cluster, driver)
        finally:
            driver.stop()


@pytest.fixture(scope="session")
def spark_cluster(aws_dummy_credentials, tmp_path_factory):
    """The session's SparkCluster (running_spark_cluster), shared by test_standalone_cluster.py. A
    test that breaks its cluster (kills an executor) uses `make_spark_cluster` instead."""
    with running_spark_cluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@pytest.fixture
def make_spark_cluster(aws_dummy_credentials, tmp_path_factory):
    """`make_spark_cluster(executor_env=None, conf=None, worker_hosts=None)`: a SparkCluster of the
    test's own (running_spark_cluster, with `executor_env` in its executors' environment, `conf` in the
    application's configuration, Workers on `worker_hosts`), stopped after the test."""
    with contextlib.ExitStack() as stack:

        def make(
            executor_env: dict[str, str] | None = None,
            conf: dict[str, str] | None = None,
            worker_hosts: list[str] | None = None,
        ) -> SparkCluster:
            work = tmp_path_factory.mktemp("spark-standalone-own")
            return stack.enter_context(running_spark_cluster(work, executor_env, conf, worker_hosts))

        yield make
