"""Kafka transactions under librdkafka's transactional producer (confluent-kafka):
commits seen by read_committed consumers, aborts hidden from them, zombies fenced, a
consume-transform-produce loop SIGKILLed mid-transaction and restarted that writes each
input exactly once, and a broker SIGKILL that loses no committed transaction."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.brokerproc import BrokerProcess

from .conftest import FAST_GROUPS

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
ck_admin = pytest.importorskip("confluent_kafka.admin")

WAIT_S = 40


def _create(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
            [ck_admin.NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(20)
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    deadline = time.monotonic() + WAIT_S
    try:
        for topic in topics:  # until the partitions are in a client's metadata
            while len(probe.list_topics(topic, timeout=5).topics[topic].partitions) < partitions:
                assert time.monotonic() < deadline, f"{topic} never showed its partitions"
                time.sleep(0.05)
    finally:
        probe.close()


def _transactional(bootstrap: str, tid: str, **extra: object) -> object:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                            "linger.ms": 5, **extra})
    producer.init_transactions(WAIT_S)
    return producer


def _read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 2,
              ) -> list[bytes]:
    """Every record a consumer of ``isolation`` reads from the start of ``topic``, until
    it reaches the end of each partition (for read_committed: the last stable offset)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                            "isolation.level": isolation, "enable.partition.eof": True,
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING)
                     for p in range(partitions)])
    seen: list[bytes] = []
    ended: set[int] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"read {len(seen)}, ended {ended}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is None:
                seen.append(msg.value())
            elif msg.error().code() == ck.KafkaError._PARTITION_EOF:
                ended.add(msg.partition())
    finally:
        consumer.close()
    return seen


def test_committed_records_are_read_committed_and_aborted_ones_only_uncommitted(
        bootstrap: str, name: str) -> None:
    _create(bootstrap, name)
    producer = _transactional(bootstrap, f"tx-{name}")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(name, f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(WAIT_S)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(name, f"a{i}".encode(), partition=i % 2)
    producer.flush(WAIT_S)  # stored, then aborted: not merely dropped from the queue
    producer.abort_transaction(WAIT_S)
    producer.begin_transaction()
    producer.produce(name, b"c-after", partition=1)
    producer.commit_transaction(WAIT_S)

    committed = _read_all(bootstrap, name, "read_committed")
    uncommitted = _read_all(bootstrap, name, "read_uncommitted")
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"c-after"])
    assert sorted(uncommitted) == sorted(committed + [f"a{i}".encode() for i in range(6)])


def test_an_open_transaction_holds_read_committed_consumers_at_its_first_offset(
        bootstrap: str, name: str) -> None:
    """The last stable offset stops at the open transaction's first record: records
    produced after it, outside any transaction, wait for it too (Kafka's rule)."""
    _create(bootstrap, name, partitions=1)
    producer = _transactional(bootstrap, f"tx-{name}")
    producer.begin_transaction()
    producer.produce(name, b"in-txn", partition=0)
    producer.flush(WAIT_S)
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    plain.produce(name, b"plain", partition=0)
    assert plain.flush(WAIT_S) == 0
    assert _read_all(bootstrap, name, "read_committed", 1) == []
    assert sorted(_read_all(bootstrap, name, "read_uncommitted", 1)) == [b"in-txn", b"plain"]
    producer.commit_transaction(WAIT_S)
    assert _read_all(bootstrap, name, "read_committed", 1) == [b"in-txn", b"plain"]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
        bootstrap: str, name: str) -> None:
    """The newer producer's InitProducerId aborts the zombie's open transaction and
    bumps the epoch: the zombie's commit is refused, its records never read_committed."""
    _create(bootstrap, name)
    zombie = _transactional(bootstrap, f"tx-{name}")
    zombie.begin_transaction()
    zombie.produce(name, b"zombie", partition=0)
    zombie.flush(WAIT_S)
    successor = _transactional(bootstrap, f"tx-{name}")
    successor.begin_transaction()
    successor.produce(name, b"successor", partition=0)
    successor.commit_transaction(WAIT_S)
    with pytest.raises(ck.KafkaException) as refused:
        zombie.commit_transaction(WAIT_S)
    error = refused.value.args[0]
    assert error.fatal(), error
    assert error.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                            ck.KafkaError.INVALID_PRODUCER_EPOCH), error
    assert _read_all(bootstrap, name, "read_committed") == [b"successor"]
    assert sorted(_read_all(bootstrap, name, "read_uncommitted")) == [b"successor", b"zombie"]


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(
        bootstrap: str, name: str) -> None:
    """librdkafka's shortest transaction.timeout.ms, 1 s: the coordinator aborts the
    transaction (read_committed consumers move past it) and fences its producer."""
    _create(bootstrap, name, partitions=1)
    producer = _transactional(bootstrap, f"tx-{name}", **{"transaction.timeout.ms": 1000})
    producer.begin_transaction()
    producer.produce(name, b"late", partition=0)
    producer.flush(WAIT_S)
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    plain.produce(name, b"after", partition=0)
    plain.flush(WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while (seen := _read_all(bootstrap, name, "read_committed", 1)) == []:
        assert time.monotonic() < deadline, "the timed-out transaction was never aborted"
        time.sleep(0.1)
    assert seen == [b"after"]
    with pytest.raises(ck.KafkaException):
        producer.commit_transaction(WAIT_S)


WORKER = """
import sys
from confluent_kafka import Consumer, Producer
bootstrap, source, sink, group, tid, stop_after = sys.argv[1:7]
stop_after = int(stop_after)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "isolation.level": "read_committed"})
consumer.subscribe([source])
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                     "linger.ms": 5})
producer.init_transactions(30)
commits = 0
while True:
    records = consumer.consume(25, 0.5)
    records = [r for r in records if r.error() is None]
    if not records:
        print("idle", flush=True)
        continue
    producer.begin_transaction()
    for r in records:
        producer.produce(sink, b"out-" + r.value(), partition=r.partition())
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    if commits == stop_after:
        producer.flush(30)
        print("mid-transaction", flush=True)
        while True:
            consumer.poll(0.1)  # stays a member, transaction open, until killed
    producer.commit_transaction(30)
    commits += 1
    print("committed", commits, flush=True)
"""


def _worker(bootstrap: str, source: str, sink: str, group: str, tid: str,
            stop_after: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, bootstrap, source, sink, group, tid, str(stop_after)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _wait_for(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + WAIT_S
    for got in proc.stdout:
        if got.startswith(line):
            return
        assert time.monotonic() < deadline, f"no {line!r} from the worker"
    raise AssertionError(f"the worker ended before {line!r}")


def test_a_consume_transform_produce_loop_killed_mid_transaction_writes_each_input_once(
        bootstrap: str, name: str) -> None:
    """SIGKILLed with a transaction open (its output stored, its offsets sent), the
    worker restarts with the same transactional id: the coordinator aborts what the dead
    one left open, the group's committed offsets are those of its last commit, and the
    output read_committed holds every input exactly once."""
    source, sink, group = f"{name}-in", f"{name}-out", f"{name}-g"
    _create(bootstrap, source, sink)
    total = 400
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(total):
        plain.produce(source, f"r{i}".encode(), partition=i % 2)
    assert plain.flush(WAIT_S) == 0

    first = _worker(bootstrap, source, sink, group, f"tx-{name}", stop_after=3)
    try:
        _wait_for(first, "mid-transaction")
    finally:
        first.kill()
        first.wait(10)
    second = _worker(bootstrap, source, sink, group, f"tx-{name}", stop_after=-1)
    try:
        deadline = time.monotonic() + WAIT_S
        while len(_read_all(bootstrap, sink, "read_committed")) < total:
            assert time.monotonic() < deadline, "the restarted worker did not finish"
            time.sleep(0.2)
    finally:
        second.kill()
        second.wait(10)

    output = _read_all(bootstrap, sink, "read_committed")
    assert sorted(output) == sorted(f"out-r{i}".encode() for i in range(total))
    written = _read_all(bootstrap, sink, "read_uncommitted")
    assert len(written) > total, "the killed transaction's output was never stored"
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = probe.committed([ck.TopicPartition(source, p) for p in range(2)], 10)
    finally:
        probe.close()
    assert [tp.offset for tp in committed] == [total // 2, total // 2]


def test_a_broker_killed_after_commits_keeps_them_and_completes_a_prepared_one(
        tmp_path: Path, name: str) -> None:
    """The broker SIGKILLed right after a commit was answered (its markers may not all be
    durable yet): restarted, it finds the decision in __transaction_state and completes
    it; every committed record is read_committed, none of the aborted ones."""
    broker = BrokerProcess(tmp_path / "data", *FAST_GROUPS[:-2], "--fsync", "always").start()
    port = broker.port
    bootstrap = f"127.0.0.1:{port}"
    restarted: BrokerProcess | None = None
    try:
        _create(bootstrap, name)
        producer = _transactional(bootstrap, f"tx-{name}")
        for round_ in range(5):
            producer.begin_transaction()
            for i in range(20):
                producer.produce(name, f"{round_}-{i}".encode(), partition=i % 2)
            if round_ == 3:
                producer.flush(WAIT_S)
                producer.abort_transaction(WAIT_S)
            else:
                producer.commit_transaction(WAIT_S)
        broker.kill()
        restarted = BrokerProcess(tmp_path / "data", *FAST_GROUPS[:-2], "--fsync", "always",
                                  "--port", str(port)).start()
        committed = _read_all(bootstrap, name, "read_committed")
        producer.begin_transaction()  # the same producer carries on after the restart
        producer.produce(name, b"after-restart", partition=0)
        producer.commit_transaction(WAIT_S)
        after = _read_all(bootstrap, name, "read_committed")
    finally:
        broker.kill()
        if restarted is not None:
            restarted.kill()
    expected = sorted(f"{r}-{i}".encode() for r in (0, 1, 2, 4) for i in range(20))
    assert sorted(committed) == expected
    assert sorted(after) == sorted([*expected, b"after-restart"])
