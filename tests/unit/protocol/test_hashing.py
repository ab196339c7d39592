"""Kafka's hashes: coordinator placement and keyed-record partitioning, against known values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwire.protocol.hashing import (
    coordinator_partition,
    java_hashcode,
    kafka_abs,
    murmur2,
    partition_for_key,
)

# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils).
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([97, 98, 99]), 479470107),
]
# Values from Kafka's implementation quoted by Akka's Murmur2Spec: 1 to 5 bytes, so every
# tail length (1, 2, 3) and a whole 4-byte block are covered.
SHORT_MURMUR2 = [
    (b"1", -1993445489),
    (b"12", 126087238),
    (b"123", -267702483),
    (b"1234", -1614185708),
    (b"12345", -1188365604),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2 + SHORT_MURMUR2)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def _murmur2_by_the_book(data: bytes) -> int:
    """Kafka's Utils.murmur2 step by step (a block at a time, masked after every
    operation), to check the one that reads the blocks at once."""
    mask, m = 0xFFFFFFFF, 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest, tail = length % 4, length - length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


@given(st.binary(max_size=1100))
def test_murmur2_matches_the_step_by_step_form(data: bytes) -> None:
    assert murmur2(data) == _murmur2_by_the_book(data)


@pytest.mark.parametrize("length", [3, 4, 255, 256, 257, 259, 260, 1027])
def test_murmur2_either_side_of_the_cached_block_readers(length: int) -> None:
    """Keys past 256 bytes take another block reader than shorter ones."""
    data = bytes((i * 37 + 11) % 256 for i in range(length))
    assert murmur2(data) == _murmur2_by_the_book(data)


def test_partition_for_key_masks_the_sign_bit_then_takes_the_modulus() -> None:
    # murmur2(b"foobar") = -790332482; & 0x7fffffff = 1357151166.
    assert partition_for_key(b"foobar", 10) == 6
    assert partition_for_key(b"foobar", 7) == 1357151166 % 7
    # murmur2(b"abc") = 479470107 is positive and unchanged.
    assert partition_for_key(b"abc", 3) == 479470107 % 3


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_hash_ranges(data: bytes, n: int) -> None:
    assert -(2**31) <= murmur2(data) < 2**31
    assert 0 <= partition_for_key(data, n) < n


@pytest.mark.parametrize(
    ("group", "hashcode", "partition"),
    [
        ("test-group", 627841412, 12),
        ("my-group", -1906497762, 12),
        ("group1", -1237460590, 40),
        ("polygenelubricants", -(2**31), 0),
        ("", 0, 0),
    ],
)
def test_coordinator_partition(group: str, hashcode: int, partition: int) -> None:
    assert java_hashcode(group) == hashcode
    assert coordinator_partition(group) == partition


def test_polygenelubricants_is_not_48() -> None:
    # The naive abs(h % 50) would say 48; Kafka takes Utils.abs first.
    assert abs(java_hashcode("polygenelubricants") % 50) != coordinator_partition(
        "polygenelubricants"
    )


def test_java_hashcode_counts_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in Java: 31 * 0xD83D + 0xDE00.
    assert java_hashcode("\U0001f600") == 31 * 0xD83D + 0xDE00
    assert java_hashcode("é") == 0xE9
    assert java_hashcode("ab") == 31 * 97 + 98


def test_kafka_abs() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_partition_counts_must_be_positive() -> None:
    with pytest.raises(ValueError):
        coordinator_partition("g", 0)
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
