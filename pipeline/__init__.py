"""PySpark data source `groupwire` and the rebalance-report job (the `spark` extra)."""
