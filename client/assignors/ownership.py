"""Who validly owns what before a sticky rebalance (docs/design/kafka.md §16, "Ownership
resolution").

Members report what they own and in which generation. Claims on partitions that no longer
exist are dropped; a partition claimed by several members goes to the single claimer of
the highest generation, and to nobody when two or more share that generation (a
"multiply-owned" partition: someone's view is wrong, so neither view is trusted).
Resolution is per partition and independent of the order members are listed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from groupwire.client.assignors.base import partition_exists
from groupwire.client.types import TopicPartition

__all__ = ["Claim", "Ownership", "resolve_ownership"]


@dataclass(frozen=True, slots=True)
class Claim:
    """What one member says it owns, and the generation it got it in."""

    partitions: Sequence[TopicPartition]
    generation: int


@dataclass(slots=True)
class Ownership:
    """The resolved view: ``owner`` for partitions with one valid claimer, ``contested`` for
    multiply-owned ones, ``claimed`` for every existing partition anyone reported."""

    owner: dict[TopicPartition, str] = field(default_factory=dict)
    contested: set[TopicPartition] = field(default_factory=set)
    claimed: set[TopicPartition] = field(default_factory=set)

    def owned_by(self, member: str, claim: Claim) -> list[TopicPartition]:
        """The partitions of ``claim`` that ``member`` validly owns, in claim order."""
        seen: set[TopicPartition] = set()
        out: list[TopicPartition] = []
        for tp in claim.partitions:
            if tp not in seen and self.owner.get(tp) == member:
                seen.add(tp)
                out.append(tp)
        return out

    def must_wait(self, tp: TopicPartition, member: str) -> bool:
        """Cooperative rule: ``member`` may take ``tp`` this round only if nobody else may
        still hold it, that is, nobody claims it or ``member`` is its valid owner."""
        return tp in self.claimed and self.owner.get(tp) != member


def resolve_ownership(
    claims: Mapping[str, Claim], partitions_per_topic: Mapping[str, int]
) -> Ownership:
    best: dict[TopicPartition, tuple[int, str]] = {}
    result = Ownership()
    for member, claim in claims.items():
        for tp in _distinct(claim.partitions):
            if not partition_exists(tp, partitions_per_topic):
                continue
            result.claimed.add(tp)
            current = best.get(tp)
            if current is None or claim.generation > current[0]:
                best[tp] = (claim.generation, member)
                result.contested.discard(tp)
            elif claim.generation == current[0]:
                result.contested.add(tp)
    result.owner = {tp: m for tp, (_, m) in best.items() if tp not in result.contested}
    return result


def _distinct(partitions: Iterable[TopicPartition]) -> Iterable[TopicPartition]:
    """A member listing a partition twice is one claim, not a conflict with itself."""
    return dict.fromkeys(TopicPartition(tp[0], tp[1]) for tp in partitions)
