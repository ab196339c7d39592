"""Bad input: only ProtocolError subclasses escape, with the right class, code and path."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.protocol import messages as m
from groupwire.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from groupwire.protocol.errors import (
    BodyError,
    EnvelopeError,
    ErrorCode,
    LocalProtocolError,
    MalformedRequestError,
    RemoteProtocolError,
    UnsupportedRequestError,
)

from .message_strategies import message_strategy, msgpack_values

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def request(api_key: int, body: Any, *, version: int = 0, cid: int = 5) -> bytes:
    return pack([api_key, version, cid, "client", body])


HEARTBEAT = {"group_id": "g", "generation_id": 1, "member_id": "c-1"}


def invalid(payload: bytes) -> MalformedRequestError:
    with pytest.raises(MalformedRequestError) as info:
        decode_request(payload)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    return info.value


# --- envelope ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (request(12, HEARTBEAT) + b"\x00", "trailing bytes"),
        (request(12, HEARTBEAT)[:-1], "truncated"),
        (b"", "empty"),
        (b"\xc1", "never-used byte"),
        (pack([12, 0, 5, "c"]), "4 items"),
        (pack([12, 0, 5, "c", HEARTBEAT, 0]), "6 items"),
        (pack({"api_key": 12}), "map"),
        (pack([12.0, 0, 5, "c", HEARTBEAT]), "float api key"),
        (pack([12, 0, True, "c", HEARTBEAT]), "bool correlation id"),
        (pack([12, "0", 5, "c", HEARTBEAT]), "str version"),
        (pack([12, 0, 2**31, "c", HEARTBEAT]), "correlation id over int"),
        (pack([12, 0, 5, b"c", HEARTBEAT]), "bin client id"),
        (pack([12, 0, 5, 7, HEARTBEAT]), "int client id"),
        (b"\x95\x0c\x00\x05\xa2\xff\xfe\x80", "bad utf-8 client id"),
    ],
)
def test_envelope_errors(payload: bytes, why: str) -> None:
    with pytest.raises(EnvelopeError):
        decode_request(payload)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\x95\x0c\x00\x05\xc0\xd4\x01\x00", "body: expected map"),
        (b"\x95\x0c\x00\x05\xc0\x81\x01\x02", "body: expected map with str keys"),
    ],
)
def test_ext_body_and_int_keys_are_invalid_request_not_a_closed_connection(
    payload: bytes, why: str
) -> None:
    # docs/protocol.md §2: one msgpack value with a valid envelope is answered, never dropped
    with pytest.raises(MalformedRequestError) as info:
        decode_request(payload)
    assert info.value.message == why
    assert info.value.correlation_id == 5


def test_ext_under_an_unknown_key_is_ignored() -> None:
    body = dict(HEARTBEAT)
    body["future"] = msgpack.ExtType(5, b"x")
    frame = decode_request(pack([12, 0, 5, None, body]))
    assert frame.request == decode_request(pack([12, 0, 5, None, HEARTBEAT])).request


def test_client_id_may_be_nil() -> None:
    frame = decode_request(pack([12, 0, 5, None, HEARTBEAT]))
    assert frame.client_id is None


@pytest.mark.parametrize("key", [4, 21, 1000, -1])
def test_unknown_api_key_is_unsupported_version(key: int) -> None:
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(request(key, {}, cid=99))
    assert info.value.code is ErrorCode.UNSUPPORTED_VERSION
    assert (info.value.correlation_id, info.value.api_key) == (99, key)


def test_unknown_version_is_unsupported_even_with_a_bad_body() -> None:
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(request(12, "not a map", version=1, cid=3))
    assert (info.value.correlation_id, info.value.api_key) == (3, 12)


def test_api_versions_of_any_version_decodes_as_v0() -> None:
    frame = decode_request(request(18, {"client_software_name": "x"}, version=3))
    assert frame.api_version == 3
    assert frame.request == m.ApiVersionsRequest(client_software_name="x")
    # A future version's body we cannot read is not held against it either.
    frame = decode_request(request(18, {"client_software_name": 5}, version=9))
    assert frame.request == m.ApiVersionsRequest()
    # In v0 itself, the body is checked.
    assert invalid(request(18, {"client_software_name": 5})).message == (
        "client_software_name: expected str"
    )


# --- body --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "body: expected map"),
        ({b"x": 1, **HEARTBEAT}, "body: expected map with str keys"),
        ({"generation_id": 1, "member_id": "c"}, "group_id: required"),
        ({**HEARTBEAT, "group_id": None}, "group_id: required"),
        ({**HEARTBEAT, "generation_id": 1.0}, "generation_id: expected int"),
        ({**HEARTBEAT, "generation_id": True}, "generation_id: expected int"),
        ({**HEARTBEAT, "generation_id": 2**31}, "generation_id: out of range for int"),
        ({**HEARTBEAT, "generation_id": -(2**31) - 1}, "generation_id: out of range for int"),
        ({**HEARTBEAT, "member_id": b"c-1"}, "member_id: expected str"),
        ({**HEARTBEAT, "group_instance_id": 3}, "group_instance_id: expected str"),
        ({**HEARTBEAT, "wait_ms": "10"}, "wait_ms: expected int"),
    ],
)
def test_heartbeat_body_errors(body: Any, message: str) -> None:
    error = invalid(request(12, body, cid=41))
    assert error.message == message
    assert (error.correlation_id, error.api_key) == (41, 12)


def fetch_body(offset: Any) -> dict[str, Any]:
    partitions = [{"partition": i, "fetch_offset": 0} for i in range(3)]
    partitions[2]["fetch_offset"] = offset
    return {"topics": [{"topic": "a", "partitions": []}, {"topic": "t", "partitions": partitions}]}


def test_nested_path_names_the_field() -> None:
    assert invalid(request(1, fetch_body("5"))).message == (
        "topics[1].partitions[2].fetch_offset: expected long"
    )
    assert invalid(request(1, fetch_body(2**63))).message == (
        "topics[1].partitions[2].fetch_offset: out of range for long"
    )
    assert invalid(request(1, fetch_body(None))).message == (
        "topics[1].partitions[2].fetch_offset: required"
    )


def test_bool_field_refuses_ints() -> None:
    error = invalid(request(3, {"allow_auto_topic_creation": 1}))
    assert error.message == "allow_auto_topic_creation: expected bool"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"groups": "billing"}, "groups: expected array"),
        ({"groups": ["a", None]}, "groups[1]: expected str"),
        ({"groups": ["a", "b", 3]}, "groups[2]: expected str"),
    ],
)
def test_list_errors(body: Any, message: str) -> None:
    assert invalid(request(15, body)).message == message


def test_bin_field_refuses_str() -> None:
    body = {"topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": "x"}]}]}
    assert invalid(request(0, body)).message == (
        "topic_data[0].partition_data[0].records: expected bin"
    )


def test_unknown_keys_ignored_and_nil_means_default_at_every_level() -> None:
    body = {
        "max_wait_ms": None,
        "future": {"nested": [1.5]},
        "topics": [
            {
                "topic": "t",
                "later": True,
                "partitions": [{"partition": 0, "fetch_offset": 9, "partition_max_bytes": None}],
            }
        ],
        "group": None,
    }
    fetch = decode_request(request(1, body)).request
    assert fetch == m.FetchRequest(
        topics=[m.FetchTopic(topic="t", partitions=[m.FetchPartition(partition=0, fetch_offset=9)])]
    )
    assert isinstance(fetch, m.FetchRequest) and fetch.max_wait_ms == 500


# --- responses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [pack([1]), pack([1, {}, 2]), pack(["1", {}]), pack([2**40, {}]), b"\x92\x01", b""],
)
def test_response_envelope_errors(payload: bytes) -> None:
    with pytest.raises(EnvelopeError):
        decode_response(payload, m.HeartbeatResponse)


def test_response_body_errors_carry_the_correlation_id() -> None:
    with pytest.raises(BodyError) as info:
        decode_response(pack([8, {"error_code": "x"}]), m.HeartbeatResponse)
    assert (info.value.message, info.value.correlation_id) == ("error_code: expected int", 8)
    with pytest.raises(BodyError):
        decode_response(pack([8, [0]]), m.HeartbeatResponse)


def test_encoding_what_cannot_be_packed_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        encode_response(1, m.HeartbeatResponse(error_message=object()))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        encode_request(2**70, m.ApiVersionsRequest())


# --- fuzzing -----------------------------------------------------------------------------


def decodes_or_protocol_error(payload: bytes) -> None:
    """Decoding either succeeds or raises a RemoteProtocolError: anything else fails."""
    with contextlib.suppress(RemoteProtocolError):
        decode_request(payload)
    for response_type in (m.HeartbeatResponse, m.DescribeGroupsResponse, m.FetchResponse):
        with contextlib.suppress(RemoteProtocolError):
            decode_response(payload, response_type)


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes(payload: bytes) -> None:
    decodes_or_protocol_error(payload)


@FUZZ
@given(msgpack_values)
def test_random_msgpack_values(value: Any) -> None:
    decodes_or_protocol_error(pack(value))


@FUZZ
@given(st.sampled_from([*map(int, m.REQUEST_TYPES), 99]), msgpack_values, st.integers(0, 2))
def test_random_bodies_in_valid_envelopes(key: int, body: Any, version: int) -> None:
    try:
        decode_request(pack([key, version, 5, None, body]))
    except BodyError as error:
        assert (error.correlation_id, error.api_key) == (5, key)
        if isinstance(error, UnsupportedRequestError):
            assert key == 99 or (version != 0 and key != m.ApiKey.API_VERSIONS)
        else:
            assert isinstance(error, MalformedRequestError)
            assert version == 0 and ": " in error.message


@FUZZ
@given(
    st.sampled_from(list(m.REQUEST_TYPES.values())).flatmap(message_strategy),
    st.data(),
)
def test_mutated_valid_requests(message: m.Request, data: st.DataObject) -> None:
    payload = bytearray(encode_request(1, message))
    n = len(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, n - 1))
        payload[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, n))
    decodes_or_protocol_error(bytes(payload[:cut]))
    decodes_or_protocol_error(bytes(payload))


@FUZZ
@given(msgpack_values.filter(lambda v: isinstance(v, dict)), st.sampled_from(["topics", "group"]))
def test_random_values_spliced_into_a_fetch(value: Any, key: str) -> None:
    body = fetch_body(0)
    body[key] = value
    try:
        decode_request(request(1, body))
    except MalformedRequestError as error:
        assert error.message.startswith(key)
