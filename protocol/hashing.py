"""Kafka's hash functions, bit for bit, so placement matches what Kafka users expect.

- Coordinator placement (docs/protocol.md §9): Java ``String.hashCode`` of the group id, then
  Kafka's ``Utils.abs`` (which maps ``-2**31`` to 0) modulo the offsets partitions.
- Keyed records (docs/protocol.md §5.1): Kafka's ``Utils.murmur2`` with its seed, then the
  default partitioner's ``toPositive(hash) % partitions``.

Python ints do not wrap, so every step is masked to 32 bits and the result is read back
as a signed Java ``int``.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "OFFSETS_TOPIC_PARTITIONS",
    "coordinator_partition",
    "java_hashcode",
    "kafka_abs",
    "murmur2",
    "partition_for_key",
]

OFFSETS_TOPIC_PARTITIONS: Final = 50
"""Kafka's ``offsets.topic.num.partitions`` default, fixed when a data dir is created."""

_MASK32: Final = 0xFFFFFFFF
_MURMUR_SEED: Final = 0x9747B28C
_MURMUR_M: Final = 0x5BD1E995
_MURMUR_R: Final = 24
_BLOCKS: Final = tuple(struct.Struct(f"<{n}I") for n in range(65))
"""Readers of n little-endian 4-byte blocks, for keys up to 256 bytes."""


def _to_signed32(x: int) -> int:
    x &= _MASK32
    return x - 0x100000000 if x & 0x80000000 else x


def java_hashcode(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + unit`` over UTF-16 code units, wrapping.

    Characters outside the BMP count as two code units (a surrogate pair), as in Java.
    """
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return _to_signed32(h)


def kafka_abs(x: int) -> int:
    """Kafka's ``Utils.abs``: ``abs`` except that ``-2**31`` (no positive twin) becomes 0."""
    return 0 if x == -(1 << 31) else abs(x)


def coordinator_partition(group_id: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition that holds ``group_id`` (abs first, then mod)."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return kafka_abs(java_hashcode(group_id)) % partitions


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``): a signed 32-bit result.

    The 4-byte blocks are read in one ``struct`` call and each step is masked once: a
    producer hashes every keyed record, so this is its per-record cost in Python.
    """
    length = len(data)
    m = _MURMUR_M
    h = _MURMUR_SEED ^ length
    blocks = length >> 2
    if blocks:
        words = (_BLOCKS[blocks] if blocks < len(_BLOCKS)
                 else struct.Struct(f"<{blocks}I")).unpack_from(data)
        for k in words:
            k = (k * m) & _MASK32
            k = ((k ^ (k >> _MURMUR_R)) * m) & _MASK32
            h = ((h * m) & _MASK32) ^ k
    rest = length & 3
    if rest:
        tail = length - rest
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h = ((h ^ data[tail]) * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % n``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
