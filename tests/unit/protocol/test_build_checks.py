"""Messages check their fields when built (issue 24): a value the wire cannot carry is
refused at once, naming the field, instead of being encoded silently or corrupt."""

from __future__ import annotations

import pytest

from groupwire.protocol import messages as m
from groupwire.protocol.codec import decode_request, encode_request
from groupwire.protocol.errors import ErrorCode, InvalidMessageError, LocalProtocolError


def test_an_int_out_of_its_range_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidMessageError,
                       match=r"HeartbeatRequest.generation_id: 1099511627776 is not a valid "
                             r"int \(out of range\)"):
        m.HeartbeatRequest(group_id="g", generation_id=2**40, member_id="m")
    with pytest.raises(InvalidMessageError, match="committed_offset"):
        m.OffsetCommitRequestPartition(partition_index=0, committed_offset=2**63)


def test_wrong_types_are_refused() -> None:
    with pytest.raises(InvalidMessageError, match="group_id: b'g' is not a valid str"):
        m.HeartbeatRequest(group_id=b"g", generation_id=1,  # type: ignore[arg-type]
                           member_id="m")
    with pytest.raises(InvalidMessageError, match=r"generation_id: True is not a valid int$"):
        m.HeartbeatRequest(group_id="g", generation_id=True, member_id="m")


def test_scalar_list_elements_are_checked() -> None:
    with pytest.raises(InvalidMessageError, match=r"partition_indexes\[\]"):
        m.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 2**31])
    with pytest.raises(InvalidMessageError, match="partition_indexes: 7 is not a valid array"):
        m.OffsetFetchRequestTopic(name="t", partition_indexes=7)  # type: ignore[arg-type]


def test_what_the_encoder_takes_is_accepted() -> None:
    """IntEnum codes are ints; any bytes-like value is bin; None where nullable."""
    assert m.Response(error_code=ErrorCode.NOT_COORDINATOR).error_code == 16
    assert m.SaslAuthenticateRequest(auth_bytes=bytearray(b"x")).auth_bytes == b"x"
    assert m.HeartbeatRequest(group_id="g", generation_id=-1, member_id="",
                              group_instance_id=None).group_instance_id is None


def test_the_error_is_a_local_protocol_error_and_a_value_error() -> None:
    assert issubclass(InvalidMessageError, LocalProtocolError)
    assert issubclass(InvalidMessageError, ValueError)


def test_decoded_messages_round_trip_unchanged() -> None:
    sent = m.HeartbeatRequest(group_id="g", generation_id=2**31 - 1, member_id="m")
    frame = decode_request(encode_request(5, sent))
    assert frame.request == sent
