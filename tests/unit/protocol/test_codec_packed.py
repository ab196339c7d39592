"""Answers around a pre-packed body (the broker's NONE Heartbeat) are byte for byte what
``encode_response`` writes, for every correlation id an envelope can carry."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from groupwire.protocol.codec import (
    decode_response,
    encode_response,
    encode_response_packed,
    frame_response_packed,
    pack_body,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.framing import frame
from groupwire.protocol.messages import HeartbeatResponse, SyncGroupResponse
from groupwire.protocol.types import INT32_RANGE

NONE_BODY = pack_body(HeartbeatResponse())

# every boundary between msgpack int forms, both sides
EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, INT32_RANGE.hi, -1, -32, -33, -128, -129,
         -32768, -32769, INT32_RANGE.lo]


def test_the_none_heartbeat_body_is_the_loadgen_and_protocol_bytes() -> None:
    assert NONE_BODY == b"\x81\xaaerror_code\x00"
    assert pack_body(HeartbeatResponse(error_code=ErrorCode.NONE)) == NONE_BODY


def test_boundary_ids_match_encode_response() -> None:
    for cid in EDGES:
        assert encode_response_packed(cid, NONE_BODY) == encode_response(
            cid, HeartbeatResponse()), cid


@given(st.integers(INT32_RANGE.lo, INT32_RANGE.hi))
def test_any_int32_id_matches_encode_response(cid: int) -> None:
    packed = encode_response_packed(cid, NONE_BODY)
    assert packed == encode_response(cid, HeartbeatResponse())
    assert packed == msgpack.packb([cid, {"error_code": 0}])
    assert decode_response(packed, HeartbeatResponse) == (cid, HeartbeatResponse())


def test_any_constant_body_can_be_wrapped() -> None:
    response = SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    body = pack_body(response)
    for cid in EDGES:
        assert encode_response_packed(cid, body) == encode_response(cid, response)


@given(st.integers(INT32_RANGE.lo, INT32_RANGE.hi) | st.sampled_from(EDGES))
def test_framed_answers_match_frame_of_encode_response(cid: int) -> None:
    assert frame_response_packed(cid, NONE_BODY) == frame(encode_response(
        cid, HeartbeatResponse()))
