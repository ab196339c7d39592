"""DescribeGroups, ListGroups (docs/design/kafka.md §11) and DeleteGroups (§10.4)."""

from __future__ import annotations

from groupwire.broker.coordinator import GroupDeleteRecord, OffsetDeleteRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)

from .coord_sim import Member, Sim, assignment, form_group, join_all, sub


def _list(sim: Sim, *states: str) -> list[ListedGroup]:
    resp = sim.call(ListGroupsRequest(states_filter=list(states)))
    assert isinstance(resp, ListGroupsResponse)
    return resp.groups


def _delete(sim: Sim, *groups: str) -> list[DeletableGroupResult]:
    resp = sim.call(DeleteGroupsRequest(groups_names=list(groups)))
    assert isinstance(resp, DeleteGroupsResponse)
    return resp.results


def test_describe_unknown_group_is_dead() -> None:
    sim = Sim()
    assert sim.describe("nope") == DescribedGroup(group_id="nope", group_state="Dead")


def test_describe_stable_group_shows_metadata_leader_and_assignments() -> None:
    sim = Sim()
    a = Member(sim, client_id="app", instance_id="i1")
    plan = {"i1-u1": assignment(("t", 0))}
    form_group(sim, [a], plan=plan)
    assert a.hb(poll_age_ms=42) == ErrorCode.NONE
    d = sim.describe("g")
    assert (d.group_state, d.protocol_type, d.protocol_data, d.generation_id, d.leader_id) == (
        "Stable", "consumer", "range", 1, "i1-u1")
    [m] = d.members
    assert (m.member_id, m.group_instance_id, m.client_id, m.client_host) == (
        "i1-u1", "i1", "app", "/10.0.0.1")
    assert (m.member_metadata, m.member_assignment) == (sub("t"), plan["i1-u1"])
    assert (m.last_heartbeat_ms, m.poll_age_ms) == (sim.now, 42)
    assert [r.reason for r in d.rebalances] == ["member-joined"]


def test_describe_rebalancing_group_hides_metadata_but_keeps_assignment() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a], plan={"c-u1": assignment(("t", 3))})
    a.send_join()
    join_all(sim, [a])
    d = sim.describe("g")
    assert (d.group_state, d.protocol_data) == ("CompletingRebalance", "")
    assert d.members[0].member_metadata == b""
    assert d.members[0].member_assignment == assignment(("t", 3))


def test_list_groups_with_case_insensitive_filter() -> None:
    sim = Sim()
    form_group(sim, [Member(sim, group_id="b-stable")])
    Member(sim, group_id="a-empty").send_join()
    Member(sim, group_id="c-simple").commit({("t", 0): 1}, generation_id=-1)
    assert _list(sim) == [
        ListedGroup(group_id="a-empty", protocol_type="", group_state="Empty"),
        ListedGroup(group_id="b-stable", protocol_type="consumer", group_state="Stable"),
        ListedGroup(group_id="c-simple", protocol_type="", group_state="Empty")]
    assert [g.group_id for g in _list(sim, "stable")] == ["b-stable"]
    assert [g.group_id for g in _list(sim, "EMPTY", "Dead")] == ["a-empty", "c-simple"]
    assert _list(sim, "bogus") == []
    assert sim.coord.group_counts_by_state() == {
        "Empty": 2, "PreparingRebalance": 0, "CompletingRebalance": 0, "Stable": 1}
    assert sim.coord.member_count() == 1


def test_delete_groups() -> None:
    sim = Sim()
    form_group(sim, [Member(sim, group_id="busy")])
    Member(sim, group_id="idle").commit({("t", 0): 1, ("u", 1): 2}, generation_id=-1)
    results = _delete(sim, "idle", "busy", "nope", "idle")
    assert [(r.group_id, r.error_code) for r in results] == [
        ("idle", ErrorCode.NONE), ("busy", ErrorCode.NON_EMPTY_GROUP),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND), ("idle", ErrorCode.GROUP_ID_NOT_FOUND)]
    assert sim.records[-3:] == [OffsetDeleteRecord("idle", "t", 0),
                                OffsetDeleteRecord("idle", "u", 1), GroupDeleteRecord("idle")]
    assert sim.coord.committed("idle") == {}
    assert sim.state("idle") == "Dead"
    deleted = sim.events_of("group_deleted")
    assert [(e.group_id, e.reason) for e in deleted] == [("idle", "delete-groups")]
    assert sim.coord.group_ids() == ["busy"]


def test_delete_empty_group_with_pending_id_cancels_its_timer() -> None:
    sim = Sim()
    p = Member(sim)
    p.send_join()
    assert ("session", "g", p.member_id) in sim.timers
    assert _delete(sim, "g")[0].error_code == ErrorCode.NONE
    assert ("session", "g", p.member_id) not in sim.timers
    resp = p.send_join()
    assert resp is not None and resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
