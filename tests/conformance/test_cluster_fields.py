"""§4: what single-broker mode answers in the cluster-mode fields (node 0, the controller,
sole replica and ISR of every partition, leader epoch 0), and OffsetsForLeaderEpoch."""

from __future__ import annotations

from typing import Any

import pytest

from .wire import (
    Api,
    Err,
    WireConn,
    assert_shape,
    create_topic,
    fetch_body,
    produce,
    values_batch,
)


async def test_metadata_names_node_0_controller_replica_and_isr(conn: WireConn) -> None:
    await create_topic(conn, "cf-meta", 2)
    body = await conn.call(Api.METADATA, {"topics": [{"name": "cf-meta"}]})
    assert_shape(Api.METADATA, body)
    assert body["controller_id"] == 0
    assert [b["rack"] for b in body["brokers"]] == [None]
    [topic] = body["topics"]
    assert [(p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"],
             p["isr_nodes"], p["offline_replicas"]) for p in topic["partitions"]] == [
        (0, 0, 0, [0], [0], []), (1, 0, 0, [0], [0], [])]


async def _produce_acks(conn: WireConn, topic: str, acks: Any) -> dict[str, Any]:
    return await conn.call(Api.PRODUCE, {"acks": acks, "timeout_ms": 1, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": values_batch(b"v")},
                                           {"index": 1, "records": values_batch(b"w")}]}]})


@pytest.mark.parametrize("acks", [-1, 1])
async def test_produce_acks_all_and_leader_both_store(conn: WireConn, acks: int) -> None:
    await create_topic(conn, "cf-acks", 2)
    body = await _produce_acks(conn, "cf-acks", acks)
    assert body["error_code"] == Err.NONE
    entries = body["responses"][0]["partition_responses"]
    assert [(e["error_code"], e["base_offset"]) for e in entries] == [(0, 0), (0, 0)]


@pytest.mark.parametrize("acks", [0, 2, -2])
async def test_produce_other_acks_refused_on_every_partition(conn: WireConn,
                                                             acks: int) -> None:
    await create_topic(conn, "cf-bad-acks", 2)
    body = await _produce_acks(conn, "cf-bad-acks", acks)
    assert body["error_code"] == Err.NONE
    entries = body["responses"][0]["partition_responses"]
    assert [(e["index"], e["error_code"]) for e in entries] == [
        (0, Err.INVALID_REQUIRED_ACKS), (1, Err.INVALID_REQUIRED_ACKS)]
    assert entries[0]["error_message"] == f"acks: -1 or 1, got {acks}"
    listed = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": "cf-bad-acks",
                                                            "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]})
    assert listed["topics"][0]["partitions"][0]["offset"] == 0  # nothing was stored


async def test_fetch_leader_epoch_check(conn: WireConn) -> None:
    await create_topic(conn, "cf-epoch")
    await produce(conn, "cf-epoch", 0, values_batch(b"v"))

    async def fetch_with(epoch: int | None) -> dict[str, Any]:
        body = fetch_body("cf-epoch", 0, 0)
        if epoch is not None:
            body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
        answer = await conn.call(Api.FETCH, body)
        assert answer["error_code"] == Err.NONE
        return answer["responses"][0]["partitions"][0]  # type: ignore[no-any-return]

    for epoch in (None, -1, 0):
        part = await fetch_with(epoch)
        assert part["error_code"] == Err.NONE and part["records"]
    newer = await fetch_with(1)
    assert newer["error_code"] == Err.UNKNOWN_LEADER_EPOCH and not newer.get("records")
    older = await fetch_with(-2)
    assert older["error_code"] == Err.FENCED_LEADER_EPOCH
    # an unknown partition is named as such, whatever the epoch
    body = fetch_body("cf-missing", 0, 0)
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = 5
    answer = await conn.call(Api.FETCH, body)
    assert (answer["responses"][0]["partitions"][0]["error_code"]
            == Err.UNKNOWN_TOPIC_OR_PARTITION)


async def test_a_replica_fetch_needs_cluster_mode(conn: WireConn) -> None:
    await create_topic(conn, "cf-replica")
    body = await conn.call(Api.FETCH, fetch_body("cf-replica", 0, 0, replica_id=1))
    assert body["error_code"] == Err.INVALID_REQUEST
    assert body["error_message"] == "replica_id: replica fetches need cluster mode"
    consumer = await conn.call(Api.FETCH, fetch_body("cf-replica", 0, 0, replica_id=-1))
    assert consumer["error_code"] == Err.NONE


async def _epochs(conn: WireConn, partitions: list[dict[str, Any]], topic: str = "cf-ofle",
                  **top: Any) -> dict[str, Any]:
    return await conn.call(Api.OFFSET_FOR_LEADER_EPOCH, {
        **top, "topics": [{"topic": topic, "partitions": partitions}]})


async def test_offsets_for_leader_epoch_from_the_single_epoch(conn: WireConn) -> None:
    await create_topic(conn, "cf-ofle", 2)
    await produce(conn, "cf-ofle", 0, values_batch(b"a", b"b", b"c"))
    body = await _epochs(conn, [
        {"partition": 0, "leader_epoch": 0},
        {"partition": 0, "leader_epoch": 1},                    # newer than known
        {"partition": 0, "leader_epoch": -1},                   # no epoch
        {"partition": 1, "leader_epoch": 0, "current_leader_epoch": 0},
        {"partition": 0, "leader_epoch": 0, "current_leader_epoch": 3},
        {"partition": 0, "leader_epoch": 0, "current_leader_epoch": -4},
        {"partition": 9, "leader_epoch": 0},
    ])
    assert_shape(Api.OFFSET_FOR_LEADER_EPOCH, body)
    [topic] = body["topics"]
    assert topic["topic"] == "cf-ofle"
    assert [(p["partition"], p["error_code"], p.get("leader_epoch"), p.get("end_offset"))
            for p in topic["partitions"]] == [
        (0, Err.NONE, 0, 3),
        (0, Err.NONE, -1, -1),
        (0, Err.NONE, -1, -1),
        (1, Err.NONE, 0, 0),
        (0, Err.UNKNOWN_LEADER_EPOCH, -1, -1),
        (0, Err.FENCED_LEADER_EPOCH, -1, -1),
        (9, Err.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]
    unknown = await _epochs(conn, [{"partition": 0, "leader_epoch": 0}], topic="cf-none")
    assert unknown["topics"][0]["partitions"][0]["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


async def test_offsets_for_leader_epoch_refuses_replicas_and_bad_bodies(conn: WireConn
                                                                        ) -> None:
    await create_topic(conn, "cf-ofle")
    body = await _epochs(conn, [{"partition": 0, "leader_epoch": 0}], replica_id=2)
    assert body["error_code"] == Err.INVALID_REQUEST
    assert body["error_message"] == "replica_id: replica requests need cluster mode"
    body = await _epochs(conn, [{"partition": 0}])
    assert body["error_code"] == Err.INVALID_REQUEST
    assert "topics[0].partitions[0].leader_epoch" in body["error_message"]
