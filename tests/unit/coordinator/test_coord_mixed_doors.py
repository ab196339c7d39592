"""A group does not mix Kafka clients with groupwire SDK members (docs/protocol.md §13.5):
the second kind is refused with INCONSISTENT_GROUP_PROTOCOL and a message, the group
goes on."""

from __future__ import annotations

import struct

from groupwire.protocol.errors import ErrorCode

from .coord_sim import Member, Sim, form_group, sub


def kafka_sub(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 as Kafka's clients write it."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def test_a_kafka_member_cannot_join_a_group_of_sdk_members() -> None:
    sim = Sim()
    sdk = Member(sim, client_id="sdk")
    form_group(sim, [sdk])
    kafka = Member(sim, client_id="rdkafka", protocols=[("range", kafka_sub("t"))])
    answer = kafka.send_join()
    assert answer is not None
    assert answer.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert answer.error_message is not None and "mix" in answer.error_message
    assert sim.state("g") == "Stable"
    assert sdk.hb() == ErrorCode.NONE


def test_an_sdk_member_cannot_join_a_group_of_kafka_members() -> None:
    sim = Sim()
    form_group(sim, [Member(sim, client_id="rdkafka", protocols=[("range", kafka_sub("t"))])])
    answer = Member(sim, client_id="sdk").send_join()
    assert answer is not None and answer.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_members_of_one_kind_join_as_before_and_other_protocol_types_are_opaque() -> None:
    sim = Sim()
    form_group(sim, [Member(sim, client_id=f"k{i}", protocols=[("range", kafka_sub("t"))])
                     for i in range(2)])
    assert len(sim.describe("g").members) == 2
    other = Sim()
    form_group(other, [Member(other, client_id="a", protocol_type="connect",
                              protocols=[("v1", b"\x00\x01")]),
                       Member(other, client_id="b", protocol_type="connect",
                              protocols=[("v1", sub("t"))])])
    assert len(other.describe("g").members) == 2
