"""Transactional offset commits (issue 27; Kafka's KIP-98 and KIP-447): TxnOffsetCommit
offsets stay pending until their transaction's marker (``complete_transaction``) is
stored, then become committed or vanish; OffsetFetch's ``require_stable`` sees them as
unstable; they survive a restart (replay, compaction) until their marker, and go with
their group, topic or partition."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.coordinator import (
    Coordinator,
    CoordinatorConfig,
    GroupRecord,
    OffsetCommitRecord,
    Result,
    record_from_kv,
)
from groupwire.broker.coordinator.records import (
    TxnOffsetCommitRecord,
    TxnOffsetDeleteRecord,
    encode_records,
)
from groupwire.broker.coordinator.timers import RETENTION_KEY
from groupwire.broker.offsets_log import OffsetsLog
from groupwire.broker.storage import StorageConfig, TopicStore
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.hashing import coordinator_partition
from groupwire.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitTopic,
)
from groupwire.protocol.steps import run_steps

from .coord_sim import TEST_CONFIG, Member, Sim, form_group, join_all

N = 4
P = 3  # holds "g", "k" and "s"; "h" is on 0
PID, PID2 = 1000, 2000
NONE = ErrorCode.NONE
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT
TP = tuple[str, int]


def txn_sim(config: CoordinatorConfig = TEST_CONFIG, now: int = 0,
            records: Iterable[GroupRecord] = ()) -> Sim:
    """A simulated shell around a coordinator that knows the offsets partitions; with
    ``records``, one that restarted: they are loaded before it starts."""
    assert [coordinator_partition(g, N) for g in ("g", "k", "h")] == [P, P, 0]
    sim = Sim(config, now=now, start=False)
    counter = itertools.count(1)
    sim.coord = Coordinator(config, sim.topics.get, new_uuid=lambda: f"n{next(counter)}",
                            offsets_partitions=N)
    sim.coord.load(records, now)
    sim.apply(sim.coord.start(now))
    return sim


def restarted(sim: Sim, records: list[GroupRecord] | None = None) -> Sim:
    """The broker restarted: a new coordinator loads the records written so far, read
    back from their bytes."""
    written = sim.records if records is None else records
    return txn_sim(sim.config, sim.now, [record_from_kv(*r.to_kv()) for r in written])


def txn_commit(sim: Sim, offsets: dict[TP, int], *, group: str = "g", pid: int = PID,
               epoch: int = 0, generation: int = -1, member_id: str = "",
               instance: str | None = None, metadata: str | None = None,
               conn: int = 60) -> tuple[int, int]:
    """Send a TxnOffsetCommit; returns (conn, cid)."""
    by_topic: dict[str, list[TxnOffsetCommitPartition]] = {}
    for (topic, p), offset in offsets.items():
        by_topic.setdefault(topic, []).append(TxnOffsetCommitPartition(
            partition_index=p, committed_offset=offset, committed_metadata=metadata))
    cid = sim.send(TxnOffsetCommitRequest(
        transactional_id=f"tx-{pid}", group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=generation, member_id=member_id, group_instance_id=instance,
        topics=[TxnOffsetCommitTopic(name=t, partitions=ps) for t, ps in by_topic.items()]),
        conn)
    return conn, cid


def codes(sim: Sim, sent: tuple[int, int]) -> dict[TP, ErrorCode] | None:
    """The TxnOffsetCommit's answer per partition; None: not answered (yet)."""
    response = sim.reply(*sent)
    if response is None:
        return None
    assert isinstance(response, TxnOffsetCommitResponse)
    return {(t.name, r.partition_index): ErrorCode(r.error_code)
            for t in response.topics for r in t.results}


def committed_txn(sim: Sim, offsets: dict[TP, int], **kwargs: Any) -> None:
    """A TxnOffsetCommit that is answered NONE for every partition."""
    answer = codes(sim, txn_commit(sim, offsets, **kwargs))
    assert answer == dict.fromkeys(offsets, NONE)


def fetch(sim: Sim, tps: list[TP] | None, *, group: str = "g",
          stable: bool = False) -> dict[TP, tuple[int, ErrorCode]]:
    """OffsetFetch: partition -> (offset, error code)."""
    topics = None
    if tps is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in tps:
            by_topic.setdefault(topic, []).append(p)
        topics = [OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                  for t, ps in by_topic.items()]
    response = sim.call(OffsetFetchRequest(group_id=group, topics=topics,
                                           require_stable=stable), conn=998)
    assert isinstance(response, OffsetFetchResponse)
    assert response.error_code == NONE
    return {(t.name, p.partition_index): (p.committed_offset, ErrorCode(p.error_code))
            for t in response.topics for p in t.partitions}


def commit(sim: Sim, offsets: dict[TP, int], group: str = "g") -> None:
    """A plain OffsetCommit without group context (a simple group's)."""
    response = sim.call(OffsetCommitRequest(group_id=group, topics=[
        OffsetCommitRequestTopic(name=t, partitions=[
            OffsetCommitRequestPartition(partition_index=p, committed_offset=o)])
        for (t, p), o in offsets.items()]), conn=97)
    assert isinstance(response, OffsetCommitResponse)
    assert all(p.error_code == NONE for t in response.topics for p in t.partitions)


def complete(sim: Sim, pid: int, commit: bool, partition: int = P) -> Result:
    """The transaction marker of ``pid`` for ``partition``, executed by the shell."""
    return sim.apply(sim.coord.complete_transaction(partition, pid, commit, sim.now))


def pending(sim: Sim, group: str = "g") -> dict[TP, dict[int, int]]:
    return sim.coord.pending_transactional(group)


# --- commit and abort -------------------------------------------------------------------


def test_committed_transaction_makes_offset_fetch_return_its_offsets() -> None:
    sim = txn_sim()
    sim.hold_writes = True
    sent = txn_commit(sim, {("t", 0): 10, ("t", 1): 20}, metadata="m")
    assert codes(sim, sent) is None  # answered once stored, as an OffsetCommit
    [write] = sim.held
    assert sim.records == [TxnOffsetCommitRecord("g", "t", 0, PID, 0, 10, "m", 0),
                           TxnOffsetCommitRecord("g", "t", 1, PID, 0, 20, "m", 0)]
    sim.stored(write)
    assert codes(sim, sent) == {("t", 0): NONE, ("t", 1): NONE}
    # pending: not what OffsetFetch returns, not committed
    assert fetch(sim, [("t", 0), ("t", 1)]) == {("t", 0): (-1, NONE), ("t", 1): (-1, NONE)}
    assert sim.coord.committed("g") == {}
    assert pending(sim) == {("t", 0): {PID: 10}, ("t", 1): {PID: 20}}

    before = len(sim.records)
    marker = complete(sim, PID, commit=True)
    assert marker.write is not None and marker.replies == ()
    assert list(marker.records) == [
        OffsetCommitRecord("g", "t", 0, 10, "m", 0), TxnOffsetDeleteRecord("g", "t", 0, PID),
        OffsetCommitRecord("g", "t", 1, 20, "m", 0), TxnOffsetDeleteRecord("g", "t", 1, PID)]
    assert sim.records[before:] == list(marker.records)
    # pending until the marker's write is stored
    assert sim.coord.committed("g") == {} and pending(sim)
    assert sim.coord.pending_writes() == [marker.write]
    sim.stored(marker.write)
    assert fetch(sim, [("t", 0), ("t", 1)]) == {("t", 0): (10, NONE), ("t", 1): (20, NONE)}
    assert fetch(sim, [("t", 0), ("t", 1)], stable=True) == {("t", 0): (10, NONE),
                                                             ("t", 1): (20, NONE)}
    assert sim.coord.committed("g") == {("t", 0): 10, ("t", 1): 20}
    assert pending(sim) == {} and sim.coord.pending_writes() == []


def test_an_aborted_transaction_leaves_the_previous_committed_offsets() -> None:
    sim = txn_sim()
    commit(sim, {("t", 0): 5})
    committed_txn(sim, {("t", 0): 10, ("t", 1): 20})
    marker = complete(sim, PID, commit=False)
    assert list(marker.records) == [TxnOffsetDeleteRecord("g", "t", 0, PID),
                                    TxnOffsetDeleteRecord("g", "t", 1, PID)]
    assert fetch(sim, [("t", 0), ("t", 1)]) == {("t", 0): (5, NONE), ("t", 1): (-1, NONE)}
    assert fetch(sim, [("t", 0)], stable=True) == {("t", 0): (5, NONE)}
    assert sim.coord.committed("g") == {("t", 0): 5} and pending(sim) == {}


def test_a_marker_with_nothing_pending_completes_at_once() -> None:
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10}, pid=PID)
    assert not sim.coord.complete_transaction(P, PID2, True, sim.now)  # another producer
    assert not sim.coord.complete_transaction(0, PID, True, sim.now)  # another partition
    complete(sim, PID, commit=False)
    nothing = sim.coord.complete_transaction(P, PID, True, sim.now)  # a marker re-sent
    assert nothing.write is None and not nothing
    assert sim.coord.pending_writes() == []


def test_a_marker_ends_one_producers_offsets_in_every_group_of_its_partition() -> None:
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10, ("u", 1): 11}, group="g", pid=PID)
    committed_txn(sim, {("t", 0): 12}, group="k", pid=PID)
    committed_txn(sim, {("t", 0): 13}, group="h", pid=PID)  # on partition 0
    committed_txn(sim, {("t", 0): 20}, group="g", pid=PID2)
    marker = complete(sim, PID, commit=True)
    assert {(type(r).__name__, r.group_id) for r in marker.records} == {
        ("OffsetCommitRecord", "g"), ("TxnOffsetDeleteRecord", "g"),
        ("OffsetCommitRecord", "k"), ("TxnOffsetDeleteRecord", "k")}
    assert sim.coord.committed("g") == {("t", 0): 10, ("u", 1): 11}
    assert sim.coord.committed("k") == {("t", 0): 12}
    assert pending(sim, "g") == {("t", 0): {PID2: 20}}  # the other producer's stays
    assert pending(sim, "h") == {("t", 0): {PID: 13}}  # the other partition's too
    assert fetch(sim, [("t", 0)], stable=True) == {("t", 0): (-1, UNSTABLE)}

    complete(sim, PID, commit=False, partition=0)
    assert pending(sim, "h") == {} and sim.coord.committed("h") == {}
    complete(sim, PID2, commit=True)
    assert sim.coord.committed("g") == {("t", 0): 20, ("u", 1): 11}
    assert pending(sim, "g") == {}


def test_the_transactions_value_wins_over_a_commit_made_while_it_was_pending() -> None:
    """A deliberate difference from Kafka (which keeps whichever record is later in the
    log): the committed value is the transaction's, a rule replay can follow."""
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10})
    commit(sim, {("t", 0): 99})
    assert sim.coord.committed("g") == {("t", 0): 99}
    complete(sim, PID, commit=True)
    assert sim.coord.committed("g") == {("t", 0): 10}
    assert restarted(sim).coord.committed("g") == {("t", 0): 10}


# --- validation (KIP-447) ---------------------------------------------------------------


def _stable_group(instance: str | None = None) -> tuple[Sim, Member, Member]:
    sim = txn_sim()
    a = Member(sim, client_id="a", instance_id=instance)
    b = Member(sim, client_id="b")
    form_group(sim, [a, b])  # round robin over t's 6 partitions, by member id
    return sim, a, b


def _owned(sim: Sim, member: Member) -> TP:
    group = sim.coord.view.group(member.group_id)
    assert group is not None
    owned = group.members[member.member_id].owned
    assert owned
    return min(owned)


def test_a_member_with_its_generation_commits_what_it_owns() -> None:
    sim, a, _ = _stable_group()
    group = sim.coord.view.group("g")
    assert group is not None
    owned = sorted(group.members[a.member_id].owned or ())
    assert owned
    answer = codes(sim, txn_commit(sim, dict.fromkeys(owned, 7), generation=a.generation_id,
                                   member_id=a.member_id))
    assert answer == dict.fromkeys(owned, NONE)
    assert set(pending(sim)) == set(owned)


@pytest.mark.parametrize(("generation", "member_id", "code"), [
    (99, "a", ErrorCode.ILLEGAL_GENERATION),
    (-1, "a", ErrorCode.ILLEGAL_GENERATION),  # a member named: its generation must match
    (None, "nobody", ErrorCode.UNKNOWN_MEMBER_ID),
    (5, "", ErrorCode.UNKNOWN_MEMBER_ID),
])
def test_a_fenced_generation_or_member_is_refused_on_every_partition(
        generation: int | None, member_id: str, code: ErrorCode) -> None:
    sim, a, _ = _stable_group()
    mid = a.member_id if member_id == "a" else member_id
    answer = codes(sim, txn_commit(sim, {("t", 0): 1, ("u", 3): 2},
                                   generation=a.generation_id if generation is None
                                   else generation, member_id=mid))
    assert answer == {("t", 0): code, ("u", 3): code}
    assert pending(sim) == {} and sim.held == []


def test_a_static_member_replaced_is_fenced() -> None:
    sim, a, _ = _stable_group(instance="i-a")
    answer = codes(sim, txn_commit(sim, {("t", 0): 1}, generation=a.generation_id,
                                   member_id="an-old-id", instance="i-a"))
    assert answer == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    answer = codes(sim, txn_commit(sim, {("t", 0): 1}, generation=a.generation_id,
                                   member_id=a.member_id, instance="i-unknown"))
    assert answer == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_a_group_that_does_not_exist_takes_offsets_only_without_a_generation() -> None:
    sim = txn_sim()
    answer = codes(sim, txn_commit(sim, {("t", 0): 1}, group="k", generation=3,
                                   member_id="m"))
    assert answer == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert "k" not in sim.coord.group_ids()
    committed_txn(sim, {("t", 0): 1}, group="k", member_id="m")  # a "simple" group
    assert sim.describe("k").group_state == "Empty"


def test_without_group_context_any_state_takes_offsets_and_none_refuses_mid_rebalance(
        ) -> None:
    """Older producers send no member; unlike OffsetCommit, CompletingRebalance is not
    REBALANCE_IN_PROGRESS (Kafka's validateOffsetCommit with isTransactional)."""
    sim, a, b = _stable_group()
    committed_txn(sim, {("t", 0): 1})  # Stable, no member: accepted
    a.join(reason="again")  # a rebalance: PreparingRebalance until b re-joins
    b.join()
    join_all(sim, [a, b])
    assert sim.describe("g").group_state == "CompletingRebalance"
    owned = _owned(sim, a)  # still what the last generation gave it
    committed_txn(sim, {owned: 2}, generation=a.generation_id, member_id=a.member_id)
    assert a.commit({owned: 2}) == {owned: ErrorCode.REBALANCE_IN_PROGRESS}


def test_partitions_are_refused_one_by_one_as_an_offset_commits_are() -> None:
    sim, a, b = _stable_group()
    owned, not_owned = _owned(sim, a), _owned(sim, b)
    sent = txn_commit(sim, {owned: 1, not_owned: 2, ("t", 99): 3},
                      generation=a.generation_id, member_id=a.member_id)
    assert codes(sim, sent) == {owned: NONE, not_owned: ErrorCode.PARTITION_NOT_OWNED,
                                ("t", 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert [e.partitions for e in sim.events_of("commit_fenced")] == [
        [(not_owned[0], [not_owned[1]])]]
    big = "x" * (sim.config.offset_metadata_max_bytes + 1)
    sent = txn_commit(sim, {owned: 5}, generation=a.generation_id, member_id=a.member_id,
                      metadata=big)
    assert codes(sim, sent) == {owned: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    assert pending(sim) == {owned: {PID: 1}}


def test_a_group_not_served_here_is_refused_on_every_partition() -> None:
    sim = txn_sim()
    sim.coord.set_hosting(lambda group_id: group_id != "g", None)
    answer = codes(sim, txn_commit(sim, {("t", 0): 1, ("t", 1): 2}))
    assert answer == dict.fromkeys([("t", 0), ("t", 1)], ErrorCode.NOT_COORDINATOR)


# --- require_stable (KIP-447) -----------------------------------------------------------


def test_require_stable_answers_unstable_while_a_transactions_offset_is_pending() -> None:
    sim = txn_sim()
    commit(sim, {("t", 0): 5, ("t", 1): 6})
    sim.hold_writes = True
    txn_commit(sim, {("t", 0): 10})
    [write] = sim.held  # pending already while its write is under way, as in Kafka
    asked = [("t", 0), ("t", 1), ("t", 2)]
    assert fetch(sim, asked, stable=True) == {
        ("t", 0): (-1, UNSTABLE), ("t", 1): (6, NONE), ("t", 2): (-1, NONE)}
    assert fetch(sim, None, stable=True) == {("t", 0): (-1, UNSTABLE), ("t", 1): (6, NONE)}
    assert fetch(sim, asked) == {("t", 0): (5, NONE), ("t", 1): (6, NONE),
                                 ("t", 2): (-1, NONE)}
    assert fetch(sim, None) == {("t", 0): (5, NONE), ("t", 1): (6, NONE)}
    sim.stored(write)
    marker = complete(sim, PID, commit=True)
    assert marker.write is not None
    assert fetch(sim, asked, stable=True)[("t", 0)] == (-1, UNSTABLE)  # marker not stored
    sim.stored(marker.write)
    assert fetch(sim, asked, stable=True)[("t", 0)] == (10, NONE)
    steps = sim.coord.offset_fetch_steps(OffsetFetchRequest(group_id="g", topics=None,
                                                           require_stable=True))
    assert run_steps(steps).topics[0].partitions[0].committed_offset == 10


# --- write outcomes ---------------------------------------------------------------------


@pytest.mark.parametrize("code", [ErrorCode.KAFKA_STORAGE_ERROR,
                                  ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  ErrorCode.NOT_COORDINATOR])
def test_a_failed_write_answers_its_code_and_leaves_nothing_pending(code: ErrorCode) -> None:
    sim = txn_sim()
    sim.hold_writes = True
    sent = txn_commit(sim, {("t", 0): 10, ("t", 99): 1})
    [write] = sim.held
    sim.failed(write, code)
    assert codes(sim, sent) == {("t", 0): code,
                                ("t", 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert pending(sim) == {}
    assert fetch(sim, [("t", 0)], stable=True) == {("t", 0): (-1, NONE)}
    assert not sim.coord.complete_transaction(P, PID, True, sim.now)


def test_a_failed_later_write_leaves_the_earlier_value_pending() -> None:
    """What stays pending is what the log holds, so the marker ends it."""
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10})
    sim.hold_writes = True
    txn_commit(sim, {("t", 0): 11})
    assert pending(sim) == {("t", 0): {PID: 11}}
    sim.failed(sim.held[-1])
    assert pending(sim) == {("t", 0): {PID: 10}}
    sim.hold_writes = False
    complete(sim, PID, commit=True)
    assert sim.coord.committed("g") == {("t", 0): 10} and pending(sim) == {}


def test_outcomes_out_of_order_keep_the_latest_write() -> None:
    sim = txn_sim()
    sim.hold_writes = True
    txn_commit(sim, {("t", 0): 1})
    txn_commit(sim, {("t", 0): 2})
    first, second = sim.held
    sim.stored(second)
    sim.stored(first)
    assert pending(sim) == {("t", 0): {PID: 2}}
    txn_commit(sim, {("t", 0): 3})
    sim.failed(sim.held[-1])
    assert pending(sim) == {("t", 0): {PID: 2}}


def test_a_failed_marker_leaves_the_offsets_pending_for_the_marker_to_come_again() -> None:
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10})
    sim.hold_writes = True
    marker = complete(sim, PID, commit=True)
    assert marker.write is not None
    sim.failed(marker.write, ErrorCode.NOT_COORDINATOR)
    assert pending(sim) == {("t", 0): {PID: 10}} and sim.coord.committed("g") == {}
    again = complete(sim, PID, commit=True)
    assert again.write is not None and again.records == marker.records
    sim.stored(again.write)
    assert sim.coord.committed("g") == {("t", 0): 10} and pending(sim) == {}


def test_an_abort_while_an_offset_is_being_written_ends_it_too() -> None:
    """A transaction aborted on its timeout while a TxnOffsetCommit's write is under
    way: the marker's tombstone follows that record in the log, so it ends it."""
    sim = txn_sim()
    sim.hold_writes = True
    sent = txn_commit(sim, {("t", 0): 10})
    [write] = sim.held
    marker = complete(sim, PID, commit=False)
    assert marker.write is not None
    sim.stored(marker.write)
    assert pending(sim) == {}
    sim.stored(write)
    assert codes(sim, sent) == {("t", 0): NONE}
    assert pending(sim) == {} and restarted(sim).coord.pending_transactional("g") == {}


def test_an_offset_written_after_the_marker_stays_pending() -> None:
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10})
    sim.hold_writes = True
    marker = complete(sim, PID, commit=True)
    txn_commit(sim, {("t", 0): 20})  # the producer's next transaction
    later = sim.held[-1]
    assert marker.write is not None
    sim.stored(marker.write)
    sim.stored(later)
    assert sim.coord.committed("g") == {("t", 0): 10}
    assert pending(sim) == {("t", 0): {PID: 20}}
    assert restarted(sim).coord.pending_transactional("g") == {("t", 0): {PID: 20}}


# --- replay -----------------------------------------------------------------------------


def _history(sim: Sim) -> None:
    """Two groups, two producers: PID's transaction committed in "g", PID2's pending in
    "g" and "k", PID's next one pending in "k", an aborted one gone."""
    commit(sim, {("t", 5): 55})
    committed_txn(sim, {("t", 0): 10, ("t", 1): 11}, pid=PID)
    committed_txn(sim, {("t", 1): 21, ("u", 0): 22}, pid=PID2)
    complete(sim, PID, commit=True)
    committed_txn(sim, {("t", 0): 30}, group="k", pid=PID2)
    committed_txn(sim, {("t", 2): 12}, pid=PID)
    complete(sim, PID, commit=False)
    committed_txn(sim, {("v", 1): 40}, group="k", pid=PID)
    commit(sim, {("t", 1): 15})


def _state(sim: Sim) -> dict[str, tuple[dict[TP, int], dict[TP, dict[int, int]]]]:
    return {g: (sim.coord.committed(g), sim.coord.pending_transactional(g))
            for g in ("g", "k")}


EXPECTED = {
    "g": ({("t", 0): 10, ("t", 1): 15, ("t", 5): 55},
          {("t", 1): {PID2: 21}, ("u", 0): {PID2: 22}}),
    "k": ({}, {("t", 0): {PID2: 30}, ("v", 1): {PID: 40}}),
}


def test_replay_keeps_pending_offsets_pending_and_completed_ones_completed() -> None:
    sim = txn_sim()
    _history(sim)
    assert _state(sim) == EXPECTED
    again = restarted(sim)
    assert _state(again) == EXPECTED
    assert fetch(again, [("t", 1)], stable=True) == {("t", 1): (-1, UNSTABLE)}
    complete(again, PID2, commit=True)  # the transaction coordinator sends it again
    assert again.coord.committed("g") == {("t", 0): 10, ("t", 1): 21, ("t", 5): 55,
                                          ("u", 0): 22}
    assert again.coord.committed("k") == {("t", 0): 30}
    assert _state(restarted(again))["g"][1] == {}


def test_replay_does_not_depend_on_the_order_compaction_leaves() -> None:
    """Compaction keeps the latest value per key, in an order of its own: any order of
    the live records replays to the same state."""
    sim = txn_sim()
    _history(sim)
    live: dict[bytes, GroupRecord] = {}
    for record in sim.records:
        key, value = record.to_kv()
        if value is None:
            live.pop(key, None)
        else:
            live[key] = record
    snapshot = list(live.values())
    rng = random.Random(27)
    for _ in range(20):
        rng.shuffle(snapshot)
        assert _state(restarted(sim, snapshot)) == EXPECTED


def test_compacting_the_offsets_log_keeps_pending_and_committed_offsets(
        tmp_path: Path) -> None:
    sim = txn_sim()
    _history(sim)
    store = TopicStore(tmp_path, StorageConfig(offsets_partitions=1))
    log = OffsetsLog(store)
    for result in sim.results:
        if result.records:
            log.write(result.records, 1_000)
    run_steps(log.compact_steps(0, lambda drop: drop()))
    assert log.compactions == 1
    store.close()
    store = TopicStore(tmp_path, StorageConfig(offsets_partitions=1))
    records = list(OffsetsLog(store).replay())
    store.close()
    assert any(isinstance(r, TxnOffsetCommitRecord) for r in records)
    assert not any(isinstance(r, TxnOffsetDeleteRecord) for r in records)  # compacted
    assert _state(txn_sim(records=records)) == EXPECTED


def test_unloading_forgets_pending_offsets_and_loading_brings_them_back() -> None:
    sim = txn_sim()
    _history(sim)
    committed_txn(sim, {("t", 0): 7}, group="h", pid=PID2)  # partition 0
    sim.apply(sim.coord.unload_partition(P, sim.now))
    assert _state(sim) == {"g": ({}, {}), "k": ({}, {})}
    assert fetch(sim, [("t", 1)], stable=True) == {("t", 1): (-1, NONE)}
    assert not sim.coord.complete_transaction(P, PID2, True, sim.now)
    assert pending(sim, "h") == {("t", 0): {PID2: 7}}  # other partitions' stay
    records = [record_from_kv(*r.to_kv()) for r in sim.records]
    sim.apply(sim.coord.load_partition(P, records, sim.now))
    assert _state(sim) == EXPECTED


def test_an_unload_while_a_marker_is_being_written_forgets_it() -> None:
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10})
    sim.hold_writes = True
    marker = complete(sim, PID, commit=True)
    sim.apply(sim.coord.unload_partition(P, sim.now))
    assert marker.write is not None
    sim.stored(marker.write)  # the shell settles what it had under way
    assert _state(sim)["g"] == ({}, {})


# --- deletion and retention -------------------------------------------------------------


def test_deleting_a_group_tombstones_its_pending_offsets() -> None:
    """Kafka's DeleteGroups deletes an Empty group whatever its transactions hold, and
    tombstones their partitions."""
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10, ("t", 1): 11})
    commit(sim, {("t", 0): 5})
    before = len(sim.records)
    response = sim.call(DeleteGroupsRequest(groups_names=["g"]), conn=70)
    assert isinstance(response, DeleteGroupsResponse)
    assert response.results[0].error_code == NONE
    assert set(sim.records[before:]) >= {TxnOffsetDeleteRecord("g", "t", 0, PID),
                                         TxnOffsetDeleteRecord("g", "t", 1, PID)}
    assert pending(sim) == {} and "g" not in sim.coord.group_ids()
    assert not sim.coord.complete_transaction(P, PID, True, sim.now)
    assert _state(restarted(sim))["g"] == ({}, {})


def test_offset_delete_and_topic_deletion_take_pending_offsets_with_them() -> None:
    sim = txn_sim()
    committed_txn(sim, {("t", 0): 10, ("u", 0): 11, ("v", 0): 12})
    committed_txn(sim, {("t", 0): 20}, pid=PID2)
    assert sim.coord.committed_topics() == {"t", "u", "v"}  # what a start checks
    before = len(sim.records)
    sim.call(OffsetDeleteRequest(group_id="g", topics=[OffsetDeleteRequestTopic(
        name="t", partitions=[OffsetDeleteRequestPartition(partition_index=0)])]), conn=71)
    assert set(sim.records[before:]) >= {TxnOffsetDeleteRecord("g", "t", 0, PID),
                                         TxnOffsetDeleteRecord("g", "t", 0, PID2)}
    assert pending(sim) == {("u", 0): {PID: 11}, ("v", 0): {PID: 12}}
    deleted = sim.apply(sim.coord.delete_topic_offsets(["u"]))
    assert list(deleted.records) == [TxnOffsetDeleteRecord("g", "u", 0, PID)]
    assert pending(sim) == {("v", 0): {PID: 12}}
    assert _state(restarted(sim))["g"] == ({}, {("v", 0): {PID: 12}})


def test_retention_keeps_a_group_with_pending_offsets_and_their_committed_offsets() -> None:
    """Kafka: a partition with a transaction's offset pending is not expired, a group
    with some is not deleted (``hasOffsets``; the new coordinator's
    ``cleanupExpiredOffsets``)."""
    config = dataclasses.replace(TEST_CONFIG, offsets_retention_ms=1_000,
                                 offsets_retention_check_interval_ms=500)
    sim = txn_sim(config)
    commit(sim, {("t", 0): 5, ("t", 1): 6})
    committed_txn(sim, {("t", 0): 10})
    committed_txn(sim, {("t", 0): 1}, group="k")  # nothing but a pending offset
    assert sim.timer_deadline(RETENTION_KEY) is not None
    sim.advance(2_000)
    assert sim.coord.committed("g") == {("t", 0): 5}  # t-1 expired, t-0 kept
    assert {"g", "k"} <= set(sim.coord.group_ids())
    complete(sim, PID, commit=False)
    sim.advance(2_000)
    assert sim.coord.committed("g") == {}
    assert not {"g", "k"} & set(sim.coord.group_ids())


# --- records ----------------------------------------------------------------------------


def test_transactional_records_round_trip_with_a_key_per_producer() -> None:
    record = TxnOffsetCommitRecord("grp", "topic", 7, 42, 3, 1234, "meta", 1_700_000_000_000)
    key, value = record.to_kv()
    assert key == b"\x95\xaatxn_offset\xa3grp\xa5topic\x07\x2a"
    assert record_from_kv(key, value) == record
    tombstone = TxnOffsetDeleteRecord("grp", "topic", 7, 42)
    assert tombstone.to_kv() == (key, None)
    assert record_from_kv(key, None) == tombstone
    other = dataclasses.replace(record, producer_id=43)
    plain = OffsetCommitRecord("grp", "topic", 7, 1234, "meta", 0)
    assert len({key, other.to_kv()[0], plain.to_kv()[0]}) == 3
    assert [kv[1:] for kv in encode_records([record, tombstone])] == [(key, value),
                                                                       (key, None)]
    with pytest.raises(ValueError, match="unknown group record key"):
        record_from_kv(b"\x94\xaatxn_offset\xa3grp\xa5topic\x07", None)
