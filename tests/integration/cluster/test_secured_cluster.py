"""A secured cluster (issue 16): brokers listen on SASL and PLAINTEXT listeners with the
authorizer on, and reach each other on the SASL one as a super user. Replication and
forwarded group events work only because the peers authenticate; Metadata and
FindCoordinator name each broker's address for the listener asked on; a broker with the
wrong inter-broker password cannot replicate and says why in one line."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import msgpack
import pytest
import structlog
import trustme

from groupwire.broker.storage.metadata import EVENTS_TOPIC, OFFSETS_TOPIC
from groupwire.client.consumer import Consumer
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    AclCreation,
    CreateAclsRequest,
    CreateAclsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from tests.integration.cluster.harness import BOUND_S, image_of, leader_of, led_everywhere
from tests.integration.cluster.secured import BROKER_PASSWORD, BROKER_USER, SecuredCluster

NODES = (1, 2, 3)
GROUP = "g"


def _produce(topic: str, p: int, value: bytes) -> ProduceRequest:
    batch = encode_batch([BatchRecord(value, timestamp_ms=1)])
    return ProduceRequest(acks=-1, timeout_ms=int(BOUND_S * 1000), topic_data=[
        TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=p,
                                                                          records=batch)])])


def _log_end(c: SecuredCluster, node: int, topic: str, p: int) -> int:
    store = c.brokers[node].store
    assert store is not None
    return store.log(topic, p).log_end_offset


async def _serving(c: SecuredCluster) -> None:
    await c.until(lambda: all(t in image_of(c, 1).topics for t in (OFFSETS_TOPIC, EVENTS_TOPIC))
                  and led_everywhere(c, OFFSETS_TOPIC, 3) and led_everywhere(c, EVENTS_TOPIC, 1))


async def test_replication_and_group_events_go_over_authenticated_peer_connections(
        tmp_path: Path) -> None:
    c = SecuredCluster(tmp_path, offsets_topic_num_partitions=3,
                       group_initial_rebalance_delay_ms=0, replica_fetch_wait_max_ms=50)
    try:
        await c.start(*NODES)
        await _serving(c)
        # Registered: the inter-broker (first) listener's address, and every listener's.
        for n in NODES:
            info = image_of(c, 1).brokers[n]
            ports = c.brokers[n].listener_ports
            assert (info.host, info.port) == ("127.0.0.1", ports["SASL_PLAINTEXT"])
            assert {e.listener: e.port for e in info.endpoints} == ports
        await c.create_topic("t", 1, 3)
        leader = leader_of(c, "t", 0)
        # acks=all with min.insync.replicas 2: answered once a follower fetched it.
        answer = await c.send(leader, _produce("t", 0, b"v"), ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        await c.until(lambda: all(_log_end(c, n, "t", 0) == 1 for n in NODES))

        # Group events of a group coordinated away from the events leader are forwarded.
        events_leader = leader_of(c, EVENTS_TOPIC, 0)
        group = next(g for g in (f"g{i}" for i in range(100))
                     if leader_of(c, OFFSETS_TOPIC, coordinator_partition(g, 3))
                     != events_leader)
        async with Consumer(f"127.0.0.1:{c.brokers[1].port}", group_id=group,
                            session_timeout_ms=6000, heartbeat_interval_ms=500,
                            security=c.client_security) as consumer:
            consumer.subscribe(["t"])
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=200)
        store = c.brokers[events_leader].store
        assert store is not None

        def events_of_group() -> list[str]:
            return [msgpack.unpackb(r.value)["type"]
                    for r in store.scan(EVENTS_TOPIC, 0) if r.key == group.encode()]
        await c.until(lambda: "rebalance_completed" in events_of_group())
        for n in NODES:
            node = c.brokers[n].cluster
            assert node is not None and node.dialer.refusals == 0
    finally:
        await c.close()


async def test_metadata_and_find_coordinator_answer_the_listener_asked_on(
        tmp_path: Path) -> None:
    c = SecuredCluster(tmp_path, offsets_topic_num_partitions=3)
    try:
        await c.start(*NODES)
        await _serving(c)
        coordinator = leader_of(c, OFFSETS_TOPIC, coordinator_partition(GROUP, 3))
        for listener in ("SASL_PLAINTEXT", "PLAINTEXT"):
            expected = {n: ("127.0.0.1", c.brokers[n].listener_ports[listener])
                        for n in NODES}
            for asked in NODES:
                metadata_request = MetadataRequest(topics=[MetadataRequestTopic(
                    name=OFFSETS_TOPIC)], allow_auto_topic_creation=False)
                find = FindCoordinatorRequest(key=GROUP, key_type=0)
                if listener == "PLAINTEXT":
                    metadata = await c.send_anonymous(asked, metadata_request,
                                                      MetadataResponse)
                    found = await c.send_anonymous(asked, find, FindCoordinatorResponse)
                else:
                    metadata = await c.send(asked, metadata_request, MetadataResponse)
                    found = await c.send(asked, find, FindCoordinatorResponse)
                assert {b.node_id: (b.host, b.port) for b in metadata.brokers} == expected
                assert found.error_code == ErrorCode.NONE, found.error_message
                assert (found.node_id, (found.host, found.port)) == (
                    coordinator, expected[coordinator])
    finally:
        await c.close()


async def test_the_inter_broker_listener_is_the_registered_address(tmp_path: Path) -> None:
    c = SecuredCluster(tmp_path, inter_broker_listener_name="PLAINTEXT", authorizer="")
    try:
        await c.start(1)
        info = image_of(c, 1).brokers[1]
        assert info.port == c.brokers[1].listener_ports["PLAINTEXT"]
        node = c.brokers[1].cluster
        assert node is not None and node.dialer.security.listener == "PLAINTEXT"
    finally:
        await c.close()


@pytest.fixture
def refusals() -> Iterator[tuple[list[MutableMapping[str, Any]], asyncio.Event]]:
    """Captured log lines, and an event set by the first inter-broker refusal."""
    seen = asyncio.Event()

    def watch(_logger: Any, _method: str, event: MutableMapping[str, Any],
              ) -> MutableMapping[str, Any]:
        if event.get("event") == "inter_broker_authentication_failed":
            seen.set()
        return event
    with structlog.testing.capture_logs(processors=[watch]) as logs:
        yield logs, seen


async def test_a_broker_with_a_wrong_inter_broker_password_cannot_replicate(
        tmp_path: Path,
        refusals: tuple[list[MutableMapping[str, Any]], asyncio.Event]) -> None:
    logs, refused = refusals
    c = SecuredCluster(tmp_path, offsets_topic_num_partitions=1, min_insync_replicas=3,
                       replica_lag_time_max_ms=300, replica_fetch_wait_max_ms=50,
                       per_node={3: {"inter_broker_sasl_password": "wrong"}})
    try:
        await c.start(*NODES)
        await c.create_topic("t", 3, 3)
        p = next(p for p in range(3) if leader_of(c, "t", p) != 3)
        leader = leader_of(c, "t", p)
        async with asyncio.timeout(BOUND_S):
            await refused.wait()
        # Broker 3 never fetched, so it leaves the ISR; acks=all then needs 3 replicas.
        await c.until(lambda: 3 not in image_of(c, leader).partitions[("t", p)].isr)
        answer = await c.send(leader, _produce("t", p, b"v"), ProduceResponse)
        assert (answer.responses[0].partition_responses[0].error_code
                == ErrorCode.NOT_ENOUGH_REPLICAS)
        assert _log_end(c, 3, "t", p) == 0
        lines = [e for e in logs if e["event"] == "inter_broker_authentication_failed"]
        # One line per refusing peer, however often broker 3 tried.
        assert len(lines) == len({e["peer"] for e in lines})
        assert {e["peer"] for e in lines} <= {1, 2}
        assert all(e["user"] == BROKER_USER and "refused user 'broker'" in e["error"]
                   and e["log_level"] == "error" for e in lines)
        assert not any(BROKER_PASSWORD in str(e) or "wrong" in str(e.get("error"))
                       for e in logs)
    finally:
        await c.close()


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SSL"])
async def test_peers_use_mutual_tls_on_a_tls_inter_broker_listener(
        tmp_path: Path, protocol: str) -> None:
    """The brokers present their certificate (CN=broker, required by the listener) and
    check the peer's against --ssl-cafile; on SSL the CN is their principal."""
    ca = trustme.CA()
    pki = tmp_path / "pki"
    pki.mkdir()
    cert = ca.issue_cert("127.0.0.1", "localhost", common_name=BROKER_USER)
    cert.cert_chain_pems[0].write_to_path(pki / "broker.pem")
    for blob in cert.cert_chain_pems[1:]:
        blob.write_to_path(pki / "broker.pem", append=True)
    cert.private_key_pem.write_to_path(pki / "broker.key")
    ca.cert_pem.write_to_path(pki / "ca.pem")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    ca.issue_cert("admin", common_name="admin").configure_cert(client)
    c = SecuredCluster(
        tmp_path, client_listener=protocol, client_ssl=client,
        listeners=f"{protocol}://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        ssl_certfile=str(pki / "broker.pem"), ssl_keyfile=str(pki / "broker.key"),
        ssl_cafile=str(pki / "ca.pem"), ssl_client_auth="required",
        offsets_topic_num_partitions=1, replica_fetch_wait_max_ms=50)
    try:
        await c.start(*NODES)
        await c.create_topic("t", 1, 3)
        leader = leader_of(c, "t", 0)
        answer = await c.send(leader, _produce("t", 0, b"v"), ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        metadata = await c.send(leader, MetadataRequest(topics=[], allow_auto_topic_creation=False),
                                MetadataResponse)
        assert {b.node_id: b.port for b in metadata.brokers} == {
            n: c.brokers[n].listener_ports[protocol] for n in NODES}
    finally:
        await c.close()


async def test_a_broker_principal_without_cluster_action_says_so_once_until_granted(
        tmp_path: Path) -> None:
    seen = asyncio.Event()

    def watch(_logger: Any, _method: str, event: MutableMapping[str, Any],
              ) -> MutableMapping[str, Any]:
        if event.get("event") == "replica_fetch_not_authorized":
            seen.set()
        return event
    c = SecuredCluster(tmp_path, offsets_topic_num_partitions=1,
                       replica_lag_time_max_ms=300, replica_fetch_wait_max_ms=50,
                       super_users="User:admin")  # the brokers' own user is not one
    try:
        with structlog.testing.capture_logs(processors=[watch]) as logs:
            await c.start(*NODES)
            await c.create_topic("t", 1, 3)
            leader = leader_of(c, "t", 0)
            async with asyncio.timeout(BOUND_S):
                await seen.wait()
            await c.until(lambda: len(image_of(c, leader).partitions[("t", 0)].isr) == 1)
            refused = [e for e in logs if e.get("event") == "replica_fetch_not_authorized"]
            assert refused and all("CLUSTER_ACTION" in e["hint"] for e in refused)
            # once per follower and leader, not once per retry
            assert len(refused) <= len(NODES) * (len(NODES) - 1)
            grant = CreateAclsRequest(creations=[AclCreation(
                resource_type=4, resource_name="kafka-cluster", principal=f"User:{BROKER_USER}",
                host="*", operation=9, permission_type=3)])
            created = await c.send(leader, grant, CreateAclsResponse)
            assert [r.error_code for r in created.results] == [0]
            await c.until(lambda: len(image_of(c, leader).partitions[("t", 0)].isr) == 3)
        answer = await c.send(leader, _produce("t", 0, b"v"), ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        await c.close()
