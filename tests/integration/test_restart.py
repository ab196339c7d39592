"""A broker killed with SIGKILL keeps every acknowledged record and commit."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from groupwire.client.connection import Connection
from groupwire.protocol.batches import decode_records
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from .brokerproc import BrokerProcess
from .rawgroup import RawMember, create_topic, produce, round_robin


async def _fetch_all(conn: Connection, topic: str, partition: int) -> list[bytes | None]:
    resp = await conn.send(FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic=topic, partitions=[FetchPartition(partition=partition, fetch_offset=0)])]),
        response_type=FetchResponse)
    return [r.value for r in decode_records(resp.responses[0].partitions[0].records)]


@pytest.mark.parametrize("fsync", ["always", "never"])
async def test_sigkill_keeps_records_and_commits(tmp_path: Path, procs, fsync: str) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    first = BrokerProcess(data, "--fsync", fsync, "--group-initial-rebalance-delay-ms", "0")
    procs.append(first.start())
    conn = await Connection.open("127.0.0.1", first.port)
    await create_topic(conn, "durable", 2)
    for i in range(5):
        await produce(conn, "durable", i % 2, [f"r{i}".encode()])
    member = RawMember(conn, "keeper", ["durable"])
    await member.join_group()
    await member.sync(round_robin([member.member_id], "durable", 2))
    resp = await member.commit({("durable", 0): 3, ("durable", 1): 2})
    assert all(p.error_code == 0 for p in resp.topics[0].partitions)
    await conn.close()
    first.kill()

    second = BrokerProcess(data, "--fsync", fsync)
    procs.append(second.start())
    conn = await Connection.open("127.0.0.1", second.port)
    assert await _fetch_all(conn, "durable", 0) == [b"r0", b"r2", b"r4"]
    assert await _fetch_all(conn, "durable", 1) == [b"r1", b"r3"]
    offsets = await conn.send(OffsetFetchRequest(group_id="keeper"),
                              response_type=OffsetFetchResponse)
    got = {(t.name, p.partition_index): p.committed_offset
           for t in offsets.topics for p in t.partitions}
    assert got == {("durable", 0): 3, ("durable", 1): 2}
    # the rebalance that formed the group was recorded in __group_events
    resp_events = await conn.send(FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic="__group_events", partitions=[FetchPartition(partition=0, fetch_offset=0)])]),
        response_type=FetchResponse)
    events = [msgpack.unpackb(r.value, raw=False)
              for r in decode_records(resp_events.responses[0].partitions[0].records)]
    kinds = [e["type"] for e in events if e["group_id"] == "keeper"]
    assert "member_joined" in kinds and "rebalance_completed" in kinds
    # the group itself was restored: its member carries on without a rebalance
    member.conn = conn
    assert (await member.heartbeat()).error_code == 0
    assert (await member.commit({("durable", 0): 4})).topics[0].partitions[0].error_code == 0
    await conn.close()
    assert second.terminate() == 0


async def test_offsets_log_is_compacted_and_restart_replays_the_snapshot(
        tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    from groupwire.protocol.hashing import coordinator_partition
    from groupwire.protocol.messages import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsResponse,
        ListOffsetsTopic,
    )

    data = tmp_path / "data"
    first = BrokerProcess(data, "--offsets-compact-min-records", "50",
                          "--group-initial-rebalance-delay-ms", "0")
    procs.append(first.start())
    conn = await Connection.open("127.0.0.1", first.port)
    await create_topic(conn, "busy", 1)
    member = RawMember(conn, "committer", ["busy"])
    await member.join_group()
    await member.sync(round_robin([member.member_id], "busy", 1))
    for offset in range(1, 301):
        resp = await member.commit({("busy", 0): offset})
        assert resp.topics[0].partitions[0].error_code == 0

    partition = coordinator_partition("committer")

    async def earliest(c: Connection) -> int:
        resp = await c.send(ListOffsetsRequest(topics=[ListOffsetsTopic(
            name="__consumer_offsets", partitions=[ListOffsetsPartition(
                partition_index=partition, timestamp=-2)])]), response_type=ListOffsetsResponse)
        return resp.topics[0].partitions[0].offset

    # 300 commits of one key were compacted: old segments are gone from the log's start
    assert await earliest(conn) > 0
    await conn.close()
    first.kill()

    second = BrokerProcess(data)
    procs.append(second.start())
    started = next(line for line in second.lines if '"broker_started"' in line)
    import json

    assert json.loads(started)["group_records"] < 100
    conn = await Connection.open("127.0.0.1", second.port)
    offsets = await conn.send(OffsetFetchRequest(group_id="committer"),
                              response_type=OffsetFetchResponse)
    assert offsets.topics[0].partitions[0].committed_offset == 300
    member.conn = conn
    assert (await member.heartbeat()).error_code == 0
    await conn.close()
