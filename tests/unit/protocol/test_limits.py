"""protocol.limits: a request's decode work is bounded before it is decoded (issue 14).

Hostile payloads are kept small here (a few hundred KB, over ``SCAN_ABOVE_BYTES``); that
decoding stops early is shown by msgpack never being asked to unpack them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.protocol import envelope
from groupwire.protocol import messages as m
from groupwire.protocol.codec import decode_request, encode_request
from groupwire.protocol.errors import (
    ErrorCode,
    MalformedRequestError,
    UnsupportedRequestError,
)
from groupwire.protocol.limits import (
    MAX_ARRAY_ITEMS,
    MAX_BODY_ITEMS,
    MAX_STRING_BYTES,
    SCAN_ABOVE_BYTES,
    LimitError,
    check_value,
    read_envelope_head,
)

from .message_strategies import msgpack_values

LONG = "g" * 40_000  # over MAX_STRING_BYTES, as in the report (40 KB group id)


def pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def request(api_key: int, body: Any, *, cid: int = 7, client_id: str | None = "c",
            version: int = 0) -> bytes:
    return pack([api_key, version, cid, client_id, body])


def raw_request(api_key: int, body: bytes, *, cid: int = 7) -> bytes:
    """An envelope around hand-made body bytes (fixarray 5, fixints, nil client id)."""
    return bytes((0x95, api_key, 0, cid, 0xC0)) + body


def array32(n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big")


def array16(n: int) -> bytes:
    return b"\xdc" + n.to_bytes(2, "big")


@pytest.fixture
def unpack_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Sizes of the payloads msgpack.unpackb was asked to decode in the test."""
    calls: list[int] = []
    real = msgpack.unpackb

    def spy(data: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(data))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(envelope.msgpack, "unpackb", spy)
    yield calls


def invalid(payload: bytes) -> MalformedRequestError:
    with pytest.raises(MalformedRequestError) as info:
        decode_request(payload)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    return info.value


def test_constants_leave_no_limit_to_unwalked_payloads() -> None:
    # a str of MAX_STRING_BYTES + 1 needs a 3-byte header: it cannot fit unwalked
    assert SCAN_ABOVE_BYTES < MAX_STRING_BYTES + 1 + 3
    assert SCAN_ABOVE_BYTES < MAX_BODY_ITEMS
    assert MAX_ARRAY_ITEMS <= MAX_BODY_ITEMS


# --- the frame: a legal Metadata of many empty arrays ----------------------------


def test_metadata_of_many_empty_arrays_is_refused_before_decoding(
        unpack_calls: list[int]) -> None:
    n = 300_000  # the report had 16.7 million; any count over the limits behaves the same
    payload = raw_request(3, b"\x81\xa6topics" + array32(n) + b"\x90" * n)
    err = invalid(payload)
    assert err.correlation_id == 7 and err.api_key == 3
    assert err.message == (f"topics: request body over the limit of {MAX_BODY_ITEMS} items "
                           "(array elements and map entries)")
    assert unpack_calls == []  # refused from the array's header alone


def test_items_are_counted_across_nesting_levels(unpack_calls: list[int]) -> None:
    inner = array16(10_000) + b"\x90" * 10_000  # each within the per-array limit
    payload = raw_request(3, b"\x81\xa6topics" + array16(30) + inner * 30)
    err = invalid(payload)
    assert err.message.startswith(f"topics[{MAX_BODY_ITEMS // 10_000 - 1}]: request body "
                                  f"over the limit of {MAX_BODY_ITEMS} items")
    assert unpack_calls == []


def test_nils_nested_in_arrays_are_counted_before_built(unpack_calls: list[int]) -> None:
    # msgpack's hooks would only see these arrays once every nil in them was built
    link = array16(10_000) + b"\xc0" * 9_999
    payload = raw_request(3, b"\x81\xa6topics" + link * 40 + b"\xc0")
    err = invalid(payload)
    assert "over the limit of" in err.message and err.message.startswith("topics[9999]")
    assert unpack_calls == []


def test_unknown_keys_count_too(unpack_calls: list[int]) -> None:
    n = MAX_BODY_ITEMS + 1
    body = b"\x82\xa6topics\x90\xa6future" + array32(n) + b"\xc0" * n
    err = invalid(raw_request(3, body))
    assert err.message.startswith("future: request body over the limit")
    assert unpack_calls == []


def test_a_large_request_within_the_limits_decodes() -> None:
    records = b"\x00" * (2 * SCAN_ABOVE_BYTES)
    req = m.ProduceRequest(topic_data=[m.TopicProduceData(
        name="t", partition_data=[m.PartitionProduceData(index=0, records=records)])])
    frame = decode_request(encode_request(3, req))
    assert frame.request == req
    topics = [m.OffsetCommitRequestTopic(name=f"t{i}", partitions=[
        m.OffsetCommitRequestPartition(partition_index=j, committed_offset=j,
                                       committed_metadata="x" * (j % 40))
        for j in range(100)]) for i in range(20)]
    commit = m.OffsetCommitRequest(group_id="g", topics=topics)
    payload = encode_request(4, commit)
    assert len(payload) > SCAN_ABOVE_BYTES
    assert decode_request(payload).request == commit


def test_unknown_keys_within_the_limits_are_still_ignored_when_walked() -> None:
    body = {"group_id": "g", "generation_id": 1, "member_id": "m",
            "future": [{"deep": [[None, True, -1, 2**40, "s", b"b", {}]]}] * 3000}
    payload = request(12, body)
    assert len(payload) > SCAN_ABOVE_BYTES
    assert decode_request(payload).request == m.HeartbeatRequest(
        group_id="g", generation_id=1, member_id="m")


# --- strings ------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "body", "path"), [
    (11, {"group_id": LONG, "member_id": "", "session_timeout_ms": 10_000,
          "rebalance_timeout_ms": 10_000, "protocol_type": "consumer", "protocols": []},
     "group_id"),
    (12, {"group_id": "g", "generation_id": 1, "member_id": LONG}, "member_id"),
    (12, {"group_id": "g", "generation_id": 1, "member_id": "m",
          "group_instance_id": LONG}, "group_instance_id"),
    (13, {"group_id": "g", "members": [{"member_id": "m", "reason": LONG}]},
     "members[0].reason"),
    (11, {"group_id": "g", "member_id": "", "session_timeout_ms": 10_000,
          "rebalance_timeout_ms": 10_000, "protocol_type": "consumer",
          "protocols": [{"name": LONG, "metadata": b""}]}, "protocols[0].name"),
    (8, {"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_metadata": LONG}]}]},
     "topics[0].partitions[0].committed_metadata"),
    (15, {"groups": ["a", LONG]}, "groups[1]"),
    (42, {"groups_names": [LONG]}, "groups_names[0]"),
    (3, {"topics": [{"name": LONG}]}, "topics[0].name"),
    (3, {"topics": [], "unknown": {"deeper": LONG}}, "unknown.deeper"),
])
def test_a_string_over_the_limit_is_refused_naming_its_field(
        api_key: int, body: dict[str, Any], path: str, unpack_calls: list[int]) -> None:
    err = invalid(request(api_key, body, cid=21))
    assert err.correlation_id == 21 and err.api_key == api_key
    assert err.message == f"{path}: string of 40000 bytes over the limit of {MAX_STRING_BYTES}"
    assert unpack_calls == []


def test_a_string_at_the_limit_is_accepted() -> None:
    at = "é" * (MAX_STRING_BYTES // 2)  # counted in UTF-8 bytes, not characters
    req = m.HeartbeatRequest(group_id=at, generation_id=1, member_id="x" * MAX_STRING_BYTES)
    assert decode_request(encode_request(1, req)).request == req
    over = m.HeartbeatRequest(group_id="é" * (MAX_STRING_BYTES // 2 + 1), generation_id=1,
                              member_id="m")
    err = invalid(encode_request(1, over))
    assert err.message == f"group_id: string of {MAX_STRING_BYTES + 1} bytes over the limit " \
                          f"of {MAX_STRING_BYTES}"


def test_a_long_map_key_is_named_as_a_key() -> None:
    err = invalid(request(3, {"topics": [{LONG: 1, "name": "t"}]}))
    assert err.message.startswith("topics[0].(map key): string of 40000 bytes")


def test_a_long_client_id_is_refused_on_its_correlation_id() -> None:
    err = invalid(request(12, {"group_id": "g", "generation_id": 1, "member_id": "m"},
                          cid=9, client_id=LONG))
    assert err.correlation_id == 9
    assert err.message == f"client_id: string of 40000 bytes over the limit of {MAX_STRING_BYTES}"


def test_envelope_checks_come_first() -> None:
    body = {"group_id": LONG}
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(request(99, body, cid=3))
    assert info.value.correlation_id == 3 and "unknown api_key 99" in info.value.message
    with pytest.raises(UnsupportedRequestError):
        decode_request(request(12, body, version=5))
    # ApiVersions of an unknown version is answered in v0 whatever its body (§3)
    frame = decode_request(request(18, {"client_software_name": LONG}, version=9))
    assert frame.request == m.ApiVersionsRequest() and frame.correlation_id == 7


# --- array fields ------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "body", "path"), [
    (3, {"topics": [{"name": "t"}] * (MAX_ARRAY_ITEMS + 1)}, "topics"),
    (15, {"groups": ["g"] * (MAX_ARRAY_ITEMS + 1)}, "groups"),
    (42, {"groups_names": ["g"] * (MAX_ARRAY_ITEMS + 1)}, "groups_names"),
    (9, {"group_id": "g", "topics": [{"name": "t", "partition_indexes":
                                      list(range(MAX_ARRAY_ITEMS + 1))}]},
     "topics[0].partition_indexes"),
    (1, {"topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0}]
                     * (MAX_ARRAY_ITEMS + 1)}]}, "topics[0].partitions"),
])
def test_an_array_field_over_the_limit_is_refused_naming_it(
        api_key: int, body: dict[str, Any], path: str) -> None:
    err = invalid(request(api_key, body))
    assert err.message == f"{path}: {MAX_ARRAY_ITEMS + 1} items over the limit of " \
                          f"{MAX_ARRAY_ITEMS}"


def test_an_array_field_at_the_limit_is_accepted() -> None:
    req = m.DescribeGroupsRequest(groups=[f"g{i}" for i in range(MAX_ARRAY_ITEMS)])
    assert decode_request(encode_request(1, req)).request == req


def test_responses_are_not_limited() -> None:
    # a broker with more than MAX_ARRAY_ITEMS groups lists them all
    from groupwire.protocol.codec import decode_response, encode_response
    resp = m.ListGroupsResponse(groups=[m.ListedGroup(group_id=f"g{i}")
                                        for i in range(MAX_ARRAY_ITEMS + 1)])
    assert decode_response(encode_response(1, resp), m.ListGroupsResponse)[1] == resp


# --- the walk itself ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(msgpack_values, max_size=3), st.binary(max_size=4))
def test_the_walk_ends_where_msgpack_does(values: list[Any], tail: bytes) -> None:
    data = b"".join(pack(v) for v in values) + tail
    pos = 0
    for v in values:
        end = check_value(data, pos)
        assert end == pos + len(pack(v))
        pos = end


@pytest.mark.parametrize("value", [
    0, -1, 2**63 - 1, -(2**63), 1.5, None, True, "", "é" * 300, b"", b"x" * 70_000,
    [], {}, [[[[]]]], {"a": {"b": [1, 2, {"c": None}]}}, msgpack.ExtType(5, b"x" * 300),
    msgpack.ExtType(1, b"1234"), list(range(5000)), {str(i): i for i in range(3000)},
])
def test_the_walk_steps_over_every_kind_of_value(value: Any) -> None:
    data = pack(value) + b"\xc0"
    assert check_value(data, 0) == len(data) - 1


def test_the_walk_leaves_broken_bytes_to_msgpack() -> None:
    assert check_value(b"\x92\x01", 0) == 2  # truncated: not its business
    assert check_value(b"\x92\xc1\x01", 0) == 3  # 0xc1 is never used


def test_the_walk_names_the_path() -> None:
    data = pack({"topics": [{"name": "t", "partitions": [{"x": 1}, {"meta": LONG}]}]})
    with pytest.raises(LimitError) as info:
        check_value(data, 0)
    assert info.value.path == "topics[0].partitions[1].meta"


def test_envelope_head() -> None:
    head = read_envelope_head(request(12, {}, cid=300, client_id="abc"))
    assert head is not None
    assert (head.api_key, head.api_version, head.correlation_id) == (12, 0, 300)
    assert head.client_id_bytes == 3
    head = read_envelope_head(request(12, {}, cid=-5, client_id=None))
    assert head is not None and head.correlation_id == -5 and head.client_id_bytes == -1
    assert read_envelope_head(pack([12, 0, "x", None, {}])) is None
    assert read_envelope_head(pack([12, 0, 1, None])) is None
    assert read_envelope_head(b"") is None


def test_consumer_protocol_bins_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # a JoinGroup's subscription is decoded by the coordinator in "consumer" groups (§6)
    from groupwire.protocol import consumer

    calls: list[int] = []
    real = msgpack.unpackb
    monkeypatch.setattr(consumer.msgpack, "unpackb",
                        lambda data, *a, **k: calls.append(len(data)) or real(data, *a, **k))
    n = 300_000
    data = b"\x81\xa6topics" + array32(n) + b"\x90" * n
    with pytest.raises(consumer.ConsumerProtocolError) as info:
        consumer.decode_subscription(data)
    assert str(info.value) == (f"subscription: topics: request body over the limit of "
                               f"{MAX_BODY_ITEMS} items (array elements and map entries)")
    assert calls == []
    big = consumer.Subscription(topics=[f"t{i}" for i in range(5000)])
    assert consumer.decode_subscription(consumer.encode_subscription(big)) == big
