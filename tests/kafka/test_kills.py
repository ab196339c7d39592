"""Killing processes under Kafka's own clients: a SIGKILLed librdkafka consumer's
partitions move on connection loss, not at its session timeout; a broker SIGKILLed under
an acks=all librdkafka producer loses no acknowledged record."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from groupwire.client.admin import Admin
from tests.integration.brokerproc import BrokerProcess
from tests.kafka.answer_cutter import AnswerCutter

from .conftest import FAST_GROUPS

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
ck_admin = pytest.importorskip("confluent_kafka.admin")

WAIT_S = 40
SESSION_TIMEOUT_MS = 45_000
"""librdkafka's default, spelled out: the failover below must not wait for it."""

CONSUMER = """
import json, sys, time
from confluent_kafka import Consumer
bootstrap, topic, group, name = sys.argv[1:5]
def say(**event):
    print(json.dumps({"name": name, **event}), flush=True)
def assigned(consumer, partitions):
    say(event="assigned", partitions=sorted(p.partition for p in partitions))
def revoked(consumer, partitions):
    say(event="revoked", partitions=sorted(p.partition for p in partitions))
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "session.timeout.ms": SESSION_TIMEOUT_MS,
                     "auto.offset.reset": "earliest"})
consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
while True:
    consumer.poll(0.2)
""".replace("SESSION_TIMEOUT_MS", str(SESSION_TIMEOUT_MS))


class _Member:
    """A librdkafka consumer process that prints its rebalance callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER, bootstrap, topic, group, name],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.owned: set[int] = set()
        self.changed = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self.changed:
                if event["event"] == "assigned":
                    self.owned = set(event["partitions"])
                else:
                    self.owned = set()
                self.changed.notify_all()

    def wait_owning(self, partitions: set[int] | None, timeout_s: float = WAIT_S) -> set[int]:
        """Until it owns ``partitions`` (None: anything); what it owns then."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not (self.owned == partitions if partitions is not None else self.owned):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"owns {sorted(self.owned)}, wanted {partitions}")
                self.changed.wait(left)
            return set(self.owned)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([ck_admin.NewTopic(topic, num_partitions=partitions)])[topic].result(30)


def test_a_killed_librdkafka_consumers_partitions_move_on_connection_loss(
        bootstrap: str, name: str) -> None:
    _create(bootstrap, name, 4)
    group = f"g-{name}"
    doomed = _Member(bootstrap, name, group, "doomed")
    survivor: _Member | None = None
    try:
        doomed.wait_owning({0, 1, 2, 3})
        survivor = _Member(bootstrap, name, group, "survivor")
        split = survivor.wait_owning(None)
        assert 0 < len(split) < 4
        doomed.wait_owning({0, 1, 2, 3} - split)
        doomed.kill()
        survivor.wait_owning({0, 1, 2, 3})  # within WAIT_S, short of the session timeout
    finally:
        doomed.kill()
        if survivor is not None:
            survivor.kill()

    async def history() -> list[Any]:
        async with Admin(bootstrap, request_timeout_ms=5000) as admin:
            return (await admin.describe_groups(group))[0].rebalances

    rebalances = asyncio.run(history())
    # the member was removed because its connections closed, not at its session timeout
    assert any(r.reason == "connection-lost" for r in rebalances), \
        [(r.reason, r.detail) for r in rebalances]


def test_a_killed_broker_loses_no_record_an_acks_all_producer_was_told_of(
        tmp_path: Path, name: str) -> None:
    broker = BrokerProcess(tmp_path / "data", *FAST_GROUPS).start()
    port = broker.port
    bootstrap = f"127.0.0.1:{port}"
    restarted: BrokerProcess | None = None
    try:
        _create(bootstrap, name, 3)
        acked, _, delivered = _deliveries()  # some fail with the broker: not counted
        producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                "linger.ms": 2, "message.timeout.ms": 20_000})
        for sent in range(1, 2001):
            producer.produce(name, f"r{sent}".encode(), on_delivery=delivered)
            producer.poll(0)
            if sent == 1000:
                producer.flush(10)
                broker.kill()  # mid-stream: what was acknowledged must survive
        producer.poll(1)
        restarted = BrokerProcess(tmp_path / "data", *FAST_GROUPS, "--port", str(port)).start()
        producer.flush(30)
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{name}",
                                "auto.offset.reset": "earliest"})
        consumer.subscribe([name])
        seen: set[bytes] = set()
        deadline = time.monotonic() + WAIT_S
        while not acked <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
        consumer.close()
    finally:
        broker.kill()
        if restarted is not None:
            restarted.kill()
    assert len(acked) >= 1000
    assert acked - seen == set(), f"{len(acked - seen)} acknowledged records lost"


def test_an_idempotent_producer_through_a_broker_sigkill_writes_each_record_once(
        tmp_path: Path, name: str) -> None:
    """SIGKILLed with batches in flight, the broker restarts and the producer resends
    what it had no answer for: batches the broker had stored before it died are retries
    (the partition's producer state rebuilt from the log), answered with their first
    offsets and not stored again. Every record is in the log once, none is lost."""
    broker = BrokerProcess(tmp_path / "data", *FAST_GROUPS).start()
    port = broker.port
    bootstrap = f"127.0.0.1:{port}"
    restarted: BrokerProcess | None = None
    total = 20_000
    try:
        _create(bootstrap, name, 3)
        acked, failed, delivered = _deliveries()
        producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                "linger.ms": 1, "batch.num.messages": 200,
                                "message.timeout.ms": 60_000})
        for sent in range(total):
            producer.produce(name, f"r{sent}".encode(), on_delivery=delivered)
            producer.poll(0)
            if sent == total // 2:
                broker.kill()  # batches in flight: some stored, none answered
        producer.poll(0.5)
        restarted = BrokerProcess(tmp_path / "data", *FAST_GROUPS, "--port", str(port)).start()
        assert producer.flush(60) == 0
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{name}",
                                "auto.offset.reset": "earliest", "enable.partition.eof": True})
        consumer.subscribe([name])
        seen: list[bytes] = []
        ended: set[int] = set()
        deadline = time.monotonic() + WAIT_S
        while len(ended) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                seen.append(msg.value())
            elif msg.error().code() == ck.KafkaError._PARTITION_EOF:
                ended.add(msg.partition())
        consumer.close()
    finally:
        broker.kill()
        if restarted is not None:
            restarted.kill()
    assert failed == []
    assert len(acked) == total
    duplicates = len(seen) - len(set(seen))
    assert duplicates == 0, f"{duplicates} records written twice"
    assert acked - set(seen) == set(), f"{len(acked - set(seen))} acknowledged records lost"


def test_an_idempotent_producer_resending_stored_batches_writes_each_record_once(
        tmp_path: Path, name: str) -> None:
    """The broker stores batches whose answers never arrive (a relay drops them, then
    drops the connections): the producer resends them, and each resend is recognised as
    a retry of a stored batch, answered with its first offsets and stored nowhere."""
    relay_port, peek_port = _free_port(), _free_port()
    # clients are told the relay's address; the test reads offsets on a Kafka listener
    # of its own, which the relay does not stand in front of
    broker = BrokerProcess(tmp_path / "data", *FAST_GROUPS, "--advertised-listeners",
                           f"PLAINTEXT://127.0.0.1:{relay_port}", "--kafka-listeners",
                           f"PLAINTEXT://127.0.0.1:{peek_port}").start()
    cutter = AnswerCutter(broker.port, port=relay_port)
    bootstrap = f"127.0.0.1:{cutter.port}"
    total = 6_000
    try:
        _create(f"127.0.0.1:{peek_port}", name, 3)
        acked, failed, delivered = _deliveries()
        producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                "linger.ms": 1, "batch.num.messages": 100,
                                "message.timeout.ms": 60_000})
        producer.produce(name, b"first")
        assert producer.flush(20) == 0  # connected, producer id handed out
        stored_before = _end_offsets(peek_port, name)
        cutter.losing.set()
        for sent in range(total):
            producer.produce(name, f"r{sent}".encode(), on_delivery=delivered)
            producer.poll(0)
        deadline = time.monotonic() + WAIT_S
        while _end_offsets(peek_port, name) == stored_before:
            # until the broker holds batches it answered and the producer never heard of
            # (librdkafka stops at its 5 requests in flight)
            assert time.monotonic() < deadline, "no batch was stored while answers were lost"
            producer.poll(0.1)
        cutter.cut()
        assert producer.flush(60) == 0
        stored = _end_offsets(peek_port, name) - stored_before
    finally:
        cutter.close()
        broker.kill()
    assert failed == []
    assert len(acked) == total
    assert stored == total, f"{stored - total} records stored twice"


def _deliveries() -> tuple[set[bytes], list[str], Any]:
    """The values acknowledged, the errors reported, and the callback that fills them."""
    acked: set[bytes] = set()
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value())
        else:
            failed.append(str(err))

    return acked, failed, delivered


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _end_offsets(port: int, topic: str) -> int:
    """The sum of the topic's log end offsets, asked of the broker directly."""
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "peek"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return sum(consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                   for p in meta.partitions)
    finally:
        consumer.close()
