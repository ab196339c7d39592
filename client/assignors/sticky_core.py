"""The algorithm behind sticky and cooperative-sticky (Kafka's AbstractStickyAssignor).

Balanced first, then sticky: a member keeps as many of its validly owned partitions as
balance allows. Equal subscriptions use the "constrained" algorithm of docs/design/kafka.md §16 step
by step; unequal ones a general one judged by its properties: complete, only subscribed
topics, and no partition movable from a member with at least two more partitions to a
member subscribed to its topic. Kafka's general algorithm is a heuristic with no stated
optimum; ours computes one (see :func:`_general`) so that cooperative rebalances provably
settle in two rounds.

Cost: the constrained path is O(partitions + members). The general path places partitions
in O(partitions x consumers per topic), then runs Bellman-Ford over the members (about
O(members^2 x topics) per improvement); the greedy placement leaves few improvements
(100 members, 50 topics of 20 partitions: about 0.3 s).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from groupwire.client.assignors.base import (
    Assignment,
    Subscription,
    empty_assignment,
    sorted_partitions,
)
from groupwire.client.assignors.ownership import Claim, Ownership, resolve_ownership
from groupwire.client.types import TopicPartition

__all__ = ["StickyResult", "sticky_assign"]

StickyResult = tuple[Assignment, Ownership]


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    claims: Mapping[str, Claim],
) -> StickyResult:
    """Balanced, sticky assignment plus the ownership it started from (cooperative callers
    use the latter to withhold partitions whose old owner still holds them)."""
    ownership = resolve_ownership(claims, partitions_per_topic)
    members = sorted(subscriptions)
    if not members:
        return {}, ownership
    topics = {
        m: frozenset(t for t in subscriptions[m].topics if t in partitions_per_topic)
        for m in members
    }
    owned: dict[str, list[TopicPartition]] = {}
    for m in members:
        claim = claims.get(m)
        valid = ownership.owned_by(m, claim) if claim is not None else []
        # Sorted: the result must not depend on the order a member lists its claims in.
        owned[m] = sorted(tp for tp in valid if tp.topic in topics[m])
    if len(set(topics.values())) == 1:
        all_partitions = sorted_partitions(topics[members[0]], partitions_per_topic)
        assignment = _constrained(members, all_partitions, owned)
    else:
        assignment = _general(members, topics, partitions_per_topic, owned)
    for partitions in assignment.values():
        partitions.sort()
    return assignment, ownership


def _constrained(
    members: list[str],
    all_partitions: list[TopicPartition],
    owned: Mapping[str, list[TopicPartition]],
) -> Assignment:
    """Reference §16 "constrained" algorithm; ``members`` sorted by member id."""
    min_quota, over = divmod(len(all_partitions), len(members))
    max_quota = min_quota + (1 if over else 0)
    at_max = 0
    assignment = empty_assignment(members)
    taken: set[TopicPartition] = set()
    under_filled: list[str] = []
    may_take_one: deque[str] = deque()

    # 1. Keep owned partitions up to each member's quota, release the rest.
    for m in members:
        mine = sorted(owned[m], key=lambda tp: (tp.partition, tp.topic))
        if len(mine) < min_quota:
            keep = mine
            under_filled.append(m)
        elif len(mine) >= max_quota and at_max < over:
            keep = mine[:max_quota]
            at_max += 1
            if at_max == over:
                may_take_one.clear()
        else:
            keep = mine[:min_quota]
            if at_max < over:
                may_take_one.append(m)
        assignment[m].extend(keep)
        taken.update(keep)

    # 2. Fill the under-filled round robin up to min, then hand out the remaining max slots.
    i = 0
    for tp in all_partitions:
        if tp in taken:
            continue
        if under_filled:
            if i >= len(under_filled):
                i = 0
            m = under_filled[i]
            assignment[m].append(tp)
            if len(assignment[m]) == min_quota:
                under_filled.pop(i)
                may_take_one.append(m)
            else:
                i += 1
        else:
            # The quotas add up to the partition count, so a slot is always left here.
            assignment[may_take_one.popleft()].append(tp)
    return assignment


def _general(
    members: list[str],
    topics: Mapping[str, frozenset[str]],
    partitions_per_topic: Mapping[str, int],
    owned: Mapping[str, list[TopicPartition]],
) -> Assignment:
    """Unequal subscriptions: keep valid owned partitions, place the rest on the least-loaded
    eligible member (topics with fewest consumers first), then improve until no exchange
    lowers the sum of squared loads or, at equal sum, keeps more partitions with their
    owners.

    That optimum is balanced in §16's sense (a single move from a member with two more
    would lower the sum), and it is what makes cooperative rebalances finish in two rounds:
    round 1's result is optimal and contains everything the members still own in round 2,
    so round 2 finds an optimum that moves nothing from an owner and withholds nothing.
    """
    state = _Loads(members, topics, owned)
    for topic in sorted(state.consumers, key=lambda t: (len(state.consumers[t]), t)):
        for p in range(partitions_per_topic[topic]):
            tp = TopicPartition(topic, p)
            if tp not in state.owner:
                state.give(tp, state.lightest(topic))
    while True:
        edges = state.edges()
        if not (state.cancel_cycle(edges) or state.improve_path(edges)):
            break
    return state.assignment()


Hop = tuple[str, str, str]
"""(giver, taker, topic): one partition of ``topic`` moves from giver to taker."""

_Edges = dict[str, list[tuple[str, int, str]]]
"""u -> [(v, cost, topic)]: u can pass v a partition of topic at that stickiness cost."""

_KEEP = 1
"""Cost of taking a partition away from its owner (giving one back earns it)."""


class _Loads:
    """Holdings during the general algorithm, as a min-cost flow: members are nodes, an
    edge u -> v exists when u holds a partition of a topic v subscribes to, and costs what
    the move does to stickiness (-1, 0 or +1). Improvements are paths from a member to one
    holding two fewer (any cost), or one fewer at negative cost, and negative cycles."""

    def __init__(
        self,
        members: list[str],
        topics: Mapping[str, frozenset[str]],
        owned: Mapping[str, list[TopicPartition]],
    ) -> None:
        self.members = members
        self.consumers: dict[str, list[str]] = {}
        for m in members:
            for topic in sorted(topics[m]):
                self.consumers.setdefault(topic, []).append(m)
        self.owner = {tp: m for m in members for tp in owned[m]}
        # member -> topic -> owner (None: nobody) -> partitions held
        self.held: dict[str, dict[str, dict[str | None, list[TopicPartition]]]] = {
            m: {} for m in members
        }
        self.load = dict.fromkeys(members, 0)
        for m in members:
            for tp in owned[m]:
                self.give(tp, m)

    def lightest(self, topic: str) -> str:
        return min(self.consumers[topic], key=lambda c: (self.load[c], c))

    def give(self, tp: TopicPartition, member: str) -> None:
        self.held[member].setdefault(tp.topic, {}).setdefault(self.owner.get(tp), []).append(tp)
        self.load[member] += 1

    def assignment(self) -> Assignment:
        return {
            m: [tp for by_owner in self.held[m].values() for tps in by_owner.values() for tp in tps]
            for m in self.members
        }

    # --- the exchange graph ----------------------------------------------------------

    def edges(self) -> _Edges:
        """u -> [(v, cost, topic)], the cheapest topic for each pair."""
        out: dict[str, list[tuple[str, int, str]]] = {}
        for u in self.members:
            best: dict[str, tuple[int, str]] = {}
            for topic, by_owner in self.held[u].items():
                present = {o for o, tps in by_owner.items() if tps}
                if not present:
                    continue
                # Moving a partition nobody (or someone else) owns is free; u's own costs.
                base = 0 if present - {u} else _KEEP
                for v in self.consumers[topic]:
                    if v == u:
                        continue
                    cost = -_KEEP if v in present else base
                    if v not in best or cost < best[v][0]:
                        best[v] = (cost, topic)
            out[u] = [(v, cost, topic) for v, (cost, topic) in best.items()]
        return out

    def _move(self, giver: str, taker: str, topic: str) -> None:
        by_owner = self.held[giver][topic]
        # The partition that gives the edge its cost: one the taker owns, else one the
        # giver does not own, else one of the giver's own.
        others = [o for o, tps in by_owner.items() if tps and o != giver]
        if by_owner.get(taker):
            source = by_owner[taker]
        elif others:
            source = by_owner[min(others, key=lambda o: (o is not None, o or ""))]
        else:
            source = by_owner[giver]
        tp = source.pop()
        self.load[giver] -= 1
        self.give(tp, taker)

    def _apply(self, hops: list[Hop]) -> None:
        for giver, taker, topic in hops:
            self._move(giver, taker, topic)

    # --- improvements ----------------------------------------------------------------

    def cancel_cycle(self, edges: _Edges) -> bool:
        """Find and apply one negative-cost cycle (more partitions back with their owners
        at the same loads). Bellman-Ford from a virtual source."""
        dist = dict.fromkeys(self.members, 0)
        parent: dict[str, Hop] = {}
        last: str | None = None
        for _ in range(len(self.members)):
            last = None
            for u in self.members:
                for v, cost, topic in edges[u]:
                    if dist[u] + cost < dist[v]:
                        dist[v] = dist[u] + cost
                        parent[v] = (u, v, topic)
                        last = v
            if last is None:
                return False
        assert last is not None
        node = last
        for _ in range(len(self.members)):
            node = parent[node][0]
        cycle: list[Hop] = []
        start = node
        while True:
            hop = parent[node]
            cycle.append(hop)
            node = hop[0]
            if node == start:
                break
        cycle.reverse()
        self._apply(cycle)
        return True

    def improve_path(self, edges: _Edges) -> bool:
        """Apply one path that lowers the sum of squared loads, or keeps it and costs less.
        Assumes no negative cycle (shortest paths are then simple)."""
        for source in sorted(self.members, key=lambda m: (-self.load[m], m)):
            dist, parent = self._shortest_from(source, edges)
            top = self.load[source]
            better = [
                t
                for t in dist
                if t != source
                and (self.load[t] <= top - 2 or (self.load[t] == top - 1 and dist[t] < 0))
            ]
            if better:
                target = min(better, key=lambda t: (self.load[t], dist[t], t))
                path: list[Hop] = []
                node = target
                while node != source:
                    hop = parent[node]
                    path.append(hop)
                    node = hop[0]
                path.reverse()
                self._apply(path)
                return True
        return False

    def _shortest_from(self, source: str, edges: _Edges) -> tuple[dict[str, int], dict[str, Hop]]:
        dist = {source: 0}
        parent: dict[str, Hop] = {}
        queue = deque([source])
        queued = {source}
        while queue:
            u = queue.popleft()
            queued.discard(u)
            for v, cost, topic in edges[u]:
                if v not in dist or dist[u] + cost < dist[v]:
                    dist[v] = dist[u] + cost
                    parent[v] = (u, v, topic)
                    if v not in queued:
                        queued.add(v)
                        queue.append(v)
        return dist, parent
