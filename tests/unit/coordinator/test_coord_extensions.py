"""docs/protocol.md §7: poll interval, ownership fencing, heartbeat long poll, connection loss
and rebalance history, with the events of §9."""

from __future__ import annotations

from dataclasses import replace

from groupwire.broker.coordinator import FetchCheck
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import FetchGroup, HeartbeatResponse, JoinGroupResponse

from .coord_sim import TEST_CONFIG, Member, Sim, assignment, form_group, join_all

E = ErrorCode
NOTHING: frozenset[tuple[str, int]] = frozenset()


# --- §7.1 poll interval -------------------------------------------------------------------


def test_poll_age_over_max_poll_interval_removes_member() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=5000)
    b = Member(sim, client_id="b", rebalance_timeout_ms=5000)
    form_group(sim, [a, b])
    assert b.hb(poll_age_ms=5000) == E.NONE  # equal is still fine
    cid = b.heartbeat(poll_age_ms=5001)
    assert sim.reply(b.conn, cid) == HeartbeatResponse(
        error_code=E.UNKNOWN_MEMBER_ID, error_message="poll interval expired")
    event = sim.events_of("poll_interval_expired")[0]
    assert (event.member_id, event.reason) == (b.member_id, "poll-interval-expired")
    assert event.partitions == [("t", [1, 3, 5])]
    assert sim.events_of("rebalance_started")[-1].reason == "poll-interval-expired"
    assert a.hb() == E.REBALANCE_IN_PROGRESS
    assert b.hb() == E.UNKNOWN_MEMBER_ID


def test_poll_age_applies_to_static_members_and_unknown_age_is_ignored() -> None:
    sim = Sim()
    s = Member(sim, instance_id="i", rebalance_timeout_ms=1000)
    form_group(sim, [s])
    assert s.hb(poll_age_ms=-1) == E.NONE
    assert s.hb(poll_age_ms=10) == E.NONE
    described = sim.describe("g").members[0]
    assert (described.poll_age_ms, described.last_heartbeat_ms) == (10, sim.now)
    assert s.hb(poll_age_ms=1001) == E.UNKNOWN_MEMBER_ID
    assert sim.state("g") == "Empty"


# --- §7.2 ownership fencing -----------------------------------------------------------------


def _fetch_check(sim: Sim, m: Member, *tps: tuple[str, int]) -> FetchCheck:
    return sim.coord.check_fetch(
        FetchGroup(group_id=m.group_id, member_id=m.member_id, generation_id=m.generation_id,
                   group_instance_id=m.instance_id), list(tps))


def test_fetch_fencing_by_membership_and_ownership() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b])  # a: t-0,2,4  b: t-1,3,5
    assert _fetch_check(sim, a, ("t", 0), ("t", 2)) == FetchCheck(E.NONE, NOTHING)
    assert _fetch_check(sim, a, ("t", 0), ("t", 1), ("u", 0)) == FetchCheck(
        E.NONE, frozenset({("t", 1), ("u", 0)}))
    ghost = Member(sim, member_id="ghost")
    assert _fetch_check(sim, ghost, ("t", 0)).error_code == E.UNKNOWN_MEMBER_ID
    assert _fetch_check(sim, Member(sim, group_id="nope", member_id="x"),
                        ("t", 0)).error_code == E.UNKNOWN_MEMBER_ID


def test_fetch_fencing_of_a_replaced_static_member() -> None:
    sim = Sim()
    s = Member(sim, instance_id="i")
    form_group(sim, [s])
    new = Member(sim, instance_id="i")
    new.send_join()
    assert _fetch_check(sim, s, ("t", 0)).error_code == E.FENCED_INSTANCE_ID
    # the replacement carries the ownership over
    assert _fetch_check(sim, new, ("t", 0)) == FetchCheck(E.NONE, NOTHING)


def test_ownership_changes_only_when_an_assignment_is_installed() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b])
    a.send_join()  # rebalance starts; ownership stays
    assert _fetch_check(sim, b, ("t", 1)) == FetchCheck(E.NONE, NOTHING)
    b.send_join()
    assert sim.state("g") == "CompletingRebalance"
    assert _fetch_check(sim, b, ("t", 1)) == FetchCheck(E.NONE, NOTHING)
    b.send_sync()
    a.send_sync({a.member_id: assignment(*(("t", p) for p in range(6))),
                 b.member_id: b""})  # b is left out: it owns nothing now
    assert _fetch_check(sim, b, ("t", 1)) == FetchCheck(E.NONE, frozenset({("t", 1)}))
    assert _fetch_check(sim, a, ("t", 1)) == FetchCheck(E.NONE, NOTHING)


def test_opaque_members_and_other_protocol_types_are_not_ownership_fenced() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b], plan={})  # placeholder: re-sync below
    leader.send_join()
    other = b if leader is a else a
    other.send_join()
    other.send_sync()
    leader.send_sync({leader.member_id: b"\xc1 not msgpack", other.member_id: b""})
    assert _fetch_check(sim, leader, ("v", 1)) == FetchCheck(E.NONE, NOTHING)  # opaque
    assert _fetch_check(sim, other, ("v", 1)).not_owned == {("v", 1)}
    assert leader.commit({("v", 1): 3}) == {("v", 1): E.NONE}
    # a non-consumer group: membership is checked, partitions never
    c = Member(sim, group_id="conn", protocol_type="connect", protocols=[("x", b"")])
    form_group(sim, [c], plan={c.member_id: assignment(("t", 0))})
    assert _fetch_check(sim, c, ("u", 2)) == FetchCheck(E.NONE, NOTHING)
    assert c.commit({("u", 2): 1}) == {("u", 2): E.NONE}


def test_commit_fencing_refuses_unowned_partitions_and_stores_the_rest() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b])
    result = a.commit({("t", 0): 10, ("t", 1): 11, ("t", 2): 12})
    assert result == {("t", 0): E.NONE, ("t", 1): E.PARTITION_NOT_OWNED, ("t", 2): E.NONE}
    assert sim.coord.committed("g") == {("t", 0): 10, ("t", 2): 12}
    fenced = sim.events_of("commit_fenced")
    assert [(e.member_id, e.partitions) for e in fenced] == [(a.member_id, [("t", [1])])]
    # context-free commits (generation -1, no member) are not subject to ownership
    assert Member(sim, group_id="s").commit({("t", 1): 1}, generation_id=-1) == {
        ("t", 1): E.NONE}


def test_releasing_partitions_may_be_committed_until_someone_owns_them() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b], plan=None)  # a: 0,2,4  b: 1,3,5
    # cooperative round 1: b keeps 1,3 and gives up 5, which nobody gets yet
    a.send_join()
    b.send_join()
    b.send_sync()
    a.send_sync({a.member_id: assignment(("t", 0), ("t", 2), ("t", 4)),
                 b.member_id: assignment(("t", 1), ("t", 3))})
    assert _fetch_check(sim, b, ("t", 5)).not_owned == {("t", 5)}  # no more fetching
    assert b.commit({("t", 5): 50}) == {("t", 5): E.NONE}  # but it may commit it
    # round 2: a gets 5; b may no longer commit it
    a.send_join()
    b.send_join()
    b.send_sync()
    a.send_sync({a.member_id: assignment(("t", 0), ("t", 2), ("t", 4), ("t", 5)),
                 b.member_id: assignment(("t", 1), ("t", 3))})
    assert b.commit({("t", 5): 51}) == {("t", 5): E.PARTITION_NOT_OWNED}
    assert a.commit({("t", 5): 52}) == {("t", 5): E.NONE}


def test_fencing_off_is_kafkas_rule() -> None:
    sim = Sim(replace(TEST_CONFIG, ownership_fencing=False))
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b])
    assert a.commit({("t", 1): 5}) == {("t", 1): E.NONE}
    assert _fetch_check(sim, a, ("t", 1)) == FetchCheck(E.NONE, NOTHING)
    assert _fetch_check(sim, Member(sim, member_id="ghost"), ("t", 1)).error_code == E.NONE
    assert sim.events_of("commit_fenced") == []


# --- §7.3 heartbeat long poll -----------------------------------------------------------


def _stable_pair(sim: Sim, **kw: int) -> tuple[Member, Member]:
    a, b = Member(sim, client_id="a", **kw), Member(sim, client_id="b", **kw)  # type: ignore[arg-type]
    form_group(sim, [a, b])
    return a, b


def test_long_poll_held_until_its_deadline() -> None:
    sim = Sim()
    a, _ = _stable_pair(sim, session_timeout_ms=10_000)
    cid = a.heartbeat(wait_ms=30_000)  # capped at session / 2
    assert sim.reply(a.conn, cid) is None
    sim.advance(4999)
    assert sim.reply(a.conn, cid) is None
    sim.advance(1)
    assert sim.reply(a.conn, cid) == HeartbeatResponse()


def test_long_poll_answered_when_a_rebalance_starts() -> None:
    sim = Sim()
    a, b = _stable_pair(sim)
    cid_a, cid_b = a.heartbeat(wait_ms=3000), b.heartbeat(wait_ms=3000)
    sim.advance(100)
    Member(sim, client_id="n").join()
    for m, cid in ((a, cid_a), (b, cid_b)):
        assert sim.reply(m.conn, cid) == HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS)
    assert not any(k[0] == "hbwait" for k in _armed(sim))
    # during PreparingRebalance a long poll is answered at once
    assert a.hb(wait_ms=3000) == E.REBALANCE_IN_PROGRESS


def test_long_poll_answered_by_the_next_heartbeat_and_on_removal() -> None:
    sim = Sim()
    a, _ = _stable_pair(sim)
    first = a.heartbeat(wait_ms=3000)
    second = a.heartbeat(wait_ms=3000)
    assert sim.reply(a.conn, first) == HeartbeatResponse()
    assert sim.reply(a.conn, second) is None
    a.leave()
    assert sim.reply(a.conn, second) == HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID)


def test_long_poll_of_a_replaced_static_member_is_fenced() -> None:
    sim = Sim()
    s = Member(sim, instance_id="i")
    form_group(sim, [s])
    cid = s.heartbeat(wait_ms=3000)
    Member(sim, instance_id="i").send_join()
    assert sim.reply(s.conn, cid) == HeartbeatResponse(error_code=E.FENCED_INSTANCE_ID)


def test_holding_a_heartbeat_does_not_extend_the_session() -> None:
    sim = Sim()
    a, b = _stable_pair(sim, session_timeout_ms=4000)
    t0 = sim.now
    b.heartbeat(wait_ms=2000)  # answered at t0+2000, then b goes silent
    for _ in range(2):
        sim.advance(1500)
        assert a.hb() == E.NONE
    sim.advance_to(t0 + 3999)
    assert sim.events_of("member_expired") == []
    sim.advance(1)  # the session counts from the heartbeat's arrival, not its answer
    assert [e.member_id for e in sim.events_of("member_expired")] == [b.member_id]


def test_long_poll_dies_with_its_connection() -> None:
    sim = Sim()
    a, _ = _stable_pair(sim)
    a.heartbeat(wait_ms=3000)
    sim.close(a.conn)  # Sim asserts nothing is ever sent to a closed connection
    assert not any(k[0] == "hbwait" for k in _armed(sim))
    sim.advance(3000)


def _armed(sim: Sim) -> list[tuple[str, ...]]:
    return sim.timers.armed()


# --- §7.4 connection loss ---------------------------------------------------------------


def test_dynamic_member_losing_its_connection_is_removed_after_the_grace() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=1000))
    _, b = _stable_pair(sim, session_timeout_ms=30_000)
    sim.advance(100)
    sim.close(b.conn)
    lost = sim.events_of("connection_lost")
    assert [(e.member_id, e.partitions) for e in lost] == [(b.member_id, [("t", [1, 3, 5])])]
    assert sim.timer_deadline(("session", "g", b.member_id)) == sim.now + 1000
    sim.advance(999)
    assert sim.state("g") == "Stable"
    sim.advance(1)
    assert sim.state("g") == "PreparingRebalance"
    expired = sim.events_of("member_expired")
    assert [(e.member_id, e.reason) for e in expired] == [(b.member_id, "connection-lost")]
    assert sim.events_of("rebalance_started")[-1].reason == "connection-lost"


def test_reconnecting_within_the_grace_keeps_the_member() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=1000))
    _, b = _stable_pair(sim, session_timeout_ms=30_000)
    sim.close(b.conn)
    sim.advance(500)
    b.conn = sim.new_conn()
    assert b.hb() == E.NONE
    sim.advance(5000)
    assert sim.state("g") == "Stable" and sim.events_of("member_expired") == []


def test_closing_one_of_two_connections_changes_nothing() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=1000))
    _, b = _stable_pair(sim, session_timeout_ms=30_000)
    other = sim.new_conn()
    assert b.hb(conn=other) == E.NONE
    sim.close(b.conn)
    assert sim.events_of("connection_lost") == []
    sim.advance(5000)
    assert sim.state("g") == "Stable"


def test_static_member_keeps_its_full_session_after_connection_loss() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=1000))
    a = Member(sim, client_id="a", session_timeout_ms=20_000)
    s = Member(sim, instance_id="i", session_timeout_ms=20_000)
    form_group(sim, [a, s])
    sim.advance(1000)
    assert s.hb() == E.NONE
    sim.close(s.conn)
    assert [e.member_id for e in sim.events_of("connection_lost")] == [s.member_id]
    for _ in range(19):
        sim.advance(1000)
        assert a.hb() == E.NONE
    assert sim.state("g") == "Stable"
    sim.advance(1000)
    assert sim.state("g") == "PreparingRebalance"
    assert sim.events_of("member_expired")[0].reason == "session-expired"


def test_member_parked_in_join_whose_connection_dies_gets_the_grace() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=1000))
    a, b, c = (Member(sim, client_id=x, session_timeout_ms=2000, rebalance_timeout_ms=60_000)
               for x in "abc")
    leader = form_group(sim, [a, b, c])
    follower, straggler = [m for m in (a, b, c) if m is not leader]
    leader.send_join()
    follower.send_join()
    for _ in range(3):  # the parked follower's session timer fires, harmlessly
        sim.advance(1000)
        assert straggler.hb() == E.REBALANCE_IN_PROGRESS
    assert ("session", "g", follower.member_id) not in sim.timers
    sim.close(follower.conn)  # its parked JoinGroup dies: no reply, grace starts
    assert sim.reply(follower.conn, follower.join_cid or 0) is None
    straggler.send_join()  # everyone alive has joined, but follower is not awaiting
    assert leader.join_response() is None
    sim.advance(1000)  # grace over: follower removed, the join phase completes
    resp = leader.join_response()
    assert resp is not None and resp.generation_id == 2
    assert sorted(x.member_id for x in resp.members) == sorted(
        [leader.member_id, straggler.member_id])


def test_new_member_parked_in_join_whose_connection_dies_is_removed_quickly() -> None:
    sim = Sim(replace(TEST_CONFIG, connection_loss_grace_ms=1000))
    a = Member(sim, client_id="a", rebalance_timeout_ms=60_000)
    form_group(sim, [a])
    n = Member(sim, client_id="n", rebalance_timeout_ms=60_000)
    n.join()  # new member, parked: only the 5-minute new-member timeout applies...
    sim.close(n.conn)  # ...until its connection dies
    a.send_join()
    assert a.join_response() is None
    sim.advance(1000)
    resp = a.join_response()
    assert resp is not None and [x.member_id for x in resp.members] == [a.member_id]
    assert sim.events_of("member_expired")[-1].reason == "connection-lost"


# --- §7.4 rebalance history and §9 events -------------------------------------------------


def test_history_records_each_rebalance_with_moved_partitions() -> None:
    sim = Sim()
    a = Member(sim, client_id="a")
    form_group(sim, [a])  # a owns t-0..5
    t1 = sim.now
    b = Member(sim, client_id="b")
    b.join(reason="scale out")
    assert a.hb() == E.REBALANCE_IN_PROGRESS
    running = sim.describe("g").rebalances[-1]
    assert (running.generation_id, running.completed_ms, running.reason) == (
        None, None, "member-joined")
    sim.advance(250)
    a.send_join()
    b.send_sync()
    a.send_sync({a.member_id: assignment(("t", 0), ("t", 1), ("t", 2)),
                 b.member_id: assignment(("t", 3), ("t", 4), ("t", 5))})
    history = sim.describe("g").rebalances
    assert len(history) == 2
    first, second = history
    assert (first.reason, first.generation_id, first.trigger_member_id) == (
        "member-joined", 1, a.member_id)
    assert first.moved_partitions == [("t", [0, 1, 2, 3, 4, 5])]  # none -> a
    assert (second.reason, second.detail, second.trigger_member_id) == (
        "member-joined", "scale out", b.member_id)
    assert (second.generation_id, second.started_ms, second.completed_ms,
            second.duration_ms) == (2, t1, t1 + 250, 250)
    assert second.moved_partitions == [("t", [3, 4, 5])]
    completed = sim.events_of("rebalance_completed")[-1]
    assert (completed.reason, completed.duration_ms, completed.partitions,
            completed.generation_id) == ("member-joined", 250, [("t", [3, 4, 5])], 2)
    joined = sim.events_of("member_joined")
    assert [(e.member_id, e.reason) for e in joined] == [
        (a.member_id, None), (b.member_id, "scale out")]


def test_static_owner_is_the_instance_id_so_a_restart_moves_nothing() -> None:
    sim = Sim()
    s = Member(sim, client_id="s", instance_id="i")
    d = Member(sim, client_id="d")
    leader = form_group(sim, [s, d])  # ids "i-u1", "d-u2": d gets 0,2,4 and s 1,3,5
    assert leader is s
    new = Member(sim, instance_id="i")
    resp = new.send_join()  # replacement, no rebalance; it leads (KIP-814)
    assert resp is not None and resp.skip_assignment
    new.send_sync()
    new.send_join()  # the leader re-joins: a rebalance
    d.send_join()
    d.send_sync()
    new.send_sync({new.member_id: assignment(("t", 1), ("t", 3), ("t", 5)),
                   d.member_id: assignment(("t", 0), ("t", 2), ("t", 4))})
    last = sim.describe("g").rebalances[-1]
    assert (last.generation_id, last.moved_partitions) == (2, [])


def test_history_is_bounded_and_reasons_are_cut() -> None:
    sim = Sim(replace(TEST_CONFIG, history_size=3))
    a = Member(sim)
    form_group(sim, [a])
    for _ in range(4):
        a.send_join(reason="x" * 300)
        a.send_sync({a.member_id: b""})
    history = sim.describe("g").rebalances
    assert [h.generation_id for h in history] == [3, 4, 5]
    assert all(h.detail == "x" * 255 for h in history)
    assert all(h.reason == "member-rejoined" for h in history)


def test_events_carry_exactly_the_section_9_keys() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    a.leave(reason="shutdown")
    keys = {"type", "group_id", "generation_id", "member_id", "group_instance_id", "reason",
            "detail", "ts_ms", "duration_ms", "partitions", "replaced_member_id"}
    assert all(set(e.to_value()) == keys for e in sim.events)
    types = [e.type for e in sim.events]
    assert types == ["member_joined", "rebalance_started", "rebalance_completed",
                     "member_left", "rebalance_started", "rebalance_completed",
                     "group_emptied"]
    left = sim.events_of("member_left")[0].to_value()
    assert left["reason"] == "shutdown" and left["partitions"] == [["t", [0, 1, 2, 3, 4, 5]]]
    emptied = sim.events_of("rebalance_completed")[-1]
    assert emptied.partitions == [("t", [0, 1, 2, 3, 4, 5])]  # a -> nobody


def test_join_response_members_when_leader_rejoins_alone() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    resp = a.send_join()
    assert isinstance(resp, JoinGroupResponse) and resp.generation_id == 2
    assert join_all(sim, [a])[0].generation_id == 2


def test_described_rebalance_times_are_those_of_its_events_whatever_the_wall_clock_did(
        ) -> None:
    """DescribeGroups' started/completed times are the wall times taken when the rebalance
    started and completed, as its events' ts_ms: a later wall-clock step (or the ms
    jitter between the two clocks) does not move them."""
    sim = Sim()
    sim.coord.set_wall_clock(1_000_000, sim.now)
    a = Member(sim)
    form_group(sim, [a])
    sim.coord.set_wall_clock(1_000_000 + 60_000, sim.now)  # NTP stepped the wall clock
    started = sim.events_of("rebalance_started")[0]
    completed = sim.events_of("rebalance_completed")[0]
    (entry,) = sim.describe("g").rebalances
    assert (entry.started_ms, entry.completed_ms) == (started.ts_ms, completed.ts_ms)
    assert entry.started_ms >= 1_000_000 and entry.completed_ms < 1_000_000 + 60_000
