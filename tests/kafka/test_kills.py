"""Killing processes under Kafka's own clients: a SIGKILLed librdkafka consumer's
partitions move on connection loss, not at its session timeout; a broker SIGKILLed under
an acks=all librdkafka producer loses no acknowledged record."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from groupwire.client.admin import Admin
from tests.integration.brokerproc import BrokerProcess

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
        acked: set[bytes] = set()
        failed: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.add(msg.value())
            else:
                failed.append(str(err))

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
