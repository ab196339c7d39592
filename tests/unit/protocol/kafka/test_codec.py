"""The Kafka codec's rules, one at a time: headers, compact and nullable types, tagged
fields, defaults, versions not served, zero-copy records, the ApiVersions fallback."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from groupwire.protocol.errors import InvalidMessageError, RemoteProtocolError
from groupwire.protocol.kafka import codec, compiler
from groupwire.protocol.kafka.codec import (
    KafkaCodecError,
    KafkaEncodeError,
    RequestHeader,
    UnsupportedKafkaVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from groupwire.protocol.kafka.spec import Field, Message
from tests.unit.protocol.kafka.conftest import HAVE_KAFKA_PYTHON

# kafka-python 3.0.12 reads its schemas with importlib.resources' legacy functions
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

needs_kafka_python = pytest.mark.skipif(not HAVE_KAFKA_PYTHON,
                                        reason="kafka-python (the dev extra) is not installed")

HEARTBEAT, METADATA, PRODUCE, FETCH, API_VERSIONS = 12, 3, 0, 1, 18
DESCRIBE_CLUSTER, DESCRIBE_SCRAM = 60, 50


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def string(s: str) -> bytes:
    raw = s.encode()
    return i16(len(raw)) + raw


def compact(s: str) -> bytes:
    raw = s.encode()
    return bytes([len(raw) + 1]) + raw


# --- the served table ---------------------------------------------------------------------

BRIEF_TABLE = {
    "ApiVersions": (0, 4), "Metadata": (0, 9), "Produce": (0, 8), "Fetch": (4, 11),
    "ListOffsets": (1, 5), "OffsetCommit": (2, 7), "OffsetFetch": (1, 7),
    "FindCoordinator": (0, 2), "JoinGroup": (0, 5), "Heartbeat": (0, 3), "SyncGroup": (0, 3),
    "LeaveGroup": (0, 3), "DescribeGroups": (0, 4), "ListGroups": (0, 2),
    "CreateTopics": (2, 4), "DeleteTopics": (1, 3), "CreatePartitions": (0, 1),
    "DeleteGroups": (0, 1), "DescribeAcls": (1, 1), "CreateAcls": (1, 1), "DeleteAcls": (1, 1),
    "DescribeConfigs": (1, 3), "AlterConfigs": (0, 1), "InitProducerId": (0, 4),
    "OffsetForLeaderEpoch": (2, 3), "SaslHandshake": (0, 1), "SaslAuthenticate": (0, 1),
    "OffsetDelete": (0, 0), "DescribeUserScramCredentials": (0, 0),
    "AlterUserScramCredentials": (0, 0), "DescribeCluster": (0, 1), "ElectLeaders": (0, 2),
    "AddPartitionsToTxn": (0, 3), "AddOffsetsToTxn": (0, 3), "EndTxn": (0, 3),
    "TxnOffsetCommit": (0, 3), "DescribeTransactions": (0, 0), "ListTransactions": (0, 1),
}


def test_served_table_is_the_one_decided() -> None:
    assert {codec.API_NAMES[k]: v for k, v in codec.SERVED.items()} == BRIEF_TABLE
    assert codec.API_NAMES[0] == "Produce" and codec.API_NAMES[18] == "ApiVersions"
    with pytest.raises(TypeError):
        codec.SERVED[99] = (0, 0)  # type: ignore[index]


def test_flexible_versions_and_header_versions() -> None:
    assert not codec.is_flexible(API_VERSIONS, 2) and codec.is_flexible(API_VERSIONS, 3)
    assert codec.is_flexible(API_VERSIONS, 3, response=True)
    assert codec.is_flexible(DESCRIBE_CLUSTER, 0)
    assert not codec.is_flexible(METADATA, 8) and codec.is_flexible(METADATA, 9)
    assert codec.request_header_version(API_VERSIONS, 3) == 2
    assert codec.request_header_version(HEARTBEAT, 3) == 1
    assert codec.response_header_version(API_VERSIONS, 4) == 0  # always v0
    assert codec.response_header_version(DESCRIBE_CLUSTER, 0) == 1
    assert codec.response_header_version(HEARTBEAT, 3) == 0
    with pytest.raises(ValueError, match="not served"):
        codec.is_flexible(1000, 0)


def test_every_served_codec_compiles() -> None:
    assert codec.compile_all() > 0


# --- headers ------------------------------------------------------------------------------


def test_request_header_v1_worked_example() -> None:
    payload = encode_request(HEARTBEAT, 0, 7, "c", {"group_id": "g", "generation_id": 3,
                                                     "member_id": "m"})
    assert payload == (i16(12) + i16(0) + i32(7) + string("c")
                       + string("g") + i32(3) + string("m"))
    request = decode_request(payload)
    assert request.header == RequestHeader(12, 0, 7, "c")
    assert request.body == {"group_id": "g", "generation_id": 3, "member_id": "m",
                            "group_instance_id": None}


def test_request_header_v2_has_a_plain_client_id_then_tagged_fields() -> None:
    payload = encode_request(DESCRIBE_CLUSTER, 0, 5, "cli", {})
    # the client id keeps its int16 length in header v2; then an empty tag section
    assert payload[:8 + 5 + 1] == i16(60) + i16(0) + i32(5) + string("cli") + b"\x00"
    assert payload[14:] == b"\x00" + b"\x00"  # include_cluster_authorized_operations, tags
    # tagged fields in the header are skipped, whatever they hold
    with_tags = payload[:13] + b"\x02\x00\x03abc\x07\x01z" + payload[14:]
    assert decode_request(with_tags).header == RequestHeader(60, 0, 5, "cli")
    # (a field v0 does not carry holds its default: endpoint_type is v1's)
    assert decode_request(with_tags).body == {"include_cluster_authorized_operations": False,
                                              "endpoint_type": 1}


def test_null_client_id() -> None:
    payload = encode_request(HEARTBEAT, 0, 1, None, {})
    assert payload[8:10] == b"\xff\xff"
    assert decode_request(payload).header.client_id is None


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    body = {"api_keys": [{"api_key": 0, "min_version": 0, "max_version": 8}]}
    payload = encode_response(RequestHeader(API_VERSIONS, 3, 7, "c"), body)
    assert payload == (i32(7) + i16(0) + b"\x02" + i16(0) + i16(0) + i16(8) + b"\x00"
                       + i32(0) + b"\x00")
    correlation_id, decoded = decode_response(API_VERSIONS, 3, payload)
    assert correlation_id == 7 and decoded["api_keys"] == [
        {"api_key": 0, "min_version": 0, "max_version": 8}]


def test_flexible_response_header_v1_carries_tagged_fields() -> None:
    payload = encode_response(RequestHeader(DESCRIBE_CLUSTER, 0, 9, None), {})
    assert payload[:5] == i32(9) + b"\x00"
    # an unknown tag in the response header is skipped
    _, body = decode_response(DESCRIBE_CLUSTER, 0, i32(9) + b"\x01\x05\x02hi" + payload[5:])
    assert body["cluster_id"] == "" and body["controller_id"] == -1


@needs_kafka_python
def test_api_versions_v3_response_reads_in_kafka_python() -> None:
    from kafka.protocol.metadata import ApiVersionsResponse

    body = {"api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in codec.SERVED.items()], "throttle_time_ms": 5}
    payload = encode_response(RequestHeader(API_VERSIONS, 3, 42, None), body)
    theirs = ApiVersionsResponse.decode(payload, version=3, header=True)
    assert theirs.header.correlation_id == 42
    assert [(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys] == [
        (k, lo, hi) for k, (lo, hi) in codec.SERVED.items()]


# --- compact and nullable types -----------------------------------------------------------


def test_compact_nullable_strings() -> None:
    header = RequestHeader(DESCRIBE_CLUSTER, 0, 1, None)
    for value, wire in ((None, b"\x00"), ("", b"\x01"), ("ab", b"\x03ab")):
        payload = encode_response(header, {"error_message": value})
        assert payload[5 + 4 + 2: 5 + 4 + 2 + len(wire)] == wire
        assert decode_response(DESCRIBE_CLUSTER, 0, payload)[1]["error_message"] == value


def test_compact_null_string_where_not_nullable_is_refused() -> None:
    good = encode_response(RequestHeader(DESCRIBE_CLUSTER, 0, 1, None), {"cluster_id": "x"})
    at = 5 + 4 + 2 + 1  # after throttle, error code, error_message (null)
    assert good[at:at + 2] == b"\x02x"
    with pytest.raises(KafkaCodecError, match="cluster_id"):
        decode_response(DESCRIBE_CLUSTER, 0, good[:at] + b"\x00" + good[at + 2:])
    with pytest.raises(KafkaEncodeError, match="cluster_id"):
        encode_response(RequestHeader(DESCRIBE_CLUSTER, 0, 1, None), {"cluster_id": None})


def test_null_arrays_legacy_and_compact() -> None:
    none_v1 = encode_request(METADATA, 1, 1, None, {"topics": None})
    assert none_v1[10:] == b"\xff\xff\xff\xff"
    assert decode_request(none_v1).body["topics"] is None
    empty_v1 = encode_request(METADATA, 1, 1, None, {})  # the default: an empty array
    assert empty_v1[10:] == i32(0)
    assert decode_request(empty_v1).body["topics"] == []
    # v0 has no null topics: refused both ways
    with pytest.raises(KafkaEncodeError, match="topics"):
        encode_request(METADATA, 0, 1, None, {"topics": None})
    with pytest.raises(KafkaCodecError, match="topics"):
        decode_request(none_v1[:2] + i16(0) + none_v1[4:])
    # compact: count + 1, 0 for null
    null = encode_request(DESCRIBE_SCRAM, 0, 1, None, {"users": None})
    assert null[11:] == b"\x00\x00"  # users null, top-level tags
    assert decode_request(null).body["users"] is None
    two = encode_request(DESCRIBE_SCRAM, 0, 1, None, {"users": [{"name": "a"}, {"name": "b"}]})
    assert two[11:] == b"\x03" + compact("a") + b"\x00" + compact("b") + b"\x00" + b"\x00"
    assert decode_request(two).body["users"] == [{"name": "a"}, {"name": "b"}]


def test_negative_lengths_other_than_minus_one_are_refused() -> None:
    good = encode_request(METADATA, 1, 1, None, {"topics": [{"name": "t"}]})
    with pytest.raises(KafkaCodecError, match="count -2"):
        decode_request(good[:10] + i32(-2) + good[14:])
    with pytest.raises(KafkaCodecError, match="length -2"):
        decode_request(good[:14] + i16(-2) + good[16:])


# --- tagged fields ------------------------------------------------------------------------


def _api_versions_v3(tags: bytes) -> bytes:
    return i32(1) + i16(0) + b"\x01" + i32(0) + tags


def test_known_tagged_fields_are_decoded_unknown_ones_skipped() -> None:
    epoch = struct.pack(">q", 77)
    features = b"\x02" + compact("f") + i16(1) + i16(3) + b"\x00"
    tags = (b"\x04" + b"\x00" + bytes([len(features)]) + features
            + b"\x01\x08" + epoch
            + b"\x09\x03xyz"  # unknown tag 9: skipped
            + b"\x03\x01\x01")  # zk_migration_ready
    _, body = decode_response(API_VERSIONS, 3, _api_versions_v3(tags))
    assert body["finalized_features_epoch"] == 77
    assert body["supported_features"] == [{"name": "f", "min_version": 1, "max_version": 3}]
    assert body["zk_migration_ready"] is True
    assert body["finalized_features"] == []  # not sent: its default


def test_tagged_fields_not_sent_take_their_defaults() -> None:
    _, body = decode_response(API_VERSIONS, 3, _api_versions_v3(b"\x00"))
    assert body["finalized_features_epoch"] == -1
    assert body["supported_features"] == [] and body["zk_migration_ready"] is False


def test_a_tagged_field_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(KafkaCodecError, match="finalized_features_epoch"):
        decode_response(API_VERSIONS, 3, _api_versions_v3(b"\x01\x01\x09" + bytes(9)))


def test_tagged_fields_are_sent_only_when_not_default() -> None:
    header = RequestHeader(API_VERSIONS, 3, 1, None)
    plain = encode_response(header, {})
    assert plain.endswith(i32(0) + b"\x00")
    same = encode_response(header, {"finalized_features_epoch": -1, "supported_features": [],
                                    "zk_migration_ready": None})
    assert same == plain
    sent = encode_response(header, {"finalized_features_epoch": 5, "zk_migration_ready": True})
    assert sent.endswith(i32(0) + b"\x02" + b"\x01\x08" + struct.pack(">q", 5) + b"\x03\x01\x01")
    assert decode_response(API_VERSIONS, 3, sent)[1]["finalized_features_epoch"] == 5


# --- defaults and versions ----------------------------------------------------------------


def test_missing_keys_take_schema_defaults_on_encode() -> None:
    assert encode_response(RequestHeader(HEARTBEAT, 1, 3, None), {}) == i32(3) + i32(0) + i16(0)
    join = encode_request(11, 1, 1, None, {"group_id": "g", "session_timeout_ms": 10})
    # rebalance_timeout_ms defaults to -1, member_id and protocol_type to "", protocols to []
    assert join[10:] == string("g") + i32(10) + i32(-1) + string("") + string("") + i32(0)
    # a nullable string whose default is null
    produce = encode_request(PRODUCE, 3, 1, None, {"acks": 1})
    assert produce[10:12] == b"\xff\xff"


def test_fields_outside_the_version_are_ignored_on_encode_and_defaulted_on_decode() -> None:
    v0 = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    plain = encode_request(HEARTBEAT, 0, 1, None, v0)
    assert encode_request(HEARTBEAT, 0, 1, None, {**v0, "group_instance_id": "i"}) == plain
    join_v0 = decode_request(encode_request(11, 0, 1, None, {"session_timeout_ms": 5}))
    assert join_v0.body["rebalance_timeout_ms"] == -1  # v1+: its default
    assert join_v0.body["group_instance_id"] is None


def test_produce_v0_to_v2_come_from_the_fields_own_versions() -> None:
    # Kafka 4's schema starts at v3; v0-2 are v3 without the transactional id
    body = {"transactional_id": "tx", "acks": -1, "timeout_ms": 5, "topic_data": []}
    assert encode_request(PRODUCE, 2, 1, None, body)[10:] == i16(-1) + i32(5) + i32(0)
    assert encode_request(PRODUCE, 3, 1, None, body)[10:] == (string("tx") + i16(-1) + i32(5)
                                                               + i32(0))


def test_versions_not_served() -> None:
    for api_key, version in ((API_VERSIONS, 5), (FETCH, 3), (FETCH, 12), (1000, 0)):
        payload = i16(api_key) + i16(version) + i32(77) + string("x") + b"garbage"
        with pytest.raises(UnsupportedKafkaVersion) as info:
            decode_request(payload)
        assert info.value.header == RequestHeader(api_key, version, 77, "x")
        assert info.value.correlation_id == 77
        assert isinstance(info.value, KafkaCodecError | RemoteProtocolError)
        assert codec.read_request_header(payload) == info.value.header
    with pytest.raises(UnsupportedKafkaVersion):
        encode_response(RequestHeader(API_VERSIONS, 5, 1, None), {})
    with pytest.raises(KafkaEncodeError):
        encode_request(FETCH, 3, 1, None, {})
    with pytest.raises(ValueError, match="not served"):
        decode_response(FETCH, 3, i32(1))


def test_read_request_header_accepts_a_memoryview() -> None:
    payload = bytearray(i16(18) + i16(9) + i32(-5) + b"\xff\xff" + b"\x00")
    assert codec.read_request_header(memoryview(payload)) == RequestHeader(18, 9, -5, None)


# --- the ApiVersions fallback -------------------------------------------------------------


def test_api_versions_fallback_is_a_v0_body_with_unsupported_version() -> None:
    payload = codec.encode_api_versions_fallback(12, {18: (0, 4), 0: (0, 8)})
    assert payload == (i32(12) + i16(35) + i32(2) + i16(0) + i16(0) + i16(8)
                       + i16(18) + i16(0) + i16(4))
    correlation_id, body = decode_response(API_VERSIONS, 0, payload)
    assert correlation_id == 12 and body["error_code"] == 35
    assert body["api_keys"][1] == {"api_key": 18, "min_version": 0, "max_version": 4}


@needs_kafka_python
def test_api_versions_fallback_reads_in_kafka_pythons_v0_classes() -> None:
    from kafka.protocol.metadata import ApiVersionsResponse
    from kafka.protocol.old.api_versions import ApiVersionsResponse_v0

    payload = codec.encode_api_versions_fallback(3, codec.SERVED)
    expected = sorted((k, lo, hi) for k, (lo, hi) in codec.SERVED.items())
    theirs = ApiVersionsResponse.decode(payload, version=0, header=True)
    assert theirs.header.correlation_id == 3 and theirs.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in theirs.api_keys] == expected
    old = ApiVersionsResponse_v0.decode(payload[4:])
    assert old.error_code == 35 and [tuple(k) for k in old.api_versions] == expected
    # kafka-python reads a v0 body whenever the error is set, whatever version it asked
    again = ApiVersionsResponse.decode(payload, version=3, header=True)
    assert again.error_code == 35 and len(again.api_keys) == len(expected)


# --- records: not copied ------------------------------------------------------------------


def _produce(records: bytes | memoryview | None) -> dict[str, Any]:
    return {"acks": 1, "timeout_ms": 100, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]}


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda w: w.__name__)
def test_records_are_views_of_the_payload(wrap: Any) -> None:
    blob = bytes(range(256)) * 4096  # 1 MiB
    payload = encode_request(PRODUCE, 3, 1, "c", _produce(blob))
    given = wrap(payload) if wrap is not memoryview else memoryview(bytearray(payload))
    records = decode_request(given).body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and records == blob
    owner = given.obj if isinstance(given, memoryview) else given
    assert records.obj is owner  # a view of what was given: no copy


def test_null_records() -> None:
    payload = encode_request(PRODUCE, 3, 1, None, _produce(None))
    assert payload.endswith(i32(0) + b"\xff\xff\xff\xff")
    body = decode_request(payload).body
    assert body["topic_data"][0]["partition_data"][0]["records"] is None


def test_records_encode_from_any_bytes_like() -> None:
    blob = b"abc" * 10
    as_bytes = encode_request(PRODUCE, 3, 1, None, _produce(blob))
    assert encode_request(PRODUCE, 3, 1, None, _produce(memoryview(blob))) == as_bytes
    assert encode_request(PRODUCE, 3, 1, None, _produce(bytearray(blob))) == as_bytes


def test_with_size() -> None:
    assert codec.with_size(b"abc") == b"\x00\x00\x00\x03abc"
    assert codec.with_size(memoryview(b"ab")) == b"\x00\x00\x00\x02ab"


# --- encode errors ------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "match"), [
    ({"generation_id": 2**31}, "generation_id"),
    ({"group_id": b"bytes"}, "group_id: expected str"),
    ({"group_id": None}, "group_id: null"),
    ({"group_id": "x" * 40000}, "group_id: 40000 bytes"),
    ({"member_id": 5}, "member_id: expected str"),
])
def test_encode_errors_name_the_field(body: dict[str, Any], match: str) -> None:
    with pytest.raises(KafkaEncodeError, match=match) as info:
        encode_request(HEARTBEAT, 0, 1, None, body)
    assert isinstance(info.value, InvalidMessageError)


@pytest.mark.parametrize(("body", "match"), [
    ({"topic_data": "abc"}, "topic_data: expected a list"),
    ({"topic_data": [5]}, r"topic_data\[\]: expected a mapping"),
    (_produce("text"), "records: expected bytes"),  # type: ignore[arg-type]
    ({"acks": "1"}, "acks"),
])
def test_encode_errors_in_nested_values(body: dict[str, Any], match: str) -> None:
    with pytest.raises(KafkaEncodeError, match=match):
        encode_request(PRODUCE, 3, 1, None, body)


def test_a_body_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(KafkaEncodeError, match="expected a mapping"):
        encode_response(RequestHeader(HEARTBEAT, 0, 1, None), [])  # type: ignore[arg-type]
    with pytest.raises(KafkaEncodeError, match="request header"):
        encode_request(HEARTBEAT, 0, 2**31, None, {})


# --- types no served schema has (the compiler handles them all the same) ------------------

SYNTHETIC = Message(1000, "Synthetic", False, (0, 1), 1, (
    Field("id", "uuid", (0, 1), default=bytes(16)),
    Field("ratio", "float64", (0, 1), default=0.0),
    Field("port", "uint16", (0, 1), default=0),
    Field("flags", "int8", (0, 1), array=True, default=()),
    Field("leader", "struct", (0, 1), nullable=(0, 1), default=None, fields=(
        Field("id", "int32", (0, 1), default=-1),
    )),
    Field("epoch", "struct", (1, 1), tag=0, tagged=(1, 1), default=(), fields=(
        Field("end_offset", "int64", (1, 1), default=-1),
        Field("note", "string", (1, 1), nullable=(1, 1), default=None),
    )),
))


def _roundtrip(version: int, body: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    out: list[Any] = []
    compiler.encoder(SYNTHETIC, version)(body, out)
    payload = b"".join(out)
    decoded, pos = compiler.decoder(SYNTHETIC, version)(payload, 0)
    assert pos == len(payload)
    view, pos = compiler.decoder(SYNTHETIC, version, view=True)(memoryview(payload), 0)
    assert view == decoded
    return payload, decoded


def test_uuid_float_uint16_int8_arrays_and_nullable_structs() -> None:
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    body = {"id": ident, "ratio": 0.5, "port": 65535, "flags": [-1, 2],
            "leader": {"id": 7}}
    payload, decoded = _roundtrip(0, body)
    assert payload == (ident.bytes + struct.pack(">d", 0.5) + b"\xff\xff" + i32(2) + b"\xff\x02"
                       + b"\x01" + i32(7))
    assert decoded == {**body, "id": ident.bytes,
                       "epoch": {"end_offset": -1, "note": None}}
    payload, decoded = _roundtrip(0, {"leader": None})
    assert payload.endswith(b"\xff") and decoded["leader"] is None
    assert decoded["id"] == bytes(16) and decoded["flags"] == []


def test_a_tagged_struct() -> None:
    untagged, decoded = _roundtrip(1, {})
    assert untagged.endswith(b"\x01\xff\x00")  # no flags, leader null, no tagged fields
    assert decoded["epoch"] == {"end_offset": -1, "note": None}
    # equal to its default: not sent
    assert _roundtrip(1, {"epoch": {"end_offset": -1}})[0] == untagged
    payload, decoded = _roundtrip(1, {"epoch": {"end_offset": 9, "note": "n"}})
    value = struct.pack(">q", 9) + compact("n") + b"\x00"
    assert payload.endswith(b"\x01" + b"\x00" + bytes([len(value)]) + value)
    assert decoded["epoch"] == {"end_offset": 9, "note": "n"}


def test_a_uuid_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(compiler.Unencodable, match="id: expected 16 bytes"):
        compiler.encoder(SYNTHETIC, 0)({"id": b"short"}, [])
