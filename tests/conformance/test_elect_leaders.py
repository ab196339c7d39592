"""§4 ElectLeaders against a single broker: node 0 is every partition's preferred
replica and leads it, so nothing is ever elected."""

from __future__ import annotations

from .wire import Api, Err, WireConn, assert_shape, create_topic


def _results(body: dict) -> list[tuple[str, int, int]]:  # type: ignore[type-arg]
    return [(t["topic"], p["partition_id"], p["error_code"])
            for t in body["replica_election_results"] for p in t["partition_result"]]


async def test_named_partitions_need_no_election_and_unknown_ones_are_named(
        conn: WireConn) -> None:
    await create_topic(conn, "el-a", 2)
    body = await conn.call(Api.ELECT_LEADERS, {"election_type": 0, "timeout_ms": 1000,
                                               "topic_partitions": [
        {"topic": "el-a", "partitions": [1, 0, 2]},
        {"topic": "el-missing", "partitions": [0]}]})
    assert_shape(Api.ELECT_LEADERS, body)
    assert body["error_code"] == Err.NONE
    assert _results(body) == [
        ("el-a", 1, Err.ELECTION_NOT_NEEDED), ("el-a", 0, Err.ELECTION_NOT_NEEDED),
        ("el-a", 2, Err.UNKNOWN_TOPIC_OR_PARTITION),
        ("el-missing", 0, Err.UNKNOWN_TOPIC_OR_PARTITION)]
    first = body["replica_election_results"][0]["partition_result"][0]
    assert first["error_message"] == "el-a-1 is already led by its preferred replica 0"


async def test_nil_means_every_partition_stored(conn: WireConn) -> None:
    await create_topic(conn, "el-b", 2)
    body = await conn.call(Api.ELECT_LEADERS, {})
    assert_shape(Api.ELECT_LEADERS, body)
    results = _results(body)
    assert ("el-b", 0, Err.ELECTION_NOT_NEEDED) in results
    assert ("el-b", 1, Err.ELECTION_NOT_NEEDED) in results
    assert ("__consumer_offsets", 0, Err.ELECTION_NOT_NEEDED) in results  # internal too
    assert {code for _, _, code in results} == {Err.ELECTION_NOT_NEEDED}
    assert results == sorted(results)


async def test_an_unclean_election_is_refused(conn: WireConn) -> None:
    await create_topic(conn, "el-c")
    for election_type in (1, 2, -1):
        body = await conn.call(Api.ELECT_LEADERS, {"election_type": election_type,
                                                   "topic_partitions": [
            {"topic": "el-c", "partitions": [0]}]})
        assert body["error_code"] == Err.INVALID_REQUEST
        assert body["error_message"].startswith(
            f"election_type: only 0 (preferred) is supported, got {election_type}")
        assert not body.get("replica_election_results")
