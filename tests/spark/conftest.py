"""One local SparkSession and one broker process for every Spark test of a run.

Spark's Python workers are separate processes that connect to the broker over TCP, so the
broker runs as its own process (as users run it), not on the test's event loop. Tests
needing Spark skip, with the reason, when pyspark or Java is missing; pure tests in this
directory (test_options.py) still run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.brokerproc import BrokerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BROKER_FLAGS = ("--fsync", "never", "--group-initial-rebalance-delay-ms", "0",
                "--group-min-session-timeout-ms", "10", "--connection-loss-grace-ms", "200")


def spark_missing() -> str | None:
    """Why Spark tests cannot run here, or None when they can."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if importlib.util.find_spec("pyarrow") is None:
        return "pyarrow is not installed (pip install -e '.[spark]')"
    if os.environ.get("JAVA_HOME") is None and shutil.which("java") is None:
        return "Java 17 is not installed (no java on PATH, no JAVA_HOME)"
    return None


@dataclass(frozen=True, slots=True)
class SparkBroker:
    """The session's broker process; ``bootstrap`` is ``"127.0.0.1:PORT"``."""

    proc: BrokerProcess
    port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkBroker]:
    """A broker process on a loopback port, shared by the whole run (topics are unique)."""
    data_dir = tmp_path_factory.mktemp("spark-broker")
    proc = BrokerProcess(data_dir, *BROKER_FLAGS).start()
    try:
        yield SparkBroker(proc=proc, port=proc.port, data_dir=data_dir)
    finally:
        proc.kill()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local[2] SparkSession on loopback with the ``groupwire`` source registered."""
    reason = spark_missing()
    if reason is not None:
        pytest.skip(reason)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers must run this interpreter: the package is installed (editable) in its venv.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from groupwire import pipeline

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (SparkSession.builder.master("local[2]")
               .appName("groupwire-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.warehouse.dir", str(warehouse))
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    try:
        yield session
    finally:
        session.stop()
