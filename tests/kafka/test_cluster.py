"""librdkafka against three broker processes and etcd: the Kafka door in cluster mode.

One cluster serves the module: etcd and three brokers, each with its client port (both
doors, told apart by the first frame) and a dedicated ``--kafka-listeners`` port. Tests
that SIGKILL a broker start it again (same node id, ports and data dir) before they end,
so the next test finds three brokers. Each test names its own topics and groups.

What a Kafka client must see of a cluster: every broker at the address of the listener it
asked on, produce and fetch routed to leaders that move when a broker dies, acks=all
records that outlive their leader, a group coordinator that moves without a rebalance,
and producer ids that no two brokers hand out alike. Figures (recovery times, records
lost and duplicated) are printed: run with ``-s`` to see them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import msgpack
import pytest

from groupwire import Admin, TopicPartition
from groupwire.broker.storage.segment import LOG_SUFFIX
from groupwire.broker.storage.topic_store import LOGS_DIR
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.kafka.codec import decode_response, encode_request, with_size
from groupwire.protocol.kafka.records import encode_batch
from groupwire.protocol.stored_batches import iter_any_batch_spans
from tests.integration.brokerproc import BrokerProcess
from tests.integration.etcd.conftest import _free_port, running_etcd

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
admin_mod = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.slow

T = TypeVar("T")

NODES: Final = (1, 2, 3)
LEASE_TTL_MS: Final = 1000
"""A dead broker's leaderships move about a second (plus etcd's ~0.3 s) after its death."""
OFFSETS_PARTITIONS: Final = 6
"""Fewer ``__consumer_offsets`` partitions than the default 50: the cluster is up sooner."""
BOUND_S: Final = 30.0
"""Longest any wait in these tests may take before it fails."""
POLL_S: Final = 0.05
"""How often a condition on other processes (Metadata, ISRs) is looked at again."""
RECORDS: Final = 300
KILL_AFTER: Final = 20
PARTITIONS: Final = 3

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 22, 23


# --- the cluster ------------------------------------------------------------------------


@dataclass
class Node:
    node_id: int
    port: int
    """The client port: both doors."""
    kafka_port: int
    """The dedicated Kafka listener."""
    data_dir: Path
    proc: BrokerProcess | None = None


@dataclass
class KafkaCluster:
    etcd: str
    root: Path
    nodes: dict[int, Node] = field(default_factory=dict)

    def args(self, node: Node) -> list[str]:
        return ["--port", str(node.port), "--node-id", str(node.node_id),
                "--etcd-endpoints", self.etcd, "--cluster-name", "kafka-cluster",
                "--etcd-lease-ttl-ms", str(LEASE_TTL_MS),
                "--kafka-listeners", f"PLAINTEXT://127.0.0.1:{node.kafka_port}",
                "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
                "--group-initial-rebalance-delay-ms", "0", "--fsync", "never",
                # info: BrokerProcess reads the port from the info-level broker_started line
                "--log-level", "info"]

    def start(self, *node_ids: int) -> None:
        """Start the brokers at once (each start waits for its ``broker_started``)."""
        def one(node: Node) -> None:
            node.proc = BrokerProcess(node.data_dir, *self.args(node)).start()

        with ThreadPoolExecutor(len(node_ids)) as pool:
            list(pool.map(one, [self.nodes[n] for n in node_ids]))

    def kill(self, node_id: int) -> None:
        proc = self.nodes[node_id].proc
        assert proc is not None
        proc.kill()

    def close(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None:
                node.proc.kill()

    def bootstrap(self, *, dedicated: bool = False) -> str:
        return ",".join(f"127.0.0.1:{n.kafka_port if dedicated else n.port}"
                        for n in self.nodes.values())

    def addresses(self, *, dedicated: bool = False) -> dict[int, tuple[str, int]]:
        return {n.node_id: ("127.0.0.1", n.kafka_port if dedicated else n.port)
                for n in self.nodes.values()}

    def live(self) -> list[int]:
        return [n.node_id for n in self.nodes.values()
                if n.proc is not None and n.proc.proc is not None
                and n.proc.proc.poll() is None]


def restore(c: KafkaCluster, node_id: int) -> None:
    """Broker ``node_id`` running and serving again if a test killed it, so the module's
    next test finds three brokers."""
    if node_id not in c.live():
        c.start(node_id)
        until(lambda: serving(c), f"broker {node_id} back")


@contextlib.contextmanager
def brought_back(c: KafkaCluster, node_id: int) -> Iterator[None]:
    try:
        yield
    finally:
        restore(c, node_id)


def until(check: Callable[[], T | None], what: str) -> T:
    """``check``'s first truthy answer; fails after BOUND_S. The brokers are other
    processes: what they do is seen by asking them again (a refused connection counts
    as not yet)."""
    deadline = time.monotonic() + BOUND_S
    while True:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BOUND_S:.0f} s: {what}")
        time.sleep(POLL_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd is not on PATH (Debian: apt-get install etcd-server) to run the "
                    "Kafka door's cluster tests")
    root: Path = tmp_path_factory.mktemp("kafka-cluster")
    endpoint = f"http://127.0.0.1:{_free_port()}"
    with running_etcd(etcd, root, endpoint):
        found = KafkaCluster(endpoint, root)
        for n in NODES:
            found.nodes[n] = Node(n, _free_port(), _free_port(), root / f"b{n}")
        try:
            found.start(*NODES)
            until(lambda: serving(found), "three brokers and every offsets partition led")
            yield found
        finally:
            found.close()


def serving(c: KafkaCluster) -> bool:
    """Every live broker names every live one and leads what it should: each partition
    of ``__consumer_offsets`` has a live leader."""
    live = set(c.live())
    for n in live:
        meta = metadata(c.nodes[n].port, ["__consumer_offsets"])
        if {b["node_id"] for b in meta["brokers"]} != live:
            return False
        offsets = meta["topics"][0]
        if offsets["error_code"] or len(offsets["partitions"]) != OFFSETS_PARTITIONS:
            return False
        if any(p["leader_id"] not in live for p in offsets["partitions"]):
            return False
    return True


# --- raw Kafka requests: one broker's own answer ----------------------------------------


def kafka_call(port: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """One request on a new connection to ``port``, its answer decoded. librdkafka asks
    whichever broker it likes; this asks the one named."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as sock:
        sock.sendall(with_size(encode_request(api_key, version, 1, "test-cluster", body)))
        size = struct.unpack(">i", _read(sock, 4))[0]
        correlation_id, answer = decode_response(api_key, version, _read(sock, size))
    assert correlation_id == 1
    return answer


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def metadata(port: int, topics: list[str] | None = None) -> dict[str, Any]:
    return kafka_call(port, METADATA, 8, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})


def described(port: int, topic: str) -> dict[str, Any] | None:
    """Metadata for ``topic`` from the broker at ``port``, once it knows the topic."""
    meta = metadata(port, [topic])
    return meta if meta["topics"][0]["error_code"] == 0 else None


def brokers_named(meta: dict[str, Any]) -> dict[int, tuple[str, int]]:
    return {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}


def partitions_of(c: KafkaCluster, topic: str) -> dict[int, dict[str, Any]]:
    """Partition index -> its Metadata entry, as the first live broker tells it."""
    meta = metadata(c.nodes[c.live()[0]].port, [topic])
    assert meta["topics"][0]["error_code"] == 0, meta["topics"][0]
    return {p["partition_index"]: p for p in meta["topics"][0]["partitions"]}


# --- librdkafka helpers -----------------------------------------------------------------


def create(c: KafkaCluster, topic: str, partitions: int,
           replication_factor: int = 3) -> dict[int, dict[str, Any]]:
    """Create through librdkafka's admin and wait until every partition has a leader and
    a full ISR; returns the partitions."""
    admin = admin_mod.AdminClient({"bootstrap.servers": c.bootstrap()})
    futures = admin.create_topics([admin_mod.NewTopic(
        topic, num_partitions=partitions, replication_factor=replication_factor)])
    futures[topic].result(BOUND_S)

    def led() -> dict[int, dict[str, Any]] | None:
        # answered by the controller: another broker's image may not have the topic yet
        meta = described(c.nodes[c.live()[0]].port, topic)
        if meta is None:
            return None
        found = {p["partition_index"]: p for p in meta["topics"][0]["partitions"]}
        full = len(found) == partitions and all(
            p["error_code"] == 0 and len(p["isr_nodes"]) == replication_factor
            for p in found.values())
        return found if full else None

    return until(led, f"{topic}: every partition led with a full ISR")


def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, from its leader."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p),
                                                  timeout=BOUND_S)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partitions: int,
             isolation: str = "read_uncommitted") -> list[Any]:
    """Every record of ``topic`` a consumer of ``isolation`` reads without a group from
    offset 0 up to each partition's high watermark (markers and aborted records are
    offsets it passes without handing them out)."""
    ends = log_ends(bootstrap, topic, partitions)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                            "enable.auto.commit": False, "enable.partition.eof": True,
                            "isolation.level": isolation})
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING)
                         for p in range(partitions) if ends[p] > 0])
        got: list[Any] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + BOUND_S
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"read stalled: {len(got)} records, {ends}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == ck.KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() >= ends[msg.partition()]:
                    done.add(msg.partition())
                continue
            got.append(msg)
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return got
    finally:
        consumer.close()


# --- (1) Metadata through the shared port -----------------------------------------------


def test_metadata_from_each_broker_names_all_three_and_leaders_spread(
        cluster: KafkaCluster, name: str) -> None:
    create(cluster, name, PARTITIONS)
    shared = cluster.addresses()
    controllers = set()
    for n in NODES:
        # each broker's image follows etcd's watch: it knows the topic a moment later
        meta = until(functools.partial(described, cluster.nodes[n].port, name),
                     f"broker {n} describes {name}")
        assert brokers_named(meta) == shared, f"broker {n}'s Metadata"
        controllers.add(meta["controller_id"])
        (topic,) = meta["topics"]
        assert topic["error_code"] == 0
        parts = topic["partitions"]
        assert sorted(p["partition_index"] for p in parts) == list(range(PARTITIONS))
        for p in parts:
            assert sorted(p["replica_nodes"]) == list(NODES)
            assert sorted(p["isr_nodes"]) == list(NODES)
            assert p["leader_id"] == p["replica_nodes"][0]  # the preferred replica leads
        # placement starts each partition's replicas one broker further on
        assert {p["leader_id"] for p in parts} == set(NODES)
    assert len(controllers) == 1 and controllers <= set(NODES), controllers
    # librdkafka sees the same
    seen = admin_mod.AdminClient({"bootstrap.servers": cluster.bootstrap()}).list_topics(
        name, timeout=BOUND_S)
    assert {b.id: (b.host, b.port) for b in seen.brokers.values()} == shared
    assert {p.leader for p in seen.topics[name].partitions.values()} == set(NODES)


# --- (4) Dedicated Kafka listeners ------------------------------------------------------


def test_dedicated_kafka_listeners_name_every_broker_at_its_dedicated_address(
        cluster: KafkaCluster, name: str) -> None:
    dedicated = cluster.addresses(dedicated=True)
    assert dedicated != cluster.addresses()
    group = f"g-{name}"
    for n in NODES:
        node = cluster.nodes[n]
        assert brokers_named(metadata(node.kafka_port)) == dedicated, f"broker {n}"
        found = kafka_call(node.kafka_port, FIND_COORDINATOR, 2,
                           {"key": group, "key_type": 0})
        assert found["error_code"] == 0, found
        assert (found["host"], found["port"]) == dedicated[found["node_id"]]
        found = kafka_call(node.port, FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        assert (found["host"], found["port"]) == cluster.addresses()[found["node_id"]]
    # a librdkafka producer and group consumer that know only the dedicated listeners
    bootstrap = cluster.bootstrap(dedicated=True)
    admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([admin_mod.NewTopic(name, num_partitions=PARTITIONS,
                                            replication_factor=3)])[name].result(BOUND_S)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(name, f"v{i}".encode(), f"k{i}".encode())
    assert producer.flush(BOUND_S) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    got: list[bytes] = []
    deadline = time.monotonic() + BOUND_S
    try:
        while len(got) < 30:
            assert time.monotonic() < deadline, f"{len(got)} of 30 records"
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.key())
        consumer.commit(asynchronous=False)
        (described,) = admin.describe_consumer_groups([group]).values()
        coordinator = described.result(BOUND_S).coordinator
        assert (coordinator.host, coordinator.port) == dedicated[coordinator.id]
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"k{i}".encode() for i in range(30))


# --- producer ids -----------------------------------------------------------------------


def test_init_producer_id_is_unique_across_the_brokers(cluster: KafkaCluster) -> None:
    ids = [kafka_call(cluster.nodes[n].kafka_port, INIT_PRODUCER_ID, 1,
                      {"transactional_id": None, "transaction_timeout_ms": 60000})
           for n in NODES for _ in range(3)]
    assert [a["error_code"] for a in ids] == [0] * len(ids)
    pids = [a["producer_id"] for a in ids]
    assert len(set(pids)) == len(pids), pids
    assert all(pid >= 0 for pid in pids)


# --- a broker that does not lead ---------------------------------------------------------


def test_a_broker_that_does_not_lead_says_so_per_partition_and_group(
        cluster: KafkaCluster, name: str) -> None:
    """What a broker answers once it no longer leads (a follower answers the same): the
    codes that make Kafka clients refresh their metadata and go elsewhere."""
    parts = create(cluster, name, PARTITIONS)
    follower = next(n for n in parts[0]["replica_nodes"] if n != parts[0]["leader_id"])
    port = cluster.nodes[follower].kafka_port
    led_elsewhere = [p for p, entry in parts.items() if entry["leader_id"] != follower]
    batch = encode_batch([BatchRecord(b"v", key=b"k", timestamp_ms=1_700_000_000_000)])
    produced = kafka_call(port, PRODUCE, 8, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": p, "records": batch}
                                          for p in led_elsewhere]}]})
    assert [(r["index"], r["error_code"])
            for r in produced["responses"][0]["partition_responses"]] == [
        (p, ErrorCode.NOT_LEADER_OR_FOLLOWER) for p in led_elsewhere]
    fetched = kafka_call(port, FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "session_epoch": -1, "topics": [{"topic": name, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}
            for p in led_elsewhere]}]})
    assert [(r["partition_index"], r["error_code"])
            for r in fetched["responses"][0]["partitions"]] == [
        (p, ErrorCode.NOT_LEADER_OR_FOLLOWER) for p in led_elsewhere]
    listed = kafka_call(port, LIST_OFFSETS, 5, {"replica_id": -1, "topics": [
        {"name": name, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                       "timestamp": -1} for p in led_elsewhere]}]})
    assert [(r["partition_index"], r["error_code"])
            for r in listed["topics"][0]["partitions"]] == [
        (p, ErrorCode.NOT_LEADER_OR_FOLLOWER) for p in led_elsewhere]
    epochs = kafka_call(port, OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -2, "topics": [
        {"topic": name, "partitions": [{"partition": p, "current_leader_epoch": -1,
                                        "leader_epoch": 0} for p in led_elsewhere]}]})
    assert [(r["partition"], r["error_code"])
            for r in epochs["topics"][0]["partitions"]] == [
        (p, ErrorCode.NOT_LEADER_OR_FOLLOWER) for p in led_elsewhere]

    # a group coordinated elsewhere: NOT_COORDINATOR, per partition where Kafka has room
    group = f"g-{name}"
    offsets = metadata(port, ["__consumer_offsets"])["topics"][0]["partitions"]
    coordinator = next(p["leader_id"] for p in offsets if p["partition_index"]
                       == coordinator_partition(group, OFFSETS_PARTITIONS))
    other = cluster.nodes[next(n for n in NODES if n != coordinator)].kafka_port
    joined = kafka_call(other, JOIN_GROUP, 5, {
        "group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]})
    assert joined["error_code"] == ErrorCode.NOT_COORDINATOR
    beat = kafka_call(other, HEARTBEAT, 3, {"group_id": group, "generation_id": 1,
                                            "member_id": "m"})
    assert beat["error_code"] == ErrorCode.NOT_COORDINATOR
    committed = kafka_call(other, OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": name, "partitions": [
            {"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1}
            for p in range(PARTITIONS)]}]})
    assert [(r["partition_index"], r["error_code"])
            for r in committed["topics"][0]["partitions"]] == [
        (p, ErrorCode.NOT_COORDINATOR) for p in range(PARTITIONS)]
    fetched_offsets = kafka_call(other, OFFSET_FETCH, 5, {
        "group_id": group, "topics": [{"name": name, "partition_indexes": [0]}]})
    assert fetched_offsets["error_code"] == ErrorCode.NOT_COORDINATOR


# --- (2) acks=all records outlive their leader ------------------------------------------


def test_acks_all_records_outlive_a_sigkilled_leader(cluster: KafkaCluster,
                                                     name: str) -> None:
    parts = create(cluster, name, PARTITIONS)
    victim = parts[0]["leader_id"]
    # one replica a partition, one partition on each broker: the victim's has no one to
    # take over while it is down
    alone = create(cluster, f"{name}-rf1", len(NODES), replication_factor=1)
    (orphan,) = [p for p, entry in alone.items() if entry["leader_id"] == victim]
    with brought_back(cluster, victim):
        acks_all_through_a_kill(cluster, name, victim, (f"{name}-rf1", orphan))


def acks_all_through_a_kill(cluster: KafkaCluster, name: str, victim: int,
                            orphan: tuple[str, int]) -> None:
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                            "linger.ms": 5})  # enable.idempotence: librdkafka's default (off)
    produced_at: dict[bytes, float] = {}
    acked: dict[bytes, tuple[int, int, float]] = {}
    failed: list[tuple[bytes, Any]] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.key()] = (msg.partition(), msg.offset(), time.monotonic())
        else:
            failed.append((msg.key(), err))

    def victim_acked() -> int:
        return sum(1 for p, _, _ in acked.values() if p == 0)

    killed_at = 0.0
    for i in range(RECORDS):
        if not killed_at and i == 2 * RECORDS // 3:
            # the kill comes once the victim acknowledged some of its partition's records
            # (a new topic's replication takes a few hundred ms to start), at the latest
            # before the last third is sent: records are in flight to it and queued for it
            deadline = time.monotonic() + BOUND_S
            while victim_acked() < KILL_AFTER:
                assert time.monotonic() < deadline, f"{len(acked)} acknowledged"
                producer.poll(0.05)
        if not killed_at and victim_acked() >= KILL_AFTER:
            killed_at = time.monotonic()
            cluster.kill(victim)
        key = f"k{i}".encode()
        produced_at[key] = time.monotonic()
        producer.produce(name, f"v{i}".encode(), key, on_delivery=delivered)
        if i % 10 == 9:
            producer.poll(0.01)  # serves delivery callbacks: the records go out in rounds
    assert producer.flush(BOUND_S) == 0
    after = sorted(t for key, (p, _, t) in acked.items()
                   if p == 0 and produced_at[key] > killed_at)
    assert after, "nothing produced after the kill reached the killed broker's partition"
    recovered_s = after[0] - killed_at
    moved = partitions_of(cluster, name)[0]
    assert moved["leader_id"] != victim and victim not in moved["isr_nodes"]
    leaderless_while_down(cluster, victim, *orphan)

    restarted_at = time.monotonic()
    cluster.start(victim)
    until(lambda: all(victim in p["isr_nodes"] for p in partitions_of(cluster, name).values()),
          f"broker {victim} back in every ISR of {name}")
    back_in_isr_s = time.monotonic() - restarted_at
    until(lambda: partitions_of(cluster, orphan[0])[orphan[1]]["leader_id"] == victim,
          f"broker {victim} leads {orphan[0]}-{orphan[1]} again")

    got = read_all(cluster.bootstrap(), name, PARTITIONS)
    keys = Counter(m.key() for m in got)
    lost = sorted(set(acked) - set(keys))
    duplicated = sum(n - 1 for n in keys.values())
    in_flight = sum(1 for key, t in produced_at.items()
                    if t < killed_at and (key not in acked or acked[key][2] > killed_at))
    acked_before = sum(1 for _, _, t in acked.values() if t <= killed_at)
    twice = {key.decode(): sorted((m.partition(), m.offset()) for m in got if m.key() == key)
             for key, n in keys.items() if n > 1}
    print(f"\n[kafka cluster] acks=all, leader {victim} of partition 0 SIGKILLed with "
          f"{acked_before} records acknowledged (all partitions) and {in_flight} sent and "
          f"not yet acknowledged: "
          f"{len(acked)} of {RECORDS} acknowledged, {len(failed)} failed, "
          f"{len(lost)} acknowledged lost, {duplicated} duplicated {twice}; partition 0's first "
          f"acknowledgement of a record sent after the kill {recovered_s:.2f} s after it; "
          f"restarted broker back in the ISR {back_in_isr_s:.2f} s after its start")
    assert lost == [], f"acknowledged records lost: {lost[:10]}"
    assert failed == [], failed[:5]
    at = {(m.partition(), m.offset()): m for m in got}
    for key, (p, offset, _) in acked.items():  # each acknowledged offset holds its record
        assert at[(p, offset)].key() == key, (key, p, offset)
    assert {m.value() for m in got} <= {f"v{i}".encode() for i in range(RECORDS)}

    # the restarted broker caught up on Kafka's batches as stored: led by it again,
    # partition 0 reads the same
    async def prefer() -> None:
        async with Admin(bootstrap_servers=cluster.bootstrap()) as admin:
            elected = await admin.elect_leaders([TopicPartition(name, 0)])
        assert list(elected.values()) == [None], elected

    asyncio.run(prefer())
    until(lambda: partitions_of(cluster, name)[0]["leader_id"] == victim,
          f"broker {victim} leads {name}-0 again")
    again = read_all(cluster.bootstrap(), name, PARTITIONS)
    assert [(m.partition(), m.offset(), m.key(), m.value()) for m in again
            if m.partition() == 0] == [(m.partition(), m.offset(), m.key(), m.value())
                                       for m in got if m.partition() == 0]
    # every replica holds the producer's Kafka batches, byte for byte the same
    for p in range(PARTITIONS):
        replicas = {n: stored_batches(cluster.nodes[n].data_dir, name, p) for n in NODES}
        assert replicas[victim], f"{name}-{p} is empty on broker {victim}"
        assert all(kafka for kafka, _ in replicas[victim]), f"{name}-{p} was converted"
        assert replicas[1] == replicas[2] == replicas[3], f"{name}-{p}'s replicas differ"


def leaderless_while_down(c: KafkaCluster, victim: int, topic: str, p: int) -> None:
    """A partition whose only replica is down: a live broker's Metadata, and its record
    APIs, answer LEADER_NOT_AVAILABLE for it (a Kafka client waits and asks again),
    naming no leader and the dead replica offline."""
    survivor = c.nodes[c.live()[0]].kafka_port

    def leaderless() -> dict[str, Any] | None:
        meta = described(survivor, topic)
        entries = [] if meta is None else meta["topics"][0]["partitions"]
        return next((e for e in entries if e["partition_index"] == p
                     and e["leader_id"] == -1), None)

    entry = until(leaderless, f"{topic}-{p} without a leader")
    assert entry["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
    assert entry["offline_replicas"] == [victim]
    batch = encode_batch([BatchRecord(b"v", key=b"k", timestamp_ms=1_700_000_000_000)])
    produced = kafka_call(survivor, PRODUCE, 8, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": batch}]}]})
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == \
        ErrorCode.LEADER_NOT_AVAILABLE
    fetched = kafka_call(survivor, FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    assert fetched["responses"][0]["partitions"][0]["error_code"] == \
        ErrorCode.LEADER_NOT_AVAILABLE


def stored_batches(data_dir: Path, topic: str, partition: int) -> list[tuple[bool, bytes]]:
    """(is it Kafka's, its bytes) of each batch of one replica, straight from its
    segment files."""
    out = []
    for segment in sorted((data_dir / LOGS_DIR / f"{topic}-{partition}").glob(
            "*" + LOG_SUFFIX)):
        data = segment.read_bytes()
        out += [(header.kafka, data[start:end])
                for header, start, end in iter_any_batch_spans(data)]
    return out


# --- (3) a group whose coordinator dies --------------------------------------------------


GROUP_PARTITIONS: Final = 4


@dataclass
class Member:
    consumer: Any
    events: list[tuple[float, str, list[int]]] = field(default_factory=list)
    """(when, "assigned" or "revoked", partitions): librdkafka's rebalance callbacks."""


@dataclass
class Group:
    """A librdkafka consumer group of two, polled in turn from this thread."""

    members: list[Member]
    read: Counter[bytes] = field(default_factory=Counter)

    def poll_once(self) -> None:
        for member in self.members:
            msg = member.consumer.poll(0.05)
            if msg is not None:
                assert msg.error() is None, msg.error()
                self.read[msg.key()] += 1

    def poll_until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + BOUND_S
        while not done():
            assert time.monotonic() < deadline, f"{what}: {len(self.read)} records read"
            self.poll_once()

    def split(self) -> bool:
        """Each member has partitions, and together they have them all."""
        held = [{p.partition for p in m.consumer.assignment()} for m in self.members]
        return all(held) and set().union(*held) == set(range(GROUP_PARTITIONS))


def join(bootstrap: str, group: str, topic: str) -> Member:
    member = Member(ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                 "auto.offset.reset": "earliest",
                                 "heartbeat.interval.ms": 500}))

    def assigned(_: Any, parts: list[Any]) -> None:
        member.events.append((time.monotonic(), "assigned", [p.partition for p in parts]))

    def revoked(_: Any, parts: list[Any]) -> None:
        member.events.append((time.monotonic(), "revoked", [p.partition for p in parts]))

    member.consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    return member


def describe(bootstrap: str, group: str) -> Any:
    """groupwire's DescribeGroups: generation, members and rebalance history."""
    async def go() -> Any:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            return (await admin.describe_groups(group))[0]
    return asyncio.run(go())


def group_events(bootstrap: str, group: str) -> list[dict[str, Any]]:
    """The group's events in ``__group_events`` (docs/protocol.md), read with librdkafka:
    the rebalance history that outlives any one coordinator."""
    events = (msgpack.unpackb(m.value(), raw=False)
              for m in read_all(bootstrap, "__group_events", 1) if m.value())
    return [e for e in events if e.get("group_id") == group]


def coordinator_of(bootstrap: str, group: str) -> int:
    """The coordinator's node id, as librdkafka's admin finds it (FindCoordinator)."""
    admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_consumer_groups([group]).values()
    return int(future.result(BOUND_S).coordinator.id)


def test_a_group_goes_on_when_its_coordinator_is_sigkilled(cluster: KafkaCluster,
                                                          name: str) -> None:
    topic, group_id = name, f"g-{name}"
    create(cluster, topic, GROUP_PARTITIONS)
    bootstrap = cluster.bootstrap()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def produce(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, f"v{i}".encode(), f"k{i}".encode())
        assert producer.flush(BOUND_S) == 0

    produce(0, 100)
    group = Group([join(bootstrap, group_id, topic), join(bootstrap, group_id, topic)])
    victim = -1
    try:
        group.poll_until(lambda: len(group.read) == 100 and group.split(),
                         "both members assigned and every record read")
        before = describe(bootstrap, group_id)
        while before.state != "Stable" or len(before.members) != 2:
            group.poll_until(group.split, "the group settled")
            before = describe(bootstrap, group_id)
        victim = coordinator_of(bootstrap, group_id)
        killed_at = time.monotonic()
        cluster.kill(victim)
        produce(100, 100)
        group.poll_until(lambda: len(group.read) == 200, "after the coordinator was killed")
        all_read_s = time.monotonic() - killed_at
        for member in group.members:  # commits go to the new coordinator
            positions = member.consumer.position(member.consumer.assignment())
            member.consumer.commit(offsets=positions, asynchronous=False)
        moved_to = coordinator_of(bootstrap, group_id)
        after = describe(bootstrap, group_id)
        changes = [(round(t - killed_at, 2), kind, parts) for m in group.members
                   for t, kind, parts in m.events if t > killed_at]
        rebalances = [(e["type"], e["generation_id"], e["reason"])
                      for e in group_events(bootstrap, group_id)
                      if e["type"] in ("rebalance_started", "rebalance_completed")]
        print(f"\n[kafka cluster] coordinator {victim} of a librdkafka group of 2 SIGKILLed, "
              f"moved to {moved_to}: generation {before.generation_id} -> "
              f"{after.generation_id}, state {after.state}, rebalance history after the "
              f"move {[(r.generation_id, r.reason) for r in after.rebalances]} (before: "
              f"{[(r.generation_id, r.reason) for r in before.rebalances]}), "
              f"__group_events {rebalances}, assignment "
              f"changes the members saw {changes}; the 100 records produced after the "
              f"kill read within {all_read_s:.2f} s of it")
        assert moved_to != victim
        assert sorted(group.read) == sorted(f"k{i}".encode() for i in range(200))
        # the move caused no rebalance: same generation and members, nothing reassigned
        assert after.generation_id == before.generation_id
        assert sorted(m.member_id for m in after.members) == sorted(
            m.member_id for m in before.members)
        assert after.state == "Stable"
        assert changes == []
        assert all(r.generation_id is None or r.generation_id <= before.generation_id
                   for r in after.rebalances)
        # the durable history agrees: the generation the move found was completed before
        # it, and no rebalance started from it
        assert ("rebalance_completed", before.generation_id) in [r[:2] for r in rebalances]
        assert [r for r in rebalances if r[0] == "rebalance_started"
                and r[1] >= before.generation_id] == []

        async def committed() -> dict[int, int]:
            async with Admin(bootstrap_servers=bootstrap) as admin:
                offsets = await admin.list_consumer_group_offsets(group_id)
            return {tp.partition: o.offset for tp, o in offsets.items()}

        assert asyncio.run(committed()) == log_ends(bootstrap, topic, GROUP_PARTITIONS)
    finally:
        for member in group.members:
            member.consumer.close()
        if victim in cluster.nodes:
            restore(cluster, victim)


# --- transactions ------------------------------------------------------------------------


def txn_coordinator_of(c: KafkaCluster, transactional_id: str) -> int:
    """The node FindCoordinator (key type 1) names, asked of a live broker."""
    def ask() -> int | None:
        answer = kafka_call(c.nodes[c.live()[0]].port, FIND_COORDINATOR, 1,
                            {"key": transactional_id, "key_type": 1})
        return answer["node_id"] if answer["error_code"] == 0 else None
    return until(ask, f"the coordinator of {transactional_id!r}")


def test_a_transaction_outlives_its_sigkilled_coordinator_and_partition_leader(
        cluster: KafkaCluster, name: str) -> None:
    """librdkafka's transactional producer: records sent, its transaction coordinator's
    broker SIGKILLed, the commit goes to the new leader of the id's __transaction_state
    partition (which loads the open transaction from the replicated records); then, in a
    second transaction, a partition leader is SIGKILLed and the markers reach its
    successor. Both transactions' records are read_committed exactly once, an aborted
    third one's never."""
    tid = f"tx-{name}"
    parts = create(cluster, name, PARTITIONS)
    bootstrap = cluster.bootstrap()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                            "linger.ms": 5})
    producer.init_transactions(BOUND_S)
    coordinator = txn_coordinator_of(cluster, tid)
    with brought_back(cluster, coordinator):
        producer.begin_transaction()
        for i in range(60):
            producer.produce(name, f"a{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(BOUND_S) == 0
        cluster.kill(coordinator)
        producer.commit_transaction(BOUND_S)
        moved_to = txn_coordinator_of(cluster, tid)
    assert moved_to != coordinator
    victim = next(p["leader_id"] for p in partitions_of(cluster, name).values()
                  if p["leader_id"] != moved_to)
    with brought_back(cluster, victim):
        producer.begin_transaction()
        for i in range(60):
            producer.produce(name, f"b{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(BOUND_S) == 0
        cluster.kill(victim)
        producer.commit_transaction(BOUND_S)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(name, f"c{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(BOUND_S) == 0
    producer.abort_transaction(BOUND_S)
    got = [m.value() for m in read_all(bootstrap, name, PARTITIONS, "read_committed")]
    print(f"\n[kafka cluster] transaction coordinator {coordinator} SIGKILLed mid-transaction "
          f"(moved to {moved_to}), then partition leader {victim}: {len(got)} records "
          f"read_committed of 120 committed, {len(got) - len(set(got))} twice")
    assert sorted(got) == sorted([f"a{i}".encode() for i in range(60)]
                                 + [f"b{i}".encode() for i in range(60)])
    assert len(parts) == PARTITIONS
