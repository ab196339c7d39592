"""The leader-epoch cache and the follower's truncation rule (KIP-101, KIP-279)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwire.broker.cluster.epochs import (
    EpochEntry,
    LeaderEpochCache,
    Truncation,
    divergence,
)


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


# -- assign ---------------------------------------------------------------------------

def test_assign_records_new_epochs_and_ignores_the_latest_one_again() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch is None
    cache.assign(0, 0)
    cache.assign(0, 5)
    cache.assign(2, 7)
    cache.assign(2, 9)
    assert pairs(cache) == [(0, 0), (2, 7)]
    assert cache.latest_epoch == 2


def test_a_newer_epoch_at_the_same_offset_replaces_one_that_wrote_nothing() -> None:
    cache = cache_of((0, 0), (1, 4))
    cache.assign(2, 4)
    assert pairs(cache) == [(0, 0), (2, 4)]


@pytest.mark.parametrize(("epoch", "offset", "message"), [
    (1, 9, "older than the latest epoch 2"),
    (3, 6, "before the start 7 of the latest epoch 2"),
    (2, 6, "before the start 7 of the latest epoch 2"),
    (-1, 9, "must be >= 0"),
])
def test_assign_refuses_to_go_backwards(epoch: int, offset: int, message: str) -> None:
    cache = cache_of((0, 0), (2, 7))
    with pytest.raises(ValueError, match=message):
        cache.assign(epoch, offset)
    assert pairs(cache) == [(0, 0), (2, 7)]


# -- end_offset_for (OffsetsForLeaderEpoch) --------------------------------------------

@pytest.mark.parametrize(("requested", "answer"), [
    (-1, (-1, -1)),   # undefined epoch
    (0, (0, 10)),     # older than every entry: Kafka answers the first start offset
    (1, (1, 20)),     # a known epoch ends where the next begins
    (2, (1, 20)),     # unknown epoch in between: the largest below, ending at the next
    (3, (3, 30)),
    (4, (3, 30)),
    (5, (5, 42)),     # the latest: ends at the log end
    (6, (-1, -1)),    # newer than anything this replica has
])
def test_end_offset_for_answers_as_kafka(requested: int, answer: tuple[int, int]) -> None:
    cache = cache_of((1, 10), (3, 20), (5, 30))
    assert cache.end_offset_for(requested, 42) == answer


def test_an_empty_cache_answers_undefined() -> None:
    assert LeaderEpochCache().end_offset_for(0, 5) == (-1, -1)


# -- truncation ------------------------------------------------------------------------

def test_truncate_from_end_drops_epochs_starting_at_or_after_the_new_end() -> None:
    cache = cache_of((0, 0), (1, 5), (2, 8))
    cache.truncate_from_end(8)
    assert pairs(cache) == [(0, 0), (1, 5)]
    cache.truncate_from_end(6)
    assert pairs(cache) == [(0, 0), (1, 5)]
    cache.truncate_from_end(0)
    assert pairs(cache) == []


def test_truncate_from_start_keeps_the_epoch_the_new_start_falls_in() -> None:
    cache = cache_of((0, 0), (1, 5), (2, 8))
    cache.truncate_from_start(6)
    assert pairs(cache) == [(1, 6), (2, 8)]
    cache.truncate_from_start(8)
    assert pairs(cache) == [(2, 8)]
    cache.truncate_from_start(3)
    assert pairs(cache) == [(2, 8)]


# -- checkpoint file -------------------------------------------------------------------

def test_the_checkpoint_round_trips_in_kafkas_layout() -> None:
    cache = cache_of((0, 0), (4, 17))
    assert cache.encode() == b"0\n2\n0 0\n4 17\n"
    assert LeaderEpochCache.decode(cache.encode()) == cache
    assert LeaderEpochCache.decode(b"0\n0\n") == LeaderEpochCache()


@pytest.mark.parametrize("data", [
    b"", b"0\n", b"1\n0\n", b"0\n1\n", b"0\n1\n0 0", b"0\n2\n0 0\n", b"0\n1\n0 0 0\n",
    b"0\n1\nx 0\n", b"0\n1\n+1 0\n", b"0\n2\n1 0\n1 5\n", b"0\n2\n1 5\n2 5\n",
    b"0\n1\n-1 0\n", b"0\n1\n\xff 0\n", b"0\n1\n 1 0\n",
])
def test_decoding_a_bad_checkpoint_raises(data: bytes) -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        LeaderEpochCache.decode(data)


# -- the follower's truncation ---------------------------------------------------------

def test_kip101_a_follower_truncates_what_a_leader_that_lost_data_never_had() -> None:
    """KIP-101's divergence scenario. A (leader, epoch 0) has m1 m2 at offsets 0, 1; B has
    only m1. Both lose power; m2 was never flushed on B. B comes back first, leads epoch
    1, writes m3 at offset 1. A returns as follower with m2 at offset 1: truncating to
    its high watermark (2) would keep m2, so the logs would differ at offset 1 forever."""
    leader = cache_of((0, 0), (1, 1))
    leader_leo = 2
    follower = cache_of((0, 0))
    follower_leo, follower_hw = 2, 2

    answer = leader.end_offset_for(follower.latest_epoch or 0, leader_leo)
    assert answer == (0, 1)
    cut = divergence(follower, follower_leo, *answer, high_watermark=follower_hw)
    assert cut == Truncation(1, done=True)


def test_kip101_a_follower_keeps_what_its_stale_high_watermark_would_have_lost() -> None:
    """KIP-101's data-loss scenario: B restarts with m1 m2 but a high watermark of 1; the
    leader still has epoch 0 up to 2, so B keeps m2."""
    leader = cache_of((0, 0))
    follower = cache_of((0, 0))
    answer = leader.end_offset_for(0, 2)
    assert divergence(follower, 2, *answer, high_watermark=1) == Truncation(2, done=True)


def test_kip279_the_follower_asks_again_for_an_epoch_the_leader_answered_around() -> None:
    """KIP-279: the follower had epochs 0 and 2; the leader had 0, 1 and 3. Asked about 2,
    the leader answers epoch 1 (ending at 7), which the follower never had: it cuts to
    where its own epoch 0 ended (5) and asks about 0, which the leader ended at 3."""
    leader = cache_of((0, 0), (1, 3), (3, 7))
    leader_leo = 12
    follower = cache_of((0, 0), (2, 5))
    follower_leo = 10

    rounds = []
    while True:
        requested = follower.latest_epoch
        assert requested is not None
        answer = leader.end_offset_for(requested, leader_leo)
        cut = divergence(follower, follower_leo, *answer, high_watermark=0)
        rounds.append((requested, answer, cut))
        follower.truncate_from_end(cut.offset)
        follower_leo = cut.offset
        if cut.done:
            break
    assert rounds == [
        (2, (1, 7), Truncation(5, done=False)),
        (0, (0, 3), Truncation(3, done=True)),
    ]
    assert pairs(follower) == [(0, 0)]


def test_a_leader_with_no_answer_sends_the_follower_back_to_its_high_watermark() -> None:
    follower = cache_of((0, 0), (1, 5))
    assert divergence(follower, 9, -1, -1, high_watermark=6) == Truncation(6, done=True)


def test_a_follower_without_epochs_trusts_the_leaders_end() -> None:
    assert divergence(LeaderEpochCache(), 9, 2, 4, high_watermark=0) == Truncation(4, True)
    assert divergence(LeaderEpochCache(), 3, 2, 4, high_watermark=0) == Truncation(3, True)


# -- properties ------------------------------------------------------------------------

_op = st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 6), st.integers(0, 40)),
    st.tuples(st.just("end"), st.integers(-1, 40), st.just(0)),
    st.tuples(st.just("start"), st.integers(-1, 40), st.just(0)),
)


def _model_end_offset_for(entries: list[tuple[int, int]], requested: int,
                          leo: int) -> tuple[int, int]:
    """OffsetsForLeaderEpoch by linear scan."""
    if requested == -1 or not entries or requested > entries[-1][0]:
        return -1, -1
    if requested == entries[-1][0]:
        return requested, leo
    below = [(e, o) for e, o in entries if e <= requested]
    above = [(e, o) for e, o in entries if e > requested]
    if not below:
        return requested, above[0][1]
    return below[-1][0], above[0][1]


@given(st.lists(_op, max_size=40), st.integers(-1, 8), st.integers(0, 60))
def test_random_histories_keep_the_cache_monotonic_and_answers_match_a_model(
        ops: list[tuple[str, int, int]], requested: int, leo_extra: int) -> None:
    cache = LeaderEpochCache()
    model: list[tuple[int, int]] = []
    for kind, a, b in ops:
        if kind == "assign":
            epoch, offset = a, b
            if model and (epoch < model[-1][0] or offset < model[-1][1]):
                with pytest.raises(ValueError):
                    cache.assign(epoch, offset)
                continue
            cache.assign(epoch, offset)
            if not model or epoch != model[-1][0]:
                if model and offset == model[-1][1]:
                    model.pop()
                model.append((epoch, offset))
        elif kind == "end":
            cache.truncate_from_end(a)
            if a >= 0:
                model = [(e, o) for e, o in model if o < a]
        else:
            cache.truncate_from_start(a)
            dropped = [(e, o) for e, o in model if o <= a]
            model = [(e, o) for e, o in model if o > a]
            if dropped:
                model.insert(0, (dropped[-1][0], a))
        got = pairs(cache)
        assert got == model
        assert all(x[0] < y[0] and x[1] < y[1] for x, y in pairwise(got))
    leo = (model[-1][1] if model else 0) + leo_extra
    assert cache.end_offset_for(requested, leo) == _model_end_offset_for(model, requested, leo)
    assert LeaderEpochCache.decode(cache.encode()) == cache


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=12),
       st.integers(0, 14))
def test_end_offset_for_matches_the_epochs_stamped_on_a_log(
        appends: list[tuple[int, int]], requested: int) -> None:
    """Build a log of batches, each stamped with a non-decreasing epoch, assigning the
    cache as a leader does; the cache's answer is where the log's records of epochs
    <= requested stop."""
    log: list[int] = []
    cache = LeaderEpochCache()
    epoch = 0
    for step, count in appends:
        epoch += step
        cache.assign(epoch, len(log))
        log += [epoch] * count
    got_epoch, got_end = cache.end_offset_for(requested, len(log))
    if requested > log[-1]:
        assert (got_epoch, got_end) == (-1, -1)
    elif requested < log[0]:
        assert (got_epoch, got_end) == (requested, 0)
    else:
        assert got_epoch == max(e for e in log if e <= requested)
        assert got_end == next((i for i, e in enumerate(log) if e > requested), len(log))
