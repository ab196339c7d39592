"""The SDK against three brokers: a producer with acks=all and a consumer group, both
given one bootstrap address, reach each partition's leader and the group's coordinator;
a broker that leaves (neither the coordinator nor holding the only copy) loses nothing."""

from __future__ import annotations

from pathlib import Path

import msgpack

from groupwire.broker.storage.metadata import EVENTS_TOPIC, OFFSETS_TOPIC
from groupwire.client.consumer import Consumer
from groupwire.client.producer import Producer
from groupwire.client.types import TopicPartition
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
)
from tests.integration.cluster.harness import (
    LocalCluster,
    consume,
    image_of,
    leader_of,
    led_everywhere,
)

GROUP = "g"


async def test_produce_and_consume_through_leaders_and_survive_a_broker(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=3,
                     group_initial_rebalance_delay_ms=0, replica_fetch_wait_max_ms=50)
    try:
        await c.start(1, 2, 3)
        await c.serving(offsets_partitions=3)
        await c.create_topic("orders", 3, 3)
        coordinator = leader_of(c, OFFSETS_TOPIC, coordinator_partition(GROUP, 3))
        # Bootstrap from a broker that is not the coordinator: the SDK must find it.
        bootstrap = f"127.0.0.1:{c.brokers[coordinator % 3 + 1].port}"
        sent = [b"r%03d" % i for i in range(90)]
        async with Producer(bootstrap, linger_ms=0) as producer:
            for value in sent[:60]:
                await producer.send("orders", value, key=value)
            await producer.flush()
            seen: list[bytes] = []
            async with Consumer(bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                                session_timeout_ms=6000, heartbeat_interval_ms=500,
                                enable_auto_commit=False) as consumer:
                consumer.subscribe(["orders"])
                await consume(consumer, 60, seen)
                await consumer.commit()
                # A broker leading some partitions, not the coordinator, leaves.
                victim = next(n for n in (1, 2, 3) if n != coordinator
                              and any(leader_of(c, "orders", p) == n for p in range(3)))
                await c.stop(victim)
                await c.until(lambda: led_everywhere(c, "orders", 3))
                for value in sent[60:]:
                    await producer.send("orders", value, key=value)
                await producer.flush()
                await consume(consumer, 90, seen)
                assert sorted(seen) == sent  # nothing lost, nothing twice
                for p in range(3):
                    tp = TopicPartition("orders", p)
                    assert await consumer.position(tp) >= 0
        # The committed offsets live on the coordinator, which never moved.
        answer = await c.send(coordinator, HeartbeatRequest(
            group_id=GROUP, generation_id=-1, member_id="nobody"), HeartbeatResponse)
        assert answer.error_code != ErrorCode.NOT_COORDINATOR
        elsewhere = next(n for n in c.brokers if n != coordinator)
        answer = await c.send(elsewhere, HeartbeatRequest(
            group_id=GROUP, generation_id=-1, member_id="nobody"), HeartbeatResponse)
        assert answer.error_code == ErrorCode.NOT_COORDINATOR
    finally:
        await c.close()


async def test_group_events_reach_the_events_leader_from_any_coordinator(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, offsets_topic_num_partitions=3,
                     group_initial_rebalance_delay_ms=0, replica_fetch_wait_max_ms=50)
    try:
        await c.start(1, 2, 3)
        await c.until(lambda: all(t in image_of(c, 1).topics
                                  for t in (OFFSETS_TOPIC, EVENTS_TOPIC))
                      and led_everywhere(c, OFFSETS_TOPIC, 3)
                      and led_everywhere(c, EVENTS_TOPIC, 1))
        events_leader = leader_of(c, EVENTS_TOPIC, 0)
        # A group coordinated elsewhere, so its events must be forwarded.
        group = next(g for g in (f"g{i}" for i in range(100))
                     if leader_of(c, OFFSETS_TOPIC, coordinator_partition(g, 3))
                     != events_leader)
        await c.create_topic("t", 1, 3)
        async with Consumer(f"127.0.0.1:{c.brokers[1].port}", group_id=group,
                            session_timeout_ms=6000, heartbeat_interval_ms=500) as consumer:
            consumer.subscribe(["t"])
            await consumer.getmany(timeout_ms=200)
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=200)
        store = c.brokers[events_leader].store
        assert store is not None

        def events_of_group() -> list[str]:
            return [msgpack.unpackb(r.value)["type"]
                    for r in store.scan(EVENTS_TOPIC, 0) if r.key == group.encode()]
        await c.until(lambda: "rebalance_completed" in events_of_group())
        assert events_of_group()[0] == "member_joined"
        # Replicated like any partition: a follower holds the same events.
        follower = next(n for n in c.brokers if n != events_leader)
        follower_store = c.brokers[follower].store
        assert follower_store is not None
        await c.until(lambda: follower_store.log(EVENTS_TOPIC, 0).log_end_offset
                      == store.log(EVENTS_TOPIC, 0).log_end_offset)
    finally:
        await c.close()
