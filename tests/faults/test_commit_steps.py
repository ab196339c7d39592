"""A large OffsetCommit and offsets compaction run a step at a time (issue 14): other
connections are answered meanwhile and never see half a commit; a storage failure
still answers KAFKA_STORAGE_ERROR and keeps the old offsets; a compaction cut short by
the broker closing leaves a log that restarts to the same offsets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import groupwire.broker.coordinator.offsets_api as offsets_api
import groupwire.broker.offsets_log as offsets_log_module
from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from tests.integration.rawgroup import create_topic

from .conftest import FaultyDisk, StartBroker

ANSWER_S = 10.0
TOPIC = "t"


def _commit(partitions: range, offset: int, group: str = "g") -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, topics=[OffsetCommitRequestTopic(
        name=TOPIC, partitions=[OffsetCommitRequestPartition(
            partition_index=p, committed_offset=offset + p) for p in partitions])])


async def _fetch(conn: Connection, partitions: list[int], group: str = "g") -> list[int]:
    resp = await conn.send(OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequestTopic(name=TOPIC, partition_indexes=partitions)]),
        response_type=OffsetFetchResponse)
    return [p.committed_offset for p in resp.topics[0].partitions]


def _codes(resp: OffsetCommitResponse) -> set[int]:
    return {p.error_code for t in resp.topics for p in t.partitions}


async def _open(broker: Broker, client_id: str) -> Connection:
    return await Connection.open("127.0.0.1", broker.port, client_id=client_id)


async def test_a_large_commit_lets_others_in_and_is_never_seen_half_done(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    partitions = 5000
    broker = await start_broker(loop_slice_ms=0)  # a step a loop turn
    big, other = await _open(broker, "big"), await _open(broker, "other")
    await create_topic(big, TOPIC, partitions)
    real, started = offsets_api.CommittedOffset, asyncio.Event()

    def counted(*args: Any) -> Any:
        started.set()
        return real(*args)

    monkeypatch.setattr(offsets_api, "CommittedOffset", counted)
    sent = asyncio.ensure_future(big.send(_commit(range(partitions), 10),
                                          response_type=OffsetCommitResponse))
    after = asyncio.ensure_future(big.send(ApiVersionsRequest(),
                                           response_type=ApiVersionsResponse))
    async with asyncio.timeout(ANSWER_S):
        await started.wait()  # the commit is under way
        assert await _fetch(other, [0, partitions - 1]) == [-1, -1]  # none of it yet
        assert not sent.done() and not after.done()  # its connection's next one waits
        assert _codes(await sent) == {ErrorCode.NONE}
        await after
    assert await _fetch(other, [0, partitions - 1]) == [10, 10 + partitions - 1]


@pytest.mark.parametrize("fsync", ["never", "always"])
async def test_a_large_commit_on_a_failing_disk_keeps_the_old_offsets(
        start_broker: StartBroker, tmp_path: Path, fsync: str) -> None:
    """(A guard: the plain handler did this too; now the stepped commit must.)"""
    partitions = 1000
    disk = FaultyDisk()
    broker = await start_broker(file_ops=disk, fsync=fsync, loop_slice_ms=0)
    conn = await _open(broker, "c")
    await create_topic(conn, TOPIC, partitions)
    ok = await conn.send(_commit(range(partitions), 5), response_type=OffsetCommitResponse)
    assert _codes(ok) == {ErrorCode.NONE}
    disk.failing = True
    refused = await conn.send(_commit(range(partitions), 9),
                              response_type=OffsetCommitResponse)
    assert _codes(refused) == {ErrorCode.KAFKA_STORAGE_ERROR}
    assert await _fetch(conn, [0, 999]) == [5, 1004]  # not 9, even before a restart
    disk.failing = False
    await conn.close()
    await broker.close()
    again = await start_broker(data_dir=tmp_path / "data")
    conn = await _open(again, "c")
    assert await _fetch(conn, [0, 999]) == [5, 1004]
    await conn.close()


async def test_a_compaction_cut_short_by_closing_restarts_to_the_same_offsets(
        start_broker: StartBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets_log_module, "SNAPSHOT_BATCH", 1)  # a step a key
    broker = await start_broker(offsets_compact_min_records=600, loop_slice_ms=0)
    conn = await _open(broker, "c")
    await create_topic(conn, TOPIC, 300)
    for round_ in range(3):  # 900 records of 300 keys: the third commit starts it
        resp = await conn.send(_commit(range(300), 100 * round_),
                               response_type=OffsetCommitResponse)
        assert _codes(resp) == {ErrorCode.NONE}
    assert broker.started.runtime.compactions  # in the background, after the commit was answered
    await conn.close()
    await broker.close()  # abandons it half-way
    assert broker.started.offsets_log.compactions == 0

    again = await start_broker(data_dir=tmp_path / "data")
    conn = await _open(again, "c")
    assert await _fetch(conn, list(range(300))) == [200 + p for p in range(300)]
    await conn.close()
