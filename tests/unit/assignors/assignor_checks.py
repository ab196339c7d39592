"""Independent checks of assignor output, written from docs/design/kafka.md §16 rather than from the
implementation, shared by the hand-written and the property tests."""

from __future__ import annotations

from collections.abc import Mapping

from groupwire.client.assignors import Subscription
from groupwire.client.types import TopicPartition

Result = Mapping[str, list[TopicPartition]]


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def wanted(ppt: Mapping[str, int], subs: Mapping[str, Subscription]) -> set[TopicPartition]:
    """Every partition of a topic with metadata that at least one member subscribes to."""
    topics = {t for s in subs.values() for t in s.topics if t in ppt}
    return {TopicPartition(t, p) for t in topics for p in range(ppt[t])}


def check_valid(ppt: Mapping[str, int], subs: Mapping[str, Subscription], result: Result) -> None:
    """Every member present, only subscribed existing partitions, nothing given twice."""
    assert set(result) == set(subs)
    seen: set[TopicPartition] = set()
    for member, partitions in result.items():
        for p in partitions:
            assert p.topic in subs[member].topics, (member, p)
            assert p.topic in ppt and 0 <= p.partition < ppt[p.topic], p
            assert p not in seen, f"{p} assigned twice"
            seen.add(p)


def assigned(result: Result) -> set[TopicPartition]:
    return {p for partitions in result.values() for p in partitions}


def check_complete(
    ppt: Mapping[str, int], subs: Mapping[str, Subscription], result: Result
) -> None:
    assert assigned(result) == wanted(ppt, subs)


def equal_subscriptions(ppt: Mapping[str, int], subs: Mapping[str, Subscription]) -> bool:
    return len({frozenset(t for t in s.topics if t in ppt) for s in subs.values()}) <= 1


def check_balanced(
    ppt: Mapping[str, int], subs: Mapping[str, Subscription], result: Result
) -> None:
    """Equal subscriptions: counts differ by at most one. Always: no partition could move
    from a member to one subscribed to its topic holding two or more fewer."""
    counts = {m: len(ps) for m, ps in result.items()}
    if equal_subscriptions(ppt, subs) and counts:
        assert max(counts.values()) - min(counts.values()) <= 1, counts
    for heavy, partitions in result.items():
        for p in partitions:
            for light, sub in subs.items():
                if p.topic in sub.topics:
                    assert counts[heavy] - counts[light] < 2, (heavy, light, p, counts)


def valid_owner(subs: Mapping[str, Subscription], p: TopicPartition) -> str | None:
    """The single claimer of the highest generation, or None (unclaimed or contested)."""
    claimers = [(s.generation, m) for m, s in subs.items() if p in set(s.owned_partitions)]
    if not claimers:
        return None
    top = max(g for g, _ in claimers)
    best = [m for g, m in claimers if g == top]
    return best[0] if len(best) == 1 else None


def valid_owned(
    ppt: Mapping[str, int], subs: Mapping[str, Subscription], member: str
) -> set[TopicPartition]:
    """What ``member`` validly owns among the partitions it may keep."""
    return {
        p
        for p in set(subs[member].owned_partitions)
        if p.topic in subs[member].topics
        and p.topic in ppt
        and 0 <= p.partition < ppt[p.topic]
        and valid_owner(subs, p) == member
    }


def check_cooperative_safe(subs: Mapping[str, Subscription], result: Result) -> None:
    """Nobody gets a partition another member may still hold, unless it is the valid owner."""
    for member, partitions in result.items():
        for p in partitions:
            others = [m for m, s in subs.items() if m != member and p in set(s.owned_partitions)]
            if others:
                assert valid_owner(subs, p) == member, (member, p, others)
