"""A write's outcome as an input (issue 24 item 7): a commit is not visible until its
write is stored; a failed write's offsets are dropped and its answers say why, whatever
the order the outcomes arrive in. Nothing is reverted to a "before"."""

from __future__ import annotations

import dataclasses

import pytest

from groupwire.broker.coordinator import OffsetDeleteRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)

from .coord_sim import TEST_CONFIG, Member, Sim, form_group
from .test_partition_load import P, cluster_sim, persisted

NONE = ErrorCode.NONE
TP = ("t", 0)


def _commit(sim: Sim, offset: int, group_id: str = "g",
            member: Member | None = None) -> tuple[int, int, int | None]:
    """Send a commit of ``t-0``; returns (conn, cid, token of its write if held)."""
    conn = member.conn if member is not None else 50
    held = len(sim.held)
    cid = sim.send(OffsetCommitRequest(
        group_id=group_id,
        generation_id=member.generation_id if member is not None else -1,
        member_id=member.member_id if member is not None else "",
        topics=[OffsetCommitRequestTopic(name="t", partitions=[
            OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]),
        conn)
    return conn, cid, sim.held[-1] if len(sim.held) > held else None


def _code(sim: Sim, conn: int, cid: int) -> ErrorCode | None:
    response = sim.reply(conn, cid)
    if response is None:
        return None
    assert isinstance(response, OffsetCommitResponse)
    return ErrorCode(response.topics[0].partitions[0].error_code)


def _fetched(sim: Sim, group_id: str = "g") -> int:
    response = sim.call(OffsetFetchRequest(group_id=group_id, topics=[
        OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), conn=998)
    assert isinstance(response, OffsetFetchResponse)
    return response.topics[0].partitions[0].committed_offset


def _group() -> tuple[Sim, Member]:
    sim = Sim()
    a = Member(sim, client_id="a")
    form_group(sim, [a])
    return sim, a


@pytest.mark.parametrize("code", [ErrorCode.KAFKA_STORAGE_ERROR,
                                  ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  ErrorCode.NOT_COORDINATOR])
def test_two_failed_commits_over_a_pending_one_leave_the_stored_offset(
        code: ErrorCode) -> None:
    """The chaos run's scenario: 190 stored; 191 and an overlapping 192 pending, then
    both failed. The old shell reverted 192 to its "before", 191, a commit nobody was
    told succeeded; OffsetFetch then showed 191, and a failover went back to 190."""
    sim, a = _group()
    conn, cid, _ = _commit(sim, 190, member=a)
    assert _code(sim, conn, cid) is NONE
    sim.hold_writes = True
    conn1, cid1, t191 = _commit(sim, 191, member=a)
    conn2, cid2, t192 = _commit(sim, 192, member=a)
    assert t191 is not None and t192 is not None and t191 < t192
    assert _code(sim, conn1, cid1) is None and _code(sim, conn2, cid2) is None  # held
    assert _fetched(sim) == 190  # pending commits are not shown
    sim.failed(t192, code)  # outcomes in any order: the later one first
    assert _fetched(sim) == 190
    sim.failed(t191, code)
    assert _fetched(sim) == 190 and sim.coord.committed("g") == {TP: 190}
    assert _code(sim, conn1, cid1) == _code(sim, conn2, cid2) == code
    response = sim.reply(conn1, cid1)
    assert isinstance(response, OffsetCommitResponse)
    assert response.topics[0].partitions[0].error_message
    assert sim.coord.pending_writes() == []


def test_a_later_commit_stored_first_stays() -> None:
    sim, a = _group()
    sim.hold_writes = True
    _, _, t191 = _commit(sim, 191, member=a)
    _, _, t192 = _commit(sim, 192, member=a)
    assert t191 is not None and t192 is not None
    sim.stored(t192)
    assert _fetched(sim) == 192
    sim.stored(t191)  # outcomes out of order (a cluster settles partitions apart)
    assert _fetched(sim) == 192


def test_a_later_commit_stored_first_stays_while_another_pends() -> None:
    sim, a = _group()
    sim.hold_writes = True
    _, _, t1 = _commit(sim, 1, member=a)
    _, _, t2 = _commit(sim, 2, member=a)
    _, _, t3 = _commit(sim, 3, member=a)
    assert t1 is not None and t2 is not None and t3 is not None
    sim.stored(t3)
    sim.stored(t1)
    assert _fetched(sim) == 3
    sim.failed(t2)
    assert _fetched(sim) == 3
    _, _, t4 = _commit(sim, 4, member=a)
    assert t4 is not None
    sim.stored(t4)
    assert _fetched(sim) == 4


def test_an_earlier_commit_stored_after_a_failed_later_one_shows() -> None:
    sim, a = _group()
    sim.hold_writes = True
    _, _, t1 = _commit(sim, 1, member=a)
    _, _, t2 = _commit(sim, 2, member=a)
    assert t1 is not None and t2 is not None
    sim.failed(t2)
    assert _fetched(sim) == -1
    sim.stored(t1)
    assert _fetched(sim) == 1


def test_offset_fetch_never_shows_a_pending_commit() -> None:
    sim, a = _group()
    sim.hold_writes = True
    conn, cid, token = _commit(sim, 5, member=a)
    assert token is not None
    assert _fetched(sim) == -1 and sim.coord.committed("g") == {}
    sim.stored(token)
    assert _code(sim, conn, cid) is NONE and _fetched(sim) == 5


def test_a_commit_refused_whole_writes_nothing_and_is_answered_at_once() -> None:
    sim, a = _group()
    sim.hold_writes = True
    a.generation_id += 1
    conn, cid, token = _commit(sim, 5, member=a)
    assert token is None and _code(sim, conn, cid) == ErrorCode.ILLEGAL_GENERATION


def test_deleting_the_group_drops_its_pending_commits() -> None:
    sim = Sim()
    sim.hold_writes = True
    _, _, token = _commit(sim, 7, group_id="simple")
    assert token is not None
    sim.hold_writes = False
    response = sim.call(DeleteGroupsRequest(groups_names=["simple"]))
    assert response.results[0].error_code == NONE  # type: ignore[attr-defined]
    # its pending partition is tombstoned too: the commit's record precedes the delete
    assert OffsetDeleteRecord("simple", "t", 0) in sim.records
    sim.stored(token)
    assert _fetched(sim, "simple") == -1


def test_deleting_a_topic_drops_its_pending_commits() -> None:
    sim = Sim()
    sim.hold_writes = True
    _, _, token = _commit(sim, 7, group_id="simple")
    assert token is not None
    result = sim.coord.delete_topic_offsets(["t"])
    assert result.records == (OffsetDeleteRecord("simple", "t", 0),)
    sim.apply(result)
    sim.stored(token)
    assert sim.coord.committed("simple") == {}


def test_unloading_the_partition_drops_its_pending_commits() -> None:
    sim = cluster_sim()
    sim.hold_writes = True
    _, _, token = _commit(sim, 7, group_id="g")
    assert token is not None and sim.coord.partition_of("g") == P
    sim.hold_writes = False
    sim.apply(sim.coord.unload_partition(P, sim.now))
    sim.stored(token)  # the outcome comes after the unload: nothing resurrected
    assert sim.coord.committed("g") == {}
    sim.apply(sim.coord.load_partition(P, persisted(sim), sim.now))
    assert sim.coord.committed("g") == {TP: 7}  # the log has it: the next leader reads it


def test_retention_spares_a_partition_with_a_pending_commit() -> None:
    config = dataclasses.replace(TEST_CONFIG, offsets_retention_ms=1000,
                                 offsets_retention_check_interval_ms=500)
    sim = Sim(config)
    _commit(sim, 1, group_id="simple")
    sim.advance(600)
    sim.hold_writes = True
    _, _, token = _commit(sim, 2, group_id="simple")
    assert token is not None
    sim.advance(600)  # the stored 1 is past retention, but a commit of it pends
    assert sim.coord.committed("simple") == {TP: 1}
    assert "simple" in sim.coord.group_ids()
    sim.stored(token)
    assert sim.coord.committed("simple") == {TP: 2}


def test_each_write_settles_once() -> None:
    sim, a = _group()
    sim.hold_writes = True
    _, _, token = _commit(sim, 1, member=a)
    assert token is not None and sim.coord.pending_writes() == [token]
    sim.stored(token)
    with pytest.raises(ValueError, match="not pending"):
        sim.coord.stored(token, sim.now)
    with pytest.raises(ValueError, match="not pending"):
        sim.coord.failed(token, ErrorCode.KAFKA_STORAGE_ERROR, sim.now)
