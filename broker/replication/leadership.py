"""Who leads what on this broker in a cluster: the etcd image says who should, and a
partition counts as led here only once its log has taken the epoch on
(:class:`broker.replication.replicas.ReplicaManager`), and never while fenced."""

from __future__ import annotations

from collections.abc import Callable

from groupwire.broker.cluster.image import ClusterImage, TopicPartition
from groupwire.broker.cluster.keys import NO_LEADER
from groupwire.broker.leadership import (
    NO_LEADER_EPOCH,
    Refusal,
    epoch_refusal,
    unknown_partition,
)
from groupwire.protocol.errors import ErrorCode


class ClusterLeadership:
    def __init__(self, node_id: int, image: Callable[[], ClusterImage],
                 fenced: Callable[[], bool], *, min_insync_replicas: int = 1) -> None:
        self._node_id = node_id
        self._min_insync = min_insync_replicas
        self._image = image
        self._fenced = fenced
        self.led: dict[TopicPartition, int] = {}
        """Partitions whose log took leadership here, with the epoch it took."""

    @property
    def node_id(self) -> int:
        return self._node_id

    def check(self, topic: str, partition: int,
              current_leader_epoch: int = NO_LEADER_EPOCH) -> Refusal | None:
        if self._fenced():
            return Refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self._node_id} lost its etcd lease and leads nothing "
                           f"until it has registered again")
        image = self._image()
        state = image.partitions.get((topic, partition))
        if state is None:
            assignment = image.topics.get(topic)
            if assignment is not None and 0 <= partition < len(assignment.replicas):
                return Refusal(ErrorCode.LEADER_NOT_AVAILABLE,
                               f"{topic}-{partition} has no leader yet")
            return unknown_partition(topic, partition)
        if state.leader != self._node_id:
            who = "no broker" if state.leader == NO_LEADER else f"broker {state.leader}"
            return Refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self._node_id} does not lead {topic}-{partition}: "
                           f"{who} does, in epoch {state.leader_epoch}")
        if self.led.get((topic, partition)) != state.leader_epoch:
            return Refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {self._node_id} is taking over {topic}-{partition} "
                           f"(epoch {state.leader_epoch})")
        return epoch_refusal(topic, partition, current_leader_epoch, state.leader_epoch)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.led.get((topic, partition), NO_LEADER_EPOCH)

    def acks_all(self, topic: str, partition: int) -> Refusal | None:
        isr = self.isr(topic, partition)
        if len(isr) >= self._min_insync:
            return None
        return Refusal(ErrorCode.NOT_ENOUGH_REPLICAS,
                       f"{topic}-{partition} has {len(isr)} in-sync replicas "
                       f"({', '.join(map(str, isr))}); acks=all needs "
                       f"{self._min_insync} (--min-insync-replicas)")

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        """The committed ISR (what ``--min-insync-replicas`` is checked against)."""
        state = self._image().partitions.get((topic, partition))
        return () if state is None else state.isr
