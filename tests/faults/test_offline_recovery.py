"""A partition taken offline by a failed fsync says why, shows in the metrics, and takes
writes again once the disk is back, without a restart; the others never stop."""

from __future__ import annotations

from pathlib import Path

import structlog

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ProduceResponse,
)
from tests.integration.rawgroup import create_topic, produce

from .conftest import FaultyDisk, StartBroker
from .test_disk_errors import _values

TOPIC = "t"


class FsyncFailure(FaultyDisk):
    """Writes reach the page cache; only fsync fails while ``failing``."""

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return super(FaultyDisk, self).pwrite(fd, data, offset)


def _code(resp: ProduceResponse) -> int:
    return resp.responses[0].partition_responses[0].error_code


def _offline(broker: Broker) -> float | None:
    return broker.metrics.registry.get_sample_value("groupwire_offline_partitions",
                                                    {"topic": TOPIC})




async def test_an_offline_partition_comes_back_once_the_disk_does(
        start_broker: StartBroker, tmp_path: Path) -> None:
    disk = FsyncFailure()
    broker = await start_broker(file_ops=disk, fsync="always", metrics_port=0,
                                log_offline_retry_ms=0)
    conn = await Connection.open("127.0.0.1", broker.port, client_id="offline")
    await create_topic(conn, TOPIC, 2)
    assert _code(await produce(conn, TOPIC, 0, [b"a"])) == ErrorCode.NONE
    assert _offline(broker) == 0

    disk.failing = True
    with structlog.testing.capture_logs() as logs:
        assert _code(await produce(conn, TOPIC, 0, [b"lost"])) == \
            ErrorCode.KAFKA_STORAGE_ERROR
        # still failing: the retry (no back-off here) fails again and says so
        assert _code(await produce(conn, TOPIC, 0, [b"refused"])) == \
            ErrorCode.KAFKA_STORAGE_ERROR
    offline = [e for e in logs if e["event"] == "partition_offline"]
    assert [(e["log_level"], e["topic"], e["partition"]) for e in offline] == \
        [("error", TOPIC, 0)]
    assert "injected disk failure" in offline[0]["error"]
    assert any(e["event"] == "partition_recovery_failed" for e in logs)
    assert _offline(broker) == 1
    assert await _values(conn, 0) == [b"a"]  # reads go on

    disk.failing = False
    assert _code(await produce(conn, TOPIC, 1, [b"other"])) == ErrorCode.NONE
    assert _code(await produce(conn, TOPIC, 0, [b"b"])) == ErrorCode.NONE
    assert _offline(broker) == 0
    assert await _values(conn, 0) == [b"a", b"b"]  # never-acknowledged records are gone
    await conn.close()
    await broker.close()

    again = await start_broker(data_dir=tmp_path / "data", fsync="always")
    conn = await Connection.open("127.0.0.1", again.port, client_id="offline")
    assert await _values(conn, 0) == [b"a", b"b"]
    assert await _values(conn, 1) == [b"other"]
    await conn.close()
