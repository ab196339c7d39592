"""Member ownership (docs/protocol.md §7.5): a member id, and a static member's instance id,
belong to the principal whose JoinGroup created the member; other principals naming it
are refused GROUP_AUTHORIZATION_FAILED, super users are not, unauthenticated members are
nobody's."""

from __future__ import annotations

import msgpack
import pytest

from groupwire.broker.coordinator import (
    ANONYMOUS,
    GroupMetadataRecord,
    GroupRecord,
    RequestContext,
    Result,
    record_from_kv,
)
from groupwire.protocol.codec import decode_heartbeat, encode_request
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    Request,
    SyncGroupResponse,
)
from groupwire.protocol.steps import run_steps

from .coord_sim import Member, Sim, form_group

ALICE = "User:alice"
MALLORY = "User:mallory"
ADMIN = "User:admin"
REFUSED = ErrorCode.GROUP_AUTHORIZATION_FAILED


class PSim(Sim):
    """The simulated shell, with a principal per connection (ANONYMOUS unless set)."""

    def __init__(self, **kwargs: object) -> None:
        self.principals: dict[int, str] = {}
        self.superusers: set[str] = {ADMIN}
        super().__init__(**kwargs)  # type: ignore[arg-type]

    def ctx(self, conn: int, cid: int, client_id: str = "c") -> RequestContext:
        principal = self.principals.get(conn, ANONYMOUS)
        return RequestContext(conn, cid, client_id, "/10.0.0.1", principal,
                              principal in self.superusers)

    def send(self, request: Request, conn: int = 0, client_id: str = "c",
             host: str = "/10.0.0.1") -> int:
        cid = next(self._cids)
        self.apply(self.coord.handle(self.ctx(conn, cid, client_id), request, self.now))
        self.fire_due()
        return cid


def member_as(sim: PSim, principal: str, **kwargs: object) -> Member:
    m = Member(sim, **kwargs)  # type: ignore[arg-type]
    sim.principals[m.conn] = principal
    return m


def posing_as(sim: PSim, victim: Member, principal: str) -> Member:
    """A client on its own connection naming ``victim``'s member id and instance id."""
    m = member_as(sim, principal, instance_id=victim.instance_id)
    m.member_id, m.generation_id = victim.member_id, victim.generation_id
    return m


def alices_group(*, static: bool = False) -> tuple[PSim, Member]:
    sim = PSim()
    alice = member_as(sim, ALICE, instance_id="i1" if static else None)
    form_group(sim, [alice])
    return sim, alice


def owner(sim: Sim, member_id: str) -> str:
    group = sim.coord.view.group("g")
    assert group is not None
    return group.members[member_id].principal


def members_of(sim: Sim) -> list[str]:
    group = sim.coord.view.group("g")
    assert group is not None
    return list(group.members)


def heartbeat_answer(m: Member, **kwargs: int) -> HeartbeatResponse:
    cid = m.heartbeat(**kwargs)
    resp = m.sim.reply(m.conn, cid)
    assert isinstance(resp, HeartbeatResponse)
    return resp


def assert_message_hides_owner(message: str | None, named: str) -> None:
    assert message is not None and named in message and "another principal" in message
    assert "alice" not in message


# --- who owns a member -------------------------------------------------------------------


def test_a_member_belongs_to_the_principal_whose_join_created_it() -> None:
    sim, alice = alices_group()
    assert owner(sim, alice.member_id) == ALICE


def test_an_unauthenticated_member_is_unowned_and_anyone_may_use_it() -> None:
    sim = PSim()
    anon = Member(sim)
    form_group(sim, [anon])
    assert owner(sim, anon.member_id) == ""
    assert posing_as(sim, anon, MALLORY).hb() == ErrorCode.NONE


# --- Heartbeat ---------------------------------------------------------------------------


def test_heartbeat_naming_another_principals_member_is_refused() -> None:
    sim, alice = alices_group()
    resp = heartbeat_answer(posing_as(sim, alice, MALLORY))
    assert resp.error_code == REFUSED
    assert_message_hides_owner(resp.error_message, alice.member_id)
    assert alice.hb() == ErrorCode.NONE


def test_an_outsiders_expired_poll_age_does_not_remove_the_member() -> None:
    sim, alice = alices_group()
    assert posing_as(sim, alice, MALLORY).hb(poll_age_ms=10**9) == REFUSED
    assert members_of(sim) == [alice.member_id]
    assert sim.state("g") == "Stable"


def test_heartbeat_by_the_same_principal_on_another_connection_is_allowed() -> None:
    sim, alice = alices_group()
    assert posing_as(sim, alice, ALICE).hb() == ErrorCode.NONE


def test_heartbeat_by_a_super_user_is_allowed() -> None:
    sim, alice = alices_group()
    assert posing_as(sim, alice, ADMIN).hb() == ErrorCode.NONE


def test_an_unknown_member_is_still_unknown_to_an_outsider() -> None:
    sim, alice = alices_group()
    stranger = member_as(sim, MALLORY)
    stranger.member_id, stranger.generation_id = "nobody", alice.generation_id
    assert stranger.hb() == ErrorCode.UNKNOWN_MEMBER_ID


def test_the_fast_path_leaves_an_owned_member_on_a_new_connection_to_the_full_path() -> None:
    sim, alice = alices_group()
    request = HeartbeatRequest(group_id="g", generation_id=alice.generation_id,
                               member_id=alice.member_id)
    fields = decode_heartbeat(encode_request(7, request, "c"))
    assert fields is not None
    outsider = sim.new_conn()
    assert sim.coord.renew(outsider, fields, sim.now) is None
    assert sim.coord.renew(alice.conn, fields, sim.now) is not None  # attached: its own


# --- SyncGroup ---------------------------------------------------------------------------


def test_sync_naming_another_principals_member_is_refused() -> None:
    sim, alice = alices_group()
    m = posing_as(sim, alice, MALLORY)
    resp = m.send_sync()
    assert isinstance(resp, SyncGroupResponse) and resp.error_code == REFUSED
    assert_message_hides_owner(resp.error_message, alice.member_id)
    same = posing_as(sim, alice, ALICE).send_sync()
    assert same is not None and same.error_code == ErrorCode.NONE


def test_a_leaders_sync_from_an_outsider_installs_no_assignment() -> None:
    sim = PSim()
    alice = member_as(sim, ALICE)
    alice.join()
    sim.step_through(sim.config.initial_rebalance_delay_ms)
    assert alice.join_response() is not None
    m = posing_as(sim, alice, MALLORY)
    m.generation_id = alice.generation_id
    resp = m.send_sync({alice.member_id: b"stolen"})
    assert resp is not None and resp.error_code == REFUSED
    assert sim.state("g") == "CompletingRebalance"


# --- LeaveGroup --------------------------------------------------------------------------


def _leave(sim: PSim, conn: int, *identities: MemberIdentity) -> LeaveGroupResponse:
    resp = sim.call(LeaveGroupRequest(group_id="g", members=list(identities)), conn)
    assert isinstance(resp, LeaveGroupResponse)
    return resp


def test_leave_naming_another_principals_member_is_refused_per_member() -> None:
    sim = PSim()
    alice, bob = member_as(sim, ALICE), member_as(sim, MALLORY)
    form_group(sim, [alice, bob])
    resp = _leave(sim, bob.conn, MemberIdentity(member_id=alice.member_id),
                  MemberIdentity(member_id=bob.member_id))
    assert resp.error_code == ErrorCode.NONE
    assert [m.error_code for m in resp.members] == [REFUSED, ErrorCode.NONE]
    assert_message_hides_owner(resp.members[0].error_message, alice.member_id)
    assert members_of(sim) == [alice.member_id]


def test_leave_by_instance_id_of_another_principals_static_member_is_refused() -> None:
    sim, alice = alices_group(static=True)
    outsider = sim.new_conn()
    sim.principals[outsider] = MALLORY
    resp = _leave(sim, outsider, MemberIdentity(member_id="", group_instance_id="i1"))
    assert [m.error_code for m in resp.members] == [REFUSED]
    assert_message_hides_owner(resp.members[0].error_message, "i1")
    assert members_of(sim) == [alice.member_id]


@pytest.mark.parametrize("principal", [ALICE, ADMIN])
def test_leave_by_the_owner_or_a_super_user_removes_the_member(principal: str) -> None:
    sim, _ = alices_group(static=True)
    conn = sim.new_conn()
    sim.principals[conn] = principal
    resp = _leave(sim, conn, MemberIdentity(member_id="", group_instance_id="i1"))
    assert [m.error_code for m in resp.members] == [ErrorCode.NONE]
    assert members_of(sim) == []


# --- OffsetCommit ------------------------------------------------------------------------


def _commit_request(m: Member, offset: int, partitions: int = 1) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id="g", generation_id=m.generation_id, member_id=m.member_id,
        group_instance_id=m.instance_id, topics=[OffsetCommitRequestTopic(name="t", partitions=[
            OffsetCommitRequestPartition(partition_index=p, committed_offset=offset)
            for p in range(partitions)])])


def test_commit_naming_another_principals_member_is_refused() -> None:
    sim, alice = alices_group()
    m = posing_as(sim, alice, MALLORY)
    resp = sim.call(_commit_request(m, 99), m.conn)
    assert isinstance(resp, OffsetCommitResponse)
    [answer] = resp.topics[0].partitions
    assert answer.error_code == REFUSED
    assert_message_hides_owner(answer.error_message, alice.member_id)
    assert sim.coord.committed("g") == {}
    assert posing_as(sim, alice, ALICE).commit({("t", 0): 5}) == {("t", 0): ErrorCode.NONE}
    assert posing_as(sim, alice, ADMIN).commit({("t", 0): 6}) == {("t", 0): ErrorCode.NONE}
    assert sim.coord.committed("g") == {("t", 0): 6}


def test_a_large_commit_in_steps_is_refused_alike() -> None:
    sim, alice = alices_group()
    m = posing_as(sim, alice, MALLORY)
    steps = sim.coord.offset_commit_steps(sim.ctx(m.conn, 1), _commit_request(m, 1, 6), sim.now)
    outcome = run_steps(steps)
    assert isinstance(outcome, Result)
    [reply] = outcome.replies
    assert isinstance(reply.response, OffsetCommitResponse)
    assert {p.error_code for p in reply.response.topics[0].partitions} == {REFUSED}


# --- JoinGroup ---------------------------------------------------------------------------


def test_join_with_another_principals_member_id_is_refused() -> None:
    sim, alice = alices_group()
    generation = alice.generation_id
    resp = posing_as(sim, alice, MALLORY).send_join()
    assert isinstance(resp, JoinGroupResponse) and resp.error_code == REFUSED
    assert resp.member_id == alice.member_id
    assert_message_hides_owner(resp.error_message, alice.member_id)
    group = sim.coord.view.group("g")
    assert group is not None and group.generation_id == generation
    assert sim.state("g") == "Stable"  # no rebalance


def test_join_over_max_size_with_another_principals_id_does_not_remove_it() -> None:
    sim, alice = alices_group()
    engine = sim.coord._engine
    engine.config = type(engine.config)(**{**engine.config.__dict__, "group_max_size": 0})
    resp = posing_as(sim, alice, MALLORY).send_join()
    assert resp is not None and resp.error_code == REFUSED
    assert members_of(sim) == [alice.member_id]


def test_static_takeover_by_another_principal_is_refused() -> None:
    sim, alice = alices_group(static=True)
    thief = member_as(sim, MALLORY, instance_id="i1")
    resp = thief.send_join()
    assert isinstance(resp, JoinGroupResponse) and resp.error_code == REFUSED
    assert resp.member_id == ""
    assert_message_hides_owner(resp.error_message, "i1")
    group = sim.coord.view.group("g")
    assert group is not None and group.static_members == {"i1": alice.member_id}
    assert alice.hb() == ErrorCode.NONE  # not fenced


@pytest.mark.parametrize("principal", [ALICE, ADMIN])
def test_static_replacement_keeps_the_instance_its_principals(principal: str) -> None:
    sim, alice = alices_group(static=True)
    restarted = member_as(sim, principal, instance_id="i1")
    resp = restarted.send_join()
    assert resp is not None and resp.error_code == ErrorCode.NONE
    assert restarted.member_id != alice.member_id
    assert owner(sim, restarted.member_id) == ALICE
    assert posing_as(sim, restarted, MALLORY).hb() == REFUSED


def test_an_unowned_static_instance_becomes_the_replacing_principals() -> None:
    sim = PSim()
    anon = Member(sim, instance_id="i1")
    form_group(sim, [anon])
    restarted = member_as(sim, ALICE, instance_id="i1")
    resp = restarted.send_join()
    assert resp is not None and resp.error_code == ErrorCode.NONE
    assert owner(sim, restarted.member_id) == ALICE


# --- DescribeGroups ----------------------------------------------------------------------


def test_describe_is_not_affected() -> None:
    sim, alice = alices_group()
    conn = sim.new_conn()
    sim.principals[conn] = MALLORY
    resp = sim.call(DescribeGroupsRequest(groups=["g"]), conn)
    assert isinstance(resp, DescribeGroupsResponse)
    assert [m.member_id for m in resp.groups[0].members] == [alice.member_id]


# --- Fetch fencing -----------------------------------------------------------------------


def _fetch_group(m: Member) -> FetchGroup:
    return FetchGroup(group_id="g", member_id=m.member_id, generation_id=m.generation_id,
                      group_instance_id=m.instance_id)


def test_fetch_naming_another_principals_member_is_refused() -> None:
    sim, alice = alices_group()
    check = sim.coord.check_fetch(_fetch_group(alice), [("t", 0)], MALLORY)
    assert check.error_code == REFUSED
    assert_message_hides_owner(check.error_message, alice.member_id)
    assert sim.coord.check_fetch(_fetch_group(alice), [("t", 0)]).error_code == REFUSED
    assert sim.coord.check_fetch(_fetch_group(alice), [("t", 0)], ALICE).error_code \
        == ErrorCode.NONE
    assert sim.coord.check_fetch(_fetch_group(alice), [("t", 0)], ADMIN,
                                 superuser=True).error_code == ErrorCode.NONE


# --- persistence -------------------------------------------------------------------------


def _reloaded(sim: PSim) -> PSim:
    after = PSim(start=False, now=sim.now)
    after.coord.load(sim.records, sim.now)
    after.apply(after.coord.start(sim.now))
    return after


def test_ownership_survives_a_reload_from_the_records() -> None:
    sim, alice = alices_group(static=True)
    records = [record_from_kv(*r.to_kv()) for r in sim.records]  # through the bytes
    sim.records = records
    after = _reloaded(sim)
    assert owner(after, alice.member_id) == ALICE
    assert posing_as(after, alice, MALLORY).hb() == REFUSED
    assert posing_as(after, alice, ALICE).hb() == ErrorCode.NONE
    takeover = member_as(after, MALLORY, instance_id="i1").send_join()
    assert takeover is not None and takeover.error_code == REFUSED


def test_ownership_survives_a_partition_load() -> None:
    sim, alice = alices_group()
    after = PSim(start=False, now=sim.now)
    after.coord._engine.offsets_partitions = 1
    after.apply(after.coord.load_partition(0, sim.records, sim.now))
    assert owner(after, alice.member_id) == ALICE


def test_an_unowned_member_is_written_as_before() -> None:
    sim = PSim()
    form_group(sim, [Member(sim)])
    group_records = [r for r in sim.records if isinstance(r, GroupMetadataRecord) and r.members]
    _, value = group_records[-1].to_kv()
    assert value is not None
    assert all("principal" not in m for m in msgpack.unpackb(value)["members"])


def test_an_old_record_without_the_field_loads_unowned() -> None:
    sim, alice = alices_group()
    old: list[GroupRecord] = []
    for record in sim.records:
        key, value = record.to_kv()
        if isinstance(record, GroupMetadataRecord) and value is not None:
            decoded = msgpack.unpackb(value)
            for m in decoded["members"]:
                m.pop("principal", None)  # as written before ownership existed
            value = msgpack.packb(decoded, use_bin_type=True)
        old.append(record_from_kv(key, value))
    sim.records = old
    after = _reloaded(sim)
    assert owner(after, alice.member_id) == ""
    assert posing_as(after, alice, MALLORY).hb() == ErrorCode.NONE
