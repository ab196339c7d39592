"""``bench/spark_source.py`` run small (``--smoke``), as tests/bench/test_smoke.py runs
every other benchmark, but in this process on the suite's Spark session: starting a
session of its own was most of its smoke run, and what a smoke run checks (the bench
still runs and prints well-formed figures) does not depend on whose JVM it reads with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.bench.figures import check_figure_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.slow]


class _KeptRunning:
    """The session the bench asked for, whose ``stop`` leaves it running for the tests
    after this one."""

    def __init__(self, session: SparkSession) -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def stop(self) -> None:
        pass


def test_spark_source_smoke_on_the_shared_session(
        spark: SparkSession, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import bench.spark_source as bench

    own_session = bench.spark_session
    # the bench's own builder still runs: with a session up, it returns that one
    monkeypatch.setattr(bench, "spark_session",
                        lambda master: _KeptRunning(own_session(master)))
    # a tenth of --smoke's records: a smoke run checks the figures' shape, not their size
    assert bench.main(["--smoke", "--json", "--records", "2000"]) == 0
    printed = capsys.readouterr()
    lines = [x for x in printed.out.splitlines() if x.strip()]
    assert lines, f"bench spark_source printed no figure:\n{printed.err[-3000:]}"
    figures = [check_figure_line(x, "spark_source") for x in lines]  # nothing but figures
    assert any(f["rounds"] > 0 for f in figures), figures  # something was measured
    assert spark.range(3).count() == 3  # the session outlived the bench
