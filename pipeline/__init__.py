"""PySpark data source `groupwire` and the rebalance-report job (the `spark` extra).

Importing this package needs no pyspark; :func:`register` imports it when called.

Spark's Python workers run ``$PYSPARK_PYTHON`` (``python3`` when unset), which is often
not the interpreter groupwire is installed in: the read tasks would then fail with "No
module named 'pipeline'". Importing this package before the session is created sets
``PYSPARK_PYTHON`` to this interpreter unless it is already set.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Make ``format("groupwire")`` available on ``spark`` (reads, streams and writes)."""
    from groupwire.pipeline.source import GroupwireDataSource

    worker_python = getattr(spark.sparkContext, "pythonExec", None)
    if (worker_python not in (None, sys.executable)
            and (spark.sparkContext.master or "").startswith("local")):
        warnings.warn(
            f"Spark's Python workers run {worker_python!r}, not {sys.executable!r}: unless "
            "groupwire is installed there too, reads fail with \"No module named "
            "'pipeline'\". Import pipeline (or set PYSPARK_PYTHON) before creating the "
            "session.", RuntimeWarning, stacklevel=2)
    spark.dataSource.register(GroupwireDataSource)
