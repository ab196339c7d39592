"""One port, two protocols: which door a connection's first bytes ask for.

Both protocols frame with a 4-byte big-endian length (docs/protocol.md §1, Kafka's
protocol guide). After it, a msgpack envelope starts with an array or map marker
(0x80-0x9f, 0xdc-0xdf), never 0x00; a Kafka request starts with its int16 api key, whose
high byte is 0x00 for every API there is. Five bytes decide (docs/protocol.md §13.1).
"""

from __future__ import annotations

from typing import Final

DECIDING_BYTES: Final = 5
"""The frame length and the first payload byte."""


def refused_by_length(first: bytes, max_frame_bytes: int) -> bool:
    """The length alone is refused by both doors (0, or over the limit): no fifth byte
    is waited for, the connection is refused at once."""
    if len(first) < 4:
        return False
    length = int.from_bytes(first[:4], "big")
    return length == 0 or length > max_frame_bytes


def is_kafka_frame(first: bytes) -> bool:
    """``first`` (at least :data:`DECIDING_BYTES` bytes) opens a Kafka request; fewer
    bytes (a length refused on its own) are left to the msgpack door to refuse."""
    return len(first) >= DECIDING_BYTES and first[4] == 0
