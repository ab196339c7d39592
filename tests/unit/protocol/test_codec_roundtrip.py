"""Every request and response type survives encode -> decode, deterministically."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.protocol import messages as m
from groupwire.protocol.bodies import BODY_CODECS
from groupwire.protocol.codec import (
    decode_message,
    decode_request,
    decode_response,
    decode_response_body,
    decode_response_envelope,
    encode_message,
    encode_request,
    encode_response,
    peek_response_correlation_id,
)
from groupwire.protocol.codegen import Generator
from groupwire.protocol.errors import ErrorCode, MalformedRequestError

from .message_strategies import message_strategy

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
cids = st.integers(min_value=-(2**31), max_value=2**31 - 1)
client_ids = st.none() | st.text(max_size=10)


@pytest.mark.parametrize("cls", list(m.REQUEST_TYPES.values()), ids=lambda c: c.__name__)
@FUZZ
@given(data=st.data(), cid=cids, client_id=client_ids)
def test_every_request_round_trips(
    cls: type[m.Request], data: st.DataObject, cid: int, client_id: str | None
) -> None:
    request = data.draw(message_strategy(cls))
    payload = encode_request(cid, request, client_id=client_id)
    frame = decode_request(payload)
    assert frame.request == request
    assert type(frame.request) is cls
    assert (frame.api_key, frame.api_version) == (cls.API_KEY, 0)
    assert (frame.correlation_id, frame.client_id) == (cid, client_id)
    assert encode_request(cid, frame.request, client_id=client_id) == payload


@pytest.mark.parametrize("cls", list(m.RESPONSE_TYPES.values()), ids=lambda c: c.__name__)
@FUZZ
@given(data=st.data(), cid=cids)
def test_every_response_round_trips(cls: type[m.Response], data: st.DataObject, cid: int) -> None:
    response = data.draw(message_strategy(cls))
    payload = encode_response(cid, response)
    assert decode_response(payload, cls) == (cid, response)
    assert peek_response_correlation_id(payload) == cid
    assert encode_response(cid, decode_response(payload, cls)[1]) == payload


@pytest.mark.parametrize("cls", list(m.RESPONSE_TYPES.values()), ids=lambda c: c.__name__)
def test_an_error_pair_alone_decodes_to_defaults(cls: type[m.Response]) -> None:
    payload = msgpack.packb([3, {"error_code": 42}])
    cid, response = decode_response(payload, cls)
    assert cid == 3
    assert response == cls(error_code=42)


def test_heartbeat_request_by_hand() -> None:
    request = m.HeartbeatRequest(
        group_id="g", generation_id=4, member_id="c-1", poll_age_ms=250, wait_ms=3000
    )
    payload = encode_request(17, request, client_id="c")
    assert msgpack.unpackb(payload) == [
        12, 0, 17, "c",
        {"group_id": "g", "generation_id": 4, "member_id": "c-1", "poll_age_ms": 250,
         "wait_ms": 3000},
    ]  # fmt: skip
    assert decode_request(payload).request == request


def test_heartbeat_response_success_is_the_error_code_alone() -> None:
    assert msgpack.unpackb(encode_response(5, m.HeartbeatResponse())) == [5, {"error_code": 0}]


def test_error_message_present_when_set() -> None:
    response = m.HeartbeatResponse(
        error_code=ErrorCode.UNKNOWN_MEMBER_ID, error_message="poll interval expired"
    )
    body = msgpack.unpackb(encode_response(5, response))[1]
    assert body == {"error_code": 25, "error_message": "poll interval expired"}
    assert decode_response(encode_response(5, response), m.HeartbeatResponse)[1] == response


def test_entry_error_message_omitted_only_when_none() -> None:
    response = m.OffsetCommitResponse(
        topics=[
            m.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    m.OffsetCommitResponsePartition(partition_index=0, error_code=1001),
                    m.OffsetCommitResponsePartition(
                        partition_index=1, error_code=1001, error_message="moved"
                    ),
                ],
            )
        ]
    )
    body = msgpack.unpackb(encode_response(1, response))[1]
    assert body["topics"][0]["partitions"] == [
        {"partition_index": 0, "error_code": 1001},
        {"partition_index": 1, "error_code": 1001, "error_message": "moved"},
    ]


def test_request_omits_only_none_valued_fields_whose_default_is_none() -> None:
    fetch = m.FetchRequest(
        topics=[
            m.FetchTopic(topic="t", partitions=[m.FetchPartition(partition=0, fetch_offset=5)])
        ],
        group=m.FetchGroup(group_id="g", member_id="c", generation_id=2),
    )
    body = msgpack.unpackb(encode_request(1, fetch))[4]
    assert list(body) == ["replica_id", "max_wait_ms", "min_bytes", "max_bytes",
                          "isolation_level", "topics",
                          "group"]
    assert body["group"] == {"group_id": "g", "member_id": "c", "generation_id": 2}
    assert body["topics"][0]["partitions"][0] == {
        "partition": 0, "current_leader_epoch": -1, "fetch_offset": 5,
        "partition_max_bytes": 1048576
    }  # fmt: skip
    metadata_all = msgpack.unpackb(encode_request(1, m.MetadataRequest()))[4]
    assert metadata_all == {"allow_auto_topic_creation": True}


def test_describe_groups_response_with_rebalance_history() -> None:
    response = m.DescribeGroupsResponse(
        groups=[
            m.DescribedGroup(
                group_id="billing",
                group_state="Stable",
                protocol_type="consumer",
                protocol_data="range",
                generation_id=2,
                leader_id="c-1",
                members=[m.DescribedGroupMember(member_id="c-1", last_heartbeat_ms=1732250000000)],
                rebalances=[
                    m.Rebalance(
                        generation_id=2,
                        reason="member-joined",
                        started_ms=1732250000000,
                        completed_ms=1732250003000,
                        duration_ms=3000,
                        moved_partitions=[("orders", [0, 1])],
                    )
                ],
            )
        ]
    )
    payload = encode_response(9, response)
    rebalance = msgpack.unpackb(payload)[1]["groups"][0]["rebalances"][0]
    assert rebalance["moved_partitions"] == [["orders", [0, 1]]]
    assert rebalance["detail"] is None  # nil is encoded in success responses
    decoded = decode_response(payload, m.DescribeGroupsResponse)[1]
    assert decoded == response
    assert decoded.groups[0].rebalances[0].moved_partitions == [("orders", [0, 1])]


def test_response_decoder_ignores_future_fields_at_every_level() -> None:
    payload = msgpack.packb(
        [
            4,
            {
                "error_code": 0,
                "new_top_level": [1.5, {"x": None}],
                "api_keys": [{"api_key": 12, "min_version": 0, "max_version": 0, "extra": 1}],
                "max_frame_bytes": 1024,
            },
        ]
    )
    cid, response = decode_response(payload, m.ApiVersionsResponse)
    assert cid == 4
    assert response == m.ApiVersionsResponse(
        api_keys=[m.ApiVersion(api_key=12, min_version=0, max_version=0)], max_frame_bytes=1024
    )


def test_envelope_then_body_in_two_steps() -> None:
    payload = encode_response(77, m.FindCoordinatorResponse(node_id=0, host="h", port=9092))
    cid, body = decode_response_envelope(payload)
    assert cid == 77
    response = decode_response_body(body, m.FindCoordinatorResponse, cid)
    assert (response.node_id, response.host, response.port) == (0, "h", 9092)


def test_encode_and_decode_message_helpers() -> None:
    member = m.MemberIdentity(member_id="c-1", reason="shutdown")
    plain = encode_message(member, request=True)
    assert plain == {"member_id": "c-1", "reason": "shutdown"}
    assert decode_message(m.MemberIdentity, plain) == member
    rebalance = m.Rebalance(reason="member-left", started_ms=1)
    plain_response = encode_message(rebalance)
    assert plain_response["generation_id"] is None
    assert decode_message(m.Rebalance, plain_response) == rebalance


@dataclasses.dataclass(frozen=True)
class _PostInit:
    """Not slotted and with a __post_init__: the codec must run the real __init__."""

    name: str
    seen: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.seen.append(self.name)


def test_classes_with_post_init_are_built_through_init() -> None:
    value = Generator().decoder(_PostInit)({"name": "x"})
    assert value.seen == ["x"]


def test_the_message_helpers_refuse_classes_outside_the_table() -> None:
    with pytest.raises(TypeError, match="_PostInit"):
        decode_message(_PostInit, {"name": "x"})
    with pytest.raises(TypeError, match="_PostInit"):
        encode_message(_PostInit(name="x"))


def test_the_codec_table_is_complete_and_read_only() -> None:
    for cls in m.REQUEST_TYPES.values():
        assert cls in BODY_CODECS.decoders and cls in BODY_CODECS.request_encoders
    for cls in m.RESPONSE_TYPES.values():
        assert cls in BODY_CODECS.decoders and cls in BODY_CODECS.response_encoders
    table: Any = BODY_CODECS.decoders
    with pytest.raises(TypeError):
        table[_PostInit] = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        BODY_CODECS.decoders = {}  # type: ignore[misc]


def test_decoded_default_lists_are_not_shared() -> None:
    a: Any = decode_message(m.JoinGroupResponse, {})
    b: Any = decode_message(m.JoinGroupResponse, {})
    assert a.members == [] and a.members is not b.members


# --- cluster-mode fields (issue 15): older clients leave them out -------------------------


def _decode_old(api_key: int, body: dict[str, Any]) -> m.Request:
    return decode_request(msgpack.packb([api_key, 0, 5, "old", body], use_bin_type=True)).request


def test_an_old_produce_decodes_to_acks_all_and_the_default_timeout() -> None:
    request = _decode_old(0, {"topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}]})
    assert isinstance(request, m.ProduceRequest)
    assert (request.acks, request.timeout_ms) == (-1, 30000)


def test_an_old_fetch_decodes_as_a_consumer_without_an_epoch_check() -> None:
    request = _decode_old(1, {"topics": [
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 3}]}]})
    assert isinstance(request, m.FetchRequest)
    assert request.replica_id == -1
    assert request.topics[0].partitions[0].current_leader_epoch == -1


def test_an_old_metadata_answer_decodes_to_the_cluster_field_defaults() -> None:
    payload = msgpack.packb([2, {"error_code": 0, "cluster_id": "c",
                                 "brokers": [{"node_id": 0, "host": "h", "port": 1}],
                                 "topics": [{"error_code": 0, "name": "t", "is_internal": False,
                                             "partitions": [{"error_code": 0,
                                                             "partition_index": 0,
                                                             "leader_id": 0}]}]}])
    _, response = decode_response(payload, m.MetadataResponse)
    assert response.controller_id == -1
    assert response.brokers[0].rack is None
    partition = response.topics[0].partitions[0]
    assert (partition.leader_epoch, partition.replica_nodes, partition.isr_nodes,
            partition.offline_replicas) == (-1, [], [], [])


def test_offsets_for_leader_epoch_by_hand() -> None:
    request = m.OffsetsForLeaderEpochRequest(topics=[m.OffsetForLeaderTopic(
        topic="t", partitions=[m.OffsetForLeaderPartition(partition=2, leader_epoch=4)])])
    assert msgpack.unpackb(encode_request(9, request, client_id=None)) == [
        23, 0, 9, None,
        {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 2, "current_leader_epoch": -1, "leader_epoch": 4}]}]},
    ]  # fmt: skip
    assert m.SUPPORTED_VERSIONS[m.ApiKey.OFFSET_FOR_LEADER_EPOCH] == (0, 0)
    with pytest.raises(MalformedRequestError, match=r"topics\[0\].partitions\[0\].leader_epoch"):
        _decode_old(23, {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]})


def test_the_cluster_error_codes_and_their_retriability() -> None:
    expected = {6: True, 8: False, 9: True, 15: True, 19: True, 20: True, 21: False,
                41: True, 74: True, 75: True}
    assert {code: ErrorCode(code).retriable for code in expected} == expected
    assert ErrorCode(21).name == "INVALID_REQUIRED_ACKS"
    assert ErrorCode(6).name == "NOT_LEADER_OR_FOLLOWER"
