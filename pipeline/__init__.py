"""PySpark data source `groupwire` and the rebalance-report job (the `spark` extra).

``groupwire.pipeline.register(spark)`` makes ``format("groupwire")`` available on a
session. Importing this package needs no pyspark: ``register`` lives in
:mod:`groupwire.pipeline.source`, which needs it, and is looked up there on first use.

Spark's Python workers run ``$PYSPARK_PYTHON`` (``python3`` when unset), which is often
not the interpreter groupwire is installed in: the read tasks would then fail with "No
module named 'groupwire'". Importing this package before the session is created sets
``PYSPARK_PYTHON`` to this interpreter unless it is already set.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

if TYPE_CHECKING:
    from groupwire.pipeline.source import register

__all__ = ["register"]


def __getattr__(name: str) -> Any:
    # pyspark is optional (the spark extra): the module that needs it loads on first use,
    # so that `import groupwire.pipeline` works without it
    if name != "register":
        raise AttributeError(f"module 'groupwire.pipeline' has no attribute {name!r}")
    value = importlib.import_module("groupwire.pipeline.source").register
    globals()[name] = value
    return value
