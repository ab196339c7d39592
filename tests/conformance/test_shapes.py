"""§4: every API answers with all its fields, each with the right msgpack type.

The decoder unpacks with ``raw=False``, so a msgpack bin arrives as ``bytes`` and a str as
``str``: a broker packing bytes as str (or strings as bin) fails these checks.
"""

from __future__ import annotations

from groupwire.broker.server import Broker

from .conftest import Connect
from .wire import (
    Api,
    Err,
    Member,
    WireConn,
    assert_shape,
    assignment,
    create_topic,
    produce,
    stable_single,
    subscription,
    values_batch,
)


async def test_metadata_shape_and_broker_address(broker: Broker, conn: WireConn) -> None:
    await create_topic(conn, "shape-meta", 2)
    body = await conn.call(Api.METADATA, {"topics": [{"name": "shape-meta"}]})
    assert_shape(Api.METADATA, body)
    assert [(b["node_id"], b["host"], b["port"]) for b in body["brokers"]] == [
        (0, "127.0.0.1", broker.port)]
    [topic] = body["topics"]
    assert topic["name"] == "shape-meta" and topic["is_internal"] is False
    assert sorted(p["partition_index"] for p in topic["partitions"]) == [0, 1]
    assert {p["leader_id"] for p in topic["partitions"]} == {0}


async def test_create_topics_and_partitions_shapes(conn: WireConn) -> None:
    body = await conn.call(Api.CREATE_TOPICS, {"topics": [
        {"name": "shape-ct", "num_partitions": 3, "replication_factor": 1}]})
    assert_shape(Api.CREATE_TOPICS, body)
    assert [(t["name"], t["error_code"], t["num_partitions"], t["replication_factor"])
            for t in body["topics"]] == [("shape-ct", 0, 3, 1)]
    body = await conn.call(Api.CREATE_PARTITIONS, {"topics": [{"name": "shape-ct",
                                                               "count": 5}]})
    assert_shape(Api.CREATE_PARTITIONS, body)
    assert [(r["name"], r["error_code"]) for r in body["results"]] == [("shape-ct", 0)]
    meta = await conn.call(Api.METADATA, {"topics": [{"name": "shape-ct"}]})
    assert len(meta["topics"][0]["partitions"]) == 5


async def test_produce_fetch_list_offsets_shapes(conn: WireConn) -> None:
    await create_topic(conn, "shape-data")
    body = await conn.call(Api.PRODUCE, {"topic_data": [{"name": "shape-data",
                                                         "partition_data": [
        {"index": 0, "records": values_batch(b"a", b"b")}]}]})
    assert_shape(Api.PRODUCE, body)
    assert body["responses"][0]["name"] == "shape-data"
    assert body["responses"][0]["partition_responses"][0]["index"] == 0

    body = await conn.call(Api.FETCH, {"max_wait_ms": 0, "topics": [
        {"topic": "shape-data", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
    assert_shape(Api.FETCH, body)
    part = body["responses"][0]["partitions"][0]
    assert body["responses"][0]["topic"] == "shape-data"
    assert (part["partition_index"], part["high_watermark"], part["log_start_offset"]) == (
        0, 2, 0)

    # An empty answer is still a bin, not nil or str.
    body = await conn.call(Api.FETCH, {"max_wait_ms": 0, "topics": [
        {"topic": "shape-data", "partitions": [{"partition": 0, "fetch_offset": 2}]}]})
    assert_shape(Api.FETCH, body)
    assert body["responses"][0]["partitions"][0]["records"] == b""

    body = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": "shape-data", "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]})
    assert_shape(Api.LIST_OFFSETS, body)
    assert body["topics"][0]["partitions"][0]["offset"] == 2


async def test_find_coordinator_shape(broker: Broker, conn: WireConn) -> None:
    for body in (await conn.call(Api.FIND_COORDINATOR, {"key": "any-group"}),
                 await conn.call(Api.FIND_COORDINATOR, {"key": "g", "key_type": 0})):
        assert body["error_code"] == Err.NONE
        assert_shape(Api.FIND_COORDINATOR, body)
        assert (body["node_id"], body["host"], body["port"]) == (0, "127.0.0.1", broker.port)


async def test_group_api_shapes(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "shape-g", 2)
    member = Member(conn, "shape-group", ["shape-g"])
    first = await member.join_once()
    assert first["error_code"] == Err.MEMBER_ID_REQUIRED
    assert isinstance(first.get("member_id"), str) and first["member_id"]
    joined = await member.join_once()
    assert_shape(Api.JOIN_GROUP, joined)
    assert joined["members"][0]["metadata"] == subscription(["shape-g"])
    synced = await member.sync({member.member_id: assignment([("shape-g", [0, 1])])})
    assert_shape(Api.SYNC_GROUP, synced)
    assert synced["assignment"] == assignment([("shape-g", [0, 1])])
    heartbeat = await member.heartbeat()
    assert_shape(Api.HEARTBEAT, heartbeat)
    assert heartbeat["error_code"] == Err.NONE

    committed = await member.commit("shape-g", {0: 5, 1: 6})
    assert_shape(Api.OFFSET_COMMIT, committed)
    assert [p["error_code"] for p in committed["topics"][0]["partitions"]] == [0, 0]
    fetched = await conn.call(Api.OFFSET_FETCH, {"group_id": "shape-group", "topics": [
        {"name": "shape-g", "partition_indexes": [0, 1]}]})
    assert_shape(Api.OFFSET_FETCH, fetched)
    assert [p["committed_offset"] for p in fetched["topics"][0]["partitions"]] == [5, 6]

    described = await conn.call(Api.DESCRIBE_GROUPS, {"groups": ["shape-group"]})
    assert_shape(Api.DESCRIBE_GROUPS, described)
    group = described["groups"][0]
    assert group["members"] and group["rebalances"]
    assert group["members"][0]["member_assignment"] == assignment([("shape-g", [0, 1])])
    assert group["members"][0]["member_metadata"] == subscription(["shape-g"])

    listed = await conn.call(Api.LIST_GROUPS, {})
    assert_shape(Api.LIST_GROUPS, listed)
    assert {"group_id": "shape-group", "protocol_type": "consumer",
            "group_state": "Stable"} in [
        {k: g[k] for k in ("group_id", "protocol_type", "group_state")}
        for g in listed["groups"]]

    left = await member.leave("done")
    assert_shape(Api.LEAVE_GROUP, left)
    assert [(m["member_id"], m["group_instance_id"], m["error_code"])
            for m in left["members"]] == [(member.member_id, None, 0)]

    deleted = await conn.call(Api.DELETE_GROUPS, {"groups_names": ["shape-group"]})
    assert_shape(Api.DELETE_GROUPS, deleted)
    assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [
        ("shape-group", 0)]


async def test_describe_unknown_group_shape(conn: WireConn) -> None:
    body = await conn.call(Api.DESCRIBE_GROUPS, {"groups": ["never-seen"]})
    assert_shape(Api.DESCRIBE_GROUPS, body)
    group = body["groups"][0]
    assert (group["group_id"], group["group_state"], group["members"]) == (
        "never-seen", "Dead", [])


async def test_static_member_shapes(conn: WireConn) -> None:
    await create_topic(conn, "shape-s")
    member = await stable_single(conn, "shape-static", "shape-s", [0], instance_id="inst-1")
    assert member.joined["members"][0]["group_instance_id"] == "inst-1"
    group = (await conn.call(Api.DESCRIBE_GROUPS, {"groups": ["shape-static"]}))["groups"][0]
    assert group["members"][0]["group_instance_id"] == "inst-1"
    assert group["members"][0]["client_id"] == conn.client_id
    left = await member.leave()
    assert_shape(Api.LEAVE_GROUP, left)
    assert left["members"][0]["group_instance_id"] == "inst-1"


async def test_produce_response_for_unknown_topic_keeps_types(conn: WireConn) -> None:
    body = await conn.call(Api.PRODUCE, {"topic_data": [{"name": "nowhere", "partition_data": [
        {"index": 0, "records": values_batch(b"x")}]}]})
    assert body["error_code"] == Err.NONE
    assert_shape(Api.PRODUCE, body)
    entry = body["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


async def test_produce_entry_shape_after_create(conn: WireConn) -> None:
    await create_topic(conn, "shape-p", 2)
    entry = await produce(conn, "shape-p", 1, values_batch(b"x"))
    assert (entry["index"], entry["error_code"], entry["base_offset"]) == (1, 0, 0)
