"""The rebalance report: ``__group_events`` read through the ``groupwire`` data source,
turned into Parquet tables and a self-contained HTML page
(``python -m groupwire.pipeline.report``)."""
