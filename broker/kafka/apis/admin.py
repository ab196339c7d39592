"""Metadata and the admin APIs through the Kafka door.

Most map one to one onto the msgpack door's requests, whose field names and enum codes
are already Kafka's; the translators own where the two protocols differ:

- Brokers are named by their Kafka listeners (``KafkaContext.addresses``): a broker
  without one is left out of ``brokers``, while partitions keep naming it, as Kafka
  names a broker it cannot reach. Without addresses in the context, the broker's own
  answer is taken as it is (it already names the listener the request came in on).
- Metadata v0 asks for every topic with an empty list; later versions with null.
- Kafka has no top-level error in Metadata, CreateTopics, DeleteTopics,
  CreatePartitions, CreateAcls, DeleteAcls or AlterUserScramCredentials: a top-level
  refusal of the msgpack door (INVALID_REQUEST, CLUSTER_AUTHORIZATION_FAILED ...) is
  spread over every entry the request named.
- What groupwire cannot do is refused per entry before anything is dispatched: topic
  configs other than what every topic has (``broker.kafka.apis.configs``), manual
  replica assignments other than "everything on the one broker there is".
- ``validate_only`` (CreateTopics, CreatePartitions) dispatches a Metadata for the
  topics named, never auto-creating, and applies the topic-admin rules
  (``broker.topics.rules``) to what it shows. Every rule but the broker's
  ``--max-partitions`` cap is checked (that needs the hosted count, which Metadata does
  not carry); a real request would still be refused for it.
- Kafka's ACL codes groupwire has no bindings for (resource types DELEGATION_TOKEN and
  USER; operations CREATE_TOKENS and later) match nothing when described or deleted, and
  creating them is refused with a message saying so.
- DescribeUserScramCredentials with an empty list of users describes every user, as
  Kafka does (null does too).
- DescribeCluster is a Metadata for no topic; InitProducerId is the msgpack door's, for
  idempotent and transactional producers alike, with the id and epoch a producer holds
  (v3+, KIP-360) and PRODUCER_FENCED told INVALID_PRODUCER_EPOCH below v4
  (``broker.kafka.apis.transactions``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from groupwire.broker.kafka.apis.configs import CONFIG_TRANSLATORS, INVALID_CONFIG, config_refusal
from groupwire.broker.kafka.apis.transactions import txn_code
from groupwire.broker.kafka.translate import (
    Answer,
    Body,
    Dispatch,
    KafkaContext,
    Simple,
    Step,
    Translator,
    kafka_code,
)
from groupwire.broker.topics.rules import (
    Growth,
    Limits,
    NewTopic,
    Topics,
    check_creates,
    check_growths,
    named_twice,
)
from groupwire.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AclCreation,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreatableTopic,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataBroker,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataTopic,
    Response,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserName,
)

METADATA: Final = 3
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
INIT_PRODUCER_ID: Final = 22
DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
CREATE_PARTITIONS: Final = 37
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
DESCRIBE_CLUSTER: Final = 60

NOT_ASKED: Final = -(2**31)
"""Kafka's authorized-operations bitfield when the client did not ask for it."""

_TOPIC_OPERATIONS: Final = (
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS)
"""What Kafka reports on a topic (``AclEntry.supportedOperations``)."""
_CLUSTER_OPERATIONS: Final = (
    AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE)
"""What Kafka reports on the cluster: IDEMPOTENT_WRITE as its ACLs say, though WRITE on
any topic lets a producer be idempotent too (the broker's InitProducerId check)."""

_KAFKA_ONLY_RESOURCES: Final = {6: "DELEGATION_TOKEN", 7: "USER"}
_KAFKA_ONLY_OPERATIONS: Final = {13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS",
                                 15: "TWO_PHASE_COMMIT"}
"""Kafka's ACL codes past groupwire's model (``protocol.acls``): no binding has them."""

_NO_PRODUCER: Final = -1


@dataclass(frozen=True, slots=True)
class _Refused:
    """An entry answered by the door itself: its code and message."""

    code: int
    message: str


# --- shared pieces ----------------------------------------------------------------------


def _brokers(ctx: KafkaContext, listed: Sequence[MetadataBroker], id_field: str,
             rack: bool) -> list[Body]:
    """The live brokers as Kafka clients reach them (module docstring)."""
    found: list[tuple[int, str, int, str | None]]
    if not ctx.addresses:
        found = [(b.node_id, b.host, b.port, b.rack) for b in listed]
    elif not listed:  # a refusal carries no brokers: the door still knows them
        found = [(a.node_id, a.host, a.port, a.rack)
                 for _, a in sorted(ctx.addresses.items())]
    else:
        found = []
        for b in listed:
            address = ctx.addresses.get(b.node_id)
            if address is not None:
                found.append((b.node_id, address.host, address.port,
                              b.rack if address.rack is None else address.rack))
    brokers = []
    for node, host, port, where in found:
        broker: Body = {id_field: node, "host": host, "port": port}
        if rack:
            broker["rack"] = where
        brokers.append(broker)
    return brokers


def _operations(ctx: KafkaContext, resource: ResourceType, name: str,
                operations: Iterable[AclOperation]) -> int:
    """Kafka's bitfield of ``operations`` the caller may do on the resource (all of
    them without an authorizer, as Kafka answers)."""
    allowed = ctx.allowed
    bits = 0
    for operation in operations:
        if allowed is None or allowed(operation, resource, name, False):
            bits |= 1 << int(operation)
    return bits


def _cluster_operations(ctx: KafkaContext, asked: bool) -> int:
    """Kafka's answer to ``include_cluster_authorized_operations``: nothing unless the
    caller may describe the cluster."""
    if not asked:
        return NOT_ASKED
    allowed = ctx.allowed
    if allowed is not None and not allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                           CLUSTER_NAME, False):
        return 0
    return _operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME, _CLUSTER_OPERATIONS)


def _single_node(ctx: KafkaContext) -> int | None:
    """The node of a one-broker cluster, as the door sees it; None otherwise."""
    if len(ctx.addresses) != 1:
        return None
    return next(iter(ctx.addresses))


def _assignment_refusal(ctx: KafkaContext, replicas: Sequence[Sequence[int]]) -> _Refused | None:
    """groupwire places replicas itself: an assignment is taken only when it says what
    groupwire does anyway, every partition on the one broker of a one-broker cluster."""
    only = _single_node(ctx)
    if only is not None and all(list(ids) == [only] for ids in replicas):
        return None
    taken = (f"only when it puts every partition on node {only}, the one broker"
             if only is not None else "only on a one-broker cluster")
    return _Refused(int(ErrorCode.INVALID_REQUEST),
                    f"groupwire places replicas itself: a manual assignment is taken {taken}; "
                    f"leave it out and give the partition count (and replication factor)")


_UNCHECKED_LIMITS: Final = Limits(max_partitions=sys.maxsize, default_partitions=1,
                                  default_replication_factor=1)
"""Validate-only checks: the broker's defaults are valid by construction, and its
partition cap cannot be checked from Metadata."""


def _topics_seen(meta: MetadataResponse) -> Topics:
    """What a Metadata for some topics shows, as the topic-admin rules see it. A topic
    the caller may not describe counts as unknown (its existence is not told)."""
    return Topics(
        partitions={t.name: len(t.partitions) for t in meta.topics if t.error_code == 0},
        internal={t.name for t in meta.topics if t.is_internal},
        hosted=0, brokers=max(1, len(meta.brokers)),
        taken={t.name for t in meta.topics
               if t.error_code == ErrorCode.LEADER_NOT_AVAILABLE})  # being created


def _peek(names: Iterable[str]) -> Dispatch:
    """A Metadata that only looks: never creates, so validate-only changes nothing."""
    return Dispatch(MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in names],
                                    allow_auto_topic_creation=False))


# --- Metadata (3) -----------------------------------------------------------------------


def _asked_topics(ctx: KafkaContext, body: Body) -> list[str] | None:
    """The topic names asked for, once each (Kafka reads them as a set); None: all."""
    topics = body.get("topics")
    if topics is None or (ctx.api_version == 0 and not topics):
        return None
    return list(dict.fromkeys(t["name"] for t in topics))


def _metadata_request(ctx: KafkaContext, body: Body) -> Step:
    names = _asked_topics(ctx, body)
    auto = ctx.api_version < 4 or bool(body.get("allow_auto_topic_creation", True))
    return Dispatch(MetadataRequest(
        topics=None if names is None else [MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=auto))


def _metadata_topic(ctx: KafkaContext, topic: MetadataTopic, with_operations: bool) -> Body:
    version = ctx.api_version
    # one dict per partition, tens of thousands in a large cluster: a literal per
    # version range rather than a test per field and partition
    if version >= 7:
        partitions = [{"error_code": kafka_code(p.error_code),
                       "partition_index": p.partition_index, "leader_id": p.leader_id,
                       "leader_epoch": p.leader_epoch, "replica_nodes": p.replica_nodes,
                       "isr_nodes": p.isr_nodes, "offline_replicas": p.offline_replicas}
                      for p in topic.partitions]
    elif version >= 5:
        partitions = [{"error_code": kafka_code(p.error_code),
                       "partition_index": p.partition_index, "leader_id": p.leader_id,
                       "replica_nodes": p.replica_nodes, "isr_nodes": p.isr_nodes,
                       "offline_replicas": p.offline_replicas} for p in topic.partitions]
    else:
        partitions = [{"error_code": kafka_code(p.error_code),
                       "partition_index": p.partition_index, "leader_id": p.leader_id,
                       "replica_nodes": p.replica_nodes, "isr_nodes": p.isr_nodes}
                      for p in topic.partitions]
    body: Body = {"error_code": kafka_code(topic.error_code), "name": topic.name}
    if version >= 1:
        body["is_internal"] = topic.is_internal
    body["partitions"] = partitions
    if version >= 8:
        body["topic_authorized_operations"] = (
            _operations(ctx, ResourceType.TOPIC, topic.name, _TOPIC_OPERATIONS)
            if with_operations and topic.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else NOT_ASKED)
    return body


def _metadata_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, MetadataResponse)
    version = ctx.api_version
    if response.error_code:
        topics = [MetadataTopic(error_code=response.error_code, name=name)
                  for name in _asked_topics(ctx, body) or []]
    else:
        topics = response.topics
    with_operations = version >= 8 and bool(body.get("include_topic_authorized_operations"))
    answer: Body = {}
    if version >= 3:
        answer["throttle_time_ms"] = 0
    answer["brokers"] = _brokers(ctx, response.brokers, "node_id", version >= 1)
    if version >= 2:
        answer["cluster_id"] = response.cluster_id or ctx.cluster_id or None
    if version >= 1:
        answer["controller_id"] = (ctx.controller_id if response.error_code
                                   else response.controller_id)
    answer["topics"] = [_metadata_topic(ctx, t, with_operations) for t in topics]
    if version >= 8:
        answer["cluster_authorized_operations"] = _cluster_operations(
            ctx, bool(body.get("include_cluster_authorized_operations")))
    return answer


# --- DescribeCluster (60) ---------------------------------------------------------------


def _describe_cluster_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(MetadataRequest(topics=[], allow_auto_topic_creation=False))


def _describe_cluster_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, MetadataResponse)
    refused = bool(response.error_code)
    return {
        "throttle_time_ms": 0, "error_code": kafka_code(response.error_code),
        "error_message": response.error_message,
        "cluster_id": response.cluster_id or ctx.cluster_id,
        "controller_id": ctx.controller_id if refused else response.controller_id,
        "brokers": _brokers(ctx, response.brokers, "broker_id", True),
        "cluster_authorized_operations": _cluster_operations(
            ctx, bool(body.get("include_cluster_authorized_operations")))}


# --- CreateTopics (19) ------------------------------------------------------------------


def _configs_refusal(ctx: KafkaContext, configs: Sequence[Body]) -> _Refused | None:
    """Topic configs are taken when they are what every topic has anyway."""
    if not configs:
        return None
    if ctx.configs is None:
        return _Refused(INVALID_CONFIG, "topic configs cannot be checked on this listener")
    entries = ctx.configs.new_topic()
    for config in configs:
        refused = config_refusal(entries, config["name"], config["value"])
        if refused is not None:
            return _Refused(*refused)
    return None


_Plan = list[tuple[str, Any]]
"""Per entry of a request, in order: its name, and what to ask the broker for or the
door's own refusal (:class:`_Refused`)."""


def _create_plan(ctx: KafkaContext, body: Body) -> _Plan:
    topics = body["topics"]
    twice = named_twice([t["name"] for t in topics])
    plan: _Plan = []
    for topic in topics:
        name = topic["name"]
        if name in twice:
            plan.append((name, _twice(name)))
            continue
        partitions, rf = topic["num_partitions"], topic["replication_factor"]
        assignments = topic.get("assignments") or []
        refused: _Refused | None = None
        if assignments:
            if partitions != -1 or rf != -1:
                refused = _Refused(int(ErrorCode.INVALID_REQUEST),
                                   "num_partitions and replication_factor must be -1 when "
                                   "assignments are given")
            elif sorted(a["partition_index"] for a in assignments) != list(
                    range(len(assignments))):
                refused = _Refused(int(ErrorCode.INVALID_REQUEST),
                                   "assignments must name partitions 0 to n-1, each once")
            else:
                refused = _assignment_refusal(ctx, [a["broker_ids"] for a in assignments])
                partitions, rf = len(assignments), 1
        refused = refused or _configs_refusal(ctx, topic.get("configs") or [])
        plan.append((name, refused or CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf)))
    return plan


def _twice(name: str) -> _Refused:
    """Every entry of a name given twice is refused (``broker.topics.rules``' rule, applied
    here because the door answers some entries itself)."""
    return _Refused(int(ErrorCode.INVALID_REQUEST), f"topic {name!r} named more than once")


def _kept(plan: _Plan, kind: type[Any]) -> list[Any]:
    return [entry for _, entry in plan if isinstance(entry, kind)]


def _create_topics_request(ctx: KafkaContext, body: Body) -> Step:
    plan = _create_plan(ctx, body)
    kept: list[CreatableTopic] = _kept(plan, CreatableTopic)
    if not kept:
        return Answer(_topic_results(plan, {}, "topics"))
    if body.get("validate_only"):
        return _peek(entry.name for entry in kept)
    return Dispatch(CreateTopicsRequest(topics=kept))


def _create_topics_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    plan = _create_plan(ctx, body)
    kept: list[CreatableTopic] = _kept(plan, CreatableTopic)
    if response.error_code:
        answers = _spread([entry.name for entry in kept], response)
    elif isinstance(response, MetadataResponse):
        answers = _validate_creates(ctx, kept, response)
    else:
        assert isinstance(response, CreateTopicsResponse)
        answers = {t.name: _Refused(t.error_code, t.error_message or "")
                   for t in response.topics}
    return _topic_results(plan, answers, "topics")


def _validate_creates(ctx: KafkaContext, kept: list[CreatableTopic],
                      meta: MetadataResponse) -> dict[str, _Refused]:
    """validate_only: the answers a CreateTopics would get (module docstring)."""
    answers: dict[str, _Refused] = {}
    checked: list[CreatableTopic] = []
    allowed = ctx.allowed
    anywhere = allowed is None or allowed(AclOperation.CREATE, ResourceType.CLUSTER,
                                          CLUSTER_NAME, False)
    for entry in kept:
        if anywhere or allowed is None or allowed(AclOperation.CREATE, ResourceType.TOPIC,
                                                  entry.name):
            checked.append(entry)
        else:
            answers[entry.name] = _Refused(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                           f"not authorized to CREATE topic {entry.name!r}")
    results = check_creates(
        [(e.name, e.num_partitions, e.replication_factor) for e in checked],
        _topics_seen(meta), _UNCHECKED_LIMITS)
    for entry, result in zip(checked, results, strict=True):
        answers[entry.name] = (_Refused(0, "") if isinstance(result, NewTopic)
                               else _Refused(int(result.code), result.message))
    return answers


def _spread(names: Iterable[str], response: Response) -> dict[str, _Refused]:
    """A top-level refusal, as every named entry's own answer."""
    refused = _Refused(response.error_code, response.error_message or "")
    return dict.fromkeys(names, refused)


def _topic_results(plan: _Plan, answers: dict[str, _Refused], key: str) -> Body:
    """A topic-per-entry answer: the door's refusals where it made them, the broker's
    answer by name elsewhere."""
    results = []
    for name, entry in plan:
        result = entry if isinstance(entry, _Refused) else answers.get(name)
        if result is None:
            result = _Refused(int(ErrorCode.UNKNOWN_SERVER_ERROR), f"no answer for {name!r}")
        results.append({"name": name, "error_code": kafka_code(result.code),
                        "error_message": result.message or None})
    return {"throttle_time_ms": 0, key: results}


# --- DeleteTopics (20) ------------------------------------------------------------------


def _delete_topics_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(DeleteTopicsRequest(topic_names=list(body["topic_names"]),
                                        timeout_ms=body.get("timeout_ms", 60000)))


def _delete_topics_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DeleteTopicsResponse)
    if response.error_code:
        code = kafka_code(response.error_code)
        results = [{"name": name, "error_code": code} for name in body["topic_names"]]
    else:
        results = [{"name": r.name, "error_code": kafka_code(r.error_code)}
                   for r in response.responses]
    return {"throttle_time_ms": 0, "responses": results}


# --- CreatePartitions (37) --------------------------------------------------------------


def _partitions_plan(ctx: KafkaContext, body: Body) -> _Plan:
    topics = body["topics"]
    twice = named_twice([t["name"] for t in topics])
    plan: _Plan = []
    for topic in topics:
        name = topic["name"]
        assignments = topic.get("assignments")
        refused = (_twice(name) if name in twice
                   else None if assignments is None
                   else _assignment_refusal(ctx, [a["broker_ids"] for a in assignments]))
        plan.append((name, refused or CreatePartitionsTopic(name=name, count=topic["count"])))
    return plan


def _create_partitions_request(ctx: KafkaContext, body: Body) -> Step:
    plan = _partitions_plan(ctx, body)
    kept: list[CreatePartitionsTopic] = _kept(plan, CreatePartitionsTopic)
    if not kept:
        return Answer(_topic_results(plan, {}, "results"))
    if body.get("validate_only"):
        return _peek(entry.name for entry in kept)
    return Dispatch(CreatePartitionsRequest(topics=kept))


def _create_partitions_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    plan = _partitions_plan(ctx, body)
    kept: list[CreatePartitionsTopic] = _kept(plan, CreatePartitionsTopic)
    if response.error_code:
        answers = _spread([entry.name for entry in kept], response)
    elif isinstance(response, MetadataResponse):
        answers = _validate_growths(ctx, kept, response)
    else:
        assert isinstance(response, CreatePartitionsResponse)
        answers = {r.name: _Refused(r.error_code, r.error_message or "")
                   for r in response.results}
    return _topic_results(plan, answers, "results")


def _validate_growths(ctx: KafkaContext, kept: list[CreatePartitionsTopic],
                      meta: MetadataResponse) -> dict[str, _Refused]:
    answers: dict[str, _Refused] = {}
    checked: list[CreatePartitionsTopic] = []
    allowed = ctx.allowed
    for entry in kept:
        if allowed is None or allowed(AclOperation.ALTER, ResourceType.TOPIC, entry.name):
            checked.append(entry)
        else:
            answers[entry.name] = _Refused(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                           f"not authorized to ALTER topic {entry.name!r}")
    results = check_growths([(e.name, e.count) for e in checked], _topics_seen(meta),
                            _UNCHECKED_LIMITS)
    for entry, result in zip(checked, results, strict=True):
        answers[entry.name] = (_Refused(0, "") if isinstance(result, Growth)
                               else _Refused(int(result.code), result.message))
    return answers


# --- InitProducerId (22) ----------------------------------------------------------------


def _init_producer_id_request(ctx: KafkaContext, body: Body) -> Step:
    bump = ctx.api_version >= 3  # KIP-360: the id and epoch held, to bump; -1: none
    return Dispatch(InitProducerIdRequest(
        transactional_id=body.get("transactional_id"),
        transaction_timeout_ms=body["transaction_timeout_ms"],
        producer_id=body["producer_id"] if bump else _NO_PRODUCER,
        producer_epoch=body["producer_epoch"] if bump else _NO_PRODUCER))


def _init_producer_id_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, InitProducerIdResponse)
    return {"throttle_time_ms": 0,
            "error_code": txn_code(ctx, INIT_PRODUCER_ID, response.error_code),
            "producer_id": response.producer_id if not response.error_code else _NO_PRODUCER,
            "producer_epoch": (response.producer_epoch if not response.error_code
                               else _NO_PRODUCER)}


# --- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) --------------------------------


def _kafka_only(resource_type: int, operation: int) -> str | None:
    """Why a Kafka ACL code names nothing groupwire has, or None."""
    if resource_type in _KAFKA_ONLY_RESOURCES:
        return f"resource type {_KAFKA_ONLY_RESOURCES[resource_type]}"
    if operation in _KAFKA_ONLY_OPERATIONS:
        return f"operation {_KAFKA_ONLY_OPERATIONS[operation]}"
    return None


def _describe_acls_request(ctx: KafkaContext, body: Body) -> Step:
    # a filter on what groupwire has no bindings for still goes through the broker
    # (authorization, SECURITY_DISABLED, the other fields' checks) with ANY in its place,
    # and its matches are dropped (``_describe_acls_response``)
    kind, operation = body["resource_type_filter"], body["operation"]
    return Dispatch(DescribeAclsRequest(
        resource_type_filter=ResourceType.ANY if kind in _KAFKA_ONLY_RESOURCES else kind,
        resource_name_filter=body["resource_name_filter"],
        pattern_type_filter=body["pattern_type_filter"],
        principal_filter=body["principal_filter"], host_filter=body["host_filter"],
        operation=AclOperation.ANY if operation in _KAFKA_ONLY_OPERATIONS else operation,
        permission_type=body["permission_type"]))


def _describe_acls_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DescribeAclsResponse)
    nothing = _kafka_only(body["resource_type_filter"], body["operation"]) is not None
    return {"throttle_time_ms": 0, "error_code": kafka_code(response.error_code),
            "error_message": response.error_message, "resources": [] if nothing else [
                {"resource_type": r.resource_type, "resource_name": r.resource_name,
                 "pattern_type": r.pattern_type, "acls": [
                     {"principal": a.principal, "host": a.host, "operation": a.operation,
                      "permission_type": a.permission_type} for a in r.acls]}
                for r in response.resources]}


def _create_acls_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(CreateAclsRequest(creations=[AclCreation(
        resource_type=c["resource_type"], resource_name=c["resource_name"],
        resource_pattern_type=c["resource_pattern_type"], principal=c["principal"],
        host=c["host"], operation=c["operation"], permission_type=c["permission_type"])
        for c in body["creations"]]))


def _create_acls_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, CreateAclsResponse)
    creations = body["creations"]
    if response.error_code:
        pairs = [(response.error_code, response.error_message)] * len(creations)
    else:
        pairs = [(r.error_code, r.error_message) for r in response.results]
    results = []
    for creation, (code, message) in zip(creations, pairs, strict=True):
        why = _kafka_only(creation["resource_type"], creation["operation"])
        if why is not None and code == ErrorCode.INVALID_REQUEST:
            message = f"{why}: groupwire has no such ACLs"
        results.append({"error_code": kafka_code(code), "error_message": message})
    return {"throttle_time_ms": 0, "results": results}


def _acl_filter(f: Body) -> DeleteAclsFilter:
    return DeleteAclsFilter(
        resource_type_filter=f["resource_type_filter"],
        resource_name_filter=f["resource_name_filter"],
        pattern_type_filter=f["pattern_type_filter"], principal_filter=f["principal_filter"],
        host_filter=f["host_filter"], operation=f["operation"],
        permission_type=f["permission_type"])


def _matches_something(f: Body) -> bool:
    return _kafka_only(f["resource_type_filter"], f["operation"]) is None


def _delete_acls_request(ctx: KafkaContext, body: Body) -> Step:
    # filters on what groupwire has no bindings for delete nothing: left out, answered
    # with no matches; the request still goes (authorization, SECURITY_DISABLED)
    return Dispatch(DeleteAclsRequest(filters=[
        _acl_filter(f) for f in body["filters"] if _matches_something(f)]))


def _delete_acls_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DeleteAclsResponse)
    filters = body["filters"]
    if response.error_code:
        code, message = kafka_code(response.error_code), response.error_message
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []}
            for _ in filters]}
    answered = iter(response.filter_results)
    results: list[Body] = []
    for f in filters:
        if not _matches_something(f):
            results.append({"error_code": 0, "error_message": None, "matching_acls": []})
            continue
        r = next(answered)
        results.append({"error_code": kafka_code(r.error_code),
                        "error_message": r.error_message, "matching_acls": [
                            {"error_code": kafka_code(m.error_code),
                             "error_message": m.error_message,
                             "resource_type": m.resource_type,
                             "resource_name": m.resource_name,
                             "pattern_type": m.pattern_type, "principal": m.principal,
                             "host": m.host, "operation": m.operation,
                             "permission_type": m.permission_type}
                            for m in r.matching_acls]})
    return {"throttle_time_ms": 0, "filter_results": results}


# --- DescribeUserScramCredentials (50), AlterUserScramCredentials (51) ------------------


def _describe_scram_request(ctx: KafkaContext, body: Body) -> Step:
    # Kafka describes every user for null and for an empty list alike (librdkafka sends
    # the empty list); the msgpack door's empty list names nobody
    users = body.get("users")
    return Dispatch(DescribeUserScramCredentialsRequest(
        users=[UserName(name=u["name"]) for u in users] if users else None))


def _describe_scram_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, DescribeUserScramCredentialsResponse)
    return {"throttle_time_ms": 0, "error_code": kafka_code(response.error_code),
            "error_message": response.error_message, "results": [
                {"user": r.user, "error_code": kafka_code(r.error_code),
                 "error_message": r.error_message, "credential_infos": [
                     {"mechanism": c.mechanism, "iterations": c.iterations}
                     for c in r.credential_infos]}
                for r in response.results]}


def _alter_scram_request(ctx: KafkaContext, body: Body) -> Step:
    return Dispatch(AlterUserScramCredentialsRequest(
        deletions=[ScramCredentialDeletion(name=d["name"], mechanism=d["mechanism"])
                   for d in body["deletions"]],
        upsertions=[ScramCredentialUpsertion(
            name=u["name"], mechanism=u["mechanism"], iterations=u["iterations"],
            salt=bytes(u["salt"]), salted_password=bytes(u["salted_password"]))
            for u in body["upsertions"]]))


def _alter_scram_response(ctx: KafkaContext, body: Body, response: Response) -> Body:
    assert isinstance(response, AlterUserScramCredentialsResponse)
    if response.error_code:  # one result per user named, as the broker answers them
        code = kafka_code(response.error_code)
        users = dict.fromkeys([*(d["name"] for d in body["deletions"]),
                               *(u["name"] for u in body["upsertions"])])
        results = [{"user": user, "error_code": code,
                    "error_message": response.error_message} for user in users]
    else:
        results = [{"user": r.user, "error_code": kafka_code(r.error_code),
                    "error_message": r.error_message} for r in response.results]
    return {"throttle_time_ms": 0, "results": results}


ADMIN_TRANSLATORS: dict[int, Translator] = {
    METADATA: Simple(_metadata_request, _metadata_response),
    CREATE_TOPICS: Simple(_create_topics_request, _create_topics_response),
    DELETE_TOPICS: Simple(_delete_topics_request, _delete_topics_response),
    INIT_PRODUCER_ID: Simple(_init_producer_id_request, _init_producer_id_response),
    DESCRIBE_ACLS: Simple(_describe_acls_request, _describe_acls_response),
    CREATE_ACLS: Simple(_create_acls_request, _create_acls_response),
    DELETE_ACLS: Simple(_delete_acls_request, _delete_acls_response),
    CREATE_PARTITIONS: Simple(_create_partitions_request, _create_partitions_response),
    DESCRIBE_USER_SCRAM_CREDENTIALS: Simple(_describe_scram_request, _describe_scram_response),
    ALTER_USER_SCRAM_CREDENTIALS: Simple(_alter_scram_request, _alter_scram_response),
    DESCRIBE_CLUSTER: Simple(_describe_cluster_request, _describe_cluster_response),
    **CONFIG_TRANSLATORS,
}
"""Kafka api key -> translator, for Metadata and the admin APIs."""
