"""Authorization refusals reach the application at once, naming the resource: Produce,
Fetch and OffsetCommit answered TOPIC_AUTHORIZATION_FAILED, FindCoordinator, JoinGroup
and Heartbeat answered GROUP_AUTHORIZATION_FAILED; none is retried."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from groupwire import Consumer, Producer, TopicPartition
from groupwire.client.membership import Action, Membership
from groupwire.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    GroupAuthorizationFailedError,
    IllegalSaslStateError,
    ResourceNotFoundError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
    error_for,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceResponse,
)
from tests.unit.client.sasl_fake import SaslFake

DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class Broker:
    """One node (id 1) leading partition 0 of topic "t"; ``overrides`` answer by type."""

    def __init__(self) -> None:
        self.fake = SaslFake({}, sasl=False, handler=self.answer)
        self.overrides: dict[type[Request], Callable[[Request], Response]] = {}

    def count(self, kind: type[Request]) -> int:
        return sum(isinstance(r, kind) for _, r in self.fake.requests)

    def answer(self, request: Request) -> Response:
        override = self.overrides.get(type(request))
        if override is not None:
            return override(request)
        if isinstance(request, MetadataRequest):
            return MetadataResponse(
                brokers=[MetadataBroker(node_id=1, host=self.fake.host, port=self.fake.port)],
                cluster_id="fake", controller_id=1,
                topics=[MetadataTopic(name="t", partitions=[
                    MetadataPartition(partition_index=0, leader_id=1, leader_epoch=0,
                                      replica_nodes=[1], isr_nodes=[1])])])
        if isinstance(request, FindCoordinatorRequest):
            return FindCoordinatorResponse(node_id=1, host=self.fake.host, port=self.fake.port)
        if isinstance(request, InitProducerIdRequest):  # an idempotent producer's first ask
            return InitProducerIdResponse(producer_id=1, producer_epoch=0)
        raise AssertionError(f"unexpected {request!r}")


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    b = Broker()
    async with b.fake:
        yield b


def test_every_security_code_has_its_class() -> None:
    expected = {
        29: TopicAuthorizationFailedError, 30: GroupAuthorizationFailedError,
        31: ClusterAuthorizationFailedError, 33: UnsupportedSaslMechanismError,
        34: IllegalSaslStateError, 54: SecurityDisabledError,
        58: AuthenticationFailedError, 91: ResourceNotFoundError,
        92: DuplicateResourceError, 93: UnacceptableCredentialError,
    }
    for code, cls in expected.items():
        err = error_for(code, "x")
        assert type(err) is cls and not err.retriable and err.code == code
    t = error_for(29, "", topic="orders")
    assert isinstance(t, TopicAuthorizationFailedError) and t.topic == "orders"
    assert "'orders'" in str(t)
    g = error_for(30, "", group_id="billing")
    assert isinstance(g, GroupAuthorizationFailedError) and g.group_id == "billing"
    assert "'billing'" in str(g)


@pytest.mark.parametrize(("message", "shown"), [
    ("not authorized to WRITE topic 'orders'", "not authorized to WRITE topic 'orders'"),
    ("topic 'orders'", "not authorized to access topic 'orders'"),
    ("orders[3]", "not authorized to access topic 'orders' (orders[3])"),
    ("", "not authorized to access topic 'orders'"),
])
def test_a_topic_refusal_says_what_was_refused_once(message: str, shown: str) -> None:
    """The broker's own message (it names the operation) is kept; a caller's context
    gets the refusal spelled out, without naming the topic twice."""
    error = error_for(ErrorCode.TOPIC_AUTHORIZATION_FAILED, message, topic="orders")
    assert isinstance(error, TopicAuthorizationFailedError) and error.topic == "orders"
    assert shown in str(error) and str(error).count("'orders'") == 1


def test_heartbeat_refused_by_acls_is_fatal_not_retried() -> None:
    m = Membership(group_instance_id=None, max_poll_interval_ms=60000, now_ms=0)
    m.join_sent(0)
    m.on_join_response(0, member_id="m", generation_id=1, protocol_name="range",
                       leader="m", now_ms=0)
    m.on_sync_response(0, 0)
    action = m.on_heartbeat_response(ErrorCode.GROUP_AUTHORIZATION_FAILED, m.generation, 1)
    assert action == Action.FATAL
    assert m.fatal_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_produce_refused_raises_naming_the_topic_without_retrying(
        broker: Broker) -> None:
    broker.overrides[ProduceRequest] = lambda r: ProduceResponse(responses=[
        TopicProduceResponse(name="t", partition_responses=[
            PartitionProduceResponse(index=0, error_code=DENIED)])])
    async with Producer(broker.fake.address, linger_ms=0, request_timeout_ms=5000,
                        retry_backoff_ms=10) as producer:
        with pytest.raises(TopicAuthorizationFailedError) as info:
            await producer.send_and_wait("t", b"v", partition=0)
    assert info.value.topic == "t" and "'t'" in str(info.value)
    assert broker.count(ProduceRequest) == 1


async def test_metadata_refusing_the_topic_fails_the_send(broker: Broker) -> None:
    broker.overrides[MetadataRequest] = lambda r: MetadataResponse(
        brokers=[MetadataBroker(node_id=1, host=broker.fake.host, port=broker.fake.port)],
        controller_id=1, topics=[MetadataTopic(name="secret", error_code=DENIED)])
    async with Producer(broker.fake.address, request_timeout_ms=5000,
                        retry_backoff_ms=10) as producer:
        with pytest.raises(TopicAuthorizationFailedError, match="'secret'") as info:
            await producer.send_and_wait("secret", b"v")
    assert info.value.topic == "secret"
    assert broker.count(ProduceRequest) == 0


async def test_fetch_refused_raises_from_poll_naming_the_topic(broker: Broker) -> None:
    broker.overrides[FetchRequest] = lambda r: FetchResponse(responses=[
        FetchTopicResponse(topic="t", partitions=[
            FetchPartitionData(partition_index=0, error_code=DENIED)])])
    tp = TopicPartition("t", 0)
    async with Consumer(broker.fake.address, request_timeout_ms=5000,
                        retry_backoff_ms=10, fetch_max_wait_ms=10) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with pytest.raises(TopicAuthorizationFailedError) as info:
            await consumer.getmany(timeout_ms=5000)
        assert info.value.topic == "t"
        # raised once: the next poll asks again (an ACL added meanwhile takes effect)
        fetches = broker.count(FetchRequest)
        with pytest.raises(TopicAuthorizationFailedError):
            await consumer.getmany(timeout_ms=5000)
        assert broker.count(FetchRequest) > fetches


async def test_commit_refused_for_a_topic_names_it(broker: Broker) -> None:
    broker.overrides[OffsetCommitRequest] = lambda r: OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name="t", partitions=[
            OffsetCommitResponsePartition(partition_index=0, error_code=DENIED)])])
    tp = TopicPartition("t", 0)
    async with Consumer(broker.fake.address, group_id="g", enable_auto_commit=False,
                        request_timeout_ms=5000, retry_backoff_ms=10) as consumer:
        consumer.assign([tp])
        with pytest.raises(TopicAuthorizationFailedError) as info:
            await consumer.commit({tp: 5})
    assert info.value.topic == "t"
    assert broker.count(OffsetCommitRequest) == 1


async def test_find_coordinator_refused_fails_start_naming_the_group(broker: Broker) -> None:
    broker.overrides[FindCoordinatorRequest] = lambda r: FindCoordinatorResponse(
        error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    consumer = Consumer(broker.fake.address, group_id="billing", request_timeout_ms=30000,
                        retry_backoff_ms=10)
    try:
        with pytest.raises(GroupAuthorizationFailedError) as info:
            await consumer.start()
    finally:
        await consumer.close()
    assert info.value.group_id == "billing" and "'billing'" in str(info.value)
    assert broker.count(FindCoordinatorRequest) == 1


async def test_join_refused_fails_the_poll_naming_the_group(broker: Broker) -> None:
    broker.overrides[JoinGroupRequest] = lambda r: JoinGroupResponse(
        error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    async with Consumer(broker.fake.address, group_id="billing", request_timeout_ms=5000,
                        retry_backoff_ms=10) as consumer:
        consumer.subscribe(["t"])
        with pytest.raises(GroupAuthorizationFailedError) as info:
            await consumer.getmany(timeout_ms=5000)
    assert info.value.group_id == "billing"
    assert broker.count(JoinGroupRequest) == 1
