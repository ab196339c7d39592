"""aiokafka with its default settings against the Kafka door.

aiokafka asks ApiVersions v0 and picks, per API, the highest version both sides know;
it never steps down on its own, so every version it picks must be served as Kafka
serves it. Its admin client has no delete-groups call: DeleteGroups goes through its
request classes (``aiokafka.protocol.admin.DeleteGroupsRequest``) on the admin's
connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from groupwire.protocol.hashing import partition_for_key

aiokafka = pytest.importorskip("aiokafka", reason="aiokafka is in the dev extra")

from aiokafka import ConsumerRebalanceListener  # noqa: E402
from aiokafka import codec as aiokafka_codec  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402
from aiokafka.coordinator.assignors.range import RangePartitionAssignor  # noqa: E402
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # noqa: E402
from aiokafka.errors import TopicAlreadyExistsError, for_code  # noqa: E402
from aiokafka.protocol.admin import DeleteGroupsRequest  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402

TIMEOUT_S = 30.0
REQUEST_TIMEOUT_MS = 10_000
# short group timers so that joins, leaves and take-overs are seen within a second or two
GROUP_TIMERS: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200,
                                "request_timeout_ms": REQUEST_TIMEOUT_MS}
BASE_TS = 1_700_000_000_000
NON_EMPTY_GROUP = 68  # Kafka's error code


@asynccontextmanager
async def _admin(bootstrap: str) -> AsyncIterator[Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap,
                                request_timeout_ms=REQUEST_TIMEOUT_MS)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def _producer(bootstrap: str, **config: Any) -> AsyncIterator[Any]:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap,
                                         request_timeout_ms=REQUEST_TIMEOUT_MS, **config)
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


def _topic_errors(response: Any) -> dict[str, int]:
    """topic -> error code, from a CreateTopics or DeleteTopics answer of any version."""
    obj = response.to_object()
    entries = obj.get("topic_errors", obj.get("topic_error_codes"))
    assert entries is not None, obj
    return {e["topic"]: e["error_code"] for e in entries}


async def _create(bootstrap: str, topic: str, partitions: int = 3) -> None:
    async with _admin(bootstrap) as admin:
        response = await admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    assert _topic_errors(response) == {topic: 0}


async def _until(what: str, check: Callable[[], Awaitable[bool] | bool]) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _read_all(bootstrap: str, topic: str, count: int, **config: Any) -> list[Any]:
    """Every record of ``topic`` from the start, read by a consumer without a group."""
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap,
                                         auto_offset_reset="earliest",
                                         request_timeout_ms=REQUEST_TIMEOUT_MS,
                                         enable_auto_commit=False, **config)
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer._client.force_metadata_update()  # a topic made a moment ago
            partitions = consumer.partitions_for_topic(topic) or set()
        assert partitions, f"no metadata for {topic}"
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                got.extend(records)
        return got
    finally:
        await consumer.stop()


# --- metadata and topic admin ----------------------------------------------------------


async def test_metadata_names_the_broker_and_every_partition(bootstrap: str, name: str) -> None:
    await _create(bootstrap, name, partitions=4)
    host, port = bootstrap.split(":")
    async with _admin(bootstrap) as admin:
        assert name in await admin.list_topics()
        [topic] = await admin.describe_topics([name])
        cluster = await admin.describe_cluster()
    assert topic["error_code"] == 0
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2, 3]
    brokers = cluster["brokers"]
    assert [(b["host"], b["port"]) for b in brokers] == [(host, int(port))]
    node = brokers[0]["node_id"]
    assert cluster["controller_id"] == node
    assert {p["leader"] for p in topic["partitions"]} == {node}
    assert all(p["replicas"] == [node] and p["isr"] == [node] for p in topic["partitions"])


async def test_a_duplicate_topic_is_refused_as_topic_already_exists(bootstrap: str,
                                                                   name: str) -> None:
    await _create(bootstrap, name)
    async with _admin(bootstrap) as admin:
        response = await admin.create_topics(
            [NewTopic(name, num_partitions=3, replication_factor=1)])
    assert for_code(_topic_errors(response)[name]) is TopicAlreadyExistsError


async def test_a_deleted_topic_leaves_the_metadata(bootstrap: str, name: str) -> None:
    await _create(bootstrap, name)
    async with _admin(bootstrap) as admin:
        response = await admin.delete_topics([name])
        assert _topic_errors(response) == {name: 0}

        async def gone() -> bool:
            return name not in await admin.list_topics()

        await _until(f"{name} to leave the metadata", gone)


async def test_create_partitions_grows_a_topic(bootstrap: str, name: str) -> None:
    await _create(bootstrap, name, partitions=2)
    async with _admin(bootstrap) as admin:
        await admin.create_partitions({name: NewPartitions(total_count=5)})
        [topic] = await admin.describe_topics([name])
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2, 3, 4]


async def test_describe_configs_of_a_topic_names_its_retention(bootstrap: str,
                                                               name: str) -> None:
    await _create(bootstrap, name)
    async with _admin(bootstrap) as admin:
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name)])
    [resource] = response.to_object()["resources"]
    assert resource["error_code"] == 0
    assert resource["resource_name"] == name
    configs = {c["config_names"]: c["config_value"] for c in resource["config_entries"]}
    assert "retention.ms" in configs
    assert "cleanup.policy" in configs


# --- produce ------------------------------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_produce_with_each_acks_setting_stores_every_record(bootstrap: str, name: str,
                                                                  acks: int | str) -> None:
    await _create(bootstrap, name, partitions=1)
    async with _producer(bootstrap, acks=acks) as producer:
        metas = [await producer.send_and_wait(name, f"v{i}".encode(), partition=0)
                 for i in range(50)]
    if acks == 0:
        assert metas == [None] * 50  # no answer comes to acks=0: the client knows no offset
    else:
        assert [m.offset for m in metas] == list(range(50))
    got = await _read_all(bootstrap, name, 50)
    assert [r.value for r in got] == [f"v{i}".encode() for i in range(50)]
    assert [r.offset for r in got] == list(range(50))


async def test_an_idempotent_producer_is_given_an_id_and_writes_once(bootstrap: str,
                                                                     name: str) -> None:
    """enable_idempotence: InitProducerId first, then batches carrying the id and their
    sequence numbers."""
    await _create(bootstrap, name, partitions=2)
    async with _producer(bootstrap, enable_idempotence=True, linger_ms=5) as producer:
        futures = [await producer.send(name, f"v{i}".encode(), partition=i % 2)
                   for i in range(80)]
        metas = await asyncio.gather(*futures)
        # the id InitProducerId answered (private, but the only place aiokafka shows it)
        assert producer._txn_manager.producer_id >= 0
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (p, o) for p in range(2) for o in range(40))
    got = await _read_all(bootstrap, name, 80)
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(80))


async def test_a_key_goes_to_the_partition_groupwire_picks(bootstrap: str, name: str) -> None:
    """aiokafka's default partitioner is Kafka's murmur2, as groupwire's SDK hashes keys."""
    await _create(bootstrap, name, partitions=5)
    keys = [f"key-{i}".encode() for i in range(60)]
    async with _producer(bootstrap, linger_ms=5) as producer:
        futures = [await producer.send(name, b"v", key=key) for key in keys]
        metas = await asyncio.gather(*futures)
    for key, meta in zip(keys, metas, strict=True):
        assert meta.partition == partition_for_key(key, 5), key
    got = await _read_all(bootstrap, name, len(keys))
    assert sorted((r.key, r.partition) for r in got) == sorted(
        (key, partition_for_key(key, 5)) for key in keys)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_keeps_keys_values_headers_and_timestamps(bootstrap: str, name: str,
                                                                   codec: str | None) -> None:
    if codec is not None and not getattr(aiokafka_codec, f"has_{codec}")():
        pytest.skip(f"aiokafka's {codec} codec needs cramjam (aiokafka's {codec} extra)")
    await _create(bootstrap, name, partitions=3)
    sent: dict[bytes, tuple[bytes, int, list[tuple[str, bytes]]]] = {}
    async with _producer(bootstrap, compression_type=codec, linger_ms=5) as producer:
        futures = []
        for i in range(200):
            key, value = f"k{i}".encode(), f"value {i} ".encode() * 4
            headers = [("n", str(i).encode()), ("codec", str(codec).encode())]
            sent[key] = (value, BASE_TS + i, headers)
            futures.append(await producer.send(name, value, key=key, headers=headers,
                                               timestamp_ms=BASE_TS + i))
        await asyncio.gather(*futures)
    got = await _read_all(bootstrap, name, len(sent))
    assert len(got) == len(sent)
    for record in got:
        value, ts, headers = sent[record.key]
        assert record.value == value
        assert (record.timestamp, record.timestamp_type) == (ts, 0)  # 0: CreateTime
        assert list(record.headers) == headers
        assert record.partition == partition_for_key(record.key, 3)
    assert len({(r.partition, r.offset) for r in got}) == len(got)


# --- consumer groups ----------------------------------------------------------------------


class Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    """Every callback, in order: ("revoked" | "assigned", partitions)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", frozenset(revoked)))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", frozenset(assigned)))


def _group_consumer(bootstrap: str, topic: str, group: str, listener: Recorder | None = None,
                    **config: Any) -> Any:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                         auto_offset_reset="earliest",
                                         enable_auto_commit=False, **{**GROUP_TIMERS, **config})
    consumer.subscribe([topic], listener=listener or Recorder())
    return consumer


def _split_once(consumers: list[Any], topic: str, partitions: int,
                listeners: list[Recorder] | None = None) -> bool:
    """Whether the members' assignments cover every partition exactly once, none empty,
    and (given their listeners) each member's last callback assigned what it holds."""
    held = [c.assignment() for c in consumers]
    every = [tp for tps in held for tp in tps]
    settled = listeners is None or all(
        listener.calls[-1:] == [("assigned", frozenset(tps))]
        for listener, tps in zip(listeners, held, strict=True))
    return (settled and all(held) and len(every) == partitions
            and set(every) == {TopicPartition(topic, p) for p in range(partitions)})


@pytest.mark.parametrize("assignor", [RoundRobinPartitionAssignor, RangePartitionAssignor])
async def test_a_group_of_three_splits_the_partitions_and_takes_over_a_leaver(
        bootstrap: str, name: str, assignor: Any) -> None:
    await _create(bootstrap, name, partitions=6)
    group = f"g-{name}"
    listeners = [Recorder() for _ in range(3)]
    consumers = [_group_consumer(bootstrap, name, group, listener,
                                 partition_assignment_strategy=(assignor,))
                 for listener in listeners]
    for consumer in consumers:
        await consumer.start()
    try:
        await _until("three members to split six partitions",
                     lambda: _split_once(consumers, name, 6, listeners))
        assert [len(c.assignment()) for c in consumers] == [2, 2, 2]
        async with _admin(bootstrap) as admin:
            [described] = await admin.describe_consumer_groups([group])
        [info] = described.to_object()["groups"]
        assert (info["error_code"], info["state"], info["protocol"]) == (
            0, "Stable", assignor.name)
        assert len(info["members"]) == 3

        leaver, rest, rest_listeners = consumers[0], consumers[1:], listeners[1:]
        before = [len(listener.calls) for listener in rest_listeners]
        await leaver.stop()  # a dynamic member says LeaveGroup on the way out
        await _until("two members to take over all six partitions",
                     lambda: _split_once(rest, name, 6, rest_listeners))
        assert sorted(len(c.assignment()) for c in rest) == [3, 3]
        for listener, n in zip(rest_listeners, before, strict=True):
            kinds = [kind for kind, _ in listener.calls[n:]]
            assert kinds[:1] == ["revoked"] and kinds[-1] == "assigned", listener.calls
    finally:
        for consumer in consumers:
            await consumer.stop()


async def test_commits_are_read_back_and_a_new_member_resumes_from_them(bootstrap: str,
                                                                       name: str) -> None:
    await _create(bootstrap, name, partitions=3)
    group = f"g-{name}"
    async with _producer(bootstrap, linger_ms=5) as producer:
        await asyncio.gather(*[await producer.send(name, f"a{i}".encode(), key=f"k{i}".encode())
                               for i in range(90)])
    consumer = _group_consumer(bootstrap, name, group)
    await consumer.start()
    try:
        got: list[Any] = []

        async def read() -> bool:
            batch = await consumer.getmany(timeout_ms=200)
            got.extend(r for records in batch.values() for r in records)
            return len(got) >= 90

        await _until("the first member to read 90 records", read)
        await consumer.commit()
        ends: dict[TopicPartition, int] = {}
        for tp in consumer.assignment():
            ends[tp] = await consumer.position(tp)
            assert await consumer.committed(tp) == ends[tp]
        assert sum(ends.values()) == 90
    finally:
        await consumer.stop()

    async with _admin(bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert {tp: meta.offset for tp, meta in offsets.items()} == ends

    async with _producer(bootstrap) as producer:
        for i in range(9):
            await producer.send_and_wait(name, f"b{i}".encode(), key=f"k{i}".encode())
    successor = _group_consumer(bootstrap, name, group)
    await successor.start()
    try:
        later: list[Any] = []

        async def read_later() -> bool:
            batch = await successor.getmany(timeout_ms=200)
            later.extend(r for records in batch.values() for r in records)
            return len(later) >= 9

        await _until("the successor to read what came after the commit", read_later)
        assert sorted(r.value for r in later) == sorted(f"b{i}".encode() for i in range(9))
    finally:
        await successor.stop()


async def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance(
        bootstrap: str, name: str) -> None:
    """KIP-345: a static member leaves no LeaveGroup behind, and its return within the
    session timeout replaces its member id without moving any partition."""
    await _create(bootstrap, name, partitions=4)
    group = f"g-{name}"
    a = _group_consumer(bootstrap, name, group, group_instance_id="static-a")
    b_listener = Recorder()
    b = _group_consumer(bootstrap, name, group, b_listener, group_instance_id="static-b")
    await a.start()
    await b.start()
    restarted = None
    try:
        await _until("two static members to split four partitions",
                     lambda: _split_once([a, b], name, 4))
        held_by_a = a.assignment()
        await a.stop()
        b_calls = len(b_listener.calls)
        restarted = _group_consumer(bootstrap, name, group, group_instance_id="static-a")
        await restarted.start()
        await _until("the static member to be given its partitions back",
                     lambda: bool(restarted.assignment()))
        assert restarted.assignment() == held_by_a
        # a rebalance would have needed b to join again, and b's listener to hear of it
        assert len(b_listener.calls) == b_calls
        assert b.assignment() | held_by_a == {TopicPartition(name, p) for p in range(4)}
    finally:
        for consumer in (a, b, restarted):
            if consumer is not None:
                await consumer.stop()


async def test_groups_are_listed_described_and_deleted(bootstrap: str, name: str) -> None:
    await _create(bootstrap, name, partitions=2)
    group = f"g-{name}"
    consumer = _group_consumer(bootstrap, name, group, client_id=f"c-{name}")
    await consumer.start()
    try:
        await _until("the member to be assigned", lambda: len(consumer.assignment()) == 2)
        await consumer.commit({TopicPartition(name, 0): 0, TopicPartition(name, 1): 0})
        async with _admin(bootstrap) as admin:
            assert (group, "consumer") in await admin.list_consumer_groups()
            [described] = await admin.describe_consumer_groups([group])
            [info] = described.to_object()["groups"]
            assert (info["state"], info["protocol_type"]) == ("Stable", "consumer")
            [member] = info["members"]
            assert member["client_id"] == f"c-{name}"
            # a group with a member is not deleted
            node = await admin.find_coordinator(group)
            refused = await admin._send_request(DeleteGroupsRequest([group]), node)
            assert list(refused.results) == [(group, NON_EMPTY_GROUP)]
    finally:
        await consumer.stop()

    async with _admin(bootstrap) as admin:
        [described] = await admin.describe_consumer_groups([group])
        assert described.to_object()["groups"][0]["state"] == "Empty"
        node = await admin.find_coordinator(group)
        deleted = await admin._send_request(DeleteGroupsRequest([group]), node)
        assert list(deleted.results) == [(group, 0)]
        assert group not in {g for g, _ in await admin.list_consumer_groups()}
        assert await admin.list_consumer_group_offsets(group) == {}


# --- transactions ------------------------------------------------------------------------


async def test_a_transactional_producer_commits_aborts_and_is_read_committed(
        bootstrap: str, name: str) -> None:
    """aiokafka's transactional producer (transaction() as a context manager): the
    committed records are read_committed, the aborted ones only read_uncommitted."""
    await _create(bootstrap, name, partitions=2)
    async with _producer(bootstrap, transactional_id=f"tx-{name}") as producer:
        async with producer.transaction():
            for i in range(10):
                await producer.send(name, f"c{i}".encode(), partition=i % 2)
        await producer.begin_transaction()
        sent = [await producer.send(name, f"a{i}".encode(), partition=i % 2)
                for i in range(4)]
        await asyncio.gather(*sent)  # stored before the abort
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(name, b"c-last", partition=0)
    committed = await _read_all(bootstrap, name, 11, isolation_level="read_committed")
    uncommitted = await _read_all(bootstrap, name, 15)
    assert sorted(r.value for r in committed) == sorted(
        [f"c{i}".encode() for i in range(10)] + [b"c-last"])
    assert sorted(r.value for r in uncommitted) == sorted(
        [r.value for r in committed] + [f"a{i}".encode() for i in range(4)])


async def test_offsets_sent_to_a_transaction_are_committed_with_it(bootstrap: str,
                                                                   name: str) -> None:
    """send_offsets_to_transaction: the group's offsets appear when the transaction
    commits and not when it aborts."""
    await _create(bootstrap, name, partitions=1)
    group = f"g-{name}"
    tp = TopicPartition(name, 0)
    async with _producer(bootstrap, transactional_id=f"tx-{name}") as producer:
        async with producer.transaction():
            await producer.send(name, b"x", partition=0)
            await producer.send_offsets_to_transaction({tp: 7}, group)
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({tp: 9}, group)
        await producer.abort_transaction()
    async with _admin(bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert offsets[tp].offset == 7


async def test_a_newer_transactional_producer_fences_the_older_one(bootstrap: str,
                                                                   name: str) -> None:
    await _create(bootstrap, name, partitions=1)
    async with _producer(bootstrap, transactional_id=f"tx-{name}") as zombie:
        await zombie.begin_transaction()
        await (await zombie.send(name, b"zombie", partition=0))
        async with _producer(bootstrap, transactional_id=f"tx-{name}") as successor, \
                successor.transaction():
            await successor.send(name, b"successor", partition=0)
        with pytest.raises(aiokafka.errors.ProducerFenced):
            await zombie.commit_transaction()
    got = await _read_all(bootstrap, name, 1, isolation_level="read_committed")
    assert [r.value for r in got] == [b"successor"]
