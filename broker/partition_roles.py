"""Who leads a partition here, as the request handlers ask it.

Produce, Fetch, ListOffsets and OffsetsForLeaderEpoch are served by a partition's leader
only, in its current leader epoch. A single broker leads everything in epoch 0; in a
cluster the answer comes from the etcd image and what this broker has taken on
(``broker.clustering.leadership``). The handlers see only this interface, so they read
the same in both modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from groupwire.broker.cluster.epochs import SINGLE_BROKER_LEADER_EPOCH
from groupwire.protocol.errors import ErrorCode

NO_LEADER_EPOCH: Final = -1
"""A client that does not know the leader epoch sends -1: it is not checked (KIP-320)."""
SINGLE_BROKER_NODE_ID: Final = 0


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why this broker does not serve a partition's leader requests now."""

    code: ErrorCode
    message: str


class Leadership(Protocol):
    @property
    def node_id(self) -> int: ...

    def check(self, topic: str, partition: int,
              current_leader_epoch: int = NO_LEADER_EPOCH) -> Refusal | None:
        """None when this broker leads ``topic``-``partition`` now and the client's epoch
        (-1: unknown) is the leader's; else the partition's error, UNKNOWN_TOPIC_OR_PARTITION
        included (a cluster knows partitions this broker holds no replica of)."""
        ...

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The epoch this broker leads the partition in (its batches are stamped so)."""
        ...

    def acks_all(self, topic: str, partition: int) -> Refusal | None:
        """Whether an acks=all batch may be appended: the ISR has at least
        ``--min-insync-replicas`` (NOT_ENOUGH_REPLICAS otherwise, nothing appended)."""
        ...


def unknown_partition(topic: str, partition: int) -> Refusal:
    return Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                   f"unknown topic or partition {topic}-{partition}")


def epoch_refusal(topic: str, partition: int, current: int, leader: int) -> Refusal | None:
    """Kafka's check of a client's ``current_leader_epoch`` against the leader's."""
    if current in (NO_LEADER_EPOCH, leader):
        return None
    older = current < leader
    return Refusal(
        ErrorCode.FENCED_LEADER_EPOCH if older else ErrorCode.UNKNOWN_LEADER_EPOCH,
        f"current_leader_epoch {current} of {topic}-{partition} is "
        f"{'older' if older else 'newer'} than the leader's {leader}")


class SingleBroker:
    """Node 0, the leader of every partition it stores, in epoch 0."""

    def __init__(self, partitions: Callable[[str], int | None]) -> None:
        """``partitions``: a topic's partition count here (None: unknown topic)."""
        self._partitions = partitions

    @property
    def node_id(self) -> int:
        return SINGLE_BROKER_NODE_ID

    def check(self, topic: str, partition: int,
              current_leader_epoch: int = NO_LEADER_EPOCH) -> Refusal | None:
        count = self._partitions(topic)
        if count is None or not 0 <= partition < count:
            return unknown_partition(topic, partition)
        return epoch_refusal(topic, partition, current_leader_epoch,
                             SINGLE_BROKER_LEADER_EPOCH)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return SINGLE_BROKER_LEADER_EPOCH

    def acks_all(self, topic: str, partition: int) -> Refusal | None:
        return None
