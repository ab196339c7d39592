"""§9 internal topics and FindCoordinator."""

from __future__ import annotations

import pytest

from .conftest import Connect, StartBroker
from .wire import (
    EVENTS_TOPIC,
    OFFSETS_TOPIC,
    Api,
    Err,
    WireConn,
    crc_of,
    create_topic,
    fetch_one,
    split_batches,
    values_batch,
)


async def test_internal_topics_listed(conn: WireConn) -> None:
    await create_topic(conn, "user-topic")
    body = await conn.call(Api.METADATA, {"topics": None})
    topics = {t["name"]: t for t in body["topics"]}
    assert topics[OFFSETS_TOPIC]["is_internal"] is True
    assert sorted(p["partition_index"] for p in topics[OFFSETS_TOPIC]["partitions"]) == list(
        range(50))
    assert topics[EVENTS_TOPIC]["is_internal"] is True
    assert [p["partition_index"] for p in topics[EVENTS_TOPIC]["partitions"]] == [0]
    assert topics["user-topic"]["is_internal"] is False


@pytest.mark.parametrize("topic", [OFFSETS_TOPIC, EVENTS_TOPIC])
async def test_produce_and_create_partitions_refuse_internal_topics(conn: WireConn,
                                                                    topic: str) -> None:
    body = await conn.call(Api.PRODUCE, {"topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": values_batch(b"forged")}]}]})
    entry = body["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Err.INVALID_TOPIC_EXCEPTION
    body = await conn.call(Api.CREATE_PARTITIONS, {"topics": [{"name": topic, "count": 60}]})
    assert body["results"][0]["error_code"] == Err.INVALID_TOPIC_EXCEPTION
    part = await fetch_one(conn, topic, 0, 0)
    assert part["error_code"] == Err.NONE


@pytest.mark.parametrize(("group", "partition"), [
    ("test-group", 12), ("group1", 40), ("polygenelubricants", 0)])
async def test_offsets_land_on_the_group_partition(conn: WireConn, group: str,
                                                   partition: int) -> None:
    await create_topic(conn, "placed")

    async def ends() -> list[int]:
        body = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": OFFSETS_TOPIC,
                                                              "partitions": [
            {"partition_index": p, "timestamp": -1} for p in range(50)]}]})
        return [p["offset"] for p in body["topics"][0]["partitions"]]

    before = await ends()
    body = await conn.call(Api.OFFSET_COMMIT, {"group_id": group, "topics": [
        {"name": "placed", "partitions": [{"partition_index": 0, "committed_offset": 7}]}]})
    assert body["topics"][0]["partitions"][0]["error_code"] == Err.NONE
    after = await ends()
    grew = [p for p in range(50) if after[p] > before[p]]
    assert grew == [partition]
    part = await fetch_one(conn, OFFSETS_TOPIC, partition, 0)
    batches = split_batches(part["records"])
    assert batches
    for b in batches:  # internal logs use the same batch format (v1, epoch 0 here)
        assert b[:3] == b"\x92\x96\xcf" and b[11] == 0xd2 and b[12:16] == bytes(4)
        assert b[16] == 0xd3 and b[25] == 0xce and b[30] == 0xce
        assert int.from_bytes(b[31:35]) == crc_of(b) and b[35] == 0


async def test_find_coordinator_answers_node_0(start_broker: StartBroker,
                                               connect: Connect) -> None:
    broker = await start_broker()
    conn = await connect(target=broker)
    for key in ("test-group", "", "polygenelubricants"):
        body = await conn.call(Api.FIND_COORDINATOR, {"key": key, "key_type": 0})
        assert (body["error_code"], body["node_id"], body["host"], body["port"]) == (
            0, 0, "127.0.0.1", broker.port)
    body = await conn.call(Api.FIND_COORDINATOR, {"key": "g", "key_type": 1})
    assert body["error_code"] != Err.NONE


async def test_find_coordinator_and_metadata_use_the_advertised_host(
        start_broker: StartBroker, connect: Connect) -> None:
    broker = await start_broker(advertised_host="broker.example")
    conn = await connect(target=broker)
    body = await conn.call(Api.FIND_COORDINATOR, {"key": "g"})
    assert (body["node_id"], body["host"], body["port"]) == (0, "broker.example", broker.port)
    meta = await conn.call(Api.METADATA, {"topics": []})
    assert [(b["node_id"], b["host"], b["port"]) for b in meta["brokers"]] == [
        (0, "broker.example", broker.port)]
