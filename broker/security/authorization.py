"""Which ACL each API needs, as Kafka's brokers check them, and what a refusal looks like.

:func:`guard` takes a request and a question, ``allowed(operation, resource_type, name,
audit)``, bound to the caller's principal and host; it returns what to run (the request,
perhaps with the resources the caller may not touch taken out), what to answer now, and
how to put the refused resources back into the answer. It decides nothing about the
groups or topics themselves and reads no state, so the shell can ask it before anything
else runs, and tests can drive it with a table.

``audit`` False marks a question whose "no" is a filter rather than a refusal (ListGroups
and an all-topics Metadata leave out what the caller may not see, as Kafka does, without
logging a denial per group).

The transactional APIs are checked as Kafka 3.x checks them: WRITE on the transactional id
for what drives a transaction, DESCRIBE on it to find or describe one, and beside it
what Produce and OffsetCommit would need (WRITE on a topic added; READ on the group and
the topics of committed offsets). WriteTxnMarkers is the brokers' own (CLUSTER_ACTION, or
ALTER on the cluster for tools that abort a hanging transaction). An idempotent
producer's InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(``Allowed.on_any``), the rule since Kafka 3.0 (KIP-679), under which a producer that may
write somewhere is idempotent by default without a cluster ACL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol, TypeVar

from groupwire.broker.storage.metadata import INTERNAL_TOPICS
from groupwire.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AclCreationResult,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CreatableTopicResult,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableGroupResult,
    DeletableTopicResult,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    EndTxnRequest,
    EpochEndOffset,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    FindCoordinatorRequest,
    HeartbeatRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    OffsetForLeaderTopicResult,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    SyncGroupRequest,
    TopicProduceResponse,
    TransactionState,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
    TxnTopicResult,
    WriteTxnMarkersRequest,
    response_type_for,
)

__all__ = ["CLUSTER_DENIED", "GROUP_DENIED", "TOPIC_DENIED", "TRANSACTIONAL_ID_DENIED", "Allowed",
           "Guarded", "guard"]

READ, WRITE, CREATE, DELETE = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                               AclOperation.DELETE)
ALTER, DESCRIBE, CLUSTER_ACTION = (AclOperation.ALTER, AclOperation.DESCRIBE,
                                   AclOperation.CLUSTER_ACTION)
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

TOPIC_DENIED: Final = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED: Final = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED: Final = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TRANSACTIONAL_ID_DENIED: Final = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
NOT_ATTEMPTED: Final = int(ErrorCode.OPERATION_NOT_ATTEMPTED)


class Allowed(Protocol):
    def __call__(self, operation: AclOperation, resource_type: ResourceType, name: str,
                 audit: bool = True) -> bool: ...

    def on_any(self, operation: AclOperation, resource_type: ResourceType,
               audit: bool = True) -> bool:
        """Whether some resource of ``resource_type`` allows ``operation`` (Kafka's
        ``authorizeByResourceType``: an ALLOW no DENY covers whole)."""
        ...


Finish = Callable[[Response], Response]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Guarded:
    """``answer``: reply with it now and run nothing. Otherwise run ``request`` and pass
    its answer through ``finish`` (when set) before it is sent."""

    request: Request | None = None
    answer: Response | None = None
    finish: Finish | None = None


def _split(items: list[T], ok: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """``items`` the caller may use and those it may not, each question asked once."""
    kept: list[T] = []
    refused: list[T] = []
    for item in items:
        (kept if ok(item) else refused).append(item)
    return kept, refused


def _topic_message(operation: AclOperation, name: str) -> str:
    return f"not authorized to {operation.name} topic {name!r}"


def _group_message(operation: AclOperation, name: str) -> str:
    return f"not authorized to {operation.name} group {name!r}"


def _cluster_message(operation: AclOperation) -> str:
    return f"not authorized to {operation.name} the cluster"


def _txn_message(operation: AclOperation, name: str) -> str:
    return f"not authorized to {operation.name} transactional id {name!r}"


def _refuse(request: Request, code: int, message: str) -> Guarded:
    return Guarded(answer=response_type_for(request)(error_code=code, error_message=message))


def _trim(request: Request, field: str, kept: list[Any], answer: type[Response],
          answer_field: str, refused: list[Any], *, keep_refusal: bool = False) -> Guarded:
    """Run ``request`` with ``field`` narrowed to ``kept``, adding ``refused`` to its
    answer's ``answer_field``; answer ``refused`` alone when nothing is kept.
    ``keep_refusal``: an answer refused as a whole (top-level error) stays as it is."""
    if not refused:
        return Guarded(request=request)
    if not kept:
        only: dict[str, Any] = {answer_field: refused}
        return Guarded(answer=answer(**only))

    def finish(response: Response) -> Response:
        if keep_refusal and response.error_code:
            return response
        merged: dict[str, Any] = {answer_field: [*getattr(response, answer_field),
                                                 *refused]}
        return replace(response, **merged)
    return Guarded(request=replace(request, **{field: kept}), finish=finish)


def _whole_group(request: Request, group_id: str, operation: AclOperation,
                 allowed: Allowed) -> Guarded:
    if allowed(operation, GROUP, group_id):
        return Guarded(request=request)
    return _refuse(request, GROUP_DENIED, _group_message(operation, group_id))


def _whole_cluster(request: Request, operation: AclOperation, allowed: Allowed) -> Guarded:
    if allowed(operation, CLUSTER, CLUSTER_NAME):
        return Guarded(request=request)
    return _refuse(request, CLUSTER_DENIED, _cluster_message(operation))


# --- topics, partition by partition ------------------------------------------------------


def _produce(request: ProduceRequest, allowed: Allowed) -> Guarded:
    if request.internal:  # a broker forwarding group events: brokers only
        return _whole_cluster(request, CLUSTER_ACTION, allowed)
    tid = request.transactional_id
    if tid is not None and not allowed(WRITE, TRANSACTIONAL_ID, tid):
        # Kafka refuses the whole request: its transactional batches are the id's
        return _refuse(request, TRANSACTIONAL_ID_DENIED,
                       f"not authorized to WRITE on transactional id {tid!r}")
    kept, denied = _split(request.topic_data, lambda t: allowed(WRITE, TOPIC, t.name))
    refused = [TopicProduceResponse(name=t.name, partition_responses=[
        PartitionProduceResponse(index=p.index, error_code=TOPIC_DENIED,
                                 error_message=_topic_message(WRITE, t.name))
        for p in t.partition_data]) for t in denied]
    return _trim(request, "topic_data", kept, ProduceResponse, "responses", refused)


def _fetch(request: FetchRequest, allowed: Allowed) -> Guarded:
    if request.replica_id >= 0:  # a follower: brokers only
        return _whole_cluster(request, CLUSTER_ACTION, allowed)
    kept, denied = _split(request.topics, lambda t: allowed(READ, TOPIC, t.topic))
    refused = [FetchTopicResponse(topic=t.topic, partitions=[
        FetchPartitionData(partition_index=p.partition, error_code=TOPIC_DENIED,
                           error_message=_topic_message(READ, t.topic))
        for p in t.partitions]) for t in denied]
    return _trim(request, "topics", kept, FetchResponse, "responses", refused, keep_refusal=True)


def _list_offsets(request: ListOffsetsRequest, allowed: Allowed) -> Guarded:
    kept, denied = _split(request.topics, lambda t: allowed(DESCRIBE, TOPIC, t.name))
    refused = [ListOffsetsTopicResponse(name=t.name, partitions=[
        ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=TOPIC_DENIED,
                                     error_message=_topic_message(DESCRIBE, t.name))
        for p in t.partitions]) for t in denied]
    return _trim(request, "topics", kept, ListOffsetsResponse, "topics", refused)


def _offsets_for_leader_epoch(request: OffsetsForLeaderEpochRequest,
                              allowed: Allowed) -> Guarded:
    if request.replica_id >= 0:
        return _whole_cluster(request, CLUSTER_ACTION, allowed)
    kept, denied = _split(request.topics, lambda t: allowed(DESCRIBE, TOPIC, t.topic))
    refused = [OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        EpochEndOffset(partition=p.partition, error_code=TOPIC_DENIED,
                       error_message=_topic_message(DESCRIBE, t.topic))
        for p in t.partitions]) for t in denied]
    return _trim(request, "topics", kept, OffsetsForLeaderEpochResponse, "topics", refused)


def _metadata(request: MetadataRequest, allowed: Allowed) -> Guarded:
    if request.topics is None:  # every topic: those the caller may not see are left out

        def visible(response: Response) -> Response:
            assert isinstance(response, MetadataResponse)
            return replace(response, topics=[
                t for t in response.topics if allowed(DESCRIBE, TOPIC, t.name, False)])
        return Guarded(request=request, finish=visible)
    kept, denied = _split(request.topics, lambda t: allowed(DESCRIBE, TOPIC, t.name))
    refused = [MetadataTopic(name=t.name, error_code=TOPIC_DENIED,
                             error_message=_topic_message(DESCRIBE, t.name))
               for t in denied]
    creating = request.allow_auto_topic_creation and not allowed(
        CREATE, CLUSTER, CLUSTER_NAME, False)
    narrowed = request
    if refused or creating:
        # auto-creation needs CREATE on the cluster or on each topic (Kafka's rule); a
        # caller without it gets the topics that exist, as with creation off
        auto = request.allow_auto_topic_creation and all(
            allowed(CREATE, TOPIC, t.name, False) for t in kept)
        narrowed = replace(request, topics=kept, allow_auto_topic_creation=auto)
    if not refused:
        return Guarded(request=narrowed)

    def finish(response: Response) -> Response:
        assert isinstance(response, MetadataResponse)
        return replace(response, topics=[*response.topics, *refused])
    return Guarded(request=narrowed, finish=finish)


def _create_topics(request: CreateTopicsRequest, allowed: Allowed) -> Guarded:
    if allowed(CREATE, CLUSTER, CLUSTER_NAME, False):
        return Guarded(request=request)
    kept, denied = _split(request.topics, lambda t: allowed(CREATE, TOPIC, t.name))
    refused = [CreatableTopicResult(name=t.name, error_code=TOPIC_DENIED,
                                    error_message=_topic_message(CREATE, t.name))
               for t in denied]
    return _trim(request, "topics", kept, CreateTopicsResponse, "topics", refused)


def _create_partitions(request: CreatePartitionsRequest, allowed: Allowed) -> Guarded:
    kept, denied = _split(request.topics, lambda t: allowed(ALTER, TOPIC, t.name))
    refused = [CreatePartitionsTopicResult(name=t.name, error_code=TOPIC_DENIED,
                                           error_message=_topic_message(ALTER, t.name))
               for t in denied]
    return _trim(request, "topics", kept, CreatePartitionsResponse, "results", refused)


def _delete_topics(request: DeleteTopicsRequest, allowed: Allowed) -> Guarded:
    kept, denied = _split(request.topic_names, lambda n: allowed(DELETE, TOPIC, n))
    refused = [DeletableTopicResult(name=n, error_code=TOPIC_DENIED,
                                    error_message=_topic_message(DELETE, n))
               for n in denied]
    return _trim(request, "topic_names", kept, DeleteTopicsResponse, "responses", refused)


# --- groups ---------------------------------------------------------------------------------


def _offset_commit(request: OffsetCommitRequest, allowed: Allowed) -> Guarded:
    if not allowed(READ, GROUP, request.group_id):
        message = _group_message(READ, request.group_id)
        return Guarded(answer=OffsetCommitResponse(topics=[OffsetCommitResponseTopic(
            name=t.name, partitions=[OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=GROUP_DENIED,
                error_message=message) for p in t.partitions]) for t in request.topics]))
    kept, denied = _split(request.topics, lambda t: allowed(READ, TOPIC, t.name))
    refused = [OffsetCommitResponseTopic(name=t.name, partitions=[
        OffsetCommitResponsePartition(partition_index=p.partition_index,
                                      error_code=TOPIC_DENIED,
                                      error_message=_topic_message(READ, t.name))
        for p in t.partitions]) for t in denied]
    return _trim(request, "topics", kept, OffsetCommitResponse, "topics", refused)


def _offset_delete(request: OffsetDeleteRequest, allowed: Allowed) -> Guarded:
    """Kafka's rule: DELETE on the group, then READ on each topic. An answer refused as a
    whole (an unknown group) stays top-level only, as Kafka's does."""
    if not allowed(DELETE, GROUP, request.group_id):
        return _refuse(request, GROUP_DENIED, _group_message(DELETE, request.group_id))
    kept, denied = _split(request.topics, lambda t: allowed(READ, TOPIC, t.name))
    refused = [OffsetDeleteResponseTopic(name=t.name, partitions=[
        OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                      error_code=TOPIC_DENIED,
                                      error_message=_topic_message(READ, t.name))
        for p in t.partitions]) for t in denied]
    return _trim(request, "topics", kept, OffsetDeleteResponse, "topics", refused,
                 keep_refusal=True)


def _offset_fetch(request: OffsetFetchRequest, allowed: Allowed) -> Guarded:
    if not allowed(DESCRIBE, GROUP, request.group_id):
        return _refuse(request, GROUP_DENIED, _group_message(DESCRIBE, request.group_id))
    if request.topics is None:  # every committed topic: leave out those not describable

        def visible(response: Response) -> Response:
            assert isinstance(response, OffsetFetchResponse)
            return replace(response, topics=[
                t for t in response.topics if allowed(DESCRIBE, TOPIC, t.name, False)])
        return Guarded(request=request, finish=visible)
    kept, denied = _split(request.topics, lambda t: allowed(DESCRIBE, TOPIC, t.name))
    refused = [OffsetFetchResponseTopic(name=t.name, partitions=[
        OffsetFetchResponsePartition(partition_index=p, error_code=TOPIC_DENIED,
                                     error_message=_topic_message(DESCRIBE, t.name))
        for p in t.partition_indexes]) for t in denied]
    return _trim(request, "topics", kept, OffsetFetchResponse, "topics", refused, keep_refusal=True)


def _describe_groups(request: DescribeGroupsRequest, allowed: Allowed) -> Guarded:
    kept, denied = _split(request.groups, lambda g: allowed(DESCRIBE, GROUP, g))
    refused = [DescribedGroup(group_id=g, error_code=GROUP_DENIED,
                              error_message=_group_message(DESCRIBE, g))
               for g in denied]
    return _trim(request, "groups", kept, DescribeGroupsResponse, "groups", refused)


def _delete_groups(request: DeleteGroupsRequest, allowed: Allowed) -> Guarded:
    kept, denied = _split(request.groups_names, lambda g: allowed(DELETE, GROUP, g))
    refused = [DeletableGroupResult(group_id=g, error_code=GROUP_DENIED,
                                    error_message=_group_message(DELETE, g))
               for g in denied]
    return _trim(request, "groups_names", kept, DeleteGroupsResponse, "results", refused)


def _list_groups(request: ListGroupsRequest, allowed: Allowed) -> Guarded:
    if allowed(DESCRIBE, CLUSTER, CLUSTER_NAME, False):
        return Guarded(request=request)

    def visible(response: Response) -> Response:
        assert isinstance(response, ListGroupsResponse)
        return replace(response, groups=[
            g for g in response.groups if allowed(DESCRIBE, GROUP, g.group_id, False)])
    return Guarded(request=request, finish=visible)


def _alter_credentials(request: AlterUserScramCredentialsRequest, allowed: Allowed,
                       ) -> Guarded:
    if allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return Guarded(request=request)
    users = dict.fromkeys([*(d.name for d in request.deletions),
                           *(u.name for u in request.upsertions)])
    message = _cluster_message(ALTER)
    return Guarded(answer=AlterUserScramCredentialsResponse(
        error_code=CLUSTER_DENIED, error_message=message, results=[
        AlterUserScramCredentialsResult(user=u, error_code=CLUSTER_DENIED,
                                        error_message=message) for u in users]))


def _create_acls(request: CreateAclsRequest, allowed: Allowed) -> Guarded:
    if allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return Guarded(request=request)
    message = _cluster_message(ALTER)
    return Guarded(answer=CreateAclsResponse(
        error_code=CLUSTER_DENIED, error_message=message,
        results=[AclCreationResult(error_code=CLUSTER_DENIED, error_message=message)
                 for _ in request.creations]))


def _delete_acls(request: DeleteAclsRequest, allowed: Allowed) -> Guarded:
    if allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return Guarded(request=request)
    message = _cluster_message(ALTER)
    return Guarded(answer=DeleteAclsResponse(
        error_code=CLUSTER_DENIED, error_message=message,
        filter_results=[DeleteAclsFilterResult(error_code=CLUSTER_DENIED,
                                               error_message=message)
                        for _ in request.filters]))


# --- transactions ---------------------------------------------------------------------------

GROUP_KEY: Final = 0
TRANSACTION_KEY: Final = 1
"""FindCoordinator's key types: a group, a transactional id."""


def _whole_txn(request: Request, transactional_id: str, operation: AclOperation,
               allowed: Allowed) -> Guarded:
    if allowed(operation, TRANSACTIONAL_ID, transactional_id):
        return Guarded(request=request)
    return _refuse(request, TRANSACTIONAL_ID_DENIED, _txn_message(operation, transactional_id))


def _init_producer_id(request: InitProducerIdRequest, allowed: Allowed) -> Guarded:
    """A transactional producer's: WRITE on its id. An idempotent one's: IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (Kafka 3.0+), whose refusal is the cluster's;
    the cluster question alone logs nothing, being one of two ways in."""
    if request.transactional_id is not None:
        return _whole_txn(request, request.transactional_id, WRITE, allowed)
    if (allowed(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, False)
            or allowed.on_any(WRITE, TOPIC)):
        return Guarded(request=request)
    return _refuse(request, CLUSTER_DENIED, "not authorized to IDEMPOTENT_WRITE the cluster, "
                                            "nor to WRITE any topic")


def _add_partitions_to_txn(request: AddPartitionsToTxnRequest, allowed: Allowed) -> Guarded:
    """WRITE on the id, then on each topic; an internal topic is never a client's to add
    (Kafka's rule, whatever the ACLs). One partition refused fails the request, as in
    Kafka: nothing is added, the refused topics' partitions are answered
    TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED."""
    if not allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return _refuse(request, TRANSACTIONAL_ID_DENIED,
                       _txn_message(WRITE, request.transactional_id))
    _, refused = _split(request.topics, lambda t: t.name not in INTERNAL_TOPICS
                        and allowed(WRITE, TOPIC, t.name))
    if not refused:
        return Guarded(request=request)
    denied = {t.name for t in refused}
    return Guarded(answer=AddPartitionsToTxnResponse(results=[TxnTopicResult(
        name=t.name, results=[TxnPartitionResult(
            partition_index=p, error_code=TOPIC_DENIED if t.name in denied else NOT_ATTEMPTED)
            for p in t.partitions]) for t in request.topics]))


def _add_offsets_to_txn(request: AddOffsetsToTxnRequest, allowed: Allowed) -> Guarded:
    if not allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return _refuse(request, TRANSACTIONAL_ID_DENIED,
                       _txn_message(WRITE, request.transactional_id))
    return _whole_group(request, request.group_id, READ, allowed)


def _end_txn(request: EndTxnRequest, allowed: Allowed) -> Guarded:
    return _whole_txn(request, request.transactional_id, WRITE, allowed)


def _txn_offset_commit(request: TxnOffsetCommitRequest, allowed: Allowed) -> Guarded:
    """Kafka's order: WRITE on the transactional id, then READ on the group (either
    refuses the request as a whole), then READ on each topic, per partition, as
    OffsetCommit. An answer refused as a whole stays top-level only."""
    if not allowed(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return _refuse(request, TRANSACTIONAL_ID_DENIED,
                       _txn_message(WRITE, request.transactional_id))
    if not allowed(READ, GROUP, request.group_id):
        return _refuse(request, GROUP_DENIED, _group_message(READ, request.group_id))
    kept, denied = _split(request.topics, lambda t: allowed(READ, TOPIC, t.name))
    refused = [TxnTopicResult(name=t.name, results=[
        TxnPartitionResult(partition_index=p.partition_index, error_code=TOPIC_DENIED)
        for p in t.partitions]) for t in denied]
    return _trim(request, "topics", kept, TxnOffsetCommitResponse, "topics", refused,
                 keep_refusal=True)


def _write_txn_markers(request: WriteTxnMarkersRequest, allowed: Allowed) -> Guarded:
    """A transaction coordinator's markers for partitions this broker leads: the
    brokers' own (CLUSTER_ACTION), or an operator's tool aborting a hanging transaction
    (ALTER on the cluster, which Kafka accepts first and logs no denial of)."""
    if allowed(ALTER, CLUSTER, CLUSTER_NAME, False):
        return Guarded(request=request)
    return _whole_cluster(request, CLUSTER_ACTION, allowed)


def _describe_transactions(request: DescribeTransactionsRequest, allowed: Allowed,
                           ) -> Guarded:
    """DESCRIBE on each id, refused per id; what is told of a transaction names only the
    topics the caller may DESCRIBE, as Kafka tells it."""
    kept, denied = _split(request.transactional_ids,
                          lambda t: allowed(DESCRIBE, TRANSACTIONAL_ID, t))
    refused = [TransactionState(transactional_id=t, error_code=TRANSACTIONAL_ID_DENIED)
               for t in denied]
    if not kept:
        return Guarded(answer=DescribeTransactionsResponse(transaction_states=refused))

    def finish(response: Response) -> Response:
        assert isinstance(response, DescribeTransactionsResponse)
        states = [replace(s, topics=[t for t in s.topics
                                     if allowed(DESCRIBE, TOPIC, t.topic, False)])
                  if s.topics else s for s in response.transaction_states]
        return replace(response, transaction_states=[*states, *refused])
    return Guarded(request=replace(request, transactional_ids=kept) if denied else request,
                   finish=finish)


def _list_transactions(request: ListTransactionsRequest, allowed: Allowed) -> Guarded:
    """Only the ids the caller may DESCRIBE; the others are left out, not refused."""
    def visible(response: Response) -> Response:
        assert isinstance(response, ListTransactionsResponse)
        return replace(response, transaction_states=[
            t for t in response.transaction_states
            if allowed(DESCRIBE, TRANSACTIONAL_ID, t.transactional_id, False)])
    return Guarded(request=request, finish=visible)


def guard(request: Request, allowed: Allowed) -> Guarded:
    """What ``request`` may do for the caller ``allowed`` speaks for (module docstring)."""
    kind = type(request)
    if isinstance(request, (HeartbeatRequest, JoinGroupRequest, SyncGroupRequest,
                            LeaveGroupRequest)):
        return _whole_group(request, request.group_id, READ, allowed)
    if isinstance(request, FindCoordinatorRequest):
        if request.key_type == GROUP_KEY:
            return _whole_group(request, request.key, DESCRIBE, allowed)
        if request.key_type == TRANSACTION_KEY:
            return _whole_txn(request, request.key, DESCRIBE, allowed)
        return Guarded(request=request)  # refused for its key type anyway
    by_cluster = _CLUSTER_OPERATION.get(kind)
    if by_cluster is not None:
        return _whole_cluster(request, by_cluster, allowed)
    check = _CHECKS.get(kind)
    if check is None:  # ApiVersions, SaslHandshake, SaslAuthenticate
        return Guarded(request=request)
    return check(request, allowed)


_CLUSTER_OPERATION: Final[dict[type, AclOperation]] = {
    ElectLeadersRequest: ALTER,
    DescribeAclsRequest: DESCRIBE,
    DescribeUserScramCredentialsRequest: DESCRIBE,
}

_CHECKS: Final[dict[type, Callable[..., Guarded]]] = {
    ProduceRequest: _produce,
    FetchRequest: _fetch,
    ListOffsetsRequest: _list_offsets,
    OffsetsForLeaderEpochRequest: _offsets_for_leader_epoch,
    MetadataRequest: _metadata,
    CreateTopicsRequest: _create_topics,
    CreatePartitionsRequest: _create_partitions,
    DeleteTopicsRequest: _delete_topics,
    OffsetCommitRequest: _offset_commit,
    OffsetDeleteRequest: _offset_delete,
    OffsetFetchRequest: _offset_fetch,
    DescribeGroupsRequest: _describe_groups,
    DeleteGroupsRequest: _delete_groups,
    ListGroupsRequest: _list_groups,
    AlterUserScramCredentialsRequest: _alter_credentials,
    CreateAclsRequest: _create_acls,
    DeleteAclsRequest: _delete_acls,
    InitProducerIdRequest: _init_producer_id,
    AddPartitionsToTxnRequest: _add_partitions_to_txn,
    AddOffsetsToTxnRequest: _add_offsets_to_txn,
    EndTxnRequest: _end_txn,
    TxnOffsetCommitRequest: _txn_offset_commit,
    WriteTxnMarkersRequest: _write_txn_markers,
    DescribeTransactionsRequest: _describe_transactions,
    ListTransactionsRequest: _list_transactions,
}
