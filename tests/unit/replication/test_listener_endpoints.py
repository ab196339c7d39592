"""Each broker registers every listener's address; Metadata and FindCoordinator answer
the addresses of the listener the request came in on, leaving out (Kafka's rule) a
broker without it; a registration from before listeners reads as PLAINTEXT only."""

from __future__ import annotations

from typing import cast

import pytest

from groupwire.broker.cluster.image import ClusterImage
from groupwire.broker.cluster.keys import (
    BrokerInfo,
    Endpoint,
    PartitionState,
    TopicAssignment,
    decode_broker,
    encode_broker,
)
from groupwire.broker.clustering.controller_apis import ClusterApis
from groupwire.broker.clustering.node import ClusterNode
from groupwire.broker.config import BrokerSettings
from groupwire.broker.storage.metadata import OFFSETS_TOPIC
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    FindCoordinatorRequest,
    MetadataRequest,
    MetadataRequestTopic,
)
from groupwire.protocol.steps import run_steps


def _two_listeners(node_id: int) -> BrokerInfo:
    return BrokerInfo(node_id, "10.0.0.1", 9093, None, "i", endpoints=(
        Endpoint("SASL_SSL", "10.0.0.1", 9093), Endpoint("PLAINTEXT", "127.0.0.1", 9000 + node_id)))


def test_endpoints_round_trip_and_an_older_registration_is_plaintext_only() -> None:
    info = _two_listeners(1)
    assert decode_broker("k", encode_broker(info)) == info
    assert info.address("PLAINTEXT") == ("127.0.0.1", 9001)
    assert info.address("SSL") is None
    old = decode_broker("k", b'{"node_id":2,"host":"h","port":9092,"rack":null,'
                             b'"incarnation":"i"}')
    assert old.endpoints == ()
    assert old.address("PLAINTEXT") == ("h", 9092)
    assert old.address("SASL_SSL") is None
    assert old.listener_names() == ["PLAINTEXT"]


@pytest.mark.parametrize("value", [b'[]', b'{"X":["h"]}', b'{"X":["h",true]}', b'{"X":[1,2]}'])
def test_malformed_endpoints_name_the_key(value: bytes) -> None:
    raw = (b'{"node_id":1,"host":"h","port":1,"rack":null,"incarnation":"i","endpoints":'
           + value + b"}")
    with pytest.raises(ValueError, match=r"'/b'.*endpoints"):
        decode_broker("/b", raw)


class _Node:
    """What ClusterApis reads of a ClusterNode for Metadata and FindCoordinator."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.cluster = "test"
        self.node_id = 1


def _apis() -> ClusterApis:
    """Brokers 1 and 2 have both listeners, broker 3 only SASL_SSL and leads
    partition 1 of "t" and every offsets partition."""
    image = ClusterImage("test")
    image.brokers = {1: _two_listeners(1), 2: _two_listeners(2),
                     3: BrokerInfo(3, "10.0.0.3", 9093, None, "i",
                                   endpoints=(Endpoint("SASL_SSL", "10.0.0.3", 9093),))}
    image.topics = {"t": TopicAssignment("t", "id", False, ((1, 2, 3), (3, 1, 2))),
                    OFFSETS_TOPIC: TopicAssignment(OFFSETS_TOPIC, "o", True, ((3, 1, 2),))}
    image.partitions = {("t", 0): PartitionState(1, 4, (1, 2, 3), 0),
                        ("t", 1): PartitionState(3, 5, (3, 1, 2), 0),
                        (OFFSETS_TOPIC, 0): PartitionState(3, 0, (3, 1, 2), 0)}
    return ClusterApis(BrokerSettings(), cast(ClusterNode, _Node(image)))


def test_metadata_names_each_brokers_address_for_the_listener_asked_on() -> None:
    apis = _apis()
    request = MetadataRequest(topics=[MetadataRequestTopic(name="t")],
                              allow_auto_topic_creation=False)
    tls = run_steps(apis.metadata_steps(request, listener="SASL_SSL"))
    assert [(b.node_id, b.host, b.port) for b in tls.brokers] == [
        (1, "10.0.0.1", 9093), (2, "10.0.0.1", 9093), (3, "10.0.0.3", 9093)]
    assert [p.leader_id for p in tls.topics[0].partitions] == [1, 3]
    plain = run_steps(apis.metadata_steps(request, listener="PLAINTEXT"))
    assert [(b.node_id, b.host, b.port) for b in plain.brokers] == [
        (1, "127.0.0.1", 9001), (2, "127.0.0.1", 9002)]
    p0, p1 = plain.topics[0].partitions
    assert (p0.error_code, p0.leader_id) == (ErrorCode.NONE, 1)
    assert (p1.error_code, p1.leader_id) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    assert "no PLAINTEXT listener" in (p1.error_message or "")
    assert p1.leader_epoch == 5 and p1.replica_nodes == [3, 1, 2]


def test_find_coordinator_answers_the_listeners_address_or_not_available() -> None:
    apis = _apis()
    request = FindCoordinatorRequest(key="g", key_type=0)
    assert coordinator_partition("g", 1) == 0
    found = apis.find_coordinator(request, "SASL_SSL")
    assert (found.error_code, found.node_id, found.host, found.port) == (
        ErrorCode.NONE, 3, "10.0.0.3", 9093)
    missing = apis.find_coordinator(request, "PLAINTEXT")
    assert missing.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "no PLAINTEXT listener" in (missing.error_message or "")
