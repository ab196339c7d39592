"""What every assignor takes and returns (docs/design/kafka.md §16), and the ordering range and
round-robin share.

Assignors are plain functions of (partition counts, subscriptions): the group leader runs
one after JoinGroup and sends the result in its SyncGroup. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, runtime_checkable

from groupwire.client.types import TopicPartition

__all__ = [
    "COOPERATIVE",
    "EAGER",
    "NO_GENERATION",
    "Assignment",
    "PartitionAssignor",
    "RebalanceProtocol",
    "Subscription",
    "empty_assignment",
    "member_order",
    "partition_exists",
    "sorted_partitions",
]

RebalanceProtocol = Literal["eager", "cooperative"]
EAGER: Final = "eager"
COOPERATIVE: Final = "cooperative"

NO_GENERATION: Final = -1
"""Kafka's DEFAULT_GENERATION: a member that reports none counts as generation -1."""

Assignment = dict[str, list[TopicPartition]]
"""member id -> the partitions it is given; every member of the input appears."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's JoinGroup metadata as the leader's assignor sees it.

    ``owned_partitions`` and ``generation`` are what a cooperative member reports it holds
    now; eager members revoke everything before joining, so theirs are empty and the eager
    StickyAssignor carries its previous assignment in ``user_data`` instead.
    """

    topics: Collection[str]
    owned_partitions: Sequence[TopicPartition] = ()
    generation: int = NO_GENERATION
    user_data: bytes | None = None
    group_instance_id: str | None = None


@runtime_checkable
class PartitionAssignor(Protocol):
    """The shape a consumer needs: a protocol name to vote for and an assign function.

    Optional extras, read with ``getattr`` by :mod:`client.assignors.registry`:
    ``supported_protocols`` (default ``("eager",)``) and
    ``metadata_user_data(assigned, generation) -> bytes | None`` (default: no user data).
    """

    @property
    def name(self) -> str: ...

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
    ) -> Assignment: ...


def empty_assignment(subscriptions: Iterable[str]) -> Assignment:
    """Every member present with nothing, so members the algorithm skips still get a reply."""
    return {member: [] for member in subscriptions}


def member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Kafka's MemberInfo order: static members by instance id, then dynamic by member id.

    Plain string order (``"m10" < "m2"``), so static members keep their partitions across
    restarts even though their member ids change.
    """

    def key(member: str) -> tuple[int, str, str]:
        instance = subscriptions[member].group_instance_id
        if instance is None:
            return (1, member, "")
        return (0, instance, member)

    return sorted(subscriptions, key=key)


def partition_exists(tp: TopicPartition, partitions_per_topic: Mapping[str, int]) -> bool:
    """True when the topic has metadata and the partition number is within its count."""
    count = partitions_per_topic.get(tp.topic)
    return count is not None and 0 <= tp.partition < count


def sorted_partitions(
    topics: Iterable[str], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    """Every partition of the given topics that have metadata, by (topic, partition)."""
    return [
        TopicPartition(topic, p)
        for topic in sorted(set(topics))
        if topic in partitions_per_topic
        for p in range(partitions_per_topic[topic])
    ]
