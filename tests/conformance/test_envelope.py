"""§2 envelope rules and §3 versions: unknown keys, defaults, errors that keep the connection."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from .conftest import Connect
from .wire import (
    ALL_API_KEYS,
    Api,
    Err,
    Member,
    WireConn,
    answer,
    assert_present_fields_typed,
    assert_shape,
    assignment,
    create_topic,
    fetch_one,
    split_batches,
    sprinkle,
    subscription,
    values_batch,
    with_offset,
)


async def test_unknown_keys_are_ignored_at_every_level(conn: WireConn) -> None:
    await create_topic(conn, "extra-keys")
    data = values_batch(b"v")
    body = await conn.call(Api.PRODUCE, {
        "future_field": [1, 2, {"nested": b"x"}],
        "topic_data": [{"name": "extra-keys", "surprise": None, "partition_data": [
            {"index": 0, "records": data, "checksum_v2": "ignored"}]}],
    })
    assert body["error_code"] == Err.NONE
    entry = body["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Err.NONE and entry["base_offset"] == 0
    body = await conn.call(Api.FETCH, {
        "max_wait_ms": 0, "isolation_level": 1, "session_id": 7,
        "topics": [{"topic": "extra-keys", "topic_id": b"\x00" * 16, "partitions": [
            {"partition": 0, "fetch_offset": 0, "last_fetched_epoch": 3}]}],
    })
    assert body["error_code"] == Err.NONE
    assert body["responses"][0]["partitions"][0]["records"] == with_offset(data, 0)
    member = Member(conn, "extra-keys-group", ["extra-keys"])
    join = member.join_body()
    join["protocols"][0]["weight"] = 3
    join["rack"] = "r1"
    first = member.take_join(await conn.call(Api.JOIN_GROUP, join))
    assert first["error_code"] == Err.MEMBER_ID_REQUIRED
    join["member_id"] = member.member_id
    assert (await conn.call(Api.JOIN_GROUP, join))["error_code"] == Err.NONE


async def test_absent_and_nil_optional_fields_mean_the_default(conn: WireConn) -> None:
    await create_topic(conn, "defaults-a")
    absent = await conn.call(Api.METADATA, {})
    nil = await conn.call(Api.METADATA, {"topics": None, "allow_auto_topic_creation": None})
    names = {t["name"] for t in absent["topics"]}
    assert {"defaults-a", "__consumer_offsets", "__group_events"} <= names
    assert {t["name"] for t in nil["topics"]} == names
    none = await conn.call(Api.METADATA, {"topics": []})
    assert none["error_code"] == Err.NONE and none["topics"] == []

    created = await conn.call(Api.CREATE_TOPICS, {"topics": [
        {"name": "defaults-b"}, {"name": "defaults-c", "num_partitions": None,
                                 "replication_factor": None}]})
    for entry in created["topics"]:
        assert entry["error_code"] == Err.NONE, entry
        assert entry["num_partitions"] == 1  # the broker's --num-partitions default
        assert entry["replication_factor"] == 1

    await conn.call(Api.PRODUCE, {"topic_data": [{"name": "defaults-a", "partition_data": [
        {"index": 0, "records": values_batch(b"x")}]}]})
    for fetch in (
        {"topics": [{"topic": "defaults-a", "partitions": [{"partition": 0,
                                                             "fetch_offset": 0}]}]},
        {"max_wait_ms": None, "min_bytes": None, "max_bytes": None, "group": None,
         "topics": [{"topic": "defaults-a", "partitions": [
             {"partition": 0, "fetch_offset": 0, "partition_max_bytes": None}]}]},
    ):
        body = await conn.call(Api.FETCH, fetch)
        assert body["error_code"] == Err.NONE, body
        assert len(split_batches(body["responses"][0]["partitions"][0]["records"])) == 1

    commit = await conn.call(Api.OFFSET_COMMIT, {"group_id": "defaults-g", "topics": [
        {"name": "defaults-a", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
    assert commit["topics"][0]["partitions"][0]["error_code"] == Err.NONE
    commit = await conn.call(Api.OFFSET_COMMIT, {
        "group_id": "defaults-g", "generation_id": None, "member_id": None,
        "group_instance_id": None, "topics": [{"name": "defaults-a", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]}]})
    assert commit["topics"][0]["partitions"][0]["error_code"] == Err.NONE
    for offsets in ({"group_id": "defaults-g"}, {"group_id": "defaults-g", "topics": None}):
        fetched = await conn.call(Api.OFFSET_FETCH, offsets)
        assert_shape(Api.OFFSET_FETCH, fetched)
        [topic] = fetched["topics"]
        assert topic["name"] == "defaults-a"
        assert topic["partitions"][0]["committed_offset"] == 1
        assert topic["partitions"][0]["metadata"] == ""

    all_groups = await conn.call(Api.LIST_GROUPS, {})
    nil_filter = await conn.call(Api.LIST_GROUPS, {"states_filter": None})
    assert "defaults-g" in {g["group_id"] for g in all_groups["groups"]}
    assert all_groups["groups"] == nil_filter["groups"]


async def test_unknown_api_key_or_version_is_unsupported_with_same_cid(conn: WireConn
                                                                       ) -> None:
    for api_key, version, cid in ((99, 0, 501), (4, 0, 502), (Api.METADATA, 1, 503),
                                  (Api.JOIN_GROUP, 5, 504), (Api.FETCH, -1, 505)):
        body = await conn.call(api_key, {}, version=version, cid=cid)
        assert body["error_code"] == Err.UNSUPPORTED_VERSION, (api_key, version, body)
    assert conn.arrivals == [501, 502, 503, 504, 505]
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE


async def test_version_is_checked_before_the_body(conn: WireConn) -> None:
    body = await conn.call(Api.METADATA, "not even a map", version=9)
    assert body["error_code"] == Err.UNSUPPORTED_VERSION
    body = await conn.call(77, ["nor", "this"])
    assert body["error_code"] == Err.UNSUPPORTED_VERSION


async def test_api_versions_with_unknown_version_is_answered_as_v0(conn: WireConn) -> None:
    body = await conn.call(Api.API_VERSIONS, {"client_software_name": "future"},
                           version=3, cid=77)
    assert body["error_code"] == Err.UNSUPPORTED_VERSION
    assert_shape(Api.API_VERSIONS, body)
    assert {e["api_key"] for e in body["api_keys"]} == set(ALL_API_KEYS)


INVALID: list[tuple[str, int, Any, str]] = [
    ("body not a map", Api.METADATA, "not a map", ""),
    ("body nil", Api.HEARTBEAT, None, ""),
    ("missing field", Api.HEARTBEAT, {"group_id": "g", "member_id": "m"}, "generation_id"),
    ("str for long", Api.FETCH, {"topics": [{"topic": "t", "partitions": [
        {"partition": 0, "fetch_offset": "zero"}]}]}, "topics[0].partitions[0].fetch_offset"),
    ("third entry", Api.FETCH, {"topics": [{"topic": "t", "partitions": [
        {"partition": 0, "fetch_offset": 0}, {"partition": 1, "fetch_offset": 0},
        {"partition": 2}]}]}, "topics[0].partitions[2].fetch_offset"),
    ("int out of int32 range", Api.FETCH, {"topics": [{"topic": "t", "partitions": [
        {"partition": 2**31, "fetch_offset": 0}]}]}, "topics[0].partitions[0].partition"),
    ("long out of int64 range", Api.LIST_OFFSETS, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": 2**63}]}]}, "topics[0].partitions[0].timestamp"),
    ("bool for int", Api.HEARTBEAT, {"group_id": "g", "member_id": "m",
                                     "generation_id": True}, "generation_id"),
    ("float for int", Api.HEARTBEAT, {"group_id": "g", "member_id": "m",
                                      "generation_id": 1.0}, "generation_id"),
    ("bin for str", Api.CREATE_TOPICS, {"topics": [{"name": b"t"}]}, "topics[0].name"),
    ("str for bin", Api.PRODUCE, {"topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": "text"}]}]}, "topic_data[0].partition_data[0].records"),
    ("map for array", Api.DESCRIBE_GROUPS, {"groups": {"g": 1}}, "groups"),
    ("int for bool", Api.METADATA, {"topics": None, "allow_auto_topic_creation": 1},
     "allow_auto_topic_creation"),
    ("nil for required str", Api.FIND_COORDINATOR, {"key": None}, "key"),
    ("uint64 for long", Api.FETCH, {"topics": [{"topic": "t", "partitions": [
        {"partition": 0, "fetch_offset": 2**64 - 1}]}]}, "topics[0].partitions[0].fetch_offset"),
    ("missing nested group field", Api.FETCH, {"group": {"group_id": "g", "generation_id": 1},
                                               "topics": []}, "group.member_id"),
    ("str for bin in join", Api.JOIN_GROUP, {
        "group_id": "g", "member_id": "", "session_timeout_ms": 1000,
        "rebalance_timeout_ms": 1000, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": "text"}]}, "protocols[0].metadata"),
    ("int item in str array", Api.DESCRIBE_GROUPS, {"groups": ["ok", 1]}, "groups[1]"),
    ("nil item in int array", Api.OFFSET_FETCH, {"group_id": "g", "topics": [
        {"name": "t", "partition_indexes": [0, None]}]}, "topics[0].partition_indexes[1]"),
]


@pytest.mark.parametrize(("api_key", "body", "path"), [i[1:] for i in INVALID],
                         ids=[i[0] for i in INVALID])
async def test_invalid_body_names_the_path_and_keeps_the_connection(
        conn: WireConn, api_key: int, body: Any, path: str) -> None:
    answer = await conn.call(api_key, body, cid=4242)
    assert conn.arrivals[-1] == 4242
    assert answer["error_code"] == Err.INVALID_REQUEST, answer
    assert isinstance(answer.get("error_message"), str), answer
    assert path in answer["error_message"], answer["error_message"]
    assert_present_fields_typed(api_key, answer)
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE


async def test_requests_take_effect_in_arrival_order(conn: WireConn) -> None:
    """§2.4: a pipelined Produce sees the topic created just before it."""
    created = conn.send(Api.CREATE_TOPICS, {"topics": [{"name": "ordered",
                                                        "num_partitions": 1}]})
    produced = conn.send(Api.PRODUCE, {"topic_data": [{"name": "ordered", "partition_data": [
        {"index": 0, "records": values_batch(b"first")}]}]})
    assert (await created)["topics"][0]["error_code"] == Err.NONE
    entry = (await produced)["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Err.NONE and entry["base_offset"] == 0


async def test_parked_join_group_is_overtaken(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "ooo")
    first = Member(conn, "ooo-group", ["ooo"])
    await first.join()
    assert (await first.sync({first.member_id: b""}))["error_code"] == Err.NONE
    other = await connect("late")
    second = Member(other, "ooo-group", ["ooo"])
    await second.first_join()
    parked = second.send_join()  # waits for `first` to re-join
    join_cid = other.last_cid
    quick = other.send(Api.METADATA, {"topics": []})
    quick_cid = other.last_cid
    assert (await quick)["error_code"] == Err.NONE
    assert not parked.done()
    heartbeat = await first.heartbeat()
    assert heartbeat["error_code"] == Err.REBALANCE_IN_PROGRESS
    rejoined = first.send_join()
    for fut in (parked, rejoined):
        body = await fut
        assert body["error_code"] == Err.NONE, body
    assert other.arrivals.index(quick_cid) < other.arrivals.index(join_cid)


async def test_long_poll_fetch_is_overtaken_and_woken_by_produce(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "ooo-fetch")
    parked = conn.send(Api.FETCH, {"max_wait_ms": 60_000, "min_bytes": 1, "topics": [
        {"topic": "ooo-fetch", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
    fetch_cid = conn.last_cid
    quick = await conn.call(Api.API_VERSIONS, {})
    assert quick["error_code"] == Err.NONE
    assert not parked.done()
    producer = await connect("producer")
    data = values_batch(b"wake up")
    await producer.call(Api.PRODUCE, {"topic_data": [{"name": "ooo-fetch", "partition_data": [
        {"index": 0, "records": data}]}]})
    body = await parked
    assert body["error_code"] == Err.NONE
    part = body["responses"][0]["partitions"][0]
    assert part["records"] == with_offset(data, 0)
    assert part["high_watermark"] == 1
    assert conn.arrivals[-1] == fetch_cid
    assert (await fetch_one(conn, "ooo-fetch", 0, 1))["records"] == b""


async def test_unknown_keys_everywhere_through_a_whole_flow(conn: WireConn) -> None:
    """Every request map at every depth carries an unknown key; nothing changes."""
    conn.transform = sprinkle
    await create_topic(conn, "sprinkled", 2)
    data = values_batch(b"s")
    entry = (await conn.call(Api.PRODUCE, {"topic_data": [{"name": "sprinkled",
                                                           "partition_data": [
        {"index": 1, "records": data}]}]}))["responses"][0]["partition_responses"][0]
    assert (entry["error_code"], entry["base_offset"]) == (Err.NONE, 0)
    member = Member(conn, "sprinkled-group", ["sprinkled"])
    await member.join("sprinkled")
    synced = await member.sync({member.member_id: assignment([("sprinkled", [0, 1])])})
    assert synced["error_code"] == Err.NONE
    assert (await member.heartbeat(poll_age_ms=1, wait_ms=0))["error_code"] == Err.NONE
    fetched = await member.fetch("sprinkled", [0, 1])
    assert fetched["error_code"] == Err.NONE
    parts = fetched["responses"][0]["partitions"]
    assert [(p["error_code"], p["records"]) for p in parts] == [
        (Err.NONE, b""), (Err.NONE, with_offset(data, 0))]
    committed = await member.commit("sprinkled", {1: 1})
    assert committed["topics"][0]["partitions"][0]["error_code"] == Err.NONE
    offsets = await conn.call(Api.OFFSET_FETCH, {"group_id": "sprinkled-group", "topics": [
        {"name": "sprinkled", "partition_indexes": [1]}]})
    assert offsets["topics"][0]["partitions"][0]["committed_offset"] == 1
    for api_key, body in (
        (Api.LIST_OFFSETS, {"topics": [{"name": "sprinkled", "partitions": [
            {"partition_index": 1, "timestamp": -1}]}]}),
        (Api.METADATA, {"topics": [{"name": "sprinkled"}]}),
        (Api.FIND_COORDINATOR, {"key": "sprinkled-group"}),
        (Api.DESCRIBE_GROUPS, {"groups": ["sprinkled-group"]}),
        (Api.LIST_GROUPS, {"states_filter": ["Stable"]}),
        (Api.API_VERSIONS, {"client_software_name": "x"}),
        (Api.CREATE_PARTITIONS, {"topics": [{"name": "sprinkled", "count": 3}]}),
    ):
        answer_ = await conn.call(api_key, body)
        assert answer_["error_code"] == Err.NONE, (api_key, answer_)
        assert_shape(api_key, answer_)
        for entry in answer_.get("topics", []) + answer_.get("results", []):
            assert entry.get("error_code", Err.NONE) == Err.NONE, (api_key, entry)
    left = await member.leave("done")
    assert left["members"][0]["error_code"] == Err.NONE
    deleted = await conn.call(Api.DELETE_GROUPS, {"groups_names": ["sprinkled-group"]})
    assert deleted["results"][0]["error_code"] == Err.NONE


async def test_nil_for_every_optional_field(conn: WireConn) -> None:
    await create_topic(conn, "nils")
    body = await conn.call(Api.API_VERSIONS, {"client_software_name": None,
                                              "client_software_version": None})
    assert body["error_code"] == Err.NONE
    body = await conn.call(Api.FIND_COORDINATOR, {"key": "nils-group", "key_type": None})
    assert body["error_code"] == Err.NONE
    join = {"group_id": "nils-group", "member_id": "", "group_instance_id": None,
            "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": subscription(["nils"])}]}
    first = await conn.call(Api.JOIN_GROUP, join)
    assert first["error_code"] == Err.MEMBER_ID_REQUIRED
    member_id = first["member_id"]
    joined = await conn.call(Api.JOIN_GROUP, {**join, "member_id": member_id})
    assert joined["error_code"] == Err.NONE
    sync = {"group_id": "nils-group", "generation_id": joined["generation_id"],
            "member_id": member_id, "group_instance_id": None, "protocol_type": None,
            "protocol_name": None, "assignments": None}
    synced = await conn.call(Api.SYNC_GROUP, sync)
    assert (synced["error_code"], synced["assignment"]) == (Err.NONE, b"")
    heartbeat = await conn.call(Api.HEARTBEAT, {
        "group_id": "nils-group", "generation_id": joined["generation_id"],
        "member_id": member_id, "group_instance_id": None, "poll_age_ms": None,
        "wait_ms": None})
    assert heartbeat["error_code"] == Err.NONE
    fetched = await conn.call(Api.FETCH, {"max_wait_ms": 0, "group": {
        "group_id": "nils-group", "member_id": member_id,
        "generation_id": joined["generation_id"], "group_instance_id": None},
        "topics": []})
    assert fetched["error_code"] == Err.NONE
    left = await conn.call(Api.LEAVE_GROUP, {"group_id": "nils-group", "members": [
        {"member_id": member_id, "group_instance_id": None, "reason": None}]})
    assert left["members"][0]["error_code"] == Err.NONE
    listed = await conn.call(Api.LIST_GROUPS, {"states_filter": None})
    assert "nils-group" in {g["group_id"] for g in listed["groups"]}


async def test_parked_sync_group_and_heartbeat_are_overtaken(conn: WireConn,
                                                             connect: Connect) -> None:
    await create_topic(conn, "ooo-sync")
    a = Member(conn, "ooo-sync-group", ["ooo-sync"], session_timeout_ms=60_000)
    await a.join()
    assert (await a.sync({a.member_id: b""}))["error_code"] == Err.NONE
    other = await connect("follower")
    b = Member(other, "ooo-sync-group", ["ooo-sync"], session_timeout_ms=60_000)
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    assert a.leader == a.member_id
    parked_sync = b.send_sync()  # a follower waits for the leader's assignment
    sync_cid = other.last_cid
    quick = await other.call(Api.API_VERSIONS, {})
    quick_cid = other.last_cid
    assert quick["error_code"] == Err.NONE and not parked_sync.done()
    assert (await a.sync({a.member_id: b"", b.member_id: b"\x01"}))["error_code"] == 0
    assert (await answer(parked_sync))["assignment"] == b"\x01"
    assert other.arrivals.index(quick_cid) < other.arrivals.index(sync_cid)

    held = b.send_heartbeat(wait_ms=50_000)
    held_cid = other.last_cid
    quick = await other.call(Api.METADATA, {"topics": []})
    quick_cid = other.last_cid
    assert quick["error_code"] == Err.NONE
    assert (await a.heartbeat())["error_code"] == Err.NONE
    a_join = a.send_join()  # the leader re-joins: PreparingRebalance releases b's heartbeat
    assert (await answer(held))["error_code"] == Err.REBALANCE_IN_PROGRESS
    assert other.arrivals.index(quick_cid) < other.arrivals.index(held_cid)
    await b.join()
    assert (await answer(a_join))["error_code"] == Err.NONE


ODD_VALUES = {
    "int key in body": {1: "x", "topics": []},
    "bin key in body": {b"topics": "x", "topics": []},
    "int key in an entry": {"topics": [{"name": "t", 7: [1]}]},
    "nil key in body": {None: 0, "topics": []},
    "ext value under an unknown key": {"x": msgpack.ExtType(5, b"ab"), "topics": []},
    "timestamp ext under an unknown key": {"x": msgpack.Timestamp(1, 0), "topics": []},
    "float under an unknown key": {"x": 1.5, "topics": []},
}


@pytest.mark.parametrize("body", ODD_VALUES.values(), ids=ODD_VALUES.keys())
async def test_odd_keys_and_values_are_answered_not_a_closed_connection(conn: WireConn,
                                                                        body: Any) -> None:
    """§2 closes a connection only for undecodable frames or a bad envelope head.

    These frames are one valid msgpack value with a good envelope head. A non-str key
    or a value under an unknown key is ignored (rule 1), or at worst makes the body
    mistyped (INVALID_REQUEST); either way the request is answered.
    """
    answer_ = await conn.call(Api.METADATA, body, cid=31)
    assert answer_["error_code"] in (Err.NONE, Err.INVALID_REQUEST), answer_
    assert conn.arrivals == [31]
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE


@pytest.mark.parametrize("value", [msgpack.ExtType(5, b"ab"), msgpack.Timestamp(1, 0), 1.5],
                         ids=["ext", "timestamp ext", "float"])
async def test_ext_or_float_in_a_field_is_invalid_request(conn: WireConn, value: Any) -> None:
    """`No floats or exts`: a mistyped field, answered with INVALID_REQUEST."""
    answer_ = await conn.call(Api.FIND_COORDINATOR, {"key": "g", "key_type": value}, cid=32)
    assert answer_["error_code"] == Err.INVALID_REQUEST, answer_
    assert "key_type" in answer_.get("error_message", "")
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE
