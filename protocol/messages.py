"""One frozen dataclass per request and response of docs/protocol.md §4.

Field names and order follow docs/protocol.md. The codec (``protocol.codegen``) walks these
classes' type hints, so the classes *are* the schema: a required request field has no
default; an optional one has docs/protocol.md's default. Response fields default to what a
decoder fills in for an absent field (``[]``, ``-1``, ``""``, ``b""``, ``False``, or
``None`` when nullable), so an error response can be built from the error pair alone.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import field
from typing import ClassVar, TypeVar, dataclass_transform

from groupwire.protocol.fields import build_checker
from groupwire.protocol.frozen import frozen_dataclass
from groupwire.protocol.types import Int32, Int64, TopicPartitions

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def _msg(cls: type[_T]) -> type[_T]:
    """``dataclass(frozen=True, kw_only=True, slots=True)``, spelled so type checkers see
    it, whose instances check their fields when built (:func:`check_when_built`). Made by
    :func:`~groupwire.protocol.frozen.frozen_dataclass`, which writes no code at import."""
    cls.__post_init__ = check_when_built  # type: ignore[attr-defined]
    return frozen_dataclass(cls)


_BUILD_CHECKS: dict[type, Callable[[object], None]] = {}


def check_when_built(message: object) -> None:
    """Refuse a message whose field could not go on the wire as its type says (an int
    out of its range, a str where bytes belong...) when it is built, not as corrupt
    bytes later: ``generation_id=2**40`` raises ``InvalidMessageError`` (a ValueError)
    naming the field. What the decoder builds was checked on the way in and skips this."""
    kind = type(message)
    check = _BUILD_CHECKS.get(kind)
    if check is None:
        check = _BUILD_CHECKS[kind] = build_checker(kind)
    check(message)


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


@_msg
class Request:
    API_KEY: ClassVar[ApiKey]


@_msg
class Response:
    API_KEY: ClassVar[ApiKey]
    error_code: Int32 = 0
    error_message: str | None = None


# --- ApiVersions (18) -------------------------------------------------------------------


@_msg
class ApiVersionsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS
    client_software_name: str = ""
    client_software_version: str = ""


@_msg
class ApiVersion:
    api_key: Int32 = -1
    min_version: Int32 = -1
    max_version: Int32 = -1


@_msg
class ApiVersionsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS
    api_keys: list[ApiVersion] = field(default_factory=list)
    max_frame_bytes: Int32 = -1


# --- Metadata (3) -----------------------------------------------------------------------


@_msg
class MetadataRequestTopic:
    name: str


@_msg
class MetadataRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.METADATA
    topics: list[MetadataRequestTopic] | None = None
    allow_auto_topic_creation: bool = True


@_msg
class MetadataBroker:
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1
    rack: str | None = None


@_msg
class MetadataPartition:
    error_code: Int32 = 0
    error_message: str | None = None
    partition_index: Int32 = -1
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    replica_nodes: list[Int32] = field(default_factory=list)
    isr_nodes: list[Int32] = field(default_factory=list)
    offline_replicas: list[Int32] = field(default_factory=list)


@_msg
class MetadataTopic:
    error_code: Int32 = 0
    error_message: str | None = None
    name: str = ""
    is_internal: bool = False
    partitions: list[MetadataPartition] = field(default_factory=list)


@_msg
class MetadataResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.METADATA
    brokers: list[MetadataBroker] = field(default_factory=list)
    cluster_id: str = ""
    controller_id: Int32 = -1
    topics: list[MetadataTopic] = field(default_factory=list)


# --- CreateTopics (19) ------------------------------------------------------------------


@_msg
class CreatableTopic:
    name: str
    num_partitions: Int32 = -1
    replication_factor: Int32 = -1


@_msg
class CreateTopicsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPICS
    topics: list[CreatableTopic]


@_msg
class CreatableTopicResult:
    name: str = ""
    error_code: Int32 = 0
    error_message: str | None = None
    num_partitions: Int32 = -1
    replication_factor: Int32 = -1


@_msg
class CreateTopicsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPICS
    topics: list[CreatableTopicResult] = field(default_factory=list)


# --- DeleteTopics (20) ------------------------------------------------------------------


@_msg
class DeleteTopicsRequest(Request):
    """Kafka v0-v5's shape: names only (v6's ``topics [{name, topic_id}]`` exists to carry
    topic ids, which this protocol has nowhere). ``timeout_ms`` is accepted for Kafka's
    sake; deletion completes before the answer, so it never runs out."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_TOPICS
    topic_names: list[str]
    timeout_ms: Int32 = 60000


@_msg
class DeletableTopicResult:
    name: str = ""
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class DeleteTopicsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_TOPICS
    responses: list[DeletableTopicResult] = field(default_factory=list)


# --- CreatePartitions (37) --------------------------------------------------------------


@_msg
class CreatePartitionsTopic:
    name: str
    count: Int32


@_msg
class CreatePartitionsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_PARTITIONS
    topics: list[CreatePartitionsTopic]


@_msg
class CreatePartitionsTopicResult:
    name: str = ""
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class CreatePartitionsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_PARTITIONS
    results: list[CreatePartitionsTopicResult] = field(default_factory=list)


# --- Produce (0) ------------------------------------------------------------------------


@_msg
class PartitionProduceData:
    index: Int32
    records: bytes


@_msg
class TopicProduceData:
    name: str
    partition_data: list[PartitionProduceData]


@_msg
class ProduceRequest(Request):
    """``acks`` is 1 or -1 (all); Kafka's 0 gets no answer, and every request here is
    answered, so it is refused (docs/protocol.md §4)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.PRODUCE
    acks: Int32 = -1
    timeout_ms: Int32 = 30000
    topic_data: list[TopicProduceData]
    internal: bool = False
    """ext: a broker forwarding group events to the leader of ``__group_events`` (cluster
    mode); the only way to write an internal topic."""
    transactional_id: str | None = None
    """A transactional producer's id: transactional batches need it (and, with an
    authorizer, WRITE on it), as Kafka's Produce does (docs/protocol.md §5.5)."""


@_msg
class BatchIndexAndErrorMessage:
    batch_index: Int32 = -1
    batch_index_error_message: str | None = None


@_msg
class PartitionProduceResponse:
    index: Int32 = -1
    error_code: Int32 = 0
    error_message: str | None = None
    base_offset: Int64 = -1
    record_errors: list[BatchIndexAndErrorMessage] = field(default_factory=list)


@_msg
class TopicProduceResponse:
    name: str = ""
    partition_responses: list[PartitionProduceResponse] = field(default_factory=list)


@_msg
class ProduceResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.PRODUCE
    responses: list[TopicProduceResponse] = field(default_factory=list)


# --- Fetch (1) --------------------------------------------------------------------------


@_msg
class FetchPartition:
    partition: Int32
    current_leader_epoch: Int32 = -1
    fetch_offset: Int64
    partition_max_bytes: Int32 = 1048576


@_msg
class FetchTopic:
    topic: str
    partitions: list[FetchPartition]


@_msg
class FetchGroup:
    """Group context of a fetch (ext, docs/protocol.md §7.2): enables ownership fencing."""

    group_id: str
    member_id: str
    generation_id: Int32
    group_instance_id: str | None = None


@_msg
class FetchRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH
    replica_id: Int32 = -1
    replica_epoch: Int64 | None = None
    """A follower's broker epoch, the etcd revision of its registration (Kafka's
    ReplicaState.ReplicaEpoch, KIP-903): the leader refuses any other with
    STALE_BROKER_EPOCH. Consumers leave it out."""
    max_wait_ms: Int32 = 500
    min_bytes: Int32 = 1
    max_bytes: Int32 = 52428800
    isolation_level: Int32 = 0
    """0 read_uncommitted, 1 read_committed: records only below the last stable offset
    (docs/protocol.md §5.5)."""
    topics: list[FetchTopic]
    group: FetchGroup | None = None


@_msg
class AbortedTransaction:
    """An aborted transaction a read_committed consumer must skip records of: its
    producer's records from ``first_offset`` up to its abort marker."""

    producer_id: Int64 = -1
    first_offset: Int64 = -1


@_msg
class FetchPartitionData:
    partition_index: Int32 = -1
    error_code: Int32 = 0
    error_message: str | None = None
    high_watermark: Int64 = -1
    last_stable_offset: Int64 = -1
    log_start_offset: Int64 = -1
    aborted_transactions: list[AbortedTransaction] | None = None
    """read_committed only: the aborted transactions the records hold (nil otherwise)."""
    records: bytes = b""


@_msg
class FetchTopicResponse:
    topic: str = ""
    partitions: list[FetchPartitionData] = field(default_factory=list)


@_msg
class FetchResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH
    responses: list[FetchTopicResponse] = field(default_factory=list)


# --- ListOffsets (2) --------------------------------------------------------------------


@_msg
class ListOffsetsPartition:
    partition_index: Int32
    timestamp: Int64


@_msg
class ListOffsetsTopic:
    name: str
    partitions: list[ListOffsetsPartition]


@_msg
class ListOffsetsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_OFFSETS
    topics: list[ListOffsetsTopic]


@_msg
class ListOffsetsPartitionResponse:
    partition_index: Int32 = -1
    error_code: Int32 = 0
    error_message: str | None = None
    timestamp: Int64 = -1
    offset: Int64 = -1


@_msg
class ListOffsetsTopicResponse:
    name: str = ""
    partitions: list[ListOffsetsPartitionResponse] = field(default_factory=list)


@_msg
class ListOffsetsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_OFFSETS
    topics: list[ListOffsetsTopicResponse] = field(default_factory=list)


# --- FindCoordinator (10) ---------------------------------------------------------------


@_msg
class FindCoordinatorRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR
    key: str
    key_type: Int32 = 0


@_msg
class FindCoordinatorResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1


# --- JoinGroup (11) ---------------------------------------------------------------------


@_msg
class JoinGroupRequestProtocol:
    name: str
    metadata: bytes


@_msg
class JoinGroupRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.JOIN_GROUP
    group_id: str
    member_id: str
    group_instance_id: str | None = None
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    protocol_type: str
    protocols: list[JoinGroupRequestProtocol]
    reason: str | None = None


@_msg
class JoinGroupResponseMember:
    member_id: str = ""
    group_instance_id: str | None = None
    metadata: bytes = b""


@_msg
class JoinGroupResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.JOIN_GROUP
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[JoinGroupResponseMember] = field(default_factory=list)


# --- SyncGroup (14) ---------------------------------------------------------------------


@_msg
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes


@_msg
class SyncGroupRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.SYNC_GROUP
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: list[SyncGroupRequestAssignment] = field(default_factory=list)


@_msg
class SyncGroupResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.SYNC_GROUP
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# --- Heartbeat (12) ---------------------------------------------------------------------


@_msg
class HeartbeatRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.HEARTBEAT
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    poll_age_ms: Int32 = -1
    wait_ms: Int32 = 0


@_msg
class HeartbeatResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.HEARTBEAT


# --- LeaveGroup (13) --------------------------------------------------------------------


@_msg
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@_msg
class LeaveGroupRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.LEAVE_GROUP
    group_id: str
    members: list[MemberIdentity]


@_msg
class LeaveGroupMemberResponse:
    member_id: str = ""
    group_instance_id: str | None = None
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class LeaveGroupResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.LEAVE_GROUP
    members: list[LeaveGroupMemberResponse] = field(default_factory=list)


# --- OffsetCommit (8) -------------------------------------------------------------------


@_msg
class OffsetCommitRequestPartition:
    partition_index: Int32
    committed_offset: Int64
    committed_metadata: str | None = None


@_msg
class OffsetCommitRequestTopic:
    name: str
    partitions: list[OffsetCommitRequestPartition]


@_msg
class OffsetCommitRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT
    group_id: str
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[OffsetCommitRequestTopic]


@_msg
class OffsetCommitResponsePartition:
    partition_index: Int32 = -1
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class OffsetCommitResponseTopic:
    name: str = ""
    partitions: list[OffsetCommitResponsePartition] = field(default_factory=list)


@_msg
class OffsetCommitResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT
    topics: list[OffsetCommitResponseTopic] = field(default_factory=list)


# --- OffsetFetch (9) --------------------------------------------------------------------


@_msg
class OffsetFetchRequestTopic:
    name: str
    partition_indexes: list[Int32]


@_msg
class OffsetFetchRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH
    group_id: str
    topics: list[OffsetFetchRequestTopic] | None = None
    require_stable: bool = False
    """KIP-447 (for docs/protocol.md's OffsetFetch): true answers a partition whose
    offset a transaction has pending (TxnOffsetCommit, its marker not yet written)
    UNSTABLE_OFFSET_COMMIT (88, retriable) instead of its last committed offset; false
    (the default, what older clients send) answers the last committed offset."""


@_msg
class OffsetFetchResponsePartition:
    partition_index: Int32 = -1
    committed_offset: Int64 = -1
    metadata: str = ""
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class OffsetFetchResponseTopic:
    name: str = ""
    partitions: list[OffsetFetchResponsePartition] = field(default_factory=list)


@_msg
class OffsetFetchResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH
    topics: list[OffsetFetchResponseTopic] = field(default_factory=list)


# --- DescribeGroups (15) ----------------------------------------------------------------


@_msg
class DescribeGroupsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_GROUPS
    groups: list[str]


@_msg
class DescribedGroupMember:
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""
    last_heartbeat_ms: Int64 | None = None
    poll_age_ms: Int32 | None = None


@_msg
class Rebalance:
    """One rebalance of a group's history (ext, docs/protocol.md §7.4)."""

    generation_id: Int32 | None = None
    reason: str = ""
    detail: str | None = None
    started_ms: Int64 = -1
    completed_ms: Int64 | None = None
    duration_ms: Int32 | None = None
    moved_partitions: TopicPartitions = field(default_factory=list)
    trigger_member_id: str | None = None


@_msg
class DescribedGroup:
    error_code: Int32 = 0
    error_message: str | None = None
    group_id: str = ""
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    generation_id: Int32 = -1
    leader_id: str | None = None
    members: list[DescribedGroupMember] = field(default_factory=list)
    rebalances: list[Rebalance] = field(default_factory=list)


@_msg
class DescribeGroupsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_GROUPS
    groups: list[DescribedGroup] = field(default_factory=list)


# --- ListGroups (16) --------------------------------------------------------------------


@_msg
class ListGroupsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_GROUPS
    states_filter: list[str] = field(default_factory=list)


@_msg
class ListedGroup:
    group_id: str = ""
    protocol_type: str = ""
    group_state: str = ""


@_msg
class ListGroupsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_GROUPS
    groups: list[ListedGroup] = field(default_factory=list)


# --- DeleteGroups (42) ------------------------------------------------------------------


@_msg
class DeleteGroupsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_GROUPS
    groups_names: list[str]


@_msg
class DeletableGroupResult:
    group_id: str = ""
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class DeleteGroupsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_GROUPS
    results: list[DeletableGroupResult] = field(default_factory=list)


# --- OffsetDelete (47) ------------------------------------------------------------------


@_msg
class OffsetDeleteRequestPartition:
    partition_index: Int32


@_msg
class OffsetDeleteRequestTopic:
    name: str
    partitions: list[OffsetDeleteRequestPartition]


@_msg
class OffsetDeleteRequest(Request):
    """Forget some of a group's committed offsets (Kafka's KIP-496): an admin's way to make
    a group start a topic afresh without deleting the group. Refused per topic while the
    group's members subscribe to it."""

    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_DELETE
    group_id: str
    topics: list[OffsetDeleteRequestTopic]


@_msg
class OffsetDeleteResponsePartition:
    partition_index: Int32 = -1
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class OffsetDeleteResponseTopic:
    name: str = ""
    partitions: list[OffsetDeleteResponsePartition] = field(default_factory=list)


@_msg
class OffsetDeleteResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_DELETE
    topics: list[OffsetDeleteResponseTopic] = field(default_factory=list)


# --- OffsetsForLeaderEpoch (23) ---------------------------------------------------------


@_msg
class OffsetForLeaderPartition:
    partition: Int32
    current_leader_epoch: Int32 = -1
    leader_epoch: Int32


@_msg
class OffsetForLeaderTopic:
    topic: str
    partitions: list[OffsetForLeaderPartition]


@_msg
class OffsetsForLeaderEpochRequest(Request):
    """Where each named epoch ends on the leader's log (KIP-101, KIP-279): a follower
    asks it before fetching, to find where its own log diverged."""

    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FOR_LEADER_EPOCH
    replica_id: Int32 = -1
    topics: list[OffsetForLeaderTopic]


@_msg
class EpochEndOffset:
    error_code: Int32 = 0
    error_message: str | None = None
    partition: Int32 = -1
    leader_epoch: Int32 = -1
    end_offset: Int64 = -1


@_msg
class OffsetForLeaderTopicResult:
    topic: str = ""
    partitions: list[EpochEndOffset] = field(default_factory=list)


@_msg
class OffsetsForLeaderEpochResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FOR_LEADER_EPOCH
    topics: list[OffsetForLeaderTopicResult] = field(default_factory=list)


# --- ElectLeaders (43) ------------------------------------------------------------------


@_msg
class ElectLeadersTopic:
    topic: str
    partitions: list[Int32]


@_msg
class ElectLeadersRequest(Request):
    """Leadership back to each partition's preferred (first) replica (KIP-183, KIP-460).
    ``election_type`` 0 preferred; 1 unclean (cluster mode: any live replica leads a
    partition without an eligible leader, losing the records it lacks).
    ``topic_partitions`` nil: every partition."""

    API_KEY: ClassVar[ApiKey] = ApiKey.ELECT_LEADERS
    election_type: Int32 = 0
    topic_partitions: list[ElectLeadersTopic] | None = None
    timeout_ms: Int32 = 60000


@_msg
class PartitionElectionResult:
    partition_id: Int32 = -1
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class ReplicaElectionResult:
    topic: str = ""
    partition_result: list[PartitionElectionResult] = field(default_factory=list)


@_msg
class ElectLeadersResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.ELECT_LEADERS
    replica_election_results: list[ReplicaElectionResult] = field(default_factory=list)


# --- SaslHandshake (17), SaslAuthenticate (36) ------------------------------------------


@_msg
class SaslHandshakeRequest(Request):
    """The mechanism this connection will authenticate with (docs/protocol.md §12)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE
    mechanism: str


@_msg
class SaslHandshakeResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE
    mechanisms: list[str] = field(default_factory=list)


@_msg
class SaslAuthenticateRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE
    auth_bytes: bytes


@_msg
class SaslAuthenticateResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE
    auth_bytes: bytes = b""
    session_lifetime_ms: Int64 = 0


# --- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) --------------------------------


@_msg
class DescribeAclsRequest(Request):
    """A filter: nil names, principals and hosts, and ANY codes match every value;
    ``pattern_type_filter`` MATCH matches what applies to the named resource."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_ACLS
    resource_type_filter: Int32
    resource_name_filter: str | None = None
    pattern_type_filter: Int32 = 3
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int32
    permission_type: Int32


@_msg
class AclDescription:
    principal: str = ""
    host: str = ""
    operation: Int32 = -1
    permission_type: Int32 = -1


@_msg
class DescribeAclsResource:
    resource_type: Int32 = -1
    resource_name: str = ""
    pattern_type: Int32 = -1
    acls: list[AclDescription] = field(default_factory=list)


@_msg
class DescribeAclsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_ACLS
    resources: list[DescribeAclsResource] = field(default_factory=list)


@_msg
class AclCreation:
    resource_type: Int32
    resource_name: str
    resource_pattern_type: Int32 = 3
    principal: str
    host: str
    operation: Int32
    permission_type: Int32


@_msg
class CreateAclsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_ACLS
    creations: list[AclCreation]


@_msg
class AclCreationResult:
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class CreateAclsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_ACLS
    results: list[AclCreationResult] = field(default_factory=list)


@_msg
class DeleteAclsFilter:
    resource_type_filter: Int32
    resource_name_filter: str | None = None
    pattern_type_filter: Int32 = 3
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int32
    permission_type: Int32


@_msg
class DeleteAclsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_ACLS
    filters: list[DeleteAclsFilter]


@_msg
class DeleteAclsMatchingAcl:
    error_code: Int32 = 0
    error_message: str | None = None
    resource_type: Int32 = -1
    resource_name: str = ""
    pattern_type: Int32 = -1
    principal: str = ""
    host: str = ""
    operation: Int32 = -1
    permission_type: Int32 = -1


@_msg
class DeleteAclsFilterResult:
    error_code: Int32 = 0
    error_message: str | None = None
    matching_acls: list[DeleteAclsMatchingAcl] = field(default_factory=list)


@_msg
class DeleteAclsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_ACLS
    filter_results: list[DeleteAclsFilterResult] = field(default_factory=list)


# --- DescribeUserScramCredentials (50), AlterUserScramCredentials (51) ------------------


@_msg
class UserName:
    name: str


@_msg
class DescribeUserScramCredentialsRequest(Request):
    """``users`` nil: every user with a credential (KIP-554)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
    users: list[UserName] | None = None


@_msg
class CredentialInfo:
    mechanism: Int32 = 0
    iterations: Int32 = -1


@_msg
class DescribeUserScramCredentialsResult:
    user: str = ""
    error_code: Int32 = 0
    error_message: str | None = None
    credential_infos: list[CredentialInfo] = field(default_factory=list)


@_msg
class DescribeUserScramCredentialsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
    results: list[DescribeUserScramCredentialsResult] = field(default_factory=list)


@_msg
class ScramCredentialDeletion:
    name: str
    mechanism: Int32


@_msg
class ScramCredentialUpsertion:
    """``salted_password``: PBKDF2 of the password with ``salt`` and ``iterations``,
    computed by the client (KIP-554): the password itself never travels."""

    name: str
    mechanism: Int32
    iterations: Int32
    salt: bytes
    salted_password: bytes


@_msg
class AlterUserScramCredentialsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
    deletions: list[ScramCredentialDeletion] = field(default_factory=list)
    upsertions: list[ScramCredentialUpsertion] = field(default_factory=list)


@_msg
class AlterUserScramCredentialsResult:
    user: str = ""
    error_code: Int32 = 0
    error_message: str | None = None


@_msg
class AlterUserScramCredentialsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
    results: list[AlterUserScramCredentialsResult] = field(default_factory=list)


# --- InitProducerId (22) ----------------------------------------------------------------


@_msg
class InitProducerIdRequest(Request):
    """An idempotent producer's id and epoch (§5.4); with ``transactional_id``, a
    transactional producer's, from its transaction coordinator (§5.6). ``producer_id``
    and ``producer_epoch``: the ones it has, to bump (KIP-360); -1 for none."""

    API_KEY: ClassVar[ApiKey] = ApiKey.INIT_PRODUCER_ID
    transactional_id: str | None = None
    transaction_timeout_ms: Int32 = -1
    producer_id: Int64 = -1
    producer_epoch: Int32 = -1


@_msg
class InitProducerIdResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.INIT_PRODUCER_ID
    producer_id: Int64 = -1
    producer_epoch: Int32 = -1


# --- Transactions (24-28, 65, 66; §5.6) ----------------------------------------------------


@_msg
class TxnTopic:
    name: str
    partitions: list[Int32]


@_msg
class AddPartitionsToTxnRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_PARTITIONS_TO_TXN
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int32
    topics: list[TxnTopic]


@_msg
class TxnPartitionResult:
    partition_index: Int32 = -1
    error_code: Int32 = 0


@_msg
class TxnTopicResult:
    name: str = ""
    results: list[TxnPartitionResult] = field(default_factory=list)


@_msg
class AddPartitionsToTxnResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_PARTITIONS_TO_TXN
    results: list[TxnTopicResult] = field(default_factory=list)


@_msg
class AddOffsetsToTxnRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_OFFSETS_TO_TXN
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int32
    group_id: str


@_msg
class AddOffsetsToTxnResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_OFFSETS_TO_TXN


@_msg
class EndTxnRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.END_TXN
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int32
    committed: bool


@_msg
class EndTxnResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.END_TXN


@_msg
class TxnMarker:
    producer_id: Int64
    producer_epoch: Int32
    transaction_result: bool
    """True: commit, False: abort."""
    topics: list[TxnTopic]
    coordinator_epoch: Int32


@_msg
class WriteTxnMarkersRequest(Request):
    """Internal: a transaction coordinator has partition leaders write its markers."""

    API_KEY: ClassVar[ApiKey] = ApiKey.WRITE_TXN_MARKERS
    markers: list[TxnMarker]


@_msg
class TxnMarkerResult:
    producer_id: Int64 = -1
    topics: list[TxnTopicResult] = field(default_factory=list)


@_msg
class WriteTxnMarkersResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.WRITE_TXN_MARKERS
    markers: list[TxnMarkerResult] = field(default_factory=list)


@_msg
class TxnOffsetCommitPartition:
    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@_msg
class TxnOffsetCommitTopic:
    name: str
    partitions: list[TxnOffsetCommitPartition]


@_msg
class TxnOffsetCommitRequest(Request):
    """Offsets that become the group's committed offsets when the transaction commits;
    ``generation_id``, ``member_id`` and ``group_instance_id`` fence a consumer that is
    no longer the group's member (KIP-447; -1 / "" skip the check)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.TXN_OFFSET_COMMIT
    transactional_id: str
    group_id: str
    producer_id: Int64
    producer_epoch: Int32
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[TxnOffsetCommitTopic]


@_msg
class TxnOffsetCommitResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.TXN_OFFSET_COMMIT
    topics: list[TxnTopicResult] = field(default_factory=list)


@_msg
class DescribeTransactionsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TRANSACTIONS
    transactional_ids: list[str]


@_msg
class TransactionTopic:
    topic: str = ""
    partitions: list[Int32] = field(default_factory=list)


@_msg
class TransactionState:
    error_code: Int32 = 0
    transactional_id: str = ""
    transaction_state: str = ""
    transaction_timeout_ms: Int32 = -1
    transaction_start_time_ms: Int64 = -1
    producer_id: Int64 = -1
    producer_epoch: Int32 = -1
    topics: list[TransactionTopic] = field(default_factory=list)


@_msg
class DescribeTransactionsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TRANSACTIONS
    transaction_states: list[TransactionState] = field(default_factory=list)


@_msg
class ListTransactionsRequest(Request):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_TRANSACTIONS
    state_filters: list[str] = field(default_factory=list)
    producer_id_filters: list[Int64] = field(default_factory=list)
    duration_filter_ms: Int64 = -1
    """Only transactions open longer than this (Kafka's ListTransactions v1); -1: all."""


@_msg
class ListedTransaction:
    transactional_id: str = ""
    producer_id: Int64 = -1
    transaction_state: str = ""


@_msg
class ListTransactionsResponse(Response):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_TRANSACTIONS
    unknown_state_filters: list[str] = field(default_factory=list)
    transaction_states: list[ListedTransaction] = field(default_factory=list)


# --- Registry ---------------------------------------------------------------------------

REQUEST_TYPES: dict[ApiKey, type[Request]] = {
    cls.API_KEY: cls
    for cls in (
        ApiVersionsRequest, MetadataRequest, CreateTopicsRequest, CreatePartitionsRequest,
        ProduceRequest, FetchRequest, ListOffsetsRequest, FindCoordinatorRequest,
        JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest,
        OffsetCommitRequest, OffsetFetchRequest, DescribeGroupsRequest, ListGroupsRequest,
        DeleteGroupsRequest, OffsetDeleteRequest, DeleteTopicsRequest,
        OffsetsForLeaderEpochRequest, ElectLeadersRequest, SaslHandshakeRequest,
        SaslAuthenticateRequest, InitProducerIdRequest,
        AddPartitionsToTxnRequest, AddOffsetsToTxnRequest, EndTxnRequest,
        WriteTxnMarkersRequest, TxnOffsetCommitRequest, DescribeTransactionsRequest,
        ListTransactionsRequest,
        DescribeAclsRequest, CreateAclsRequest, DeleteAclsRequest,
        DescribeUserScramCredentialsRequest, AlterUserScramCredentialsRequest,
    )
}
RESPONSE_TYPES: dict[ApiKey, type[Response]] = {
    cls.API_KEY: cls
    for cls in (
        ApiVersionsResponse, MetadataResponse, CreateTopicsResponse, CreatePartitionsResponse,
        ProduceResponse, FetchResponse, ListOffsetsResponse, FindCoordinatorResponse,
        JoinGroupResponse, SyncGroupResponse, HeartbeatResponse, LeaveGroupResponse,
        OffsetCommitResponse, OffsetFetchResponse, DescribeGroupsResponse, ListGroupsResponse,
        DeleteGroupsResponse, OffsetDeleteResponse, DeleteTopicsResponse,
        OffsetsForLeaderEpochResponse, ElectLeadersResponse, SaslHandshakeResponse,
        SaslAuthenticateResponse, InitProducerIdResponse,
        AddPartitionsToTxnResponse, AddOffsetsToTxnResponse, EndTxnResponse,
        WriteTxnMarkersResponse, TxnOffsetCommitResponse, DescribeTransactionsResponse,
        ListTransactionsResponse,
        DescribeAclsResponse, CreateAclsResponse, DeleteAclsResponse,
        DescribeUserScramCredentialsResponse, AlterUserScramCredentialsResponse,
    )
}
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {key: (0, 0) for key in REQUEST_TYPES}
"""Every API has version 0 only (docs/protocol.md §3)."""


def response_type_for(request: Request) -> type[Response]:
    return RESPONSE_TYPES[request.API_KEY]
