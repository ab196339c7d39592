"""Sticky and cooperative-sticky on hand-worked cases (docs/design/kafka.md §16, Kafka's
javadoc)."""

from __future__ import annotations

from groupwire.client.assignors import CooperativeStickyAssignor, StickyAssignor, Subscription
from groupwire.client.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data
from groupwire.client.types import TopicPartition

from .assignor_checks import (
    check_balanced,
    check_complete,
    check_cooperative_safe,
    check_valid,
    tp,
    tps,
)

S = Subscription
FOUR_BY_TWO = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
ALL4 = ["t0", "t1", "t2", "t3"]


def eager(owned: list[TopicPartition], generation: int, topics: list[str]) -> Subscription:
    """An eager sticky member: nothing owned in the subscription, history in user data."""
    return S(topics, user_data=encode_sticky_user_data(owned, generation))


def test_fresh_assignment_is_round_robin_over_sorted_partitions() -> None:
    subs = {m: S(ALL4) for m in ("C2", "C0", "C1")}
    result = StickyAssignor().assign(FOUR_BY_TWO, subs)
    assert result == {
        "C0": [tp("t0", 0), tp("t1", 1), tp("t3", 0)],
        "C1": [tp("t0", 1), tp("t2", 0), tp("t3", 1)],
        "C2": [tp("t1", 0), tp("t2", 1)],
    }


def test_javadoc_member_leaves_survivors_keep_everything_they_had() -> None:
    c0 = [tp("t0", 0), tp("t1", 1), tp("t3", 0)]
    c2 = [tp("t1", 0), tp("t2", 1)]
    subs = {"C0": eager(c0, 1, ALL4), "C2": eager(c2, 1, ALL4)}
    result = StickyAssignor().assign(FOUR_BY_TWO, subs)
    # Both are under min (4): they keep all; C1's partitions t0-1, t2-0, t3-1 go round
    # robin to the under-filled members in id order, C0 reaching 4 after the first.
    assert result == {
        "C0": sorted([*c0, tp("t0", 1)]),
        "C2": sorted([*c2, tp("t2", 0), tp("t3", 1)]),
    }


def test_javadoc_unequal_subscriptions_and_then_a_member_leaves() -> None:
    ppt = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": S(["t0"]), "C1": S(["t0", "t1"]), "C2": S(["t0", "t1", "t2"])}
    first = StickyAssignor().assign(ppt, subs)
    assert first == {"C0": tps("t0", 0), "C1": tps("t1", 0, 1), "C2": tps("t2", 0, 1, 2)}
    later = {m: eager(first[m], 1, list(subs[m].topics)) for m in ("C1", "C2")}
    second = StickyAssignor().assign(ppt, later)
    assert second == {"C1": tps("t0", 0) + tps("t1", 0, 1), "C2": tps("t2", 0, 1, 2)}


def test_new_member_takes_only_the_excess_of_the_old_one() -> None:
    subs = {"a": eager(tps("t", *range(6)), 3, ["t"]), "b": S(["t"])}
    result = StickyAssignor().assign({"t": 6}, subs)
    assert result == {"a": tps("t", 0, 1, 2), "b": tps("t", 3, 4, 5)}


def test_member_over_max_keeps_max_while_max_slots_remain() -> None:
    # 7 partitions, 3 members: min 2, max 3, one member may hold 3.
    subs = {
        "a": eager(tps("t", 0, 1, 2, 3), 2, ["t"]),
        "b": eager(tps("t", 4, 5, 6), 2, ["t"]),
        "c": S(["t"]),
    }
    result = StickyAssignor().assign({"t": 7}, subs)
    assert result["a"] == tps("t", 0, 1, 2)
    assert result["b"] == tps("t", 4, 5)
    assert result["c"] == tps("t", 3, 6)


def test_higher_generation_wins_a_double_claim() -> None:
    subs = {"old": eager(tps("t", 0, 1), 1, ["t"]), "new": eager(tps("t", 0), 2, ["t"])}
    result = StickyAssignor().assign({"t": 2}, subs)
    assert result == {"new": tps("t", 0), "old": tps("t", 1)}


def test_cooperative_same_generation_double_claim_is_withheld_from_both() -> None:
    subs = {
        "a": S(["t"], owned_partitions=tps("t", 0, 1), generation=4),
        "b": S(["t"], owned_partitions=tps("t", 1, 2), generation=4),
        "c": S(["t"], owned_partitions=[], generation=4),
    }
    result = CooperativeStickyAssignor().assign({"t": 3}, subs)
    assert result == {"a": tps("t", 0), "b": tps("t", 2), "c": []}


def test_cooperative_moves_take_two_rounds_and_others_keep_consuming() -> None:
    ppt = {"t": 6}
    coop = CooperativeStickyAssignor()
    owned = {"a": tps("t", 0, 2, 4), "b": tps("t", 1, 3, 5)}
    subs = {m: S(["t"], owned_partitions=ps, generation=1) for m, ps in owned.items()}
    subs["c"] = S(["t"])
    round1 = coop.assign(ppt, subs)
    # a and b keep min (2) each, sorted by partition; their third is released and withheld.
    assert round1 == {"a": tps("t", 0, 2), "b": tps("t", 1, 3), "c": []}
    check_cooperative_safe(subs, round1)
    subs2 = {m: S(["t"], owned_partitions=round1[m], generation=2) for m in subs}
    round2 = coop.assign(ppt, subs2)
    assert round2 == {"a": tps("t", 0, 2), "b": tps("t", 1, 3), "c": tps("t", 4, 5)}


def test_cooperative_topic_dropped_by_its_owner_waits_one_round() -> None:
    ppt = {"x": 2, "y": 2}
    coop = CooperativeStickyAssignor()
    subs = {
        "a": S(["y"], owned_partitions=tps("x", 0, 1) + tps("y", 0), generation=3),
        "b": S(["x", "y"], owned_partitions=tps("y", 1), generation=3),
    }
    round1 = coop.assign(ppt, subs)
    check_valid(ppt, subs, round1)
    check_cooperative_safe(subs, round1)
    assert tps("x", 0, 1) == [p for p in tps("x", 0, 1) if p not in round1["b"]]
    subs2 = {m: S(subs[m].topics, owned_partitions=round1[m], generation=4) for m in subs}
    round2 = coop.assign(ppt, subs2)
    check_complete(ppt, subs2, round2)
    check_balanced(ppt, subs2, round2)


def test_stale_claims_on_deleted_topics_and_missing_partitions_are_ignored() -> None:
    subs = {
        "a": S(["t"], owned_partitions=[tp("t", 0), tp("t", 9), tp("gone", 0)], generation=1),
        "b": S(["t"], owned_partitions=[tp("t", 1)], generation=1),
    }
    for assignor in (StickyAssignor(), CooperativeStickyAssignor()):
        result = assignor.assign({"t": 2}, subs)
        assert result == {"a": tps("t", 0), "b": tps("t", 1)}


def test_eager_sticky_ignores_user_data_it_cannot_read() -> None:
    subs = {"a": S(["t"], user_data=b"\xc1garbage"), "b": S(["t"], user_data=b"\x93\x01\x02\x03")}
    result = StickyAssignor().assign({"t": 4}, subs)
    assert result == {"a": tps("t", 0, 2), "b": tps("t", 1, 3)}


def test_sticky_user_data_round_trips() -> None:
    owned = [tp("b", 2), tp("a", 0), tp("b", 0)]
    claim = decode_sticky_user_data(encode_sticky_user_data(owned, 7))
    assert claim is not None
    assert sorted(claim.partitions) == sorted(owned)
    assert claim.generation == 7
    assert decode_sticky_user_data(b"\x80") is None  # a map without our keys is not ours
    assert decode_sticky_user_data(b"\x91\x01") is None


def test_no_partitions_or_no_members() -> None:
    for assignor in (StickyAssignor(), CooperativeStickyAssignor()):
        assert assignor.assign({}, {"a": S(["t"]), "b": S(["t"])}) == {"a": [], "b": []}
        assert assignor.assign({"t": 0}, {"a": S(["t"])}) == {"a": []}
        assert assignor.assign({"t": 3}, {}) == {}


def test_cooperative_general_case_settles_in_two_rounds() -> None:
    # Found by hypothesis against an earlier greedy version: m0 reports a partition of a
    # topic it no longer subscribes to; round 2 must place it without moving anything else.
    ppt = {"t2": 4, "t3": 8}
    subs = {
        "m0": S(["t2"], owned_partitions=[tp("t3", 0)], generation=0),
        "m1": S(["t2", "t3"], generation=0),
        "m2": S(["t3"], generation=0),
    }
    coop = CooperativeStickyAssignor()
    round1 = coop.assign(ppt, subs)
    check_valid(ppt, subs, round1)
    check_cooperative_safe(subs, round1)
    assert tp("t3", 0) not in {p for ps in round1.values() for p in ps}
    subs2 = {m: S(s.topics, owned_partitions=round1[m], generation=1) for m, s in subs.items()}
    round2 = coop.assign(ppt, subs2)
    check_complete(ppt, subs2, round2)
    check_balanced(ppt, subs2, round2)
    assert all(set(round1[m]) <= set(round2[m]) for m in subs)
