"""Hypothesis properties of all four assignors over random topics, partition counts,
members, subscriptions and prior ownership (docs/design/kafka.md §16)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwire.client.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
)
from groupwire.client.assignors.sticky import encode_sticky_user_data
from groupwire.client.types import TopicPartition

from .assignor_checks import (
    assigned,
    check_balanced,
    check_complete,
    check_cooperative_safe,
    check_valid,
    equal_subscriptions,
    valid_owned,
    wanted,
)

ALL = (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor())
STICKY = (StickyAssignor(), CooperativeStickyAssignor())
PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Scenario:
    ppt: dict[str, int]
    subs: dict[str, Subscription]


@st.composite
def scenarios(draw: st.DrawFn, equal: bool | None = None, owned: bool = True) -> Scenario:
    topics = [f"t{i}" for i in range(draw(st.integers(1, 4)))]
    counts = {t: draw(st.integers(0, 9)) for t in topics}
    without_metadata = draw(st.sets(st.sampled_from(topics), max_size=1))
    ppt = {t: c for t, c in counts.items() if t not in without_metadata}
    members = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    if equal is None:
        equal = draw(st.booleans())
    common = draw(st.sets(st.sampled_from(topics), min_size=1))
    topics_of = {
        m: sorted(common if equal else draw(st.sets(st.sampled_from(topics)))) for m in members
    }
    claims: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if owned:
        # Claims may cover topics without metadata and partitions past the count, and may
        # collide: one partition claimed by two members (or listed twice by one).
        claimable = [TopicPartition(t, p) for t, c in counts.items() for p in range(c + 1)]
        n = len(claimable)
        for m_index, p_index in draw(
            st.lists(st.tuples(st.integers(0, len(members) - 1), st.integers(0, n)), max_size=3 * n)
        ):
            if p_index < n:
                claims[members[m_index]].append(claimable[p_index])
    subs = {}
    for m in members:
        subs[m] = Subscription(
            topics_of[m],
            owned_partitions=claims[m],
            generation=draw(st.integers(-1, 3)),
            group_instance_id=draw(st.one_of(st.none(), st.sampled_from(["i0", "i1", "i2"]))),
        )
    return Scenario(ppt, subs)


def as_eager_sticky(subs: dict[str, Subscription]) -> dict[str, Subscription]:
    """The same history carried the eager way: in user data, nothing in owned_partitions."""
    return {
        m: Subscription(
            s.topics,
            user_data=encode_sticky_user_data(s.owned_partitions, s.generation),
            group_instance_id=s.group_instance_id,
        )
        for m, s in subs.items()
    }


@PROPS
@given(scenarios())
def test_every_assignor_gives_valid_output(sc: Scenario) -> None:
    for assignor in ALL:
        check_valid(sc.ppt, sc.subs, assignor.assign(sc.ppt, sc.subs))


@PROPS
@given(scenarios())
def test_eager_assignors_are_complete(sc: Scenario) -> None:
    eager: tuple[PartitionAssignor, ...] = (RangeAssignor(), RoundRobinAssignor(), StickyAssignor())
    for assignor in eager:
        check_complete(sc.ppt, sc.subs, assignor.assign(sc.ppt, sc.subs))


@PROPS
@given(scenarios(), st.randoms(use_true_random=False))
def test_output_does_not_depend_on_member_listing_order(sc: Scenario, rnd: random.Random) -> None:
    items = list(sc.subs.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    for assignor in ALL:
        assert assignor.assign(sc.ppt, shuffled) == assignor.assign(sc.ppt, sc.subs)


@PROPS
@given(scenarios(equal=True, owned=False))
def test_roundrobin_balanced_with_equal_subscriptions(sc: Scenario) -> None:
    check_balanced(sc.ppt, sc.subs, RoundRobinAssignor().assign(sc.ppt, sc.subs))


@PROPS
@given(scenarios(owned=False))
def test_range_splits_each_topic_evenly_among_its_subscribers(sc: Scenario) -> None:
    result = RangeAssignor().assign(sc.ppt, sc.subs)
    for topic, count in sc.ppt.items():
        subscribers = [m for m, s in sc.subs.items() if topic in s.topics]
        if not subscribers:
            continue
        per = [sum(1 for p in result[m] if p.topic == topic) for m in subscribers]
        assert sum(per) == count
        assert max(per) - min(per) <= 1


@PROPS
@given(scenarios())
def test_sticky_is_complete_and_balanced(sc: Scenario) -> None:
    result = StickyAssignor().assign(sc.ppt, sc.subs)
    check_complete(sc.ppt, sc.subs, result)
    check_balanced(sc.ppt, sc.subs, result)
    assert StickyAssignor().assign(sc.ppt, as_eager_sticky(sc.subs)) == result


@PROPS
@given(scenarios(equal=True))
def test_sticky_members_keep_min_of_owned_and_target(sc: Scenario) -> None:
    total = len(wanted(sc.ppt, sc.subs))
    target = total // len(sc.subs)
    for assignor in STICKY:
        result = assignor.assign(sc.ppt, sc.subs)
        for m in sc.subs:
            valid = valid_owned(sc.ppt, sc.subs, m)
            assert len(valid & set(result[m])) >= min(len(valid), target), m


@PROPS
@given(scenarios(owned=False), st.integers(0, 5))
def test_sticky_keeps_an_assignment_that_is_already_balanced(sc: Scenario, gen: int) -> None:
    first = StickyAssignor().assign(sc.ppt, sc.subs)
    again = {
        m: Subscription(s.topics, owned_partitions=first[m], generation=gen)
        for m, s in sc.subs.items()
    }
    for assignor in STICKY:
        assert assignor.assign(sc.ppt, again) == first


@PROPS
@given(scenarios())
def test_cooperative_never_hands_over_a_partition_still_held(sc: Scenario) -> None:
    ppt, subs = sc.ppt, sc.subs
    round1 = CooperativeStickyAssignor().assign(ppt, subs)
    check_cooperative_safe(subs, round1)
    # What is missing was withheld because someone claims it, never silently dropped.
    claimed = {p for s in subs.values() for p in s.owned_partitions}
    assert wanted(ppt, subs) - assigned(round1) <= claimed


@PROPS
@given(scenarios())
def test_cooperative_converges_in_two_rounds(sc: Scenario) -> None:
    ppt, subs = sc.ppt, sc.subs
    coop = CooperativeStickyAssignor()
    round1 = coop.assign(ppt, subs)
    generation = max(s.generation for s in subs.values()) + 1
    fed_back = {
        m: Subscription(s.topics, owned_partitions=round1[m], generation=generation)
        for m, s in subs.items()
    }
    round2 = coop.assign(ppt, fed_back)
    check_complete(ppt, fed_back, round2)
    check_balanced(ppt, fed_back, round2)
    for m in subs:
        assert set(round1[m]) <= set(round2[m]), "round 2 revoked something: a third round"
    if equal_subscriptions(ppt, subs):
        counts = [len(ps) for ps in round2.values()]
        assert max(counts) - min(counts) <= 1
