"""PySpark data source `groupwire` and the rebalance-report job (the `spark` extra).

Importing this package needs no pyspark; :func:`register` imports it when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Make ``format("groupwire")`` available on ``spark`` (reads, streams and writes)."""
    from pipeline.source import GroupwireDataSource

    spark.dataSource.register(GroupwireDataSource)
