"""§4 OffsetDelete: a group's committed offsets forgotten, as Kafka's OffsetDelete does;
refused for an unknown group and for a topic the group's members subscribe to."""

from __future__ import annotations

from typing import Any

from .wire import Api, Err, WireConn, assert_shape, create_topic, stable_single


def _codes(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(t["name"], p["partition_index"], p["error_code"])
            for t in body["topics"] for p in t["partitions"]]


async def _commit(conn: WireConn, group: str, topic: str, offsets: dict[int, int]) -> None:
    body = await conn.call(Api.OFFSET_COMMIT, {
        "group_id": group, "generation_id": -1, "member_id": "", "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "committed_offset": o}
                                           for p, o in offsets.items()]}]})
    assert {code for _, _, code in _codes(body)} == {Err.NONE}, body


async def _committed(conn: WireConn, group: str, topic: str) -> dict[int, int]:
    body = await conn.call(Api.OFFSET_FETCH, {"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0, 1]}]})
    return {p["partition_index"]: p["committed_offset"]
            for t in body["topics"] for p in t["partitions"]}


async def test_an_empty_groups_offsets_are_forgotten(conn: WireConn) -> None:
    await create_topic(conn, "od-a", 2)
    await _commit(conn, "od-simple", "od-a", {0: 5, 1: 7})
    body = await conn.call(Api.OFFSET_DELETE, {"group_id": "od-simple", "topics": [
        {"name": "od-a", "partitions": [{"partition_index": 0}, {"partition_index": 9}]}]})
    assert_shape(Api.OFFSET_DELETE, body)
    assert body["error_code"] == Err.NONE
    assert _codes(body) == [("od-a", 0, Err.NONE),
                            ("od-a", 9, Err.UNKNOWN_TOPIC_OR_PARTITION)]
    assert await _committed(conn, "od-simple", "od-a") == {0: -1, 1: 7}


async def test_an_unknown_group_is_refused_at_the_top(conn: WireConn) -> None:
    body = await conn.call(Api.OFFSET_DELETE, {"group_id": "od-nobody", "topics": [
        {"name": "od-a", "partitions": [{"partition_index": 0}]}]})
    assert body["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert body.get("topics", []) == []  # §2: a refusal leaves out fields at their default


async def test_a_topic_the_members_subscribe_to_keeps_its_offsets(conn: WireConn) -> None:
    await create_topic(conn, "od-b", 2)
    await stable_single(conn, "od-live", "od-b", [0, 1])
    await _commit(conn, "od-live-simple", "od-b", {0: 1})  # another group, untouched
    body = await conn.call(Api.OFFSET_DELETE, {"group_id": "od-live", "topics": [
        {"name": "od-b", "partitions": [{"partition_index": 0}]}]})
    assert body["error_code"] == Err.NONE
    assert _codes(body) == [("od-b", 0, Err.GROUP_SUBSCRIBED_TO_TOPIC)]
