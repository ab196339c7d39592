"""Group membership against a running broker over loopback TCP."""

from __future__ import annotations

import asyncio

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)

from .rawgroup import RawMember, create_topic, form_group, round_robin

TOPIC = "orders"


async def _describe(conn, group: str):  # type: ignore[no-untyped-def]
    resp = await conn.send(DescribeGroupsRequest(groups=[group]),
                           response_type=DescribeGroupsResponse)
    return resp.groups[0]


async def test_single_member_joins_syncs_and_heartbeats(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, TOPIC, 3)
    m = RawMember(conn, "g1", [TOPIC])
    first = await m.join_once()
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("test-")
    joined = await m.join_once()
    assert joined.error_code == ErrorCode.NONE
    assert joined.generation_id == 1 and joined.leader == m.member_id
    assert [x.member_id for x in joined.members] == [m.member_id]
    sync = await m.sync({m.member_id: [(TOPIC, [0, 1, 2])]})
    assert sync.error_code == ErrorCode.NONE
    assert m.assignment == [(TOPIC, [0, 1, 2])]
    assert (await m.heartbeat()).error_code == ErrorCode.NONE
    described = await _describe(conn, "g1")
    assert described.group_state == "Stable"
    assert described.protocol_data == "range"


async def test_three_members_share_the_leaders_assignment(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    # the initial rebalance delay gathers members that join an empty group together
    broker = await start_broker(group_initial_rebalance_delay_ms=1000)
    conns = [await connect(f"c{i}", target=broker) for i in range(3)]
    await create_topic(conns[0], TOPIC, 6)
    members = [RawMember(c, "g3", [TOPIC]) for c in conns]
    joins = await asyncio.gather(*(m.join_group() for m in members))
    assert [j.error_code for j in joins] == [ErrorCode.NONE] * 3
    assert {j.generation_id for j in joins} == {1}
    leader = next(m for m in members if m.is_leader)
    assert leader.join is not None and len(leader.join.members) == 3
    assert all(not m.join.members for m in members if m is not leader)  # type: ignore[union-attr]
    plan = round_robin([x.member_id for x in leader.join.members], TOPIC, 6)
    syncs = await asyncio.gather(*(m.sync(plan if m is leader else None) for m in members))
    assert all(s.error_code == ErrorCode.NONE for s in syncs)
    owned = sorted(p for m in members for _, ps in m.assignment for p in ps)
    assert owned == list(range(6))
    assert all(len(m.assignment[0][1]) == 2 for m in members)
    described = await _describe(conns[0], "g3")
    assert described.group_state == "Stable"
    assert {x.member_id for x in described.members} == {m.member_id for m in members}


async def test_new_member_triggers_rebalance_on_long_polled_heartbeat(connect) -> None:  # type: ignore[no-untyped-def]
    c1, c2 = await connect("a"), await connect("b")
    await create_topic(c1, TOPIC, 4)
    first = RawMember(c1, "g-new", [TOPIC])
    await form_group([first], TOPIC, 4)
    parked = asyncio.ensure_future(first.heartbeat(wait_ms=5000))
    second = RawMember(c2, "g-new", [TOPIC])
    joining = asyncio.ensure_future(second.join_group())
    hb = await parked
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = await first.join_group()
    assert rejoin.error_code == ErrorCode.NONE
    assert (await joining).error_code == ErrorCode.NONE
    assert rejoin.generation_id == second.generation_id == 2


async def test_silent_member_expires_and_survivor_learns_at_once(connect) -> None:  # type: ignore[no-untyped-def]
    c1, c2 = await connect("a"), await connect("b")
    await create_topic(c1, TOPIC, 4)
    alive = RawMember(c1, "g-exp", [TOPIC], session_timeout_ms=5000)
    silent = RawMember(c2, "g-exp", [TOPIC], session_timeout_ms=300)
    await form_group([alive, silent], TOPIC, 4)
    # the survivor keeps heartbeating through long polls until the rebalance is announced
    while True:
        hb = await alive.heartbeat(wait_ms=1000)
        if hb.error_code != ErrorCode.NONE:
            break
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = await alive.join_group()
    assert rejoin.error_code == ErrorCode.NONE
    assert [x.member_id for x in rejoin.members] == [alive.member_id]
    gone = await silent.heartbeat()
    assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    described = await _describe(c1, "g-exp")
    reasons = [r.reason for r in described.rebalances]
    assert "session-expired" in reasons


async def test_leave_group_empties_group_and_bumps_generation(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, TOPIC, 1)
    m = RawMember(conn, "g-leave", [TOPIC])
    await form_group([m], TOPIC, 1)
    resp = await m.leave()
    assert resp.error_code == ErrorCode.NONE
    assert [x.error_code for x in resp.members] == [ErrorCode.NONE]
    described = await _describe(conn, "g-leave")
    assert described.group_state == "Empty"
    assert described.generation_id == 2
    listed = await conn.send(ListGroupsRequest(states_filter=["empty"]),
                             response_type=ListGroupsResponse)
    assert "g-leave" in [g.group_id for g in listed.groups]


async def test_static_member_restart_keeps_assignment_without_rebalance(connect) -> None:  # type: ignore[no-untyped-def]
    c1, c2 = await connect("a"), await connect("b")
    await create_topic(c1, TOPIC, 4)
    a = RawMember(c1, "g-static", [TOPIC], instance_id="host-a")
    b = RawMember(c2, "g-static", [TOPIC], instance_id="host-b")
    await form_group([a, b], TOPIC, 4)
    before = a.assignment
    generation = a.generation_id
    # "restart": a new process with the same instance id and no member id
    c3 = await connect("a2")
    restarted = RawMember(c3, "g-static", [TOPIC], instance_id="host-a")
    joined = await restarted.join_once()
    assert joined.error_code == ErrorCode.NONE
    assert joined.generation_id == generation
    sync = await restarted.sync()
    assert sync.error_code == ErrorCode.NONE
    assert restarted.assignment == before
    assert (await b.heartbeat()).error_code == ErrorCode.NONE
    fenced = await a.heartbeat()
    assert fenced.error_code == ErrorCode.FENCED_INSTANCE_ID


async def test_commit_checks_generation_and_member(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, TOPIC, 2)
    m = RawMember(conn, "g-commit", [TOPIC])
    await form_group([m], TOPIC, 2)
    ok = await m.commit({(TOPIC, 0): 42, (TOPIC, 1): 7})
    assert [p.error_code for p in ok.topics[0].partitions] == [0, 0]
    stale = await m.commit({(TOPIC, 0): 50}, generation_id=m.generation_id - 1)
    assert stale.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    stranger = RawMember(conn, "g-commit", [TOPIC], member_id="nobody",
                         generation_id=m.generation_id)
    unknown = await stranger.commit({(TOPIC, 0): 60})
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    fetched = await conn.send(OffsetFetchRequest(
        group_id="g-commit", topics=[OffsetFetchRequestTopic(name=TOPIC,
                                                             partition_indexes=[0, 1])]),
        response_type=OffsetFetchResponse)
    assert [(p.partition_index, p.committed_offset) for p in fetched.topics[0].partitions] == [
        (0, 42), (1, 7)]


async def test_commit_for_partition_not_owned_is_fenced(connect) -> None:  # type: ignore[no-untyped-def]
    c1, c2 = await connect("a"), await connect("b")
    await create_topic(c1, TOPIC, 2)
    a, b = RawMember(c1, "g-fence", [TOPIC]), RawMember(c2, "g-fence", [TOPIC])
    await form_group([a, b], TOPIC, 2)
    mine = a.assignment[0][1][0]
    theirs = b.assignment[0][1][0]
    resp = await a.commit({(TOPIC, mine): 1, (TOPIC, theirs): 1})
    codes = {p.partition_index: p.error_code for p in resp.topics[0].partitions}
    assert codes == {mine: ErrorCode.NONE, theirs: ErrorCode.PARTITION_NOT_OWNED}


async def test_poll_interval_expiry_removes_member(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, TOPIC, 1)
    m = RawMember(conn, "g-poll", [TOPIC], rebalance_timeout_ms=1000)
    await form_group([m], TOPIC, 1)
    assert (await m.heartbeat(poll_age_ms=500)).error_code == ErrorCode.NONE
    resp = await m.heartbeat(poll_age_ms=1001)
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert resp.error_message == "poll interval expired"
    described = await _describe(conn, "g-poll")
    assert described.group_state == "Empty"
    assert described.rebalances[-1].reason == "poll-interval-expired"


async def test_dead_connection_member_removed_after_grace(connect) -> None:  # type: ignore[no-untyped-def]
    c1, c2 = await connect("a"), await connect("b")
    await create_topic(c1, TOPIC, 2)
    alive = RawMember(c1, "g-grace", [TOPIC], session_timeout_ms=60_000)
    doomed = RawMember(c2, "g-grace", [TOPIC], session_timeout_ms=60_000)
    await form_group([alive, doomed], TOPIC, 2)
    parked = asyncio.ensure_future(alive.heartbeat(wait_ms=20_000))
    await c2.close()
    # the survivor is told well before the 60 s session timeout: the grace is 200 ms
    hb = await asyncio.wait_for(parked, 15)
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    described = await _describe(c1, "g-grace")
    assert described.rebalances[-1].reason == "connection-lost"


async def test_member_that_misses_the_rebalance_timeout_is_dropped(connect) -> None:  # type: ignore[no-untyped-def]
    c1, c2, c3 = await connect("a"), await connect("b"), await connect("c")
    await create_topic(c1, TOPIC, 2)
    steady = RawMember(c1, "g-rto", [TOPIC], rebalance_timeout_ms=400)
    laggard = RawMember(c2, "g-rto", [TOPIC], rebalance_timeout_ms=400)
    await form_group([steady, laggard], TOPIC, 2)
    # a third member joins; the laggard never re-joins, the steady one does at once
    newcomer = RawMember(c3, "g-rto", [TOPIC], rebalance_timeout_ms=400)
    joining = asyncio.ensure_future(newcomer.join_group())
    while (await steady.heartbeat(wait_ms=2000)).error_code == ErrorCode.NONE:
        pass
    rejoin, joined = await asyncio.gather(steady.join_group(), joining)
    assert rejoin.error_code == joined.error_code == ErrorCode.NONE
    members = {m.member_id for m in (rejoin.members or joined.members)}
    assert members == {steady.member_id, newcomer.member_id}
    assert (await laggard.heartbeat()).error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_commit_while_completing_rebalance_is_refused(connect) -> None:  # type: ignore[no-untyped-def]
    conn = await connect()
    await create_topic(conn, TOPIC, 1)
    m = RawMember(conn, "g-cr", [TOPIC])
    await m.join_group()  # joined, not yet synced: the group is CompletingRebalance
    resp = await m.commit({(TOPIC, 0): 1})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert (await m.heartbeat()).error_code == ErrorCode.NONE


async def test_group_max_size_refuses_the_extra_member(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(group_max_size=1)
    c1, c2 = await connect("a", target=broker), await connect("b", target=broker)
    await create_topic(c1, TOPIC, 1)
    first = RawMember(c1, "g-max", [TOPIC])
    await form_group([first], TOPIC, 1)
    second = RawMember(c2, "g-max", [TOPIC])
    refused = await second.join_group()
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert refused.member_id == ""
    assert (await first.heartbeat()).error_code == ErrorCode.NONE


async def test_invalid_session_timeout(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(group_min_session_timeout_ms=1000,
                                group_max_session_timeout_ms=5000)
    conn = await connect(target=broker)
    for timeout in (999, 5001):
        m = RawMember(conn, "g-sto", [TOPIC], session_timeout_ms=timeout)
        assert (await m.join_once()).error_code == ErrorCode.INVALID_SESSION_TIMEOUT


async def test_fetch_with_group_context_is_fenced_by_ownership(connect) -> None:  # type: ignore[no-untyped-def]
    from groupwire.protocol.messages import (
        FetchGroup,
        FetchPartition,
        FetchRequest,
        FetchResponse,
        FetchTopic,
    )

    c1, c2 = await connect("a"), await connect("b")
    await create_topic(c1, TOPIC, 2)
    a, b = RawMember(c1, "g-ffence", [TOPIC]), RawMember(c2, "g-ffence", [TOPIC])
    await form_group([a, b], TOPIC, 2)

    def fetch(member: RawMember, member_id: str | None = None) -> FetchRequest:
        return FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic=TOPIC, partitions=[
            FetchPartition(partition=p, fetch_offset=0) for p in (0, 1)])],
            group=FetchGroup(group_id="g-ffence", member_id=member_id or member.member_id,
                             generation_id=member.generation_id))

    resp = await c1.send(fetch(a), response_type=FetchResponse)
    codes = {p.partition_index: p.error_code for p in resp.responses[0].partitions}
    mine = a.assignment[0][1][0]
    assert codes == {mine: ErrorCode.NONE, 1 - mine: ErrorCode.PARTITION_NOT_OWNED}
    zombie = await c1.send(fetch(a, member_id="gone"), response_type=FetchResponse)
    assert zombie.error_code == ErrorCode.UNKNOWN_MEMBER_ID and zombie.responses == []


async def test_fencing_off_lets_any_member_commit(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(ownership_fencing=False)
    c1, c2 = await connect("a", target=broker), await connect("b", target=broker)
    await create_topic(c1, TOPIC, 2)
    a, b = RawMember(c1, "g-loose", [TOPIC]), RawMember(c2, "g-loose", [TOPIC])
    await form_group([a, b], TOPIC, 2)
    resp = await a.commit({(TOPIC, 0): 5, (TOPIC, 1): 5})
    assert [p.error_code for p in resp.topics[0].partitions] == [ErrorCode.NONE] * 2
