"""Benchmarks: each module measures one thing and prints figures as JSON lines.

Run one with ``python -m bench.NAME`` from the repository root, all with
``python -m bench.run``. bench/ is not part of the wheel.
"""
