"""The group APIs through the Kafka door (``broker.kafka.apis.groups``).

Requests are written by kafka-python 3.0.12's own protocol classes (an encoder nobody
here wrote), read by the door's codec and translated; answers are translated, written by
the codec and read back by kafka-python. So a field named wrongly on either side, put
in a version that lacks it, or left at its default shows as a wrong value here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from groupwire.broker.kafka.apis.groups import GROUP_TRANSLATORS
from groupwire.broker.kafka.translate import Body, Dispatch, KafkaContext
from groupwire.protocol import messages as m
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka import codec, schema
from groupwire.protocol.kafka.codec import RequestHeader
from groupwire.protocol.kafka.spec import Field

E = ErrorCode
Kafka = Any
"""A kafka-python message class (``JoinGroupRequest``), subscriptable by version."""

KEYS = {FindCoordinatorRequest: 10, JoinGroupRequest: 11, HeartbeatRequest: 12,
        LeaveGroupRequest: 13, SyncGroupRequest: 14, DescribeGroupsRequest: 15,
        ListGroupsRequest: 16, DeleteGroupsRequest: 42, OffsetCommitRequest: 8,
        OffsetFetchRequest: 9, ListOffsetsRequest: 2, OffsetForLeaderEpochRequest: 23,
        OffsetDeleteRequest: 47}
ANSWERS = {JoinGroupRequest: JoinGroupResponse, HeartbeatRequest: HeartbeatResponse,
           LeaveGroupRequest: LeaveGroupResponse, SyncGroupRequest: SyncGroupResponse,
           DescribeGroupsRequest: DescribeGroupsResponse, ListGroupsRequest: ListGroupsResponse,
           DeleteGroupsRequest: DeleteGroupsResponse, OffsetCommitRequest: OffsetCommitResponse,
           OffsetFetchRequest: OffsetFetchResponse, ListOffsetsRequest: ListOffsetsResponse,
           OffsetForLeaderEpochRequest: OffsetForLeaderEpochResponse,
           OffsetDeleteRequest: OffsetDeleteResponse,
           FindCoordinatorRequest: FindCoordinatorResponse}


# --- the door, as a Kafka client sees it ---------------------------------------------------


def _kwargs(container: Kafka, values: Body) -> Body:
    """kafka-python's constructor arguments: nested dicts become its struct classes."""
    kwargs: Body = {}
    for name, value in values.items():
        field = container.fields[name]  # KeyError: not one of Kafka's field names
        if value is not None and field.is_struct_array():
            value = [field.data_class(**_kwargs(field.data_class, v)) for v in value]
        kwargs[name] = value
    return kwargs


class Exchange:
    """One request of a Kafka client through the door, and its answers."""

    def __init__(self, cls: Kafka, version: int, fields: Body) -> None:
        message = cls[version](**_kwargs(cls, fields))
        message.with_header(correlation_id=17, client_id="kafka-python")
        decoded = codec.decode_request(message.encode(header=True))
        self.header: RequestHeader = decoded.header
        self.body = decoded.body
        self.version = version
        self.api_key = KEYS[cls]
        self.answer_cls = ANSWERS[cls]
        self.ctx = KafkaContext(api_version=version, client_id="kafka-python",
                                principal="User:ANONYMOUS")
        self.translator = GROUP_TRANSLATORS[self.api_key]
        assert self.header.api_key == self.api_key

    def request(self) -> m.Request:
        step = self.translator.request(self.ctx, self.body)
        assert isinstance(step, Dispatch)
        return step.request

    def step(self, response: m.Response) -> Body | Any:
        return self.translator.response(self.ctx, self.body, response)

    def answer(self, response: m.Response) -> Body:
        """The Kafka body the client reads for the broker's ``response``."""
        body = self.step(response)
        assert isinstance(body, dict), body
        _only_fields_of_the_version(schema.RESPONSES[self.api_key].fields, body, self.version)
        payload = codec.encode_response(self.header, body)
        read = self.answer_cls[self.version].decode(payload, header=True)
        assert read.header.correlation_id == 17
        decoded: Body = read.to_dict(json=False)
        return decoded


def _only_fields_of_the_version(fields: tuple[Field, ...], body: Body, version: int) -> None:
    """Every key the translator wrote is a field this version carries: a misspelt name
    would otherwise be dropped silently by the encoder."""
    by_name = {f.name: f for f in fields}
    for key, value in body.items():
        assert key in by_name and by_name[key].present(version), (key, version)
        field = by_name[key]
        if field.type == "struct" and value is not None:
            for item in value if field.array else [value]:
                _only_fields_of_the_version(field.fields, item, version)


def _codes(body: Any) -> Iterator[int]:
    """Every error code in a Kafka body, at any depth."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "error_code":
                yield value
            else:
                yield from _codes(value)
    elif isinstance(body, list):
        for item in body:
            yield from _codes(item)


# --- sample requests, each API at every served version -------------------------------------

SUB, ASSIGNMENT = b"\x00\x01subscription", b"\x00\x01assignment"
TOPICS = [("t", [0, 1]), ("u", [3])]
"""What the partitioned samples name: three partitions."""


def _join(v: int) -> Body:
    fields: Body = {"group_id": "g", "session_timeout_ms": 10_000, "member_id": "",
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": SUB},
                                  {"name": "roundrobin", "metadata": b"rr"}]}
    if v >= 1:
        fields["rebalance_timeout_ms"] = 45_000
    if v >= 5:
        fields["group_instance_id"] = None
    return fields


def _member(v: int, since: int) -> Body:
    fields: Body = {"group_id": "g", "generation_id": 4, "member_id": "m-1"}
    if v >= since:
        fields["group_instance_id"] = "host-1"
    return fields


def _leave(v: int) -> Body:
    if v < 3:
        return {"group_id": "g", "member_id": "m-1"}
    return {"group_id": "g", "members": [{"member_id": "m-1", "group_instance_id": None},
                                         {"member_id": "", "group_instance_id": "host-2"}]}


def _commit(v: int) -> Body:
    fields: Body = {"group_id": "g", "generation_id_or_member_epoch": 4, "member_id": "m-1",
                    "topics": [{"name": t, "partitions": [
                        {"partition_index": p, "committed_offset": 100 + p,
                         "committed_metadata": None if p else "meta"}
                        | ({"committed_leader_epoch": 9} if v >= 6 else {})
                        for p in ps]} for t, ps in TOPICS]}
    if v <= 4:
        fields["retention_time_ms"] = 86_400_000
    if v >= 7:
        fields["group_instance_id"] = "host-1"
    return fields


def _offset_fetch(v: int) -> Body:
    return {"group_id": "g", "topics": [{"name": t, "partition_indexes": ps}
                                        for t, ps in TOPICS]}


def _list_offsets(v: int) -> Body:
    fields: Body = {"replica_id": -1, "topics": [{"name": t, "partitions": [
        {"partition_index": p, "timestamp": -2 if p else -1}
        | ({"current_leader_epoch": 7} if v >= 4 else {}) for p in ps]} for t, ps in TOPICS]}
    if v >= 2:
        fields["isolation_level"] = 1
    return fields


def _epochs(v: int) -> Body:
    fields: Body = {"topics": [{"topic": t, "partitions": [
        {"partition": p, "current_leader_epoch": 5, "leader_epoch": 4} for p in ps]}
        for t, ps in TOPICS]}
    if v >= 3:
        fields["replica_id"] = -2
    return fields


def _offset_delete(v: int) -> Body:
    return {"group_id": "g", "topics": [{"name": t, "partitions": [
        {"partition_index": p} for p in ps]} for t, ps in TOPICS]}


Sample = tuple[Kafka, Callable[[int], Body], Callable[[int], int]]
ONE: Callable[[int], int] = lambda v: 1  # noqa: E731
SAMPLES: dict[int, Sample] = {
    10: (FindCoordinatorRequest, lambda v: {"key": "g"} | ({"key_type": 0} if v else {}), ONE),
    11: (JoinGroupRequest, _join, ONE),
    12: (HeartbeatRequest, lambda v: _member(v, 3), ONE),
    14: (SyncGroupRequest, lambda v: _member(v, 3) | {"assignments": [
        {"member_id": "m-1", "assignment": ASSIGNMENT}]}, ONE),
    13: (LeaveGroupRequest, _leave, ONE),
    8: (OffsetCommitRequest, _commit, lambda v: 3),
    9: (OffsetFetchRequest, _offset_fetch, lambda v: 3 if v < 2 else 1),
    15: (DescribeGroupsRequest, lambda v: {"groups": ["g", "h"]}
         | ({"include_authorized_operations": True} if v >= 3 else {}), lambda v: 2),
    16: (ListGroupsRequest, lambda v: {}, ONE),
    42: (DeleteGroupsRequest, lambda v: {"groups_names": ["g", "h"]}, lambda v: 2),
    47: (OffsetDeleteRequest, _offset_delete, ONE),
    2: (ListOffsetsRequest, _list_offsets, lambda v: 3),
    23: (OffsetForLeaderEpochRequest, _epochs, lambda v: 3),
}
"""api key -> (kafka-python class, its fields at a version, how many error codes a
top-level refusal becomes in the Kafka answer at that version)."""

EVERY_VERSION = [(key, v) for key in sorted(SAMPLES)
                 for v in range(schema.SERVED[key][0], schema.SERVED[key][1] + 1)]


def exchange(api: int, version: int, **changes: Any) -> Exchange:
    cls, fields, _ = SAMPLES[api]
    return Exchange(cls, version, fields(version) | changes)


def test_every_group_api_is_translated() -> None:
    assert set(GROUP_TRANSLATORS) == set(SAMPLES)
    assert all(key in schema.SERVED for key in GROUP_TRANSLATORS)


@pytest.mark.parametrize(("key", "version"), EVERY_VERSION)
def test_a_top_level_refusal_reaches_every_entry_the_request_named(key: int,
                                                                   version: int) -> None:
    """Where the Kafka answer has a top-level code it carries it; where it has none,
    every group, member or partition the request named does."""
    ex = exchange(key, version)
    request = ex.request()
    refused = m.response_type_for(request)(error_code=E.INVALID_REQUEST, error_message="no")
    codes = list(_codes(ex.answer(refused)))
    assert codes == [E.INVALID_REQUEST] * SAMPLES[key][2](version)


@pytest.mark.parametrize(("key", "version"), EVERY_VERSION)
def test_codes_of_groupwires_own_never_reach_a_kafka_client(key: int, version: int) -> None:
    ex = exchange(key, version)
    request = ex.request()
    fenced = m.response_type_for(request)(error_code=E.PARTITION_NOT_OWNED)
    assert set(_codes(ex.answer(fenced))) == {E.ILLEGAL_GENERATION}


# --- FindCoordinator (10) -----------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2])
def test_find_coordinator(version: int) -> None:
    ex = exchange(10, version)
    assert ex.request() == m.FindCoordinatorRequest(key="g", key_type=0)
    found = ex.answer(m.FindCoordinatorResponse(node_id=3, host="kafka-3", port=9093))
    since_v1 = {"throttle_time_ms": 0, "error_message": None} if version else {}
    assert found == {"error_code": 0, "node_id": 3, "host": "kafka-3", "port": 9093} | since_v1
    none = ex.answer(m.FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE,
                                               error_message="no leader"))
    assert none == {"error_code": 15, "node_id": -1, "host": "", "port": -1} | (
        {"throttle_time_ms": 0, "error_message": "no leader"} if version else {})


def test_find_coordinator_of_a_transaction_is_the_brokers_to_refuse() -> None:
    ex = exchange(10, 1, key="tx", key_type=1)
    assert ex.request() == m.FindCoordinatorRequest(key="tx", key_type=1)
    refused = ex.answer(m.FindCoordinatorResponse(error_code=E.INVALID_REQUEST,
                                                  error_message="key_type: only 0"))
    assert (refused["error_code"], refused["error_message"]) == (42, "key_type: only 0")


# --- JoinGroup (11) -----------------------------------------------------------------------


def _joined(member_id: str = "m-1", **changes: Any) -> m.JoinGroupResponse:
    fields: Body = {"generation_id": 4, "protocol_type": "consumer", "protocol_name": "range",
                    "leader": "m-1", "member_id": member_id, "members": [
                        m.JoinGroupResponseMember(member_id="m-1", group_instance_id="host-1",
                                                  metadata=SUB),
                        m.JoinGroupResponseMember(member_id="m-2", metadata=b"other")]}
    return m.JoinGroupResponse(**(fields | changes))


def test_join_group_v0_rebalances_within_its_session_timeout() -> None:
    ex = exchange(11, 0)
    assert ex.request() == m.JoinGroupRequest(
        group_id="g", member_id="", group_instance_id=None, session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=[
            m.JoinGroupRequestProtocol(name="range", metadata=SUB),
            m.JoinGroupRequestProtocol(name="roundrobin", metadata=b"rr")])
    assert ex.answer(_joined()) == {
        "error_code": 0, "generation_id": 4, "protocol_name": "range", "leader": "m-1",
        "member_id": "m-1", "members": [{"member_id": "m-1", "metadata": SUB},
                                        {"member_id": "m-2", "metadata": b"other"}]}


def test_join_group_v5_carries_the_rebalance_timeout_and_static_membership() -> None:
    ex = exchange(11, 5, member_id="m-1", group_instance_id="host-1")
    request = ex.request()
    assert isinstance(request, m.JoinGroupRequest)
    assert (request.member_id, request.group_instance_id, request.session_timeout_ms,
            request.rebalance_timeout_ms) == ("m-1", "host-1", 10_000, 45_000)
    assert ex.answer(_joined()) == {
        "throttle_time_ms": 0, "error_code": 0, "generation_id": 4, "protocol_name": "range",
        "leader": "m-1", "member_id": "m-1", "members": [
            {"member_id": "m-1", "group_instance_id": "host-1", "metadata": SUB},
            {"member_id": "m-2", "group_instance_id": None, "metadata": b"other"}]}


@pytest.mark.parametrize("version", [0, 3])
def test_join_group_below_v4_never_sees_member_id_required(version: int) -> None:
    ex = exchange(11, version)
    first = ex.request()
    again = ex.step(m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="kp-7"))
    assert isinstance(again, Dispatch) and isinstance(first, m.JoinGroupRequest)
    assert again.request == dataclasses.replace(first, member_id="kp-7")
    assert first.member_id == ""
    # the answer to the join with the id handed out is the one the client gets
    answer = ex.answer(_joined("kp-7", leader="kp-7"))
    assert (answer["error_code"], answer["member_id"], answer["leader"]) == (0, "kp-7", "kp-7")


@pytest.mark.parametrize("version", [4, 5])
def test_join_group_from_v4_passes_member_id_required_through(version: int) -> None:
    ex = exchange(11, version)
    answer = ex.answer(m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="kp-7"))
    assert (answer["error_code"], answer["member_id"]) == (79, "kp-7")


def test_join_group_errors_name_no_protocol() -> None:
    answer = exchange(11, 2).answer(m.JoinGroupResponse(
        error_code=E.INCONSISTENT_GROUP_PROTOCOL))
    assert answer == {"throttle_time_ms": 0, "error_code": 23, "generation_id": -1,
                      "protocol_name": "", "leader": "", "member_id": "", "members": []}


def test_a_returning_static_leader_below_v9_is_told_to_follow() -> None:
    """KIP-814's skip_assignment needs v9: Kafka tells older leaders nothing of the
    members and another leader, so they sync as followers and keep their assignment."""
    ex = exchange(11, 5, group_instance_id="host-1")
    answer = ex.answer(_joined(skip_assignment=True))
    assert (answer["leader"], answer["members"], answer["member_id"]) == ("", [], "m-1")


# --- Heartbeat (12), SyncGroup (14) --------------------------------------------------------


@pytest.mark.parametrize(("version", "hold_ms"), [(0, 0), (3, 0), (0, 2500), (3, 2500)])
def test_heartbeat_has_no_poll_age_and_waits_as_the_door_says(version: int,
                                                               hold_ms: int) -> None:
    ex = exchange(12, version)
    ex.ctx = dataclasses.replace(ex.ctx, heartbeat_hold_ms=hold_ms)
    assert ex.request() == m.HeartbeatRequest(
        group_id="g", generation_id=4, member_id="m-1",
        group_instance_id="host-1" if version >= 3 else None, poll_age_ms=-1,
        wait_ms=hold_ms)
    answer = ex.answer(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    assert answer == {"error_code": 27} | ({"throttle_time_ms": 0} if version else {})


@pytest.mark.parametrize("version", [0, 3])
def test_sync_group_carries_assignments_as_sent(version: int) -> None:
    ex = exchange(14, version)
    assert ex.request() == m.SyncGroupRequest(
        group_id="g", generation_id=4, member_id="m-1",
        group_instance_id="host-1" if version >= 3 else None,
        assignments=[m.SyncGroupRequestAssignment(member_id="m-1", assignment=ASSIGNMENT)])
    answer = ex.answer(m.SyncGroupResponse(protocol_type="consumer", protocol_name="range",
                                           assignment=ASSIGNMENT))
    assert answer == {"error_code": 0, "assignment": ASSIGNMENT} | (
        {"throttle_time_ms": 0} if version else {})


# --- LeaveGroup (13) -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2])
def test_leave_group_before_v3_answers_the_one_members_code(version: int) -> None:
    ex = exchange(13, version)
    assert ex.request() == m.LeaveGroupRequest(group_id="g", members=[
        m.MemberIdentity(member_id="m-1")])
    unknown = ex.answer(m.LeaveGroupResponse(members=[m.LeaveGroupMemberResponse(
        member_id="m-1", error_code=E.UNKNOWN_MEMBER_ID)]))
    throttle = {"throttle_time_ms": 0} if version else {}
    assert unknown == {"error_code": 25} | throttle
    left = ex.answer(m.LeaveGroupResponse(members=[m.LeaveGroupMemberResponse(
        member_id="m-1")]))
    assert left == {"error_code": 0} | throttle


def test_leave_group_v3_answers_per_member_and_as_a_whole() -> None:
    ex = exchange(13, 3)
    assert ex.request() == m.LeaveGroupRequest(group_id="g", members=[
        m.MemberIdentity(member_id="m-1"),
        m.MemberIdentity(member_id="", group_instance_id="host-2")])
    answer = ex.answer(m.LeaveGroupResponse(members=[
        m.LeaveGroupMemberResponse(member_id="m-1"),
        m.LeaveGroupMemberResponse(member_id="", group_instance_id="host-2",
                                   error_code=E.UNKNOWN_MEMBER_ID)]))
    assert answer == {"throttle_time_ms": 0, "error_code": 0, "members": [
        {"member_id": "m-1", "group_instance_id": None, "error_code": 0},
        {"member_id": "", "group_instance_id": "host-2", "error_code": 25}]}
    whole = ex.answer(m.LeaveGroupResponse(error_code=E.NOT_COORDINATOR))
    assert whole == {"throttle_time_ms": 0, "error_code": 16, "members": []}


# --- OffsetCommit (8), OffsetFetch (9) -----------------------------------------------------


def _per_partition(answer: Body) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in answer["topics"] for p in t["partitions"]}


@pytest.mark.parametrize("version", [2, 7])
def test_offset_commit(version: int) -> None:
    ex = exchange(8, version)
    assert ex.request() == m.OffsetCommitRequest(
        group_id="g", generation_id=4, member_id="m-1",
        group_instance_id="host-1" if version >= 7 else None, topics=[
            m.OffsetCommitRequestTopic(name="t", partitions=[
                m.OffsetCommitRequestPartition(partition_index=0, committed_offset=100,
                                               committed_metadata="meta"),
                m.OffsetCommitRequestPartition(partition_index=1, committed_offset=101)]),
            m.OffsetCommitRequestTopic(name="u", partitions=[
                m.OffsetCommitRequestPartition(partition_index=3, committed_offset=103)])])
    answer = ex.answer(m.OffsetCommitResponse(topics=[
        m.OffsetCommitResponseTopic(name="t", partitions=[
            m.OffsetCommitResponsePartition(partition_index=0),
            m.OffsetCommitResponsePartition(partition_index=1,
                                            error_code=E.OFFSET_METADATA_TOO_LARGE)]),
        m.OffsetCommitResponseTopic(name="u", partitions=[
            m.OffsetCommitResponsePartition(partition_index=3,
                                            error_code=E.PARTITION_NOT_OWNED)])]))
    assert _per_partition(answer) == {("t", 0): 0, ("t", 1): 12, ("u", 3): 22}
    assert ("throttle_time_ms" in answer) is (version >= 3)
    refused = ex.answer(m.OffsetCommitResponse(error_code=E.NOT_COORDINATOR))
    assert _per_partition(refused) == {("t", 0): 16, ("t", 1): 16, ("u", 3): 16}


def _committed() -> m.OffsetFetchResponse:
    return m.OffsetFetchResponse(topics=[m.OffsetFetchResponseTopic(name="t", partitions=[
        m.OffsetFetchResponsePartition(partition_index=0, committed_offset=100, metadata="meta"),
        m.OffsetFetchResponsePartition(partition_index=1)])])


def test_offset_fetch_v1_has_errors_per_partition_only() -> None:
    ex = exchange(9, 1)
    assert ex.request() == m.OffsetFetchRequest(group_id="g", topics=[
        m.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1]),
        m.OffsetFetchRequestTopic(name="u", partition_indexes=[3])])
    assert ex.answer(_committed()) == {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 100, "metadata": "meta", "error_code": 0},
        {"partition_index": 1, "committed_offset": -1, "metadata": "", "error_code": 0}]}]}
    refused = ex.answer(m.OffsetFetchResponse(error_code=E.GROUP_AUTHORIZATION_FAILED))
    assert refused == {"topics": [
        {"name": "t", "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": 30}
            for p in (0, 1)]},
        {"name": "u", "partitions": [
            {"partition_index": 3, "committed_offset": -1, "metadata": "", "error_code": 30}]}]}


def test_offset_fetch_v5_of_every_partition_with_a_top_level_code() -> None:
    ex = exchange(9, 5, topics=None)
    assert ex.request() == m.OffsetFetchRequest(group_id="g", topics=None)
    assert ex.answer(_committed()) == {"throttle_time_ms": 0, "error_code": 0, "topics": [
        {"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 100, "committed_leader_epoch": -1,
             "metadata": "meta", "error_code": 0},
            {"partition_index": 1, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": 0}]}]}
    refused = ex.answer(m.OffsetFetchResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS))
    assert refused == {"throttle_time_ms": 0, "error_code": 14, "topics": []}


def test_offset_fetch_v2_names_partitions_when_asked() -> None:
    ex = exchange(9, 2)
    request = ex.request()
    assert isinstance(request, m.OffsetFetchRequest) and request.topics is not None
    assert [(t.name, t.partition_indexes) for t in request.topics] == TOPICS
    assert ex.answer(m.OffsetFetchResponse(error_code=E.NOT_COORDINATOR)) == {
        "error_code": 16, "topics": []}


# --- DescribeGroups (15), ListGroups (16), DeleteGroups (42) -------------------------------


def _described() -> m.DescribeGroupsResponse:
    return m.DescribeGroupsResponse(groups=[
        m.DescribedGroup(group_id="g", group_state="Stable", protocol_type="consumer",
                         protocol_data="range", generation_id=4, leader_id="m-1", members=[
                             m.DescribedGroupMember(
                                 member_id="m-1", group_instance_id="host-1",
                                 client_id="kafka-python", client_host="/10.0.0.1",
                                 member_metadata=SUB, member_assignment=ASSIGNMENT,
                                 last_heartbeat_ms=1234, poll_age_ms=5)],
                         rebalances=[m.Rebalance(reason="member-joined", started_ms=1)]),
        m.DescribedGroup(error_code=E.GROUP_AUTHORIZATION_FAILED, group_id="h")])


@pytest.mark.parametrize("version", [0, 4])
def test_describe_groups_shows_kafkas_fields_only(version: int) -> None:
    ex = exchange(15, version)
    assert ex.request() == m.DescribeGroupsRequest(groups=["g", "h"])
    member: Body = {"member_id": "m-1", "client_id": "kafka-python",
                    "client_host": "/10.0.0.1", "member_metadata": SUB,
                    "member_assignment": ASSIGNMENT}
    since_v3: Body = {"authorized_operations": None} if version >= 3 else {}
    if version >= 4:
        member["group_instance_id"] = "host-1"
    answer = ex.answer(_described())
    assert answer == ({"throttle_time_ms": 0} if version else {}) | {"groups": [
        {"error_code": 0, "group_id": "g", "group_state": "Stable",
         "protocol_type": "consumer", "protocol_data": "range", "members": [member]}
        | since_v3,
        {"error_code": 30, "group_id": "h", "group_state": "", "protocol_type": "",
         "protocol_data": "", "members": []} | since_v3]}


def test_describe_groups_spreads_a_refusal_over_each_group() -> None:
    answer = exchange(15, 2).answer(m.DescribeGroupsResponse(error_code=E.INVALID_REQUEST))
    assert [(g["group_id"], g["error_code"], g["group_state"]) for g in answer["groups"]] == [
        ("g", 42, ""), ("h", 42, "")]


@pytest.mark.parametrize("version", [0, 2])
def test_list_groups(version: int) -> None:
    ex = exchange(16, version)
    assert ex.request() == m.ListGroupsRequest()
    answer = ex.answer(m.ListGroupsResponse(groups=[
        m.ListedGroup(group_id="g", protocol_type="consumer", group_state="Stable"),
        m.ListedGroup(group_id="s", protocol_type="", group_state="Empty")]))
    assert answer == ({"throttle_time_ms": 0} if version else {}) | {
        "error_code": 0, "groups": [{"group_id": "g", "protocol_type": "consumer"},
                                    {"group_id": "s", "protocol_type": ""}]}


@pytest.mark.parametrize("version", [0, 1])
def test_delete_groups(version: int) -> None:
    ex = exchange(42, version)
    assert ex.request() == m.DeleteGroupsRequest(groups_names=["g", "h"])
    answer = ex.answer(m.DeleteGroupsResponse(results=[
        m.DeletableGroupResult(group_id="g"),
        m.DeletableGroupResult(group_id="h", error_code=E.NON_EMPTY_GROUP)]))
    assert answer == {"throttle_time_ms": 0, "results": [
        {"group_id": "g", "error_code": 0}, {"group_id": "h", "error_code": 68}]}
    refused = ex.answer(m.DeleteGroupsResponse(error_code=E.INVALID_REQUEST))
    assert refused["results"] == [{"group_id": "g", "error_code": 42},
                                  {"group_id": "h", "error_code": 42}]


# --- OffsetDelete (47) ---------------------------------------------------------------------


def test_offset_delete() -> None:
    ex = exchange(47, 0)
    assert ex.request() == m.OffsetDeleteRequest(group_id="g", topics=[
        m.OffsetDeleteRequestTopic(name="t", partitions=[
            m.OffsetDeleteRequestPartition(partition_index=0),
            m.OffsetDeleteRequestPartition(partition_index=1)]),
        m.OffsetDeleteRequestTopic(name="u", partitions=[
            m.OffsetDeleteRequestPartition(partition_index=3)])])
    answer = ex.answer(m.OffsetDeleteResponse(topics=[
        m.OffsetDeleteResponseTopic(name="t", partitions=[
            m.OffsetDeleteResponsePartition(partition_index=0,
                                            error_code=E.GROUP_SUBSCRIBED_TO_TOPIC),
            m.OffsetDeleteResponsePartition(partition_index=1,
                                            error_code=E.GROUP_SUBSCRIBED_TO_TOPIC)]),
        m.OffsetDeleteResponseTopic(name="u", partitions=[
            m.OffsetDeleteResponsePartition(partition_index=3)])]))
    assert answer == {"error_code": 0, "throttle_time_ms": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": 86},
                                     {"partition_index": 1, "error_code": 86}]},
        {"name": "u", "partitions": [{"partition_index": 3, "error_code": 0}]}]}
    gone = ex.answer(m.OffsetDeleteResponse(error_code=E.GROUP_ID_NOT_FOUND))
    assert gone == {"error_code": 69, "throttle_time_ms": 0, "topics": []}


# --- ListOffsets (2), OffsetForLeaderEpoch (23) --------------------------------------------


@pytest.mark.parametrize("version", [1, 5])
def test_list_offsets(version: int) -> None:
    ex = exchange(2, version)
    assert ex.request() == m.ListOffsetsRequest(topics=[
        m.ListOffsetsTopic(name="t", partitions=[
            m.ListOffsetsPartition(partition_index=0, timestamp=-1),
            m.ListOffsetsPartition(partition_index=1, timestamp=-2)]),
        m.ListOffsetsTopic(name="u", partitions=[
            m.ListOffsetsPartition(partition_index=3, timestamp=-2)])])
    epoch = {"leader_epoch": -1} if version >= 4 else {}
    answer = ex.answer(m.ListOffsetsResponse(topics=[
        m.ListOffsetsTopicResponse(name="t", partitions=[
            m.ListOffsetsPartitionResponse(partition_index=0, offset=42),
            m.ListOffsetsPartitionResponse(partition_index=1, timestamp=1700, offset=7)])]))
    assert answer == ({"throttle_time_ms": 0} if version >= 2 else {}) | {"topics": [
        {"name": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 42} | epoch,
            {"partition_index": 1, "error_code": 0, "timestamp": 1700, "offset": 7}
            | epoch]}]}
    refused = ex.answer(m.ListOffsetsResponse(error_code=E.INVALID_REQUEST))
    assert refused["topics"][1] == {"name": "u", "partitions": [
        {"partition_index": 3, "error_code": 42, "timestamp": -1, "offset": -1} | epoch]}


@pytest.mark.parametrize(("version", "replica_id", "sent"), [
    (2, None, -1), (3, -2, -1), (3, -1, -1), (3, 4, 4)])
def test_offset_for_leader_epoch(version: int, replica_id: int | None, sent: int) -> None:
    ex = exchange(23, version, **({} if replica_id is None else {"replica_id": replica_id}))
    assert ex.request() == m.OffsetsForLeaderEpochRequest(replica_id=sent, topics=[
        m.OffsetForLeaderTopic(topic=t, partitions=[
            m.OffsetForLeaderPartition(partition=p, current_leader_epoch=5, leader_epoch=4)
            for p in ps]) for t, ps in TOPICS])
    answer = ex.answer(m.OffsetsForLeaderEpochResponse(topics=[
        m.OffsetForLeaderTopicResult(topic="t", partitions=[
            m.EpochEndOffset(partition=0, leader_epoch=4, end_offset=900),
            m.EpochEndOffset(partition=1, error_code=E.FENCED_LEADER_EPOCH)])]))
    assert answer == {"throttle_time_ms": 0, "topics": [{"topic": "t", "partitions": [
        {"error_code": 0, "partition": 0, "leader_epoch": 4, "end_offset": 900},
        {"error_code": 74, "partition": 1, "leader_epoch": -1, "end_offset": -1}]}]}


@pytest.mark.parametrize(("version", "stable"), [(6, False), (7, False), (7, True)])
def test_offset_fetch_v7_asks_for_stable_offsets(version: int, stable: bool) -> None:
    """KIP-447: a read_committed consumer's OffsetFetch (v7) waits out offsets a
    transaction still holds (UNSTABLE_OFFSET_COMMIT, per partition)."""
    changes: dict[str, Any] = {"require_stable": stable} if version >= 7 else {}
    ex = exchange(9, version, **changes)
    request = ex.request()
    assert isinstance(request, m.OffsetFetchRequest) and request.require_stable == stable
    unstable = ex.answer(m.OffsetFetchResponse(topics=[m.OffsetFetchResponseTopic(
        name="t", partitions=[m.OffsetFetchResponsePartition(
            partition_index=0, error_code=E.UNSTABLE_OFFSET_COMMIT)])]))
    assert unstable["topics"][0]["partitions"][0]["error_code"] == 88
