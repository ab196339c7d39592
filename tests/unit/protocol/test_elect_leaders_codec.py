"""ElectLeaders (43) on the wire: its bodies by hand, its defaults, and Kafka's codes."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from groupwire.protocol import messages as m
from groupwire.protocol.codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from groupwire.protocol.errors import ErrorCode, MalformedRequestError


def _decode(body: dict[str, Any]) -> m.Request:
    return decode_request(msgpack.packb([43, 0, 5, "c", body], use_bin_type=True)).request


def test_elect_leaders_request_by_hand() -> None:
    request = m.ElectLeadersRequest(topic_partitions=[
        m.ElectLeadersTopic(topic="t", partitions=[0, 2])], timeout_ms=500)
    assert msgpack.unpackb(encode_request(9, request, client_id=None)) == [
        43, 0, 9, None,
        {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0, 2]}],
         "timeout_ms": 500},
    ]  # fmt: skip
    assert m.SUPPORTED_VERSIONS[m.ApiKey.ELECT_LEADERS] == (0, 0)
    assert m.response_type_for(request) is m.ElectLeadersResponse


def test_an_empty_body_means_a_preferred_election_of_every_partition() -> None:
    request = _decode({})
    assert request == m.ElectLeadersRequest(election_type=0, topic_partitions=None,
                                            timeout_ms=60000)
    # nil is omitted when encoding, so it decodes back to "every partition"
    assert "topic_partitions" not in msgpack.unpackb(
        encode_request(1, request, client_id=None))[4]


def test_a_partition_list_is_required_per_topic() -> None:
    with pytest.raises(MalformedRequestError, match=r"topic_partitions\[0\].partitions"):
        _decode({"topic_partitions": [{"topic": "t"}]})


def test_elect_leaders_response_by_hand() -> None:
    response = m.ElectLeadersResponse(replica_election_results=[m.ReplicaElectionResult(
        topic="t", partition_result=[
            m.PartitionElectionResult(partition_id=0),
            m.PartitionElectionResult(partition_id=1, error_code=84, error_message="led")])])
    payload = encode_response(3, response)
    assert msgpack.unpackb(payload) == [3, {
        "error_code": 0,
        "replica_election_results": [{"topic": "t", "partition_result": [
            {"partition_id": 0, "error_code": 0},
            {"partition_id": 1, "error_code": 84, "error_message": "led"}]}]}]
    assert decode_response(payload, m.ElectLeadersResponse) == (3, response)


def test_the_election_codes_are_kafkas() -> None:
    assert ErrorCode(80).name == "PREFERRED_LEADER_NOT_AVAILABLE"
    assert ErrorCode(84).name == "ELECTION_NOT_NEEDED"
    # Both are InvalidMetadataExceptions in Kafka's client: retriable.
    assert ErrorCode(80).retriable and ErrorCode(84).retriable
