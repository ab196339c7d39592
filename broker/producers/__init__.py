"""Idempotent producers' state per partition (KIP-98): Kafka's sequence rules, sans I/O.

The partition log (``broker.storage``) asks :class:`~.state.ProducerStates` whether a
client's batch may be appended, is a retry of one already stored, or is refused, and
tells it every batch it stored (appended, replicated or replayed on recovery). No
clock, no files: times are arguments and snapshots are bytes.
"""
