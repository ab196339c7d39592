"""Kafka's own clients against a broker process: the outside test of the Kafka door.

One broker process serves a whole test module (its start is the slow part); each test
names its own topics and groups, so tests do not see each other's records. Clients
nobody here wrote drive it: confluent-kafka (librdkafka), aiokafka, kafka-python, kcat.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.brokerproc import BrokerProcess

FAST_GROUPS = ("--group-initial-rebalance-delay-ms", "0",
               "--group-min-session-timeout-ms", "10",
               "--connection-loss-grace-ms", "300", "--fsync", "never")


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker process whose client listener also serves Kafka clients (the default)."""
    data_dir: Path = tmp_path_factory.mktemp("kafka-broker")
    # info, not warning: BrokerProcess reads the port from the info-level broker_started line
    broker = BrokerProcess(data_dir, *FAST_GROUPS, "--log-level", "info").start()
    yield broker
    broker.kill()


@pytest.fixture
def bootstrap(kafka_broker: BrokerProcess) -> str:
    return f"127.0.0.1:{kafka_broker.port}"


@pytest.fixture
def name() -> str:
    """A fresh topic or group name for one test."""
    return f"t-{uuid.uuid4().hex[:10]}"
