"""docs/protocol.md §10's worked example, byte for byte."""

from __future__ import annotations

import msgpack

from groupwire.protocol import messages as m
from groupwire.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from groupwire.protocol.consumer import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from groupwire.protocol.framing import FrameDecoder, frame

MEMBER = "billing-1-0b6e2c1d"
SUBSCRIPTION = encode_subscription(Subscription(topics=["orders"]))
ASSIGNMENT = encode_assignment(Assignment(assigned_partitions=[("orders", [0, 1, 2])]))


def join_frame() -> bytes:
    request = m.JoinGroupRequest(
        group_id="billing",
        member_id="",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        protocol_type="consumer",
        protocols=[m.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)],
        reason="initial join",
    )
    return frame(encode_request(7, request, client_id="billing-1"))


def sync_frame() -> bytes:
    request = m.SyncGroupRequest(
        group_id="billing",
        generation_id=1,
        member_id=MEMBER,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[m.SyncGroupRequestAssignment(member_id=MEMBER, assignment=ASSIGNMENT)],
    )
    return frame(encode_request(9, request, client_id="billing-1"))


def test_subscription_bin_is_69_bytes() -> None:
    assert len(SUBSCRIPTION) == 69
    assert msgpack.unpackb(SUBSCRIPTION) == {
        "topics": ["orders"], "owned_partitions": [], "generation_id": -1,
        "user_data": None, "rack_id": None,
    }  # fmt: skip
    assert list(msgpack.unpackb(SUBSCRIPTION)) == [
        "topics", "owned_partitions", "generation_id", "user_data", "rack_id"
    ]  # fmt: skip


def test_join_group_frame() -> None:
    data = join_frame()
    head = bytes.fromhex("000000ed950b0007a9") + b"billing-1" + b"\x87"
    assert data.startswith(head)
    assert len(data) == 4 + 237
    assert b"\xc4\x45" + SUBSCRIPTION in data
    envelope = msgpack.unpackb(data[4:])
    assert list(envelope[4]) == [
        "group_id", "member_id", "session_timeout_ms", "rebalance_timeout_ms",
        "protocol_type", "protocols", "reason",
    ]  # fmt: skip
    assert envelope[4]["protocols"] == [{"name": "range", "metadata": SUBSCRIPTION}]


def test_sync_group_frame() -> None:
    data = sync_frame()
    assert data.startswith(bytes.fromhex("000000dc950e0009"))
    assert len(data) == 4 + 0xDC
    assert len(ASSIGNMENT) == 45
    assert b"\xc4\x2d" + ASSIGNMENT in data
    body = msgpack.unpackb(data[4:])[4]
    assert list(body) == [
        "group_id", "generation_id", "member_id", "protocol_type", "protocol_name",
        "assignments",
    ]  # fmt: skip
    assert msgpack.unpackb(ASSIGNMENT) == {
        "assigned_partitions": [["orders", [0, 1, 2]]], "user_data": None
    }  # fmt: skip


def test_frames_decode_back_to_the_example() -> None:
    decoder = FrameDecoder()
    payloads = decoder.feed(join_frame() + sync_frame())
    join, sync = (decode_request(p) for p in payloads)
    assert (join.api_key, join.correlation_id, join.client_id) == (11, 7, "billing-1")
    assert isinstance(join.request, m.JoinGroupRequest)
    assert join.request.group_instance_id is None
    assert decode_subscription(join.request.protocols[0].metadata).topics == ["orders"]
    assert isinstance(sync.request, m.SyncGroupRequest)
    owned = decode_assignment(sync.request.assignments[0].assignment).assigned_partitions
    assert owned == [("orders", [0, 1, 2])]


def test_member_id_required_response() -> None:
    response = m.JoinGroupResponse(error_code=79, member_id=MEMBER)
    payload = encode_response(7, response)
    assert payload == msgpack.packb([7, {"error_code": 79, "member_id": MEMBER}])
    assert decode_response(payload, m.JoinGroupResponse) == (7, response)


def test_join_success_response() -> None:
    response = m.JoinGroupResponse(
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=MEMBER,
        member_id=MEMBER,
        members=[m.JoinGroupResponseMember(member_id=MEMBER, metadata=SUBSCRIPTION)],
    )
    expected = [
        8,
        {
            "error_code": 0, "generation_id": 1, "protocol_type": "consumer",
            "protocol_name": "range", "leader": MEMBER, "skip_assignment": False,
            "member_id": MEMBER,
            "members": [{"member_id": MEMBER, "group_instance_id": None, "metadata": SUBSCRIPTION}],
        },
    ]  # fmt: skip
    assert encode_response(8, response) == msgpack.packb(expected, use_bin_type=True)


def test_sync_success_response() -> None:
    response = m.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=ASSIGNMENT
    )
    expected = [
        9,
        {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range",
         "assignment": ASSIGNMENT},
    ]  # fmt: skip
    assert encode_response(9, response) == msgpack.packb(expected, use_bin_type=True)
