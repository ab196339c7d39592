"""``decode_heartbeat``, the broker's Heartbeat fast decoder, never accepts what
``decode_request`` refuses and never reads a field differently: whenever it returns
fields, they are the full decoder's, and it declines everything else."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.protocol import messages as m
from groupwire.protocol.codec import (
    HeartbeatFields,
    decode_heartbeat,
    decode_request,
    encode_request,
)
from groupwire.protocol.errors import ProtocolError

from .message_strategies import message_strategy, msgpack_values

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HB = {"group_id": "g", "generation_id": 1, "member_id": "c-1"}


def pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def full_fields(payload: bytes) -> HeartbeatFields | None:
    """The full decoder's reading of a v0 Heartbeat payload; None if it is not one."""
    try:
        frame = decode_request(payload)
    except ProtocolError:
        return None
    r = frame.request
    if not isinstance(r, m.HeartbeatRequest) or frame.api_version != 0:
        return None
    return (frame.correlation_id, r.group_id, r.generation_id, r.member_id,
            r.group_instance_id, r.poll_age_ms, r.wait_ms)


def agree(payload: bytes) -> HeartbeatFields | None:
    fast = decode_heartbeat(payload)
    if fast is not None:
        assert fast == full_fields(payload)
    return fast


@given(message_strategy(m.HeartbeatRequest), st.integers(-(2**31), 2**31 - 1),
       st.none() | st.text(max_size=5))
@FUZZ
def test_every_valid_heartbeat_is_read_as_the_full_decoder_reads_it(
        request: m.HeartbeatRequest, cid: int, client_id: str | None) -> None:
    payload = encode_request(cid, request, client_id)
    expected = full_fields(payload)
    assert expected is not None
    assert decode_heartbeat(payload) == expected


@pytest.mark.parametrize("body", [
    {**HB, "poll_age_ms": None, "wait_ms": None, "group_instance_id": None},  # defaults
    {**HB, "unknown": [1, {"x": b"y"}]},  # unknown keys ignored
    {**HB, "group_instance_id": "i-1", "poll_age_ms": 5, "wait_ms": 2**31 - 1},
])
def test_accepted_bodies(body: dict[str, Any]) -> None:
    assert agree(pack([12, 0, 7, "c", body])) is not None


@pytest.mark.parametrize("payload", [
    pack([12, 0, 7, "c", {"generation_id": 1, "member_id": "m"}]),  # required field
    pack([12, 0, 7, "c", {**HB, "generation_id": True}]),  # bool is not an int
    pack([12, 0, 7, "c", {**HB, "generation_id": 2**31}]),  # out of range
    pack([12, 0, 7, "c", {**HB, "wait_ms": -2**31 - 1}]),
    pack([12, 0, 7, "c", {**HB, "group_id": b"g"}]),  # bin is not str
    pack([12, 0, 7, "c", {**HB, "group_instance_id": 3}]),
    pack([12, 0, 7, "c", {**HB, 1: 2}]),  # a non-str key
    pack([12, 0, 7, "c", [HB]]),  # body not a map
    pack([12, 0, 7, 5, HB]),  # client id not a str
    pack([12, 0, 2**31, "c", HB]),  # correlation id out of range
    pack([12, 0, 7, "c", HB]) + b"\x00",  # trailing bytes
    pack([12, 0, 7, "c", HB])[:-1],  # truncated
    pack([12, 1, 7, "c", HB]),  # another version
    pack([12, 0, 7, "c", HB, 1]),  # not an array of 5
    pack([13, 0, 7, "c", HB]),  # another api
    encode_request(7, m.LeaveGroupRequest(group_id="g", members=[])),
])
def test_declined_payloads(payload: bytes) -> None:
    assert decode_heartbeat(payload) is None


@given(msgpack_values, st.integers(-(2**31), 2**31))
@FUZZ
def test_random_bodies_never_disagree(body: Any, cid: int) -> None:
    agree(pack([12, 0, cid, "c", body]))
    if isinstance(body, dict):
        agree(pack([12, 0, cid, None, {**HB, **body}]))


@given(st.binary(max_size=48))
@FUZZ
def test_random_bytes_after_the_heartbeat_prefix_never_disagree(tail: bytes) -> None:
    agree(b"\x95\x0c\x00" + tail)
