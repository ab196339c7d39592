"""kafka-python 3.0 with its default settings against the Kafka door.

kafka-python asks the newest ApiVersions it knows and steps down on UNSUPPORTED_VERSION
(KIP-511); its producer is idempotent by default, so InitProducerId comes before the
first Produce. It is a blocking client: the members of a group each poll on a thread
of their own, as an application's would, while the test watches their snapshots
(``assignment()``, ``group_metadata()``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from groupwire.protocol.hashing import partition_for_key

kafka = pytest.importorskip("kafka", reason="kafka-python is in the dev extra")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka import codec as kafka_codec  # noqa: E402
from kafka.admin import (  # noqa: E402
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.consumer.subscription_state import ConsumerRebalanceListener  # noqa: E402
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor  # noqa: E402
from kafka.coordinator.assignors.sticky.sticky_assignor import (  # noqa: E402
    StickyPartitionAssignor,
)
from kafka.errors import (  # noqa: E402
    InvalidPartitionsError,
    NoError,
    NonEmptyGroupError,
    SecurityDisabledError,
    TopicAlreadyExistsError,
)
from kafka.structs import MemberState, OffsetAndMetadata  # noqa: E402

TIMEOUT_S = 30.0
REQUEST_TIMEOUT_MS = 10_000
GROUP_TIMERS: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200,
                                "request_timeout_ms": REQUEST_TIMEOUT_MS}
BASE_TS = 1_700_000_000_000


@contextmanager
def _admin(bootstrap: str) -> Iterator[Any]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        yield admin
    finally:
        admin.close()


def _create(bootstrap: str, topic: str, partitions: int = 3) -> None:
    with _admin(bootstrap) as admin:
        result = admin.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1}})
    assert result["topics"] == [{"name": topic, "error_code": 0, "error_message": None}]
    # every partition in a client's metadata before a group forms on the topic: a
    # kafka-python leader that assigns while its metadata has none ("No partition
    # metadata") gave its group nothing until its next refresh, minutes later (the
    # sticky tests failed so about one run in three)
    probe = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        _until(f"{topic}'s partitions in the metadata",
               lambda: len(probe.partitions_for_topic(topic) or ()) == partitions)
    finally:
        probe.close()


def _until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _produce(bootstrap: str, topic: str, count: int, *, partition: int | None = None,
             prefix: str = "v", timestamps: Callable[[int], int] | None = None) -> list[Any]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                             request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        futures = [producer.send(topic, f"{prefix}{i}".encode(), key=f"k{i}".encode(),
                                 partition=partition,
                                 timestamp_ms=timestamps(i) if timestamps else None)
                   for i in range(count)]
        producer.flush(TIMEOUT_S)
        return [f.get(TIMEOUT_S) for f in futures]
    finally:
        producer.close(TIMEOUT_S)


def _assigned_consumer(bootstrap: str, *partitions: TopicPartition, **config: Any) -> Any:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest",
                             request_timeout_ms=REQUEST_TIMEOUT_MS, **config)
    consumer.assign(list(partitions))
    return consumer


def _poll_until(consumer: Any, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


# --- topic admin and configs ------------------------------------------------------------


def test_topics_are_created_refused_when_they_exist_and_deleted(bootstrap: str,
                                                                name: str) -> None:
    _create(bootstrap, name, partitions=3)
    with _admin(bootstrap) as admin:
        assert name in admin.list_topics()
        [topic] = admin.describe_topics([name])
        assert sorted(p["partition_index"] for p in topic["partitions"]) == [0, 1, 2]
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({name: {"num_partitions": 3, "replication_factor": 1}})
        result = admin.delete_topics([name])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(name, 0)]
        _until(f"{name} to leave the metadata", lambda: name not in admin.list_topics())


def test_create_partitions_grows_a_topic_and_never_shrinks_it(bootstrap: str,
                                                              name: str) -> None:
    _create(bootstrap, name, partitions=2)
    with _admin(bootstrap) as admin:
        admin.create_partitions({name: 5})
        [topic] = admin.describe_topics([name])
        assert sorted(p["partition_index"] for p in topic["partitions"]) == [0, 1, 2, 3, 4]
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({name: 3})


def test_describe_configs_of_a_topic_and_of_the_broker(bootstrap: str, name: str) -> None:
    _create(bootstrap, name)
    with _admin(bootstrap) as admin:
        [topic_meta] = admin.describe_topics([name])
        node = str(topic_meta["partitions"][0]["leader_id"])
        topic = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                                       config_filter="all")
        broker = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)],
                                        config_filter="all")
        # nothing set on the topic: nothing differs from the defaults
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    configs = topic["topic"][name]
    assert {"cleanup.policy", "retention.ms", "segment.bytes"} <= set(configs)
    assert configs["cleanup.policy"]["value"] == "delete"
    assert int(configs["retention.ms"]["value"]) != 0
    # Kafka lists a broker's listeners among its configs (clients and tools read them)
    assert {"advertised.listeners", "listeners", "broker.id"} <= set(broker["broker"][node])
    assert broker["broker"][node]["broker.id"]["value"] == node
    assert modified == {"topic": {name: {}}}


def test_a_replica_assignment_naming_the_one_broker_is_taken(bootstrap: str,
                                                             name: str) -> None:
    """On a one-broker cluster every replica is on that broker: an assignment saying so
    is what the broker would do anyway, and Kafka takes it."""
    _create(bootstrap, name, partitions=2)
    with _admin(bootstrap) as admin:
        [topic] = admin.describe_topics([name])
        node = topic["partitions"][0]["leader_id"]
        admin.create_partitions({name: {"count": 4, "assignments": [[node], [node]]}})
        assigned = f"{name}-assigned"
        created = admin.create_topics({assigned: {"assignments": {0: [node], 1: [node]}}})
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(assigned, 0)]
        described = {t["name"]: t for t in admin.describe_topics([name, assigned])}
    grown, made = described[name], described[assigned]
    assert [(p["partition_index"], p["replica_nodes"]) for p in grown["partitions"]] == [
        (p, [node]) for p in range(4)]
    assert [(p["partition_index"], p["replica_nodes"]) for p in made["partitions"]] == [
        (p, [node]) for p in range(2)]


def test_describe_cluster_names_the_broker_and_its_controller(bootstrap: str) -> None:
    """kafka-python reads DescribeCluster's v1 field ``endpoint_type`` (KIP-919) whatever
    version was answered: it needs a broker serving v1, as Kafka does since 3.7."""
    host, port = bootstrap.split(":")
    with _admin(bootstrap) as admin:
        cluster = admin.describe_cluster()
    [broker] = cluster["brokers"]
    assert (broker["host"], broker["port"]) == (host, int(port))
    assert cluster["controller_id"] == broker["broker_id"]


def test_acls_without_an_authorizer_are_security_disabled(bootstrap: str, name: str) -> None:
    """This module's broker runs without --authorizer: Kafka answers SECURITY_DISABLED
    (test_kafka_python_acls.py has a broker with one)."""
    acl_filter = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                           permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, name,
                                                                  ACLResourcePatternType.ANY))
    with _admin(bootstrap) as admin, pytest.raises(SecurityDisabledError):
        admin.describe_acls(acl_filter)


# --- producer -----------------------------------------------------------------------------


def test_the_default_producer_is_idempotent_and_gets_a_producer_id(bootstrap: str,
                                                                   name: str) -> None:
    _create(bootstrap, name, partitions=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                             request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        assert producer.config["enable_idempotence"] is True
        futures = [producer.send(name, f"v{i}".encode(), key=f"k{i}".encode(),
                                 headers=[("n", str(i).encode())])
                   for i in range(150)]
        producer.flush(TIMEOUT_S)
        metas = [f.get(TIMEOUT_S) for f in futures]
        # InitProducerId answered: the producer holds a real id (private, but this is the
        # one place the client shows it)
        pid = producer._transaction_manager.producer_id_and_epoch
        assert pid.producer_id >= 0 and pid.epoch >= 0
    finally:
        producer.close(TIMEOUT_S)
    for i, meta in enumerate(metas):
        assert meta.partition == partition_for_key(f"k{i}".encode(), 3)
    per_partition: dict[int, list[int]] = {}
    for meta in metas:
        per_partition.setdefault(meta.partition, []).append(meta.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())
    consumer = _assigned_consumer(bootstrap, *(TopicPartition(name, p) for p in range(3)))
    try:
        got = _poll_until(consumer, 150)
    finally:
        consumer.close()
    assert sorted((r.key, r.value, tuple(r.headers)) for r in got) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), (("n", str(i).encode()),)) for i in range(150))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips(bootstrap: str, name: str, codec: str) -> None:
    if not getattr(kafka_codec, f"has_{codec}")():
        pytest.skip(f"kafka-python's {codec} codec needs its library (kafka-python[{codec}])")
    _create(bootstrap, name, partitions=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                             linger_ms=5, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        futures = [producer.send(name, f"{codec} value {i} ".encode() * 5,
                                 timestamp_ms=BASE_TS + i) for i in range(100)]
        producer.flush(TIMEOUT_S)
        assert [f.get(TIMEOUT_S).offset for f in futures] == list(range(100))
    finally:
        producer.close(TIMEOUT_S)
    consumer = _assigned_consumer(bootstrap, TopicPartition(name, 0))
    try:
        got = _poll_until(consumer, 100)
    finally:
        consumer.close()
    assert [(r.offset, r.value, r.timestamp) for r in got] == [
        (i, f"{codec} value {i} ".encode() * 5, BASE_TS + i) for i in range(100)]


# --- offsets: seek, beginning/end, by time ------------------------------------------------


def test_seek_beginning_end_and_offsets_for_times(bootstrap: str, name: str) -> None:
    _create(bootstrap, name, partitions=1)
    tp = TopicPartition(name, 0)
    _produce(bootstrap, name, 40, partition=0, timestamps=lambda i: BASE_TS + 10 * i)
    consumer = _assigned_consumer(bootstrap, tp)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 40}
        found = consumer.offsets_for_times({tp: BASE_TS + 55})
        # the first record whose timestamp is at or after the one asked for
        assert (found[tp].offset, found[tp].timestamp) == (6, BASE_TS + 60)
        assert consumer.offsets_for_times({tp: BASE_TS + 10_000}) == {tp: None}
        consumer.seek(tp, 25)
        got = _poll_until(consumer, 15)
        assert [r.offset for r in got] == list(range(25, 40))
        assert consumer.position(tp) == 40
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
    finally:
        consumer.close()


# --- consumer groups ----------------------------------------------------------------------


class Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.calls.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.calls.append(("assigned", frozenset(assigned)))


class Member:
    """A group member polling on its own thread until told to stop (then it closes,
    which sends LeaveGroup for a dynamic member)."""

    def __init__(self, bootstrap: str, topic: str, group: str, **config: Any) -> None:
        self.listener = Recorder()
        self.records: list[Any] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      **{**GROUP_TIMERS, **config})
        self.consumer.subscribe([topic], listener=self.listener)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=100).values():
                    self.records.extend(records)
        except BaseException as exc:  # shown by stop()
            self.error = exc
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error

    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    def stable(self) -> bool:
        return self.consumer.group_metadata().state == MemberState.STABLE

    def generation(self) -> int:
        return int(self.consumer.group_metadata().generation_id)


@contextmanager
def _members(bootstrap: str, topic: str, group: str, count: int,
             **config: Any) -> Iterator[list[Member]]:
    members: list[Member] = []
    try:
        members.extend(Member(bootstrap, topic, group, client_id=f"{group}-{i}", **config)
                       for i in range(count))
        yield members
    finally:
        for member in members:
            member.stop()


def _converged(members: list[Member], topic: str, partitions: int) -> bool:
    """Every member stable on one generation, and the partitions held exactly once."""
    if not all(m.stable() for m in members) or len({m.generation() for m in members}) != 1:
        return False
    held = [m.assignment() for m in members]
    every = [tp for tps in held for tp in tps]
    return (all(held) and len(every) == partitions
            and set(every) == {TopicPartition(topic, p) for p in range(partitions)})


@pytest.mark.parametrize("assignor", [StickyPartitionAssignor, CooperativeStickyAssignor])
def test_sticky_members_keep_their_partitions_when_one_leaves(bootstrap: str, name: str,
                                                              assignor: Any) -> None:
    _create(bootstrap, name, partitions=6)
    group = f"g-{name}"
    with _members(bootstrap, name, group, 3, partition_assignment_strategy=[assignor]) as ms:
        _until("three members to split six partitions", lambda: _converged(ms, name, 6))
        assert sorted(len(m.assignment()) for m in ms) == [2, 2, 2]
        generation = ms[0].generation()
        with _admin(bootstrap) as admin:
            described = admin.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_data"]) == (
            "Stable", assignor.name)
        assert len(described["members"]) == 3

        leaver, rest = ms[0], ms[1:]
        kept = [m.assignment() for m in rest]
        calls_before = [len(m.listener.calls) for m in rest]
        leaver.stop()
        _until("two members to take over six partitions",
               lambda: _converged(rest, name, 6) and rest[0].generation() > generation)
        assert sorted(len(m.assignment()) for m in rest) == [3, 3]
        for member, before, n in zip(rest, kept, calls_before, strict=True):
            assert before <= member.assignment(), "a sticky member lost a partition it held"
            after = member.listener.calls[n:]
            assert after, "no rebalance callback"
            if assignor is CooperativeStickyAssignor:
                # KIP-429: only what moves is revoked; kept partitions stay owned throughout
                revoked = set().union(*(tps for kind, tps in after if kind == "revoked"))
                assert not revoked & before, after
                added = set().union(*(tps for kind, tps in after if kind == "assigned"))
                assert added == member.assignment() - before
            else:
                assert after[-1] == ("assigned", frozenset(member.assignment()))


def test_commit_then_committed_and_the_group_admin(bootstrap: str, name: str) -> None:
    _create(bootstrap, name, partitions=3)
    group = f"g-{name}"
    _produce(bootstrap, name, 60)
    consumer = KafkaConsumer(name, bootstrap_servers=bootstrap, group_id=group,
                             client_id=f"c-{name}", enable_auto_commit=False,
                             auto_offset_reset="earliest", **GROUP_TIMERS)
    try:
        got = _poll_until(consumer, 60)
        assert len(got) == 60
        consumer.commit()
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        assert sum(positions.values()) == 60
        for tp, position in positions.items():
            assert consumer.committed(tp) == position
        # an explicit commit with metadata is read back with it
        tp0 = TopicPartition(name, 0)
        consumer.commit({tp0: OffsetAndMetadata(positions[tp0], "note", -1)})
        assert consumer.committed(tp0, metadata=True).metadata == "note"

        with _admin(bootstrap) as admin:
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert listed[group]["protocol_type"] == "consumer"
            described = admin.describe_groups([group])[group]
            assert described["group_state"] == "Stable"
            [member] = described["members"]
            assert member["client_id"] == f"c-{name}"
            assert set(member["member_assignment"]["assigned_partitions"][0]["partitions"]) \
                == {0, 1, 2}
            offsets = admin.list_group_offsets({group: None})[group]
            assert {tp: o.offset for tp, o in offsets.items()} == positions
            assert admin.delete_groups([group]) == {group: NonEmptyGroupError.__name__}
    finally:
        consumer.close()

    with _admin(bootstrap) as admin:
        assert admin.describe_groups([group])[group]["group_state"] == "Empty"
        # an empty group's offsets can be moved and deleted by an admin
        tp0, tp1 = TopicPartition(name, 0), TopicPartition(name, 1)
        altered = admin.alter_group_offsets(group, {tp0: OffsetAndMetadata(1, "", -1)})
        assert altered == {tp0: NoError}
        assert admin.list_group_offsets({group: [tp0]})[group][tp0].offset == 1
        deleted = admin.delete_group_offsets(group, [tp1])
        assert deleted == {tp1: NoError}
        left = admin.list_group_offsets({group: None})[group]
        assert tp1 not in left and left[tp0].offset == 1
        assert admin.delete_groups([group]) == {group: "OK"}
        assert group not in {g["group_id"] for g in admin.list_groups()}
