"""§7.4 rebalance history in DescribeGroups and §9 ``__group_events`` records."""

from __future__ import annotations

from typing import Any

from .conftest import Connect
from .wire import (
    EVENT_SCHEMA,
    EVENTS_TOPIC,
    Api,
    Err,
    Member,
    WireConn,
    answer,
    assignment,
    create_topic,
    describe,
    read_events,
    shape_problems,
    stable_single,
    subscription,
    until_group,
)

TOKENS = {"member-joined", "member-rejoined", "member-left", "session-expired",
          "poll-interval-expired", "connection-lost", "sync-timeout", "static-member-replaced"}


async def _two_member_rebalance(conn: WireConn, connect: Connect) -> tuple[Member, Member]:
    """a owns orders 0-2 alone, then b joins and gets 1-2."""
    await create_topic(conn, "orders", 3)
    a = await stable_single(conn, "hist", "orders", [0, 1, 2])
    b = Member(await connect("b"), "hist", ["orders"])
    await b.first_join()
    b_join = b.send_join("scale out")
    running = await until_group(conn, "hist", lambda g: g["group_state"] != "Stable")
    current = running["rebalances"][-1]
    assert (current["generation_id"], current["completed_ms"], current["duration_ms"]) == (
        None, None, None)
    assert (current["reason"], current["detail"], current["trigger_member_id"]) == (
        "member-joined", "scale out", b.member_id)
    await a.join()
    b.take_join(await answer(b_join))
    b_sync = b.send_sync()
    assert (await a.sync({a.member_id: assignment([("orders", [0])]),
                          b.member_id: assignment([("orders", [1, 2])])}))["error_code"] == 0
    assert (await answer(b_sync))["error_code"] == Err.NONE
    return a, b


async def test_rebalance_history_entries(conn: WireConn, connect: Connect) -> None:
    a, b = await _two_member_rebalance(conn, connect)
    group = await describe(conn, "hist")
    first, second = group["rebalances"]
    for entry in (first, second):
        assert entry["reason"] in TOKENS
        assert entry["started_ms"] > 1_600_000_000_000  # Unix epoch milliseconds
        assert entry["started_ms"] <= entry["completed_ms"]
        assert entry["duration_ms"] == entry["completed_ms"] - entry["started_ms"]
    assert (first["generation_id"], first["reason"], first["trigger_member_id"],
            first["moved_partitions"]) == (1, "member-joined", a.member_id,
                                           [["orders", [0, 1, 2]]])
    assert (second["generation_id"], second["reason"], second["detail"],
            second["trigger_member_id"], second["moved_partitions"]) == (
        2, "member-joined", "scale out", b.member_id, [["orders", [1, 2]]])
    assert first["completed_ms"] <= second["started_ms"]

    long_reason = "r" * 300
    assert (await b.leave(long_reason))["members"][0]["error_code"] == Err.NONE
    group = await describe(conn, "hist")
    third = group["rebalances"][-1]
    assert (third["reason"], third["detail"], third["trigger_member_id"]) == (
        "member-left", "r" * 255, b.member_id)


async def test_leader_rejoin_is_member_rejoined_and_history_keeps_last_20(conn: WireConn
                                                                          ) -> None:
    await create_topic(conn, "again")
    member = await stable_single(conn, "again-group", "again", [0])
    for _ in range(22):
        await member.join("metadata changed")
        synced = await member.sync({member.member_id: assignment([("again", [0])])})
        assert synced["error_code"] == Err.NONE
    group = await describe(conn, "again-group")
    history = group["rebalances"]
    assert [r["generation_id"] for r in history] == list(range(4, 24))
    assert {r["reason"] for r in history} == {"member-rejoined"}
    assert {r["trigger_member_id"] for r in history} == {member.member_id}
    assert all(r["moved_partitions"] == [] for r in history)
    assert all(r["detail"] == "metadata changed" for r in history)


async def test_moved_partitions_empty_outside_consumer_groups(conn: WireConn) -> None:
    member = Member(conn, "plain", ["x"], protocol_type="connect", metadata=b"\x01\x02")
    await member.join()
    await member.sync({member.member_id: b"\x03"})
    group = await describe(conn, "plain")
    assert [(r["reason"], r["moved_partitions"]) for r in group["rebalances"]] == [
        ("member-joined", [])]


async def test_group_events_records_have_exactly_the_spec_keys(conn: WireConn,
                                                               connect: Connect) -> None:
    a, b = await _two_member_rebalance(conn, connect)
    await b.leave("bye")
    await a.leave("bye too")
    deleted = await conn.call(Api.DELETE_GROUPS, {"groups_names": ["hist"]})
    assert deleted["results"][0]["error_code"] == Err.NONE

    def done(es: list[dict[str, Any]]) -> bool:
        return any(e["type"] == "group_deleted" for e in es)

    events = [e for e in await read_events(conn, done) if e["group_id"] == "hist"]
    for event in events:
        key, timestamp = event.pop("_key"), event.pop("_timestamp")
        assert set(event) == set(EVENT_SCHEMA), event
        assert not shape_problems(event, EVENT_SCHEMA, "event"), event
        assert key == b"hist"
        assert timestamp == event["ts_ms"]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_type.setdefault(event["type"], []).append(event)
    assert [e["member_id"] for e in by_type["member_joined"]] == [a.member_id, b.member_id]
    assert [e["reason"] for e in by_type["member_joined"]][1] == "scale out"
    assert all(e["partitions"] == [] for e in by_type["member_joined"])
    started = by_type["rebalance_started"]
    assert [e["reason"] for e in started][:2] == ["member-joined", "member-joined"]
    assert all(e["partitions"] == [] and e["reason"] in TOKENS for e in started)
    completed = by_type["rebalance_completed"]
    assert [(e["generation_id"], e["partitions"]) for e in completed][:2] == [
        (1, [["orders", [0, 1, 2]]]), (2, [["orders", [1, 2]]])]
    assert all(isinstance(e["duration_ms"], int) for e in completed)
    assert [(e["member_id"], e["reason"], e["partitions"]) for e in by_type["member_left"]] == [
        (b.member_id, "bye", [["orders", [1, 2]]]), (a.member_id, "bye too", [["orders", [0]]])]
    assert [e["generation_id"] for e in by_type["member_left"]] == [2, 2]
    assert [(e["reason"], e["generation_id"]) for e in by_type["group_emptied"]] == [(None, 3)]
    assert [(e["reason"], e["partitions"]) for e in by_type["group_deleted"]] == [
        ("delete-groups", [])]
    assert [e["type"] for e in events][-1] == "group_deleted"


async def test_events_topic_has_one_partition_of_valid_batches(conn: WireConn) -> None:
    await create_topic(conn, "ev")
    await stable_single(conn, "ev-group", "ev", [0])
    await read_events(conn, lambda es: any(e["type"] == "rebalance_completed" for e in es))
    meta = await conn.call(Api.METADATA, {"topics": [{"name": EVENTS_TOPIC}]})
    [topic] = meta["topics"]
    assert (topic["is_internal"], len(topic["partitions"])) == (True, 1)


def _of(events: list[dict[str, Any]], kind: str, group: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind and e["group_id"] == group]


async def test_session_expiry_token_and_event(conn: WireConn) -> None:
    await create_topic(conn, "sess")
    member = await stable_single(conn, "sess-group", "sess", [0], session_timeout_ms=100)
    events = await read_events(conn, lambda es: bool(_of(es, "member_expired", "sess-group")))
    [gone] = _of(events, "member_expired", "sess-group")
    assert (gone["member_id"], gone["reason"], gone["partitions"], gone["generation_id"]) == (
        member.member_id, "session-expired", [["sess", [0]]], 1)
    group = await until_group(conn, "sess-group", lambda g: g["group_state"] == "Empty")
    assert (group["rebalances"][-1]["reason"], group["rebalances"][-1]["trigger_member_id"]
            ) == ("session-expired", member.member_id)
    assert (await member.heartbeat())["error_code"] == Err.UNKNOWN_MEMBER_ID


async def test_sync_timeout_token_and_event(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "synct")
    a = await stable_single(conn, "synct-group", "synct", [0], rebalance_timeout_ms=300,
                            session_timeout_ms=60_000)
    b = Member(await connect("b"), "synct-group", ["synct"], rebalance_timeout_ms=300,
               session_timeout_ms=60_000)
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    assert (await a.sync({a.member_id: assignment([("synct", [0])])}))["error_code"] == 0
    # b never syncs: the pending-sync timer removes it after the rebalance timeout.
    events = await read_events(conn, lambda es: bool(_of(es, "member_expired",
                                                           "synct-group")))
    [gone] = _of(events, "member_expired", "synct-group")
    assert (gone["member_id"], gone["reason"]) == (b.member_id, "sync-timeout")
    group = await until_group(conn, "synct-group",
                              lambda g: g["rebalances"][-1]["reason"] == "sync-timeout")
    assert group["rebalances"][-1]["trigger_member_id"] == b.member_id
    assert {m["member_id"] for m in group["members"]} == {a.member_id}


async def test_rebalance_timeout_event(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "rbt")
    a = await stable_single(conn, "rbt-group", "rbt", [0], rebalance_timeout_ms=300,
                            session_timeout_ms=60_000)
    b = Member(await connect("b"), "rbt-group", ["rbt"], rebalance_timeout_ms=300,
               session_timeout_ms=60_000)
    await b.first_join()
    b_join = b.send_join()
    # a keeps heartbeating (REBALANCE_IN_PROGRESS) but never re-joins: removed when the
    # join phase ends at the rebalance timeout.
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    joined = await answer(b_join)
    assert (joined["error_code"], joined["leader"]) == (Err.NONE, b.member_id)
    events = await read_events(conn, lambda es: bool(_of(es, "member_expired", "rbt-group")))
    [gone] = _of(events, "member_expired", "rbt-group")
    assert (gone["member_id"], gone["reason"], gone["partitions"]) == (
        a.member_id, "rebalance-timeout", [["rbt", [0]]])


async def test_static_member_replaced_token(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "smr")
    old = await stable_single(conn, "smr-group", "smr", [0], instance_id="smr-i")
    new = Member(await connect("new"), "smr-group", ["smr"], instance_id="smr-i")
    body = {**new.join_body("restart"), "protocols": [
        {"name": "roundrobin", "metadata": subscription(["smr"])},
        {"name": "range", "metadata": subscription(["smr"])}]}
    joined = new.take_join(await new.conn.call(Api.JOIN_GROUP, body))
    assert (joined["error_code"], joined["protocol_name"], joined["generation_id"]) == (
        Err.NONE, "roundrobin", 2)
    group = await describe(conn, "smr-group")
    last = group["rebalances"][-1]
    assert (last["reason"], last["detail"], last["trigger_member_id"]) == (
        "static-member-replaced", "restart", new.member_id)
    assert (await old.heartbeat())["error_code"] == Err.FENCED_INSTANCE_ID
    # The owner of a static member is its instance id: same partitions, nothing moved.
    synced = await new.sync({new.member_id: assignment([("smr", [0])])})
    assert synced["error_code"] == Err.NONE
    last = (await describe(conn, "smr-group"))["rebalances"][-1]
    assert (last["generation_id"], last["moved_partitions"]) == (2, [])


async def test_join_reason_cut_to_255_in_history_and_events(conn: WireConn) -> None:
    await create_topic(conn, "cut")
    member = Member(conn, "cut-group", ["cut"])
    await member.join("j" * 1000)
    group = await describe(conn, "cut-group")
    assert group["rebalances"][0]["detail"] == "j" * 255
    events = await read_events(conn, lambda es: bool(_of(es, "member_joined", "cut-group")))
    assert [e["reason"] for e in _of(events, "member_joined", "cut-group")] == ["j" * 255]


async def test_completing_back_to_preparing_continues_one_rebalance(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "cont")
    a = await stable_single(conn, "cont-group", "cont", [0])
    b = Member(await connect("b"), "cont-group", ["cont"])
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    c = Member(await connect("c"), "cont-group", ["cont"])
    await c.first_join()
    c_join = c.send_join()
    await until_group(conn, "cont-group", lambda g: g["group_state"] == "PreparingRebalance")
    b_join = b.send_join()
    await a.join()
    for m, fut in ((b, b_join), (c, c_join)):
        m.take_join(await answer(fut))
    syncs = [b.send_sync(), c.send_sync()]
    assert (await a.sync({a.member_id: assignment([("cont", [0])])}))["error_code"] == 0
    for fut in syncs:
        assert (await answer(fut))["error_code"] == Err.NONE
    history = (await describe(conn, "cont-group"))["rebalances"]
    assert [(r["generation_id"], r["reason"], r["trigger_member_id"]) for r in history] == [
        (1, "member-joined", a.member_id), (3, "member-joined", b.member_id)]


async def test_moved_partitions_are_sorted(conn: WireConn) -> None:
    await create_topic(conn, "zeta", 3)
    await create_topic(conn, "alpha", 2)
    member = Member(conn, "sorted-group", ["zeta", "alpha"])
    await member.join()
    plan = assignment([("zeta", [2, 0]), ("alpha", [1])])
    assert (await member.sync({member.member_id: plan}))["error_code"] == Err.NONE
    [entry] = (await describe(conn, "sorted-group"))["rebalances"]
    assert entry["moved_partitions"] == [["alpha", [1]], ["zeta", [0, 2]]]
    events = await read_events(conn, lambda es: bool(_of(es, "rebalance_completed",
                                                           "sorted-group")))
    [done] = _of(events, "rebalance_completed", "sorted-group")
    assert done["partitions"] == [["alpha", [1]], ["zeta", [0, 2]]]


async def test_static_member_parked_in_join_gets_its_session_armed_on_disconnect(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "armed")
    a = await stable_single(conn, "armed-group", "armed", [0], session_timeout_ms=60_000,
                            rebalance_timeout_ms=60_000)
    s_conn = await connect("static")
    s = Member(s_conn, "armed-group", ["armed"], instance_id="arm-s", session_timeout_ms=300,
               rebalance_timeout_ms=60_000)
    s_join = s.send_join()
    await a.join()
    s.take_join(await answer(s_join))
    s_sync = s.send_sync()
    assert (await a.sync({a.member_id: assignment([("armed", [0])])}))["error_code"] == 0
    assert (await answer(s_sync))["error_code"] == Err.NONE
    # A newcomer starts a rebalance; s re-joins and is parked (no session timer runs)...
    c = Member(await connect("c"), "armed-group", ["armed"])
    await c.first_join()
    c_join = c.send_join()
    assert (await s.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    s.send_join()
    await until_group(conn, "armed-group", lambda g: len(g["members"]) == 3)
    # ... then its connection closes: its full session timeout is armed and runs out.
    await s_conn.close()
    events = await read_events(conn, lambda es: any(
        e["type"] == "member_expired" and e["member_id"] == s.member_id for e in es))
    [gone] = [e for e in events if e["type"] == "member_expired"
              and e["member_id"] == s.member_id]
    assert gone["reason"] == "session-expired"
    await a.join()
    assert (await answer(c_join))["error_code"] == Err.NONE


async def test_dynamic_member_parked_in_join_expires_after_grace(conn: WireConn,
                                                                 connect: Connect) -> None:
    await create_topic(conn, "grace")
    a = await stable_single(conn, "grace-group", "grace", [0], session_timeout_ms=60_000,
                            rebalance_timeout_ms=60_000)
    b_conn = await connect("b")
    b = Member(b_conn, "grace-group", ["grace"], session_timeout_ms=60_000)
    await b.first_join()
    b.send_join()
    await until_group(conn, "grace-group", lambda g: len(g["members"]) == 2)
    await b_conn.close()
    events = await read_events(conn, lambda es: any(
        e["type"] == "member_expired" and e["member_id"] == b.member_id for e in es))
    [gone] = [e for e in events if e["type"] == "member_expired"
              and e["member_id"] == b.member_id]
    assert gone["reason"] == "connection-lost"
    joined = await a.join()
    assert [m["member_id"] for m in joined["members"]] == [a.member_id]
