"""Metadata and the admin APIs through the Kafka door: Kafka requests, as kafka-python
sends them, into the msgpack door's requests; the broker's answers into Kafka bodies that
kafka-python reads back unchanged (field names, versions, codes: its classes and error
table are the oracle), at the lowest and highest version served."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import errors as kerr
from kafka.admin import ACLOperation, ACLResourcePatternType, ResourceType
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest as KAlterScramRequest,
)
from kafka.protocol.admin import (
    AlterUserScramCredentialsResponse as KAlterScramResponse,
)
from kafka.protocol.admin import (
    CreateAclsRequest as KCreateAclsRequest,
)
from kafka.protocol.admin import (
    CreateAclsResponse as KCreateAclsResponse,
)
from kafka.protocol.admin import (
    CreatePartitionsRequest as KCreatePartitionsRequest,
)
from kafka.protocol.admin import (
    CreatePartitionsResponse as KCreatePartitionsResponse,
)
from kafka.protocol.admin import (
    CreateTopicsRequest as KCreateTopicsRequest,
)
from kafka.protocol.admin import (
    CreateTopicsResponse as KCreateTopicsResponse,
)
from kafka.protocol.admin import (
    DeleteAclsRequest as KDeleteAclsRequest,
)
from kafka.protocol.admin import (
    DeleteAclsResponse as KDeleteAclsResponse,
)
from kafka.protocol.admin import (
    DeleteTopicsRequest as KDeleteTopicsRequest,
)
from kafka.protocol.admin import (
    DeleteTopicsResponse as KDeleteTopicsResponse,
)
from kafka.protocol.admin import (
    DescribeAclsRequest as KDescribeAclsRequest,
)
from kafka.protocol.admin import (
    DescribeAclsResponse as KDescribeAclsResponse,
)
from kafka.protocol.admin import (
    DescribeClusterRequest as KDescribeClusterRequest,
)
from kafka.protocol.admin import (
    DescribeClusterResponse as KDescribeClusterResponse,
)
from kafka.protocol.admin import (
    DescribeUserScramCredentialsRequest as KDescribeScramRequest,
)
from kafka.protocol.admin import (
    DescribeUserScramCredentialsResponse as KDescribeScramResponse,
)
from kafka.protocol.metadata import MetadataRequest as KMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KMetadataResponse
from kafka.protocol.producer import InitProducerIdRequest as KInitProducerIdRequest
from kafka.protocol.producer import InitProducerIdResponse as KInitProducerIdResponse

from groupwire.broker.config import BrokerSettings
from groupwire.broker.kafka.apis.admin import ADMIN_TRANSLATORS, NOT_ASKED
from groupwire.broker.kafka.apis.configs import BrokerConfigs
from groupwire.broker.kafka.translate import (
    Answer,
    Body,
    Dispatch,
    KafkaAddress,
    KafkaContext,
)
from groupwire.protocol.acls import AclOperation
from groupwire.protocol.acls import ResourceType as GwResourceType
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AclCreation,
    AclCreationResult,
    AclDescription,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CreatableTopic,
    CreatableTopicResult,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    CredentialInfo,
    DeletableTopicResult,
    DeleteAclsFilter,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataTopic,
    Request,
    Response,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    UserName,
)
from tests.unit.broker.kafka import kafka_python_oracle as oracle

METADATA, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 3, 19, 20, 22
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, CREATE_PARTITIONS = 29, 30, 31, 37
DESCRIBE_SCRAM, ALTER_SCRAM, DESCRIBE_CLUSTER = 50, 51, 60

ADDRESSES = {0: KafkaAddress(0, "k0.example", 19092, "r0"),
             1: KafkaAddress(1, "k1.example", 19093)}
"""Kafka listeners of a three-broker cluster whose node 2 has none."""


def ctx(version: int, **kw: Any) -> KafkaContext:
    return KafkaContext(api_version=version, client_id="c1", principal="User:alice", **kw)


def dispatched(api_key: int, context: KafkaContext, body: Body) -> Request:
    step = ADMIN_TRANSLATORS[api_key].request(context, body)
    assert isinstance(step, Dispatch), step
    return step.request


def answered(api_key: int, context: KafkaContext, body: Body) -> Body:
    step = ADMIN_TRANSLATORS[api_key].request(context, body)
    assert isinstance(step, Answer), step
    return step.body


def translated(api_key: int, context: KafkaContext, body: Body, response: Response) -> Body:
    result = ADMIN_TRANSLATORS[api_key].response(context, body, response)
    assert isinstance(result, dict), result
    return result


class Acl:
    """An ``Allowed`` that says yes to the (operation, resource type, name) listed."""

    def __init__(self, *grants: tuple[AclOperation, GwResourceType, str]) -> None:
        self.grants = set(grants)
        self.asked: list[tuple[AclOperation, GwResourceType, str, bool]] = []

    def __call__(self, operation: AclOperation, resource_type: GwResourceType, name: str,
                 audit: bool = True) -> bool:
        self.asked.append((operation, resource_type, name, audit))
        return (operation, resource_type, name) in self.grants


# --- Metadata -------------------------------------------------------------------------


def test_metadata_v0_empty_list_asks_for_every_topic() -> None:
    body = oracle.request(KMetadataRequest, 0, topics=[])
    assert dispatched(METADATA, ctx(0), body) == MetadataRequest(
        topics=None, allow_auto_topic_creation=True)


def test_metadata_v0_names_topics_once_each_and_auto_creates() -> None:
    body = oracle.request(KMetadataRequest, 0, topics=[{"name": "a"}, {"name": "b"},
                                                       {"name": "a"}])
    assert dispatched(METADATA, ctx(0), body) == MetadataRequest(
        topics=[MetadataRequestTopic(name="a"), MetadataRequestTopic(name="b")],
        allow_auto_topic_creation=True)


@pytest.mark.parametrize(("topics", "expected"), [
    (None, None),
    ([], []),
    ([{"name": "a"}], [MetadataRequestTopic(name="a")]),
])
def test_metadata_v1_up_null_is_all_and_empty_is_none(
        topics: list[Body] | None, expected: list[MetadataRequestTopic] | None) -> None:
    for version in (1, 8):
        body = oracle.request(KMetadataRequest, version, topics=topics)
        assert dispatched(METADATA, ctx(version), body).topics == expected


def test_metadata_v8_passes_allow_auto_topic_creation_through() -> None:
    body = oracle.request(KMetadataRequest, 8, topics=[{"name": "a"}],
                          allow_auto_topic_creation=False)
    assert dispatched(METADATA, ctx(8), body).allow_auto_topic_creation is False
    body = oracle.request(KMetadataRequest, 4, topics=[{"name": "a"}],
                          allow_auto_topic_creation=True)
    assert dispatched(METADATA, ctx(4), body).allow_auto_topic_creation is True


def _cluster_metadata() -> MetadataResponse:
    """A three-broker cluster's answer, naming its brokers' msgpack listeners."""
    return MetadataResponse(
        brokers=[MetadataBroker(node_id=n, host=f"gw{n}", port=9092, rack=f"r{n}")
                 for n in (0, 1, 2)],
        cluster_id="prod", controller_id=1, topics=[
            MetadataTopic(name="orders", partitions=[
                MetadataPartition(partition_index=0, leader_id=2, leader_epoch=7,
                                  replica_nodes=[2, 0], isr_nodes=[2, 0],
                                  offline_replicas=[]),
                MetadataPartition(error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                                  partition_index=1, leader_id=-1, leader_epoch=3,
                                  replica_nodes=[0, 1], isr_nodes=[0],
                                  offline_replicas=[1])]),
            MetadataTopic(name="__consumer_offsets", is_internal=True, partitions=[
                MetadataPartition(partition_index=0, leader_id=0, leader_epoch=0,
                                  replica_nodes=[0], isr_nodes=[0])]),
            MetadataTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          error_message="unknown topic 'gone'", name="gone")])


def test_metadata_v0_answer_names_kafka_listeners_and_keeps_leaders() -> None:
    body = oracle.request(KMetadataRequest, 0, topics=[])
    got = oracle.response(KMetadataResponse, 0, translated(
        METADATA, ctx(0, addresses=ADDRESSES), body, _cluster_metadata()))
    assert got == {
        "brokers": [{"node_id": 0, "host": "k0.example", "port": 19092},
                    {"node_id": 1, "host": "k1.example", "port": 19093}],
        "topics": [
            {"error_code": 0, "name": "orders", "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 2,
                 "replica_nodes": [2, 0], "isr_nodes": [2, 0]},
                {"error_code": kerr.LeaderNotAvailableError.errno, "partition_index": 1,
                 "leader_id": -1, "replica_nodes": [0, 1], "isr_nodes": [0]}]},
            {"error_code": 0, "name": "__consumer_offsets", "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 0,
                 "replica_nodes": [0], "isr_nodes": [0]}]},
            {"error_code": kerr.UnknownTopicOrPartitionError.errno, "name": "gone",
             "partitions": []}]}


def test_metadata_v8_answer_has_every_field_of_its_version() -> None:
    body = oracle.request(KMetadataRequest, 8, topics=None)
    got = oracle.response(KMetadataResponse, 8, translated(
        METADATA, ctx(8, addresses=ADDRESSES), body, _cluster_metadata()))
    assert got["throttle_time_ms"] == 0
    assert got["brokers"] == [
        {"node_id": 0, "host": "k0.example", "port": 19092, "rack": "r0"},
        {"node_id": 1, "host": "k1.example", "port": 19093, "rack": "r1"}]
    assert (got["cluster_id"], got["controller_id"]) == ("prod", 1)
    orders, offsets, gone = got["topics"]
    assert orders["is_internal"] is False and offsets["is_internal"] is True
    assert orders["partitions"][1] == {
        "error_code": kerr.LeaderNotAvailableError.errno, "partition_index": 1,
        "leader_id": -1, "leader_epoch": 3, "replica_nodes": [0, 1], "isr_nodes": [0],
        "offline_replicas": [1]}
    assert orders["partitions"][0]["leader_epoch"] == 7
    assert [t["topic_authorized_operations"] for t in got["topics"]] == [NOT_ASKED] * 3
    assert got["cluster_authorized_operations"] == NOT_ASKED
    assert gone["error_code"] == kerr.UnknownTopicOrPartitionError.errno


def test_metadata_without_addresses_takes_the_brokers_answer() -> None:
    body = oracle.request(KMetadataRequest, 1, topics=None)
    got = oracle.response(KMetadataResponse, 1, translated(
        METADATA, ctx(1), body, _cluster_metadata()))
    assert got["brokers"] == [{"node_id": n, "host": f"gw{n}", "port": 9092, "rack": f"r{n}"}
                              for n in (0, 1, 2)]


def test_metadata_v8_authorized_operations_when_asked() -> None:
    acl = Acl((AclOperation.READ, GwResourceType.TOPIC, "orders"),
              (AclOperation.DESCRIBE, GwResourceType.TOPIC, "orders"),
              (AclOperation.DESCRIBE, GwResourceType.CLUSTER, "kafka-cluster"))
    body = oracle.request(KMetadataRequest, 8, topics=[{"name": "orders"}],
                          include_topic_authorized_operations=True,
                          include_cluster_authorized_operations=True)
    answer = MetadataResponse(brokers=[MetadataBroker(node_id=0, host="h", port=1)],
                              cluster_id="c", controller_id=0, topics=[
                                  MetadataTopic(name="orders")])
    got = oracle.response(KMetadataResponse, 8, translated(
        METADATA, ctx(8, allowed=acl), body, answer))
    ops = got["topics"][0]["topic_authorized_operations"]
    assert ops == (1 << ACLOperation.READ) | (1 << ACLOperation.DESCRIBE)
    # IDEMPOTENT_WRITE only as the ACLs say (WRITE on a topic lets a producer in too,
    # but Kafka's bitfield names the cluster's own ACLs)
    assert got["cluster_authorized_operations"] == 1 << ACLOperation.DESCRIBE
    assert all(audit is False for *_, audit in acl.asked)  # bitfields log no denials


def test_metadata_v8_authorized_operations_without_authorizer_are_all() -> None:
    body = oracle.request(KMetadataRequest, 8, topics=[{"name": "t"}],
                          include_topic_authorized_operations=True,
                          include_cluster_authorized_operations=True)
    answer = MetadataResponse(topics=[MetadataTopic(name="t")])
    got = oracle.response(KMetadataResponse, 8, translated(METADATA, ctx(8), body, answer))
    topic_ops = {ACLOperation.READ, ACLOperation.WRITE, ACLOperation.CREATE,
                 ACLOperation.DELETE, ACLOperation.ALTER, ACLOperation.DESCRIBE,
                 ACLOperation.DESCRIBE_CONFIGS, ACLOperation.ALTER_CONFIGS}
    assert got["topics"][0]["topic_authorized_operations"] == sum(1 << op for op in topic_ops)


def test_metadata_v8_cluster_operations_zero_without_describe() -> None:
    body = oracle.request(KMetadataRequest, 8, topics=[],
                          include_cluster_authorized_operations=True)
    got = translated(METADATA, ctx(8, allowed=Acl()), body, MetadataResponse())
    assert got["cluster_authorized_operations"] == 0


@pytest.mark.parametrize("version", [1, 8])
def test_metadata_top_level_refusal_lands_on_every_topic_named(version: int) -> None:
    body = oracle.request(KMetadataRequest, version, topics=[{"name": "a"}, {"name": "b"}])
    refusal = MetadataResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="no")
    got = oracle.response(KMetadataResponse, version, translated(
        METADATA, ctx(version, addresses=ADDRESSES, controller_id=1), body, refusal))
    assert [(t["name"], t["error_code"], t["partitions"]) for t in got["topics"]] == [
        ("a", kerr.InvalidRequestError.errno, []), ("b", kerr.InvalidRequestError.errno, [])]
    assert [b["node_id"] for b in got["brokers"]] == [0, 1]  # the door still knows them
    assert got["controller_id"] == 1


def test_metadata_top_level_refusal_of_all_topics_lists_none() -> None:
    body = oracle.request(KMetadataRequest, 1, topics=None)
    refusal = MetadataResponse(error_code=ErrorCode.INVALID_REQUEST)
    assert translated(METADATA, ctx(1), body, refusal)["topics"] == []


def test_metadata_groupwire_codes_become_kafka_codes() -> None:
    body = oracle.request(KMetadataRequest, 1, topics=None)
    answer = MetadataResponse(topics=[MetadataTopic(name="t", partitions=[
        MetadataPartition(error_code=ErrorCode.PARTITION_NOT_OWNED, partition_index=0)])])
    got = translated(METADATA, ctx(1), body, answer)
    assert got["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION


# --- DescribeCluster --------------------------------------------------------------------


def test_describe_cluster_is_a_metadata_for_no_topic() -> None:
    body = oracle.request(KDescribeClusterRequest, 0)
    assert dispatched(DESCRIBE_CLUSTER, ctx(0), body) == MetadataRequest(
        topics=[], allow_auto_topic_creation=False)


def test_describe_cluster_answer() -> None:
    body = oracle.request(KDescribeClusterRequest, 0,
                          include_cluster_authorized_operations=True)
    answer = MetadataResponse(
        brokers=[MetadataBroker(node_id=n, host=f"gw{n}", port=9092) for n in (0, 2)],
        cluster_id="prod", controller_id=0)
    acl = Acl((AclOperation.DESCRIBE, GwResourceType.CLUSTER, "kafka-cluster"),
              (AclOperation.ALTER, GwResourceType.CLUSTER, "kafka-cluster"),
              (AclOperation.IDEMPOTENT_WRITE, GwResourceType.CLUSTER, "kafka-cluster"))
    got = oracle.response(KDescribeClusterResponse, 0, translated(
        DESCRIBE_CLUSTER, ctx(0, addresses=ADDRESSES, allowed=acl), body, answer))
    assert got == {
        "throttle_time_ms": 0, "error_code": 0, "error_message": None,
        "cluster_id": "prod", "controller_id": 0,
        "brokers": [{"broker_id": 0, "host": "k0.example", "port": 19092, "rack": "r0"}],
        "cluster_authorized_operations": (1 << ACLOperation.DESCRIBE)
        | (1 << ACLOperation.ALTER) | (1 << ACLOperation.IDEMPOTENT_WRITE)}


def test_describe_cluster_refusal_is_top_level() -> None:
    body = oracle.request(KDescribeClusterRequest, 0)
    refusal = MetadataResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="bad")
    got = oracle.response(KDescribeClusterResponse, 0, translated(
        DESCRIBE_CLUSTER, ctx(0, cluster_id="door", controller_id=-1), body, refusal))
    assert (got["error_code"], got["error_message"]) == (kerr.InvalidRequestError.errno, "bad")
    assert (got["cluster_id"], got["controller_id"]) == ("door", -1)
    assert got["cluster_authorized_operations"] == NOT_ASKED


# --- CreateTopics -----------------------------------------------------------------------


def _configs() -> BrokerConfigs:
    return BrokerConfigs(BrokerSettings(log_retention_ms=3_600_000),
                         topic_exists=lambda name: name == "orders")


def _new_topic(name: str, partitions: int = 3, rf: int = 1, **kw: Any) -> Body:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": kw.get("assignments", []), "configs": kw.get("configs", [])}


@pytest.mark.parametrize("version", [2, 4])
def test_create_topics_request(version: int) -> None:
    body = oracle.request(KCreateTopicsRequest, version, topics=[
        _new_topic("a", 3, 1), _new_topic("b", -1, -1)], timeout_ms=5000,
        validate_only=False)
    assert dispatched(CREATE_TOPICS, ctx(version), body) == CreateTopicsRequest(topics=[
        CreatableTopic(name="a", num_partitions=3, replication_factor=1),
        CreatableTopic(name="b", num_partitions=-1, replication_factor=-1)])


@pytest.mark.parametrize("version", [2, 4])
def test_create_topics_answer(version: int) -> None:
    body = oracle.request(KCreateTopicsRequest, version, topics=[
        _new_topic("a"), _new_topic("orders")], timeout_ms=5000, validate_only=False)
    answer = CreateTopicsResponse(topics=[
        CreatableTopicResult(name="a", num_partitions=3, replication_factor=1),
        CreatableTopicResult(name="orders", error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
                             error_message="topic 'orders' already exists")])
    got = oracle.response(KCreateTopicsResponse, version, translated(
        CREATE_TOPICS, ctx(version), body, answer))
    assert got == {"throttle_time_ms": 0, "topics": [
        {"name": "a", "error_code": 0, "error_message": None},
        {"name": "orders", "error_code": kerr.TopicAlreadyExistsError.errno,
         "error_message": "topic 'orders' already exists"}]}


def test_create_topics_top_level_refusal_lands_on_every_topic() -> None:
    body = oracle.request(KCreateTopicsRequest, 4, topics=[_new_topic("a"), _new_topic("b")],
                          timeout_ms=5000, validate_only=False)
    refusal = CreateTopicsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="no")
    got = oracle.response(KCreateTopicsResponse, 4, translated(
        CREATE_TOPICS, ctx(4), body, refusal))
    assert got["topics"] == [
        {"name": n, "error_code": kerr.InvalidRequestError.errno, "error_message": "no"}
        for n in ("a", "b")]


def test_create_topics_configs_taken_only_as_every_topic_has_them() -> None:
    body = oracle.request(KCreateTopicsRequest, 4, topics=[
        _new_topic("same", configs=[{"name": "retention.ms", "value": "3600000"},
                                    {"name": "cleanup.policy", "value": "delete"},
                                    {"name": "compression.type", "value": "producer"}]),
        _new_topic("shorter", configs=[{"name": "retention.ms", "value": "1000"}]),
        _new_topic("compacted", configs=[{"name": "cleanup.policy", "value": "compact"}]),
        _new_topic("odd", configs=[{"name": "no.such.config", "value": "1"}])],
        timeout_ms=5000, validate_only=False)
    context = ctx(4, configs=_configs())
    assert dispatched(CREATE_TOPICS, context, body) == CreateTopicsRequest(topics=[
        CreatableTopic(name="same", num_partitions=3, replication_factor=1)])
    got = oracle.response(KCreateTopicsResponse, 4, translated(
        CREATE_TOPICS, context, body, CreateTopicsResponse(topics=[
            CreatableTopicResult(name="same")])))
    codes = [(t["name"], t["error_code"]) for t in got["topics"]]
    assert codes == [("same", 0), ("shorter", kerr.PolicyViolationError.errno),
                     ("compacted", kerr.PolicyViolationError.errno),
                     ("odd", kerr.InvalidConfigurationError.errno)]
    assert "retention.ms" in got["topics"][1]["error_message"]
    assert "--log-retention-ms" in got["topics"][1]["error_message"]


def test_create_topics_configs_without_a_view_are_refused() -> None:
    body = oracle.request(KCreateTopicsRequest, 2, topics=[
        _new_topic("a", configs=[{"name": "retention.ms", "value": "1"}])],
        timeout_ms=5000, validate_only=False)
    got = answered(CREATE_TOPICS, ctx(2), body)  # nothing left to dispatch
    assert got["topics"][0]["error_code"] == kerr.InvalidConfigurationError.errno


def test_create_topics_name_twice_refused_by_the_door() -> None:
    body = oracle.request(KCreateTopicsRequest, 4, topics=[
        _new_topic("a"), _new_topic("b"), _new_topic("a")], timeout_ms=1,
        validate_only=False)
    assert dispatched(CREATE_TOPICS, ctx(4), body) == CreateTopicsRequest(topics=[
        CreatableTopic(name="b", num_partitions=3, replication_factor=1)])
    got = translated(CREATE_TOPICS, ctx(4), body, CreateTopicsResponse(topics=[
        CreatableTopicResult(name="b")]))
    assert [(t["name"], t["error_code"]) for t in got["topics"]] == [
        ("a", ErrorCode.INVALID_REQUEST), ("b", 0), ("a", ErrorCode.INVALID_REQUEST)]


def _assigned(*replicas: list[int]) -> list[Body]:
    return [{"partition_index": i, "broker_ids": ids} for i, ids in enumerate(replicas)]


def test_create_topics_assignment_on_the_only_broker_is_a_partition_count() -> None:
    body = oracle.request(KCreateTopicsRequest, 4, topics=[
        _new_topic("a", -1, -1, assignments=_assigned([0], [0], [0]))],
        timeout_ms=1, validate_only=False)
    single = ctx(4, addresses={0: KafkaAddress(0, "h", 9092)})
    assert dispatched(CREATE_TOPICS, single, body) == CreateTopicsRequest(topics=[
        CreatableTopic(name="a", num_partitions=3, replication_factor=1)])


@pytest.mark.parametrize(("partitions", "assignments", "addresses"), [
    (-1, _assigned([0], [1]), ADDRESSES),            # placement across brokers
    (-1, _assigned([0, 1]), ADDRESSES),              # replicas placed by hand
    (-1, _assigned([1]), {0: ADDRESSES[0]}),         # a broker that is not the one
    (2, _assigned([0], [0]), {0: ADDRESSES[0]}),     # both a count and an assignment
    (-1, [{"partition_index": 1, "broker_ids": [0]}], {0: ADDRESSES[0]}),  # not 0..n-1
])
def test_create_topics_other_assignments_are_invalid_requests(
        partitions: int, assignments: list[Body], addresses: dict[int, KafkaAddress],
) -> None:
    body = oracle.request(KCreateTopicsRequest, 4, topics=[
        _new_topic("a", partitions, -1, assignments=assignments)], timeout_ms=1,
        validate_only=False)
    got = oracle.response(KCreateTopicsResponse, 4, answered(
        CREATE_TOPICS, ctx(4, addresses=addresses), body))
    assert got["topics"][0]["error_code"] == kerr.InvalidRequestError.errno
    assert got["topics"][0]["error_message"]


def _seen(*topics: MetadataTopic, brokers: int = 1) -> MetadataResponse:
    return MetadataResponse(brokers=[MetadataBroker(node_id=n, host="h", port=1)
                                     for n in range(brokers)], topics=list(topics))


def _partitions(count: int) -> list[MetadataPartition]:
    return [MetadataPartition(partition_index=i, leader_id=0) for i in range(count)]


def test_create_topics_validate_only_looks_without_creating() -> None:
    body = oracle.request(KCreateTopicsRequest, 4, topics=[
        _new_topic("new"), _new_topic("orders"), _new_topic("coming"),
        _new_topic("bad name"), _new_topic("wide", 3, 2), _new_topic("secret"),
        _new_topic("none", 0, 1)], timeout_ms=1, validate_only=True)
    peek = dispatched(CREATE_TOPICS, ctx(4), body)
    assert peek == MetadataRequest(topics=[MetadataRequestTopic(name=n) for n in (
        "new", "orders", "coming", "bad name", "wide", "secret", "none")],
        allow_auto_topic_creation=False)
    seen = _seen(
        MetadataTopic(name="new", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        MetadataTopic(name="orders", partitions=_partitions(3)),
        MetadataTopic(name="coming", error_code=ErrorCode.LEADER_NOT_AVAILABLE),
        MetadataTopic(name="bad name", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        MetadataTopic(name="wide", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        MetadataTopic(name="secret", error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        MetadataTopic(name="none", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    got = oracle.response(KCreateTopicsResponse, 4, translated(
        CREATE_TOPICS, ctx(4), body, seen))
    assert [(t["name"], t["error_code"]) for t in got["topics"]] == [
        ("new", 0),
        ("orders", kerr.TopicAlreadyExistsError.errno),
        ("coming", kerr.TopicAlreadyExistsError.errno),
        ("bad name", kerr.InvalidTopicError.errno),
        ("wide", kerr.InvalidReplicationFactorError.errno),
        ("secret", 0),  # existence not told to who may not describe it
        ("none", kerr.InvalidPartitionsError.errno)]


def test_create_topics_validate_only_checks_create_permission() -> None:
    body = oracle.request(KCreateTopicsRequest, 2, topics=[
        _new_topic("mine"), _new_topic("theirs")], timeout_ms=1, validate_only=True)
    acl = Acl((AclOperation.CREATE, GwResourceType.TOPIC, "mine"))
    got = translated(CREATE_TOPICS, ctx(2, allowed=acl), body, _seen())
    assert [(t["name"], t["error_code"]) for t in got["topics"]] == [
        ("mine", 0), ("theirs", kerr.TopicAuthorizationFailedError.errno)]


def test_create_topics_validate_only_refused_metadata_spreads() -> None:
    body = oracle.request(KCreateTopicsRequest, 2, topics=[_new_topic("a")], timeout_ms=1,
                          validate_only=True)
    refusal = MetadataResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="x")
    got = translated(CREATE_TOPICS, ctx(2), body, refusal)
    assert got["topics"] == [{"name": "a", "error_code": ErrorCode.INVALID_REQUEST,
                              "error_message": "x"}]


# --- DeleteTopics -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 3])
def test_delete_topics(version: int) -> None:
    body = oracle.request(KDeleteTopicsRequest, version, topic_names=["a", "b"],
                          timeout_ms=3000)
    assert dispatched(DELETE_TOPICS, ctx(version), body) == DeleteTopicsRequest(
        topic_names=["a", "b"], timeout_ms=3000)
    answer = DeleteTopicsResponse(responses=[
        DeletableTopicResult(name="a"),
        DeletableTopicResult(name="b", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             error_message="unknown topic 'b'")])
    got = oracle.response(KDeleteTopicsResponse, version, translated(
        DELETE_TOPICS, ctx(version), body, answer))
    assert got == {"throttle_time_ms": 0, "responses": [
        {"name": "a", "error_code": 0},
        {"name": "b", "error_code": kerr.UnknownTopicOrPartitionError.errno}]}


def test_delete_topics_top_level_refusal_lands_on_every_topic() -> None:
    body = oracle.request(KDeleteTopicsRequest, 3, topic_names=["a", "b"], timeout_ms=1)
    refusal = DeleteTopicsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    got = translated(DELETE_TOPICS, ctx(3), body, refusal)
    assert got["responses"] == [
        {"name": n, "error_code": kerr.ClusterAuthorizationFailedError.errno}
        for n in ("a", "b")]


# --- CreatePartitions -------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_create_partitions(version: int) -> None:
    body = oracle.request(KCreatePartitionsRequest, version, topics=[
        {"name": "a", "count": 6, "assignments": None},
        {"name": "b", "count": 2, "assignments": [{"broker_ids": [0]}]}],
        timeout_ms=1000, validate_only=False)
    single = ctx(version, addresses={0: ADDRESSES[0]})
    assert dispatched(CREATE_PARTITIONS, single, body) == CreatePartitionsRequest(topics=[
        CreatePartitionsTopic(name="a", count=6), CreatePartitionsTopic(name="b", count=2)])
    answer = CreatePartitionsResponse(results=[
        CreatePartitionsTopicResult(name="a"),
        CreatePartitionsTopicResult(name="b", error_code=ErrorCode.INVALID_PARTITIONS,
                                    error_message="must be larger")])
    got = oracle.response(KCreatePartitionsResponse, version, translated(
        CREATE_PARTITIONS, single, body, answer))
    assert got == {"throttle_time_ms": 0, "results": [
        {"name": "a", "error_code": 0, "error_message": None},
        {"name": "b", "error_code": kerr.InvalidPartitionsError.errno,
         "error_message": "must be larger"}]}


def test_create_partitions_placed_by_hand_is_refused_by_the_door() -> None:
    body = oracle.request(KCreatePartitionsRequest, 1, topics=[
        {"name": "a", "count": 3, "assignments": [{"broker_ids": [1]}]}],
        timeout_ms=1, validate_only=False)
    got = answered(CREATE_PARTITIONS, ctx(1, addresses=ADDRESSES), body)
    assert got["results"][0]["error_code"] == kerr.InvalidRequestError.errno


def test_create_partitions_top_level_refusal_lands_on_every_topic() -> None:
    body = oracle.request(KCreatePartitionsRequest, 0, topics=[
        {"name": "a", "count": 3, "assignments": None}], timeout_ms=1, validate_only=False)
    refusal = CreatePartitionsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                       error_message="x")
    got = oracle.response(KCreatePartitionsResponse, 0, translated(
        CREATE_PARTITIONS, ctx(0), body, refusal))
    assert got["results"] == [{"name": "a", "error_code": kerr.InvalidRequestError.errno,
                               "error_message": "x"}]


def test_create_partitions_validate_only() -> None:
    body = oracle.request(KCreatePartitionsRequest, 1, topics=[
        {"name": n, "count": c, "assignments": None}
        for n, c in (("grow", 4), ("shrink", 1), ("gone", 2), ("__consumer_offsets", 60),
                     ("locked", 9))], timeout_ms=1, validate_only=True)
    peek = dispatched(CREATE_PARTITIONS, ctx(1), body)
    assert isinstance(peek, MetadataRequest) and not peek.allow_auto_topic_creation
    seen = _seen(
        MetadataTopic(name="grow", partitions=_partitions(2)),
        MetadataTopic(name="shrink", partitions=_partitions(2)),
        MetadataTopic(name="gone", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        MetadataTopic(name="__consumer_offsets", is_internal=True,
                      partitions=_partitions(50)),
        MetadataTopic(name="locked", partitions=_partitions(2)))
    acl = Acl(*((AclOperation.ALTER, GwResourceType.TOPIC, n)
                for n in ("grow", "shrink", "gone", "__consumer_offsets")))
    got = translated(CREATE_PARTITIONS, ctx(1, allowed=acl), body, seen)
    assert [(r["name"], r["error_code"]) for r in got["results"]] == [
        ("grow", 0), ("shrink", kerr.InvalidPartitionsError.errno),
        ("gone", kerr.UnknownTopicOrPartitionError.errno),
        ("__consumer_offsets", kerr.InvalidTopicError.errno),
        ("locked", kerr.TopicAuthorizationFailedError.errno)]


# --- InitProducerId ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_init_producer_id_goes_to_the_broker_as_it_came(version: int,
                                                        transactional_id: str | None) -> None:
    body = oracle.request(KInitProducerIdRequest, version, transactional_id=transactional_id,
                          transaction_timeout_ms=60000)
    step = ADMIN_TRANSLATORS[INIT_PRODUCER_ID].request(ctx(version), body)
    assert step == Dispatch(InitProducerIdRequest(transactional_id=transactional_id,
                                                    transaction_timeout_ms=60000))


@pytest.mark.parametrize(("answer", "expected"), [
    (InitProducerIdResponse(producer_id=7, producer_epoch=0),
     {"error_code": 0, "producer_id": 7, "producer_epoch": 0}),
    (InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="no"),
     {"error_code": kerr.CoordinatorNotAvailableError.errno, "producer_id": -1,
      "producer_epoch": -1}),
    (InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
     {"error_code": kerr.CoordinatorLoadInProgressError.errno, "producer_id": -1,
      "producer_epoch": -1}),
])
def test_init_producer_id_answers_as_the_broker_did(answer: Any, expected: Body) -> None:
    body = oracle.request(KInitProducerIdRequest, 1, transactional_id=None,
                          transaction_timeout_ms=60000)
    got = oracle.response(KInitProducerIdResponse, 1, ADMIN_TRANSLATORS[INIT_PRODUCER_ID].response(
        ctx(1), body, answer))
    assert got == {"throttle_time_ms": 0, **expected}


# --- DescribeAcls, CreateAcls, DeleteAcls -----------------------------------------------


def _acl_filter(**kw: Any) -> Body:
    base = {"resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "orders",
            "pattern_type_filter": ACLResourcePatternType.LITERAL,
            "principal_filter": None, "host_filter": None, "operation": ACLOperation.ANY,
            "permission_type": 1}
    return {**base, **kw}


def test_describe_acls() -> None:
    body = oracle.request(KDescribeAclsRequest, 1, **_acl_filter(
        pattern_type_filter=ACLResourcePatternType.MATCH, principal_filter="User:bob"))
    assert dispatched(DESCRIBE_ACLS, ctx(1), body) == DescribeAclsRequest(
        resource_type_filter=2, resource_name_filter="orders", pattern_type_filter=2,
        principal_filter="User:bob", host_filter=None, operation=1, permission_type=1)
    answer = DescribeAclsResponse(resources=[DescribeAclsResource(
        resource_type=2, resource_name="ord", pattern_type=4, acls=[
            AclDescription(principal="User:bob", host="*", operation=3,
                           permission_type=3)])])
    got = oracle.response(KDescribeAclsResponse, 1, translated(
        DESCRIBE_ACLS, ctx(1), body, answer))
    assert got == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                   "resources": [{"resource_type": ResourceType.TOPIC,
                                  "resource_name": "ord",
                                  "pattern_type": ACLResourcePatternType.PREFIXED,
                                  "acls": [{"principal": "User:bob", "host": "*",
                                            "operation": ACLOperation.READ,
                                            "permission_type": 3}]}]}


def test_describe_acls_refusal_is_top_level() -> None:
    body = oracle.request(KDescribeAclsRequest, 1, **_acl_filter())
    refusal = DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED,
                                   error_message="no authorizer")
    got = oracle.response(KDescribeAclsResponse, 1, translated(
        DESCRIBE_ACLS, ctx(1), body, refusal))
    assert (got["error_code"], got["error_message"], got["resources"]) == (
        kerr.SecurityDisabledError.errno, "no authorizer", [])


@pytest.mark.parametrize(("kafka_only", "sent_type", "sent_operation"), [
    ({"resource_type_filter": ResourceType.USER, "operation": ACLOperation.READ},
     GwResourceType.ANY, AclOperation.READ),
    ({"resource_type_filter": ResourceType.DELEGATION_TOKEN}, GwResourceType.ANY,
     AclOperation.ANY),
    ({"operation": ACLOperation.CREATE_TOKENS}, GwResourceType.TOPIC, AclOperation.ANY),
])
def test_describe_acls_of_what_groupwire_has_not_matches_nothing(
        kafka_only: Body, sent_type: int, sent_operation: int) -> None:
    body = oracle.request(KDescribeAclsRequest, 1, **_acl_filter(**kafka_only))
    sent = dispatched(DESCRIBE_ACLS, ctx(1), body)
    assert isinstance(sent, DescribeAclsRequest)  # still checked and authorized there
    assert (sent.resource_type_filter, sent.operation) == (sent_type, sent_operation)
    anything = DescribeAclsResponse(resources=[DescribeAclsResource(
        resource_type=2, resource_name="orders", pattern_type=3,
        acls=[AclDescription(principal="User:x", host="*", operation=4,
                             permission_type=3)])])
    assert translated(DESCRIBE_ACLS, ctx(1), body, anything)["resources"] == []


def test_transactional_id_and_idempotent_write_acls_are_groupwire_s_too() -> None:
    """Resource type 5 and operation 12 pass through as they are, both ways."""
    body = oracle.request(KDescribeAclsRequest, 1, **_acl_filter(
        resource_type_filter=ResourceType.TRANSACTIONAL_ID,
        operation=ACLOperation.IDEMPOTENT_WRITE))
    sent = dispatched(DESCRIBE_ACLS, ctx(1), body)
    assert isinstance(sent, DescribeAclsRequest)
    assert (sent.resource_type_filter, sent.operation) == (
        GwResourceType.TRANSACTIONAL_ID, AclOperation.IDEMPOTENT_WRITE)
    found = DescribeAclsResponse(resources=[DescribeAclsResource(
        resource_type=5, resource_name="app", pattern_type=4,
        acls=[AclDescription(principal="User:x", host="*", operation=4, permission_type=3)])])
    got = oracle.response(KDescribeAclsResponse, 1, translated(
        DESCRIBE_ACLS, ctx(1), body, found))
    assert [(r["resource_type"], r["resource_name"], r["pattern_type"])
            for r in got["resources"]] == [(ResourceType.TRANSACTIONAL_ID, "app",
                                             ACLResourcePatternType.PREFIXED)]
    created = oracle.request(KCreateAclsRequest, 1, creations=[_creation(
        resource_type=ResourceType.TRANSACTIONAL_ID, resource_name="app",
        operation=ACLOperation.WRITE)])
    sent = dispatched(CREATE_ACLS, ctx(1), created)
    assert isinstance(sent, CreateAclsRequest)
    assert [(c.resource_type, c.resource_name, c.operation) for c in sent.creations] == [
        (5, "app", 4)]
    deleted = oracle.request(KDeleteAclsRequest, 1, filters=[_acl_filter(
        resource_type_filter=ResourceType.TRANSACTIONAL_ID, resource_name_filter="app")])
    sent = dispatched(DELETE_ACLS, ctx(1), deleted)
    assert isinstance(sent, DeleteAclsRequest)
    assert [(f.resource_type_filter, f.resource_name_filter) for f in sent.filters] == [
        (5, "app")]


def _creation(**kw: Any) -> Body:
    base = {"resource_type": ResourceType.TOPIC, "resource_name": "orders",
            "resource_pattern_type": ACLResourcePatternType.LITERAL,
            "principal": "User:bob", "host": "*", "operation": ACLOperation.READ,
            "permission_type": 3}
    return {**base, **kw}


def test_create_acls() -> None:
    body = oracle.request(KCreateAclsRequest, 1, creations=[
        _creation(), _creation(resource_pattern_type=ACLResourcePatternType.PREFIXED,
                               operation=ACLOperation.WRITE)])
    assert dispatched(CREATE_ACLS, ctx(1), body) == CreateAclsRequest(creations=[
        AclCreation(resource_type=2, resource_name="orders", resource_pattern_type=3,
                    principal="User:bob", host="*", operation=3, permission_type=3),
        AclCreation(resource_type=2, resource_name="orders", resource_pattern_type=4,
                    principal="User:bob", host="*", operation=4, permission_type=3)])
    answer = CreateAclsResponse(results=[
        AclCreationResult(),
        AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message="bad")])
    got = oracle.response(KCreateAclsResponse, 1, translated(
        CREATE_ACLS, ctx(1), body, answer))
    assert got == {"throttle_time_ms": 0, "results": [
        {"error_code": 0, "error_message": None},
        {"error_code": kerr.InvalidRequestError.errno, "error_message": "bad"}]}


def test_create_acls_top_level_refusal_lands_on_every_creation() -> None:
    body = oracle.request(KCreateAclsRequest, 1, creations=[_creation(), _creation()])
    refusal = CreateAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="x")
    got = translated(CREATE_ACLS, ctx(1), body, refusal)
    assert got["results"] == [{"error_code": ErrorCode.INVALID_REQUEST,
                               "error_message": "x"}] * 2


def test_create_acls_of_what_groupwire_has_not_say_so() -> None:
    body = oracle.request(KCreateAclsRequest, 1, creations=[
        _creation(resource_type=ResourceType.DELEGATION_TOKEN, resource_name="tok")])
    answer = CreateAclsResponse(results=[AclCreationResult(
        error_code=ErrorCode.INVALID_REQUEST, error_message="resource type UNKNOWN ...")])
    got = translated(CREATE_ACLS, ctx(1), body, answer)
    assert got["results"][0]["error_code"] == kerr.InvalidRequestError.errno
    assert "DELEGATION_TOKEN" in got["results"][0]["error_message"]


def test_delete_acls() -> None:
    body = oracle.request(KDeleteAclsRequest, 1, filters=[
        _acl_filter(), _acl_filter(resource_type_filter=ResourceType.DELEGATION_TOKEN),
        _acl_filter(resource_name_filter=None)])
    assert dispatched(DELETE_ACLS, ctx(1), body) == DeleteAclsRequest(filters=[
        DeleteAclsFilter(resource_type_filter=2, resource_name_filter="orders",
                         pattern_type_filter=3, principal_filter=None, host_filter=None,
                         operation=1, permission_type=1),
        DeleteAclsFilter(resource_type_filter=2, resource_name_filter=None,
                         pattern_type_filter=3, principal_filter=None, host_filter=None,
                         operation=1, permission_type=1)])
    matched = DeleteAclsMatchingAcl(resource_type=2, resource_name="orders",
                                    pattern_type=3, principal="User:bob", host="*",
                                    operation=3, permission_type=3)
    answer = DeleteAclsResponse(filter_results=[
        DeleteAclsFilterResult(matching_acls=[matched]), DeleteAclsFilterResult()])
    got = oracle.response(KDeleteAclsResponse, 1, translated(
        DELETE_ACLS, ctx(1), body, answer))
    assert got == {"throttle_time_ms": 0, "filter_results": [
        {"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": ResourceType.TOPIC,
             "resource_name": "orders", "pattern_type": ACLResourcePatternType.LITERAL,
             "principal": "User:bob", "host": "*", "operation": ACLOperation.READ,
             "permission_type": 3}]},
        {"error_code": 0, "error_message": None, "matching_acls": []},
        {"error_code": 0, "error_message": None, "matching_acls": []}]}


def test_delete_acls_top_level_refusal_lands_on_every_filter() -> None:
    body = oracle.request(KDeleteAclsRequest, 1, filters=[
        _acl_filter(), _acl_filter(operation=ACLOperation.CREATE_TOKENS)])
    assert dispatched(DELETE_ACLS, ctx(1), body) == DeleteAclsRequest(filters=[
        DeleteAclsFilter(resource_type_filter=2, resource_name_filter="orders",
                         pattern_type_filter=3, principal_filter=None, host_filter=None,
                         operation=1, permission_type=1)])
    refusal = DeleteAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                 error_message="not authorized to ALTER the cluster")
    got = oracle.response(KDeleteAclsResponse, 1, translated(
        DELETE_ACLS, ctx(1), body, refusal))
    assert [(r["error_code"], r["matching_acls"]) for r in got["filter_results"]] == [
        (kerr.ClusterAuthorizationFailedError.errno, [])] * 2


def test_delete_acls_only_of_what_groupwire_has_not_still_asks_the_broker() -> None:
    body = oracle.request(KDeleteAclsRequest, 1, filters=[
        _acl_filter(resource_type_filter=ResourceType.USER)])
    assert dispatched(DELETE_ACLS, ctx(1), body) == DeleteAclsRequest(filters=[])
    got = translated(DELETE_ACLS, ctx(1), body, DeleteAclsResponse())
    assert got["filter_results"] == [{"error_code": 0, "error_message": None,
                                      "matching_acls": []}]


# --- DescribeUserScramCredentials, AlterUserScramCredentials ----------------------------


def test_describe_scram_credentials() -> None:
    every = oracle.request(KDescribeScramRequest, 0, users=None)
    assert dispatched(DESCRIBE_SCRAM, ctx(0), every) == DescribeUserScramCredentialsRequest(
        users=None)
    body = oracle.request(KDescribeScramRequest, 0, users=[{"name": "alice"},
                                                           {"name": "nobody"}])
    assert dispatched(DESCRIBE_SCRAM, ctx(0), body) == DescribeUserScramCredentialsRequest(
        users=[UserName(name="alice"), UserName(name="nobody")])
    answer = DescribeUserScramCredentialsResponse(results=[
        DescribeUserScramCredentialsResult(user="alice", credential_infos=[
            CredentialInfo(mechanism=1, iterations=8192),
            CredentialInfo(mechanism=2, iterations=4096)]),
        DescribeUserScramCredentialsResult(user="nobody",
                                           error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                           error_message="no credential")])
    got = oracle.response(KDescribeScramResponse, 0, translated(
        DESCRIBE_SCRAM, ctx(0), body, answer))
    assert got == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                   "results": [
                       {"user": "alice", "error_code": 0, "error_message": None,
                        "credential_infos": [{"mechanism": 1, "iterations": 8192},
                                             {"mechanism": 2, "iterations": 4096}]},
                       {"user": "nobody", "error_code": kerr.ResourceNotFoundError.errno,
                        "error_message": "no credential", "credential_infos": []}]}


def test_describe_scram_refusal_is_top_level() -> None:
    body = oracle.request(KDescribeScramRequest, 0, users=None)
    refusal = DescribeUserScramCredentialsResponse(
        error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="no")
    got = oracle.response(KDescribeScramResponse, 0, translated(
        DESCRIBE_SCRAM, ctx(0), body, refusal))
    assert (got["error_code"], got["results"]) == (
        kerr.ClusterAuthorizationFailedError.errno, [])


def test_alter_scram_credentials() -> None:
    body = oracle.request(KAlterScramRequest, 0, deletions=[
        {"name": "old", "mechanism": 2}], upsertions=[
        {"name": "alice", "mechanism": 1, "iterations": 8192, "salt": b"s" * 16,
         "salted_password": b"p" * 32}])
    assert dispatched(ALTER_SCRAM, ctx(0), body) == AlterUserScramCredentialsRequest(
        deletions=[ScramCredentialDeletion(name="old", mechanism=2)],
        upsertions=[ScramCredentialUpsertion(name="alice", mechanism=1, iterations=8192,
                                             salt=b"s" * 16, salted_password=b"p" * 32)])
    answer = AlterUserScramCredentialsResponse(results=[
        AlterUserScramCredentialsResult(user="old", error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                        error_message="none"),
        AlterUserScramCredentialsResult(user="alice")])
    got = oracle.response(KAlterScramResponse, 0, translated(
        ALTER_SCRAM, ctx(0), body, answer))
    assert got == {"throttle_time_ms": 0, "results": [
        {"user": "old", "error_code": kerr.ResourceNotFoundError.errno,
         "error_message": "none"},
        {"user": "alice", "error_code": 0, "error_message": None}]}


def test_alter_scram_top_level_refusal_lands_on_every_user_once() -> None:
    body = oracle.request(KAlterScramRequest, 0, deletions=[
        {"name": "a", "mechanism": 2}], upsertions=[
        {"name": "b", "mechanism": 1, "iterations": 8192, "salt": b"s" * 16,
         "salted_password": b"p" * 32},
        {"name": "a", "mechanism": 1, "iterations": 8192, "salt": b"s" * 16,
         "salted_password": b"p" * 32}])
    refusal = AlterUserScramCredentialsResponse(error_code=ErrorCode.INVALID_REQUEST,
                                                error_message="bad")
    got = oracle.response(KAlterScramResponse, 0, translated(
        ALTER_SCRAM, ctx(0), body, refusal))
    assert got["results"] == [
        {"user": u, "error_code": kerr.InvalidRequestError.errno, "error_message": "bad"}
        for u in ("a", "b")]
