"""Records: key/value round trips, and load() rebuilding groups after a restart."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwire.broker.coordinator import (
    GroupDeleteRecord,
    GroupMetadataRecord,
    GroupRecord,
    MemberRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
    record_from_kv,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import FetchGroup

from .coord_sim import Member, Sim, assignment, form_group, join_all

text = st.text(max_size=20)
ints = st.integers(-(2**63), 2**63 - 1)
members = st.builds(
    MemberRecord, member_id=text, group_instance_id=st.none() | text, client_id=text,
    client_host=text, session_timeout_ms=ints, rebalance_timeout_ms=ints,
    protocols=st.lists(st.tuples(text, st.binary(max_size=20)), max_size=3).map(tuple),
    assignment=st.binary(max_size=30))
records = st.one_of(
    st.builds(OffsetCommitRecord, text, text, ints, ints, text, ints),
    st.builds(OffsetDeleteRecord, text, text, ints),
    st.builds(GroupMetadataRecord, group_id=text, protocol_type=st.none() | text,
              protocol_name=st.none() | text, generation_id=ints, leader_id=st.none() | text,
              state=st.sampled_from(["Empty", "CompletingRebalance", "Stable"]),
              state_ms=ints, members=st.lists(members, max_size=3).map(tuple)),
    st.builds(GroupDeleteRecord, text),
)


@given(records)
def test_every_record_round_trips(record: GroupRecord) -> None:
    key, value = record.to_kv()
    assert record_from_kv(key, value) == record


def test_keys_name_what_they_overwrite() -> None:
    commit = OffsetCommitRecord("g", "t", 1, 5, "", 0)
    assert commit.to_kv()[0] == OffsetDeleteRecord("g", "t", 1).to_kv()[0]
    assert OffsetDeleteRecord("g", "t", 1).to_kv()[1] is None
    assert commit.to_kv()[0] != OffsetCommitRecord("g", "t", 2, 5, "", 0).to_kv()[0]
    group = GroupMetadataRecord("g", "consumer", None, 0, None, "Empty", 0, ())
    assert group.to_kv()[0] == GroupDeleteRecord("g").to_kv()[0]
    assert group.to_kv()[0] != commit.to_kv()[0]


@pytest.mark.parametrize("key,value", [
    (b"\xc1", None), (b"\x90", None), (b"\x92\xa5group\x01", None),
    (b"\x92\xa5group\xa1g", b"\x80"), (b"\x94\xa6offset\xa1g\xa1t\xa1x", b"\x80"),
    (b"\x92\xa4what\xa1g", None)])
def test_malformed_records_raise_value_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(ValueError):
        record_from_kv(key, value)


def _restart(sim: Sim, *, now: int) -> Sim:
    """A new coordinator fed the persisted records, as the shell does at start."""
    stored = [r.to_kv() for r in sim.records]
    fresh = Sim(sim.config, now=now, start=False)
    fresh.coord.load([record_from_kv(k, v) for k, v in stored], now)
    fresh.apply(fresh.coord.start(now))
    return fresh


def _rebind(m: Member, sim: Sim) -> Member:
    return Member(sim, group_id=m.group_id, client_id=m.client_id, instance_id=m.instance_id,
                  session_timeout_ms=m.session_timeout_ms, member_id=m.member_id,
                  generation_id=m.generation_id, protocols=m.protocols)


def test_restart_restores_a_stable_group_whose_members_carry_on() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b", session_timeout_ms=20_000)
    form_group(sim, [a, b])
    assert a.commit({("t", 0): 7}) == {("t", 0): ErrorCode.NONE}
    before = sim.describe("g")
    after = _restart(sim, now=sim.now + 5000)
    restored = after.describe("g")
    assert (restored.group_state, restored.generation_id, restored.leader_id,
            restored.protocol_data) == ("Stable", 1, before.leader_id, "range")
    assert [(m.member_id, m.member_assignment) for m in restored.members] == [
        (m.member_id, m.member_assignment) for m in before.members]
    assert after.coord.committed("g") == {("t", 0): 7}
    a2, b2 = _rebind(a, after), _rebind(b, after)
    assert a2.hb() == ErrorCode.NONE
    assert after.coord.check_fetch(FetchGroup(group_id="g", member_id=a.member_id,
                                              generation_id=1), [("t", 1)]).not_owned == {
        ("t", 1)}
    # b never comes back: its session, armed at load, removes it
    for _ in range(3):
        after.advance(6000)
        assert a2.hb() == ErrorCode.NONE
    assert after.state("g") == "Stable"
    after.advance(2000)  # 20 s after the load
    assert after.state("g") == "PreparingRebalance"
    assert b2.hb() == ErrorCode.UNKNOWN_MEMBER_ID
    assert after.events_of("member_expired")[0].member_id == b.member_id


def test_restart_in_completing_rebalance_waits_for_syncs() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=8000)
    join_all(sim, [a])
    assert sim.records[-1].state == "CompletingRebalance"  # type: ignore[union-attr]
    after = _restart(sim, now=sim.now)
    a2 = _rebind(a, after)
    assert after.state("g") == "CompletingRebalance"
    resp = a2.send_sync({a.member_id: assignment(("t", 0))})
    assert resp is not None and resp.error_code == ErrorCode.NONE
    assert after.state("g") == "Stable"


def test_restart_in_completing_rebalance_without_syncs_times_out() -> None:
    sim = Sim()
    a = Member(sim, client_id="a", rebalance_timeout_ms=8000, session_timeout_ms=60_000)
    join_all(sim, [a])
    after = _restart(sim, now=sim.now)
    after.advance(8000)
    d = after.describe("g")
    assert (d.group_state, d.generation_id) == ("Empty", 2)


def test_restart_after_deletes_and_emptying() -> None:
    sim = Sim()
    a = Member(sim, group_id="gone")
    form_group(sim, [a])
    a.leave()
    Member(sim, group_id="gone").commit({("t", 0): 1}, generation_id=-1)
    b = Member(sim, group_id="stays")
    form_group(sim, [b])
    b.leave()
    from groupwire.protocol.messages import DeleteGroupsRequest

    sim.call(DeleteGroupsRequest(groups_names=["gone"]))
    after = _restart(sim, now=sim.now)
    assert after.state("gone") == "Dead"
    assert after.coord.committed("gone") == {}
    d = after.describe("stays")
    assert (d.group_state, d.generation_id, d.protocol_type) == ("Empty", 2, "consumer")
    # offsets of a simple group survive without any group record
    Member(sim, group_id="simple").commit({("u", 2): 9}, generation_id=-1)
    again = _restart(sim, now=sim.now)
    assert again.coord.committed("simple") == {("u", 2): 9}
    assert again.describe("simple").group_state == "Empty"
