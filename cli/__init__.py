"""The ``groupwire`` command and the tools it drives (demo, chaos, report launcher).

The top layer: it may use the broker, the SDK and the pipeline; nothing imports it.
"""
