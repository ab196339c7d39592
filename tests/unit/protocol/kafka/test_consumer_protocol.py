"""The consumer protocol's Kafka bytes (ConsumerProtocolSubscription / Assignment v0-v3)
against kafka-python 3.0.12's own classes, and ``protocol.consumer`` reading them."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from groupwire.protocol.consumer import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.errors import LocalProtocolError
from groupwire.protocol.kafka.consumer_protocol import (
    decode_kafka_assignment,
    decode_kafka_subscription,
    encode_kafka_assignment,
    encode_kafka_subscription,
    is_kafka_consumer_bytes,
)

FULL = Subscription(topics=["orders", "päyments"], owned_partitions=[("orders", [0, 5]),
                                                                    ("päyments", [])],
                    generation_id=12, user_data=b"\x00sticky", rack_id="eu-1a")


def theirs_subscription(version: int, s: Subscription = FULL) -> bytes:
    msg = ConsumerProtocolSubscription(
        version=version, topics=s.topics, user_data=s.user_data,
        owned_partitions=s.owned_partitions, generation_id=s.generation_id,
        rack_id=s.rack_id)
    return bytes(msg.encode(version=version))


def expected_at(version: int, s: Subscription = FULL) -> Subscription:
    return Subscription(topics=s.topics, user_data=s.user_data,
                        owned_partitions=s.owned_partitions if version >= 1 else [],
                        generation_id=s.generation_id if version >= 2 else -1,
                        rack_id=s.rack_id if version >= 3 else None)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscriptions_match_kafka_python_both_ways(version: int) -> None:
    raw = theirs_subscription(version)
    assert decode_kafka_subscription(raw) == expected_at(version)
    assert decode_subscription(raw) == expected_at(version)   # the coordinator's door
    assert encode_kafka_subscription(FULL, version) == raw
    back = ConsumerProtocolSubscription.decode(encode_kafka_subscription(FULL, version))
    assert back.version == version and back.topics == FULL.topics


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignments_match_kafka_python_both_ways(version: int) -> None:
    a = Assignment(assigned_partitions=[("orders", [2, 3]), ("x", [])], user_data=None)
    raw = bytes(ConsumerProtocolAssignment(version=version,
                                           assigned_partitions=a.assigned_partitions,
                                           user_data=None).encode(version=version))
    assert decode_kafka_assignment(raw) == a == decode_assignment(raw)
    assert encode_kafka_assignment(a, version) == raw
    with_data = Assignment(assigned_partitions=[], user_data=b"ud")
    assert decode_assignment(encode_kafka_assignment(with_data)) == with_data


def test_a_later_version_reads_its_known_prefix() -> None:
    v3 = encode_kafka_subscription(FULL, 3)
    v7 = struct.pack(">h", 7) + v3[2:] + b"\x00\x00\x00\x2a" + b"future fields"
    assert decode_subscription(v7) == FULL
    a = encode_kafka_assignment(Assignment([("t", [1])]), 3)
    assert decode_assignment(struct.pack(">h", 300) + a[2:] + b"\xff") == Assignment([("t", [1])])


def test_encoding_an_old_version_leaves_later_fields_out() -> None:
    v0 = encode_kafka_subscription(FULL, 0)
    assert v0 == theirs_subscription(0)
    assert decode_subscription(v0) == Subscription(topics=FULL.topics, user_data=FULL.user_data)


def test_sniffing() -> None:
    assert is_kafka_consumer_bytes(encode_kafka_subscription(FULL))
    assert is_kafka_consumer_bytes(encode_kafka_assignment(Assignment([]), 0))
    assert not is_kafka_consumer_bytes(encode_subscription(FULL))
    assert not is_kafka_consumer_bytes(encode_assignment(Assignment([("t", [0])])))
    assert not is_kafka_consumer_bytes(b"")
    assert not is_kafka_consumer_bytes(b"\x00")
    assert not is_kafka_consumer_bytes("\x00\x00")
    assert decode_subscription(encode_subscription(FULL)) == FULL   # msgpack still reads


@pytest.mark.parametrize("data", [
    b"\x00",                                        # too short to be a version
    b"\x00\x00",                                    # no topics count
    b"\x00\x00\xff\xff\xff\xff",                    # topics null
    b"\x00\x00\x00\x00\x00\x01\xff\xff",            # a null topic
    b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe",    # a topic that is not UTF-8
    b"\x00\x00\x7f\xff\xff\xff" + b"\x00" * 8,      # 2**31-1 topics claimed
    b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xfe",    # user_data length -2
    b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff",    # v1 without owned partitions
])
def test_bad_subscriptions(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


def test_negative_versions_are_refused() -> None:
    raw = struct.pack(">h", -1) + encode_kafka_subscription(FULL)[2:]
    with pytest.raises(ConsumerProtocolError, match="version"):
        decode_kafka_subscription(raw)


@pytest.mark.parametrize(("raw", "decode"), [
    (encode_kafka_subscription(FULL), decode_subscription),
    (encode_kafka_assignment(Assignment([("orders", [0, 1, 2])], b"u")), decode_assignment),
], ids=["subscription", "assignment"])
def test_truncation_at_every_byte(raw: bytes, decode: Callable[[bytes], object]) -> None:
    decode(raw)
    for n in range(len(raw)):
        with pytest.raises(ConsumerProtocolError):
            decode(raw[:n])


def test_encoding_refuses_what_kafka_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError):
        encode_kafka_subscription(FULL, 4)
    with pytest.raises(LocalProtocolError):
        encode_kafka_assignment(Assignment([]), -1)
    with pytest.raises(LocalProtocolError):
        encode_kafka_subscription(Subscription(topics=["x" * 40_000]))
    with pytest.raises(LocalProtocolError):
        encode_kafka_assignment(Assignment([("t", [2**31])]))
    with pytest.raises(LocalProtocolError):
        encode_kafka_subscription(Subscription(topics=[b"t"]))  # type: ignore[list-item]


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=2, max_size=64).map(lambda b: b"\x00" + b[1:]))
def test_garbage_raises_only_consumer_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ConsumerProtocolError):
        decode_subscription(data)
    with contextlib.suppress(ConsumerProtocolError):
        decode_assignment(data)
