"""The group APIs, and the offset lookups consumers make, through the Kafka door.

Each Kafka request becomes the msgpack door's request of the same name, so the
coordinator, the authorizer and the log see one protocol; its answer is put back into
the Kafka response's shape for the version asked. Where the two differ:

- A field a version lacks takes Kafka's default: JoinGroup v0's rebalance timeout is its
  session timeout (Kafka's rule), OffsetForLeaderEpoch before v3 is a consumer's
  (``replica_id`` -1), a group instance id is null before its version.
- JoinGroup below v4 predates KIP-394, and its clients do not know MEMBER_ID_REQUIRED,
  which the coordinator always answers a first dynamic join with: the door joins again
  at once with the id handed out (``Dispatch``), as Kafka's broker would have added the
  member directly. A static leader told to skip its assignment (KIP-814, v9) is, below
  v9, told nothing of the members and not named leader, which makes it a follower, as
  Kafka's broker does for those versions.
- groupwire answers some refusals (INVALID_REQUEST, GROUP_AUTHORIZATION_FAILED,
  NOT_COORDINATOR...) with one top-level code; a Kafka response that has room for errors
  only per group, member or partition gets it on every entry the request named.
- Codes of groupwire's own become Kafka's (``kafka_code``), and what only groupwire has
  never reaches a Kafka client: a Kafka heartbeat carries no poll age (``poll_age_ms``
  -1); its ``wait_ms`` is the broker's ``--kafka-heartbeat-hold-ms`` (the connection
  releases a held one when another request follows); DescribeGroups tells no rebalance
  history, generation, leader or heartbeat times. What groupwire does not keep is answered with
  Kafka's "unknown": leader epochs (-1), authorized operations (not given).
- Consumer protocol bytes travel as the clients sent them: JoinGroup metadata,
  SyncGroup assignments and DescribeGroups members are never converted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from groupwire.broker.kafka.translate import (
    Body,
    Dispatch,
    KafkaContext,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Response,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

LIST_OFFSETS: Final = 2
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
OFFSET_FOR_LEADER_EPOCH: Final = 23
DELETE_GROUPS: Final = 42
OFFSET_DELETE: Final = 47

NO_EPOCH: Final = -1
"""Kafka's "no leader epoch known": groupwire keeps none for commits or offset lookups."""
OPERATIONS_NOT_GIVEN: Final = -(1 << 31)
"""DescribeGroups' ``authorized_operations`` when the broker tells none (Kafka's
AUTHORIZED_OPERATIONS_OMITTED): the door has no authorizer to ask."""
_MEMBER_ID_REQUIRED: Final = int(ErrorCode.MEMBER_ID_REQUIRED)
_CONSUMER_REPLICA: Final = -1


def _spread(topics: Iterable[Body], name: str, partitions: str, index: str | None,
            entry: Callable[[int], Body]) -> list[Body]:
    """A top-level refusal where Kafka's answer carries errors per partition only: an
    ``entry(partition)`` for every partition the request's ``topics`` named (``index``
    None: its ``partitions`` are plain indexes)."""
    if index is None:
        return [{name: t[name], "partitions": [entry(p) for p in t[partitions]]}
                for t in topics]
    return [{name: t[name], "partitions": [entry(p[index]) for p in t[partitions]]}
            for t in topics]


def _throttled(ctx: KafkaContext, body: Body, since: int) -> Body:
    """``body`` with ``throttle_time_ms`` 0 (nothing is throttled) from version ``since``."""
    if ctx.api_version >= since:
        body["throttle_time_ms"] = 0
    return body


# --- FindCoordinator (10) -----------------------------------------------------------------


def _find_coordinator_request(ctx: KafkaContext, body: Body) -> Step:
    # v0 finds groups only; from v1 a transactional id's coordinator too (key_type 1),
    # which the broker answers as it answers a group's; other types are its to refuse
    key_type = body["key_type"] if ctx.api_version >= 1 else 0
    return Dispatch(FindCoordinatorRequest(key=body["key"], key_type=key_type))


def _find_coordinator_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, FindCoordinatorResponse)
    # the broker answered with the address of the listener this client came in on
    # (broker.kafka.door): the Kafka listener's
    answer: Body = {"error_code": kafka_code(response.error_code),
                    "node_id": response.node_id, "host": response.host,
                    "port": response.port}
    if ctx.api_version >= 1:
        answer["error_message"] = response.error_message
    return _throttled(ctx, answer, 1)


# --- JoinGroup (11) -----------------------------------------------------------------------


def _join(ctx: KafkaContext, body: Body, member_id: str) -> JoinGroupRequest:
    version = ctx.api_version
    session_timeout_ms = body["session_timeout_ms"]
    return JoinGroupRequest(
        group_id=body["group_id"], member_id=member_id,
        group_instance_id=body["group_instance_id"] if version >= 5 else None,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=body["rebalance_timeout_ms"] if version >= 1 else session_timeout_ms,
        protocol_type=body["protocol_type"],
        protocols=[JoinGroupRequestProtocol(name=p["name"], metadata=bytes(p["metadata"]))
                   for p in body["protocols"]])


def _join_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(_join(ctx, body, body["member_id"]))


def _join_response(ctx: KafkaContext, body: Body, response: Response) -> Body | Step:
    assert isinstance(response, JoinGroupResponse)
    version = ctx.api_version
    if (response.error_code == _MEMBER_ID_REQUIRED and version < 4 and response.member_id
            and not body["member_id"]):
        # KIP-394's round trip, made here: the client gets the second answer
        return Dispatch(_join(ctx, body, response.member_id))
    skip = response.skip_assignment  # below v9 a follower (module docstring)
    members: list[Body] = [] if skip else [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
         "metadata": m.metadata} if version >= 5 else
        {"member_id": m.member_id, "metadata": m.metadata}
        for m in response.members]
    return _throttled(ctx, {
        "error_code": kafka_code(response.error_code),
        "generation_id": response.generation_id,
        "protocol_name": response.protocol_name or "",  # not nullable before v7
        "leader": "" if skip else response.leader,
        "member_id": response.member_id,
        "members": members}, 2)


# --- Heartbeat (12), SyncGroup (14) -------------------------------------------------------


def _instance(ctx: KafkaContext, body: Body, since: int) -> str | None:
    """The group instance id, null in the versions before ``since`` (no static members)."""
    instance: str | None = body["group_instance_id"] if ctx.api_version >= since else None
    return instance


def _heartbeat_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(HeartbeatRequest(
        group_id=body["group_id"], generation_id=body["generation_id"],
        member_id=body["member_id"], group_instance_id=_instance(ctx, body, 3),
        poll_age_ms=-1, wait_ms=ctx.heartbeat_hold_ms))


def _heartbeat_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, HeartbeatResponse)
    return _throttled(ctx, {"error_code": kafka_code(response.error_code)}, 1)


def _sync_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(SyncGroupRequest(
        group_id=body["group_id"], generation_id=body["generation_id"],
        member_id=body["member_id"], group_instance_id=_instance(ctx, body, 3),
        assignments=[SyncGroupRequestAssignment(member_id=a["member_id"],
                                                assignment=bytes(a["assignment"]))
                     for a in body["assignments"]]))


def _sync_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, SyncGroupResponse)
    return _throttled(ctx, {"error_code": kafka_code(response.error_code),
                            "assignment": response.assignment}, 1)


# --- LeaveGroup (13) ----------------------------------------------------------------------


def _leave_request(ctx: KafkaContext, body: Body) -> Step:
    if ctx.api_version < 3:
        members = [MemberIdentity(member_id=body["member_id"])]
    else:
        members = [MemberIdentity(member_id=m["member_id"],
                                  group_instance_id=m["group_instance_id"])
                   for m in body["members"]]
    return Dispatch(LeaveGroupRequest(group_id=body["group_id"], members=members))


def _leave_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, LeaveGroupResponse)
    if ctx.api_version < 3:
        # one member, one code: the request's, else the member's (Kafka's rule)
        code = response.error_code or next(
            (m.error_code for m in response.members if m.error_code), 0)
        return _throttled(ctx, {"error_code": kafka_code(code)}, 1)
    return _throttled(ctx, {
        "error_code": kafka_code(response.error_code),
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "error_code": kafka_code(m.error_code)} for m in response.members]}, 1)


# --- OffsetCommit (8) ---------------------------------------------------------------------


def _commit_request(ctx: KafkaContext, body: Body) -> Step:
    # retention_time_ms (v2-4) and committed_leader_epoch (v6+) have nowhere to go:
    # the broker's retention applies, and no epoch is kept
    return Dispatch(OffsetCommitRequest(
        group_id=body["group_id"], generation_id=body["generation_id_or_member_epoch"],
        member_id=body["member_id"], group_instance_id=_instance(ctx, body, 7),
        topics=[OffsetCommitRequestTopic(name=t["name"], partitions=[
            OffsetCommitRequestPartition(partition_index=p["partition_index"],
                                         committed_offset=p["committed_offset"],
                                         committed_metadata=p["committed_metadata"])
            for p in t["partitions"]]) for t in body["topics"]]))


def _commit_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, OffsetCommitResponse)
    if response.error_code:
        code = kafka_code(response.error_code)
        topics = _spread(body["topics"], "name", "partitions", "partition_index",
                         lambda index: {"partition_index": index, "error_code": code})
    else:
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": kafka_code(p.error_code)}
            for p in t.partitions]} for t in response.topics]
    return _throttled(ctx, {"topics": topics}, 3)


# --- OffsetFetch (9) ----------------------------------------------------------------------


def _fetch_offsets_request(ctx: KafkaContext, body: Body) -> Step:
    topics = body["topics"]
    return Dispatch(OffsetFetchRequest(
        group_id=body["group_id"],
        topics=None if topics is None else [  # null (v2+): every committed partition
            OffsetFetchRequestTopic(name=t["name"], partition_indexes=list(t["partition_indexes"]))
            for t in topics],
        # v7 (KIP-447): a read_committed consumer waits out offsets a transaction holds
        require_stable=bool(body["require_stable"]) if ctx.api_version >= 7 else False))


def _fetched(ctx: KafkaContext, index: int, code: int, offset: int = -1,
             metadata: str = "") -> Body:
    partition: Body = {"partition_index": index, "committed_offset": offset,
                       "metadata": metadata, "error_code": code}
    if ctx.api_version >= 5:
        partition["committed_leader_epoch"] = NO_EPOCH
    return partition


def _fetch_offsets_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, OffsetFetchResponse)
    code = kafka_code(response.error_code)
    if code and ctx.api_version < 2:  # no top-level code yet: on every partition
        return {"topics": _spread(body["topics"] or [], "name", "partition_indexes", None,
                                  lambda index: _fetched(ctx, index, code))}
    topics = [{"name": t.name, "partitions": [
        _fetched(ctx, p.partition_index, kafka_code(p.error_code), p.committed_offset,
                 p.metadata) for p in t.partitions]} for t in response.topics]
    answer: Body = {"topics": topics}
    if ctx.api_version >= 2:
        answer["error_code"] = code
    return _throttled(ctx, answer, 3)


# --- DescribeGroups (15), ListGroups (16), DeleteGroups (42) ------------------------------


def _describe_request(ctx: KafkaContext, body: Body) -> Step:
    # include_authorized_operations (v3+) is answered with "not given"
    return Dispatch(DescribeGroupsRequest(groups=list(body["groups"])))


def _described(ctx: KafkaContext, group: DescribedGroup) -> Body:
    version = ctx.api_version
    answer: Body = {
        "error_code": kafka_code(group.error_code), "group_id": group.group_id,
        "group_state": group.group_state, "protocol_type": group.protocol_type,
        "protocol_data": group.protocol_data,
        "members": [{"member_id": m.member_id, "client_id": m.client_id,
                     "client_host": m.client_host, "member_metadata": m.member_metadata,
                     "member_assignment": m.member_assignment}
                    for m in group.members]}
    if version >= 4:
        for member, m in zip(answer["members"], group.members, strict=True):
            member["group_instance_id"] = m.group_instance_id
    if version >= 3:
        answer["authorized_operations"] = OPERATIONS_NOT_GIVEN
    return answer


def _describe_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DescribeGroupsResponse)
    if response.error_code:
        groups = [DescribedGroup(error_code=response.error_code, group_id=group_id)
                  for group_id in body["groups"]]
    else:
        groups = response.groups
    return _throttled(ctx, {"groups": [_described(ctx, g) for g in groups]}, 1)


def _list_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(ListGroupsRequest())  # states_filter is v4's


def _list_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, ListGroupsResponse)
    return _throttled(ctx, {
        "error_code": kafka_code(response.error_code),
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type}
                   for g in response.groups]}, 1)


def _delete_groups_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(DeleteGroupsRequest(groups_names=list(body["groups_names"])))


def _delete_groups_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DeleteGroupsResponse)
    if response.error_code:
        code = kafka_code(response.error_code)
        results = [{"group_id": g, "error_code": code} for g in body["groups_names"]]
    else:
        results = [{"group_id": r.group_id, "error_code": kafka_code(r.error_code)}
                   for r in response.results]
    return _throttled(ctx, {"results": results}, 0)


# --- OffsetDelete (47) --------------------------------------------------------------------


def _offset_delete_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(OffsetDeleteRequest(group_id=body["group_id"], topics=[
        OffsetDeleteRequestTopic(name=t["name"], partitions=[
            OffsetDeleteRequestPartition(partition_index=p["partition_index"])
            for p in t["partitions"]]) for t in body["topics"]]))


def _offset_delete_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, OffsetDeleteResponse)
    return _throttled(ctx, {
        "error_code": kafka_code(response.error_code),
        "topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": kafka_code(p.error_code)}
            for p in t.partitions]} for t in response.topics]}, 0)


# --- ListOffsets (2) ----------------------------------------------------------------------


def _list_offsets_request(ctx: KafkaContext, body: Body) -> Step:
    # replica_id: a consumer's; isolation_level (v2+): without transactions both levels
    # read the same offsets; current_leader_epoch (v4+) is not checked here
    return Dispatch(ListOffsetsRequest(topics=[
        ListOffsetsTopic(name=t["name"], partitions=[
            ListOffsetsPartition(partition_index=p["partition_index"], timestamp=p["timestamp"])
            for p in t["partitions"]]) for t in body["topics"]]))


def _listed(ctx: KafkaContext, index: int, code: int, timestamp: int = -1,
            offset: int = -1) -> Body:
    partition: Body = {"partition_index": index, "error_code": code,
                       "timestamp": timestamp, "offset": offset}
    if ctx.api_version >= 4:
        partition["leader_epoch"] = NO_EPOCH
    return partition


def _list_offsets_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, ListOffsetsResponse)
    if response.error_code:
        code = kafka_code(response.error_code)
        topics = _spread(body["topics"], "name", "partitions", "partition_index",
                         lambda index: _listed(ctx, index, code))
    else:
        topics = [{"name": t.name, "partitions": [
            _listed(ctx, p.partition_index, kafka_code(p.error_code), p.timestamp, p.offset)
            for p in t.partitions]} for t in response.topics]
    return _throttled(ctx, {"topics": topics}, 2)


# --- OffsetForLeaderEpoch (23) ------------------------------------------------------------


def _epochs_request(ctx: KafkaContext, body: Body) -> Step:
    # v3's replica_id: -2 a consumer, -1 a debugging one, >= 0 a follower (which the
    # broker then treats as one, CLUSTER_ACTION included); before v3 always a consumer
    replica_id: int = body["replica_id"] if ctx.api_version >= 3 else _CONSUMER_REPLICA
    return Dispatch(OffsetsForLeaderEpochRequest(
        replica_id=max(replica_id, _CONSUMER_REPLICA), topics=[
            OffsetForLeaderTopic(topic=t["topic"], partitions=[
                OffsetForLeaderPartition(partition=p["partition"],
                                         current_leader_epoch=p["current_leader_epoch"],
                                         leader_epoch=p["leader_epoch"])
                for p in t["partitions"]]) for t in body["topics"]]))


def _epoch_end(index: int, code: int, leader_epoch: int = -1, end_offset: int = -1) -> Body:
    return {"error_code": code, "partition": index, "leader_epoch": leader_epoch,
            "end_offset": end_offset}


def _epochs_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, OffsetsForLeaderEpochResponse)
    if response.error_code:
        code = kafka_code(response.error_code)
        topics = _spread(body["topics"], "topic", "partitions", "partition",
                         lambda index: _epoch_end(index, code))
    else:
        topics = [{"topic": t.topic, "partitions": [
            _epoch_end(p.partition, kafka_code(p.error_code), p.leader_epoch, p.end_offset)
            for p in t.partitions]} for t in response.topics]
    return _throttled(ctx, {"topics": topics}, 2)


GROUP_TRANSLATORS: dict[int, Translator] = {
    FIND_COORDINATOR: Simple(_find_coordinator_request, _find_coordinator_response),
    JOIN_GROUP: Simple(_join_request, _join_response),
    HEARTBEAT: Simple(_heartbeat_request, _heartbeat_response),
    SYNC_GROUP: Simple(_sync_request, _sync_response),
    LEAVE_GROUP: Simple(_leave_request, _leave_response),
    OFFSET_COMMIT: Simple(_commit_request, _commit_response),
    OFFSET_FETCH: Simple(_fetch_offsets_request, _fetch_offsets_response),
    DESCRIBE_GROUPS: Simple(_describe_request, _describe_response),
    LIST_GROUPS: Simple(_list_request, _list_response),
    DELETE_GROUPS: Simple(_delete_groups_request, _delete_groups_response),
    OFFSET_DELETE: Simple(_offset_delete_request, _offset_delete_response),
    LIST_OFFSETS: Simple(_list_offsets_request, _list_offsets_response),
    OFFSET_FOR_LEADER_EPOCH: Simple(_epochs_request, _epochs_response),
}
"""Kafka api key -> its translator, for the APIs above (every served version of each)."""
