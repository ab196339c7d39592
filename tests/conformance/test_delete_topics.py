"""DeleteTopics (20) on the wire: per-topic errors, what a deleted topic answers afterwards,
its committed offsets gone, and the name reusable from offset 0 (docs/protocol.md §4, §8)."""

from __future__ import annotations

from typing import Any

from .wire import (
    EVENTS_TOPIC,
    OFFSETS_TOPIC,
    Api,
    Err,
    WireConn,
    answer,
    assert_shape,
    create_topic,
    fetch_body,
    fetch_one,
    produce,
    values_batch,
)


async def _delete(conn: WireConn, *names: str) -> dict[str, Any]:
    body = await conn.call(Api.DELETE_TOPICS, {"topic_names": list(names),
                                               "timeout_ms": 30_000})
    assert body["error_code"] == Err.NONE, body
    assert_shape(Api.DELETE_TOPICS, body)
    return body


def _results(body: dict[str, Any]) -> list[tuple[str, int, str | None]]:
    return [(r["name"], r["error_code"], r.get("error_message")) for r in body["responses"]]


async def _commit(conn: WireConn, group: str, topic: str, offsets: dict[int, int]) -> None:
    body = await conn.call(Api.OFFSET_COMMIT, {"group_id": group, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "committed_offset": o}
                                       for p, o in offsets.items()]}]})
    codes = [p["error_code"] for t in body["topics"] for p in t["partitions"]]
    assert codes == [Err.NONE] * len(offsets), body


async def _committed(conn: WireConn, group: str) -> dict[tuple[str, int], int]:
    body = await conn.call(Api.OFFSET_FETCH, {"group_id": group, "topics": None})
    return {(t["name"], p["partition_index"]): p["committed_offset"]
            for t in body["topics"] for p in t["partitions"]}


async def test_delete_topics_answers_per_topic_in_request_order(conn: WireConn) -> None:
    await create_topic(conn, "dt-a", 2)
    await create_topic(conn, "dt-b")
    body = await _delete(conn, "dt-a", "dt-missing", OFFSETS_TOPIC, "dt-b", EVENTS_TOPIC,
                         "dt-b")
    assert _results(body) == [
        ("dt-a", Err.NONE, None),
        ("dt-missing", Err.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic 'dt-missing'"),
        (OFFSETS_TOPIC, Err.INVALID_TOPIC_EXCEPTION,
         "__consumer_offsets is internal: the broker's own topic, it cannot be deleted"),
        ("dt-b", Err.INVALID_REQUEST, "topic 'dt-b' named more than once"),
        (EVENTS_TOPIC, Err.INVALID_TOPIC_EXCEPTION,
         "__group_events is internal: the broker's own topic, it cannot be deleted"),
        ("dt-b", Err.INVALID_REQUEST, "topic 'dt-b' named more than once"),
    ]
    md = await conn.call(Api.METADATA, {"topics": None})
    assert {t["name"] for t in md["topics"]} == {"dt-b", OFFSETS_TOPIC, EVENTS_TOPIC}
    # deleted once, unknown from then on; an empty request is a valid no-op
    assert _results(await _delete(conn, "dt-a"))[0][1] == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert (await _delete(conn))["responses"] == []


async def test_timeout_ms_is_optional_and_topic_names_required(conn: WireConn) -> None:
    await create_topic(conn, "dt-opt")
    body = await conn.call(Api.DELETE_TOPICS, {"topic_names": ["dt-opt"]})
    assert _results(body) == [("dt-opt", Err.NONE, None)]
    bad = await conn.call(Api.DELETE_TOPICS, {"timeout_ms": 5})
    assert bad["error_code"] == Err.INVALID_REQUEST
    assert "topic_names" in bad["error_message"]


async def test_a_deleted_topic_is_unknown_to_every_api(conn: WireConn) -> None:
    await create_topic(conn, "dt-gone", 2)
    await produce(conn, "dt-gone", 1, values_batch(b"x", b"y"))
    await _delete(conn, "dt-gone")
    unknown = Err.UNKNOWN_TOPIC_OR_PARTITION
    md = await conn.call(Api.METADATA, {"topics": [{"name": "dt-gone"}],
                                        "allow_auto_topic_creation": False})
    assert md["topics"][0]["error_code"] == unknown
    produced = await conn.call(Api.PRODUCE, {"topic_data": [{"name": "dt-gone",
        "partition_data": [{"index": 1, "records": values_batch(b"z")}]}]})
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == unknown
    assert (await fetch_one(conn, "dt-gone", 1, 0))["error_code"] == unknown
    listed = await conn.call(Api.LIST_OFFSETS, {"topics": [{"name": "dt-gone", "partitions": [
        {"partition_index": 1, "timestamp": -1}]}]})
    assert listed["topics"][0]["partitions"][0]["error_code"] == unknown
    committed = await conn.call(Api.OFFSET_COMMIT, {"group_id": "dt-g", "topics": [
        {"name": "dt-gone", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    assert committed["topics"][0]["partitions"][0]["error_code"] == unknown
    grow = await conn.call(Api.CREATE_PARTITIONS, {"topics": [{"name": "dt-gone",
                                                               "count": 3}]})
    assert grow["results"][0]["error_code"] == unknown


async def test_a_parked_fetch_on_it_is_answered_at_once(conn: WireConn,
                                                        connect: Any) -> None:
    await create_topic(conn, "dt-parked")
    other = await connect("admin")
    parked = conn.send(Api.FETCH, fetch_body("dt-parked", 0, 0, max_wait_ms=60_000))
    # requests take effect in arrival order: once this is answered, the fetch is parked
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE
    assert not parked.done()
    await _delete(other, "dt-parked")
    body = await answer(parked)  # bounded well below the 60 s the fetch asked to wait
    assert body["responses"][0]["partitions"][0]["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


async def test_committed_offsets_for_it_are_removed(conn: WireConn) -> None:
    await create_topic(conn, "dt-off", 2)
    await create_topic(conn, "dt-keep")
    await _commit(conn, "dt-g1", "dt-off", {0: 5, 1: 7})
    await _commit(conn, "dt-g1", "dt-keep", {0: 3})
    await _commit(conn, "dt-g2", "dt-off", {1: 2})
    await _delete(conn, "dt-off")
    assert await _committed(conn, "dt-g1") == {("dt-keep", 0): 3}
    assert await _committed(conn, "dt-g2") == {}
    # asked by name, as a consumer of the recreated topic would: none (-1)
    body = await conn.call(Api.OFFSET_FETCH, {"group_id": "dt-g1", "topics": [
        {"name": "dt-off", "partition_indexes": [0, 1]}]})
    assert [p["committed_offset"] for p in body["topics"][0]["partitions"]] == [-1, -1]


async def test_the_name_can_be_created_again_from_offset_zero(conn: WireConn) -> None:
    await create_topic(conn, "dt-again", 1)
    for _ in range(3):
        await produce(conn, "dt-again", 0, values_batch(b"old"))
    await _commit(conn, "dt-ag", "dt-again", {0: 3})
    await _delete(conn, "dt-again")
    await create_topic(conn, "dt-again", 2)
    md = await conn.call(Api.METADATA, {"topics": [{"name": "dt-again"}]})
    assert len(md["topics"][0]["partitions"]) == 2
    part = await fetch_one(conn, "dt-again", 0, 0)
    assert (part["high_watermark"], part["log_start_offset"], part["records"]) == (0, 0, b"")
    assert (await produce(conn, "dt-again", 0, values_batch(b"new")))["base_offset"] == 0
    assert await _committed(conn, "dt-ag") == {}
