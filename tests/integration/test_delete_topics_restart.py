"""A deleted topic stays deleted across restarts, SIGKILL included, with its committed
offsets; a crash between the metadata write and the rest is repaired at start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from .brokerproc import BrokerProcess
from .rawgroup import create_topic, produce


async def _commit(conn: Connection, group: str, topic: str, offsets: dict[int, int]) -> None:
    resp = await conn.send(OffsetCommitRequest(group_id=group, topics=[
        OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
            for p, o in offsets.items()])]), response_type=OffsetCommitResponse)
    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions), resp


async def _committed(conn: Connection, group: str) -> dict[tuple[str, int], int]:
    resp = await conn.send(OffsetFetchRequest(group_id=group),
                           response_type=OffsetFetchResponse)
    return {(t.name, p.partition_index): p.committed_offset
            for t in resp.topics for p in t.partitions}


async def _topics(conn: Connection) -> set[str]:
    md = await conn.send(MetadataRequest(topics=None), response_type=MetadataResponse)
    return {t.name for t in md.topics if not t.is_internal}


async def _setup(port: int) -> None:
    conn = await Connection.open("127.0.0.1", port)
    await create_topic(conn, "doomed", 2)
    await create_topic(conn, "kept", 1)
    for i in range(4):
        await produce(conn, "doomed", i % 2, [b"old"])
    await _commit(conn, "g", "doomed", {0: 2, 1: 2})
    await _commit(conn, "g", "kept", {0: 0})
    await conn.close()


async def _check_gone_and_recreate(port: int) -> None:
    conn = await Connection.open("127.0.0.1", port)
    assert await _topics(conn) == {"kept"}
    assert await _committed(conn, "g") == {("kept", 0): 0}
    await create_topic(conn, "doomed", 1)
    resp = await produce(conn, "doomed", 0, [b"new"])
    assert resp.responses[0].partition_responses[0].base_offset == 0
    await conn.close()


@pytest.mark.parametrize("fsync", ["always", "never"])
async def test_sigkill_after_delete_keeps_the_topic_deleted(tmp_path: Path, procs, fsync: str  # type: ignore[no-untyped-def]
                                                            ) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data, "--fsync", fsync)
    procs.append(first.start())
    await _setup(first.port)
    conn = await Connection.open("127.0.0.1", first.port)
    resp = await conn.send(DeleteTopicsRequest(topic_names=["doomed"]),
                           response_type=DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in resp.responses] == [("doomed", ErrorCode.NONE)]
    await conn.close()
    first.kill()
    assert not [d for d in (data / "logs").iterdir() if d.name.startswith("doomed")]

    second = BrokerProcess(data, "--fsync", fsync)
    procs.append(second.start())
    await _check_gone_and_recreate(second.port)
    assert not any("offsets_of_deleted_topics_removed" in line for line in second.lines)
    assert second.terminate() == 0


async def test_a_crash_before_the_directories_and_tombstones_is_repaired(
        tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    first = BrokerProcess(data)
    procs.append(first.start())
    await _setup(first.port)
    first.kill()
    # what a crash right after DeleteTopics replaced meta.json leaves behind: the
    # partitions' directories, and committed offsets with no tombstones
    meta = json.loads((data / "meta.json").read_text())
    del meta["topics"]["doomed"]
    (data / "meta.json").write_text(json.dumps(meta))

    second = BrokerProcess(data)
    procs.append(second.start())
    logged = [json.loads(line) for line in second.lines if line.startswith("{")]
    strays = [e for e in logged if e.get("event") == "stray_partitions_removed"]
    assert strays and strays[0]["directories"] == ["doomed-0", "doomed-1"]
    purged = [e for e in logged if e.get("event") == "offsets_of_deleted_topics_removed"]
    assert purged and purged[0]["topics"] == ["doomed"]
    assert not [d for d in (data / "logs").iterdir() if d.name.startswith("doomed")]
    second.kill()  # the tombstones written at start are durable: a third start agrees

    third = BrokerProcess(data)
    procs.append(third.start())
    assert not any("offsets_of_deleted_topics_removed" in line for line in third.lines)
    await _check_gone_and_recreate(third.port)
    assert third.terminate() == 0
