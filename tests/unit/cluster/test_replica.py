"""A leader's view of its followers: caught-up times, ISR changes, high watermark, acks=all.
Times are explicit ms; nothing here waits."""

from __future__ import annotations

import pytest

from groupwire.broker.cluster.replica import LeaderReplicaState

LAG_MS = 30_000


def leader_state(*, isr: set[int] | None = None, leo: int = 10, hw: int = 10,
                 now_ms: int = 0, epoch_start_offset: int | None = None) -> LeaderReplicaState:
    return LeaderReplicaState(
        leader=1, replicas=[1, 2, 3], isr={1, 2, 3} if isr is None else isr,
        leader_epoch=4, log_end_offset=leo, high_watermark=hw,
        replica_lag_time_max_ms=LAG_MS, now_ms=now_ms, epoch_start_offset=epoch_start_offset)


def test_a_slow_follower_leaves_after_the_lag_time_and_rejoins_at_the_high_watermark() -> None:
    s = leader_state()
    s.follower_fetched(2, 10, 10, now_ms=0)
    s.follower_fetched(3, 10, 10, now_ms=0)
    s.leader_appended(20)
    s.follower_fetched(2, 20, 20, now_ms=1_000)
    # 3 stops fetching: it was last caught up at 0.
    assert s.high_watermark == 10
    assert s.isr_to_shrink(LAG_MS) == frozenset()
    assert s.isr_to_shrink(LAG_MS + 1) == {3}

    s.propose_isr({1, 2})
    assert s.isr_to_shrink(LAG_MS + 1) == frozenset()  # one change at a time
    s.follower_fetched(2, 20, 20, now_ms=LAG_MS + 2)
    assert s.high_watermark == 10  # the pending shrink does not count yet (KIP-497)
    assert s.isr_committed({1, 2}, partition_epoch=1) is True
    assert (s.isr, s.high_watermark, s.partition_epoch) == ({1, 2}, 20, 1)

    s.follower_fetched(3, 15, 20, now_ms=LAG_MS + 3)
    assert s.isr_to_expand() == frozenset()  # below the high watermark
    s.follower_fetched(3, 20, 20, now_ms=LAG_MS + 4)
    assert s.isr_to_expand() == {3}
    s.propose_isr({1, 2, 3})
    assert s.isr_to_expand() == frozenset()
    s.isr_committed({1, 2, 3}, partition_epoch=2)
    assert s.isr == {1, 2, 3}
    assert s.isr_to_shrink(LAG_MS + 5) == frozenset()


def test_the_high_watermark_waits_for_a_lagging_isr_member() -> None:
    s = leader_state()
    s.leader_appended(30)
    assert s.follower_fetched(2, 30, 30, now_ms=1) is False  # 3 has not fetched at all
    assert s.high_watermark == 10
    assert s.follower_fetched(3, 18, 30, now_ms=2) is True
    assert s.high_watermark == 18
    assert s.follower_fetched(3, 30, 30, now_ms=3) is True
    assert s.high_watermark == 30


def test_the_high_watermark_never_goes_down_nor_past_the_leaders_log_end() -> None:
    s = leader_state(isr={1, 2})
    s.leader_appended(12)
    s.follower_fetched(2, 12, 12, now_ms=1)
    assert s.high_watermark == 12
    s.follower_fetched(2, 11, 12, now_ms=2)  # a follower that truncated, say
    assert s.high_watermark == 12
    s.isr_committed({1}, partition_epoch=1)
    assert s.high_watermark == 12
    s.leader_appended(14)
    assert s.high_watermark == 14  # alone in the ISR: its own log end
    with pytest.raises(ValueError, match="does not shrink"):
        s.leader_appended(13)


def test_a_pending_expansion_counts_the_new_member_for_the_high_watermark() -> None:
    s = leader_state(isr={1, 2})
    s.follower_fetched(3, 10, 10, now_ms=1)
    assert s.isr_to_expand() == {3}
    s.propose_isr({1, 2, 3})
    s.leader_appended(20)
    s.follower_fetched(2, 20, 20, now_ms=2)
    assert s.high_watermark == 10  # maximal ISR {1, 2, 3}: 3 holds it
    s.isr_change_failed()
    assert s.isr == {1, 2}
    assert s.pending_isr is None
    s.follower_fetched(2, 20, 20, now_ms=3)
    assert s.high_watermark == 20


def test_a_follower_trailing_a_busy_leader_by_one_fetch_stays_caught_up() -> None:
    """Kafka's updateFetchState: a fetch that reaches the leader's log end as of the
    previous fetch makes the follower caught up as of that previous fetch."""
    s = leader_state(isr={1, 2}, leo=12, hw=10)
    s.follower_fetched(2, 10, 12, now_ms=1_000)
    assert s.follower(2).last_caught_up_ms == 0  # since becoming leader
    s.leader_appended(14)
    s.follower_fetched(2, 12, 14, now_ms=2_000)
    assert s.follower(2).last_caught_up_ms == 1_000
    s.leader_appended(16)
    s.follower_fetched(2, 14, 16, now_ms=3_000)
    assert s.follower(2).last_caught_up_ms == 2_000
    s.leader_appended(18)
    s.follower_fetched(2, 15, 18, now_ms=4_000)  # did not reach 16: no credit
    assert s.follower(2).last_caught_up_ms == 2_000
    assert s.isr_to_shrink(2_000 + LAG_MS) == frozenset()
    assert s.isr_to_shrink(2_001 + LAG_MS) == {2}
    s.follower_fetched(2, 18, 18, now_ms=5_000)
    assert s.follower(2).last_caught_up_ms == 5_000


def test_a_follower_with_the_whole_log_stays_in_sync_without_fetching() -> None:
    s = leader_state(isr={1, 2})
    s.follower_fetched(2, 10, 10, now_ms=0)
    assert s.isr_to_shrink(10 * LAG_MS) == frozenset()
    s.leader_appended(11)
    assert s.isr_to_shrink(10 * LAG_MS) == {2}


def test_a_new_leader_gives_isr_members_the_lag_time_and_outsiders_none() -> None:
    s = leader_state(isr={1, 2}, now_ms=100_000)
    assert s.isr_to_shrink(100_000 + LAG_MS) == frozenset()
    assert s.isr_to_shrink(100_001 + LAG_MS) == {2}
    assert s.follower(3).last_caught_up_ms == 0


def test_a_follower_joins_only_once_it_has_the_leaders_whole_epoch() -> None:
    s = leader_state(isr={1, 2}, leo=25, hw=10, epoch_start_offset=25)
    s.follower_fetched(3, 10, 25, now_ms=1)
    assert s.isr_to_expand() == frozenset()  # at the HW, but not past the epoch's start
    s.follower_fetched(3, 25, 25, now_ms=2)
    assert s.isr_to_expand() == {3}


def test_acks_all_needs_min_insync_and_the_high_watermark_past_the_batch() -> None:
    s = leader_state(isr={1, 2})
    assert s.append_refusal(min_insync=3) == "NOT_ENOUGH_REPLICAS"
    assert s.append_refusal(min_insync=2) is None
    s.leader_appended(15)  # the batch is offsets 10..14
    assert s.can_ack(15, min_insync=2) is False
    s.follower_fetched(2, 15, 15, now_ms=1)
    assert s.can_ack(15, min_insync=2) is True


def test_an_isr_that_shrank_after_the_append_refuses_the_ack() -> None:
    s = leader_state(isr={1, 2})
    s.leader_appended(15)
    s.isr_committed({1}, partition_epoch=1)  # 2 dropped out; the HW reaches 15 alone
    assert s.high_watermark == 15
    assert s.can_ack(15, min_insync=2) == "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    assert s.append_refusal(min_insync=2) == "NOT_ENOUGH_REPLICAS"


def test_bad_isrs_and_overlapping_changes_are_refused() -> None:
    s = leader_state()
    with pytest.raises(ValueError, match="must hold the leader"):
        s.propose_isr({2, 3})
    with pytest.raises(ValueError, match="must hold the leader"):
        s.propose_isr({1, 4})
    s.propose_isr({1, 2})
    with pytest.raises(ValueError, match="already pending"):
        s.propose_isr({1})
    with pytest.raises(KeyError):
        s.follower_fetched(9, 0, 10, now_ms=0)
    with pytest.raises(ValueError, match="not a replica"):
        LeaderReplicaState(leader=9, replicas=[1], isr={1}, leader_epoch=0,
                           log_end_offset=0, high_watermark=0,
                           replica_lag_time_max_ms=1, now_ms=0)
