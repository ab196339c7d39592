"""Cluster mode: groups loaded and unloaded per ``__consumer_offsets`` partition as this
broker gains and loses its leadership (Kafka's onElection / onResignation), and the
groups of partitions not served here refused per group or as a whole."""

from __future__ import annotations

import itertools

from groupwire.broker.coordinator import Coordinator, GroupRecord, record_from_kv
from groupwire.broker.coordinator.timers import HBWAIT, TimerKey, session_key, sync_key
from groupwire.protocol.codec import HeartbeatFields, decode_heartbeat, encode_request
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchGroup,
    HeartbeatRequest,
    JoinGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Response,
    SyncGroupResponse,
)

from .coord_sim import Member, Sim, assignment, form_group, join_all

N = 4
P = 3  # holds "g", "k" and "s"; "h" is on 0, "q" on 1
NONE = ErrorCode.NONE
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
LOADING = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def cluster_sim(now: int = 0) -> Sim:
    """A simulated shell around a coordinator that knows the offsets partition count."""
    assert [coordinator_partition(g, N) for g in ("g", "k", "s", "h", "q")] == [P, P, P, 0, 1]
    sim = Sim(now=now, start=False)
    counter = itertools.count(1)
    sim.coord = Coordinator(sim.config, sim.topics.get,
                            new_uuid=lambda: f"n{now}-{next(counter)}", offsets_partitions=N)
    sim.apply(sim.coord.start(now))
    return sim


def persisted(sim: Sim, partition: int = P) -> list[GroupRecord]:
    """The partition's records as the next leader reads them from its log."""
    return [record_from_kv(*r.to_kv()) for r in sim.records
            if coordinator_partition(r.group_id, N) == partition]


def rebind(m: Member, sim: Sim) -> Member:
    """The same client, now talking to ``sim``'s coordinator on a new connection."""
    return Member(sim, group_id=m.group_id, client_id=m.client_id, instance_id=m.instance_id,
                  session_timeout_ms=m.session_timeout_ms,
                  rebalance_timeout_ms=m.rebalance_timeout_ms, member_id=m.member_id,
                  generation_id=m.generation_id, protocols=m.protocols)


def code_of(response: Response | None) -> ErrorCode:
    assert response is not None, "still parked"
    return ErrorCode(response.error_code)


def fields(m: Member, cid: int = 1) -> HeartbeatFields:
    request = HeartbeatRequest(group_id=m.group_id, generation_id=m.generation_id,
                               member_id=m.member_id, group_instance_id=m.instance_id)
    decoded = decode_heartbeat(encode_request(cid, request, "c"))
    assert decoded is not None
    return decoded


def keys_of(sim: Sim, group_ids: set[str]) -> list[TimerKey]:
    return [k for k in sim.timers.armed() if len(k) > 1 and k[1] in group_ids]


# --- load -------------------------------------------------------------------------------


def test_a_loaded_stable_group_carries_on_heartbeating_without_a_rebalance() -> None:
    old = cluster_sim()
    a = Member(old, client_id="a")
    b = Member(old, client_id="b", session_timeout_ms=20_000)
    form_group(old, [a, b])
    assert a.commit({("t", 0): 7}) == {("t", 0): NONE}
    before = old.describe("g")

    new = cluster_sim(now=old.now + 5000)
    loaded = new.apply(new.coord.load_partition(P, persisted(old), new.now))
    assert (loaded.replies, loaded.records, loaded.events) == ((), (), ())
    # sessions restart from the load
    assert new.timer_deadline(session_key("g", a.member_id)) == new.now + 10_000
    assert new.timer_deadline(session_key("g", b.member_id)) == new.now + 20_000
    restored = new.describe("g")
    assert (restored.group_state, restored.generation_id, restored.leader_id) == (
        "Stable", before.generation_id, before.leader_id)
    assert [(m.member_id, m.member_assignment) for m in restored.members] == [
        (m.member_id, m.member_assignment) for m in before.members]
    assert new.coord.committed("g") == {("t", 0): 7}

    a2, b2 = rebind(a, new), rebind(b, new)
    for _ in range(5):
        new.advance(4000)
        assert a2.hb() == NONE and b2.hb() == NONE
    # the fast path takes them too
    assert new.coord.renew(a2.conn, fields(a2), new.now) is not None
    assert new.events == []
    assert new.state("g") == "Stable" and new.describe("g").generation_id == 1


def test_a_restored_completing_rebalance_group_gets_its_sync_timer() -> None:
    old = cluster_sim()
    a = Member(old, client_id="a", rebalance_timeout_ms=8000, session_timeout_ms=60_000)
    join_all(old, [a])
    new = cluster_sim(now=old.now + 3000)
    new.apply(new.coord.load_partition(P, persisted(old), new.now))
    assert new.state("g") == "CompletingRebalance"
    assert new.timer_deadline(sync_key("g", 1)) == new.now + 8000
    new.advance(7999)
    assert new.state("g") == "CompletingRebalance"
    new.advance(1)
    d = new.describe("g")
    assert (d.group_state, d.generation_id) == ("Empty", 2)
    assert [e.reason for e in new.events_of("member_expired")] == ["sync-timeout"]


def test_a_loaded_group_keeps_the_extensions() -> None:
    old = cluster_sim()
    a = Member(old, client_id="a", rebalance_timeout_ms=30_000)
    b = Member(old, client_id="b")
    form_group(old, [a, b])  # topic t round robin over the sorted ids
    ids = sorted([a.member_id, b.member_id])
    a_owns = {("t", p) for p in range(6) if ids[p % 2] == a.member_id}
    b_owns = {("t", p) for p in range(6)} - a_owns

    new = cluster_sim(now=old.now + 1000)
    new.apply(new.coord.load_partition(P, persisted(old), new.now))
    a2, b2 = rebind(a, new), rebind(b, new)
    # ownership fencing from the persisted assignments
    check = new.coord.check_fetch(FetchGroup(group_id="g", member_id=a.member_id,
                                             generation_id=1), sorted(a_owns | b_owns))
    assert (check.error_code, check.not_owned) == (NONE, b_owns)
    # the rebalance history counts moves from the loaded owners
    assert b2.leave().error_code == NONE
    a2.join()
    new.step_through(100)
    assert a2.send_sync({a.member_id: assignment(*sorted(a_owns | b_owns))}) is not None
    done = new.events_of("rebalance_completed")
    assert [p for e in done for p in e.partitions] == [("t", sorted(p for _, p in b_owns))]
    # the poll interval
    assert a2.hb(poll_age_ms=30_001) == ErrorCode.UNKNOWN_MEMBER_ID
    assert [e.member_id for e in new.events_of("poll_interval_expired")] == [a.member_id]


def test_connection_loss_grace_waits_until_a_loaded_member_connected_and_lost_it() -> None:
    old = cluster_sim()
    a = Member(old, client_id="a", session_timeout_ms=30_000)
    form_group(old, [a])
    new = cluster_sim(now=old.now)
    new.apply(new.coord.load_partition(P, persisted(old), new.now))
    a2 = rebind(a, new)
    load_deadline = new.now + 30_000
    # connections closing before the member has one are none of its business
    for conn in range(100, 110):
        new.close(conn)
    assert new.events == []
    assert new.timer_deadline(session_key("g", a.member_id)) == load_deadline
    new.advance(5000)
    conn = new.new_conn()
    assert a2.hb(conn=conn) == NONE
    new.close(conn)
    assert [e.member_id for e in new.events_of("connection_lost")] == [a.member_id]
    assert new.timer_deadline(session_key("g", a.member_id)) == new.now + 1000
    new.advance(1000)
    assert [e.reason for e in new.events_of("member_expired")] == ["connection-lost"]


def test_a_connection_from_before_an_unload_does_not_start_grace_after_the_reload() -> None:
    sim = cluster_sim()
    a = Member(sim, client_id="a", session_timeout_ms=30_000)
    form_group(sim, [a])
    records = persisted(sim)
    sim.apply(sim.coord.unload_partition(P, sim.now))
    sim.advance(100)
    sim.apply(sim.coord.load_partition(P, records, sim.now))
    deadline = sim.now + 30_000
    sim.close(a.conn)  # the member's connection to the previous term
    assert sim.events_of("connection_lost") == []
    assert sim.timer_deadline(session_key("g", a.member_id)) == deadline


# --- unload -----------------------------------------------------------------------------


def test_unload_answers_parked_requests_not_coordinator_and_cancels_every_timer() -> None:
    sim = cluster_sim()
    # g: Stable, a's heartbeat long poll parked
    a, a2 = Member(sim, client_id="a"), Member(sim, client_id="a2")
    form_group(sim, [a, a2])
    assert a.commit({("t", 0): 4}) == {("t", 0): NONE}
    poll = a.heartbeat(wait_ms=3000)
    assert sim.reply(a.conn, poll) is None
    # k: PreparingRebalance, c's JoinGroup parked, the join timer armed
    c, d = Member(sim, group_id="k", client_id="c"), Member(sim, group_id="k", client_id="d")
    form_group(sim, [c, d])
    assert c.send_join() is None
    assert sim.state("k") == "PreparingRebalance"
    # s: CompletingRebalance, a follower's SyncGroup parked, the sync timer armed
    e, f = Member(sim, group_id="s", client_id="e"), Member(sim, group_id="s", client_id="f")
    responses = join_all(sim, [e, f])
    follower = e if responses[0].leader == f.member_id else f
    assert follower.send_sync() is None
    assert sim.state("s") == "CompletingRebalance"
    unloaded = {"g", "k", "s"}
    assert keys_of(sim, unloaded)  # sessions, join, sync
    hbwait = [k for k in sim.timers.armed() if k[0] == HBWAIT]
    assert hbwait

    before, records = len(sim.events), len(sim.records)
    result = sim.apply(sim.coord.unload_partition(P, sim.now))
    assert (result.events, result.records) == ((), ())
    assert code_of(sim.reply(a.conn, poll)) == NOT_COORDINATOR
    join = c.join_response()
    assert isinstance(join, JoinGroupResponse)
    assert (code_of(join), join.member_id) == (NOT_COORDINATOR, c.member_id)
    sync = follower.sync_response()
    assert isinstance(sync, SyncGroupResponse) and code_of(sync) == NOT_COORDINATOR
    assert len(result.replies) == 3
    assert keys_of(sim, unloaded) == [] and not any(k in sim.timers for k in hbwait)
    assert sim.coord.group_ids() == [] and sim.coord.committed("g") == {}
    assert sim.coord.view.parked_total() == 0
    # past every timeout: nothing fires for them, even keys handed in late
    replies = len(sim.replies)
    sim.step_through(3_600_000)
    for key in [session_key("g", a.member_id), ("join", "k"), sync_key("s", 1), *hbwait]:
        assert not sim.apply(sim.coord.expire(key, sim.now))
    assert sim.events[before:] == [] and len(sim.replies) == replies
    assert sim.records[records:] == []


def test_unload_leaves_other_partitions_groups_alone() -> None:
    sim = cluster_sim()
    g = Member(sim, client_id="g")
    form_group(sim, [g])
    h = Member(sim, group_id="h", client_id="h")
    form_group(sim, [h])
    assert h.commit({("t", 1): 5}) == {("t", 1): NONE}
    poll = h.heartbeat(wait_ms=3000)
    deadline = sim.timer_deadline(session_key("h", h.member_id))
    events = len(sim.events)
    result = sim.apply(sim.coord.unload_partition(P, sim.now))
    assert all(k[1] != "h" for op in result.timers for k in [op.key] if len(k) > 1)
    assert len(result.replies) == 0  # g had nothing parked; h's long poll stays
    assert sim.coord.group_ids() == ["h"]
    assert sim.reply(h.conn, poll) is None
    assert sim.timer_deadline(session_key("h", h.member_id)) == deadline
    sim.advance(3000)
    assert code_of(sim.reply(h.conn, poll)) == NONE
    assert h.hb() == NONE and sim.state("h") == "Stable"
    assert sim.coord.committed("h") == {("t", 1): 5}
    assert sim.events[events:] == []


def test_load_after_unload_restores_committed_offsets() -> None:
    sim = cluster_sim()
    a = Member(sim, client_id="a")
    form_group(sim, [a])
    assert a.commit({("t", 0): 7, ("t", 1): 9}) == {("t", 0): NONE, ("t", 1): NONE}
    Member(sim, group_id="k").commit({("u", 2): 3}, generation_id=-1)  # a "simple" group
    records = persisted(sim)
    events = len(sim.events)
    sim.apply(sim.coord.unload_partition(P, sim.now))
    assert sim.coord.committed("g") == {} and sim.coord.committed("k") == {}
    sim.advance(2000)
    sim.apply(sim.coord.load_partition(P, records, sim.now))
    assert sim.coord.committed("g") == {("t", 0): 7, ("t", 1): 9}
    assert sim.coord.committed("k") == {("u", 2): 3}
    fetched = sim.call(OffsetFetchRequest(group_id="g"))
    assert isinstance(fetched, OffsetFetchResponse)
    assert [(t.name, p.partition_index, p.committed_offset)
            for t in fetched.topics for p in t.partitions] == [("t", 0, 7), ("t", 1, 9)]
    assert a.hb() == NONE and sim.state("g") == "Stable"
    assert sim.events[events:] == []


def test_load_replaces_the_partitions_groups_and_skips_other_partitions_records() -> None:
    sim = cluster_sim()
    a = Member(sim, client_id="a")
    form_group(sim, [a])
    h = Member(sim, group_id="h")
    h.commit({("u", 0): 1}, generation_id=-1)
    everything = [record_from_kv(*r.to_kv()) for r in sim.records]
    a.commit({("t", 0): 8})  # newer than the log handed in
    poll = a.heartbeat(wait_ms=3000)
    sim.apply(sim.coord.unload_partition(0, sim.now))  # h leaves
    result = sim.apply(sim.coord.load_partition(P, everything, sim.now))
    assert code_of(sim.reply(a.conn, poll)) == NOT_COORDINATOR  # the replaced group's
    assert sim.coord.committed("g") == {}  # as the log said
    assert sim.coord.group_ids() == ["g"] and sim.coord.committed("h") == {}
    assert result.events == ()


# --- groups not served here -------------------------------------------------------------


def _hosting(sim: Sim) -> None:
    """P is served here, partition 1 is loading, the others are elsewhere."""
    coord = sim.coord
    coord.set_hosting(hosts=lambda gid: coord.partition_of(gid) == P,
                      loading=lambda gid: coord.partition_of(gid) == 1)


def test_describe_and_delete_answer_each_group_not_served_here() -> None:
    sim = cluster_sim()
    for gid in ("g", "h", "q"):
        Member(sim, group_id=gid).commit({("t", 0): 1}, generation_id=-1)
    _hosting(sim)
    described = sim.call(DescribeGroupsRequest(groups=["g", "h", "q"]))
    assert isinstance(described, DescribeGroupsResponse)
    assert [(d.group_id, d.error_code, d.group_state) for d in described.groups] == [
        ("g", NONE, "Empty"), ("h", NOT_COORDINATOR, ""), ("q", LOADING, "")]
    listed = sim.call(ListGroupsRequest())
    assert isinstance(listed, ListGroupsResponse)
    assert [g.group_id for g in listed.groups] == ["g"]
    records = len(sim.records)
    deleted = sim.call(DeleteGroupsRequest(groups_names=["h", "q", "g"]))
    assert isinstance(deleted, DeleteGroupsResponse)
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("h", NOT_COORDINATOR), ("q", LOADING), ("g", NONE)]
    assert {r.group_id for r in sim.records[records:]} == {"g"}
    assert sim.coord.committed("h") == {("t", 0): 1}


def test_single_group_apis_are_refused_whole_for_groups_not_served_here() -> None:
    sim = cluster_sim()
    h = Member(sim, group_id="h", client_id="h")
    form_group(sim, [h])  # joined while this broker served partition 0
    _hosting(sim)
    records, events = len(sim.records), len(sim.events)
    for gid, code in (("h", NOT_COORDINATOR), ("q", LOADING)):
        m = h if gid == "h" else Member(sim, group_id="q", member_id="x", generation_id=1)
        assert m.hb() == code
        assert code_of(m.send_join()) == code
        assert code_of(m.send_sync()) == code
        assert code_of(m.leave()) == code
        fetched = sim.call(OffsetFetchRequest(group_id=gid))
        assert code_of(fetched) == code
        steps = sim.coord.answer_steps(OffsetFetchRequest(group_id=gid))
        assert steps is not None
        try:
            while True:
                next(steps)
        except StopIteration as stop:
            assert code_of(stop.value) == code
        commit = OffsetCommitRequest(group_id=gid, generation_id=-1, member_id="", topics=[
            OffsetCommitRequestTopic(name="t", partitions=[
                OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
        assert code_of(sim.call(commit)) == code
    assert sim.coord.renew(h.conn, fields(h), sim.now) is None  # the fast path declines
    assert sim.coord.group_ids() == ["h"]  # nothing created, nothing changed
    assert sim.records[records:] == [] and sim.events[events:] == []
    assert sim.state("g") == "Dead"  # served here, unknown
