"""OffsetCommit validation (docs/design/kafka.md §10.1), OffsetFetch (§10.2), retention (§10.3)."""

from __future__ import annotations

from dataclasses import replace

from groupwire.broker.coordinator import GroupDeleteRecord, OffsetCommitRecord, OffsetDeleteRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)

from .coord_sim import TEST_CONFIG, Member, Sim, form_group, join_all, sub

E = ErrorCode


def _fetch(sim: Sim, group_id: str,
           topics: list[tuple[str, list[int]]] | None) -> OffsetFetchResponse:
    resp = sim.call(OffsetFetchRequest(group_id=group_id, topics=None if topics is None else [
        OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics]))
    assert isinstance(resp, OffsetFetchResponse)
    return resp


def test_generation_minus_one_on_missing_group_creates_a_simple_group() -> None:
    sim = Sim()
    admin = Member(sim, group_id="simple")
    assert admin.commit({("t", 0): 5, ("t", 1): 7}, generation_id=-1) == {
        ("t", 0): E.NONE, ("t", 1): E.NONE}
    described = sim.describe("simple")
    assert (described.group_state, described.protocol_type) == ("Empty", "")
    assert sim.coord.committed("simple") == {("t", 0): 5, ("t", 1): 7}
    assert sim.records == [OffsetCommitRecord("simple", "t", 0, 5, "", 0),
                           OffsetCommitRecord("simple", "t", 1, 7, "", 0)]


def test_missing_group_with_a_generation_is_illegal_generation() -> None:
    sim = Sim()
    m = Member(sim, group_id="nope", member_id="x")
    assert m.commit({("t", 0): 1}, generation_id=0) == {("t", 0): E.ILLEGAL_GENERATION}
    assert sim.state("nope") == "Dead"


def test_commit_validation_against_a_stable_group() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    form_group(sim, [a, b])
    owned = ("t", 0) if a.member_id < b.member_id else ("t", 1)
    assert a.commit({owned: 1}) == {owned: E.NONE}
    assert a.commit({owned: 1}, generation_id=0) == {owned: E.ILLEGAL_GENERATION}
    assert a.commit({owned: 1}, member_id="ghost") == {owned: E.UNKNOWN_MEMBER_ID}
    # no member, no generation: only an Empty group takes that
    assert a.commit({owned: 1}, generation_id=-1, member_id="") == {owned: E.UNKNOWN_MEMBER_ID}
    # a group-level error is repeated on every partition
    assert a.commit({("t", 0): 1, ("u", 3): 2}, generation_id=9) == {
        ("t", 0): E.ILLEGAL_GENERATION, ("u", 3): E.ILLEGAL_GENERATION}


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    sim = Sim()
    a = Member(sim)
    join_all(sim, [a])
    assert sim.state("g") == "CompletingRebalance"
    assert a.commit({("t", 0): 1}) == {("t", 0): E.REBALANCE_IN_PROGRESS}


def test_commit_during_preparing_rebalance_is_accepted_and_keeps_session() -> None:
    sim = Sim()
    a, b = Member(sim, client_id="a"), Member(sim, client_id="b")
    leader = form_group(sim, [a, b])
    assert leader is a
    a.send_join()  # the leader re-joins: PreparingRebalance, generation still 1
    assert sim.state("g") == "PreparingRebalance"
    sim.advance(2000)
    offsets = {("t", p): 10 for p in (1, 3, 5)}  # b's partitions in generation 1
    assert b.commit(offsets) == dict.fromkeys(offsets, E.NONE)
    assert sim.timer_deadline(("session", "g", b.member_id)) == sim.now + b.session_timeout_ms


def test_commit_on_empty_group_with_generation_minus_one() -> None:
    sim = Sim()
    a = Member(sim)
    form_group(sim, [a])
    a.leave()
    assert sim.state("g") == "Empty"
    tool = Member(sim, member_id="whatever")
    assert tool.commit({("t", 0): 3}, generation_id=-1) == {("t", 0): E.NONE}
    assert a.commit({("t", 0): 4}) == {("t", 0): E.UNKNOWN_MEMBER_ID}  # generation 1


def test_static_member_commit_identity_checks() -> None:
    sim = Sim()
    s = Member(sim, instance_id="new-instance-id")
    form_group(sim, [s])
    s.instance_id = "old-instance-id"
    assert s.commit({("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}  # not FENCED
    other = Member(sim, instance_id="new-instance-id", member_id="stale", generation_id=1)
    assert other.commit({("t", 0): 1}) == {("t", 0): E.FENCED_INSTANCE_ID}


def test_per_partition_errors_metadata_and_unknown_topics() -> None:
    sim = Sim(replace(TEST_CONFIG, offset_metadata_max_bytes=4))
    tool = Member(sim, group_id="s")
    resp = sim.call(OffsetCommitRequest(group_id="s", topics=[
        OffsetCommitRequestTopic(name="t", partitions=[
            OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                         committed_metadata="abcd"),
            OffsetCommitRequestPartition(partition_index=1, committed_offset=1,
                                         committed_metadata="abcde"),
            OffsetCommitRequestPartition(partition_index=6, committed_offset=1),
            OffsetCommitRequestPartition(partition_index=-1, committed_offset=1)]),
        OffsetCommitRequestTopic(name="missing", partitions=[
            OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
        tool.conn)
    assert isinstance(resp, OffsetCommitResponse)
    codes = [[p.error_code for p in t.partitions] for t in resp.topics]
    assert codes == [[E.NONE, E.OFFSET_METADATA_TOO_LARGE, E.UNKNOWN_TOPIC_OR_PARTITION,
                      E.UNKNOWN_TOPIC_OR_PARTITION], [E.UNKNOWN_TOPIC_OR_PARTITION]]
    assert sim.coord.committed("s") == {("t", 0): 1}


def test_offset_fetch() -> None:
    sim = Sim()
    assert _fetch(sim, "nope", None) == OffsetFetchResponse(topics=[])
    assert _fetch(sim, "nope", [("t", [0])]) == OffsetFetchResponse(topics=[
        OffsetFetchResponseTopic(name="t", partitions=[
            OffsetFetchResponsePartition(partition_index=0, committed_offset=-1,
                                         metadata="")])])
    tool = Member(sim, group_id="s")
    tool.commit({("u", 1): 11, ("t", 2): 5}, generation_id=-1, metadata="m")
    assert _fetch(sim, "s", None) == OffsetFetchResponse(topics=[
        OffsetFetchResponseTopic(name="t", partitions=[
            OffsetFetchResponsePartition(partition_index=2, committed_offset=5, metadata="m")]),
        OffsetFetchResponseTopic(name="u", partitions=[
            OffsetFetchResponsePartition(partition_index=1, committed_offset=11,
                                         metadata="m")])])
    resp = _fetch(sim, "s", [("t", [2, 3])])
    assert [(p.partition_index, p.committed_offset) for p in resp.topics[0].partitions] == [
        (2, 5), (3, -1)]


# --- retention ----------------------------------------------------------------------------

RETENTION = replace(TEST_CONFIG, offsets_retention_ms=10_000,
                    offsets_retention_check_interval_ms=1000)


def test_simple_group_offsets_expire_by_commit_time_then_group_is_deleted() -> None:
    sim = Sim(RETENTION)
    tool = Member(sim, group_id="s")
    tool.commit({("t", 0): 1}, generation_id=-1)
    sim.advance(5000)
    tool.commit({("t", 1): 1}, generation_id=-1)
    sim.advance(5000)  # t-0 is 10 s old, t-1 5 s
    assert sim.coord.committed("s") == {("t", 1): 1}
    assert OffsetDeleteRecord("s", "t", 0) in sim.records
    assert sim.state("s") == "Empty"
    sim.advance(5000)
    assert sim.coord.committed("s") == {}
    assert sim.state("s") == "Dead"
    assert sim.records[-2:] == [OffsetDeleteRecord("s", "t", 1), GroupDeleteRecord("s")]
    deleted = sim.events_of("group_deleted")
    assert [(e.group_id, e.reason) for e in deleted] == [("s", "offsets-expired")]


def test_consumer_group_offsets_wait_for_the_group_to_be_empty() -> None:
    sim = Sim(RETENTION)
    a = Member(sim, session_timeout_ms=60_000, protocols=[("range", sub("t"))])
    form_group(sim, [a])
    a.commit({("t", 0): 1, ("u", 0): 2})  # u is not subscribed
    for _ in range(12):
        sim.advance(1000)
        assert a.hb() == E.NONE
    # Stable: the unsubscribed topic's offset expired by commit time, t's did not
    assert sim.coord.committed("g") == {("t", 0): 1}
    a.leave()
    emptied_at = sim.now
    sim.advance(9000)
    assert sim.coord.committed("g") == {("t", 0): 1}
    sim.advance_to(emptied_at + 10_000)
    assert sim.coord.committed("g") == {}
    assert sim.state("g") == "Dead"


def test_empty_group_without_offsets_is_deleted_at_the_next_sweep() -> None:
    sim = Sim(RETENTION)
    a = Member(sim)
    form_group(sim, [a])
    a.leave()
    sim.advance(1000)
    assert sim.state("g") == "Dead"
    assert sim.records[-1] == GroupDeleteRecord("g")


def test_group_with_a_pending_member_id_is_not_swept() -> None:
    sim = Sim(RETENTION)
    p = Member(sim, session_timeout_ms=5000)
    p.send_join()
    sim.advance(1000)
    assert sim.state("g") == "Empty"
    sim.step_through(5000)  # the pending id expires at 5000, the sweep at 6000 takes it
    assert sim.state("g") == "Dead"

