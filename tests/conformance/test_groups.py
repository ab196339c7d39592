"""§6, §7 and §10 through the wire: consumer bins, poll interval, fencing, heartbeat long poll."""

from __future__ import annotations

from .conftest import Connect, StartBroker
from .wire import (
    Api,
    ConnectionClosed,
    Err,
    Member,
    WireConn,
    answer,
    assert_shape,
    assignment,
    create_topic,
    describe,
    frame,
    pack,
    read_events,
    request_bytes,
    stable_single,
    subscription,
    until_group,
    values_batch,
)

# --------------------------------------------------------------------------- §10


async def test_worked_example(connect: Connect) -> None:
    conn = await connect("billing-1")
    await create_topic(conn, "orders", 3)
    sub = subscription(["orders"])
    assert len(sub) == 69
    join = {"group_id": "billing", "member_id": "", "session_timeout_ms": 45000,
            "rebalance_timeout_ms": 300000, "protocol_type": "consumer",
            "reason": "initial join", "protocols": [{"name": "range", "metadata": sub}]}
    raw = request_bytes(Api.JOIN_GROUP, join, cid=7, client_id="billing-1")
    assert raw[:19] == bytes.fromhex("000000ed950b0007a9") + b"billing-1" + b"\x87"

    first = await conn.call(Api.JOIN_GROUP, join, cid=7)
    assert conn.arrivals[-1] == 7
    assert first["error_code"] == Err.MEMBER_ID_REQUIRED
    member_id = first["member_id"]
    assert member_id.startswith("billing-1-") and len(member_id) > len("billing-1-")

    joined = await conn.call(Api.JOIN_GROUP, {**join, "member_id": member_id}, cid=8)
    assert_shape(Api.JOIN_GROUP, joined)
    assert {k: joined[k] for k in ("error_code", "generation_id", "protocol_type",
                                   "protocol_name", "leader", "skip_assignment",
                                   "member_id")} == {
        "error_code": 0, "generation_id": 1, "protocol_type": "consumer",
        "protocol_name": "range", "leader": member_id, "skip_assignment": False,
        "member_id": member_id}
    assert [(m["member_id"], m["group_instance_id"], m["metadata"])
            for m in joined["members"]] == [(member_id, None, sub)]

    asg = assignment([("orders", [0, 1, 2])])
    assert len(asg) == 45
    sync = {"group_id": "billing", "generation_id": 1, "member_id": member_id,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member_id, "assignment": asg}]}
    if len(member_id) == len("billing-1-0b6e2c1d"):
        raw = request_bytes(Api.SYNC_GROUP, sync, cid=9, client_id="billing-1")
        assert raw[:8] == bytes.fromhex("000000dc950e0009")
    synced = await conn.call(Api.SYNC_GROUP, sync, cid=9)
    assert_shape(Api.SYNC_GROUP, synced)
    assert (synced["error_code"], synced["protocol_type"], synced["protocol_name"],
            synced["assignment"]) == (0, "consumer", "range", asg)

    group = await describe(conn, "billing")
    assert (group["group_state"], group["protocol_type"], group["protocol_data"],
            group["generation_id"], group["leader_id"]) == (
        "Stable", "consumer", "range", 1, member_id)
    assert group["members"][0]["member_assignment"] == asg
    assert group["members"][0]["client_id"] == "billing-1"

    fetched = await conn.call(Api.FETCH, {"max_wait_ms": 0, "group": {
        "group_id": "billing", "member_id": member_id, "generation_id": 1}, "topics": [
        {"topic": "orders", "partitions": [{"partition": p, "fetch_offset": 0}
                                           for p in range(3)]}]})
    assert fetched["error_code"] == Err.NONE
    assert [p["error_code"] for p in fetched["responses"][0]["partitions"]] == [0, 0, 0]


async def test_member_id_required_only_for_dynamic_first_join(conn: WireConn) -> None:
    await create_topic(conn, "mir")
    dynamic = Member(conn, "mir-group", ["mir"])
    first = await dynamic.join_once()
    assert first["error_code"] == Err.MEMBER_ID_REQUIRED
    assert first["member_id"].startswith(conn.client_id + "-")
    static = Member(conn, "mir-static", ["mir"], instance_id="box-7")
    body = await static.join_once()
    assert body["error_code"] == Err.NONE, body
    assert body["member_id"].startswith("box-7-")
    assert body["members"][0]["group_instance_id"] == "box-7"


async def test_joining_a_missing_group_with_a_member_id(conn: WireConn) -> None:
    member = Member(conn, "no-such-group", ["t"], member_id="ghost-1")
    body = await member.join_once()
    assert body["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert body.get("member_id", "ghost-1") == "ghost-1"
    assert (await describe(conn, "no-such-group"))["group_state"] == "Dead"


# --------------------------------------------------------------------------- §7.1


async def test_poll_interval_expiry_removes_the_member(conn: WireConn) -> None:
    await create_topic(conn, "poll", 2)
    member = await stable_single(conn, "poll-group", "poll", [0, 1],
                                 rebalance_timeout_ms=1000)
    ok = await member.heartbeat(poll_age_ms=1000)
    assert ok["error_code"] == Err.NONE
    described = await describe(conn, "poll-group")
    assert described["members"][0]["poll_age_ms"] == 1000
    assert described["members"][0]["last_heartbeat_ms"] > 1_600_000_000_000

    expired = await member.heartbeat(poll_age_ms=1001)
    assert expired["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert expired.get("error_message") == "poll interval expired"
    assert (await member.heartbeat())["error_code"] == Err.UNKNOWN_MEMBER_ID
    group = await describe(conn, "poll-group")
    assert (group["group_state"], group["members"], group["generation_id"]) == ("Empty", [], 2)
    assert group["rebalances"][-1]["reason"] == "poll-interval-expired"
    assert group["rebalances"][-1]["trigger_member_id"] == member.member_id

    events = await read_events(conn, lambda es: any(
        e["type"] == "poll_interval_expired" for e in es))
    [event] = [e for e in events if e["type"] == "poll_interval_expired"]
    assert (event["group_id"], event["member_id"], event["reason"], event["partitions"]) == (
        "poll-group", member.member_id, "poll-interval-expired", [["poll", [0, 1]]])


async def test_poll_interval_expiry_applies_to_static_members(conn: WireConn) -> None:
    await create_topic(conn, "poll-s")
    member = await stable_single(conn, "poll-static", "poll-s", [0], instance_id="s-1",
                                 rebalance_timeout_ms=500)
    expired = await member.heartbeat(poll_age_ms=501)
    assert expired["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert expired.get("error_message") == "poll interval expired"
    assert (await describe(conn, "poll-static"))["members"] == []


# --------------------------------------------------------------------------- §7.2


async def test_fetch_with_group_context_is_fenced_by_ownership(conn: WireConn) -> None:
    await create_topic(conn, "fence", 3)
    await conn.call(Api.PRODUCE, {"topic_data": [{"name": "fence", "partition_data": [
        {"index": p, "records": values_batch(b"v")} for p in range(3)]}]})
    member = await stable_single(conn, "fence-group", "fence", [0, 2])
    body = await member.fetch("fence", [0, 1, 2])
    assert body["error_code"] == Err.NONE
    parts = body["responses"][0]["partitions"]
    assert [(p["partition_index"], p["error_code"]) for p in parts] == [
        (0, Err.NONE), (1, Err.PARTITION_NOT_OWNED), (2, Err.NONE)]
    assert parts[0]["records"] and parts[2]["records"]

    # generation_id is logged, not compared
    member.generation_id = 99
    stale = await member.fetch("fence", [0])
    assert stale["responses"][0]["partitions"][0]["error_code"] == Err.NONE
    member.generation_id = 1

    unknown = Member(conn, "fence-group", ["fence"], member_id="nobody", generation_id=1)
    body = await unknown.fetch("fence", [0])
    assert body["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert body.get("responses", []) == []
    missing = Member(conn, "no-group-here", ["fence"], member_id="x", generation_id=1)
    body = await missing.fetch("fence", [0])
    assert body["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert body.get("responses", []) == []


async def test_commit_outside_ownership_is_refused_per_partition(conn: WireConn) -> None:
    await create_topic(conn, "cfence", 2)
    member = await stable_single(conn, "cfence-group", "cfence", [0])
    body = await member.commit("cfence", {0: 10, 1: 20})
    assert [(p["partition_index"], p["error_code"])
            for p in body["topics"][0]["partitions"]] == [
        (0, Err.NONE), (1, Err.PARTITION_NOT_OWNED)]
    offsets = await conn.call(Api.OFFSET_FETCH, {"group_id": "cfence-group", "topics": [
        {"name": "cfence", "partition_indexes": [0, 1]}]})
    assert [(p["committed_offset"], p["metadata"])
            for p in offsets["topics"][0]["partitions"]] == [(10, ""), (-1, "")]
    events = await read_events(conn, lambda es: any(e["type"] == "commit_fenced" for e in es))
    [event] = [e for e in events if e["type"] == "commit_fenced"]
    assert (event["group_id"], event["member_id"], event["reason"], event["partitions"]) == (
        "cfence-group", member.member_id, None, [["cfence", [1]]])


async def test_fencing_needs_consumer_protocol_and_decodable_assignment(conn: WireConn
                                                                        ) -> None:
    await create_topic(conn, "loose", 2)
    other = Member(conn, "loose-connect", ["loose"], protocol_type="connect",
                   metadata=b"\x00opaque")
    await other.join()
    await other.sync({other.member_id: b"\x07not msgpack map"})
    opaque = Member(conn, "loose-opaque", ["loose"])
    await opaque.join()
    await opaque.sync({opaque.member_id: pack([1, 2, 3])})
    odd = []
    for i, bin_ in enumerate((pack({"user_data": None}),
                              pack({"assigned_partitions": [["loose", [0, "x"]]]}),
                              pack({"assigned_partitions": "loose"}),
                              b"\x81\xc1")):
        m = Member(conn, f"loose-odd-{i}", ["loose"])
        await m.join()
        await m.sync({m.member_id: bin_})
        odd.append((m, Err.NONE))
    empty = Member(conn, "loose-empty", ["loose"])
    await empty.join()
    await empty.sync({})  # the leader left itself out: empty assignment, owns nothing
    for member, code in ((other, Err.NONE), (opaque, Err.NONE),
                         (empty, Err.PARTITION_NOT_OWNED), *odd):
        body = await member.fetch("loose", [0, 1])
        assert body["error_code"] == Err.NONE, (member.group_id, body)
        assert [p["error_code"] for p in body["responses"][0]["partitions"]] == [code, code], (
            member.group_id)


async def test_no_ownership_fencing_setting_ignores_the_group(start_broker: StartBroker,
                                                              connect: Connect) -> None:
    broker = await start_broker(ownership_fencing=False)
    conn = await connect(target=broker)
    await create_topic(conn, "open", 2)
    member = await stable_single(conn, "open-group", "open", [0])
    body = await member.fetch("open", [0, 1])
    assert [p["error_code"] for p in body["responses"][0]["partitions"]] == [0, 0]
    member.member_id = "someone-else"
    assert (await member.fetch("open", [1]))["error_code"] == Err.NONE


async def test_fenced_instance_on_fetch_and_commit(conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "inst", 1)
    old = await stable_single(conn, "inst-group", "inst", [0], instance_id="i-1")
    other = await connect("replacement")
    new = Member(other, "inst-group", ["inst"], instance_id="i-1")
    body = await new.join_once()
    assert body["error_code"] == Err.NONE and body["member_id"] != old.member_id
    fetched = await old.fetch("inst", [0])
    assert fetched["error_code"] == Err.FENCED_INSTANCE_ID
    assert fetched.get("responses", []) == []
    committed = await old.commit("inst", {0: 1})
    assert committed["topics"][0]["partitions"][0]["error_code"] == Err.FENCED_INSTANCE_ID
    assert (await old.heartbeat())["error_code"] == Err.FENCED_INSTANCE_ID
    old.instance_id = None
    assert (await old.heartbeat())["error_code"] == Err.UNKNOWN_MEMBER_ID


async def test_releasing_partitions_stay_committable_until_reassigned(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "coop", 2)
    a = await stable_single(conn, "coop-group", "coop", [0, 1])
    b = Member(await connect("b"), "coop-group", ["coop"])
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    # Owned partitions survive the rebalance until the next install.
    during = await a.fetch("coop", [0, 1])
    assert [p["error_code"] for p in during["responses"][0]["partitions"]] == [0, 0]
    await a.join()
    b.take_join(await answer(b_join))
    assert a.generation_id == b.generation_id == 2
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    # Round 1: a keeps 0 and releases 1 (withheld from everyone).
    plan = {a.member_id: assignment([("coop", [0])]), b.member_id: assignment([])}
    follower_sync = follower.send_sync()
    assert (await leader.sync(plan))["error_code"] == Err.NONE
    assert (await answer(follower_sync))["error_code"] == Err.NONE
    body = await a.commit("coop", {0: 1, 1: 1})
    assert [p["error_code"] for p in body["topics"][0]["partitions"]] == [0, 0]
    body = await a.fetch("coop", [1])
    assert body["responses"][0]["partitions"][0]["error_code"] == Err.PARTITION_NOT_OWNED
    # Round 2: b gets 1; a may no longer commit it.
    a_join = a.send_join()
    await b.join()
    a.take_join(await answer(a_join))
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    plan = {a.member_id: assignment([("coop", [0])]), b.member_id: assignment([("coop", [1])])}
    follower_sync = follower.send_sync()
    assert (await leader.sync(plan))["error_code"] == Err.NONE
    assert (await answer(follower_sync))["error_code"] == Err.NONE
    body = await a.commit("coop", {1: 2})
    assert body["topics"][0]["partitions"][0]["error_code"] == Err.PARTITION_NOT_OWNED
    body = await b.commit("coop", {1: 2})
    assert body["topics"][0]["partitions"][0]["error_code"] == Err.NONE


# --------------------------------------------------------------------------- §7.3


async def test_heartbeat_long_poll_returns_rebalance_when_a_member_joins(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "hlp")
    a = await stable_single(conn, "hlp-group", "hlp", [0], session_timeout_ms=60_000)
    held = a.send_heartbeat(wait_ms=50_000)
    b = Member(await connect("b"), "hlp-group", ["hlp"])
    await b.first_join()
    b_join = b.send_join()
    body = await answer(held)
    assert body["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    assert (await answer(b_join))["error_code"] == Err.NONE


async def test_heartbeat_long_poll_released_by_the_next_heartbeat(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "hlp2")
    a = await stable_single(conn, "hlp2-group", "hlp2", [0], session_timeout_ms=60_000)
    held = a.send_heartbeat(wait_ms=50_000)
    second = Member(await connect("same-member"), "hlp2-group", ["hlp2"],
                    member_id=a.member_id, generation_id=a.generation_id)
    assert (await second.heartbeat())["error_code"] == Err.NONE
    assert (await answer(held))["error_code"] == Err.NONE


async def test_heartbeat_long_poll_ends_with_unknown_member_on_leave(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "hlp3")
    a = await stable_single(conn, "hlp3-group", "hlp3", [0], session_timeout_ms=60_000)
    held = a.send_heartbeat(wait_ms=50_000)
    remover = Member(await connect("admin"), "hlp3-group", ["hlp3"], member_id=a.member_id)
    assert (await remover.leave())["members"][0]["error_code"] == Err.NONE
    assert (await answer(held))["error_code"] == Err.UNKNOWN_MEMBER_ID


async def test_heartbeat_long_poll_ends_fenced_when_replaced(conn: WireConn,
                                                              connect: Connect) -> None:
    await create_topic(conn, "hlp4")
    a = await stable_single(conn, "hlp4-group", "hlp4", [0], instance_id="hlp4-i",
                            session_timeout_ms=60_000)
    held = a.send_heartbeat(wait_ms=50_000)
    new = Member(await connect("new"), "hlp4-group", ["hlp4"], instance_id="hlp4-i")
    assert (await new.join_once())["error_code"] == Err.NONE
    assert (await answer(held))["error_code"] == Err.FENCED_INSTANCE_ID


async def test_heartbeat_long_poll_checks_at_once_and_caps_the_hold(conn: WireConn) -> None:
    await create_topic(conn, "hlp5")
    a = await stable_single(conn, "hlp5-group", "hlp5", [0], session_timeout_ms=400)
    a.generation_id = 7
    body = await answer(a.send_heartbeat(wait_ms=60_000), timeout=2)
    assert body["error_code"] == Err.ILLEGAL_GENERATION
    a.generation_id = 1
    # Held at most session_timeout_ms // 2 = 200 ms, far below wait_ms.
    body = await answer(a.send_heartbeat(wait_ms=60_000), timeout=2)
    assert body["error_code"] == Err.NONE


# --------------------------------------------------------------------------- §7.4


async def test_connection_loss_expires_dynamic_members_after_grace(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "lost", 3)
    c_a, c_a2, c_b, c_s = [await connect(n) for n in ("a", "a2", "b", "s")]
    a = await stable_single(c_a, "lost-group", "lost", [0, 1, 2])
    b = Member(c_b, "lost-group", ["lost"])
    s = Member(c_s, "lost-group", ["lost"], instance_id="keeper", session_timeout_ms=60_000)
    await b.first_join()
    joins = [b.send_join(), s.send_join()]
    await until_group(conn, "lost-group", lambda g: len(g["members"]) == 3)
    await a.join()
    for m, fut in zip((b, s), joins, strict=True):
        m.take_join(await answer(fut))
    assert a.leader == a.member_id
    plan = {a.member_id: assignment([("lost", [0])]), b.member_id: assignment([("lost", [1])]),
            s.member_id: assignment([("lost", [2])])}
    syncs = [b.send_sync(), s.send_sync()]
    assert (await a.sync(plan))["error_code"] == Err.NONE
    for fut in syncs:
        assert (await answer(fut))["error_code"] == Err.NONE
    # a is also attached to a second connection through a Heartbeat.
    a2 = Member(c_a2, "lost-group", ["lost"], member_id=a.member_id,
                generation_id=a.generation_id)
    assert (await a2.heartbeat())["error_code"] == Err.NONE

    await c_a.close()
    await c_s.close()
    assert (await a2.heartbeat())["error_code"] == Err.NONE
    await c_b.close()

    def expired(es: list[dict[str, object]]) -> bool:
        return any(e["type"] == "member_expired" and e["member_id"] == b.member_id for e in es)

    events = await read_events(conn, expired)
    lost = [e for e in events if e["type"] == "connection_lost"
            and e["member_id"] != s.member_id]  # the spec is silent on static members
    assert [(e["member_id"], e["reason"], e["partitions"]) for e in lost] == [
        (b.member_id, None, [["lost", [1]]])]
    [gone] = [e for e in events if e["type"] == "member_expired"]
    assert (gone["member_id"], gone["reason"], gone["partitions"]) == (
        b.member_id, "connection-lost", [["lost", [1]]])
    group = await describe(conn, "lost-group")
    assert {m["member_id"] for m in group["members"]} == {a.member_id, s.member_id}
    assert group["group_state"] == "PreparingRebalance"
    assert group["rebalances"][-1]["reason"] == "connection-lost"
    assert group["rebalances"][-1]["trigger_member_id"] == b.member_id
    assert group["rebalances"][-1]["completed_ms"] is None


async def test_parked_requests_die_with_their_connection(conn: WireConn,
                                                         connect: Connect) -> None:
    await create_topic(conn, "dies")
    doomed = await connect("doomed")
    parked = doomed.send(Api.FETCH, {"max_wait_ms": 60_000, "topics": [
        {"topic": "dies", "partitions": [{"partition": 0, "fetch_offset": 0}]}]})
    doomed.write_raw(frame(b"\xc1"))  # garbage: the broker closes this connection
    assert await doomed.closed_by_broker()
    assert isinstance(parked.exception(), ConnectionClosed)
    # Waking the dead connection's fetch must not disturb the broker.
    await conn.call(Api.PRODUCE, {"topic_data": [{"name": "dies", "partition_data": [
        {"index": 0, "records": values_batch(b"x")}]}]})
    assert (await conn.call(Api.API_VERSIONS, {}))["error_code"] == Err.NONE


# --------------------------------------------------------------------------- §4, §6 joins


async def _pair(conn: WireConn, connect: Connect, group: str, topic: str,
                b_metadata: bytes | None = None) -> tuple[Member, Member]:
    """a (leader) and b joined at generation 2, synced: Stable."""
    a = await stable_single(conn, group, topic, [0])
    b = Member(await connect("b"), group, [topic], metadata=b_metadata)
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    b_sync = b.send_sync()
    assert (await a.sync({a.member_id: assignment([(topic, [0])])}))["error_code"] == 0
    assert (await answer(b_sync))["error_code"] == Err.NONE
    return a, b


async def test_only_the_leader_gets_members_and_metadata_is_opaque(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "opq")
    garbage = b"\xc1 not a subscription"
    a, b = await _pair(conn, connect, "opq-group", "opq", b_metadata=garbage)
    assert a.leader == b.leader == a.member_id
    assert b.joined["members"] == []
    assert {m["member_id"]: m["metadata"] for m in a.joined["members"]} == {
        a.member_id: subscription(["opq"]), b.member_id: garbage}
    group = await describe(conn, "opq-group")
    assert {m["member_id"]: m["member_metadata"] for m in group["members"]} == {
        a.member_id: subscription(["opq"]), b.member_id: garbage}
    # b was left out of the assignment: an empty bin, owning nothing.
    assert {m["member_id"]: m["member_assignment"] for m in group["members"]}[
        b.member_id] == b""


async def test_follower_rejoin_compares_metadata_byte_wise(conn: WireConn,
                                                           connect: Connect) -> None:
    await create_topic(conn, "bytewise")
    a, b = await _pair(conn, connect, "bw-group", "bytewise")
    same = await b.join_once()
    assert (same["error_code"], same["generation_id"]) == (Err.NONE, 2)
    assert (await describe(conn, "bw-group"))["group_state"] == "Stable"
    # Same map, keys in another order: different bytes, so a changed protocol.
    b.metadata = pack({"rack_id": None, "user_data": None, "generation_id": -1,
                       "owned_partitions": [], "topics": ["bytewise"]})
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    assert (await answer(b_join))["generation_id"] == 3


async def test_protocol_selection_by_member_votes(conn: WireConn, connect: Connect) -> None:
    members = []
    for i, prefs in enumerate((["range", "roundrobin"], ["roundrobin", "range"],
                               ["roundrobin", "range", "sticky"])):
        m = Member(await connect(f"v{i}"), "votes", ["t"])
        members.append((m, prefs))

    def body(m: Member, prefs: list[str]) -> dict[str, object]:
        return {**m.join_body(), "protocols": [
            {"name": p, "metadata": subscription(["t"])} for p in prefs]}

    first, prefs0 = members[0]
    first.take_join(await first.conn.call(Api.JOIN_GROUP, body(first, prefs0)))
    first.take_join(await first.conn.call(Api.JOIN_GROUP, body(first, prefs0)))
    assert first.joined["protocol_name"] == "range"
    await first.sync({})
    parked = []
    for m, prefs in members[1:]:
        m.take_join(await m.conn.call(Api.JOIN_GROUP, body(m, prefs)))
        parked.append(m.conn.send(Api.JOIN_GROUP, body(m, prefs)))
    await until_group(conn, "votes", lambda g: len(g["members"]) == 3)
    first.take_join(await first.conn.call(Api.JOIN_GROUP, body(first, prefs0)))
    names = {first.joined["protocol_name"]}
    for fut in parked:
        names.add((await answer(fut))["protocol_name"])
    assert names == {"roundrobin"}


async def test_parked_fetch_is_fenced_when_it_completes(conn: WireConn,
                                                        connect: Connect) -> None:
    await create_topic(conn, "late-fence", 2)
    a = await stable_single(conn, "lf-group", "late-fence", [0, 1])
    a_fetcher = await connect("a-fetch")
    parked = a_fetcher.send(Api.FETCH, {"max_wait_ms": 60_000, "group": a.group_context(),
                                        "topics": [{"topic": "late-fence", "partitions": [
        {"partition": 1, "fetch_offset": 0}]}]})
    b = Member(await connect("b"), "lf-group", ["late-fence"])
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    b_sync = b.send_sync()
    plan = {a.member_id: assignment([("late-fence", [0])]),
            b.member_id: assignment([("late-fence", [1])])}
    assert (await a.sync(plan))["error_code"] == Err.NONE
    assert (await answer(b_sync))["error_code"] == Err.NONE
    await conn.call(Api.PRODUCE, {"topic_data": [{"name": "late-fence", "partition_data": [
        {"index": 1, "records": values_batch(b"for b")}]}]})
    body = await answer(parked)
    assert body["error_code"] == Err.NONE
    part = body["responses"][0]["partitions"][0]
    assert (part["error_code"], part["records"]) == (Err.PARTITION_NOT_OWNED, b"")


async def test_static_leader_replacement_skips_assignment(conn: WireConn,
                                                          connect: Connect) -> None:
    """KIP-814: a returning static leader keeps the generation and its assignment."""
    await create_topic(conn, "kip814", 2)
    old = await stable_single(conn, "kip814-group", "kip814", [0, 1], instance_id="lead")
    new = Member(await connect("restarted"), "kip814-group", ["kip814"], instance_id="lead")
    body = await new.join_once()
    assert body["error_code"] == Err.NONE
    assert (body["generation_id"], body["leader"], body["skip_assignment"]) == (
        1, new.member_id, True)
    assert [m["member_id"] for m in body["members"]] == [new.member_id]
    synced = await new.sync()
    assert synced["assignment"] == assignment([("kip814", [0, 1])])
    group = await describe(conn, "kip814-group")
    assert (group["group_state"], group["generation_id"], len(group["rebalances"])) == (
        "Stable", 1, 1)
    fetched = await new.fetch("kip814", [0, 1])
    assert [p["error_code"] for p in fetched["responses"][0]["partitions"]] == [0, 0]
    assert (await old.heartbeat())["error_code"] == Err.FENCED_INSTANCE_ID


async def test_describe_while_rebalancing_follows_kafka(conn: WireConn,
                                                        connect: Connect) -> None:
    await create_topic(conn, "desc")
    a = await stable_single(conn, "desc-group", "desc", [0])
    b = Member(await connect("b"), "desc-group", ["desc"])
    await b.first_join()
    b_join = b.send_join()
    group = await until_group(conn, "desc-group",
                              lambda g: g["group_state"] == "PreparingRebalance")
    assert (group["protocol_type"], group["protocol_data"]) == ("consumer", "")
    members = {m["member_id"]: m for m in group["members"]}
    assert set(members) == {a.member_id, b.member_id}
    assert members[a.member_id]["member_metadata"] == b""
    assert members[a.member_id]["member_assignment"] == assignment([("desc", [0])])
    await a.join()
    assert (await answer(b_join))["error_code"] == Err.NONE


async def test_ownership_survives_completing_back_to_preparing(conn: WireConn,
                                                               connect: Connect) -> None:
    await create_topic(conn, "keep", 2)
    a = await stable_single(conn, "keep-group", "keep", [0, 1])
    b = Member(await connect("b"), "keep-group", ["keep"])
    await b.first_join()
    b_join = b.send_join()
    assert (await a.heartbeat())["error_code"] == Err.REBALANCE_IN_PROGRESS
    await a.join()
    b.take_join(await answer(b_join))
    assert (await describe(conn, "keep-group"))["group_state"] == "CompletingRebalance"
    c = Member(await connect("c"), "keep-group", ["keep"])
    await c.first_join()
    c_join = c.send_join()
    await until_group(conn, "keep-group", lambda g: g["group_state"] == "PreparingRebalance")
    body = await a.fetch("keep", [0, 1])
    assert [p["error_code"] for p in body["responses"][0]["partitions"]] == [0, 0]
    body = await b.fetch("keep", [0])
    assert body["responses"][0]["partitions"][0]["error_code"] == Err.PARTITION_NOT_OWNED
    b_rejoin = b.send_join()
    await a.join()
    for fut in (c_join, b_rejoin):
        assert (await answer(fut))["error_code"] == Err.NONE


async def test_only_join_sync_heartbeat_attach_a_member_to_a_connection(
        conn: WireConn, connect: Connect) -> None:
    await create_topic(conn, "attach")
    c1 = await connect("joiner")
    a = await stable_single(c1, "attach-group", "attach", [0])
    side = await connect("side")
    # A Fetch and an OffsetCommit naming a do not attach it to `side`.
    sider = Member(side, "attach-group", ["attach"], member_id=a.member_id,
                   generation_id=a.generation_id)
    assert (await sider.fetch("attach", [0]))["error_code"] == Err.NONE
    assert (await sider.commit("attach", {0: 1}))["topics"][0]["partitions"][0][
        "error_code"] == Err.NONE
    await c1.close()
    events = await read_events(conn, lambda es: any(
        e["type"] == "member_expired" and e["group_id"] == "attach-group" for e in es))
    [gone] = [e for e in events if e["type"] == "member_expired"
              and e["group_id"] == "attach-group"]
    assert (gone["member_id"], gone["reason"]) == (a.member_id, "connection-lost")


async def test_read_ahead_is_bounded_by_max_in_flight(start_broker: StartBroker,
                                                      connect: Connect) -> None:
    broker = await start_broker(max_in_flight_requests=2)
    conn = await connect(target=broker)
    await create_topic(conn, "inflight", 2)
    parked = [conn.send(Api.FETCH, {"max_wait_ms": 60_000, "topics": [
        {"topic": "inflight", "partitions": [{"partition": p, "fetch_offset": 0}]}]})
        for p in (0, 1)]
    cids = [conn.last_cid - 1, conn.last_cid]
    third = conn.send(Api.API_VERSIONS, {})
    third_cid = conn.last_cid
    producer = await connect("producer", target=broker)
    await producer.call(Api.PRODUCE, {"topic_data": [{"name": "inflight", "partition_data": [
        {"index": 0, "records": values_batch(b"go")}]}]})
    assert (await answer(third))["error_code"] == Err.NONE
    assert (await answer(parked[0]))["error_code"] == Err.NONE
    # The third request could only be read once an answer freed a slot.
    assert conn.arrivals.index(cids[0]) < conn.arrivals.index(third_cid)
    await producer.call(Api.PRODUCE, {"topic_data": [{"name": "inflight", "partition_data": [
        {"index": 1, "records": values_batch(b"go")}]}]})
    assert (await answer(parked[1]))["error_code"] == Err.NONE


async def test_poll_interval_uses_the_latest_join(conn: WireConn) -> None:
    await create_topic(conn, "latest")
    member = await stable_single(conn, "latest-group", "latest", [0],
                                 rebalance_timeout_ms=500)
    member.rebalance_timeout_ms = 2000
    await member.join()
    assert (await member.sync({member.member_id: assignment([("latest", [0])])}))[
        "error_code"] == Err.NONE
    assert (await member.heartbeat(poll_age_ms=1500))["error_code"] == Err.NONE
    assert (await member.heartbeat(poll_age_ms=2001))["error_code"] == Err.UNKNOWN_MEMBER_ID


async def test_initial_rebalance_delay_gathers_early_joiners(start_broker: StartBroker,
                                                             connect: Connect) -> None:
    broker = await start_broker(group_initial_rebalance_delay_ms=300)
    a = Member(await connect("a", target=broker), "early", ["t"])
    b = Member(await connect("b", target=broker), "early", ["t"])
    await a.first_join()
    await b.first_join()
    joins = [a.send_join(), b.send_join()]
    bodies = [await answer(fut) for fut in joins]
    assert {body["generation_id"] for body in bodies} == {1}
    leader = next(body for body in bodies if body["leader"] == body["member_id"])
    assert {m["member_id"] for m in leader["members"]} == {a.member_id, b.member_id}
