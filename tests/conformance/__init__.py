"""Black-box conformance suite: a running broker checked against docs/protocol.md over raw TCP.

Nothing here imports the project's codec, messages, batches or client: frames, envelopes,
record batches and consumer bins are built by hand from the spec (see ``wire.py``).
"""
