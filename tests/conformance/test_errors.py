"""§8 error codes for the situations docs/protocol.md (and Kafka's rules it follows) name."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Connect, StartBroker
from .wire import (
    Api,
    Err,
    Member,
    WireConn,
    answer,
    assert_present_fields_typed,
    assignment,
    create_topic,
    describe,
    stable_single,
    until_group,
)


def _codes(body: dict[str, Any]) -> list[int]:
    return [p["error_code"] for t in body["topics"] for p in t["partitions"]]


async def _completing(conn: WireConn, connect: Connect, group: str, topic: str
                      ) -> tuple[Member, Member]:
    """Two members at generation 2, joined but not yet synced: CompletingRebalance."""
    await create_topic(conn, topic)
    a = await stable_single(conn, group, topic, [0])
    b = Member(await connect("b"), group, [topic])
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    return a, b


async def test_offset_commit_with_generation_to_missing_group(conn: WireConn) -> None:
    await create_topic(conn, "oc", 2)
    body = await conn.call(Api.OFFSET_COMMIT, {
        "group_id": "never-made", "generation_id": 0, "member_id": "m", "topics": [
            {"name": "oc", "partitions": [{"partition_index": 0, "committed_offset": 1},
                                          {"partition_index": 1, "committed_offset": 1}]}]})
    assert _codes(body) == [Err.ILLEGAL_GENERATION, Err.ILLEGAL_GENERATION]
    assert (await describe(conn, "never-made"))["group_state"] == "Dead"


async def test_offset_commit_without_generation_creates_a_simple_group(conn: WireConn
                                                                       ) -> None:
    await create_topic(conn, "simple")
    body = await conn.call(Api.OFFSET_COMMIT, {"group_id": "simple-g", "generation_id": -1,
                                               "topics": [{"name": "simple", "partitions": [
        {"partition_index": 0, "committed_offset": 3, "committed_metadata": "m"}]}]})
    assert _codes(body) == [Err.NONE]
    group = await describe(conn, "simple-g")
    assert (group["group_state"], group["protocol_type"], group["members"]) == ("Empty", "", [])
    assert (group["generation_id"], group["leader_id"], group["protocol_data"]) == (0, None, "")
    fetched = await conn.call(Api.OFFSET_FETCH, {"group_id": "simple-g", "topics": None})
    assert [(t["name"], p["committed_offset"], p["metadata"])
            for t in fetched["topics"] for p in t["partitions"]] == [("simple", 3, "m")]


async def test_heartbeat_in_completing_rebalance_is_none(conn: WireConn,
                                                         connect: Connect) -> None:
    a, b = await _completing(conn, connect, "cr-group", "cr")
    assert (await describe(conn, "cr-group"))["group_state"] == "CompletingRebalance"
    assert (await a.heartbeat())["error_code"] == Err.NONE
    assert (await b.heartbeat())["error_code"] == Err.NONE
    # ... while commits wait for the assignment (Kafka: REBALANCE_IN_PROGRESS).
    assert _codes(await a.commit("cr", {0: 1})) == [Err.REBALANCE_IN_PROGRESS]


async def test_group_api_errors(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "ge")
    a = await stable_single(conn, "ge-group", "ge", [0])

    def hb(**changes: Any) -> dict[str, Any]:
        return {"group_id": "ge-group", "generation_id": a.generation_id,
                "member_id": a.member_id, **changes}

    cases = [
        (Api.HEARTBEAT, hb(group_id="missing-group"), Err.UNKNOWN_MEMBER_ID),
        (Api.HEARTBEAT, hb(member_id="stranger"), Err.UNKNOWN_MEMBER_ID),
        (Api.HEARTBEAT, hb(generation_id=a.generation_id + 1), Err.ILLEGAL_GENERATION),
        (Api.HEARTBEAT, hb(group_id=""), Err.INVALID_GROUP_ID),
        (Api.HEARTBEAT, hb(group_instance_id="not-mapped"), Err.UNKNOWN_MEMBER_ID),
        (Api.SYNC_GROUP, hb(generation_id=5), Err.ILLEGAL_GENERATION),
        (Api.SYNC_GROUP, hb(protocol_name="roundrobin"), Err.INCONSISTENT_GROUP_PROTOCOL),
        (Api.SYNC_GROUP, hb(protocol_type="connect"), Err.INCONSISTENT_GROUP_PROTOCOL),
        (Api.SYNC_GROUP, hb(group_id="missing-group"), Err.UNKNOWN_MEMBER_ID),
        (Api.SYNC_GROUP, hb(group_id=""), Err.INVALID_GROUP_ID),
        (Api.LEAVE_GROUP, {"group_id": "", "members": [{"member_id": "x"}]},
         Err.INVALID_GROUP_ID),
    ]
    for api_key, body, code in cases:
        answer_ = await conn.call(api_key, body)
        assert answer_["error_code"] == code, (api_key, body, answer_)
        assert_present_fields_typed(api_key, answer_)
    synced = await conn.call(Api.SYNC_GROUP, hb(protocol_name="range", protocol_type="consumer"))
    assert synced["error_code"] == Err.NONE
    assert synced["assignment"] == assignment([("ge", [0])])


async def test_sync_and_heartbeat_while_preparing_rebalance(conn: WireConn,
                                                            connect: Connect) -> None:
    await create_topic(conn, "pr")
    a = await stable_single(conn, "pr-group", "pr", [0])
    b = Member(await connect("b"), "pr-group", ["pr"])
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    assert (await a.sync())["error_code"] == Err.REBALANCE_IN_PROGRESS
    # Not a NONE answer, so a long-poll heartbeat is not held (§7.3).
    held = await answer(a.send_heartbeat(wait_ms=60_000), timeout=2)
    assert held["error_code"] == Err.REBALANCE_IN_PROGRESS
    # Commits are still accepted with the old generation (eager revocation relies on it).
    assert _codes(await a.commit("pr", {0: 4})) == [Err.NONE]
    await a.join()
    assert (await answer(b_join))["error_code"] == Err.NONE


async def test_join_group_errors(start_broker: StartBroker, connect: Connect) -> None:
    broker = await start_broker(group_max_session_timeout_ms=60_000)
    conn = await connect(target=broker)
    await create_topic(conn, "je")
    for timeout in (9, 60_001):
        m = Member(conn, "je-group", ["je"], member_id="", session_timeout_ms=timeout)
        body = await m.join_once()
        assert body["error_code"] == Err.INVALID_SESSION_TIMEOUT, (timeout, body)
        assert body.get("member_id", "") == ""
        assert body.get("generation_id", -1) == -1
    known = Member(conn, "je-group", ["je"], member_id="keep-me", session_timeout_ms=5)
    body = await known.join_once()
    assert body["error_code"] == Err.INVALID_SESSION_TIMEOUT
    assert body.get("member_id") == "keep-me"

    body = await Member(conn, "", ["je"]).join_once()
    assert body["error_code"] == Err.INVALID_GROUP_ID

    first = await stable_single(conn, "je-group", "je", [0])
    other = await connect("other", target=broker)
    variants: list[dict[str, Any]] = [{"protocol_type": "connect"}, {"protocol": "roundrobin"}]
    for kwargs in variants:
        for member_id in ("", first.member_id):
            m = Member(other, "je-group", ["je"], member_id=member_id, **kwargs)
            body = await m.join_once()
            assert body["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL, (kwargs, body)
            assert body.get("member_id", member_id) == member_id
    assert (await first.heartbeat())["error_code"] == Err.NONE


async def test_group_max_size(start_broker: StartBroker, connect: Connect) -> None:
    broker = await start_broker(group_max_size=1)
    conn = await connect(target=broker)
    await create_topic(conn, "gms")
    first = await stable_single(conn, "gms-group", "gms", [0])
    second = Member(await connect("other", target=broker), "gms-group", ["gms"])
    body = await second.join_once()
    if body["error_code"] == Err.MEMBER_ID_REQUIRED:
        body = await second.join_once()
    assert body["error_code"] == Err.GROUP_MAX_SIZE_REACHED
    assert body.get("member_id", "") == ""
    assert (await first.heartbeat())["error_code"] == Err.NONE


async def test_delete_groups_errors(conn: WireConn) -> None:
    await create_topic(conn, "dg")
    await stable_single(conn, "dg-busy", "dg", [0])
    await conn.call(Api.OFFSET_COMMIT, {"group_id": "dg-idle", "topics": [
        {"name": "dg", "partitions": [{"partition_index": 0, "committed_offset": 9}]}]})
    body = await conn.call(Api.DELETE_GROUPS, {"groups_names": ["dg-busy", "dg-none",
                                                                "dg-idle"]})
    assert body["error_code"] == Err.NONE
    assert [(r["group_id"], r["error_code"]) for r in body["results"]] == [
        ("dg-busy", Err.NON_EMPTY_GROUP), ("dg-none", Err.GROUP_ID_NOT_FOUND),
        ("dg-idle", Err.NONE)]
    # the message says why, for a person: the group's state and members, or that it is unknown
    assert [r.get("error_message") for r in body["results"]] == [
        "group 'dg-busy' is Stable with 1 member(s): only an Empty group can be deleted "
        "(stop its consumers first)", "group 'dg-none' does not exist", None]
    assert (await describe(conn, "dg-idle"))["group_state"] == "Dead"
    fetched = await conn.call(Api.OFFSET_FETCH, {"group_id": "dg-idle", "topics": [
        {"name": "dg", "partition_indexes": [0]}]})
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1
    again = await conn.call(Api.DELETE_GROUPS, {"groups_names": ["dg-idle"]})
    assert again["results"][0]["error_code"] == Err.GROUP_ID_NOT_FOUND


async def test_offset_commit_partition_errors(conn: WireConn) -> None:
    await create_topic(conn, "ocp", 1)
    body = await conn.call(Api.OFFSET_COMMIT, {"group_id": "ocp-g", "topics": [
        {"name": "ocp", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": "m" * 4097}]},
        {"name": "ocp-missing", "partitions": [
            {"partition_index": 0, "committed_offset": 1}]}]})
    assert _codes(body) == [Err.OFFSET_METADATA_TOO_LARGE, Err.UNKNOWN_TOPIC_OR_PARTITION]
    body = await conn.call(Api.OFFSET_COMMIT, {"group_id": "ocp-g", "topics": [
        {"name": "ocp", "partitions": [
            {"partition_index": 0, "committed_offset": 2, "committed_metadata": "m" * 4096},
            {"partition_index": 5, "committed_offset": 2}]}]})
    assert _codes(body) == [Err.NONE, Err.UNKNOWN_TOPIC_OR_PARTITION]


async def test_offset_commit_member_checks(conn: WireConn) -> None:
    await create_topic(conn, "ocm")
    a = await stable_single(conn, "ocm-group", "ocm", [0])
    a.generation_id += 1
    assert _codes(await a.commit("ocm", {0: 1})) == [Err.ILLEGAL_GENERATION]
    a.generation_id -= 1
    stranger = Member(conn, "ocm-group", ["ocm"], member_id="who", generation_id=1)
    assert _codes(await stranger.commit("ocm", {0: 1})) == [Err.UNKNOWN_MEMBER_ID]
    anonymous = Member(conn, "ocm-group", ["ocm"])  # generation -1, no member id
    assert _codes(await anonymous.commit("ocm", {0: 1})) == [Err.UNKNOWN_MEMBER_ID]


async def test_leave_group_errors(conn: WireConn) -> None:
    body = await conn.call(Api.LEAVE_GROUP, {"group_id": "leave-none", "members": [
        {"member_id": "a"}, {"member_id": "", "group_instance_id": "i"}]})
    assert body["error_code"] == Err.NONE
    assert [(m["member_id"], m["group_instance_id"], m["error_code"])
            for m in body["members"]] == [("a", None, Err.UNKNOWN_MEMBER_ID),
                                          ("", "i", Err.UNKNOWN_MEMBER_ID)]
    await create_topic(conn, "lv")
    a = await stable_single(conn, "leave-some", "lv", [0])
    body = await conn.call(Api.LEAVE_GROUP, {"group_id": "leave-some", "members": [
        {"member_id": "nobody"}, {"member_id": a.member_id, "reason": "bye"}]})
    assert [m["error_code"] for m in body["members"]] == [Err.UNKNOWN_MEMBER_ID, Err.NONE]
    group = await describe(conn, "leave-some")
    assert (group["group_state"], group["generation_id"]) == ("Empty", 2)


async def test_static_leave_by_instance_id(conn: WireConn) -> None:
    await create_topic(conn, "slv")
    await stable_single(conn, "slv-group", "slv", [0], instance_id="inst-z")
    body = await conn.call(Api.LEAVE_GROUP, {"group_id": "slv-group", "members": [
        {"member_id": "", "group_instance_id": "inst-z"}]})
    assert body["members"][0]["error_code"] == Err.NONE
    await until_group(conn, "slv-group", lambda g: g["members"] == [])


async def test_list_groups_states_filter_is_case_insensitive(conn: WireConn) -> None:
    await create_topic(conn, "lg")
    await stable_single(conn, "lg-stable", "lg", [0])
    await conn.call(Api.OFFSET_COMMIT, {"group_id": "lg-empty", "topics": [
        {"name": "lg", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})

    async def names(states: list[str]) -> set[str]:
        body = await conn.call(Api.LIST_GROUPS, {"states_filter": states})
        return {g["group_id"] for g in body["groups"]}

    listed = await conn.call(Api.LIST_GROUPS, {})
    kinds = {g["group_id"]: (g["protocol_type"], g["group_state"]) for g in listed["groups"]}
    assert kinds == {"lg-stable": ("consumer", "Stable"), "lg-empty": ("", "Empty")}
    assert await names(["stable"]) == {"lg-stable"}
    assert await names(["EMPTY"]) == {"lg-empty"}
    assert await names(["Stable", "empty"]) == {"lg-stable", "lg-empty"}
    assert await names([]) == {"lg-stable", "lg-empty"}


BAD_NAMES = ["", ".", "..", "a" * 250, "has space", "slash/y", "uml\u00e4ut", "__reserved",
             "__consumer_offsets_2"]
GOOD_NAMES = ["a" * 249, "A.b_c-D9", "...", "_single", "x"]


async def test_topic_name_rules(conn: WireConn) -> None:
    body = await conn.call(Api.CREATE_TOPICS, {"topics": [
        {"name": n, "num_partitions": 1} for n in BAD_NAMES + GOOD_NAMES]})
    codes = {t["name"]: t["error_code"] for t in body["topics"]}
    assert codes == {**{n: Err.INVALID_TOPIC_EXCEPTION for n in BAD_NAMES},
                     **{n: Err.NONE for n in GOOD_NAMES}}


@pytest.mark.parametrize(("entry", "code"), [
    ({"name": "ct-x", "num_partitions": 1}, Err.TOPIC_ALREADY_EXISTS),
    ({"name": "ct-zero", "num_partitions": 0}, Err.INVALID_PARTITIONS),
    ({"name": "ct-neg", "num_partitions": -2}, Err.INVALID_PARTITIONS),
    ({"name": "ct-rf", "num_partitions": 1, "replication_factor": 3},
     Err.INVALID_REPLICATION_FACTOR),
    ({"name": "ct-rf0", "num_partitions": 1, "replication_factor": 0},
     Err.INVALID_REPLICATION_FACTOR),
])
async def test_create_topics_errors(conn: WireConn, entry: dict[str, Any], code: int) -> None:
    await create_topic(conn, "ct-x")
    body = await conn.call(Api.CREATE_TOPICS, {"topics": [entry]})
    assert body["topics"][0]["error_code"] == code
    assert body["topics"][0]["name"] == entry["name"]


async def test_create_partitions_errors(conn: WireConn) -> None:
    await create_topic(conn, "cp", 2)
    body = await conn.call(Api.CREATE_PARTITIONS, {"topics": [
        {"name": "cp", "count": 2}, {"name": "cp-missing", "count": 3}]})
    assert [(r["name"], r["error_code"]) for r in body["results"]] == [
        ("cp", Err.INVALID_PARTITIONS), ("cp-missing", Err.UNKNOWN_TOPIC_OR_PARTITION)]
    body = await conn.call(Api.CREATE_PARTITIONS, {"topics": [{"name": "cp", "count": 1}]})
    assert body["results"][0]["error_code"] == Err.INVALID_PARTITIONS


async def test_metadata_unknown_topic_and_auto_creation(start_broker: StartBroker,
                                                        connect: Connect) -> None:
    plain = await connect(target=await start_broker())
    body = await plain.call(Api.METADATA, {"topics": [{"name": "nope"}]})
    assert [(t["name"], t["error_code"]) for t in body["topics"]] == [
        ("nope", Err.UNKNOWN_TOPIC_OR_PARTITION)]
    auto = await connect(target=await start_broker(auto_create_topics=True, num_partitions=2))
    body = await auto.call(Api.METADATA, {"topics": [{"name": "made"}],
                                          "allow_auto_topic_creation": False})
    assert body["topics"][0]["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    body = await auto.call(Api.METADATA, {"topics": [{"name": "made"}]})
    assert body["topics"][0]["error_code"] == Err.NONE
    assert len(body["topics"][0]["partitions"]) == 2


async def test_offset_fetch_for_unknown_group_is_not_an_error(conn: WireConn) -> None:
    body = await conn.call(Api.OFFSET_FETCH, {"group_id": "no-offsets", "topics": [
        {"name": "whatever", "partition_indexes": [0, 3]}]})
    assert body["error_code"] == Err.NONE
    assert [(p["partition_index"], p["committed_offset"], p["metadata"], p["error_code"])
            for p in body["topics"][0]["partitions"]] == [(0, -1, "", 0), (3, -1, "", 0)]
    body = await conn.call(Api.OFFSET_FETCH, {"group_id": "no-offsets", "topics": None})
    assert (body["error_code"], body["topics"]) == (Err.NONE, [])
