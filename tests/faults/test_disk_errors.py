"""A failing disk: writes are refused with KAFKA_STORAGE_ERROR, reads go on, and nothing
acknowledged is lost nor anything refused half-visible, now or after a restart."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.batches import decode_records
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    ProduceResponse,
)
from tests.integration.rawgroup import RawMember, create_topic, produce, round_robin

from .conftest import FaultyDisk, StartBroker

TOPIC = "t"


async def _values(conn: Connection, partition: int = 0) -> list[bytes]:
    resp = await conn.send(FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic=TOPIC, partitions=[FetchPartition(partition=partition, fetch_offset=0)])]),
        response_type=FetchResponse)
    data = resp.responses[0].partitions[0]
    assert data.error_code == ErrorCode.NONE, data
    return [r.value or b"" for r in decode_records(data.records)]


async def _committed(conn: Connection, group: str) -> int:
    resp = await conn.send(OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]),
        response_type=OffsetFetchResponse)
    return resp.topics[0].partitions[0].committed_offset


def _produce_code(resp: ProduceResponse) -> int:
    return resp.responses[0].partition_responses[0].error_code


async def _open(broker: Broker) -> Connection:
    return await Connection.open("127.0.0.1", broker.port, client_id="faults")


@pytest.mark.parametrize("fsync", ["never", "always"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
async def test_produce_on_a_failing_disk(start_broker: StartBroker, tmp_path: Path,
                                         code: int, fsync: str) -> None:
    disk = FaultyDisk()
    disk.errno = code
    broker = await start_broker(file_ops=disk, fsync=fsync)
    conn = await _open(broker)
    await create_topic(conn, TOPIC, 1)
    assert _produce_code(await produce(conn, TOPIC, 0, [b"a", b"b"])) == ErrorCode.NONE

    disk.failing = True
    for i in range(3):
        resp = await produce(conn, TOPIC, 0, [b"refused-%d" % i])
        assert _produce_code(resp) == ErrorCode.KAFKA_STORAGE_ERROR
    assert disk.refused > 0
    assert await _values(conn) == [b"a", b"b"]  # reads keep being served

    disk.failing = False
    assert _produce_code(await produce(conn, TOPIC, 0, [b"c"])) == ErrorCode.NONE
    assert await _values(conn) == [b"a", b"b", b"c"]
    await conn.close()
    await broker.close()

    again = await start_broker(data_dir=tmp_path / "data")
    conn = await _open(again)
    assert await _values(conn) == [b"a", b"b", b"c"]
    await conn.close()


@pytest.mark.parametrize("fsync", ["never", "always"])
async def test_offset_commit_on_a_failing_disk_keeps_the_old_offset(
        start_broker: StartBroker, tmp_path: Path, fsync: str) -> None:
    disk = FaultyDisk()
    broker = await start_broker(file_ops=disk, fsync=fsync)
    admin = await _open(broker)
    await create_topic(admin, TOPIC, 1)
    member = RawMember(await _open(broker), "g", [TOPIC])
    assert (await member.join_group()).error_code == ErrorCode.NONE
    plan = round_robin([member.member_id], TOPIC, 1)
    assert (await member.sync(plan)).error_code == ErrorCode.NONE
    ok = await member.commit({(TOPIC, 0): 5})
    assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE

    disk.failing = True
    refused = await member.commit({(TOPIC, 0): 9})
    assert refused.topics[0].partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert await _committed(admin, "g") == 5  # not the refused 9, even before a restart
    assert (await member.heartbeat()).error_code == ErrorCode.NONE  # the group goes on

    disk.failing = False
    await member.conn.close()
    await admin.close()
    await broker.close()
    again = await start_broker(data_dir=tmp_path / "data")
    conn = await _open(again)
    assert await _committed(conn, "g") == 5
    await conn.close()


async def test_a_later_commit_is_not_undone_by_an_earlier_failure(
        start_broker: StartBroker) -> None:
    disk = FaultyDisk()
    broker = await start_broker(file_ops=disk)
    conn = await _open(broker)
    await create_topic(conn, TOPIC, 1)
    member = RawMember(conn, "g", [TOPIC])
    await member.join_group()
    await member.sync(round_robin([member.member_id], TOPIC, 1))
    disk.failing = True
    assert (await member.commit({(TOPIC, 0): 3})).topics[0].partitions[0].error_code \
        == ErrorCode.KAFKA_STORAGE_ERROR
    disk.failing = False
    assert (await member.commit({(TOPIC, 0): 4})).topics[0].partitions[0].error_code \
        == ErrorCode.NONE
    assert await _committed(conn, "g") == 4
    await conn.close()


class _FsyncOnlyFailure(FaultyDisk):
    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return super(FaultyDisk, self).pwrite(fd, data, offset)


async def test_a_failed_fsync_takes_the_log_offline_for_the_retry_back_off(
        start_broker: StartBroker, tmp_path: Path) -> None:
    """After a failed fsync the page cache cannot be trusted, so the partition refuses
    writes until it has re-checked its tail (after --log-offline-retry-ms, longer than
    this test; tests/faults/test_offline_recovery.py covers the recovery); reads of
    acknowledged records go on."""
    disk = _FsyncOnlyFailure()
    broker = await start_broker(file_ops=disk, fsync="always")
    conn = await _open(broker)
    await create_topic(conn, TOPIC, 1)
    assert _produce_code(await produce(conn, TOPIC, 0, [b"a"])) == ErrorCode.NONE
    disk.failing = True
    resp = await produce(conn, TOPIC, 0, [b"refused"])
    assert _produce_code(resp) == ErrorCode.KAFKA_STORAGE_ERROR
    assert await _values(conn) == [b"a"]
    disk.failing = False
    resp = await produce(conn, TOPIC, 0, [b"while-offline"])
    assert _produce_code(resp) == ErrorCode.KAFKA_STORAGE_ERROR
    assert await _values(conn) == [b"a"]
    await conn.close()
    await broker.close()

    again = await start_broker(data_dir=tmp_path / "data", fsync="always")
    conn = await _open(again)
    after = await _values(conn)
    # acknowledged first; the refused record may survive whole (it reached the page
    # cache, as in Kafka) but never torn, and nothing written while offline is there
    assert after in ([b"a"], [b"a", b"refused"])
    assert _produce_code(await produce(conn, TOPIC, 0, [b"b"])) == ErrorCode.NONE
    assert (await _values(conn))[-1] == b"b"
    await conn.close()


async def test_a_leader_sync_whose_group_record_fails_is_answered_with_an_error_and_undone(
        start_broker: StartBroker) -> None:
    """Kafka's rule: the members are told COORDINATOR_NOT_AVAILABLE rather than handed an
    assignment the broker could not write, and the group rebalances; once the disk is
    back, the next generation is written and served."""
    disk = FaultyDisk()
    broker = await start_broker(file_ops=disk)
    conn = await _open(broker)
    await create_topic(conn, TOPIC, 2)
    member = RawMember(conn, "g", [TOPIC])
    first = await member.join_group()
    assert first.error_code == ErrorCode.NONE

    disk.failing = True
    refused = await member.sync(round_robin([member.member_id], TOPIC, 2))
    assert (refused.error_code, refused.assignment) == (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                       b"")
    assert (await member.heartbeat()).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    # the refused assignment gives no ownership: a commit with that generation is refused
    assert (await member.commit({(TOPIC, 0): 1})).topics[0].partitions[0].error_code \
        == ErrorCode.PARTITION_NOT_OWNED

    disk.failing = False
    again = await member.join_group()
    assert again.error_code == ErrorCode.NONE
    assert again.generation_id == first.generation_id + 1
    ok = await member.sync(round_robin([member.member_id], TOPIC, 2))
    assert ok.error_code == ErrorCode.NONE and ok.assignment != b""
    assert (await member.heartbeat()).error_code == ErrorCode.NONE
    await conn.close()
